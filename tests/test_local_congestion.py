"""Packets the local queue refuses (``Stack.tx_refuse``; Linux: a qdisc answering NET_XMIT_DROP).

Linux's TCP learns of such a drop synchronously (tcp_transmit_skb returns > 0): the segment stays
unsent, and the timers retry every TCP_RESOURCE_PROBE_INTERVAL (500 ms) without backing off
(tcp_send_probe0, tcp_retransmit_timer, tcp_keepalive_timer); TCP_USER_TIMEOUT counts from the
first probe (icsk_probes_tstamp).
"""

from __future__ import annotations

import errno
from itertools import pairwise

import pytest

from pair import make_pair, transfer
from peer import LOCAL_IP, REMOTE_IP, ScriptedPeer
from usertcp.drill.profile import Environment, linux_config
from usertcp.net.memnet import LinkConfig
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import Connection, State
from usertcp.tcp.stack import Stack
from usertcp.wire.segment import TxPacket


class Queue:
    """A local queue that refuses everything while ``full``; records every refused attempt."""

    def __init__(self, peer: ScriptedPeer) -> None:
        self.peer = peer
        self.full = True
        self.refused: list[float] = []
        peer.stack.tx_refuse = self

    def __call__(self, pkt: TxPacket) -> bool:
        if self.full:
            self.refused.append(round(self.peer.now, 6))
        return self.full


def _open() -> tuple[ScriptedPeer, Connection]:
    peer = ScriptedPeer(StackConfig())
    conn = peer.passive_open()
    peer.expect_nothing()
    return peer, conn


def _gaps(times: list[float]) -> list[float]:
    return [round(b - a, 6) for a, b in pairwise(times)]


def test_refused_data_is_kept_and_probed_every_500ms_without_backoff() -> None:
    peer, conn = _open()
    queue = Queue(peer)
    rto = conn.rtt.timeout
    assert conn.send(b"x" * 100, peer.now) == 100
    peer.expect_nothing()
    # tcp_write_xmit stopped at the refused skb: nothing in flight, the data is still unsent.
    assert conn.snd_nxt == conn.snd_una == 1 and conn.unsent_bytes == 100 and not conn.recovery.rtx
    peer.advance(rto + 4 * 0.5 + 0.01)
    # The write, the probe timer one RTO later (tcp_check_probe_timer), then every 500 ms.
    assert queue.refused[0] == 0.0
    assert _gaps(queue.refused) == [round(rto, 6), 0.5, 0.5, 0.5, 0.5]
    info = conn.info()
    assert info["tcpi_probes"] == 5 and info["tcpi_backoff"] == 0
    assert peer.stack.counters["UsertcpTxLocalDrops"] == 6
    peer.expect_nothing()
    # The queue accepts again: the next probe (tcp_write_wakeup) sends the data, with PSH.
    queue.full = False
    peer.advance(0.5)
    peer.expect("P.", 1, 1, payload_len=100)
    assert conn.timers.probes_out == 0 and conn.timers.probe_deadline == float("inf")
    peer.send(".", 1, 101)
    assert conn.snd_una == 101 and conn.state is State.ESTABLISHED


def test_user_timeout_counts_from_the_first_probe() -> None:
    # Linux tcp_probe_timer: with TCP_USER_TIMEOUT 3 s the probes at T, T+0.5 .. T+2.5 are
    # refused (6 of them) and the timer at T+3.0 aborts.
    peer, conn = _open()
    conn.user_timeout = 3.0
    queue = Queue(peer)
    conn.send(b"y" * 24, peer.now)
    first_probe = conn.timers.probe_deadline
    peer.advance(first_probe - peer.now + 2.9)
    assert conn.state is State.ESTABLISHED and conn.info()["tcpi_probes"] == 6
    peer.advance(0.2)
    assert conn.state is State.CLOSED and conn.error == errno.ETIMEDOUT
    assert conn.info()["tcpi_probes"] == 6 and conn.info()["tcpi_backoff"] == 0
    assert queue.refused[-1] == pytest.approx(first_probe + 2.5)
    with pytest.raises(OSError) as exc:
        conn.send(b"z", peer.now)
    assert exc.value.errno == errno.ETIMEDOUT


def test_probe_interval_is_clamped_to_the_user_timeout() -> None:
    peer, conn = _open()
    conn.user_timeout = 1.2
    queue = Queue(peer)
    conn.send(b"y" * 24, peer.now)
    first_probe = conn.timers.probe_deadline
    peer.advance(first_probe - peer.now + 2.0)
    assert conn.state is State.CLOSED and conn.error == errno.ETIMEDOUT
    probes = [t for t in queue.refused if t >= first_probe - 1e-9]
    assert _gaps(probes) == [0.5, 0.5]                       # T, T+0.5, T+1.0
    assert conn.info()["tcpi_probes"] == 3                    # the abort came at T+1.2, not T+1.5


def test_refused_retransmission_retries_in_500ms_and_keeps_the_rto_unbacked() -> None:
    peer, conn = _open()
    conn.send(b"d" * 100, peer.now)
    peer.expect("P.", 1, 1, payload_len=100)
    queue = Queue(peer)
    rto = conn.rtt.timeout
    peer.advance(rto + 0.01)                                  # the RTO: its retransmission is refused
    assert queue.refused == [pytest.approx(rto)]
    assert conn.rtt.backoff == 0 and conn.timers.retransmits == 1
    assert conn.timers.rto_deadline == pytest.approx(rto + 0.5)
    assert peer.stack.counters["TcpExtTCPRetransFail"] == 1
    assert conn.recovery.retrans_bytes == 0                            # not in flight (no SACKED_RETRANS)
    peer.advance(0.5)
    assert _gaps(queue.refused) == [0.5]
    queue.full = False
    peer.advance(0.5)
    seg = peer.expect(".", 1, 1, payload_len=100)             # the retransmission leaves at last
    assert seg is not None and conn.rtt.backoff == 1 and conn.recovery.retrans_bytes == 100
    peer.send(".", 1, 101)
    assert conn.snd_una == 101


def test_refused_pure_ack_is_simply_lost() -> None:
    peer, conn = _open()
    queue = Queue(peer)
    peer.send("P.", 1, 1, payload=b"hello")
    assert len(queue.refused) == 1 and conn.rx.ack_pending == 0
    assert conn.timers.delack_deadline == float("inf")
    assert conn.rcv_nxt == 6
    peer.advance(5.0)
    assert len(queue.refused) == 1                            # no timer retries an ACK
    queue.full = False
    peer.send("P.", 1, 1, payload=b"hello")                   # the peer retransmits: a dup ACK
    peer.expect(".", 1, 6)


def test_refused_syn_is_a_loss_and_its_retransmission_retries_without_backoff() -> None:
    peer = ScriptedPeer()
    queue = Queue(peer)
    conn = peer.connect()
    assert queue.refused == [0.0] and conn.state is State.SYN_SENT
    peer.advance(1.0)                                          # initial RTO: the resend is refused
    assert queue.refused == [0.0, 1.0] and conn.rtt.backoff == 0
    assert conn.timers.rto_deadline == pytest.approx(1.5)
    queue.full = False
    peer.advance(0.5)
    peer.expect("S", 0)
    assert conn.rtt.backoff == 1 and conn.syn_retries == 2
    peer.send("S.", 0, 1)
    peer.expect(".", 1, 1)
    assert conn.state is State.ESTABLISHED


def test_refused_synack_retransmission_drops_the_request() -> None:
    # Linux reqsk_timer_handler: a request sock whose SYN-ACK cannot be resent is dropped.
    peer = ScriptedPeer()
    peer.listen()
    peer.send("S", 0)
    peer.expect("S.", 0, 1)
    key = (LOCAL_IP, peer.local_port, REMOTE_IP, peer.peer_port)
    assert peer.stack.connections[key].state is State.SYN_RECEIVED
    queue = Queue(peer)
    peer.advance(1.0)
    assert len(queue.refused) == 1 and key not in peer.stack.connections
    assert peer.listener is not None and not peer.listener.embryonic
    queue.full = False
    peer.send("S", 0)                                          # the client's own SYN retransmission
    peer.expect("S.", 0, 1)


def test_refused_fin_waits_for_the_probe_timer() -> None:
    peer, conn = _open()
    queue = Queue(peer)
    conn.close(peer.now)
    assert conn.state is State.FIN_WAIT_1 and conn.snd_nxt == 1 and len(queue.refused) == 1
    assert conn.timers.probe_deadline < float("inf")
    queue.full = False
    peer.advance(conn.timers.probe_deadline - peer.now)
    peer.expect("F.", 1, 1)
    peer.send(".", 1, 2)
    assert conn.state is State.FIN_WAIT_2


def test_refused_keepalive_is_not_counted_and_retried_in_500ms() -> None:
    peer, conn = _open()
    conn.keepalive = True
    conn.keepalive_time = 10.0
    conn.options_changed(peer.now)
    queue = Queue(peer)
    peer.advance(11.2)
    assert _gaps(queue.refused) == [0.5, 0.5] and queue.refused[0] == pytest.approx(10.0)
    assert conn.timers.probes_out == 0
    queue.full = False
    peer.advance(0.5)
    peer.expect(".", 0, 1)                                     # SEQ = SND.UNA - 1
    assert conn.timers.probes_out == 1


def test_drill_qdisc_pfifo_limit_0_refuses_and_delete_restores() -> None:
    stack_box: list[Stack] = []
    env = Environment(linux_config(), lambda: stack_box[0] if stack_box else None)
    env.run("tc qdisc delete dev tun0 root 2>/dev/null ; tc qdisc add dev tun0 root pfifo limit 0")
    stack = Stack(["192.0.2.1"])
    assert stack.tx_refuse is None
    env.attach(stack)                                         # the runner's lazy stack, made later
    stack_box.append(stack)
    assert stack.tx_refuse is not None and stack.tx_refuse(TxPacket(b""))
    env.run("tc qdisc add dev lo root pfifo limit 0")         # another device: no test traffic
    assert stack.tx_refuse is not None
    env.run("tc qdisc del dev tun0 root")
    assert stack.tx_refuse is None
    env.run("tc qdisc replace dev tun0 root pfifo limit 5")   # drained at once: never full
    assert stack.tx_refuse is None
    env.run("tc qdisc replace dev tun0 root pfifo limit 0")
    assert stack.tx_refuse is not None
    env.run("tc qdisc add dev tun0 root pfifo")
    assert stack.tx_refuse is None


@pytest.mark.parametrize("backpressure", [False, True])
def test_memnet_backpressure_refuses_at_the_senders_queue(backpressure: bool) -> None:
    # A slow link with a 4-packet interface queue at the sender: with backpressure the queue
    # refuses packets to the stack (local congestion, nothing lost on the link); without it
    # the same bursts are tail-dropped and TCP has to recover them as losses.
    cfg = LinkConfig(delay=0.005, bandwidth_bps=10e6, queue_limit=4, backpressure=backpressure)
    pair = make_pair(cfg, reverse=LinkConfig(delay=0.005))
    client, server = pair.open()
    data = bytes(range(256)) * 2048                              # 512 KiB
    assert transfer(pair, client, server, data) == data
    ab = pair.link.ab.stats
    refused = pair.a.counters["UsertcpTxLocalDrops"]
    if backpressure:
        assert ab.queue_drops == 0 and refused > 0 and pair.link.ab._reserved == 0
    else:
        assert ab.queue_drops > 0 and refused == 0
