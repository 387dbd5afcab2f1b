"""Zero-window probing, Nagle (Minshall's variant, as Linux) and sender silly-window avoidance."""

from __future__ import annotations

from itertools import pairwise

from peer import ScriptedPeer
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import Connection


def _open() -> tuple[ScriptedPeer, Connection]:
    peer = ScriptedPeer(StackConfig())
    conn = peer.passive_open()
    peer.expect_nothing()
    return peer, conn


def test_zero_window_probes_back_off_and_data_resumes() -> None:
    # RFC 9293 §3.8.6.1: with a zero window and data queued, probe the window; Linux's probe is
    # an ACK carrying SEQ = SND.UNA - 1 and no data (tcp_xmit_probe_skb), backing off each time.
    peer, conn = _open()
    peer.send(".", 1, 1, win=0)                 # the peer closes its window
    conn.send(b"x" * 3000, peer.now)
    peer.collect()
    peer.expect_nothing()                        # nothing may be sent into a zero window
    peer.advance(10.0)
    probes = peer.drain()
    assert len(probes) >= 3
    for p in probes:
        assert len(p.seg.payload) == 0 and (p.seg.seq - peer.local_isn) % 2**32 == 0   # SND.UNA - 1
    gaps = [b.time - a.time for a, b in pairwise(probes)]
    assert all(later > earlier * 1.5 for earlier, later in pairwise(gaps))  # exponential backoff
    peer.send(".", 1, 1, win=65535)              # the window opens: data flows at once
    sent = peer.drain()
    assert sum(len(s.seg.payload) for s in sent) == 3000
    assert conn.timers.probes_out == 0


def test_nagle_holds_a_second_small_segment_until_the_ack() -> None:
    # RFC 896 as Linux applies it (Minshall): a small segment waits while a small one is unacked.
    peer, conn = _open()
    conn.send(b"a" * 10, peer.now)
    peer.expect("P.", 1, 1, payload_len=10)
    conn.send(b"b" * 10, peer.now)
    peer.collect()
    peer.expect_nothing()
    peer.send(".", 1, 11)                        # the first small segment is acknowledged
    peer.expect("P.", 11, 1, payload_len=10)


def test_nodelay_sends_small_segments_at_once() -> None:
    peer, conn = _open()
    conn.nodelay = True
    conn.send(b"a" * 10, peer.now)
    conn.send(b"b" * 10, peer.now)
    peer.collect()
    assert [len(s.seg.payload) for s in peer.drain()] == [10, 10]


def test_sender_sws_avoidance_waits_then_fills_the_small_window() -> None:
    # RFC 9293 §3.8.6.2.1: do not send a segment smaller than both the MSS and half the largest
    # window the peer offered while more data waits; the override (here the probe timer) sends it.
    peer, conn = _open()
    peer.send(".", 1, 1, win=500)                # 500 bytes: far below half of the 65535 offered
    conn.send(b"z" * 5000, peer.now)
    peer.collect()
    peer.expect_nothing()
    peer.advance(2.0)
    first = peer.drain()[0]
    assert len(first.seg.payload) == 500         # exactly the window, no more
    assert first.time > 0.1
