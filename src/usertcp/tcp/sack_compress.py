"""SACK compression, as Linux does it (tcp_input.c __tcp_ack_snd_check, tcp_compressed_ack_kick).

While out-of-order data is queued, every arriving segment would earn an immediate ACK with
SACK blocks. Linux sends the first three at once (the sender needs three duplicate ACKs for
fast retransmit, TCP_FASTRETRANS_THRESH; the count restarts when RCV.NXT moves) and holds
the following ones: one ACK goes out when a timer fires, 5 % of the RTT later but at most
``net.ipv4.tcp_comp_sack_delay_ns`` (an hrtimer with ``tcp_comp_sack_slack_ns`` of slack:
we fire at the start of that range), or at once when ``tcp_comp_sack_nr`` ACKs are held
(0 turns compression off). Whatever ACK goes out next carries the latest SACK blocks; the
ACKs it replaced are counted as TcpExtTCPAckCompressed.

:class:`SackCompress` keeps the count; :class:`usertcp.tcp.receive.Receive` asks it and arms
the connection's ``sack_deadline`` (tcp/timers.py).
"""

from __future__ import annotations

__all__ = ["TCP_FASTRETRANS_THRESH", "SackCompress", "compress_delay"]

TCP_FASTRETRANS_THRESH = 3


class SackCompress:
    """Linux tp->compressed_ack, compressed_ack_rcv_nxt and dup_ack_counter."""

    __slots__ = ("count", "dup_acks", "rcv_nxt")

    def __init__(self) -> None:
        self.count = 0           # ACKs held back since the last one sent
        self.dup_acks = 0        # immediate duplicate ACKs sent at this RCV.NXT
        self.rcv_nxt = -1        # the RCV.NXT they were sent at

    def hold(self, rcv_nxt: int, limit: int) -> bool:
        """An ACK is due for out-of-order data: True if it is held back (compressed)."""
        if self.count >= limit:
            return False
        if self.rcv_nxt != rcv_nxt:
            self.rcv_nxt = rcv_nxt
            self.dup_acks = 0
        if self.dup_acks < TCP_FASTRETRANS_THRESH:
            self.dup_acks += 1
            return False
        self.count += 1
        return True


def compress_delay(rcv_rtt_us8: int, srtt: float | None, max_ns: int) -> float:
    """The hrtimer's delay in seconds: 5 % of the RTT (the receiver's estimate, or the smoothed
    RTT if smaller; both in Linux's us << 3), at most ``max_ns``."""
    rtt = rcv_rtt_us8
    if srtt:
        srtt_us8 = int(srtt * 8e6)
        if srtt_us8 < rtt:
            rtt = srtt_us8
    return min(max_ns, rtt * 125 // 20) * 1e-9
