"""The receive side of one connection (RFC 9293 §3.10.7.4 seventh/eighth steps, RFC 5681 §4.2).

:class:`Receive` takes in-window data: it trims what was already received or lies
beyond the window, queues in-order bytes for the application and out-of-order ones for
reassembly, notes CE marks (RFC 3168 §6.1.3), opens the window as data arrives (Linux
tcp_grow_window) and decides when the ACK goes out: at once, or delayed (RFC 9293
§3.8.6.3) after Linux's quick-ACK start. It also sends the window update a read earns
(Linux tcp_cleanup_rbuf) and handles the header-predicted data segment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from usertcp.tcp.appguard import notify
from usertcp.tcp.autotune import TCP_INIT_CWND, RcvSpace, rcvbuf_for
from usertcp.tcp.buffers import truesize
from usertcp.tcp.output import MAX_WINDOW
from usertcp.tcp.prune import prune_queue
from usertcp.tcp.recovery import ECN_DEMAND_CWR, ECN_OK, ECN_SEEN, INF
from usertcp.tcp.sack_compress import SackCompress, compress_delay
from usertcp.tcp.seq import SEQ_MASK, seq_diff
from usertcp.tcp.states import RECEIVING, State
from usertcp.tcp.urgent import Urgent
from usertcp.tcp.wakeup import KEY_READABLE
from usertcp.tcp.window import (
    DEFAULT_SCALING_RATIO,
    SOCK_MIN_RCVBUF,
    TS_OPTION_SPACE,
    grow_increment,
    initial_window,
    scaling_ratio,
    select_window,
    win_from_space,
)
from usertcp.wire.segment import ACK, ECN_CE, ECN_NOT_ECT, FIN, PSH, SYN, URG, Segment

if TYPE_CHECKING:
    from usertcp.tcp.connection import Connection

TCP_MSS_DEFAULT: Final = 536        # RFC 1122 default MSS (Linux TCP_MSS_DEFAULT)
TCP_MIN_MSS: Final = 88             # Linux TCP_MIN_MSS
_REMNANT = FIN | URG | SYN | PSH   # Linux TCP_REMNANT: flags a full-sized segment never needs


class Receive:
    """ACK scheduling state and the data-arrival path of one connection."""

    __slots__ = ("ack_now", "ack_pending", "ato", "ce_state", "comp", "conn", "drs", "dsack", "last_seg_size",
                 "lrcvtime", "pingpong", "quickack", "rcv_wnd", "rcv_wnd_initial", "scaling_ratio", "urgent",
                 "window_clamp")

    def __init__(self, conn: Connection, quickack: int) -> None:
        self.conn = conn
        self.ack_pending = 0           # bytes received and not yet acknowledged
        self.lrcvtime = -1.0           # when data last arrived (Linux icsk_ack.lrcvtime)
        self.quickack = quickack       # ACKs still to send at once (Linux icsk_ack.quick)
        self.pingpong = False          # interactive mode: ACKs ride on replies (Linux)
        self.dsack: tuple[int, int] | None = None   # a duplicate range to report (RFC 2883)
        self.ack_now = False           # an ACK is owed at the end of this event
        self.ce_state = False          # DCTCP: was the last ECT data packet CE-marked?
        self.last_seg_size = 0         # Linux icsk_ack.last_seg_size (tcp_measure_rcv_mss)
        self.ato = 0.0                 # Linux icsk_ack.ato: the delayed-ACK timeout; 0 until data came
        self.window_clamp = 0          # Linux tp->window_clamp (0: none yet), see tcp/window.py
        self.rcv_wnd_initial = MAX_WINDOW   # the SYN's window (tcp_select_initial_window)
        self.rcv_wnd = MAX_WINDOW      # Linux tp->rcv_wnd: the window last offered (unscaled bytes)
        self.scaling_ratio = DEFAULT_SCALING_RATIO   # Linux tp->scaling_ratio (tcp/window.py)
        self.drs = RcvSpace()          # receive buffer auto-tuning (tcp/autotune.py)
        self.comp = SackCompress()     # ACKs held back while data is out of order
        self.urgent = Urgent()         # the urgent mark: tp->urg_data, tp->urg_seq (tcp/urgent.py)

    def init_window(self, wscale_ok: bool) -> None:
        """The first window, its clamp and the window scale, before our SYN or SYN-ACK
        (Linux tcp_connect_init / tcp_openreq_init_rwin with tcp_select_initial_window)."""
        c = self.conn
        cfg = c.config
        # the SYN-ACK's segments carry the timestamp option; an active open does not know yet
        mss = self.advmss() - (TS_OPTION_SPACE if c.passive and c.ts_ok else 0)
        scale = wscale_ok and cfg.window_scaling
        rcv_wnd, self.window_clamp, c.rcv_wscale = initial_window(
            c.rcvbuf_limit, c.rcvbuf_locked, self.window_clamp, mss, scale, cfg.rmem[2], cfg.rmem_max)
        self.rcv_wnd_initial = self.rcv_wnd = rcv_wnd
        c.rcv_ssthresh = min(c.rcv_ssthresh, rcv_wnd)

    def opened(self, now: float) -> None:
        """The connection is open (tcp_finish_connect / tcp_create_openreq_child): data counts
        as arriving from now, and the receive buffer is set up (tcp_init_buffer_space)."""
        self.lrcvtime = now
        self.init_buffer_space(now)

    def init_buffer_space(self, now: float) -> None:
        """Linux tcp_init_buffer_space, its receive part, when the connection opens: the clamp
        keeps one segment of the buffer in reserve (tcp_app_win), rcv_ssthresh starts below it."""
        c = self.conn
        advmss = self.rcv_advmss()
        maxwin = win_from_space(c.rcvbuf_limit, self.scaling_ratio)
        clamp = self.window_clamp
        if clamp == 0 or clamp >= maxwin:
            clamp = maxwin
        if clamp > 2 * advmss and clamp + advmss > maxwin:
            clamp = max(2 * advmss, maxwin - advmss)     # force reservation of one segment
        self.window_clamp = clamp
        c.rcv_ssthresh = min(c.rcv_ssthresh, clamp)
        self.drs.start(min(c.rcv_ssthresh, self.rcv_wnd, TCP_INIT_CWND * advmss), self.copied_seq(),
                       int(now * 1e6))

    def copied_seq(self) -> int:
        """Linux tp->copied_seq: how far the application has read (an offset, as rcv_nxt)."""
        c = self.conn
        return c.rcv_nxt - len(c.rcv_buf) - (1 if c.fin_received else 0)

    def space_adjust(self, now: float) -> None:
        """Linux tcp_rcv_space_adjust / tcp_rcvbuf_grow (tcp/autotune.py) after a read: the
        buffer grows with what the reader takes per RTT, the clamp follows it."""
        c = self.conn
        copied = self.copied_seq()
        old = self.drs.adjust(copied, c.rcv_nxt, int(now * 1e6))
        if old < 0 or c.rcvbuf_locked or not c.config.moderate_rcvbuf:
            return
        ooo_end = c.ooo.highest_seq
        span = ((ooo_end - c.irs - c.rcv_nxt) & SEQ_MASK) if ooo_end is not None else 0
        rcvbuf = rcvbuf_for(self.drs.space, old, span, self.scaling_ratio, c.config.rmem[2])
        if rcvbuf > c.rcvbuf_limit:
            c.rcvbuf_limit = rcvbuf
            self.window_clamp = win_from_space(rcvbuf, self.scaling_ratio)

    def rtt_measure_ts(self, ts_ecr: int, seg_len: int, now: float) -> None:
        """Linux tcp_rcv_rtt_measure_ts: the receiver's RTT from an echoed timestamp."""
        c = self.conn
        if c.ts_ok and ts_ecr >= 0:
            self.drs.measure_ts((int(now * 1000) + c.ts_offset) & SEQ_MASK, ts_ecr, seg_len, c.rcv_mss)

    def rcv_advmss(self) -> int:
        """Linux tp->advmss once the connection is set up: our MSS less the timestamp option."""
        return self.advmss() - (TS_OPTION_SPACE if self.conn.ts_ok else 0)

    def rmem_alloc(self) -> int:
        """Linux sk_rmem_alloc: the buffer memory (truesize) the received data holds."""
        c = self.conn
        held = c.rcv_buf.charged
        q = c.ooo
        if not q.empty:
            held += q.truesize
        return held

    def set_window_clamp(self, val: int) -> None:
        """Linux tcp_set_window_clamp (as tcp_measure_rcv_mss calls it): a smaller clamp pulls
        rcv_ssthresh down with it; a larger one lets it up to the window already offered."""
        c = self.conn
        new = max(SOCK_MIN_RCVBUF // 2, val)
        old = self.window_clamp
        if new == old:
            return
        self.window_clamp = new
        if new < old:
            c.rcv_ssthresh = min(c.rcv_ssthresh, new)       # __tcp_adjust_rcv_ssthresh
        else:
            c.rcv_ssthresh = max(min(self.rcv_wnd, new), c.rcv_ssthresh)

    def clamp_window(self) -> None:
        """Linux tcp_clamp_window (from tcp_prune_queue): more is held than the buffer allows,
        so quick ACKs end and the buffer grows to what is held (up to tcp_rmem[2], unless locked
        or memory is short); if it still does not fit, rcv_ssthresh drops to two segments."""
        c = self.conn
        self.quickack = 0
        held = self.rmem_alloc()
        rmem2 = c.config.rmem[2]
        mem = c.stack.mem
        if (c.rcvbuf_limit < rmem2 and not c.rcvbuf_locked and not mem.pressure
                and (not mem.limit or mem.used < mem.limit // 2)):
            c.rcvbuf_limit = min(held, rmem2)
        if held > c.rcvbuf_limit:
            c.rcv_ssthresh = min(self.window_clamp or c.rcv_ssthresh, 2 * self.rcv_advmss())

    def select_window(self) -> int:
        """Linux tcp_select_window: the window field of a segment after the handshake.

        The offer comes from ``window.select_window`` (__tcp_select_window); it never moves the
        right edge left (RFC 9293 §3.8.6.2.2) unless net.ipv4.tcp_shrink_window allows it with a
        window scale in use. Counted as Linux does: TCPWantZeroWindowAdv (a zero window kept
        open), TCPToZeroWindowAdv / TCPFromZeroWindowAdv (the window closed / reopened)."""
        c = self.conn
        ws = c.rcv_wscale
        unit = 1 << ws
        new = self.offer()
        old = self.rcv_wnd
        cur = c.rcv_adv - c.rcv_nxt                           # tcp_receive_window
        if new < cur and not (c.config.shrink_window and ws):
            if new == 0:
                c.mib["TcpExtTCPWantZeroWindowAdv"] += 1
            new = (cur + unit - 1) & -unit
        self.rcv_wnd = new
        c.rcv_adv = c.rcv_nxt + new                           # rcv_wup = rcv_nxt
        field = new >> ws
        if field > MAX_WINDOW:
            field = MAX_WINDOW
        if not field:
            if old:
                c.mib["TcpExtTCPToZeroWindowAdv"] += 1
        elif not old:
            c.mib["TcpExtTCPFromZeroWindowAdv"] += 1
        return field

    def offer(self) -> int:
        """Linux __tcp_select_window: the window the buffer allows now (``window.select_window``),
        and what Linux does beside it when less than half the buffer is free: quick ACKs end,
        and under memory pressure rcv_ssthresh drops to four segments first."""
        c = self.conn
        ws = c.rcv_wscale
        unit = 1 << ws
        shrink = c.config.shrink_window and ws > 0
        ratio = self.scaling_ratio
        rcvbuf = c.rcvbuf_limit
        allowed = (rcvbuf * ratio) >> 8                       # tcp_full_space
        free = ((rcvbuf - self.rmem_alloc()) * ratio) >> 8    # tcp_space
        clamp = self.window_clamp
        full = clamp if 0 < clamp < allowed else allowed
        if (free & -unit if shrink else free) < full >> 1:
            self.quickack = 0                                 # icsk_ack.quick = 0
            if c.stack.mem.pressure:
                c.rcv_ssthresh = min(c.rcv_ssthresh, 4 * self.rcv_advmss())   # tcp_adjust_rcv_ssthresh
        return select_window(free, allowed, full, c.rcv_ssthresh, ws, c.rcv_mss, self.rcv_wnd, shrink)

    def event_data_recv(self, now: float) -> None:
        """Linux tcp_event_data_recv, its ACK-timing part: the first data starts the delayed-ACK
        engine at TCP_ATO_MIN; later data moves the timeout with the inter-arrival time, and
        data after a gap longer than the RTO is ACKed quickly again (tcp_incr_quickack)."""
        c = self.conn
        ato_min = c.config.delack_min
        if not self.ato:
            self.ato = ato_min
        else:
            gap = now - self.lrcvtime
            if gap <= ato_min / 2:
                self.ato = self.ato / 2 + ato_min / 2
            elif gap < self.ato:
                self.ato = min(self.ato / 2 + gap, c.rtt.timeout)
            elif gap > c.rtt.timeout:
                self.incr_quickack(c.config.quickack_segments)
        self.lrcvtime = now
        self.drs.measure(c.rcv_nxt, self.rcv_wnd, int(now * 1e6))   # tcp_rcv_rtt_measure

    def delack_fired(self) -> None:
        """Linux tcp_delack_timer_handler: a delayed ACK had to wait for its timer, so the
        ATO was too short (doubled, up to the RTO), or interactive mode was wrong (left, and
        the ATO back to the minimum)."""
        c = self.conn
        if self.pingpong:
            self.pingpong = False
            self.ato = c.config.delack_min
        else:
            self.ato = min(2 * self.ato, c.rtt.timeout)

    def incr_quickack(self, max_quickacks: int) -> None:
        """Linux tcp_incr_quickack: allow up to half the window's worth of immediate ACKs."""
        c = self.conn
        quick = c.rcv_adv - c.rcv_nxt
        quick = quick // (2 * max(c.rcv_mss, 1)) if quick > 0 else 0
        quick = min(quick or 2, max_quickacks)
        if quick > self.quickack:
            self.quickack = quick

    def delack_timeout(self) -> float:
        """Linux tcp_send_delayed_ack: the ATO, bounded by the RTT once it exceeds the minimum
        (and by TCP_DELACK_MAX in interactive mode); 0 before any data (the ACK goes at the
        next tick: a lone FIN on a connection that never received data is ACKed at once)."""
        c = self.conn
        cfg = c.config
        ato = self.ato
        if ato > cfg.delack_min:
            max_ato = cfg.delack_max if self.pingpong else 0.5
            srtt = c.rtt.srtt
            if srtt is not None:
                max_ato = min(max_ato, max(srtt, cfg.delack_min))
            ato = min(ato, max_ato)
        return min(ato, cfg.delack_max)

    def initialize_rcv_mss(self) -> None:
        """Linux tcp_initialize_rcv_mss: a cautious first guess of the peer's segment size
        (at most 536 bytes) until data shows the real one (``measure_rcv_mss``)."""
        c = self.conn
        hint = min(self.advmss(), c.mss, TCP_MSS_DEFAULT)
        wnd = c.rcv_adv - c.rcv_nxt
        if wnd > 0:
            hint = min(hint, wnd // 2)
        c.rcv_mss = max(hint, TCP_MIN_MSS)

    def inq(self) -> int:
        """Linux tcp_inq (SIOCINQ/FIONREAD): bytes the application can read; none before the
        handshake completes; a received FIN is not a byte."""
        c = self.conn
        if c.state is State.SYN_SENT or c.state is State.SYN_RECEIVED:
            return 0
        return len(c.rcv_buf)

    def inq_hint(self) -> int:
        """Linux tcp_inq_hint (the TCP_CM_INQ control message): as ``inq`` but a received FIN
        counts as one, so a reader knows to read on until it sees the end of the stream."""
        c = self.conn
        return len(c.rcv_buf) + (1 if c.fin_received else 0)

    def advmss(self) -> int:
        """The MSS we advertise (Linux tp->advmss: the route's, clamped by TCP_MAXSEG)."""
        c = self.conn
        own = c.path.advmss()
        return min(own, c.user_mss) if c.user_mss else own

    def measure_rcv_mss(self, seg_len: int, gso_size: int, flags: int, cost: int = 0) -> None:
        """Linux tcp_measure_rcv_mss: the peer's segment size, as data arrives.

        A GRO packet counts with its segment size; a segment at least as long as the current
        estimate sets it (up to our advertised MSS). A shorter one sets it only when two in a
        row have the same length and look full-sized (no FIN/URG/SYN/PSH, RFC 1122 sizes).
        """
        c = self.conn
        lss = self.last_seg_size
        self.last_seg_size = 0
        length = gso_size or seg_len
        if length >= c.rcv_mss:
            if length != c.rcv_mss and cost:
                self._measure_ratio(seg_len, cost)
            c.rcv_mss = min(length, self.advmss())
            return
        header = 20 + (12 if c.ts_ok else 0) + (20 if c.md5_key is not None else 0)
        length += header
        if length >= TCP_MSS_DEFAULT + 20 or (length >= TCP_MIN_MSS + 20 and not flags & _REMNANT):
            length -= header
            self.last_seg_size = length
            if length == lss:
                c.rcv_mss = length

    def _measure_ratio(self, seg_len: int, cost: int) -> None:
        """Linux tcp_measure_rcv_mss (6.x): a new segment size measures how much window a
        buffer byte holds (``cost`` is the segment's truesize); a changed ratio resizes the
        window clamp to the buffer (tcp_set_window_clamp)."""
        ratio = scaling_ratio(seg_len, cost)
        if ratio != self.scaling_ratio:
            self.scaling_ratio = ratio
            self.set_window_clamp(win_from_space(self.conn.rcvbuf_limit, ratio))
            if self.window_clamp < self.drs.space:
                self.drs.space = self.window_clamp

    def data_arrives(self, seg: Segment, seg_off: int, now: float) -> None:
        """RFC 9293 §3.10.7.4 seventh/eighth: queue in-order data, reassemble, handle FIN."""
        c = self.conn
        payload = seg.payload
        fin = bool(seg.flags & FIN)
        if seg.flags & SYN:
            seg_off += 1          # data in a SYN starts after the SYN's sequence number
        plen = len(payload)
        mib = c.mib
        c.last_rcv_time = now
        nxt = c.rcv_nxt
        if plen:
            c.data_segs_in += 1
        # Trim what was already received (RFC 9293 §3.10.7.4 "trim").
        if seg_off < nxt:
            cut = nxt - seg_off
            if cut >= plen and not fin:
                self.dsack = (seg_off, seg_off + plen) if c.sack_ok and c.config.dsack else None
                mib["TcpExtTCPDSACKOldSent" if self.dsack else "UsertcpDupData"] += 1
                self.schedule_ack(now, immediate=True)
                return
            if cut > plen:
                cut = plen
            if c.sack_ok and c.config.dsack and cut:
                self.dsack = (seg_off, seg_off + cut)
            payload = payload[cut:]
            seg_off += cut
            plen -= cut
        if plen:
            self.rtt_measure_ts(seg.ts_ecr, plen + fin, now)
            if self._no_room(seg_off, payload, now):
                return
        if plen and c.ecn_flags:
            self.ecn_check_ce(seg.ecn, now)   # Linux tcp_event_data_recv / tcp_data_queue_ofo
        if seg_off == nxt:
            self._in_order(payload, fin, now, seg)
        else:
            # Out of order: queue it and send an immediate duplicate ACK (RFC 5681 §4.2).
            irs = c.irs
            if c.sack_ok and c.config.dsack:
                dup = c.ooo.duplicate_span((irs + seg_off) & SEQ_MASK, plen)
                if dup is not None:       # Linux tcp_data_queue_ofo: D-SACK what was held
                    self.dsack = (seg_off + dup[0], seg_off + dup[1])
                    mib["TcpExtTCPDSACKOfoSent"] += 1
            held = self.rmem_alloc()
            if not c.ooo.add((irs + seg_off) & SEQ_MASK, payload, fin, (irs + nxt) & SEQ_MASK):
                mib["TcpExtTCPOFODrop"] += 1
            else:
                mib["TcpExtTCPOFOQueue"] += 1
                if c.sack_ok:     # tcp_data_queue_ofo: not without SACK, to force the dup ACKs;
                    # and before the segment is charged (skb_set_owner_r comes after)
                    self.grow_window(plen, truesize(payload), held)
            self.schedule_ack(now, ofo=True)

    def _no_room(self, seg_off: int, payload: memoryview, now: float) -> bool:
        """Drop (and ACK) data the buffers cannot take; True when dropped.

        Linux tcp_data_queue does not trim to the window's right edge: a segment that starts in
        the window is taken whole while the receive buffer has room (tcp_try_rmem_schedule;
        kernel_receive_probe.py: 2000 bytes into a 1152-byte window are all ACKed). Past the
        buffer it is dropped, unless it is in order and nothing waits to be read (forced)."""
        c = self.conn
        mib = c.mib
        plen = len(payload)
        in_order = seg_off == c.rcv_nxt
        if self.rmem_alloc() > c.rcvbuf_limit:
            self.clamp_window()      # tcp_try_rmem_schedule -> tcp_prune_queue -> tcp_clamp_window
        if seg_off + plen > c.rcv_adv:
            mib["UsertcpBeyondWindow"] += 1
        held = self.rmem_alloc()     # sk_rmem_alloc: truesize, as Linux compares it with sk_rcvbuf
        if held > c.rcvbuf_limit and (not in_order or len(c.rcv_buf)):
            if not c.ooo.empty and prune_queue(c, payload, seg_off):     # tcp_try_rmem_schedule
                return False
        elif c.stack.mem.recv_allowed(truesize(payload), held, c.config.rmem[0]) \
                or prune_queue(c, payload, seg_off):
            return False
        # Past the socket's buffer or the stack-wide limit (Linux tcp_mem): drop and count the
        # data as tcp_data_queue (in order) or tcp_data_queue_ofo does; the ACK restates what
        # we have, and the peer retransmits when memory frees.
        mib["TcpExtTCPRcvQDrop" if in_order else "TcpExtTCPOFODrop"] += 1
        mib["SKB_DROP_REASON_PROTO_MEM"] += 1
        self.schedule_ack(now, immediate=True)
        return True

    def _in_order(self, payload: memoryview, fin: bool, now: float, seg: Segment | None = None) -> None:
        """Data at RCV.NXT: deliver it and what reassembly now releases, then the FIN."""
        c = self.conn
        plen = len(payload)
        nxt = c.rcv_nxt
        if plen:
            cost = truesize(payload)
            if seg is not None:     # Linux tcp_event_data_recv: measure, then grow the window
                self.measure_rcv_mss(plen, seg.gso_size, seg.flags, cost)
            self.event_data_recv(now)
            if not c.read_shutdown or not c.closed_by_app:
                c.rcv_buf.append(payload, now)
            if plen >= 128:         # the segment is charged first (tcp_queue_rcv)
                self.grow_window(plen, cost)
            nxt += plen
            c.bytes_received += plen
        if fin:
            nxt += 1
        if fin and not c.ooo.empty:
            c.ooo.clear()       # nothing can follow a FIN (RFC 9293 §3.10.7.4 eighth)
        if not c.ooo.empty:
            nxt_seq = (c.irs + nxt) & SEQ_MASK
            chunks, new_seq, ooo_fin = c.ooo.pop_ready(nxt_seq)
            for chunk in chunks:
                c.rcv_buf.append(chunk, now)
                c.bytes_received += len(chunk)
            if ooo_fin:
                fin = True
            nxt += seq_diff(new_seq, nxt_seq)
            # RFC 5681 §4.2, as Linux tcp_data_queue: at once when the gap is closed; while one
            # remains, as out-of-order data (RCV.NXT moved, so that ACK goes at once too, and it
            # counts among the duplicates SACK compression sends before it holds any).
            immediate = c.ooo.empty
            ofo = not immediate
        else:
            immediate = ofo = False
        c.rcv_nxt = nxt
        if fin:
            self._fin(now, plen, immediate)
        elif plen or immediate or ofo:
            self.schedule_ack(now, immediate=immediate, length=plen, ofo=ofo)
        if fin or plen:
            c.wake(KEY_READABLE)  # sk_data_ready() wakes the wait queue, writers too
        if c.on_readable is not None and (fin or c.rcv_buf.size):
            notify(c, c.on_readable)

    def _fin(self, now: float, plen: int, immediate: bool) -> None:
        """Linux tcp_fin: in ESTABLISHED (or SYN-RECEIVED) the connection turns interactive and
        the FIN's ACK is only scheduled, so it waits for the delayed-ACK timer unless more than
        a full frame is unacknowledged (tcp_kernel_probe: ~40 ms after earlier data, at the next
        tick on a connection that never received data); a FIN crossing ours in FIN-WAIT is
        ACKed at once."""
        c = self.conn
        st = c.state
        c.fin_arrives(now)
        if st is State.ESTABLISHED or st is State.SYN_RECEIVED:
            self.pingpong = True           # inet_csk_enter_pingpong_mode
            self.schedule_ack(now, immediate=immediate, length=plen)
        else:
            self.schedule_ack(now, immediate=True)

    def ecn_check_ce(self, ecn: int, now: float) -> None:
        """Linux __tcp_ecn_check_ce: the IP ECN field of a data segment (RFC 3168 §6.1.3)."""
        c = self.conn
        ef = c.ecn_flags
        if not ef & ECN_OK:
            return
        if c.cc.needs_ecn and ecn != ECN_NOT_ECT:
            self.echo_ce_state(ecn == ECN_CE, now)   # CA_EVENT_ECN_IS_CE / CA_EVENT_ECN_NO_CE
            ef = c.ecn_flags
        if ecn == ECN_CE:
            c.mib["UsertcpECNCeDataSegs"] += 1
            if not ef & ECN_DEMAND_CWR:
                # Echo ECE from now until the peer's CWR; do not delay the ACKs that carry
                # it, the sender may have a very small cwnd.
                self.enter_quickack_mode(2)
                ef |= ECN_DEMAND_CWR
            c.ecn_flags = ef | ECN_SEEN
        elif ecn != ECN_NOT_ECT:
            c.ecn_flags = ef | ECN_SEEN
        elif ef & ECN_SEEN:
            # Not ECT on an ECN connection that has seen ECT: probably a retransmission
            # (RFC 3168 §6.1.5), so ACK it quickly.
            self.enter_quickack_mode(2)

    def echo_ce_state(self, ce: bool, now: float) -> None:
        """RFC 8257 §3.2, Linux dctcp_ece_ack_update: for a controller that measures the
        marking fraction, ECE tells the CE state of the packets each ACK covers instead of
        latching until CWR. When the state changes, an ACK held back by the delayed-ACK timer
        goes out first with the old state, and the packet that changed it is ACKed at once."""
        c = self.conn
        if ce != self.ce_state:
            if self.ack_pending and c.timers.delack_deadline != INF:
                self._set_ece(self.ce_state)
                c.tx.send_ack(now)      # acknowledges up to the prior RCV.NXT
            self.ack_now = True         # Linux ICSK_ACK_NOW
        self.ce_state = ce
        self._set_ece(ce)

    def _set_ece(self, ce: bool) -> None:
        """Linux dctcp_ece_ack_cwr: ECE on the next ACKs exactly while ``ce``."""
        c = self.conn
        if ce:
            c.ecn_flags |= ECN_DEMAND_CWR
        else:
            c.ecn_flags &= ~ECN_DEMAND_CWR

    def enter_quickack_mode(self, max_quickacks: int) -> None:
        """Linux tcp_enter_quickack_mode: the next ACKs go out at once, interactive mode off."""
        self.incr_quickack(max_quickacks)
        self.pingpong = False
        self.ato = self.conn.config.delack_min

    def grow_window(self, plen: int, cost: int, held: int = -1) -> None:
        """Linux tcp_grow_window: a segment whose overhead the buffer can carry opens
        rcv_ssthresh (by two segments, or twice its length), up to the clamp and the free
        space, and earns a quick ACK; under memory pressure rcv_ssthresh drops instead.
        ``held``: the buffer memory to count (default: what is held now)."""
        c = self.conn
        ratio = self.scaling_ratio
        space = ((c.rcvbuf_limit - (self.rmem_alloc() if held < 0 else held)) * ratio) >> 8   # tcp_space
        clamp = self.window_clamp
        room = (clamp if 0 < clamp < space else space) - c.rcv_ssthresh
        if room <= 0:
            return
        if c.stack.mem.pressure:
            c.rcv_ssthresh = min(c.rcv_ssthresh, 4 * self.rcv_advmss())      # tcp_adjust_rcv_ssthresh
            return
        incr = grow_increment(plen, cost, ratio, c.rcv_ssthresh, c.config.rmem[2], c.rcv_mss,
                              self.rcv_advmss())
        if incr:
            c.rcv_ssthresh += min(room, incr)
            self.quickack |= 1                        # icsk_ack.quick |= 1

    def schedule_ack(self, now: float, *, immediate: bool = False, length: int = 0,
                     ofo: bool = False) -> None:
        """Delayed ACKs (RFC 9293 §3.8.6.3, RFC 5681 §4.2) with Linux's quick-ACK start;
        ``ofo``: out-of-order data arrived, whose ACKs Linux may compress (tcp/sack_compress.py)."""
        c = self.conn
        tm = c.timers
        self.ack_pending += max(length, 1)
        if immediate:
            self.ack_now = True
            return
        if self.quickack > 0 and not self.pingpong:
            self.quickack -= 1
            self.ack_now = True
            return
        # Linux __tcp_ack_snd_check: more than one full frame received since the last ACK, and
        # the window's right edge would move at least as far (tcp_recvmsg ACKs otherwise),
        # or nothing waits to be read (SO_RCVLOWAT 1).
        if c.rcv_nxt - c.last_ack_sent > c.rcv_mss and (not c.rcv_buf.size or self.offer() >= self.rcv_wnd):
            self.ack_now = True
            return
        if ofo and not c.ooo.empty:
            self._compress_sack(now)
            return
        ato = self.delack_timeout()
        if ato <= 0 or (tm.delack_deadline != INF and tm.delack_deadline <= now + ato / 4):
            # No ATO yet (no data received): Linux's timer fires at the next tick; or the
            # pending delayed ACK is about to go anyway (tcp_send_delayed_ack).
            self.ack_now = True
            return
        tm.delack_deadline = min(tm.delack_deadline, now + ato)


    def _compress_sack(self, now: float) -> None:
        """Linux __tcp_ack_snd_check with out-of-order data queued: three duplicate ACKs at
        once, then held back, one per timer (tcp/sack_compress.py)."""
        c = self.conn
        cfg = c.config
        if not c.sack_ok or not self.comp.hold(c.rcv_nxt, cfg.comp_sack_nr):
            self.ack_now = True
            return
        tm = c.timers
        if tm.sack_deadline == INF:
            tm.sack_deadline = now + compress_delay(self.drs.rtt_us, c.rtt.srtt, cfg.comp_sack_delay_ns)

    def compressed_ack_timer(self, now: float) -> None:
        """Linux tcp_compressed_ack_kick: one ACK for the ones held (it is not counted as
        compressed)."""
        comp = self.comp
        if comp.count:
            comp.count -= 1
            self.conn.tx.send_ack(now)

    def compressed_acks_sent(self) -> None:
        """An ACK went out: the held ones it replaces are TcpExtTCPAckCompressed, the timer
        stops (Linux tcp_event_ack_sent)."""
        c = self.conn
        c.mib["TcpExtTCPAckCompressed"] += self.comp.count
        self.comp.count = 0
        c.timers.sack_deadline = INF

    def after_read(self, now: float) -> None:
        """Linux tcp_cleanup_rbuf after a read: the ACK of every second full segment that the
        input path left to the reader (its window would not have moved), or a window update
        if reading opened the window a lot."""
        c = self.conn
        if c.state not in RECEIVING:
            return
        self.space_adjust(now)                 # tcp_recvmsg: tcp_rcv_space_adjust, then cleanup
        if self.ack_pending and c.rcv_nxt - c.last_ack_sent > c.rcv_mss:
            c.tx.send_ack(now)
            c.reschedule()
            return
        cur = max(c.rcv_adv - c.rcv_nxt, 0)
        # Update when the window at least doubles and was at most half the clamp
        # ("__tcp_select_window() is not cheap": only then is it asked).
        if 2 * cur > self.window_clamp:
            return
        new = self.offer()
        if new and new >= 2 * cur:
            c.tx.send_ack(now)
            c.reschedule()

    def set_rcv_ssthresh(self, value: int) -> None:
        """Memory pressure's window limit (tcp_clamp_window, tcp_adjust_rcv_ssthresh)."""
        self.conn.rcv_ssthresh = value

    def store_ts_recent(self, ts_val: int, now: float) -> None:
        """tcp_store_ts_recent: a checked segment's TSval becomes TS.Recent (RFC 7323 §4.3)."""
        c = self.conn
        c.ts_recent = ts_val
        c.ts_recent_time = now

    def fast_ts_recent(self, ts_val: int, now: float) -> None:
        """RFC 7323 §4.3 for a predicted segment (SEQ = RCV.NXT, PAWS already passed)."""
        c = self.conn
        if ts_val >= 0 and c.rcv_nxt <= c.last_ack_sent and not (ts_val - c.ts_recent) & 0x80000000:
            c.ts_recent = ts_val
            c.ts_recent_time = now

    def fast_data(self, payload: memoryview, ts_val: int, ts_ecr: int, now: float, ecn: int = 0,
                  gso_size: int = 0, flags: int = ACK) -> None:
        """Predicted in-order data with the ACK unchanged: the slow path's effects, no more.

        ``ecn`` is the IP header's ECN field (Linux tcp_event_data_recv -> tcp_ecn_check_ce);
        ``gso_size`` the segment size of a GRO packet (0: a plain segment), ``flags`` the TCP flags.
        """
        c = self.conn
        tm = c.timers
        rec = c.recovery
        c.segs_in += 1
        self.fast_ts_recent(ts_val, now)
        self.rtt_measure_ts(ts_ecr, len(payload), now)
        seg_off = c.rcv_nxt
        if seg_off > c.snd_wl1 or (seg_off == c.snd_wl1 and c.snd_una == c.snd_wl2):
            c.snd_wl1 = seg_off
            c.snd_wl2 = c.snd_una
            if c.snd_wnd and tm.probe_deadline != INF:
                tm.probe_deadline = INF
                tm.probes_out = 0
        self._fast_queue(payload, now, ecn, gso_size, flags)
        # output() has work only for these conditions; otherwise it would change nothing.
        if (self.ack_now or rec.lost_bytes or c.keepalive or tm.probe_deadline != INF
                or c.snd_nxt <= c.snd_buf.end + (1 if c.fin_queued else 0)
                or (c.snd_max > c.snd_una and tm.rto_deadline == INF)):
            c.tx.run(now)
        c.reschedule()

    def fast_data_ack(self, ack_off: int, payload: memoryview, ts_val: int, ts_ecr: int, now: float,
                      ecn: int = 0, gso_size: int = 0, flags: int = ACK) -> None:
        """Predicted in-order data whose ACK advances SND.UNA (Linux tcp_rcv_established queues
        it, then calls tcp_ack with FLAG_DATA); the effects in the slow path's order, the
        ACK first, then the data, so both paths stay byte-identical."""
        c = self.conn
        c.segs_in += 1
        self.fast_ts_recent(ts_val, now)
        c.recovery.fast_ack_advance(ack_off, ts_val, ts_ecr, now)
        self.rtt_measure_ts(ts_ecr, len(payload), now)
        self._fast_queue(payload, now, ecn, gso_size, flags)
        if c.state is not State.CLOSED:
            c.tx.run(now)
            c.tx.check_space()
        c.reschedule()

    def _fast_queue(self, payload: memoryview, now: float, ecn: int, gso_size: int, flags: int) -> None:
        """In-order data at RCV.NXT with room known (Linux tcp_queue_rcv + tcp_event_data_recv)."""
        c = self.conn
        plen = len(payload)
        c.last_rcv_time = now
        c.data_segs_in += 1
        cost = truesize(payload)
        self.measure_rcv_mss(plen, gso_size, flags, cost)
        self.event_data_recv(now)
        if c.ecn_flags:
            self.ecn_check_ce(ecn, now)
        c.rcv_buf.append(payload, now)
        if plen >= 128:
            self.grow_window(plen, cost)
        c.rcv_nxt += plen
        c.bytes_received += plen
        self.schedule_ack(now, length=plen)
        c.wake(KEY_READABLE)          # sk_data_ready()
        if c.on_readable is not None:
            notify(c, c.on_readable)

    def predicted(self, seg: Segment, now: float) -> None:
        """A predicted segment that needs the full ACK processing: a duplicate ACK, or any
        segment while recovering or SACK state is held (Linux's fast path hands these to
        tcp_ack as well). What the prediction proved is skipped (ESTABLISHED, SEQ = RCV.NXT,
        flags ACK[|PSH], window unchanged, PAWS passed, SND.UNA <= SEG.ACK <= SND.NXT, room
        for the data); the rest is the slow path's (RFC 9293 §3.10.7.4 fifth to seventh)."""
        c = self.conn
        c.segs_in += 1
        self.fast_ts_recent(seg.ts_val, now)
        seg_off = c.rcv_nxt
        c.recovery.on_ack(seg, c.snd_off(seg.ack), seg_off, now)
        if len(seg.payload) and c.state in RECEIVING:
            self.data_arrives(seg, seg_off, now)
        if c.state is not State.CLOSED:
            c.tx.run(now)
            c.tx.check_space()
        c.reschedule()

    def read(self, n: int) -> bytes:
        """Up to ``n`` queued bytes for the application, bounded by the urgent mark."""
        c = self.conn
        return self.urgent.recv(c, n) if self.urgent.held else c.rcv_buf.read(n)

    def read_into(self, target: memoryview) -> int:
        c = self.conn
        if not self.urgent.held:
            return c.rcv_buf.read_into(target)
        data = self.urgent.recv(c, len(target))
        target[:len(data)] = data
        return len(data)

    def update_prediction(self) -> None:
        """Turn header prediction on only while nothing forbids it (Linux tcp_fast_path_check)."""
        c = self.conn
        # Recovery and SACK state do not turn it off: Linux's fast path runs tcp_ack on
        # every predicted segment, and ``predicted`` does the full ACK processing then.
        if (c.state is State.ESTABLISHED and c.config.header_prediction and c.ooo.empty
                and not c.closed_by_app and c.rcv_adv > c.rcv_nxt
                and c.rcvbuf_limit > len(c.rcv_buf) and not self.urgent.held
                and (c.md5_key is None or c.config.md5_fast_path) and c.accecn is None):
            hdr_len = 20 + (12 if c.ts_ok else 0) + (20 if c.md5_key is not None else 0)
            window = c.snd_wnd >> c.snd_wscale
            # A window the field cannot say (the SYN-ACK's, unscaled) is never predicted: Linux
            # tcp_rcv_synsent_state_process leaves prediction off when the peer scales.
            exact = window <= 0xFFFF and window << c.snd_wscale == c.snd_wnd
            c.pred_flags = (hdr_len >> 2) << 28 | ACK << 16 | window if exact else 0
        else:
            c.pred_flags = 0

