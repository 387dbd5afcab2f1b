"""Bulk transfers between two stacks under impairments: every byte arrives, in order."""

from __future__ import annotations

import random

import pytest

from pair import make_pair, sha, transfer
from usertcp.net.memnet import LinkConfig
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import State
from usertcp.wire.segment import TxPacket

SIZE = 10 * 1024 * 1024
DATA = random.Random(42).randbytes(SIZE)

IMPAIRMENTS = {
    "clean": LinkConfig(delay=0.005, bandwidth_bps=200e6),
    "loss1": LinkConfig(delay=0.005, bandwidth_bps=200e6, loss=0.01),
    "loss5": LinkConfig(delay=0.005, bandwidth_bps=200e6, loss=0.05),
    "reorder": LinkConfig(delay=0.005, bandwidth_bps=200e6, reorder=0.05),
    "duplicate": LinkConfig(delay=0.005, bandwidth_bps=200e6, duplicate=0.05),
    "corrupt": LinkConfig(delay=0.005, bandwidth_bps=200e6, corrupt=0.02),
}
# Virtual-time bound per run: generous, but a stuck or pathological recovery fails it.
BOUND = {"clean": 10.0, "loss1": 60.0, "loss5": 200.0, "reorder": 30.0, "duplicate": 30.0, "corrupt": 60.0}


@pytest.mark.parametrize("direction", ["a_to_b", "b_to_a"])
@pytest.mark.parametrize("name", list(IMPAIRMENTS))
def test_10mb_transfer(name: str, direction: str) -> None:
    pair = make_pair(IMPAIRMENTS[name], seed=7)
    client, server = pair.open()
    sender, receiver = (client, server) if direction == "a_to_b" else (server, client)
    start = pair.now
    got = transfer(pair, sender, receiver, DATA, timeout=BOUND[name])
    assert len(got) == SIZE
    assert sha(got) == sha(DATA)
    assert pair.now - start < BOUND[name]
    stack = pair.a if direction == "a_to_b" else pair.b
    if name == "clean":
        # No impairment, but a finite queue: with the receiver's buffer auto-tuned (as Linux's,
        # tcp_rcv_space_adjust) the window outgrows it and CUBIC fills it until it drops: any
        # retransmission follows queue drops, none a loss the link made up.
        direction_stats = (pair.link.ab if direction == "a_to_b" else pair.link.ba).stats
        assert direction_stats.lost == direction_stats.corrupted == 0
        assert stack.counters["TcpRetransSegs"] == 0 or direction_stats.queue_drops > 0
    if name in ("loss1", "loss5"):
        assert stack.counters["TcpRetransSegs"] > 0
    if name == "corrupt":
        assert pair.a.counters["TcpInCsumErrors"] + pair.b.counters["TcpInCsumErrors"] > 0


@pytest.mark.parametrize("cc", ["reno", "cubic"])
@pytest.mark.parametrize("sack", [True, False])
def test_recovery_variants(cc: str, sack: bool) -> None:
    """NewReno without SACK (RFC 6582) and SACK recovery (RFC 6675), with either controller."""
    cfg = StackConfig(congestion_control=cc, sack=sack)
    pair = make_pair(LinkConfig(delay=0.01, bandwidth_bps=50e6, loss=0.02), seed=3, cfg_a=cfg, cfg_b=cfg)
    client, server = pair.open()
    assert client.sack_ok is sack
    data = DATA[: 2 * 1024 * 1024]
    got = transfer(pair, client, server, data, timeout=120)
    assert sha(got) == sha(data)
    key = "TcpExtTCPSackRecovery" if sack else "TcpExtTCPRenoRecovery"
    assert pair.a.counters[key] > 0


def test_both_directions_at_once_and_close() -> None:
    pair = make_pair(LinkConfig(delay=0.002, loss=0.01), seed=11)
    client, server = pair.open()
    up = DATA[:3_000_000]
    down = DATA[3_000_000:6_000_000]
    got_up = bytearray()
    got_down = bytearray()
    drv = pair.driver
    sent_up = sent_down = 0
    while len(got_up) < len(up) or len(got_down) < len(down):
        if sent_up < len(up):
            sent_up += client.send(up[sent_up:sent_up + 65536], drv.now())
        if sent_down < len(down):
            sent_down += server.send(down[sent_down:sent_down + 65536], drv.now())
        got_up += server.recv(1 << 20, drv.now())
        got_down += client.recv(1 << 20, drv.now())
        drv.kick()
        drv.run_for(0.01)
        assert drv.now() < 120
    assert bytes(got_up) == up and bytes(got_down) == down
    client.close(drv.now())
    server.close(drv.now())
    drv.kick()
    drv.run_for(1.0)
    # Both closed at once: a simultaneous close (RFC 9293 Figure 13), so both wait 2*MSL.
    assert server.state is State.TIME_WAIT
    assert client.state is State.TIME_WAIT
    drv.run_for(61.0)
    assert client.state is State.CLOSED
    assert not pair.a.connections and not pair.b.connections


def test_ipv6_transfer() -> None:
    pair = make_pair(LinkConfig(delay=0.003, loss=0.01), addresses=("fd00::1", "fd00::2"), seed=5)
    pair.listener = lst = pair.b.listen(443)
    client = pair.a.create_connection("fd00::2", 443)
    pair.a.connect(client, 0.0)
    pair.driver.kick()
    assert pair.driver.run_until(lambda: bool(lst.accept_queue), 10)
    server = lst.accept()
    assert server is not None
    assert client.mss == 1500 - 60 - 12
    data = DATA[:1_000_000]
    assert sha(transfer(pair, client, server, data)) == sha(data)


def test_tso_super_segments() -> None:
    """With gso_max_size the sender emits multi-MSS segments marked for segmentation by the link."""
    pair = make_pair(LinkConfig(delay=0.002, loss=0.01), seed=13)
    pair.a.gso_max_size = 65000
    sizes: list[int] = []
    gso: list[int] = []

    def spy(pkt: TxPacket) -> bool:
        sizes.append(len(pkt))
        gso.append(pkt.gso_size)
        return False                 # refuses nothing: the hook only sees every packet sent

    # Stack.output() offers each packet to tx_refuse (free here: no backpressure on this link);
    # a spy there is injected, where replacing Stack.output would monkeypatch the core.
    assert pair.a.tx_refuse is None
    pair.a.tx_refuse = spy
    client, server = pair.open()
    data = DATA[:3_000_000]
    assert sha(transfer(pair, client, server, data)) == sha(data)
    assert max(sizes) > 10 * client.mss
    assert all(g in (0, client.mss) for g in gso)
    assert any(g == client.mss for g in gso)
    assert pair.a.counters["TcpRetransSegs"] > 0   # loss recovery works on super-segments too
