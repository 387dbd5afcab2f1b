"""What a connection sends, and when (RFC 9293 §3.8.6, RFC 896/Minshall, RFC 6675 §5).

:class:`Output` decides and builds the segments of one connection: retransmissions of
what recovery marked lost (RFC 6675 NextSeg), new data within the send and congestion
windows with sender silly-window avoidance, Nagle (Linux's Minshall variant), cork and
MSG_MORE (TSO/GSO sizing and deferral are tcp/tso.py's), the SYN and SYN-ACK with their
options, and the emit path that turns one segment into an IP packet for the stack.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from typing import TYPE_CHECKING, Final

from usertcp.tcp.buffers import MAX_SKB_FRAGS, SKB_PSH
from usertcp.tcp.info import (
    CHRONO_BUSY,
    CHRONO_RWND_LIMITED,
    CHRONO_SNDBUF_LIMITED,
    Chrono,
)
from usertcp.tcp.memory import SOCK_MIN_SNDBUF
from usertcp.tcp.pacing import Pacer, pacing_rate
from usertcp.tcp.recovery import (
    CA_CWR,
    CA_LOSS,
    CA_OPEN,
    CA_RECOVERY,
    ECN_DEMAND_CWR,
    ECN_OK,
    ECN_QUEUE_CWR,
    INF,
    SentSegment,
)
from usertcp.tcp.seq import SEQ_MASK
from usertcp.tcp.states import SYNCHRONIZED, State
from usertcp.tcp.tso import (
    MAX_TCP_HEADER,
    TSO_DEFER_CWND,
    TSO_SEND,
    packet_limit,
    size_goal,
    tso_bytes,
    tso_should_defer,
)
from usertcp.tcp.zerocopy import frag_fit
from usertcp.wire.packet import build_packet
from usertcp.wire.segment import ACK, CWR, ECE, ECN_ECT0, FIN, PSH, RST, SYN, Buffer, Segment
from usertcp.wire.tcp import encode_options

if TYPE_CHECKING:
    from usertcp.tcp.connection import Connection

# Path-MTU discovery modes (IP_MTU_DISCOVER values, linux/in.h).
IP_PMTUDISC_DONT, IP_PMTUDISC_WANT, IP_PMTUDISC_DO, IP_PMTUDISC_PROBE = 0, 1, 2, 3
# Linux ip_dont_fragment(): IPv4 DF only with IP_PMTUDISC_WANT (the default) or IP_PMTUDISC_DO.
_DF_MODES = (IP_PMTUDISC_WANT, IP_PMTUDISC_DO)
MAX_WINDOW: Final = 65535
SKB_SHINFO_SIZE: Final = 320             # SKB_DATA_ALIGN(sizeof(struct skb_shared_info))
SK_BUFF_SIZE: Final = 256                # SKB_DATA_ALIGN(sizeof(struct sk_buff))


class Output:
    """The transmit side of one connection: its Nagle/cork state and the segments it builds."""

    __slots__ = ("bytes_retrans", "bytes_sent", "chrono", "conn", "corked", "cwnd_deferred", "data_sent_time",
                 "force_push", "mid_write", "more_pending", "nagle_off", "pacer", "push_end", "snd_sml",
                 "ts_last", "xmit_budget")

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.snd_sml = 0               # end of the last small segment (Minshall's Nagle)
        self.nagle_off = False         # TCP_NODELAY
        self.corked = False            # TCP_CORK
        self.more_pending = False      # inside a send(MSG_MORE): hold its partial segment
        self.push_end = 0              # stream end of the last write without MSG_MORE (PSH mark)
        self.force_push = False        # one push overriding cork/MSG_MORE (TCP_NODELAY set, uncork)
        self.cwnd_deferred = False     # tso_should_defer held data for cwnd room (*is_cwnd_limited)
        self.mid_write = False         # a push inside send(): more of the same write follows
        self.xmit_budget = -1          # bytes of new data this output may send (-1: no limit)
        self.ts_last = 0               # the last TSval sent, before the offset (RFC 7323 §5.4)
        self.data_sent_time = -1.0     # Linux lsndtime: when new data last left
        self.chrono = Chrono()         # busy / rwnd-limited / sndbuf-limited time (tcp_info)
        self.bytes_sent = 0            # data bytes sent, retransmissions included (tp->bytes_sent)
        self.bytes_retrans = 0         # data bytes retransmitted (tp->bytes_retrans)
        self.pacer = Pacer(conn)       # departure times at the pacing rate (fq, tcp/pacing.py)

    def pacing_rate(self) -> int:
        """sk_pacing_rate in bytes/s (tcp/pacing.py pacing_rate, Linux tcp_update_pacing_rate)."""
        return pacing_rate(self.conn)

    def window_field(self, syn: bool) -> int:
        """The receive window to advertise (RFC 9293 §3.8.6.2.2, as Linux chooses it)."""
        c = self.conn
        if syn:
            free = c.rcvbuf_limit - len(c.rcv_buf) - c.ooo.bytes_queued
            if free < 0:
                free = 0
            # RFC 7323 §2.2: the SYN window is never scaled. Its right edge is relative to
            # the peer's ISN+1, which a SYN-SENT connection learns only from the SYN-ACK.
            wnd = min(free, c.rx.rcv_wnd_initial)   # tcp/window.py: tcp_select_initial_window
            c.syn_window = wnd
            c.rcv_adv = max(c.rcv_adv, c.rcv_nxt + wnd)
            return wnd
        return c.rx.select_window()       # tcp_select_window (tcp/receive.py, tcp/window.py)

    def tsval(self, now: float) -> int:
        c = self.conn
        # RFC 7323 §5.4: TSval must never go backwards, even if a caller's clock reading is
        # older than one used before (the peer's PAWS would drop the segment).
        t = int(now * 1000)
        if t < self.ts_last:
            t = self.ts_last
        self.ts_last = t
        return (t + c.ts_offset) & SEQ_MASK

    def emit(self, now: float, off: int, flags: int, payload: list[memoryview] | tuple[()] = (),
              options: bytes | None = None, gso_size: int = 0) -> bool:
        """Build and queue one segment starting at send offset ``off``; False if the local
        queue refused it (``Stack.tx_refuse``).

        As in Linux's __tcp_transmit_skb, what precedes the hand-off happens either way: the
        ACK state is cleared (a refused ACK is just lost) and the segment is counted.
        """
        c = self.conn
        rx = c.rx
        tm = c.timers
        syn = bool(flags & SYN)
        if options is None:
            options = self.data_options(now)
        window = self.window_field(syn)
        ack = 0
        if flags & ACK:
            ack = (c.irs + c.rcv_nxt) & SEQ_MASK
            c.last_ack_sent = c.rcv_nxt
            rx.ack_pending = 0
            rx.ack_now = False         # Linux tcp_event_ack_sent: ICSK_ACK_NOW is cleared too
            tm.delack_deadline = INF
            if rx.comp.count:
                rx.compressed_acks_sent()
            rx.dsack = None
        c.path.on_transmit()           # __sk_dst_check: a changed route is looked up again
        flags, tos = self.ecn_marks(flags, syn, bool(payload), off)
        pkt = build_packet(src=c.local_ip, dst=c.remote_ip, sport=c.local_port,
                           dport=c.remote_port, seq=(c.iss + off) & SEQ_MASK, ack=ack, flags=flags,
                           window=window, options=options, payload=payload, ttl=c.config.ttl,
                           tos=tos, md5_key=c.md5_key, csum_partial=c.stack.tx_csum_offload,
                           gso_size=gso_size, df=c.pmtudisc in _DF_MODES)
        # Only an explicit False is a refusal: a wrapper of output() that drops its result
        # (it returned None before refusals existed) must not read as one.
        ok = c.stack.output(pkt) is not False
        if ok:
            self.pacer.on_transmit(now, len(pkt))      # EDT: tcp_update_skb_after_send
        if c.errqueue is not None and payload and ok:   # transmit timestamps (first or again)
            c.errqueue.on_sent(off - 1, off - 1 + sum(len(p) for p in payload), now)
        c.segs_out += 1
        c.last_snd_time = now
        c.hot.out_segs += 1
        if flags & RST:
            c.mib["TcpOutRsts"] += 1
        if not ok:
            tm.tx_refused = True
            if c.state in SYNCHRONIZED:
                # Linux __tcp_transmit_skb: local congestion (err > 0) is a congestion signal.
                c.recovery.enter_cwr(now, "local_congestion")
        return ok

    def ecn_marks(self, flags: int, syn: bool, has_data: bool, off: int) -> tuple[int, int]:
        """The ECN bits of one segment: its TCP flags and IP TOS (AccECN, RFC 3168, DCTCP)."""
        c = self.conn
        tos = c.tos
        ef = c.ecn_flags
        acc = c.accecn
        if acc is not None:
            # RFC 9768: the handshake's ACE encodings, then r.cep on every segment, all ECT(0).
            if syn:
                flags |= acc.syn_flags(flags, c.syn_retries > 0)
                if c.cc.needs_ecn and not flags & ACK:
                    tos |= ECN_ECT0
                acc.note_syn_sent(tos)
            elif not acc.pending:
                # A TIME-WAIT ACK is Linux's timewait socket's (tcp_v4_send_ack): no ACE field,
                # but the ECT(0) TOS the socket had.
                if c.state is not State.TIME_WAIT:
                    flags |= acc.ace(flags)
                if acc.sends_ect:
                    tos |= ECN_ECT0
        elif syn:
            if ef & ECN_OK and c.cc.needs_ecn and not flags & ACK:
                tos |= ECN_ECT0     # Linux tcp_ecn_send_syn: INET_ECN_xmit for DCTCP's SYN
        elif ef:
            # Linux tcp_ecn_send(): only new data is ECT(0) (RFC 3168 §6.1.5: never pure ACKs
            # or retransmissions), and the first of it after a reduction carries CWR; ECE
            # goes on every segment while a CE mark waits for the peer's CWR (§6.1.3). A
            # controller that needs ECN (DCTCP, RFC 8257 §3.1) keeps every packet ECT.
            if ef & ECN_OK and c.cc.needs_ecn:
                tos |= ECN_ECT0
            if has_data and off >= c.snd_max:
                tos |= ECN_ECT0
                if ef & ECN_QUEUE_CWR:
                    c.ecn_flags = ef = ef & ~ECN_QUEUE_CWR
                    flags |= CWR
            if ef & ECN_DEMAND_CWR and c.state is not State.TIME_WAIT:
                flags |= ECE
        return flags, tos

    def data_options(self, now: float) -> bytes:
        """Options of a non-SYN segment: timestamps and SACK blocks (RFC 7323, 2018, 2883)."""
        c = self.conn
        rx = c.rx
        ts = (self.tsval(now), c.ts_recent) if c.ts_ok else None
        blocks: list[tuple[int, int]] = []
        if c.sack_ok and (rx.dsack is not None or not c.ooo.empty):
            room = 40 - (12 if ts else 0) - (20 if c.md5_key is not None else 0)
            max_blocks = (room - 4) // 8
            irs = c.irs
            if rx.dsack is not None and max_blocks > 0:
                blocks.append(((irs + rx.dsack[0]) & SEQ_MASK, (irs + rx.dsack[1]) & SEQ_MASK))
            for left, right in c.ooo.sack_blocks(max_blocks):
                if len(blocks) >= max_blocks:
                    break
                blocks.append((left, right))
        if c.accecn is not None:
            opts = c.accecn.established_options(now, c.rtt.srtt or 0.0, ts, blocks, c.md5_key is not None)
            if opts is not None:
                return opts
        if not ts and not blocks and c.md5_key is None:
            return b""
        return encode_options(ts=ts, sack_blocks=blocks, md5=c.md5_key is not None)

    def send_ack(self, now: float) -> None:
        c = self.conn
        self.emit(now, c.snd_nxt, ACK)

    def send_rst(self, now: float) -> None:
        """An active reset (RFC 9293 §3.10.7.4 abort): RST|ACK at snd_nxt."""
        c = self.conn
        self.emit(now, c.snd_nxt, RST | ACK, options=self.rst_options(now))

    def rst_options(self, now: float) -> bytes:
        c = self.conn
        ts = (self.tsval(now), c.ts_recent) if c.ts_ok else None
        if ts is None and c.md5_key is None:
            return b""
        return encode_options(ts=ts, md5=c.md5_key is not None)

    def syn_options(self, now: float, synack: bool, peer: Segment | None) -> bytes:
        """Linux's SYN/SYN-ACK option set: only what the peer offered, for a SYN-ACK."""
        c = self.conn
        cfg = c.config
        mss = c.path.advmss()          # dst_metric_advmss(): the route's, or its MTU's
        if c.pmtu:
            mss = min(mss, c.pmtu - (60 if c.v6 else 40))   # the route's advmss follows its PMTU
        if c.user_mss:
            mss = min(mss, c.user_mss)
        if synack:
            ts = (self.tsval(now), c.ts_recent) if c.ts_ok else None
            sack = c.sack_ok
            wscale = c.rcv_wscale if c.ws_ok else -1
        else:
            ts = (self.tsval(now), 0) if cfg.timestamps else None
            sack = cfg.sack
            wscale = c.rcv_wscale if cfg.window_scaling else -1
        fastopen, fastopen_exp = c.stack.fastopen_syn_option(c, synack, peer)
        if synack and c.accecn is not None and fastopen is None:
            opts = c.accecn.synack_options(c.syn_retries, mss=mss, ts=ts, sack=sack, wscale=wscale,
                                           md5=c.md5_key is not None)
            if opts is not None:
                return opts
        return encode_options(mss=mss, ts=ts, sack_permitted=sack, wscale=wscale,
                              fastopen=fastopen, fastopen_exp=fastopen_exp, md5=c.md5_key is not None)

    def send_syn(self, now: float) -> bool:
        """Send (or resend) the SYN or SYN-ACK; False if the local queue refused it, which
        the first transmission ignores as Linux's tcp_connect/tcp_conn_request do (a loss)."""
        c = self.conn
        rec = c.recovery
        tm = c.timers
        flags = SYN
        payload: list[memoryview] = []
        if c.state is State.SYN_RECEIVED:
            flags |= ACK
            if c.ecn_flags & ECN_OK:
                flags |= ECE         # Linux tcp_ecn_make_synack / tcp_ecn_send_synack
        elif c.ecn_flags & ECN_OK and not (c.syn_retries and c.config.ecn_fallback):
            # Linux tcp_ecn_send_syn; tcp_ecn_clear_syn: a retransmitted SYN goes without
            # ECE|CWR (RFC 3168 §6.1.1.1), in case a middlebox drops ECN-setup SYNs.
            flags |= ECE | CWR
        payload = c.stack.syn_payload(c)
        ok = self.emit(now, 0, flags, payload, options=self.syn_options(now, bool(flags & ACK), None))
        end = 1 + sum(len(p) for p in payload)
        c.snd_nxt = max(c.snd_nxt, end)
        c.snd_max = max(c.snd_max, end)
        if tm.rto_deadline == INF:
            tm.rto_deadline = now + c.rtt.timeout
        if payload and not rec.rtx:
            rec.rtx.append(SentSegment(1, end, False, now))
        elif rec.rtx and rec.rtx[0].start == 1 and (payload or c.state is State.SYN_RECEIVED):
            # A retransmitted SYN-ACK, with its data or without it (tcp_rtx_synack): an ACK of
            # the data is ambiguous now, Karn's rule must see it (RFC 6298 §3).
            rec.rtx[0].tx_count += 1
            rec.rtx[0].tx_time = now
            rec.rtx.sent_again(rec.rtx[0])
        return ok

    def run(self, now: float) -> None:
        """Send what the windows allow: retransmissions, new data, FIN, then any owed ACK."""
        c = self.conn
        rx = c.rx
        tm = c.timers
        st = c.state
        if st is State.CLOSED or st is State.LISTEN or st is State.TIME_WAIT:
            if rx.ack_now:
                rx.ack_now = False
                if st is State.TIME_WAIT:
                    self.send_ack(now)
            return
        if st is State.SYN_SENT or st is State.SYN_RECEIVED:
            rx.ack_now = False
            c.stack.syn_state_output(c, now)
            return
        c.path.current_mss(now)        # tcp_current_mss(): a changed route MTU, tcp_mtup_init
        sent = False
        if c.recovery.lost_bytes:
            sent = self.send_retransmissions(now)
        if c.snd_nxt <= c.snd_buf.end + (1 if c.fin_queued else 0):
            if self.send_new_data(now):
                sent = True
            self.note_rwnd_limit(now)
        # Linux tcp_write_xmit ends with tcp_cwnd_validate(): cwnd-limited when the flight
        # fills the window (in whole segments, as Linux counts packets).
        cc = c.cc
        limited = c.in_flight + c.mss > cc.cwnd or self.cwnd_deferred   # or TSO deferral for cwnd
        self.cwnd_deferred = False
        if sent or limited:
            cc.validate(c.snd_una, c.snd_nxt, c.snd_nxt - c.snd_una, limited)
            cc.validate_use(now, c.snd_nxt - c.snd_una, c.rtt.timeout,
                            app_limited_check=c.config.slow_start_after_idle,
                            may_shrink=c.recovery.ca_state == CA_OPEN and not c.sock_nospace,
                            init_window=(c.path.initcwnd() or 10) * c.mss)
            if (not cc.is_cwnd_limited() and c.sock_nospace and not c.unsent_bytes
                    and c.state in (State.ESTABLISHED, State.CLOSE_WAIT)):
                self.chrono.start(CHRONO_SNDBUF_LIMITED, now)   # starved by the send buffer
        if c.snd_una >= c.snd_max and not c.unsent_bytes:
            self.chrono.stop(CHRONO_BUSY, now, True)            # nothing left: not busy
        self.force_push = False
        if rx.ack_now:
            rx.ack_now = False
            if not sent or rx.ack_pending:
                self.send_ack(now)
        if c.snd_max > c.snd_una and tm.rto_deadline == INF:
            tm.rto_deadline = now + c.rtt.timeout
        if sent:
            tm.tlp_deadline = INF      # Linux re-arms the probe after each transmission
            tm.arm_tlp(now)
        tm.arm_probe(now)
        if c.keepalive and c.state in SYNCHRONIZED:
            tm.keepalive_deadline = c.last_rcv_time + c.keepalive_time \
                if tm.probes_out == 0 else tm.keepalive_deadline

    def send_retransmissions(self, now: float) -> bool:
        """RFC 6675 §5 NextSeg rule 1: retransmit lost segments while pipe < cwnd (Linux
        tcp_xmit_retransmit_queue: each skb up to the cwnd room and the TSO size)."""
        c = self.conn
        rec = c.recovery
        sent = False
        cwnd = c.cc.cwnd
        mss = c.mss
        rtx = rec.rtx
        i = rec.first_to_retransmit() - 1
        while i + 1 < len(rtx):
            i += 1
            r = rtx[i]
            if not r.lost or r.retrans or r.sacked:
                continue
            room = cwnd - c.in_flight
            if room <= 0 and not (not sent and rec.ca_state == CA_RECOVERY and rec.retrans_bytes == 0):
                break
            if room < r.end - r.start and room < mss and sent:
                break
            if self.pacer.must_wait(now):
                break             # tcp_pacing_check
            if not self.retransmit(r, now, i, max(room // mss, 1) * mss):
                break             # Linux tcp_xmit_retransmit_queue stops at a failed one
            sent = True
        return sent

    def retransmit(self, r: SentSegment, now: float, index: int = 0, room: int = 0) -> bool:
        """Resend ``r`` (Linux __tcp_retransmit_skb): one MSS, or up to ``room`` bytes and
        the TSO size as one packet; the rest is cut off first (tcp_fragment)."""
        c = self.conn
        rec = c.recovery
        tm = c.timers
        c.path.abandon_probe()         # __tcp_retransmit_skb: a retransmission ends an MTU probe
        mss = c.mss
        limit = mss
        if room > mss:
            limit = min(room, max(packet_limit(c, half_cwnd=False), mss))
        dlen = self.shape_retransmission(r, index, limit)
        buf = c.snd_buf
        flags = ACK
        if r.fin:
            flags |= FIN
        # __tcp_transmit_skb(): PSH on a multi-segment packet, retransmitted or not.
        if dlen > mss or (dlen and buf.skb_flags(r.start - 1) & SKB_PSH
                          and buf.skb_end(r.start - 1) == r.start - 1 + dlen):
            flags |= PSH
        if dlen > mss and c.stack.gso_max_size <= 0:
            ok = self.emit_segmented(now, r.start, dlen, flags)
        else:
            ok = self.emit(now, r.start, flags, buf.views(r.start - 1, dlen) if dlen else [],
                           gso_size=mss if dlen > mss else 0)
        if not ok:
            return self.retransmit_refused(r)
        if rec.ca_state == CA_RECOVERY or rec.ca_state == CA_CWR:
            rec.prr_out += r.end - r.start
        r.retrans = True
        r.gso_size = mss if dlen > mss else 0      # tcp_set_skb_tso_segs(skb, cur_mss)
        rec.retrans_bytes += r.end - r.start
        r.tx_count += 1
        r.tx_time = now
        rec.rtx.sent_again(r)
        self.bytes_sent += dlen
        self.bytes_retrans += dlen
        segs = -(-dlen // mss) if dlen else 1     # Linux counts tcp_skb_pcount(skb)
        c.total_retrans += segs
        if c.stack.tracer is not None:
            reason = {CA_RECOVERY: "fast", CA_LOSS: "rto"}.get(rec.ca_state, "probe")
            c.stack.trace(c, "tcp:retransmit", {"rel_seq": r.start, "end": r.end,
                                                      "tx_count": r.tx_count, "reason": reason}, now)
        c.mib["TcpRetransSegs"] += segs
        if rec.ca_state == CA_RECOVERY:
            c.mib["TcpExtTCPFastRetrans"] += segs
        if tm.rto_deadline == INF:
            tm.rto_deadline = now + c.rtt.timeout
        return True

    def shape_retransmission(self, r: SentSegment, index: int, limit: int) -> int:
        """__tcp_retransmit_skb's sizing of ``r`` (at ``index``): longer than ``limit``, the
        rest is cut off (tcp_fragment; the tail keeps the history, SentSegment.split); one
        segment shorter than the MSS and the window left, the next ones join it
        (tcp_retrans_try_collapse). The send queue's skbs follow: cut to what is resent, the
        copy carrying the skb's own PSH mark when it ends the skb, joined skbs made one with
        the marks of all. The payload bytes to send."""
        c = self.conn
        dlen = r.end - r.start - (1 if r.fin else 0)
        joined = False
        if dlen > limit:
            c.recovery.rtx.insert(index + 1, r.split(r.start + limit))
        else:
            avail = min(c.snd_una + c.snd_wnd - r.start, c.mss)
            if dlen < avail and r.pcount == 1:
                joined = c.recovery.retrans_try_collapse(index, avail)
        dlen = r.end - r.start - (1 if r.fin else 0)
        buf = c.snd_buf
        buf.split(r.start - 1)
        buf.split(r.start - 1 + dlen)
        if joined:
            buf.send_packet(r.start - 1, r.start - 1 + dlen)
        return dlen

    def retransmit_refused(self, r: SentSegment) -> bool:
        """Linux __tcp_retransmit_skb when the local queue refused the copy: counted as a
        retransmission (and TCPRetransFail), marked EVER_RETRANS so no RTT sample comes from
        it (Karn), but not SACKED_RETRANS: it is not in flight and stays to be retransmitted."""
        c = self.conn
        r.tx_count += 1
        c.total_retrans += 1
        c.mib["TcpRetransSegs"] += 1
        c.mib["TcpExtTCPRetransFail"] += 1
        return False

    def note_rwnd_limit(self, now: float) -> None:
        """The end of Linux tcp_write_xmit: receive-window limited when the cwnd has room
        but the next unsent MSS does not fit the peer's window (tcp_snd_wnd_test), for
        tcpi_rwnd_limited."""
        c = self.conn
        unsent = c.snd_buf.end + 1 - c.snd_nxt
        # tcp_write_xmit tests the cwnd first: a full cwnd is not a window limit.
        if (unsent > 0 and c.in_flight + c.mss <= c.cc.cwnd
                and c.snd_una + c.snd_wnd - c.snd_nxt < min(c.mss, unsent)):
            self.chrono.start(CHRONO_RWND_LIMITED, now)
        else:
            self.chrono.stop(CHRONO_RWND_LIMITED, now, False)

    def send_new_data(self, now: float) -> bool:
        """Linux tcp_write_xmit: one packet per skb (or its head, tso_fragment), within the
        windows; sender SWS avoidance, and Nagle (Minshall) or cork on the last skb only."""
        c = self.conn
        buf = c.snd_buf
        sent = False
        mss = c.mss
        data_end = buf.end + 1          # offset just past the last queued byte
        budget = self.xmit_budget               # tcp_push_one(): one skb's burst at most
        if budget < 0 and c.path.enabled:
            probe = c.path.probe(now)           # tcp_write_xmit: tcp_mtu_probe() first
            if probe == 0:
                return False
            sent = probe > 0
        limit = packet_limit(c)
        while True:
            nxt = c.snd_nxt
            avail = data_end - nxt
            if avail <= 0:
                if c.fin_queued and nxt == data_end:
                    # A bare FIN is sent regardless of the windows' payload room.
                    return self.emit_new(now, nxt, 0, fin=True) or sent
                break
            # A fast-open child's unacknowledged SYN-ACK takes no room: Linux starts its
            # snd_una after it (tcp_create_openreq_child), and counts packets for the cwnd.
            syn_unacked = 1 if c.snd_una == 0 else 0
            wnd_room = c.snd_una + syn_unacked + c.snd_wnd - nxt
            cwnd_room = c.cc.cwnd - c.in_flight + syn_unacked
            if cwnd_room <= 0 or wnd_room <= 0 or self.pacer.must_wait(now):
                break             # the windows, or tcp_pacing_check()
            if nxt == c.snd_una and not sent and c.config.slow_start_after_idle:
                # Queued data leaving after an idle period restarts the window too (the
                # corpus' slow_start/slow-start-after-win-update.pkt: held by a zero window).
                self.idle_restart(now)
                cwnd_room = c.cc.cwnd - c.in_flight + syn_unacked
                limit = packet_limit(c)
            # A packet takes the skb at the send head and, as Linux 6.10+ tcp_grow_skb()
            # pulls them in, the next ones up to an skb written with MSG_EOR.
            skb_rest = min(buf.collapse_end(nxt - 1) + 1 - nxt, avail)
            size = min(skb_rest, limit, wnd_room, cwnd_room)
            if mss < size < skb_rest:
                size -= size % mss     # tso_fragment cuts a GSO packet at whole segments
            if budget >= 0:
                if budget == 0:
                    break
                size = min(size, budget)
            elif skb_rest > mss and limit > mss and self.tso_defer(now, nxt, skb_rest, wnd_room, cwnd_room):
                break
            size = self.small_segment_test(size, avail, skb_rest, cwnd_room)
            if size == 0:
                break
            fin = c.fin_queued and nxt + size == data_end
            if not self.emit_new(now, nxt, size, fin=fin):
                break          # Linux tcp_write_xmit: a refused skb stays at the queue head
            sent = True
            if budget >= 0:
                budget = 0     # tcp_push_one(): tcp_write_xmit stops after one packet
            if size < mss:
                self.snd_sml = nxt + size
        return sent

    def small_segment_test(self, size: int, avail: int, skb_rest: int, cwnd_room: int) -> int:
        """What of a ``size``-byte packet of new data may leave now (0: hold it all), with
        ``avail`` bytes unsent, ``skb_rest`` in the send head's skb: sender SWS avoidance,
        then Nagle (Minshall) and cork on the tail of the last skb."""
        c = self.conn
        mss = c.mss
        if size < mss and size < skb_rest:
            # Window-limited to a small segment: only if it is half the max window (SWS).
            if size < c.max_snd_wnd // 2 or (cwnd_room < mss and cwnd_room < avail):
                if not (cwnd_room < mss and c.snd_nxt == c.snd_una):
                    return 0
        if size == avail and size % mss and not self.force_push and (
                self.corked or self.more_pending or self.mid_write
                or (not self.nagle_off and self.snd_sml > c.snd_una and c.snd_nxt > c.snd_una)):
            # A partial segment at the end of the last skb: Nagle/cork hold it (RFC 896;
            # Linux tcp_nagle_test for the write queue's tail only, and
            # tcp_mss_split_point, which sends the full segments before it).
            if size < mss:
                return 0
            size -= size % mss
        return size

    def tso_defer(self, now: float, nxt: int, skb_len: int, send_win: int, cong_win: int) -> bool:
        """Hold the skb at ``nxt`` for a larger TSO packet (tcp/tso.py tso_should_defer)?
        Held for cwnd room, the cwnd counts as used (*is_cwnd_limited)."""
        verdict = tso_should_defer(self.conn, now, self.data_sent_time, nxt, skb_len, send_win, cong_win)
        if verdict == TSO_DEFER_CWND:
            self.cwnd_deferred = True
        return verdict != TSO_SEND

    def emit_new(self, now: float, off: int, size: int, *, fin: bool, force_psh: bool = False,
                 probe: bool = False) -> bool:
        """Send new data [off, off+size) as one packet, made one skb (tcp_grow_skb merges
        the skbs it covers, tso_fragment cuts the one it ends in), so PSH is the mark
        (tcp_mark_push) of an skb it ends. Linux __tcp_transmit_skb() also sets PSH on every
        multi-segment packet (tcp_skb_pcount(skb) > 1, "to expedite GRO flush at receiver";
        seen on this machine's kernel by tools/kernel_psh_probe.py); segmentation keeps it
        on the last segment only."""
        c = self.conn
        rec = c.recovery
        tm = c.timers
        buf = c.snd_buf
        mss = c.mss
        flags = ACK
        start = off - 1
        # An MTU probe is one larger packet (tcp_mtu_probe: tcp_init_tso_segs(nskb, nskb->len)).
        multi = size > mss and not probe
        if size and (force_psh or multi or buf.packet_flags(start, start + size) & SKB_PSH):
            flags |= PSH
        if fin:
            flags |= FIN
        end = off + size + (1 if fin else 0)
        if c.in_flight == 0 and self.data_sent_time >= 0:
            c.cc.on_tx_start(now - self.data_sent_time, now)   # tcp_event_data_sent()
        # __tcp_transmit_skb counts the data before the hand-off, so that a transmit
        # timestamp's OPT_STATS (taken by the driver) include this packet. An MTU probe is
        # one segment (tcp_skb_pcount 1).
        segs = -(-size // mss) if multi else (1 if size else 0)
        self.bytes_sent += size
        c.data_segs_out += segs
        if not multi or c.stack.gso_max_size > 0:
            payload = buf.views(start, size) if size else []
            ok = self.emit(now, off, flags, payload, gso_size=mss if multi else 0)
        else:
            ok = self.emit_segmented(now, off, size, flags)
        if not ok:
            self.bytes_sent -= size    # refused locally: not sent, SND.NXT stays (tcp_write_xmit)
            c.data_segs_out -= segs
            return False
        if size:
            buf.send_packet(start, start + size)   # tcp_grow_skb, tso_fragment
        if rec.ca_state == CA_RECOVERY or rec.ca_state == CA_CWR:
            rec.prr_out += end - off
        rec.rtx.append(SentSegment(off, end, fin, now, mss if multi else 0))
        c.snd_nxt = end
        if end > c.snd_max:
            c.snd_max = end
        if tm.rto_deadline == INF:
            tm.rto_deadline = now + c.rtt.timeout
        self.data_sent_time = now       # tcp_event_data_sent(): lsndtime
        if c.last_rcv_time and now - c.last_rcv_time < c.config.delack_min:
            c.rx.pingpong = True    # Linux tcp_event_data_sent: a reply soon after a receive
        return True

    def emit_segmented(self, now: float, off: int, size: int, flags: int) -> bool:
        """Software GSO for a link that does not segment (Linux tcp_gso_segment): MSS
        segments, PSH and FIN on the last one only; False if the first one was refused."""
        mss = self.conn.mss
        views = self.conn.snd_buf.views
        pos = off
        last = off + size
        while pos < last:
            n = min(mss, last - pos)
            f = flags if pos + n == last else flags & ~(PSH | FIN)
            if not self.emit(now, pos, f, views(pos - 1, n)) and pos == off:
                return False
            pos += n
        return True

    def check_space(self) -> None:
        """Linux tcp_check_space()/tcp_new_space(), after an ACK was processed: with a writer
        waiting, grow an unlocked send buffer to the congestion window, then wake it."""
        c = self.conn
        if not c.sock_nospace:
            return
        mem = c.stack.mem
        if not c.sndbuf_locked and c.in_flight < c.cc.cwnd and not mem.under_pressure():
            self.sndbuf_expand()       # tcp_should_expand_sndbuf()
        c.write_space()
        if not c.sock_nospace:
            self.chrono.stop(CHRONO_SNDBUF_LIMITED, c.stack.now, False)   # tcp_check_space()

    def sndbuf_expand(self) -> None:
        """Linux tcp_sndbuf_expand(): room for two windows of worst-case skbs (one per MSS,
        power-of-two heads) of max(IW10, cwnd, reordering + 1) segments, up to tcp_wmem[2]."""
        c = self.conn
        per_mss = max(c.peer_mss, c.mss) + MAX_TCP_HEADER + SKB_SHINFO_SIZE
        per_mss = (1 << (per_mss - 1).bit_length()) + SK_BUFF_SIZE
        nr_segs = max(10, c.cc.cwnd // max(c.mss, 1), c.recovery.reordering + 1)
        sndmem = 2 * nr_segs * per_mss
        if c.sndbuf_limit < sndmem:
            c.sndbuf_limit = min(sndmem, c.config.wmem[2])

    def no_memory(self) -> None:
        """Linux tcp_stream_alloc_skb when sk_wmem_schedule fails (the stack is past tcp_mem and
        the socket past its tcp_wmem[0]): memory pressure begins, an unlocked send buffer
        shrinks to half of what it has queued (sk_stream_moderate_sndbuf), and the writer waits
        for space (tcp_sendmsg_locked's wait_for_space sets SOCK_NOSPACE)."""
        c = self.conn
        c.mib["UsertcpSendMemLimited"] += 1
        c.stack.mem.under_pressure()
        if not c.sndbuf_locked:
            c.sndbuf_limit = max(min(c.sndbuf_limit, c.snd_buf.wmem_queued >> 1), SOCK_MIN_SNDBUF)
        c.sock_nospace = True

    def write(self, data: Buffer, now: float, more: bool, eor: bool = False, pinned: bool = False,
              tstamp: int = 0, regions: Sequence[int] = ()) -> int:
        """Copy ``data`` into the send buffer skb by skb (Linux tcp_sendmsg_locked), pushing
        full skbs as Linux does (forced_push, tcp_push_one) and the rest at the end
        (tcp_push); ``eor`` (MSG_EOR) closes the last skb to later writes. A ``pinned``
        (MSG_ZEROCOPY) write adds frags, one per page of each of its memory ``regions``
        (the lengths of its iovec; one region if none), at most MAX_SKB_FRAGS per skb."""
        c = self.conn
        buf = c.snd_buf
        total = len(data)
        mem = c.stack.mem
        view = data if isinstance(data, memoryview) else memoryview(data)
        owned = pinned or isinstance(data, bytes)   # pinned: MSG_ZEROCOPY, kept until acked
        zc_ends = list(accumulate(regions)) if pinned and regions else [total] if pinned else None
        if zc_ends is not None and (zc_ends[-1] != total or min(regions, default=1) <= 0):
            raise ValueError(f"regions {tuple(regions)} do not cover the {total} bytes written")
        goal = size_goal(c)
        copied = 0
        if total and not c.unsent_bytes:
            self.chrono.start(CHRONO_BUSY, now)  # tcp_add_write_queue_tail() on an empty queue
        while copied < total:
            copy = buf.tail_room(goal)
            new_skb = copy <= 0
            if new_skb:
                if buf.tail_frags_full():
                    self.mark_pushed()     # out of frags: tcp_mark_push(), goto new_segment
                if not c.memory_free:
                    c.sock_nospace = True  # wait_for_space: SOCK_NOSPACE, blocking or not
                    break
                copy = goal
                self.idle_restart(now)
            copy = min(copy, total - copied, mem.send_room(buf.wmem_queued, c.config.wmem[0]))
            if copy <= 0:
                self.no_memory()           # tcp_stream_alloc_skb failed: wait_for_space
                break
            frags = 0
            if zc_ends is not None:       # skb_zerocopy_iter_stream(): as many frags as fit
                room = MAX_SKB_FRAGS - (0 if new_skb else buf.tail_frags)
                copy, frags = frag_fit(zc_ends, copied, copy, room)
            if owned:
                chunk: Buffer = data if copy == total else view[copied:copied + copy]
            else:
                chunk = bytes(view[copied:copied + copy])   # the caller may reuse a mutable buffer
            if not new_skb and not copied:
                buf.clear_push()   # tcp_sendmsg_locked: "if (!copied) tcp_flags &= ~TCPHDR_PSH"
            buf.append(chunk, new_skb=new_skb, frags=frags)
            copied += copy
            if copied < total and c.is_synchronized and buf.tail_len() >= goal:
                goal = self._push_full_skb(now, more, goal)
        if copied > 0:
            self._end_write(now, copied == total, more, eor, tstamp)
        return copied

    def _end_write(self, now: float, whole: bool, more: bool, eor: bool, tstamp: int) -> None:
        """The end of tcp_sendmsg_locked for a write that queued bytes (all of them if
        ``whole``): MSG_EOR, the timestamp mark, then tcp_push()."""
        c = self.conn
        if eor and whole:
            c.snd_buf.mark_eor()
        if c.errqueue is not None and (tstamp > 1 or (tstamp and whole)):
            c.errqueue.mark_write()    # tcp_tx_timestamp(), before the final tcp_push
        if not more or self.forced_push():
            self.mark_pushed()        # tcp_push(): tcp_mark_push() on the tail skb
        if c.is_synchronized:
            # MSG_MORE holds a partial segment for this call's push only (Linux tcp_push with
            # TCP_NAGLE_CORK); a later ACK-clocked transmission sends it as Nagle allows.
            self.more_pending = more
            self.run(now)
            self.more_pending = False

    def _push_full_skb(self, now: float, more: bool, goal: int) -> int:
        """A full skb with more to copy: forced_push() marks PSH and pushes every half max
        window, else tcp_push_one() sends it when it is the send head. Returns the size goal
        the write continues with."""
        forced = self.forced_push()
        if forced:
            self.mark_pushed()
        if not forced and not self.conn.snd_buf.tail_is_send_head():
            return goal
        self.mid_write = True
        self.more_pending = more
        self.xmit_budget = -1 if forced else tso_bytes(self.conn)
        self.run(now)
        self.xmit_budget = -1
        self.mid_write = self.more_pending = False
        return size_goal(self.conn)

    def idle_restart(self, now: float) -> None:
        """Linux tcp_slow_start_after_idle_check(), as tcp_skb_entail() queues a new skb:
        with nothing outstanding and no data sent for an RTO, restart the window."""
        c = self.conn
        if not c.config.slow_start_after_idle or c.snd_nxt > c.snd_una or self.data_sent_time < 0:
            return
        idle = now - self.data_sent_time
        rto = c.rtt.timeout
        if idle > rto:
            c.cc.restart_after_idle(idle, rto, c.recovery.ca_state in (CA_CWR, CA_RECOVERY), now)

    def forced_push(self) -> bool:
        """Linux forced_push(): half the peer's largest window written since the last push."""
        return self.conn.snd_buf.end - self.push_end > self.conn.max_snd_wnd >> 1

    def mark_pushed(self) -> None:
        """Linux tcp_mark_push(): PSH on the last skb, pushed_seq = write_seq."""
        buf = self.conn.snd_buf
        buf.mark_push()
        self.push_end = buf.end
