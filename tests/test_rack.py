"""RACK as Linux keeps it (RFC 8985 §6.2, Linux tcp_rack_advance / tcp_rack_detect_loss)."""

from __future__ import annotations

from peer import ScriptedPeer
from usertcp.tcp.connection import Connection
from usertcp.tcp.rtx_queue import SentSegment


def _open(rtt: float) -> Connection:
    """A passive connection whose handshake took ``rtt`` (its first RTT sample and min_rtt)."""
    peer = ScriptedPeer()
    lst = peer.listen()
    peer.send("S", 0, win=65535)
    peer.expect("S.", 0, 1)
    peer.advance(rtt)
    peer.send(".", 1, 1)
    conn = lst.accept()
    assert conn is not None
    assert conn.rtt.min_rtt is not None and abs(conn.rtt.min_rtt - rtt) < 1e-6
    return conn


def test_rack_rtt_follows_every_delivery_not_only_the_latest_sent() -> None:
    # RFC 8985 §6.2 step 2 (Linux tcp_rack_advance): RACK.rtt takes the RTT of each delivered
    # segment in turn; RACK.xmit_ts only moves forward. A segment sent before the latest
    # delivered one, acked later, leaves xmit_ts alone but gives RACK.rtt its longer RTT, so
    # the segments sent with it get that long to arrive (prr-ss-ack-below-snd_una-cubic).
    conn = _open(0.010)
    rec = conn.recovery
    early = SentSegment(1, 1001, False, 0.010)
    late = SentSegment(1001, 2001, False, 0.020)
    rec.rack_note(late, 0.032)
    assert rec.rack_xmit_ts == 0.020 and rec.rack_end == 2001
    assert abs(rec.rack_rtt - 0.012) < 1e-9
    rec.rack_note(early, 0.034)
    assert rec.rack_xmit_ts == 0.020 and rec.rack_end == 2001
    assert abs(rec.rack_rtt - 0.024) < 1e-9


def test_rack_ignores_a_retransmission_delivered_sooner_than_min_rtt() -> None:
    # Linux tcp_rack_advance: a SACK of a retransmitted segment within min_rtt of the
    # retransmission may be for the original: neither RACK.rtt nor RACK.xmit_ts move.
    conn = _open(0.010)
    rec = conn.recovery
    first = SentSegment(1, 1001, False, 0.010)
    rec.rack_note(first, 0.021)
    again = SentSegment(1001, 2001, False, 0.030)
    again.tx_count = 2
    rec.rack_note(again, 0.032)
    assert rec.rack_xmit_ts == 0.010 and abs(rec.rack_rtt - 0.011) < 1e-9
