"""Opening a connection: the three-way handshake and what it negotiates (RFC 9293 §3.5).

:class:`Handshake` owns every step that ends in a synchronized state: the active open
(SYN-SENT, RFC 9293 §3.10.7.3), the passive open from a listener's SYN or from a validated
SYN cookie, the options the peer's SYN offers (RFC 7323 window scale and timestamps,
RFC 2018 SACK-permitted, the MSS of RFC 9293 §3.7.1, ECN setup of RFC 3168 §6.1.1), the
data a fast-open SYN carries (RFC 7413), and SYN-RECEIVED -> ESTABLISHED on the ACK that
completes the handshake. The connection's arrival steps hand it SYN-SENT segments and the
SYN-RECEIVED cases; everything else about the control block stays in ``tcp/connection.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from usertcp.tcp.accecn import AccEcn as AccEcn  # the control block's type (Connection.accecn)
from usertcp.tcp.accecn import (
    accecn_for_active_open,
    accecn_for_classic_synack,
    accecn_for_syn,
    settle_accecn,
)
from usertcp.tcp.config import ECN_ACCECN_IN_ECN_OUT, ECN_ON
from usertcp.tcp.congestion import congestion_needs_ecn
from usertcp.tcp.recovery import ECN_OK, INF
from usertcp.tcp.seq import SEQ_MASK, seq_diff
from usertcp.tcp.states import State
from usertcp.wire.segment import ACK, AE, CWR, ECE, ECN_ECT0, ECN_NOT_ECT, FIN, RST, SYN, Segment

if TYPE_CHECKING:
    from usertcp.tcp.config import StackConfig
    from usertcp.tcp.connection import Connection
    from usertcp.tcp.stack import Listener


def ecn_syn_acceptable(seg: Segment, cfg: StackConfig) -> bool:
    """Linux tcp_ecn_create_request(): does a SYN set up ECN for the passive side?

    RFC 3168 §6.1.1: an ECN-setup SYN has ECE and CWR set; any non-zero tcp_ecn accepts it.
    A SYN that is itself ECT-marked is refused (RFC 3168 §6.1.1: SYNs are not ECT, so a
    marked one hints at a broken middlebox), unless a reserved bit (AccECN's AE) is set. A
    listener whose congestion control needs ECN (DCTCP, whose own SYNs are ECT) accepts
    every ECN-setup SYN, whatever tcp_ecn says (tcp_ca_needs_ecn(listen_sk)).
    """
    if seg.flags & (ECE | CWR) != ECE | CWR:
        return False
    if congestion_needs_ecn(cfg.congestion_control):
        return True
    if not cfg.ecn:
        return False
    return seg.ecn == ECN_NOT_ECT or bool(seg.flags & AE)


class Handshake:
    """The opening of one connection, active or passive, up to ESTABLISHED."""

    __slots__ = ("conn",)

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    # ------------------------------------------------------------ active open

    def start_active_open(self, now: float) -> None:
        """RFC 9293 §3.10.1 OPEN call, active: choose an ISS and send a SYN."""
        c = self.conn
        if c.md5_keys is not None:
            c.md5_key = c.md5_keys.lookup(c.remote_ip)
        c.iss = c.stack.new_isn(c, now)
        c.ts_offset = c.stack.ts_offset(c)
        c.snd_una = 0
        c.snd_nxt = 0
        c.snd_max = 0
        # Linux tcp_ecn_send_syn: tcp_ecn=1 requests ECN on an active open, and so does a
        # congestion control that needs it (tcp_ca_needs_ecn: DCTCP).
        # tcp_ecn=3 asks for AccECN instead (RFC 9768 §3.1.1), 4 for RFC 3168 ECN.
        c.accecn = accecn_for_active_open(c.config)
        wants = c.config.ecn in (ECN_ON, ECN_ACCECN_IN_ECN_OUT) or c.cc.needs_ecn
        c.ecn_flags = ECN_OK if wants and c.accecn is None else 0
        c.set_state(State.SYN_SENT, now)
        c.timers.first_rto_time = now
        c.rx.init_window(True)          # tcp_select_initial_window (tcp/window.py)
        c.tx.send_syn(now)
        c.reschedule()

    def syn_sent_arrives(self, seg: Segment, now: float) -> None:
        """RFC 9293 §3.10.7.3, SYN-SENT."""
        c = self.conn
        flags = seg.flags
        # Drops are counted under Linux tcp_rcv_synsent_state_process's reasons.
        mib = c.mib
        if flags & ACK:
            ack_off = seq_diff(seg.ack, c.iss)
            if ack_off <= 0 or ack_off > c.snd_max:
                mib["SKB_DROP_REASON_TCP_INVALID_ACK_SEQUENCE"] += 1
                if not flags & RST:
                    c.stack.send_reset_for(seg, now)
                return
            if not flags & RST and self._paws_active_rejected(seg, now):
                mib["TcpExtPAWSActiveRejected"] += 1
                mib["SKB_DROP_REASON_TCP_RFC7323_PAWS"] += 1
                c.stack.send_reset_for(seg, now)
                return
        if flags & RST:
            if flags & ACK:
                c.reset_by_peer(now)
            else:
                mib["SKB_DROP_REASON_TCP_RESET"] += 1    # no ACK: cannot be for our SYN
            return
        if not flags & SYN:
            # An acceptable ACK without SYN: TCP_FLAGS; neither SYN, RST nor ACK: RFC 9293
            # "fifth", where Linux leaves the reason unspecified.
            mib["SKB_DROP_REASON_TCP_FLAGS" if flags & ACK else "SKB_DROP_REASON_NOT_SPECIFIED"] += 1
            return
        c.irs = seg.seq
        c.rcv_nxt = 1
        c.rcv_adv = 1 + c.syn_window
        self.negotiate(seg, now)
        if c.accecn is not None:
            # RFC 9768 Table 2 (Linux tcp_ecn_rcv_synack / tcp_ecn_rcv_syn): AccECN, or a
            # fallback to RFC 3168 or to no ECN.
            c.accecn, rfc3168 = settle_accecn(c.accecn, seg)
            c.ecn_flags = ECN_OK if rfc3168 else 0
        elif c.ecn_flags & ECN_OK:
            c.accecn = accecn_for_classic_synack(c.config, seg, ECN_ECT0 if c.cc.needs_ecn else 0)
            if c.accecn is not None:
                c.ecn_flags = 0          # Linux 6.18: an AccECN SYN-ACK makes even RFC 3168 AccECN
        if c.ecn_flags & ECN_OK:
            # RFC 3168 §6.1.1: a SYN-ACK sets ECN up with ECE alone (ECE|CWR is not a setup:
            # Linux tcp_ecn_rcv_synack); a crossing SYN needs both (tcp_ecn_rcv_syn).
            e = flags & (ECE | CWR)
            if (flags & ACK and e != ECE) or (not flags & ACK and e != ECE | CWR):
                c.ecn_flags = 0
        if flags & ACK:
            self._synack_arrives(seg, now)
        else:
            # Simultaneous open (RFC 9293 §3.10.7.3 "fifth", Figure 7).
            c.snd_wnd = seg.window
            c.max_snd_wnd = c.snd_wnd
            c.set_state(State.SYN_RECEIVED, now)
            c.timers.rto_deadline = INF
            c.syn_retries = 0
            c.tx.send_syn(now)

    def _synack_arrives(self, seg: Segment, now: float) -> None:
        """The SYN-ACK of an active open: SYN-SENT -> ESTABLISHED (RFC 9293 §3.10.7.3 fourth)."""
        c = self.conn
        self._handshake_rtt_sample(seg, now)
        c.snd_wnd = seg.window       # unscaled in a SYN-ACK (RFC 7323 §2.2)
        c.max_snd_wnd = c.snd_wnd
        c.snd_wl1 = 0
        c.snd_wl2 = seq_diff(seg.ack, c.iss)
        prior_delivered = c.delivered_segs
        c.recovery.ack_advance(seq_diff(seg.ack, c.iss), now)
        # TcpExtTCPDelivered: tcp_ack's tcp_newly_delivered counts the SYN (and any SYN data);
        # the SYN's tp->delivered itself is added with the state change (Connection.set_state).
        c.hot.delivered += c.delivered_segs - prior_delivered + 1
        c.stack.on_synack(c, seg, now)
        c.set_state(State.ESTABLISHED, now)
        c.rtt.reset_backoff()
        c.timers.retransmits = 0
        if len(seg.payload) or seg.flags & FIN:
            c.rx.data_arrives(seg, 0, now)   # offset of the SYN: its data starts at 1
        if c.fin_queued and c.write_shutdown:
            c.set_state(State.FIN_WAIT_1, now)
        c.rx.ack_pending = max(c.rx.ack_pending, 1)
        if c.write_pending:
            # Linux tcp_rcv_synsent_state_process, a writer waiting (sk_write_pending): "Save one
            # ACK": quick-ACK mode, delayed ACK at TCP_DELACK_MAX; the writer's data carries it.
            c.rx.enter_quickack_mode(c.config.quickack_segments)
            c.last_rcv_time = now          # icsk_ack.lrcvtime, with ato = TCP_ATO_MIN
            c.timers.delack_deadline = now + c.config.delack_max
        else:
            c.rx.ack_now = True            # RFC 9293: ACK the SYN-ACK at once
            if c.accecn is not None:
                c.accecn.reflect_on_next_ack()

    def _paws_active_rejected(self, seg: Segment, now: float) -> bool:
        """Linux tcp_rcv_synsent_state_process (RFC 7323 PAWS): a SYN-ACK's TSecr must lie
        between our first SYN's TSval (retrans_stamp) and now (PAWSActiveRejected)."""
        c = self.conn
        if seg.ts_val < 0 or not seg.ts_ecr or not c.config.timestamps:
            return False
        first = (int(c.timers.first_rto_time * 1000) + c.ts_offset) & SEQ_MASK
        return seq_diff(seg.ts_ecr, first) < 0 or seq_diff(c.tx.tsval(now), seg.ts_ecr) < 0

    # ----------------------------------------------------------- passive open

    def start_passive_open(self, seg: Segment, listener: Listener, now: float) -> None:
        """A SYN arrived at a listener (RFC 9293 §3.10.7.2): record it and send a SYN-ACK."""
        c = self.conn
        c.passive = True
        c.listener = listener
        c.irs = seg.seq
        c.rcv_nxt = 1
        c.rcv_adv = 1
        c.last_ack_sent = 1
        c.iss = c.stack.new_isn(c, now)
        c.ts_offset = c.stack.ts_offset(c)
        self.negotiate(seg, now)
        c.rx.init_window(c.ws_ok)
        c.ecn_flags = ECN_OK if ecn_syn_acceptable(seg, c.config) else 0
        c.accecn = accecn_for_syn(seg, c.config)     # tcp_ecn 3..5 (tcp_ecn_create_request)
        if c.accecn is not None:
            c.ecn_flags = 0
        c.snd_wnd = seg.window          # RFC 7323 §2.2: the window in a SYN is not scaled
        c.max_snd_wnd = c.snd_wnd
        c.snd_wl1 = 0
        c.snd_wl2 = 0
        c.set_state(State.SYN_RECEIVED, now)
        c.timers.first_rto_time = now
        c.stack.on_passive_syn(c, seg, now)
        c.tx.send_syn(now)
        c.reschedule()

    def open_from_cookie(self, listener: Listener, ack: Segment, peer_mss: int, wscale: int, sack: bool,
                         ts_off: int, ecn: bool, now: float) -> None:
        """Become the child ``start_passive_open`` would have left after its SYN-ACK, from the
        3rd ACK of a validated SYN cookie (Linux cookie_v4_check -> tcp_get_cookie_sock). The
        peer's SYN window is unknown: the 3rd ACK's window replaces it (``establish_passive``)."""
        c = self.conn
        c.passive = True
        c.listener = listener
        c.irs = (ack.seq - 1) & SEQ_MASK
        c.iss = (ack.ack - 1) & SEQ_MASK
        c.rcv_nxt = c.rcv_adv = c.last_ack_sent = 1
        c.ts_offset = ts_off
        c.ts_ok = ack.ts_val >= 0
        if c.ts_ok:
            c.ts_recent = ack.ts_val      # Linux: req->ts_recent = the ACK's TSval
            c.ts_recent_time = now
        c.ws_ok = wscale >= 0
        c.snd_wscale = wscale if c.ws_ok else 0
        c.sack_ok = sack
        c.peer_mss = peer_mss
        c.compute_mss()
        c.rx.init_window(c.ws_ok)       # cookie_v4_check redoes tcp_select_initial_window
        c.rx.initialize_rcv_mss()       # Linux tcp_initialize_rcv_mss
        c.tx.window_field(True)           # the SYN-ACK's window: syn_window and rcv_adv
        c.snd_una = 0
        c.snd_nxt = c.snd_max = 1      # the SYN-ACK went out
        # No handshake RTT sample without timestamps (the SYN-ACK's send time is not stored):
        # Linux's cookie request has snt_synack = 0. With timestamps the echoed TSval gives one.
        c.syn_retries = 1
        c.timers.first_rto_time = now
        c.set_state(State.SYN_RECEIVED, now)
        if ecn:
            c.ecn_flags = ECN_OK

    def negotiate(self, seg: Segment, now: float) -> None:
        """Options from the peer's SYN (RFC 7323 §2.2/§3.2, RFC 2018 §2, RFC 9293 §3.7.1)."""
        c = self.conn
        cfg = c.config
        c.ws_ok = cfg.window_scaling and seg.wscale >= 0
        c.snd_wscale = min(seg.wscale, 14) if c.ws_ok else 0
        if not c.ws_ok:
            c.rcv_wscale = 0
        c.sack_ok = cfg.sack and seg.sack_permitted
        c.ts_ok = cfg.timestamps and seg.ts_val >= 0
        if c.ts_ok:
            c.ts_recent = seg.ts_val
            c.ts_recent_time = now
        c.peer_mss = seg.mss if seg.mss > 0 else (1220 if c.v6 else 536)
        c.compute_mss()
        c.rx.initialize_rcv_mss()       # Linux tcp_initialize_rcv_mss

    # ------------------------------------------------------------- fast open

    def accept_syn_data(self, payload: memoryview, fin: bool) -> None:
        """A fast-open SYN's data (and FIN) is received at SYN time and acknowledged by the
        SYN-ACK (RFC 7413 §4.2.2, Linux tcp_fastopen_add_skb)."""
        c = self.conn
        plen = len(payload)
        if plen:
            c.rcv_buf.append(payload, c.stack.now)
            c.rcv_nxt += plen
            c.bytes_received += plen
            c.data_segs_in += 1
        if fin:
            c.rcv_nxt += 1
            c.fin_received = True     # establish_passive moves on to CLOSE_WAIT
        if plen or fin:
            c.syn_data_acked = True   # tcpi_options TCPI_OPT_SYN_DATA
        c.rcv_adv = max(c.rcv_adv, c.rcv_nxt)

    def attach_fastopen(self, state: object) -> None:
        """Fast-open (and preload) state for this opening, set by ``tcp/fastopen.py`` or the
        SYN-cookie rebuild; the connection only carries it."""
        self.conn.tfo = state

    def note_syn_data_acked(self, counted: int = 0) -> None:
        """The peer acknowledged all the data our SYN carried (RFC 7413 §4.1.3, Linux
        tcp_rcv_fastopen_synack): tcpi_options gets TCPI_OPT_SYN_DATA. ``counted``: the
        deliveries the ACK counted for that data, taken back ("SYN-data is counted as two
        separate packets in tcp_ack()": the SYN and its data make one)."""
        c = self.conn
        c.syn_data_acked = True
        c.delivered_segs = max(c.delivered_segs - counted, 0)

    def rewind_syn_data(self, to_off: int) -> None:
        """Data sent with the SYN (or SYN-ACK) was not all acknowledged: send again from
        ``to_off`` now rather than at the RTO (Linux tcp_rcv_fastopen_synack)."""
        c = self.conn
        c.recovery.rtx.clear()
        c.snd_nxt = to_off
        c.total_retrans += 1

    # --------------------------------------------------------- SYN-RECEIVED

    def syn_received_sequence(self, seg: Segment, now: float) -> bool:
        """The SYN-RECEIVED cases Linux handles before the sequence check; True if dealt with."""
        c = self.conn
        flags = seg.flags
        if flags & (SYN | ACK | RST) == SYN and seg.seq == c.irs:
            # A retransmitted SYN, SYN alone among SYN, ACK and RST (Linux tcp_check_req's
            # "flg == TCP_FLAG_SYN"): answer with the SYN-ACK again (inet_rtx_syn_ack).
            c.mib["UsertcpSynAckRetransOnSyn"] += 1
            c.tx.send_syn(now)
            return True
        if not c.passive and flags & (SYN | ACK | RST) == SYN | ACK \
                and seg.seq == c.irs and c.snd_off(seg.ack) == c.snd_max:
            # Simultaneous open (RFC 9293 Figure 8, line 6): the peer's SYN-ACK completes it.
            # Linux tcp_validate_incoming lets exactly this SYN pass to tcp_ack (a SYN's window
            # is not scaled; it acknowledges a SYN's data too), then tcp_data_queue D-SACKs the
            # old SYN at once.
            self.establish_passive(seg, c.snd_max, now)
            c.snd_wnd = c.max_snd_wnd = seg.window
            c.recovery.ack_advance(c.snd_max, now)
            if c.sack_ok and c.config.dsack:
                c.rx.dsack = (0, 1)
            c.rx.ack_now = True
            return True
        return False

    def syn_received_ack(self, seg: Segment, ack_off: int, now: float) -> bool:
        """The ACK completing a handshake; True if the segment is dealt with (dropped, reset)."""
        c = self.conn
        if not (c.snd_una < ack_off <= c.snd_max):
            # RFC 9293: unacceptable ACK in SYN-RECEIVED -> RST with seq = SEG.ACK.
            c.stack.send_reset_for(seg, now)
            return True
        lst = c.listener
        if (c.passive and lst is not None and not lst.closed and c not in lst.tfo_children
                and len(lst.accept_queue) >= lst.backlog):
            # Linux tcp_check_req/syn_recv_sock: with the accept queue full the 3rd ACK is
            # dropped (the SYN-ACK timer tries again later), or reset with abort_on_overflow.
            c.mib["TcpExtListenOverflows"] += 1
            c.mib["TcpExtListenDrops"] += 1
            if c.config.abort_on_overflow:
                c.stack.forget_embryonic(c)
                c.stack.send_reset_for(seg, now)
                c.close_now(now)
            return True
        self.establish_passive(seg, ack_off, now)
        return c.state is State.CLOSED

    def establish_passive(self, seg: Segment, ack_off: int, now: float) -> None:
        """SYN-RECEIVED -> ESTABLISHED on an acceptable ACK (RFC 9293 §3.10.7.4 fifth)."""
        c = self.conn
        self._handshake_rtt_sample(seg, now)
        c.snd_wnd = seg.window << c.snd_wscale
        c.max_snd_wnd = max(c.max_snd_wnd, c.snd_wnd)
        c.snd_wl1 = c.rcv_off(seg.seq)
        c.snd_wl2 = ack_off
        c.timers.rto_deadline = INF
        c.rtt.reset_backoff()
        c.syn_retries = 0
        c.set_state(State.ESTABLISHED, now)
        if c.accecn is not None and c.passive:
            c.accecn.third_ack(seg.flags, not len(seg.payload) and not seg.sack_blocks, seg.ecn,
                               len(seg.payload), seg.accecn)
        if c.fin_received:
            # A fast-open SYN+FIN was taken at SYN time (tcp_fastopen_add_skb -> tcp_fin).
            c.set_state(State.CLOSE_WAIT, now)
        if c.fin_queued and c.write_shutdown:
            c.set_state(State.LAST_ACK if c.fin_received else State.FIN_WAIT_1, now)
        c.stack.on_established_passive(c, now, ack_off)

    def _handshake_rtt_sample(self, seg: Segment, now: float) -> None:
        """RFC 6298 §3 (Karn): the handshake gives an RTT sample only if the SYN was not
        retransmitted, or through an echoed timestamp (RFC 7323 §4)."""
        c = self.conn
        if c.syn_retries == 0:
            c.rtt.on_sample(now - c.timers.first_rto_time)
        elif c.ts_ok and seg.ts_ecr:
            c.ts_rtt_sample(seg.ts_ecr, now)
