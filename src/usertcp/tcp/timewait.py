"""Input in TIME-WAIT, as Linux tcp_timewait_state_process (net/ipv4/tcp_minisocks.c).

Linux does not run a TIME-WAIT socket through the RFC 9293 §3.10.7.4 steps of a full
socket: the timewait sock knows only RCV.NXT, the last timestamp and its timer. A segment
exactly at RCV.NXT that is a bare ACK restarts the 2 MSL timer and is otherwise ignored;
a reset there ends TIME-WAIT (net.ipv4.tcp_rfc1337 = 0, "TIME-WAIT assassination"). Any
other segment is "out of window": a new SYN may reopen the pair (RFC 6191); everything
else but a reset is answered with an ACK (rate limited as tcp_oow_rate_limited, counted as
TcpExtTCPACKSkippedTimeWait when skipped), and the timer restarts if it carried an ACK or
failed PAWS. So an in-window SYN gets a plain ACK here, never a challenge ACK, and a
reset that is not exactly at RCV.NXT is ignored (it cannot reach the challenge path).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from usertcp.tcp.seq import seq_diff
from usertcp.wire.segment import ACK, FIN, RST, SYN, Segment

if TYPE_CHECKING:
    from usertcp.tcp.connection import Connection

TS_PAWS_IDLE = 24 * 24 * 3600.0   # RFC 7323 §5.5: ts_recent is invalid after 24 days idle


def timewait_arrives(conn: Connection, seg: Segment, now: float) -> None:
    """One segment for a connection in TIME-WAIT (Linux tcp_timewait_state_process)."""
    flags = seg.flags
    mib = conn.mib
    has_ts = seg.ts_val >= 0
    paws_reject = (conn.ts_ok and has_ts and not flags & RST
                   and seq_diff(seg.ts_val, conn.ts_recent) < 0
                   and now - conn.ts_recent_time < TS_PAWS_IDLE)
    seg_off = conn.rcv_off(seg.seq)
    bare = not seg.payload and not flags & (SYN | FIN)
    if not paws_reject and seg_off == conn.rcv_nxt and (bare or flags & RST):
        # "In window segment, it may be only reset or bare ack."
        if flags & RST:
            conn.close_now(now)
            return
        conn.timers.time_wait_deadline = now + conn.config.time_wait
        if has_ts and conn.ts_ok:
            conn.rx.store_ts_recent(seg.ts_val, now)
        return
    if flags & SYN and not flags & (RST | ACK) and not paws_reject \
            and conn.stack.time_wait_reuse(conn, seg, now):
        return                           # TCP_TW_SYN: a listener takes the new SYN
    if paws_reject:
        # Linux >= 6.14: SKB_DROP_REASON_TCP_RFC7323_TW_PAWS, LINUX_MIB_PAWS_TW_REJECTED.
        mib["TcpExtPAWSTimewait"] += 1
        mib["SKB_DROP_REASON_TCP_RFC7323_TW_PAWS"] += 1
    if flags & RST:
        return                           # TCP_TW_SUCCESS: silently consumed
    if paws_reject or flags & ACK:
        conn.timers.time_wait_deadline = now + conn.config.time_wait
    # tcp_timewait_check_oow_rate_limit: segments that carry data or a FIN (end_seq > seq)
    # without SYN are exempt from the rate limit (tcp_oow_rate_limited).
    occupies = bool(seg.payload) or bool(flags & FIN)
    if (occupies and not flags & SYN) or conn.oow_ack_allowed(now):
        conn.tx.send_ack(now)
    else:
        mib["TcpExtTCPACKSkippedTimeWait"] += 1
