"""Pacing under the fq qdisc (tcp/pacing.py): earliest departure times at sk_pacing_rate, the
first 10 segments unpaced, credit for lateness; on the in-memory network a window that would
leave in one burst leaves spread out."""

from __future__ import annotations

from itertools import pairwise

import pytest

from pair import make_pair, transfer
from usertcp.net.memnet import LinkConfig, LinkDirection
from usertcp.tcp.config import StackConfig
from usertcp.tcp.pacing import PACING_FQ, PACING_NONE
from usertcp.wire.packet import parse_packet


def _send_times(qdisc: str) -> tuple[list[float], float]:
    """Send times of the client's data packets in a 300 kB transfer, and its last pacing rate."""
    cfg = StackConfig()
    cfg.qdisc = qdisc
    pair = make_pair(LinkConfig(delay=0.02), cfg_a=cfg)
    times: list[float] = []

    def tap(data: bytes, now: float, d: LinkDirection) -> None:
        if d is pair.link.directions[0] and len(parse_packet(data).payload) > 0:
            times.append(now)

    pair.net.add_tap(tap, link=pair.link)
    client, server = pair.open()
    data = bytes(300_000)
    assert transfer(pair, client, server, data) == data
    assert client.tx.pacer.status == (PACING_FQ if qdisc == "fq" else PACING_NONE)
    return times, float(client.tx.pacing_rate())


def _largest_burst(times: list[float]) -> int:
    """The most packets leaving at one instant (one GSO skb leaves whole: its segments)."""
    best = run = 1
    for a, b in pairwise(times):
        run = run + 1 if b == a else 1
        best = max(best, run)
    return best


def test_fq_spreads_each_window_over_the_round_trip() -> None:
    burst, _ = _send_times("pfifo_fast")
    paced, rate = _send_times("fq")
    # Without pacing each ACK releases what the window allows at once; under fq a packet
    # (a GSO skb of tcp_tso_autosize's few segments) leaves at a time, after the first 10.
    assert _largest_burst(burst[10:]) >= 40
    assert _largest_burst(paced[10:]) <= 8
    assert len(set(paced)) > 5 * len(set(burst)) and rate > 0


def test_departure_clock_and_lateness_credit() -> None:
    cfg = StackConfig()
    cfg.qdisc = "fq"
    pair = make_pair(LinkConfig(delay=0.02), cfg_a=cfg)
    client, server = pair.open()
    assert transfer(pair, client, server, bytes(50_000), close=False) == bytes(50_000)
    pacer = client.tx.pacer
    assert pacer.paced and client.data_segs_out >= 10
    rate = client.tx.pacing_rate()
    now = pacer.wstamp
    pacer.on_transmit(now, 1500)                     # on time: the full gap
    assert pacer.wstamp == pytest.approx(now + 1500 / rate)
    late = pacer.wstamp + 1.0
    pacer.on_transmit(late, 1500)                    # a second late: at most half a gap off
    assert pacer.wstamp == pytest.approx(late + 1500 / rate / 2)
    assert pacer.must_wait(late) and client.timers.pacing_deadline == pytest.approx(pacer.wstamp)
    assert not pacer.must_wait(pacer.wstamp)
