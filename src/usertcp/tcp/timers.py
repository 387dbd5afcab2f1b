"""The timers of one connection (RFC 6298, RFC 8985 §7, RFC 9293 §3.8.6, RFC 1122 §4.2.3.6).

:class:`Timers` owns every deadline of a connection and what happens when one fires: the
retransmission timeout, the tail loss probe, the RACK reordering timer, the delayed ACK,
the zero-window/held-data probe, keepalive and TIME-WAIT (or FIN-WAIT-2) expiry. The
connection tells its stack only the earliest deadline (``next_deadline``).
"""

from __future__ import annotations

import errno
import math
from typing import TYPE_CHECKING, Final

from usertcp.tcp.recovery import CA_CWR, CA_DISORDER, CA_LOSS, CA_OPEN, INF
from usertcp.tcp.states import SYNCHRONIZED, State
from usertcp.wire.segment import ACK

if TYPE_CHECKING:
    from usertcp.tcp.connection import Connection

# Linux TCP_RESOURCE_PROBE_INTERVAL (HZ/2): the retry interval after the local queue refused
# a transmission (NET_XMIT_DROP), without backoff; TCP_TIMEOUT_MIN (2 jiffies) floors timers.
RESOURCE_PROBE_INTERVAL: Final = 0.5
TIMEOUT_MIN: Final = 0.002


class Timers:
    """The deadlines of one connection (INF: not armed) and their handlers."""

    __slots__ = ("conn", "delack_deadline", "first_rto_time", "keepalive_deadline", "probe_backoff",
                 "probe_deadline", "probes_out", "probes_tstamp", "rack_deadline", "retransmits",
                 "pacing_deadline", "rto_deadline", "sack_deadline", "time_wait_deadline", "tlp_deadline",
                 "tlp_high", "tx_refused")

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.rto_deadline = INF
        self.delack_deadline = INF
        self.probe_deadline = INF      # zero-window probe (and held data, Linux tcp_probe_timer)
        self.keepalive_deadline = INF
        self.time_wait_deadline = INF  # TIME_WAIT 2 MSL, or an orphan's FIN_WAIT_2 timeout
        self.tlp_deadline = INF        # the probe timeout (PTO)
        self.rack_deadline = INF       # the RACK reordering timer
        self.sack_deadline = INF       # compressed SACKs (tcp/sack_compress.py; Linux's hrtimer)
        self.pacing_deadline = INF     # the next paced departure (Linux tp->pacing_timer)
        self.probes_out = 0            # zero-window or keepalive probes without answer
        self.probe_backoff = 0         # Linux icsk_backoff of the probe timer (tcp_probe0_when)
        self.probes_tstamp = -1.0      # first probe of the episode (icsk_probes_tstamp); -1: none
        self.tlp_high = -1             # snd_max when the outstanding probe was sent; -1: none
        self.first_rto_time = 0.0      # start of the current run of timeouts (user timeout)
        self.retransmits = 0           # consecutive RTO count (tcpi_retransmits)
        self.tx_refused = False        # a transmission was refused in this timer event

    def stop(self) -> None:
        """Stop the retransmission, delayed-ACK, probe and keepalive timers."""
        self.rto_deadline = self.delack_deadline = self.probe_deadline = self.keepalive_deadline = INF
        self.sack_deadline = INF

    def next_deadline(self) -> float:
        """The earliest armed deadline (INF: none), asked after every event.

        Compared one by one rather than with ``min()``: compiled, these are unboxed floats
        and a handful of machine comparisons, where ``min()`` boxes all nine and compares
        them generically (~20x the instructions). A cached earliest deadline, updated on
        every arm and disarm as Linux's per-socket timers are, would cost as much at each
        of the many places that re-arm the RTO and the probe timers (every ACK does).
        """
        d = self.rto_deadline
        if self.tlp_deadline < d:
            d = self.tlp_deadline
        if self.rack_deadline < d:
            d = self.rack_deadline
        if self.delack_deadline < d:
            d = self.delack_deadline
        if self.probe_deadline < d:
            d = self.probe_deadline
        if self.keepalive_deadline < d:
            d = self.keepalive_deadline
        if self.time_wait_deadline < d:
            d = self.time_wait_deadline
        if self.pacing_deadline < d:
            d = self.pacing_deadline
        if self.sack_deadline < d:
            d = self.sack_deadline
        return d

    def handle(self, now: float) -> None:
        c = self.conn
        tx = c.tx
        rec = c.recovery
        if c.state is State.CLOSED:
            return
        self.tx_refused = False
        if now >= self.pacing_deadline:
            self.pacing_deadline = INF         # tcp_pace_kick: tx.run below sends on
        if now >= self.time_wait_deadline:
            self.time_wait_deadline = INF
            expired = "UsertcpTimeWaitExpired" if c.state is State.TIME_WAIT else "TcpExtTCPAbortOnTimeout"
            c.mib[expired] += 1
            c.close_now(now)
            return
        if now >= self.rack_deadline:
            self.rack_deadline = INF
            rec.detect_losses(now)
            if rec.lost_bytes and rec.ca_state in (CA_OPEN, CA_DISORDER, CA_CWR):
                rec.enter_recovery(now)
                if c.sack_ok:
                    rec.prr(c.mss)      # Linux tcp_rack_reo_timeout: one segment's worth
        if now >= self.tlp_deadline:
            self.tlp_deadline = INF
            self.on_tlp(now)        # re-arms the RTO when it sends a probe
        if now >= self.rto_deadline:
            self.rto_deadline = INF
            self.tlp_deadline = INF
            self.on_rto(now)
        if c.state is not State.CLOSED and now >= self.delack_deadline:
            self.delack_deadline = INF
            if c.rx.ack_pending:
                c.hot.delayed_acks += 1
                c.rx.delack_fired()
                tx.send_ack(now)
        if c.state is not State.CLOSED and now >= self.sack_deadline:
            self.sack_deadline = INF
            c.rx.compressed_ack_timer(now)
        if c.state is not State.CLOSED and now >= self.probe_deadline:
            self.probe_deadline = INF
            self.on_probe(now)
        if c.state is not State.CLOSED and now >= self.keepalive_deadline:
            self.keepalive_deadline = INF
            self.on_keepalive(now)
        if c.state is not State.CLOSED and not self.tx_refused:
            # After a refusal the timer handlers above have re-armed their retry; like Linux's
            # timers, do not hammer the full local queue again in the same event.
            tx.run(now)
        c.reschedule()

    def rto_revert(self, now: float) -> bool:
        """RFC 6069 §4: undo one RTO doubling and re-arm from the head's send time (running
        the timeout now if the shorter RTO has already passed); False if nothing to undo."""
        c = self.conn
        if not self.retransmits or not c.rtt.backoff or not c.recovery.rtx:
            return False
        c.rtt.undo_backoff()
        remaining = c.rtt.timeout - (now - c.recovery.rtx[0].tx_time)
        if remaining > 0:
            self.rto_deadline = now + remaining
        else:
            self.on_rto(now)                 # the undone backoff has already run out
        return True

    def syn_timeout(self, now: float) -> None:
        """The handshake's RTO: resend the SYN or SYN-ACK, or give up after the retries."""
        c = self.conn
        cfg = c.config
        st = c.state
        limit = c.syn_retries_max or (cfg.syn_retries if st is State.SYN_SENT else cfg.synack_retries)
        expired = c.syn_retries >= limit or self.user_timeout_expired(now)
        c.stack.write_timeout(c, expired, now)     # Linux tcp_write_timeout
        if expired:
            if st is State.SYN_RECEIVED and c.passive:
                c.stack.forget_embryonic(c)
            c.fail(errno.ETIMEDOUT, now)
            return
        c.syn_retries += 1
        # A passive open resends its SYN-ACK as a request sock (tcp_rtx_synack counts only
        # what left); an active one retransmits its SYN like data (__tcp_retransmit_skb).
        passive = st is State.SYN_RECEIVED and c.passive
        if not passive:
            self.count_syn_retrans()
        c.stack.syn_rto(c, now)
        if c.tx.send_syn(now):
            if passive:
                self.count_syn_retrans()
        elif not passive:
            # Linux tcp_retransmit_timer: local congestion, retry soon without backoff.
            self.rto_deadline = now + RESOURCE_PROBE_INTERVAL
            return
        elif c.listener is None or c not in c.listener.tfo_children:
            # Linux reqsk_timer_handler: a request whose SYN-ACK cannot be resent is
            # dropped (a TFO child, tcp_fastopen_synack_timer, ignores the error).
            c.mib["UsertcpSynAckLocalDrops"] += 1
            c.stack.forget_embryonic(c)
            c.close_now(now)
            return
        c.rtt.on_timeout()
        self.rto_deadline = now + c.rtt.timeout

    def on_rto(self, now: float) -> None:
        """RFC 6298 §5.4-5.6 and RFC 5681 §3.1: a retransmission timeout."""
        c = self.conn
        tx = c.tx
        rec = c.recovery
        cfg = c.config
        st = c.state
        if st is State.SYN_SENT or st is State.SYN_RECEIVED:
            self.syn_timeout(now)
            return
        if c.snd_una >= c.snd_max:
            return
        expired = self.retransmits >= cfg.retries2 or self.user_timeout_expired(now)
        c.stack.write_timeout(c, expired, now)     # Linux tcp_write_timeout
        if expired:
            c.fail(errno.ETIMEDOUT, now)
            return
        if self.retransmits >= cfg.retries1:
            c.path.black_hole(now)                 # tcp_write_timeout: black-hole detection
        c.mib["TcpExtTCPTimeouts"] += 1
        self.tlp_high = -1
        self.rack_deadline = INF
        # Linux tcp_enter_loss: ssthresh is not cut again inside a CWR reduction's window.
        cwr_window = rec.ca_state == CA_CWR and rec.recover > c.snd_una
        c.cc.on_rto(now, c.cc.cwnd, first_timeout=self.retransmits == 0 and not cwr_window)
        rec.ecn_queue_cwr()
        old_ca = rec.ca_state
        rec.ca_state = CA_LOSS
        if c.stack.tracer is not None:
            c.stack.trace(c, "tcp:rto_fired",
                             {"backoff": c.rtt.backoff, "rto": c.rtt.timeout}, now)
            rec.trace_ca(old_ca, "rto", now)
        rec.recover = c.snd_max
        rec.reno_dupacks = 0
        rec.dupacks = 0
        rec.timeout_mark_lost()
        self.retransmits += 1
        if rec.rtx and not tx.retransmit(rec.rtx[0], now):
            # Linux tcp_retransmit_timer: the retransmission failed for local congestion; retry
            # after TCP_RESOURCE_PROBE_INTERVAL, without backing the RTO off.
            self.rto_deadline = now + RESOURCE_PROBE_INTERVAL
            return
        c.rtt.on_timeout()
        self.rto_deadline = now + c.rtt.timeout

    def count_syn_retrans(self) -> None:
        c = self.conn
        c.mib["TcpExtTCPSynRetrans"] += 1
        c.total_retrans += 1
        c.mib["TcpRetransSegs"] += 1

    def arm_tlp(self, now: float) -> None:
        """RFC 8985 §7.2: arm the probe timeout (PTO) while data is outstanding in Open/CWR state."""
        c = self.conn
        # Linux tcp_schedule_loss_probe(): SACK peers only (RFC 8985 §2: RACK-TLP needs SACK),
        # in Open or CWR state (an ECN reduction is no loss episode).
        if (not c.config.tlp or not c.sack_ok or c.recovery.ca_state not in (CA_OPEN, CA_CWR)
                or c.snd_max <= c.snd_una or self.tlp_high >= 0 or self.tlp_deadline != INF
                or c.state not in (State.ESTABLISHED, State.CLOSE_WAIT, State.FIN_WAIT_1,
                                      State.CLOSING, State.LAST_ACK)):
            return
        srtt = c.rtt.srtt
        if srtt is None:
            pto = 1.0
        else:
            # One segment out: allow for a delayed ACK (RFC 8985 §7.2 WCDelAckT; Linux adds
            # the RTO floor), else TCP_TIMEOUT_MIN; rounded up to a jiffy (usecs_to_jiffies).
            rtx = c.recovery.rtx      # tp->packets_out == 1: one packet of one segment
            one = len(rtx) == 1 and rtx[0].pcount == 1
            pto = 2 * srtt + (c.rtt.rto_min if one else 0.002)
            tick = c.rtt.granularity
            if tick > 0:
                pto = math.ceil(pto / tick - 1e-9) * tick
        # Linux caps the PTO at the RTO; the probe then goes out in the RTO's place.
        self.tlp_deadline = min(now + pto, self.rto_deadline)

    def on_tlp(self, now: float) -> None:
        """RFC 8985 §7.3: send one new segment if possible, else retransmit the last one."""
        c = self.conn
        tx = c.tx
        rec = c.recovery
        if c.snd_max <= c.snd_una or rec.ca_state not in (CA_OPEN, CA_CWR):
            return
        data_end = c.snd_buf.end + 1
        room = c.snd_una + c.snd_wnd - c.snd_nxt
        avail = data_end - c.snd_nxt
        if avail > 0 and room > 0:
            size = min(c.mss, avail, room)
            sent = tx.emit_new(now, c.snd_nxt, size,
                                  fin=c.fin_queued and c.snd_nxt + size == data_end)
        elif avail <= 0 and c.fin_queued and c.snd_nxt == data_end:
            sent = tx.emit_new(now, c.snd_nxt, 0, fin=True)
        else:
            idx = len(rec.rtx) - 1
            while idx >= 0 and rec.rtx[idx].sacked:
                idx -= 1
            if idx < 0:
                return
            r = rec.rtx[idx]
            if r.end - r.start > c.mss + (1 if r.fin else 0):
                # Probe with the last MSS of a super-segment.
                cut = r.end - c.mss - (1 if r.fin else 0)
                r = r.split(cut)
                rec.rtx.insert(idx + 1, r)
                idx += 1
            if r.retrans:
                return
            c.mib["TcpExtTCPLossProbeRecovery" if r.lost else "UsertcpLossProbeRetrans"] += 1
            sent = tx.retransmit(r, now, idx)
        if not sent:
            return      # Linux tcp_send_loss_probe: refused locally, the RTO stays as armed
        c.mib["TcpExtTCPLossProbes"] += 1
        self.tlp_high = c.snd_max
        self.rto_deadline = now + c.rtt.timeout

    def user_timeout_expired(self, now: float) -> bool:
        """RFC 5482 / Linux retransmits_timed_out: time since the oldest unacked data first left."""
        c = self.conn
        rec = c.recovery
        if not c.user_timeout:
            return False
        start = rec.rtx[0].first_tx if rec.rtx else self.first_rto_time
        return now - start >= c.user_timeout

    def on_probe(self, now: float) -> None:
        """The probe timer: data (or a FIN) waits and nothing is in flight (Linux tcp_probe_timer,
        tcp_send_probe0). With the window open the held data goes out (tcp_write_wakeup), else a
        zero-window probe: an ACK with SEQ = SND.UNA - 1 (tcp_xmit_probe_skb). A probe the local
        queue refused is retried every TCP_RESOURCE_PROBE_INTERVAL without backoff; the count
        (tcpi_probes) still grows, and TCP_USER_TIMEOUT runs from the episode's first probe."""
        c = self.conn
        tx = c.tx
        data_end = c.snd_buf.end + 1
        fin_unsent = c.fin_queued and c.snd_nxt == data_end
        if c.snd_nxt > c.snd_una or (c.unsent_bytes == 0 and not fin_unsent):
            self.end_probes()
            return
        if self.probes_tstamp < 0:
            self.probes_tstamp = now
        elif c.user_timeout and now - self.probes_tstamp >= c.user_timeout:
            c.fail(errno.ETIMEDOUT, now)
            return
        if self.probes_out >= c.config.retries2:
            c.fail(errno.ETIMEDOUT, now)
            return
        room = c.snd_una + c.snd_wnd - c.snd_nxt
        if room > 0:
            # Linux tcp_write_wakeup: the window is open, so send held data now, with PSH.
            size = min(c.mss, c.unsent_bytes, room)
            if tx.emit_new(now, c.snd_nxt, size, fin=fin_unsent or (c.fin_queued and
                                                                        c.snd_nxt + size == data_end),
                              force_psh=True):
                self.end_probes()          # in flight now: the RTO takes over
                return
            sent = False
        else:
            c.mib["UsertcpWindowProbes"] += 1
            sent = tx.emit(now, c.snd_una - 1, ACK)
        self.probes_out += 1
        if sent:
            self.probe_backoff = min(self.probe_backoff + 1, c.config.retries2)
            when = min(c.rtt.rto * (1 << self.probe_backoff), c.config.rto_max)
        else:
            when = RESOURCE_PROBE_INTERVAL  # local congestion: no backoff (tcp_send_probe0)
        if c.user_timeout:
            # Linux tcp_clamp_probe0_to_user_timeout: never sleep past the user timeout.
            when = min(when, max(c.user_timeout - (now - self.probes_tstamp), TIMEOUT_MIN))
        self.probe_deadline = now + when

    def end_probes(self) -> None:
        self.probes_out = 0
        self.probe_backoff = 0
        self.probes_tstamp = -1.0

    def on_keepalive(self, now: float) -> None:
        """RFC 1122 §4.2.3.6 keepalive, Linux's probe form (SEQ = SND.UNA - 1, no data)."""
        c = self.conn
        if not c.keepalive or c.state not in SYNCHRONIZED or c.state is State.TIME_WAIT:
            return
        idle = now - c.last_rcv_time
        if self.probes_out == 0 and idle < c.keepalive_time:
            self.keepalive_deadline = c.last_rcv_time + c.keepalive_time
            return
        if self.probes_out >= c.keepalive_probes:
            c.mib["TcpExtTCPAbortOnTimeout"] += 1
            c.fail(errno.ETIMEDOUT, now, send_rst=True)
            return
        c.mib["UsertcpKeepaliveProbes"] += 1
        if c.tx.emit(now, c.snd_una - 1, ACK):
            self.probes_out += 1
            self.keepalive_deadline = now + c.keepalive_intvl
        else:
            # Linux tcp_keepalive_timer: a probe lost to local congestion is not counted and
            # is retried after TCP_RESOURCE_PROBE_INTERVAL.
            self.keepalive_deadline = now + RESOURCE_PROBE_INTERVAL

    def arm_probe(self, now: float) -> None:
        """RFC 9293 §3.8.6.1: probe a zero window when data waits and nothing is in flight."""
        c = self.conn
        # Linux tcp_check_probe_timer also covers data held back by cork/MSG_MORE/Nagle with
        # nothing in flight: the probe timer (one RTO) then sends it (tcp_write_wakeup).
        # A FIN the local queue refused waits in the same way.
        if c.snd_nxt == c.snd_una and (c.unsent_bytes > 0 or (
                c.fin_queued and c.snd_nxt == c.snd_buf.end + 1)):
            if self.probe_deadline == INF:
                self.probe_deadline = now + c.rtt.timeout
                self.probe_backoff = 0      # a new episode (tcp_check_probe_timer)
                self.probes_tstamp = -1.0
        elif self.probe_deadline != INF:
            self.probe_deadline = INF
            self.probes_out = 0

