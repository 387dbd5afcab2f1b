"""Loss recovery: the SACK scoreboard and what it decides (RFC 6675, RFC 8985, RFC 6937).

The scoreboard is the retransmission queue of :class:`SentSegment` records with its
SACKed/lost/retransmitted byte counts (Linux sacked_out/lost_out/retrans_out). Loss is
detected by RACK (RFC 8985, Linux's default for SACK peers), by DupThresh (RFC 6675
IsLost) without RACK, or by duplicate ACKs without SACK (RFC 5681/6582 NewReno). Recovery
reduces the window with PRR (RFC 6937); an ECN echo reduces it once per window (RFC 3168
§6.1.2, Linux's CWR state).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from usertcp.tcp.appguard import notify
from usertcp.tcp.rtx_queue import RtxQueue, SentSegment
from usertcp.tcp.seq import SEQ_MASK, SEQ_MOD
from usertcp.tcp.states import State
from usertcp.wire.segment import ACK, CWR, ECE, FIN, SYN, Segment

if TYPE_CHECKING:
    from usertcp.tcp.connection import Connection

INF: Final = float("inf")
_SEQ_HALF: Final = SEQ_MOD >> 1

# Linux congestion-avoidance states for tcpi_ca_state.
CA_OPEN: Final = 0
CA_DISORDER: Final = 1
CA_CWR: Final = 2
CA_RECOVERY: Final = 3
CA_LOSS: Final = 4

# Linux tp->ecn_flags (include/net/tcp.h).
ECN_OK: Final = 0x1           # negotiated in the handshake
ECN_QUEUE_CWR: Final = 0x2    # cwnd was reduced: set CWR on the next new data segment
ECN_DEMAND_CWR: Final = 0x4   # a CE mark arrived: set ECE on every segment until the peer's CWR
ECN_SEEN: Final = 0x8         # an ECT or CE segment arrived


class Recovery:
    """The scoreboard of one connection and its loss-recovery state (Linux tcp_sock's
    sacked_out/lost_out/retrans_out, icsk_ca_state, high_seq, prr_*, rack)."""

    __slots__ = ("acked_unsacked", "ca_state", "conn", "dupacks", "fack_prior", "high_sacked",
                 "lost_bytes", "prior_cwnd", "prr_delivered", "prr_out", "rack_end", "rack_fack",
                 "rack_reord", "rack_rtt", "rack_xmit_ts", "recover", "reno_dupacks", "reord_seen",
                 "reord_seen_in", "reordering", "retrans_bytes", "rtx", "rtx_hint", "sacked_bytes",
                 "delivered_ce")

    def __init__(self, conn: Connection, reordering: int) -> None:
        self.conn = conn
        self.rtx = RtxQueue()           # sent and not cumulatively acked, in order
        self.rtx_hint = 0               # no record below this offset waits to be retransmitted
        self.sacked_bytes = 0
        self.lost_bytes = 0
        self.retrans_bytes = 0
        self.reno_dupacks = 0          # dupacks counted as "virtually SACKed" without SACK
        self.dupacks = 0
        self.ca_state = CA_OPEN
        self.recover = 0               # RFC 6582/6675 RecoveryPoint (offset)
        self.high_sacked = 0
        self.acked_unsacked = 0        # bytes the last ACK acked that were not SACKed before
        self.prior_cwnd = 0            # RFC 6937 RecoverFS (Linux prior_cwnd)
        self.prr_delivered = 0
        self.prr_out = 0
        # RACK-TLP (RFC 8985), Linux's default loss detection for SACK connections.
        self.rack_xmit_ts = -1.0       # RACK.xmit_ts: send time of the latest-sent delivered segment
        self.rack_end = 0              # RACK.end_seq (offset)
        self.rack_rtt = 0.0            # RACK.rtt
        self.rack_fack = 0             # highest end offset delivered (RACK.fack)
        self.fack_prior = -1           # rack_fack before the ACK being processed
        self.rack_reord = False        # reordering seen (RACK.reord)
        self.reordering = reordering   # tp->reordering, in segments (tcpi_reordering)
        self.reord_seen = 0            # reordering events (tcpi_reord_seen)
        self.delivered_ce = 0          # Linux tp->delivered_ce of RFC 3168 ECN (AccECN: tcp/accecn.py)
        self.reord_seen_in = -1        # segs_in of the ACK that counted the last one

    def trace_ca(self, old: int, trigger: str, now: float) -> None:
        """Congestion state and window changes for the event trace."""
        c = self.conn
        names = ("open", "disorder", "cwr", "recovery", "loss")
        c.stack.trace(c, "tcp:congestion_state",
                         {"old": names[old], "new": names[self.ca_state], "trigger": trigger}, now)
        c.stack.trace(c, "tcp:cwnd", {
            "cwnd": c.cc.cwnd, "ssthresh": c.cc.ssthresh if c.cc.ssthresh < 1 << 60 else None,
            "bytes_in_flight": c.in_flight, "smoothed_rtt": c.rtt.srtt, "rto": c.rtt.timeout}, now)

    def outstanding_segments(self) -> int:
        c = self.conn
        return max((c.snd_nxt - c.snd_una + c.mss - 1) // max(c.mss, 1), 0)

    def process_sack(self, blocks: tuple[tuple[int, int], ...], ack_off: int, now: float) -> bool:
        """Mark SACKed records (RFC 2018 §3, RFC 6675 §4 update()). Returns True if new data was SACKed."""
        c = self.conn
        new = False
        sack_range = self.rtx.sack_range
        mss = max(c.mss, 1)
        una = c.snd_una
        una_seq = (c.iss + una) & SEQ_MASK
        snd_max = c.snd_max
        oldest = una - c.max_snd_wnd
        snd_buf, sndbuf, refused, tag = c.snd_buf, c.sndbuf_limit, self._split_refused, self._tag_sacked
        first_sackt = -1.0
        for left_seq, right_seq in blocks:
            # c.snd_off() of both edges, inlined: this loop is what a hostile peer drives.
            left = (left_seq - una_seq) & SEQ_MASK
            left = una + (left - SEQ_MOD if left >= _SEQ_HALF else left)
            right = (right_seq - una_seq) & SEQ_MASK
            right = una + (right - SEQ_MOD if right >= _SEQ_HALF else right)
            if right <= left or right > snd_max or left < oldest:
                c.mib["TcpExtTCPSACKDiscard"] += 1
            elif right <= ack_off or left < una:
                c.mib["TcpExtTCPDSACKRecv"] += 1    # RFC 2883: a duplicate report
            else:
                # Linux tcp_sacktag_walk (tcp/rtx_queue.py).
                sackt = sack_range(left, right, mss, snd_buf, sndbuf, refused, tag, now)
                if sackt != -1.0:
                    new = True
                    if first_sackt < 0.0:
                        first_sackt = sackt
        if first_sackt >= 0.0 and not c.ts_ok:
            # One RTT sample per ACK, from the first newly SACKed segment never retransmitted
            # (Linux tcp_ack_update_rtt's sack_rtt_us), not one per segment.
            rtt = now - first_sackt
            c.rtt.on_sample(rtt if rtt > 1e-6 else 1e-6)
        return new

    def _tag_sacked(self, r: SentSegment, now: float) -> None:
        """Linux tcp_sacktag_one: ``r`` is newly SACKed; it stops counting as lost or
        retransmitted, and is a delivery for RACK (process_sack takes the RTT sample)."""
        c = self.conn
        n = r.end - r.start
        r.sacked = True                  # the queue took it out of the send-time order
        self.sacked_bytes += n
        c.delivered_segs += r.pcount
        if r.lost:
            self.lost_bytes -= n
            r.lost = False
        if r.retrans:
            self.retrans_bytes -= n
            r.retrans = False
        if r.end > self.high_sacked:
            self.high_sacked = r.end
        self.rack_note(r, now)

    def split_record(self, index: int, at: int) -> SentSegment | None:
        """Cut the queued record at ``index`` at offset ``at`` and return the tail, or None if
        Linux tcp_fragment would refuse it for memory (counted as TcpExtTCPWqueueTooBig). The
        send buffer's skb is cut there too: each piece is charged to sk_wmem_queued."""
        c = self.conn
        if self.rtx.split_refused(index, c.snd_buf.wmem_queued, c.sndbuf_limit):
            self._split_refused()
            return None
        c.snd_buf.split(at - 1)          # offset 1 is data byte 0
        return self.rtx.split(index, at)

    def _split_refused(self) -> None:
        self.conn.mib["TcpExtTCPWqueueTooBig"] += 1

    def timeout_mark_lost(self) -> None:
        """Linux tcp_timeout_mark_lost at an RTO: everything not SACKed is lost. A SACKed head
        means the receiver reneged (RFC 2018 §8): forget every SACK mark, and retransmit from
        SND.UNA."""
        c = self.conn
        rtx = self.rtx
        reneged = bool(rtx) and rtx[0].sacked
        if reneged:
            c.mib["TcpExtTCPSACKReneging"] += 1
            self.sacked_bytes = 0
        lost = 0
        for r in rtx:
            if reneged:
                r.sacked = False
            r.retrans = False
            if not r.sacked:
                r.lost = True
                lost += r.end - r.start
        self.retrans_bytes = 0
        self.lost_bytes = lost
        self.rtx_hint = 0

    def first_to_retransmit(self) -> int:
        """Position of the first record that is lost and neither SACKed nor retransmitted
        (``len(rtx)`` if none), resuming from where the last search stopped, as Linux
        tcp_xmit_retransmit_queue starts at tp->retransmit_skb_hint."""
        i, self.rtx_hint = self.rtx.first_lost(self.rtx_hint)
        return i

    def mark_head_lost(self) -> None:
        """Linux tcp_mark_head_lost(sk, 1, 1) without SACK: one segment is lost, cut from
        the head skb when that holds several (tcp_fragment)."""
        r = self.rtx[0]
        if r.end - r.start - (1 if r.fin else 0) > self.conn.mss \
                and self.split_record(0, r.start + self.conn.mss) is None:
            return                       # tcp_fragment refused: Linux breaks out unmarked
        self.mark_lost(r)

    def mark_lost(self, r: SentSegment) -> None:
        c = self.conn
        if r.sacked or r.lost:
            return
        n = r.end - r.start
        r.lost = True
        if r.start < self.rtx_hint:
            self.rtx_hint = r.start
        self.lost_bytes += n
        if c.stack.tracer is not None:
            c.stack.trace(c, "tcp:packet_lost", {
                "rel_seq": r.start, "end": r.end, "trigger": "rack" if c.config.rack and c.sack_ok
                else ("sack" if c.sack_ok else "reno")}, c.stack.now)
        if r.retrans:
            # A lost retransmission: it no longer counts in the pipe (RFC 6675 §4 SetPipe).
            r.retrans = False
            self.retrans_bytes -= n

    def retrans_try_collapse(self, index: int, space: int) -> bool:
        """Linux tcp_retrans_try_collapse, before record ``index`` (one segment shorter than
        ``space``, the MSS or the window left) is retransmitted: the records after it join it
        (tcp_collapse_retrans) while each is one segment, not SACKed, within ``space`` and the
        peer's window, and no MSG_EOR end or frag limit lies between (tcp_skb_can_collapse).
        A joined record no longer counts on its own (tcp_adjust_pcount); it takes this one's
        lost/retransmitted state. True if any joined."""
        c = self.conn
        rtx = self.rtx
        r = rtx[index]
        if not c.config.retrans_collapse or r.fin:
            return False
        space -= r.end - r.start
        reach = min(c.snd_buf.collapse_end(r.start - 1) + 1, c.snd_una + c.snd_wnd)
        joined = False
        while index + 1 < len(rtx):
            nxt = rtx[index + 1]
            n = nxt.end - nxt.start
            if nxt.sacked or nxt.pcount > 1 or nxt.start != r.end:
                break
            space -= n - (1 if nxt.fin else 0)
            if space < 0 or nxt.end - (1 if nxt.fin else 0) > reach:
                break
            self.lost_bytes += (n if r.lost else 0) - (n if nxt.lost else 0)
            self.retrans_bytes += (n if r.retrans else 0) - (n if nxt.retrans else 0)
            r.end, r.fin = nxt.end, nxt.fin
            r.tx_count = max(r.tx_count, nxt.tx_count)      # TCPCB_EVER_RETRANS
            rtx.remove(index + 1)
            joined = True
        return joined

    def detect_losses(self, now: float) -> None:
        """RACK (RFC 8985 §6.2) when enabled, as Linux does for SACK peers; else RFC 6675 IsLost."""
        c = self.conn
        if c.config.rack:
            self.rack_detect(now)
        else:
            self.dupthresh_detect()

    def rack_note(self, r: SentSegment, now: float, fack: int = -1) -> None:
        """RFC 8985 §6.2 steps 1-3: a segment was just delivered (cumulatively or by SACK).

        ``fack`` is the highest delivered end before this ACK, for cumulatively acked
        segments: SACK blocks of the same ACK do not make them look reordered (Linux prior_fack).
        """
        c = self.conn
        if r.tx_count > 1 and now - r.tx_time < (c.rtt.min_rtt or 0.0):
            return                      # the ACK may be for the original transmission
        # RFC 8985 §6.2 step 2, Linux tcp_rack_advance(): RACK.rtt is the RTT of every
        # delivered segment in turn, even one sent before RACK.xmit_ts.
        self.rack_rtt = now - r.tx_time
        if r.tx_time > self.rack_xmit_ts or (r.tx_time == self.rack_xmit_ts and r.end > self.rack_end):
            self.rack_xmit_ts = r.tx_time
            self.rack_end = r.end
        if r.end < (self.rack_fack if fack < 0 else fack):
            if r.tx_count == 1:
                # Delivered below what was already delivered, never retransmitted: reordering.
                self.rack_reord = True
                if self.reord_seen_in != c.segs_in:
                    # Linux tcp_check_sack_reordering: tp->reord_seen++, once per ACK.
                    self.reord_seen += 1
                    self.reord_seen_in = c.segs_in
                dist = -(-(self.rack_fack - r.start) // max(c.mss, 1))
                if dist > self.reordering:
                    self.reordering = min(dist, 300)       # Linux caps at tcp_max_reordering
        else:
            self.rack_fack = r.end

    def rack_reo_wnd(self) -> float:
        """RFC 8985 §6.2 step 4 (Linux tcp_rack_reo_wnd)."""
        c = self.conn
        if not self.rack_reord:
            if self.ca_state in (CA_RECOVERY, CA_LOSS):
                return 0.0
            if self.sacked_bytes >= self.reordering * c.mss:
                return 0.0
        min_rtt = c.rtt.min_rtt or 0.0
        return min(min_rtt / 4, c.rtt.srtt or min_rtt)

    def rack_detect(self, now: float) -> None:
        """RFC 8985 §6.2 step 5: lost if sent before RACK.xmit_ts and older than RTT + reo_wnd."""
        c = self.conn
        if self.rack_xmit_ts < 0:
            return
        reo = self.rack_reo_wnd()
        xts, xend = self.rack_xmit_ts, self.rack_end
        wait = INF
        rtx = self.rtx
        # Linux tcp_rack_detect_loss walks tsorted_sent_queue, oldest sent first: SACKed
        # records and those RACK marked lost are not in it.
        r = rtx.sent_first
        while r is not None:
            nxt = r.sent_next
            if r.sacked or (r.lost and not r.retrans):
                r = nxt
                continue                 # lost at an RTO, not yet resent
            if r.tx_time > xts or (r.tx_time == xts and r.end >= xend):
                break                    # this one and all later were sent after the latest delivered
            remaining = r.tx_time + self.rack_rtt + reo - now
            if remaining > 1e-9:
                # Sent no earlier than this one, every later record waits at least as long.
                wait = remaining
                break
            if r.lost:                   # a lost retransmission: eligible again
                r.retrans = False
                self.retrans_bytes -= r.end - r.start
                if r.start < self.rtx_hint:
                    self.rtx_hint = r.start
            else:
                self.mark_lost(r)
            rtx.unlink_sent(r)
            r = nxt
        # Linux adds TCP_TIMEOUT_MIN (2 ms) to the reordering timer.
        c.timers.rack_deadline = now + wait + 0.002 if wait != INF else INF

    def dupthresh_detect(self) -> None:
        """RFC 6675 §4 IsLost: DupThresh SACKed segments, or more than (DupThresh-1)*SMSS bytes, above."""
        c = self.conn
        thresh = c.config.reordering
        mss = max(c.mss, 1)
        limit = (thresh - 1) * mss
        sacked_above = 0
        sacked_segs = 0
        for r in reversed(self.rtx):
            if r.sacked:
                n = r.end - r.start
                sacked_above += n
                sacked_segs += -(-n // mss)      # in segments: SACKed records are merged
            elif (sacked_segs >= thresh or sacked_above > limit) and not r.lost and not r.retrans:
                self.mark_lost(r)

    def init_cwnd_reduction(self, now: float, *, ecn_echo: bool = False) -> None:
        """Linux tcp_init_cwnd_reduction: start one PRR-paced reduction (RFC 6937)."""
        c = self.conn
        # RFC 6937 PRR state; Linux uses the cwnd before the reduction as RecoverFS.
        self.prior_cwnd = max(c.cc.cwnd, c.mss)
        self.prr_delivered = 0
        self.prr_out = 0
        # Linux bases ssthresh on cwnd (tcp_reno_ssthresh / bictcp_recalc_ssthresh); an ECN
        # echo asks the controller apart, DCTCP answers it with alpha (dctcp_ssthresh).
        if ecn_echo:
            c.cc.on_ecn_echo(now, c.cc.cwnd)
        else:
            c.cc.on_congestion_event(now, c.cc.cwnd)
        self.recover = c.snd_max          # Linux high_seq
        self.ecn_queue_cwr()

    def ecn_queue_cwr(self) -> None:
        """Linux tcp_ecn_queue_cwr: every reduction is announced with CWR (RFC 3168 §6.1.2)."""
        c = self.conn
        if c.ecn_flags & ECN_OK:
            c.ecn_flags |= ECN_QUEUE_CWR

    def enter_cwr(self, now: float, trigger: str = "ecn_echo") -> None:
        """Linux tcp_enter_cwr: an ECN echo (or a locally refused transmission) reduces cwnd (by
        the CC's ssthresh) at most once per window of data (RFC 3168 §6.1.2), in the CWR state,
        paced by PRR like a recovery."""
        c = self.conn
        if self.ca_state >= CA_CWR:
            return
        c.mib["UsertcpECNCwndReductions" if trigger == "ecn_echo" else "UsertcpLocalCwndReductions"] += 1
        self.init_cwnd_reduction(now, ecn_echo=trigger == "ecn_echo")
        old = self.ca_state
        self.ca_state = CA_CWR
        if c.stack.tracer is not None:
            self.trace_ca(old, trigger, now)

    def end_cwr(self, now: float) -> None:
        """Linux tcp_end_cwnd_reduction + TCP_CA_Open: cwnd settles at ssthresh."""
        c = self.conn
        c.cc.on_recovery_exit()
        self.ca_state = CA_OPEN
        if c.stack.tracer is not None:
            self.trace_ca(CA_CWR, "cwr_done", now)

    def enter_recovery(self, now: float) -> None:
        """RFC 6675 §5 / RFC 6582 §3.2: fast retransmit and the start of fast recovery."""
        c = self.conn
        if self.ca_state in (CA_RECOVERY, CA_LOSS):
            return
        if self.ca_state < CA_CWR and c.path.probe_lost(c.snd_una):
            # Linux tcp_fastretrans_alert: a lost MTU probe is no congestion; resend its data
            # in MSS pieces without reducing cwnd (tcp_simple_retransmit).
            self.mark_oversized_lost()
            return
        c.mib["TcpExtTCPSackRecovery" if c.sack_ok else "TcpExtTCPRenoRecovery"] += 1
        if self.ca_state != CA_CWR:
            # Linux tcp_enter_recovery: an ECN-triggered reduction already under way is the
            # one for this window; the loss does not reduce again (except DCTCP's, whose
            # dctcp_state reacts to the change to Recovery).
            self.init_cwnd_reduction(now)
        else:
            c.cc.on_loss_in_cwr(now, c.cc.cwnd)
        old = self.ca_state
        self.ca_state = CA_RECOVERY
        if c.stack.tracer is not None:
            self.trace_ca(old, "loss_detected", now)

    def prr(self, delivered: int, *, una_advanced: bool = False, newly_lost: bool = False) -> None:
        """RFC 6937 proportional rate reduction (Linux tcp_cwnd_reduction): cwnd = pipe + sndcnt."""
        c = self.conn
        if delivered <= 0 or not self.prior_cwnd:
            return
        self.prr_delivered += delivered
        pipe = c.in_flight
        ssthresh = c.cc.ssthresh
        if pipe > ssthresh:
            sndcnt = -(-self.prr_delivered * ssthresh // self.prior_cwnd) - self.prr_out
        else:
            # PRR-SSRB: grow back towards ssthresh; one MSS more only when SND.UNA moved
            # and nothing new was lost (Linux).
            sndcnt = max(self.prr_delivered - self.prr_out, delivered)
            if una_advanced and not newly_lost:
                sndcnt += c.mss
            sndcnt = min(ssthresh - pipe, sndcnt)
        if not self.prr_out:
            sndcnt = max(sndcnt, c.mss)   # force the fast retransmit on entering recovery
        c.cc.cwnd = max(pipe + max(sndcnt, 0), c.mss)

    def exit_recovery(self) -> None:
        c = self.conn
        if self.ca_state == CA_RECOVERY:
            c.cc.on_recovery_exit()
        old = self.ca_state
        self.ca_state = CA_OPEN
        if c.stack.tracer is not None:
            self.trace_ca(old, "recovery_done", c.stack.now)
        self.reno_dupacks = 0
        self.dupacks = 0

    def on_ack(self, seg: Segment, ack_off: int, seg_off: int, now: float) -> None:
        """RFC 9293 §3.10.7.4 fifth step for an acceptable ACK (Linux tcp_ack): SACK blocks,
        the send window, then a cumulative advance or a duplicate ACK, and the recovery state."""
        c = self.conn
        prior_una = c.snd_una
        prior_in_flight = c.in_flight
        flags = seg.flags
        plen = len(seg.payload)
        win = seg.window << c.snd_wscale
        # Linux tcp_ecn_rcv_ecn_echo: the peer saw a CE mark (RFC 3168 §6.1.2).
        ece = bool(flags & ECE) and bool(c.ecn_flags & ECN_OK)
        prior_delivered = c.delivered_segs
        if flags & CWR and c.accecn is None:
            # Linux tcp_ecn_accept_cwr (in tcp_ack, so a pure ACK's CWR counts too): the
            # peer reduced, stop echoing; ACK its data at once, its cwnd may be tiny.
            c.ecn_flags &= ~ECN_DEMAND_CWR
            if plen:
                c.rx.ack_now = True
        if c.errqueue is not None:
            c.errqueue.ack_ttl = seg.ttl    # TCP_NLA_TTL of an ACK timestamp (tcp_ack_tstamp)
        sack_new = False
        sacked_before = self.sacked_bytes
        lost_before = self.lost_bytes
        self.fack_prior = self.rack_fack
        if seg.sack_blocks and c.sack_ok:
            sack_new = self.process_sack(seg.sack_blocks, ack_off, now)
        newly_sacked = max(self.sacked_bytes - sacked_before, 0)
        c.update_send_window(seg_off, ack_off, win)
        if ack_off > c.snd_una:
            self._cumulative_ack(ack_off, seg, ece, newly_sacked, prior_in_flight, now)
        elif ack_off == c.snd_una and c.snd_max > c.snd_una:
            # RFC 5681 §2 duplicate ACK: no data, no window change, data outstanding.
            if not plen and not flags & (SYN | FIN) and (win == c.snd_wnd or sack_new):
                self._duplicate_ack(sack_new, now)
            elif sack_new:
                self.detect_losses(now)
            if (newly_sacked and self.reordering > c.config.reordering and not self.lost_bytes
                    and self.ca_state in (CA_OPEN, CA_DISORDER)):
                # Linux tcp_may_raise_cwnd: once reordering was seen, a SACK-only delivery
                # grows cwnd too (FLAG_FORWARD_PROGRESS), not only a cumulative ACK.
                c.cc.on_ack(newly_sacked, now, c.rtt.latest_rtt, prior_in_flight,
                            app_limited=not c.cc.is_cwnd_limited())
                c.cc.note_cong_avoid(now)
        if ece or c.accecn is not None:
            ece = self._ecn_feedback(seg, ece, ack_off, prior_una, prior_delivered, sacked_before)
        c.hot.delivered += c.delivered_segs - prior_delivered     # tcp_newly_delivered
        if ack_off > prior_una or newly_sacked:
            # Linux tcp_in_ack_event: what the controller sees of every delivering ACK.
            c.cc.on_ack_event(c.delivered_segs, ece and c.accecn is None, ack_off, c.snd_max)
        if ece:
            self.enter_cwr(now)     # an ECE on an ACK that advanced nothing (no-op if done)
        self._after_ack(ack_off, prior_una, newly_sacked, lost_before, sack_new, seg, now)

    def _after_ack(self, ack_off: int, prior_una: int, newly_sacked: int, lost_before: int,
                   sack_new: bool, seg: Segment, now: float) -> None:
        """The end of tcp_ack: the recovery state (tcp_fastretrans_alert), PRR, the pure-ACK
        count and the loss probe timer."""
        c = self.conn
        if c.sack_ok and self.ca_state in (CA_OPEN, CA_DISORDER, CA_CWR) and self.lost_bytes:
            self.enter_recovery(now)
        elif c.sack_ok and self.ca_state == CA_OPEN and self.sacked_bytes:
            self.ca_state = CA_DISORDER
        if (self.ca_state == CA_RECOVERY and c.sack_ok) or self.ca_state == CA_CWR:
            self.prr(self.acked_unsacked + newly_sacked if ack_off > prior_una else newly_sacked,
                     una_advanced=ack_off > prior_una, newly_lost=self.lost_bytes > lost_before)
        if not seg.payload and ack_off >= prior_una and seg.flags == ACK:
            c.hot.pure_acks += 1
        if ack_off > prior_una or sack_new:
            c.timers.tlp_deadline = INF
            c.timers.arm_tlp(now)       # Linux tcp_set_xmit_timer: re-arm the probe on progress

    def _ecn_feedback(self, seg: Segment, ece: bool, ack_off: int, prior_una: int, prior_delivered: int,
                      sacked_before: int) -> bool:
        """Is this ACK an ECN echo? RFC 3168: its ECE, and the packets it delivered count as
        CE-marked (Linux tcp_count_delivered). Accurate ECN (RFC 9768 §3.2.2): first the
        segment's own IP-ECN field is counted (tcp_ecn_received_counters, ACKed at once when it
        changed; the handshake's last ACK was counted by the handshake), then the change of
        its ACE field gives the CE packets delivered (tcp_accecn_process: FLAG_ECE)."""
        c = self.conn
        delivered = c.delivered_segs - prior_delivered
        acc = c.accecn
        if acc is None:
            self.delivered_ce += delivered
            c.hot.delivered_ce += delivered          # TcpExtTCPDeliveredCE (tcp_newly_delivered)
            return ece
        if prior_una and acc.on_segment(seg):
            c.rx.ack_now = True
        sacked = self.sacked_bytes - sacked_before       # SACKed, less what SND.UNA now covers
        acked = max(ack_off - prior_una, 0)
        ce = acc.process_ack((seg.flags >> 6) & 7, seg.accecn, delivered, acked + sacked,
                             acked > 0 or sacked > 0, prior_una == 0 < ack_off,
                             c.sack_ok or self.ca_state in (CA_OPEN, CA_CWR), c.mss, c.snd_max)
        if ce:
            c.cc.on_delivered_ce(ce)
            c.hot.delivered_ce += ce
        return ce > 0

    def _cumulative_ack(self, ack_off: int, seg: Segment, ece: bool, newly_sacked: int,
                        prior_in_flight: int, now: float) -> None:
        """SND.UNA advances: leave recovery or CWR when the point is passed, then grow cwnd."""
        c = self.conn
        acked = self.ack_advance(ack_off, now, seg.ts_ecr if seg.ts_val >= 0 else 0)
        self.dupacks = 0
        if self.ca_state in (CA_RECOVERY, CA_LOSS):
            if ack_off >= self.recover:
                self.exit_recovery()
            elif self.ca_state == CA_RECOVERY and not c.sack_ok:
                # RFC 6582 §3.2 step 5: a partial ACK retransmits the next hole.
                self.reno_dupacks = max(self.reno_dupacks - acked // max(c.mss, 1), 0)
                if self.rtx and not self.rtx[0].lost:
                    self.mark_head_lost()
        elif self.ca_state == CA_DISORDER and not self.sacked_bytes and not self.reno_dupacks:
            self.ca_state = CA_OPEN
        elif self.ca_state == CA_CWR and ack_off > self.recover:
            # Linux tcp_fastretrans_alert: CWR is held until data above high_seq is acked,
            # so the CWR flag reached the receiver.
            self.end_cwr(now)
        if ece:
            self.enter_cwr(now)           # before the window grows (Linux tcp_try_to_open)
        # Without SACK, Linux counts each dupack as one segment delivered (tcp_add_reno_sack);
        # a cumulative ACK then grows cwnd only by what those did not already count.
        reno_credit = min(self.reno_dupacks * c.mss, self.acked_unsacked) if not c.sack_ok else 0
        if self.ca_state in (CA_DISORDER, CA_CWR) and not c.sack_ok:
            self.reno_dupacks = 0          # new data acked: the dupack episode is over
            if not self.lost_bytes and self.ca_state == CA_DISORDER:
                self.ca_state = CA_OPEN
        if self.sacked_bytes:
            self.detect_losses(now)
        # Linux tcp_ack: tcp_fastretrans_alert runs before tcp_cong_control, so an ACK that
        # starts fast recovery does not grow the window (and ssthresh) first.
        starts_recovery = c.sack_ok and self.lost_bytes and self.ca_state in (CA_OPEN, CA_DISORDER)
        if self.ca_state != CA_RECOVERY and self.ca_state != CA_CWR and not starts_recovery:
            # Grow by what this ACK newly delivered, not bytes SACKed earlier (Linux
            # acked_sacked); slow start after an RTO too (RFC 5681 §3.1), but the window is
            # held during fast recovery (RFC 6675 §5).
            c.cc.on_ack(self.acked_unsacked - reno_credit + newly_sacked, now, c.rtt.latest_rtt,
                        prior_in_flight,
                        app_limited=not c.cc.is_cwnd_limited())
            if self.acked_unsacked or newly_sacked:
                c.cc.note_cong_avoid(now)      # tcp_cong_avoid, on FLAG_DATA_ACKED

    def _duplicate_ack(self, sack_new: bool, now: float) -> None:
        """RFC 5681 §2 duplicate ACK: NewReno dupack counting without SACK (RFC 6582), loss
        detection with it."""
        c = self.conn
        self.dupacks += 1
        c.mib["UsertcpDupAcks"] += 1
        if c.sack_ok:
            if sack_new:
                self.detect_losses(now)
            return
        if self.ca_state in (CA_OPEN, CA_DISORDER, CA_CWR):
            self.reno_dupacks = min(self.dupacks, self.outstanding_segments())
            if self.ca_state != CA_CWR:
                self.ca_state = CA_DISORDER
            if self.dupacks >= c.config.reordering and self.rtx:
                self.mark_head_lost()
                self.enter_recovery(now)
        elif self.ca_state == CA_RECOVERY:
            self.reno_dupacks = min(self.reno_dupacks + 1, self.outstanding_segments())

    def ack_advance(self, ack_off: int, now: float, ts_ecr: int = 0) -> int:
        """SND.UNA advances to ``ack_off``: drop acknowledged data, sample RTT (RFC 6298)."""
        c = self.conn
        tm = c.timers
        acked = ack_off - c.snd_una
        rtx = self.rtx
        rtt_sample: float | None = None
        acked_unsacked = 0
        while rtx and rtx[0].end <= ack_off:
            r = rtx.popleft()
            n = r.end - r.start
            if not r.sacked:
                acked_unsacked += n
                self.rack_note(r, now, self.fack_prior)
                c.delivered_segs += r.pcount
            if r.sacked:
                self.sacked_bytes -= n
            else:
                if r.lost:
                    self.lost_bytes -= n
                if r.retrans:
                    self.retrans_bytes -= n
            if r.tx_count == 1 and not r.sacked:
                rtt_sample = now - r.tx_time   # Karn: only never-retransmitted segments
        if rtx and rtx[0].start < ack_off:
            if self._ack_head_part(rtx[0], ack_off):
                rtt_sample = now - rtx[0].tx_time
            acked_unsacked += self.acked_unsacked
        self._rtt_samples(rtt_sample, ack_off, ts_ecr, now)
        # Release acknowledged data from the send buffer (offset 1 is data byte 0).
        data_end = min(ack_off - 1, c.snd_buf.end)
        if data_end > c.snd_buf.start:
            c.snd_buf.release(data_end)
        c.snd_una = ack_off
        if c.snd_nxt < ack_off:
            c.snd_nxt = ack_off
        if ack_off > c.snd_max:
            c.snd_max = ack_off
        if c.errqueue is not None:
            c.errqueue.on_acked(data_end, now)     # zerocopy completions, ACK timestamps
        c.bytes_acked += acked
        c.delivered += acked
        if tm.tlp_high >= 0 and ack_off >= tm.tlp_high:
            tm.tlp_high = -1           # the probe episode is over (RFC 8985 §7.4)
        # Bytes acked here that were not SACKed before (the SYN/FIN are not in rtx).
        self.acked_unsacked = acked_unsacked
        if c.on_writable is not None and data_end > 0:
            notify(c, c.on_writable)
        # RFC 6298 §5.2/5.3: restart or stop the retransmission timer; §5.7 resets backoff.
        c.rtt.reset_backoff()
        tm.retransmits = 0
        tm.first_rto_time = now
        if c.snd_una >= c.snd_max:
            tm.rto_deadline = INF
        else:
            tm.rto_deadline = now + c.rtt.timeout
        c.fin_acked(now)
        return acked

    def _ack_head_part(self, r: SentSegment, ack_off: int) -> bool:
        """Linux tcp_tso_acked: SND.UNA moved into the head record; its acked part goes
        (tcp_trim_head) and its whole segments acked are delivered (the pcount it loses).
        Sets ``acked_unsacked`` to the bytes newly acked here; True if the record gives an RTT
        sample (never retransmitted, and whole segments acked)."""
        c = self.conn
        cut = ack_off - r.start
        before = r.pcount
        self.acked_unsacked = 0
        if r.sacked:
            self.sacked_bytes -= cut
        else:
            self.acked_unsacked = cut
            if r.lost:
                self.lost_bytes -= cut
            if r.retrans:
                self.retrans_bytes -= cut
        r.start = ack_off
        whole = before - r.pcount
        if not r.sacked:
            c.delivered_segs += whole       # tcp_clean_rtx_queue: tcp_count_delivered(acked_pcount)
        return whole > 0 and r.tx_count == 1 and not r.sacked

    def _rtt_samples(self, rtt_sample: float | None, ack_off: int, ts_ecr: int, now: float) -> None:
        """The end of Linux tcp_clean_rtx_queue: the RTT estimator's sample, an MTU probe's
        success, and the controller's sample (ca_rtt_us: the latest-sent packet acked)."""
        c = self.conn
        # RFC 7323 §4.1: with timestamps, every ACK of new data gives a sample.
        if ts_ecr > 0 and c.ts_ok:
            c.ts_rtt_sample(ts_ecr, now)
        elif rtt_sample is not None:
            c.rtt.on_sample(max(rtt_sample, 1e-6))
        c.path.on_ack(ack_off)            # tcp_mtup_probe_success
        ca_rtt = rtt_sample if rtt_sample is not None else c.rtt.latest_rtt if ts_ecr > 0 and c.ts_ok \
            else None
        if ca_rtt is not None:
            # ca_ops->pkts_acked(ca_rtt_us), before cong_avoid; the pacing rate matters to
            # HyStart only, in slow start.
            cc = c.cc
            cc.pkts_acked(max(ca_rtt, 1e-6), ack_off, max(c.snd_nxt, ack_off), now,
                          c.tx.pacing_rate() if cc.in_slow_start else 0, c.stack.gso_max_size,
                          c.tx.pacer.paced)

    def mark_oversized_lost(self) -> bool:
        """Linux tcp_simple_retransmit after a path-MTU drop or a lost MTU probe: every packet
        whose segments are longer than the MSS (tcp_skb_seglen: a multi-segment packet's own
        MSS, not its length) is lost, and the loss state (no cwnd change) sends them now,
        ending recovery at today's SND.MAX. True if anything was marked."""
        c = self.conn
        marked = False
        for r in self.rtx:
            if not r.sacked and r.seglen > c.mss:
                self.mark_lost(r)
                marked = True
        if marked:
            self.non_congestion_loss()
        return marked

    def non_congestion_loss(self) -> None:
        """Linux tcp_non_congestion_loss_retransmit: what is marked lost goes out again in the
        Loss state (recovery ends at today's SND.MAX), with no congestion response; the caller's
        next output sends it (tcp_xmit_retransmit_queue)."""
        if self.ca_state != CA_LOSS:
            self.ca_state = CA_LOSS
            self.recover = self.conn.snd_max

    @property
    def ack_state_plain(self) -> bool:
        """No recovery, SACK or dupack state: an ACK's whole effect is SND.UNA advancing, which
        is what :meth:`fast_ack_advance` implements. Header prediction hands any other
        predicted segment to the full ACK processing (Linux's fast path calls tcp_ack too)."""
        return self.ca_state == CA_OPEN and not self.sacked_bytes and not self.lost_bytes \
            and not self.reno_dupacks

    def fast_ack(self, ack_off: int, ts_val: int, ts_ecr: int, now: float) -> None:
        """Predicted pure ACK of new data: the slow path's effects for exactly this case."""
        c = self.conn
        c.segs_in += 1
        c.rx.fast_ts_recent(ts_val, now)
        self.fast_ack_advance(ack_off, ts_val, ts_ecr, now)
        if c.state is not State.CLOSED:
            c.tx.run(now)
            c.tx.check_space()
        c.reschedule()

    def fast_ack_advance(self, ack_off: int, ts_val: int, ts_ecr: int, now: float) -> None:
        """SND.UNA advances, window unchanged, plain ACK state (Linux tcp_ack's fast branch):
        what :meth:`on_ack` does for exactly this case."""
        c = self.conn
        tm = c.timers
        prior_in_flight = c.in_flight
        c.snd_wl1 = c.rcv_nxt
        c.snd_wl2 = ack_off
        if c.snd_wnd and tm.probe_deadline != INF:
            tm.probe_deadline = INF
            tm.probes_out = 0
        prior_delivered = c.delivered_segs
        self.ack_advance(ack_off, now, ts_ecr if ts_val >= 0 else 0)
        c.hot.delivered += c.delivered_segs - prior_delivered     # tcp_newly_delivered
        c.cc.on_ack_event(c.delivered_segs, False, ack_off, c.snd_max)
        self.dupacks = 0
        tm.tlp_deadline = INF
        tm.arm_tlp(now)
        c.cc.on_ack(self.acked_unsacked, now, c.rtt.latest_rtt, prior_in_flight,
                    app_limited=not c.cc.is_cwnd_limited())
        c.cc.note_cong_avoid(now)
