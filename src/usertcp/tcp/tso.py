"""TSO/GSO sizing: how many bytes one skb of new data is built with and leaves in.

The write path builds skbs of ``size_goal`` bytes (Linux tcp_xmit_size_goal); the transmit
path sends each as one packet of at most ``packet_limit`` bytes (tcp_tso_autosize about
1 ms of the pacing rate, tcp_cwnd_test's half cwnd, the device's gso_max_size), and
``tso_should_defer`` holds a multi-segment skb briefly so that it leaves in a larger TSO
packet (tcp_tso_should_defer). TCP-MD5 turns GSO off: one MSS per skb.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from usertcp.tcp.buffers import SKB_EOR
from usertcp.tcp.pacing import pacing_rate
from usertcp.tcp.recovery import CA_RECOVERY

if TYPE_CHECKING:
    from usertcp.tcp.connection import Connection

__all__ = ["GSO_MAX_SIZE", "MAX_TCP_HEADER", "TSO_DEFER", "TSO_DEFER_CWND", "TSO_SEND",
           "packet_limit", "size_goal", "tso_bytes", "tso_should_defer"]

GSO_MAX_SIZE: Final = 65536              # Linux GSO_LEGACY_MAX_SIZE: sk_gso_max_size with software GSO
MAX_TCP_HEADER: Final = 320              # Linux L1_CACHE_ALIGN(128 + MAX_HEADER) on x86-64
# tso_should_defer's verdicts: send now, hold, hold for cwnd room (*is_cwnd_limited).
TSO_SEND, TSO_DEFER, TSO_DEFER_CWND = 0, 1, 2


def size_goal(c: Connection) -> int:
    """Linux tcp_xmit_size_goal(): bytes per skb a write builds, a multiple of the MSS
    bounded by half the peer's largest window (tcp_bound_to_half_wnd); one MSS without
    GSO (TCP-MD5 turns it off)."""
    mss = c.mss
    if c.md5_key is not None:      # without offload, TCP still builds GSO skbs (sk_setup_caps
        return mss                 # forces NETIF_F_GSO; software GSO cuts them per packet)
    goal = GSO_MAX_SIZE
    cutoff = c.max_snd_wnd >> 1 if c.max_snd_wnd > 536 else c.max_snd_wnd
    if cutoff and goal > cutoff:
        goal = max(cutoff, 68 - 20 - (12 if c.ts_ok else 0))   # 68 - tcp_header_len
    return max(goal // mss * mss, mss)


def tso_bytes(c: Connection) -> int:
    """Linux tcp_tso_segs()/tcp_tso_autosize(): the largest burst one skb leaves in,
    about 1 ms of the pacing rate but at least tcp_min_tso_segs segments."""
    mss = c.mss
    if c.md5_key is not None:
        return mss
    srtt = c.rtt.srtt
    if not srtt:
        size = GSO_MAX_SIZE                 # sk_pacing_rate starts unlimited
    else:
        size = pacing_rate(c) >> 10         # sk_pacing_shift
        r = int((c.rtt.min_rtt or srtt) * 1e6) >> 9    # tcp_tso_rtt_log
        if r < 32:
            size += GSO_MAX_SIZE >> r
        size = min(size, GSO_MAX_SIZE)
    return max(size // mss, c.config.min_tso_segs, 1) * mss


def packet_limit(c: Connection, half_cwnd: bool = True) -> int:
    """Bytes one packet of new data may carry (Linux tcp_write_xmit): one MSS without GSO;
    with it, tcp_tso_segs() (autosize) and tcp_cwnd_test(), which keeps a packet to half
    the cwnd so that at least two GSO packets are in flight."""
    mss = c.mss
    if c.md5_key is not None:
        return mss
    segs = tso_bytes(c) // mss
    if half_cwnd:
        segs = min(segs, max((c.cc.cwnd // mss) >> 1, 1))
    if c.stack.gso_max_size > 0:
        segs = min(segs, (c.stack.gso_max_size - 1 - MAX_TCP_HEADER) // mss)
    return max(segs, 1) * mss


def tso_should_defer(c: Connection, now: float, sent_time: float, nxt: int, skb_len: int,
                     send_win: int, cong_win: int) -> int:
    """Linux tcp_tso_should_defer(): hold a multi-segment skb for the ACK due within
    min(1 ms, srtt/2), so that it leaves in one larger TSO packet, unless a full TSO
    packet or a third of the window (tcp_tso_win_divisor 3) can go now. ``sent_time`` is
    when new data last left (lsndtime, -1 never)."""
    rtx = c.recovery.rtx
    srtt = c.rtt.srtt
    if (c.recovery.ca_state >= CA_RECOVERY or sent_time < 0 or not rtx or not srtt
            or now - sent_time > 0.001):     # bursts only right after a send
        return TSO_SEND
    room = min(send_win, cong_win)
    if room >= tso_bytes(c):
        return TSO_SEND
    if nxt - 1 + skb_len < c.snd_buf.end and room >= skb_len:
        return TSO_SEND             # the middle of the queue: nothing more will join it
    if room >= min(c.snd_wnd, c.cc.cwnd) // 3:
        return TSO_SEND
    if rtx[0].tx_time + srtt - now > min(srtt / 2, 0.001):
        return TSO_SEND             # the next ACK comes too late
    if cong_win < send_win:
        if cong_win <= skb_len:
            return TSO_DEFER_CWND   # cwnd-limited: tcp_tso_should_defer sets *is_cwnd_limited
    elif send_win <= skb_len:
        return TSO_DEFER            # rwnd-limited
    # Application-limited: wait for more data, unless none may join (FIN, MSG_EOR).
    if (c.fin_queued and nxt - 1 + skb_len >= c.snd_buf.end) or c.snd_buf.skb_flags(nxt - 1) & SKB_EOR:
        return TSO_SEND
    return TSO_DEFER
