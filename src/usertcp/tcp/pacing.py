"""Pacing at sk_pacing_rate with earliest departure times, as Linux does under the fq qdisc.

Since Linux 4.20 TCP stamps every skb with its departure time (EDT, tp->tcp_wstamp_ns in
__tcp_transmit_skb) and advances that clock by the skb's length at the pacing rate
(``tcp_update_skb_after_send``; the first 10 segments are not paced, and time the flow spent
late is credited up to half a packet's time). The fq qdisc (net/sched/sch_fq.c), which marks
the sockets it sees as paced (fq_classify: SK_PACING_FQ), holds each skb until its
departure time; TCP Small Queues keep only about two skbs in it (tcp_small_queue_check), so
packets leave at their departure times. Here the connection waits for the departure time
itself, which is what Linux's internal pacing does without fq (``tcp_pacing_check`` and the
pacing timer): the packets leave at the same times.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from usertcp.tcp.connection import Connection

__all__ = ["PACING_FQ", "PACING_NEEDED", "PACING_NONE", "PACING_UNLIMITED", "Pacer", "pacing_rate"]

# sk_pacing_status (include/net/sock.h).
PACING_NONE, PACING_NEEDED, PACING_FQ = 0, 1, 2
_UNPACED_SEGS = 10          # "Original sch_fq does not pace first 10 MSS"
PACING_UNLIMITED = (1 << 64) - 1  # ~0ULL: sk_pacing_rate before any RTT sample, sk_max_pacing_rate


def pacing_rate(c: Connection) -> int:
    """Linux tcp_update_pacing_rate(): bytes/s, 200 % of cwnd/srtt in slow start and
    120 % after (tcp_pacing_ss_ratio, tcp_pacing_ca_ratio); unlimited (~0) before an
    RTT sample."""
    srtt = c.rtt.srtt
    if not srtt:
        return PACING_UNLIMITED
    cwnd = c.cc.cwnd
    ratio = 2.0 if cwnd < c.cc.ssthresh // 2 else 1.2
    return int(ratio * max(cwnd, c.snd_nxt - c.snd_una) / srtt)


class Pacer:
    """One connection's departure clock (tcp_wstamp_ns) and pacing status."""

    __slots__ = ("conn", "status", "wstamp")

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.status = PACING_NONE
        self.wstamp = 0.0

    @property
    def paced(self) -> bool:
        return self.status != PACING_NONE

    def on_transmit(self, now: float, length: int) -> None:
        """__tcp_transmit_skb: the packet leaves at max(wstamp, now); then
        tcp_update_skb_after_send() moves the clock on by its length at the pacing rate."""
        c = self.conn
        if self.status == PACING_NONE:
            if c.config.qdisc != "fq":
                return                        # unpaced: the clock starts with pacing
            self.status = PACING_FQ           # fq_classify marks the socket on its first packet
        prior = self.wstamp
        if self.wstamp < now:
            self.wstamp = now
        if c.data_segs_out < _UNPACED_SEGS:
            return
        rate = pacing_rate(c)
        if rate <= 0 or rate >= PACING_UNLIMITED:
            return
        gap = length / rate
        credit = self.wstamp - prior          # the time this flow was late: OS jitter
        self.wstamp += gap - min(gap / 2, credit)

    def must_wait(self, now: float) -> bool:
        """tcp_pacing_check(): the next packet's departure time is still ahead; the pacing
        timer (Timers.pacing_deadline) resumes the transmission then."""
        if self.status == PACING_NONE or self.wstamp <= now + 1e-9:
            return False
        tm = self.conn.timers
        if tm.pacing_deadline > self.wstamp:
            tm.pacing_deadline = self.wstamp
        return True
