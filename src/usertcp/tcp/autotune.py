"""Receive buffer auto-tuning, as Linux does it (Dynamic Right-Sizing: tcp_rcv_space_adjust).

Once per receiver-measured RTT, Linux compares what the application read in the last RTT
with what it read in the one before; when the reader keeps up with more, the buffer grows
to hold twice that (DRS is one RTT late), plus the growth itself doubled (the sender may
still be in slow start), plus what waits out of order, up to tcp_rmem[2]
(tcp_rcvbuf_grow). Nothing grows when the user fixed the buffer (SO_RCVBUF) or
net.ipv4.tcp_moderate_rcvbuf is 0.

The receiver's RTT comes from the timestamps it gets echoed (tcp_rcv_rtt_measure_ts: the age
of the echoed TSval, in whole milliseconds, on full-sized segments) or, without them, from how
long a window's worth of data takes to arrive (tcp_rcv_rtt_measure: a minimum filter).

:class:`RcvSpace` keeps that state; :class:`usertcp.tcp.receive.Receive` feeds it and applies
the new buffer size. Integer microseconds throughout, as Linux's tcp_mstamp.
"""

from __future__ import annotations

from usertcp.tcp.window import space_from_win

__all__ = ["TCP_INIT_CWND", "RcvSpace", "rcvbuf_for"]

TCP_INIT_CWND = 10           # Linux TCP_INIT_CWND: the first measure's floor (tcp_init_buffer_space)
_M32 = 0xFFFFFFFF


class RcvSpace:
    """Linux tp->rcvq_space and tp->rcv_rtt_est of one connection."""

    __slots__ = ("last_tsecr", "rtt_seq", "rtt_time", "rtt_us", "seq", "space", "time")

    def __init__(self) -> None:
        self.rtt_us = 0          # rcv_rtt_est.rtt_us: the receiver's RTT, in us << 3 (0: none yet)
        self.rtt_seq = 0         # rcv_rtt_est.seq: the data whose arrival ends the current sample
        self.rtt_time = -1       # rcv_rtt_est.time (us; -1: no sample started)
        self.last_tsecr = -1     # rcv_rtt_last_tsecr
        self.space = 0           # rcvq_space.space: bytes read in the last measured RTT
        self.seq = 0             # rcvq_space.seq: the read position when the measure began
        self.time = 0            # rcvq_space.time (us)

    def start(self, space: int, copied_seq: int, now_us: int) -> None:
        """tcp_init_buffer_space: the first measure begins (``space`` is Linux's guess,
        min(rcv_ssthresh, rcv_wnd, 10 * advmss))."""
        self.space = space
        self.seq = copied_seq
        self.time = now_us

    def _rtt_update(self, sample_us: int, win_dep: bool) -> None:
        """Linux tcp_rcv_rtt_update: a minimum filter without timestamps (``win_dep``), an
        average with 1/8 gain with them."""
        old = self.rtt_us
        m = sample_us << 3
        if old == 0 or m < old:
            self.rtt_us = m
        elif not win_dep:
            self.rtt_us = old - (old >> 3) + sample_us

    def measure(self, rcv_nxt: int, rcv_wnd: int, now_us: int) -> None:
        """Linux tcp_rcv_rtt_measure (every data arrival): the time a window took to arrive."""
        if self.rtt_time >= 0:
            if rcv_nxt < self.rtt_seq:
                return
            self._rtt_update(max(now_us - self.rtt_time, 1), True)
        self.rtt_seq = rcv_nxt + rcv_wnd
        self.rtt_time = now_us

    def measure_ts(self, ts_now: int, tsecr: int, seg_len: int, rcv_mss: int) -> None:
        """Linux tcp_rcv_rtt_measure_ts: a full-sized segment echoing a new TSval gives a
        sample of its age (TS ticks are milliseconds; a zero age is no sample)."""
        if tsecr == self.last_tsecr:
            return
        self.last_tsecr = tsecr
        if seg_len >= rcv_mss:
            delta = (ts_now - tsecr) & _M32
            if 0 < delta < 0x7FFFFFFF // 1000:
                self._rtt_update(delta * 1000, False)

    def adjust(self, copied_seq: int, rcv_nxt: int, now_us: int) -> int:
        """Linux tcp_rcv_space_adjust (after each read), once an RTT: when the reader took more
        in the last RTT than in the one before, that becomes ``space`` and the one before is
        returned (the buffer may grow: ``rcvbuf_for``); else -1."""
        rtt = self.rtt_us
        if not rtt or now_us - self.time < rtt >> 3:
            return -1
        copied = copied_seq - self.seq - (rcv_nxt - copied_seq)   # read, less what still waits
        self.seq = copied_seq
        self.time = now_us
        old = self.space
        if copied <= old:
            return -1
        self.space = copied
        return old


def rcvbuf_for(newval: int, oldval: int, ooo_span: int, ratio: int, rmem2: int) -> int:
    """Linux tcp_rcvbuf_grow: the buffer for a reader that took ``newval`` bytes in the last
    RTT after ``oldval`` in the one before; ``ooo_span`` is how far the out-of-order data
    reaches past RCV.NXT."""
    rcvwin = newval << 1                                      # DRS is always one RTT late
    if oldval > 0:
        rcvwin += ((rcvwin * (newval - oldval)) // oldval) << 1   # the sender may double its rate
    rcvwin += ooo_span
    return min(space_from_win(rcvwin, ratio), rmem2)
