"""One TCP connection: the RFC 9293 state machine with its reliability machinery.

Sans-IO: every entry point takes ``now`` (seconds) and never reads a clock. The
connection appends the packets it wants sent to its stack's output queue and
tells the stack its next timer deadline. Sequence numbers are kept internally as
unbounded *offsets* from the ISN (the SYN is offset 0, the first data byte is 1),
converted to 32-bit wire values only when a segment is built or parsed; this
removes modular comparisons from the hot paths.

Rules followed (section numbers of the RFCs cited):
- RFC 9293 §3.10: segment arrival processing, in the order the RFC lists the checks.
- RFC 5961: RST/SYN/ACK injection defences (challenge ACKs, rate limited).
- RFC 7323: window scale, timestamps, PAWS.
- RFC 2018/2883/6675: SACK, D-SACK, SACK-based loss recovery with a pipe estimate.
- RFC 5681/6582: slow start, fast retransmit, NewReno partial ACKs for non-SACK peers.
- RFC 6298: the retransmission timer; RFC 6928: IW10; RFC 3042: limited transmit
  (falls out of the pipe estimate, as in Linux: each dupack lets one segment leave).
- RFC 896/Minshall (Linux's Nagle variant), RFC 9293 §3.8.6.2: silly window avoidance.
- RFC 1122 §4.2.3.6: keepalive; RFC 9293 §3.8.6.1: zero-window probing.
- RFC 3168: ECN, as Linux does it (``tcp_ecn`` sysctl): negotiation in the handshake, ECT(0)
  on new data, ECE echoed from a CE mark until CWR, one cwnd reduction per window (CWR state).
"""

from __future__ import annotations

import errno
import math
from collections import deque
from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import TYPE_CHECKING

from usertcp.tcp.buffers import RecvBuffer, SendBuffer
from usertcp.tcp.config import ECN_ON
from usertcp.tcp.congestion import CongestionControl, create_congestion_control
from usertcp.tcp.md5sig import Md5Keys
from usertcp.tcp.reassembly import ReassemblyQueue
from usertcp.tcp.rtt import RttEstimator
from usertcp.tcp.seq import SEQ_MASK, seq_diff
from usertcp.wire.packet import build_packet
from usertcp.wire.segment import (
    ACK,
    AE,
    CWR,
    ECE,
    ECN_CE,
    ECN_ECT0,
    ECN_NOT_ECT,
    FIN,
    PSH,
    RST,
    SYN,
    URG,
    Buffer,
    Segment,
)
from usertcp.wire.tcp import encode_options

if TYPE_CHECKING:
    from usertcp.tcp.config import StackConfig
    from usertcp.tcp.stack import Listener, Stack

INF = float("inf")
# Path-MTU discovery modes (IP_MTU_DISCOVER values, linux/in.h).
IP_PMTUDISC_DONT, IP_PMTUDISC_WANT, IP_PMTUDISC_DO, IP_PMTUDISC_PROBE = 0, 1, 2, 3
# Linux ip_dont_fragment(): IPv4 DF only with IP_PMTUDISC_WANT (the default) or IP_PMTUDISC_DO.
_DF_MODES = (IP_PMTUDISC_WANT, IP_PMTUDISC_DO)
TS_PAWS_IDLE = 24 * 24 * 3600.0   # RFC 7323 §5.5: ts_recent is invalid after 24 days idle
MAX_WINDOW = 65535
GSO_MAX_SIZE = 65536              # Linux GSO_LEGACY_MAX_SIZE: sk_gso_max_size with software GSO
MAX_TCP_HEADER = 320              # Linux L1_CACHE_ALIGN(128 + MAX_HEADER) on x86-64
SKB_SHINFO_SIZE = 320             # SKB_DATA_ALIGN(sizeof(struct skb_shared_info))
SK_BUFF_SIZE = 256                # SKB_DATA_ALIGN(sizeof(struct sk_buff))
# Linux TCP_RESOURCE_PROBE_INTERVAL (HZ/2): the retry interval after the local queue refused
# a transmission (NET_XMIT_DROP), without backoff; TCP_TIMEOUT_MIN (2 jiffies) floors timers.
RESOURCE_PROBE_INTERVAL = 0.5
TIMEOUT_MIN = 0.002


class State(IntEnum):
    """TCP states, numbered as Linux's tcpi_state so tcp_info reads the same."""

    ESTABLISHED = 1
    SYN_SENT = 2
    SYN_RECEIVED = 3
    FIN_WAIT_1 = 4
    FIN_WAIT_2 = 5
    TIME_WAIT = 6
    CLOSED = 7
    CLOSE_WAIT = 8
    LAST_ACK = 9
    LISTEN = 10
    CLOSING = 11


SYNCHRONIZED = frozenset({State.ESTABLISHED, State.FIN_WAIT_1, State.FIN_WAIT_2, State.CLOSE_WAIT,
                          State.CLOSING, State.LAST_ACK, State.TIME_WAIT})
# States in which received data is still delivered (RFC 9293 §3.10.7.4, seventh step).
RECEIVING = frozenset({State.ESTABLISHED, State.FIN_WAIT_1, State.FIN_WAIT_2})
# States in which the application may still send.
SENDING = frozenset({State.ESTABLISHED, State.CLOSE_WAIT, State.SYN_SENT, State.SYN_RECEIVED})

# Header prediction (Linux pred_flags): the 4th header word with the reserved bits, AE and
# PSH masked out; the prediction is (header length << 28) | ACK << 16 | expected window.
HP_MASK = 0xF0F7FFFF

# Linux congestion-avoidance states for tcpi_ca_state.
CA_OPEN, CA_DISORDER, CA_CWR, CA_RECOVERY, CA_LOSS = 0, 1, 2, 3, 4

# Linux tp->ecn_flags (include/net/tcp.h).
ECN_OK = 0x1           # negotiated in the handshake
ECN_QUEUE_CWR = 0x2    # cwnd was reduced: set CWR on the next new data segment
ECN_DEMAND_CWR = 0x4   # a CE mark arrived: set ECE on every segment until the peer's CWR
ECN_SEEN = 0x8         # an ECT or CE segment arrived

# tcpi_options bits (include/uapi/linux/tcp.h).
TCPI_OPT_TIMESTAMPS = 1
TCPI_OPT_SACK = 2
TCPI_OPT_WSCALE = 4
TCPI_OPT_ECN = 8
TCPI_OPT_ECN_SEEN = 16
TCPI_OPT_SYN_DATA = 32


def ecn_syn_acceptable(seg: Segment, cfg: StackConfig) -> bool:
    """Linux tcp_ecn_create_request(): does a SYN set up ECN for the passive side?

    RFC 3168 §6.1.1: an ECN-setup SYN has ECE and CWR set; any non-zero tcp_ecn accepts it.
    A SYN that is itself ECT-marked is refused (RFC 3168 §6.1.1: SYNs are not ECT, so a
    marked one hints at a broken middlebox), unless a reserved bit (AccECN's AE) is set.
    """
    if seg.flags & (ECE | CWR) != ECE | CWR or not cfg.ecn:
        return False
    return seg.ecn == ECN_NOT_ECT or bool(seg.flags & AE)


class SentSegment:
    """One transmitted range [start, end) of sequence offsets awaiting acknowledgement."""

    __slots__ = ("end", "fin", "first_tx", "lost", "retrans", "sacked", "start", "tx_count", "tx_time")

    def __init__(self, start: int, end: int, fin: bool, now: float) -> None:
        self.start = start
        self.end = end
        self.fin = fin
        self.tx_time = now
        self.first_tx = now
        self.tx_count = 1
        self.retrans = False
        self.sacked = False
        self.lost = False


class ReceiveClaimedError(OSError):
    """A read of a receive side that a payload-object collector owns (the objects design's
    patch 1, an exclusive receive claim): the socket, asyncio and drill layers report EBUSY."""

    def __init__(self) -> None:
        super().__init__(errno.EBUSY, "the receive side is claimed by a collector")


class Connection:
    """A TCP control block (RFC 9293 §3.3.1) and its buffers."""

    def __init__(self, stack: Stack, local_ip: bytes, local_port: int, remote_ip: bytes,
                 remote_port: int) -> None:
        cfg = stack.config
        self.stack = stack
        self.config = cfg
        self.local_ip = local_ip
        self.local_port = local_port
        self.remote_ip = remote_ip
        self.remote_port = remote_port
        self.key = (local_ip, local_port, remote_ip, remote_port)
        self.v6 = len(local_ip) == 16
        self.state = State.CLOSED
        self.listener: Listener | None = None
        self.error = 0                 # pending socket error (errno), reported once
        # ICMP (RFC 1122 §4.2.3.9, Linux tcp_v4_err): a soft error replaces ETIMEDOUT when the
        # connection times out; IP_RECVERR makes errors hard; the path MTU from PMTU discovery.
        self.soft_error = 0
        self.recverr = False
        self.pmtudisc = IP_PMTUDISC_WANT   # Linux's default for TCP
        self.pmtu = 0                  # 0: the link MTU
        self.closed_by_app = False     # close() called: the socket is orphaned
        self.read_shutdown = False
        self.write_shutdown = False
        self.fin_received = False
        self.passive = False
        self.was_time_wait = False
        self.timer_deadline = INF
        self.mib = stack.counters

        # Send sequence space, as offsets from ISS (§3.3.1).
        self.iss = 0
        self.snd_una = 0
        self.snd_nxt = 0
        self.snd_max = 0               # highest offset ever sent (retransmissions rewind snd_nxt)
        self.snd_wnd = 0               # peer's window in bytes (already scaled)
        self.max_snd_wnd = 0
        self.snd_wl1 = 0               # offset in the *receive* space of the last window update
        self.snd_wl2 = 0
        self.fin_queued = False        # FIN to send after the data
        self.snd_buf = SendBuffer(stack.mem)
        self.sndbuf_limit = cfg.wmem[1]    # sk_sndbuf: bound on snd_buf.wmem_queued (skb truesize)
        self.sndbuf_locked = False         # SOCK_SNDBUF_LOCK: SO_SNDBUF set, no autotuning
        self.sock_nospace = False          # SOCK_NOSPACE: a writer ran out of send buffer
        self.sk_wakeups = 0                # wake-ups of the socket's wait queue (sleeping writers)
        self.rtx: deque[SentSegment] = deque()
        self.sacked_bytes = 0
        self.lost_bytes = 0
        self.retrans_bytes = 0
        self.reno_dupacks = 0          # dupacks counted as "virtually SACKed" without SACK
        self.dupacks = 0
        self.ca_state = CA_OPEN
        self.recover = 0               # RFC 6582/6675 RecoveryPoint (offset)
        self.high_sacked = 0
        self.snd_sml = 0               # end of the last small segment (Minshall's Nagle)
        self.total_retrans = 0
        self.retransmits = 0           # consecutive RTO count (tcpi_retransmits)
        self.syn_retries = 0
        self.rto_deadline = INF
        self.probe_deadline = INF      # zero-window probe
        self.probes_out = 0
        self.probe_backoff = 0         # Linux icsk_backoff of the probe timer (tcp_probe0_when)
        self.probes_tstamp = -1.0      # first probe of the episode (icsk_probes_tstamp); -1: none
        self._tx_refused = False       # a transmission was refused in this timer event
        self.first_rto_time = 0.0      # start of the current run of timeouts (user timeout)

        # Receive sequence space.
        self.irs = 0
        self.rcv_nxt = 0               # offset from IRS
        self.rcv_adv = 0               # right edge of the window we advertised (offset)
        self.rcv_buf = RecvBuffer(stack.mem)
        self.rcvbuf_limit = cfg.rmem[1]
        self.ooo = ReassemblyQueue(max_segments=cfg.reassembly_max_segments,
                                   max_bytes=max(cfg.rmem[2], self.rcvbuf_limit))
        self.last_ack_sent = 0
        self.syn_window = 0
        self.rcv_ssthresh = min(self.rcvbuf_limit, MAX_WINDOW)   # Linux tp->rcv_ssthresh
        self.ack_pending = 0           # bytes received and not yet acknowledged
        self.delack_deadline = INF
        self.quickack = cfg.quickack_segments
        self.pingpong = False          # interactive mode: ACKs ride on replies (Linux)
        self.last_rcv_time = 0.0
        self.last_snd_time = 0.0
        self.dsack: tuple[int, int] | None = None
        self._acked_unsacked = 0
        self.prior_cwnd = 0            # RFC 6937 RecoverFS (Linux prior_cwnd)
        self.prr_delivered = 0
        self.prr_out = 0
        self._ts_last = 0
        # RACK-TLP (RFC 8985), Linux's default loss detection for SACK connections.
        self.rack_xmit_ts = -1.0       # RACK.xmit_ts: send time of the latest-sent delivered segment
        self.rack_end = 0              # RACK.end_seq (offset)
        self.rack_rtt = 0.0            # RACK.rtt
        self.rack_fack = 0             # highest end offset delivered (RACK.fack)
        self._fack_prior = -1          # rack_fack before the ACK being processed
        self.rack_reord = False        # reordering seen (RACK.reord)
        self.rack_deadline = INF       # the reordering timer
        self.reordering = cfg.reordering   # tp->reordering, in segments (tcpi_reordering)
        self.tlp_deadline = INF        # the probe timeout (PTO)
        self.tlp_high = -1             # snd_max when the outstanding probe was sent; -1: none
        self.accepted = False          # handed to the application by accept()
        self._ack_now_flag = False
        self.rcv_mss = 536

        # Options negotiated at the handshake.
        self.snd_wscale = 0
        self.rcv_wscale = cfg.rcv_wscale if cfg.window_scaling else 0
        self.ws_ok = False
        self.sack_ok = False
        self.ts_ok = False
        self.ts_recent = 0
        self.ts_recent_time = 0.0
        self.ts_offset = 0
        self.peer_mss = 536
        self.user_mss = 0              # TCP_MAXSEG
        self.mss = 536                 # effective send MSS (payload bytes per segment)
        self.syn_options_sent: dict[str, int] = {}
        self.md5_key: bytes | None = None
        self.md5_keys: Md5Keys | None = None   # TCP_MD5SIG keys set on this socket
        self.pred_flags = 0                    # 0: header prediction off
        self.ecn_flags = 0                     # ECN_* (Linux tp->ecn_flags)

        # Socket options.
        self._nodelay = False
        self._cork = False
        self.more_pending = False      # inside a send(MSG_MORE): hold its partial segment
        self.push_end = 0              # stream end of the last write without MSG_MORE (PSH mark)
        self._force_push = False       # one push overriding cork/MSG_MORE (TCP_NODELAY set, uncork)
        self._mid_write = False        # a push inside send(): more of the same write follows
        self._xmit_budget = -1         # bytes of new data this output may send (-1: no limit)
        self.keepalive = False
        self.keepalive_time = cfg.keepalive_time
        self.keepalive_intvl = cfg.keepalive_intvl
        self.keepalive_probes = cfg.keepalive_probes
        self.keepalive_deadline = INF
        self.user_timeout = 0.0        # TCP_USER_TIMEOUT in seconds, 0 = off
        self.linger_zero = False
        self.tos = 0                   # IP_TOS for every packet of this connection
        self.time_wait_deadline = INF
        self.oow_last = -INF           # last out-of-window ACK we sent (rate limit)

        self.rtt = RttEstimator(rto_initial=cfg.rto_initial, rto_min=cfg.rto_min, rto_max=cfg.rto_max)
        self.cc: CongestionControl = create_congestion_control(cfg.congestion_control, 536)
        self.delivered = 0
        self.delivered_segs = 0        # Linux tp->delivered: packets, the SYN(-ACK) included
        self.bytes_acked = 0
        self.bytes_received = 0
        self.segs_in = 0
        self.segs_out = 0
        self.data_segs_in = 0
        self.data_segs_out = 0
        self.syn_data_acked = False
        self.tfo: object | None = None    # fast-open state (the preload/TFO issue)
        # Receive claim: while set, the socket API refuses readers with EBUSY (objects issue).
        self.collector: object | None = None
        # Callbacks for event-driven users (asyncio, the object ring): called after new
        # in-order data or EOF became readable, and after acknowledged data freed send space.
        self.on_readable: Callable[[Connection], None] | None = None
        self.on_writable: Callable[[Connection], None] | None = None

    # ------------------------------------------------------------------ options

    @property
    def nodelay(self) -> bool:
        return self._nodelay

    @nodelay.setter
    def nodelay(self, value: bool) -> None:
        # Linux do_tcp_setsockopt(TCP_NODELAY): setting it also pushes what is pending,
        # corked or not (TCP_NAGLE_PUSH).
        self._nodelay = bool(value)
        if value:
            self._force_push = True

    @property
    def cork(self) -> bool:
        return self._cork

    @cork.setter
    def cork(self, value: bool) -> None:
        if self._cork and not value:
            self._force_push = True      # uncorking pushes the pending partial frame
        self._cork = bool(value)

    # ------------------------------------------------------------------ helpers

    def __repr__(self) -> str:
        return f"<Connection {self.stack.fmt_addr(self.local_ip)}:{self.local_port} -> " \
               f"{self.stack.fmt_addr(self.remote_ip)}:{self.remote_port} {self.state.name}>"

    @property
    def trace_id(self) -> str:
        fmt = self.stack.fmt_addr
        return f"{fmt(self.local_ip)}:{self.local_port}-{fmt(self.remote_ip)}:{self.remote_port}"

    def _trace_ca(self, old: int, trigger: str, now: float) -> None:
        """Congestion state and window changes for the event trace."""
        names = ("open", "disorder", "cwr", "recovery", "loss")
        self.stack.trace(self, "tcp:congestion_state",
                         {"old": names[old], "new": names[self.ca_state], "trigger": trigger}, now)
        self.stack.trace(self, "tcp:cwnd", {
            "cwnd": self.cc.cwnd, "ssthresh": self.cc.ssthresh if self.cc.ssthresh < 1 << 60 else None,
            "bytes_in_flight": self.in_flight, "smoothed_rtt": self.rtt.srtt, "rto": self.rtt.timeout}, now)

    def _seq(self, off: int) -> int:
        return (self.iss + off) & SEQ_MASK

    def _snd_off(self, seq: int) -> int:
        """Map a 32-bit ACK number onto the send offset space near snd_una."""
        return self.snd_una + seq_diff(seq, (self.iss + self.snd_una) & SEQ_MASK)

    def _rcv_off(self, seq: int) -> int:
        return self.rcv_nxt + seq_diff(seq, (self.irs + self.rcv_nxt) & SEQ_MASK)

    @property
    def in_flight(self) -> int:
        """Bytes believed to be in the network (RFC 6675 pipe; Linux packets_in_flight)."""
        out = self.snd_nxt - self.snd_una - self.sacked_bytes - self.lost_bytes + self.retrans_bytes
        if self.reno_dupacks:
            out -= min(self.reno_dupacks * self.mss, out)
        return max(out, 0)

    @property
    def send_queue_bytes(self) -> int:
        return len(self.snd_buf)

    @property
    def unsent_bytes(self) -> int:
        return max(self.snd_buf.end + 1 - self.snd_nxt, 0)

    @property
    def readable_bytes(self) -> int:
        return len(self.rcv_buf)

    @property
    def send_space(self) -> int:
        """Bytes ``send`` would queue now (Linux tcp_sendmsg_locked's copy loop)."""
        return min(self.snd_buf.room(self._size_goal(), self.sndbuf_limit), self.stack.mem.room())

    @property
    def memory_free(self) -> bool:
        """Linux sk_stream_memory_free(): a write may open a new skb."""
        return self.snd_buf.wmem_queued < self.sndbuf_limit

    @property
    def writable(self) -> bool:
        """Linux __sk_stream_is_writeable(): POLLOUT, and when a sleeping writer is woken
        (sk_stream_write_space): the free space is at least half of what is queued."""
        q = self.snd_buf.wmem_queued
        return q < self.sndbuf_limit and self.sndbuf_limit - q >= q >> 1

    def write_space(self) -> None:
        """Linux sk_stream_write_space(): wake a writer short of send buffer (SOCK_NOSPACE)
        once the socket is writable again."""
        if self.sock_nospace and self.writable:
            self.sock_nospace = False
            self.sk_wakeups += 1

    def _check_space(self) -> None:
        """Linux tcp_check_space()/tcp_new_space(), after an ACK was processed: with a writer
        waiting, grow an unlocked send buffer to the congestion window, then wake it."""
        if not self.sock_nospace:
            return
        mem = self.stack.mem
        if (not self.sndbuf_locked and self.in_flight < self.cc.cwnd
                and not (mem.limit and mem.used >= mem.limit)):
            self._sndbuf_expand()       # tcp_should_expand_sndbuf()
        self.write_space()

    def _sndbuf_expand(self) -> None:
        """Linux tcp_sndbuf_expand(): room for two windows of worst-case skbs (one per MSS,
        power-of-two heads) of max(IW10, cwnd, reordering + 1) segments, up to tcp_wmem[2]."""
        per_mss = max(self.peer_mss, self.mss) + MAX_TCP_HEADER + SKB_SHINFO_SIZE
        per_mss = (1 << (per_mss - 1).bit_length()) + SK_BUFF_SIZE
        nr_segs = max(10, self.cc.cwnd // max(self.mss, 1), self.reordering + 1)
        sndmem = 2 * nr_segs * per_mss
        if self.sndbuf_limit < sndmem:
            self.sndbuf_limit = min(sndmem, self.config.wmem[2])

    def _size_goal(self) -> int:
        """Linux tcp_xmit_size_goal(): bytes per skb a write builds, a multiple of the MSS
        bounded by half the peer's largest window (tcp_bound_to_half_wnd); one MSS without
        GSO (TCP-MD5 turns it off)."""
        mss = self.mss
        if self.md5_key is not None:
            return mss
        goal = GSO_MAX_SIZE
        cutoff = self.max_snd_wnd >> 1 if self.max_snd_wnd > 536 else self.max_snd_wnd
        if cutoff and goal > cutoff:
            goal = max(cutoff, 68 - 20 - (12 if self.ts_ok else 0))   # 68 - tcp_header_len
        return max(goal // mss * mss, mss)

    def _tso_bytes(self) -> int:
        """Linux tcp_tso_segs()/tcp_tso_autosize(): the largest burst one skb leaves in,
        about 1 ms of the pacing rate but at least tcp_min_tso_segs segments."""
        mss = self.mss
        if self.md5_key is not None:
            return mss
        srtt = self.rtt.srtt
        cwnd = self.cc.cwnd
        if not srtt:
            size = GSO_MAX_SIZE                 # sk_pacing_rate starts unlimited
        else:
            # tcp_update_pacing_rate(): 200% of cwnd/srtt in slow start, 120% after.
            ratio = 2.0 if cwnd < self.cc.ssthresh // 2 else 1.2
            rate = ratio * max(cwnd, self.snd_nxt - self.snd_una) / srtt
            size = int(rate) >> 10              # sk_pacing_shift
            r = int((self.rtt.min_rtt or srtt) * 1e6) >> 9    # tcp_tso_rtt_log
            if r < 32:
                size += GSO_MAX_SIZE >> r
            size = min(size, GSO_MAX_SIZE)
        return max(size // mss, self.config.min_tso_segs, 1) * mss

    @property
    def is_synchronized(self) -> bool:
        return self.state in SYNCHRONIZED

    def _set_state(self, state: State, now: float) -> None:
        old = self.state
        if state is old:
            return
        self.state = state
        # TcpCurrEstab counts ESTABLISHED and CLOSE_WAIT, as RFC 4022 tcpCurrEstab does.
        was = old is State.ESTABLISHED or old is State.CLOSE_WAIT
        now_in = state is State.ESTABLISHED or state is State.CLOSE_WAIT
        if now_in and not was:
            self.mib["TcpCurrEstab"] += 1
        elif was and not now_in:
            self.mib["TcpCurrEstab"] -= 1
        self.sk_wakeups += 1             # sk_state_change() wakes every sleeper
        if state is State.ESTABLISHED and old in (State.SYN_SENT, State.SYN_RECEIVED):
            self.mib["TcpActiveOpens" if not self.passive else "TcpPassiveOpens"] += 1
            if not self.sndbuf_locked:
                self._sndbuf_expand()    # tcp_init_buffer_space()
            self.delivered_segs += 1     # the SYN (or SYN-ACK) was delivered (Linux tp->delivered)
        if state is State.CLOSED and old in (State.SYN_SENT, State.SYN_RECEIVED):
            self.mib["TcpAttemptFails"] += 1
        self.stack.trace_state(self, old, state, now)

    def _compute_mss(self) -> None:
        """Effective send MSS: the peer's MSS less our per-segment options (RFC 9293 §3.7.1)."""
        own = self.stack.mtu_mss(self.v6)
        if self.pmtu:
            own = min(own, self.pmtu - (60 if self.v6 else 40))
        mss = min(self.peer_mss, own)
        if self.user_mss:
            mss = min(mss, self.user_mss)
        if self.ts_ok:
            mss -= 12
        if self.md5_key is not None:
            mss -= 20
        self.mss = max(mss, 64)
        self.cc.set_mss(self.mss)

    # ----------------------------------------------------------- segment output

    def _window_field(self, syn: bool) -> int:
        """The receive window to advertise, with receiver SWS avoidance (RFC 9293 §3.8.6.2.2)."""
        free = self.rcvbuf_limit - len(self.rcv_buf) - self.ooo.bytes_queued
        if free < 0:
            free = 0
        if syn:
            # RFC 7323 §2.2: the SYN window is never scaled. Its right edge is relative to
            # the peer's ISN+1, which a SYN-SENT connection learns only from the SYN-ACK.
            wnd = min(free, MAX_WINDOW)
            self.syn_window = wnd
            self.rcv_adv = max(self.rcv_adv, self.rcv_nxt + wnd)
            return wnd
        # Linux rcv_ssthresh: the window opens from 64 KB as data arrives (tcp_grow_window),
        # instead of offering the whole buffer to a peer not yet known to use it.
        capped = free > self.rcv_ssthresh
        if capped:
            free = self.rcv_ssthresh
        right = self.rcv_nxt + free
        cur = self.rcv_adv - self.rcv_nxt
        if right < self.rcv_adv:
            wnd = max(cur, 0)                # never shrink the window (RFC 9293 §3.8.6.2.2)
        elif cur > 0 and not capped and right - self.rcv_adv < min(self.rcvbuf_limit // 2, self.rcv_mss):
            wnd = cur                        # SWS: the buffer itself is the limit, wait for space
        else:
            wnd = free
        # Round up to the scale unit as Linux does (ALIGN in tcp_select_window), within the buffer.
        unit = 1 << self.rcv_wscale
        if wnd % unit and wnd + unit - wnd % unit <= self.rcvbuf_limit - len(self.rcv_buf):
            wnd += unit - wnd % unit
        field = wnd >> self.rcv_wscale
        if field > MAX_WINDOW:
            field = MAX_WINDOW
        self.rcv_adv = max(self.rcv_adv, self.rcv_nxt + (field << self.rcv_wscale))
        return field

    def _tsval(self, now: float) -> int:
        # RFC 7323 §5.4: TSval must never go backwards, even if a caller's clock reading is
        # older than one used before (the peer's PAWS would drop the segment).
        t = int(now * 1000)
        if t < self._ts_last:
            t = self._ts_last
        self._ts_last = t
        return (t + self.ts_offset) & SEQ_MASK

    def _emit(self, now: float, off: int, flags: int, payload: list[memoryview] | tuple[()] = (),
              options: bytes | None = None, gso_size: int = 0) -> bool:
        """Build and queue one segment starting at send offset ``off``; False if the local
        queue refused it (``Stack.tx_refuse``).

        As in Linux's __tcp_transmit_skb, what precedes the hand-off happens either way: the
        ACK state is cleared (a refused ACK is just lost) and the segment is counted.
        """
        syn = bool(flags & SYN)
        if options is None:
            options = self._data_options(now)
        window = self._window_field(syn)
        ack = 0
        if flags & ACK:
            ack = (self.irs + self.rcv_nxt) & SEQ_MASK
            self.last_ack_sent = self.rcv_nxt
            self.ack_pending = 0
            self.delack_deadline = INF
            self.dsack = None
        tos = self.tos
        ef = self.ecn_flags
        if ef and not syn:
            # Linux tcp_ecn_send(): only new data is ECT(0) (RFC 3168 §6.1.5: never pure ACKs
            # or retransmissions), and the first of it after a reduction carries CWR; ECE
            # goes on every segment while a CE mark waits for the peer's CWR (§6.1.3).
            if payload and off >= self.snd_max:
                tos |= ECN_ECT0
                if ef & ECN_QUEUE_CWR:
                    self.ecn_flags = ef = ef & ~ECN_QUEUE_CWR
                    flags |= CWR
            if ef & ECN_DEMAND_CWR and self.state is not State.TIME_WAIT:
                flags |= ECE
        pkt = build_packet(src=self.local_ip, dst=self.remote_ip, sport=self.local_port,
                           dport=self.remote_port, seq=(self.iss + off) & SEQ_MASK, ack=ack, flags=flags,
                           window=window, options=options, payload=payload, ttl=self.config.ttl,
                           tos=tos, md5_key=self.md5_key, csum_partial=self.stack.tx_csum_offload,
                           gso_size=gso_size, df=self.pmtudisc in _DF_MODES)
        # Only an explicit False is a refusal: a wrapper of output() that drops its result
        # (it returned None before refusals existed) must not read as one.
        ok = self.stack.output(pkt) is not False
        self.segs_out += 1
        self.last_snd_time = now
        mib = self.mib
        mib["TcpOutSegs"] += 1
        if flags & RST:
            mib["TcpOutRsts"] += 1
        if not ok:
            self._tx_refused = True
            if self.state in SYNCHRONIZED:
                # Linux __tcp_transmit_skb: local congestion (err > 0) is a congestion signal.
                self._enter_cwr(now, "local_congestion")
        return ok

    def _data_options(self, now: float) -> bytes:
        """Options of a non-SYN segment: timestamps and SACK blocks (RFC 7323, 2018, 2883)."""
        ts = (self._tsval(now), self.ts_recent) if self.ts_ok else None
        blocks: list[tuple[int, int]] = []
        if self.sack_ok and (self.dsack is not None or not self.ooo.empty):
            room = 40 - (12 if ts else 0) - (20 if self.md5_key is not None else 0)
            max_blocks = (room - 4) // 8
            irs = self.irs
            if self.dsack is not None and max_blocks > 0:
                blocks.append(((irs + self.dsack[0]) & SEQ_MASK, (irs + self.dsack[1]) & SEQ_MASK))
            for left, right in self.ooo.sack_blocks(max_blocks):
                if len(blocks) >= max_blocks:
                    break
                blocks.append((left, right))
        if not ts and not blocks and self.md5_key is None:
            return b""
        return encode_options(ts=ts, sack_blocks=blocks, md5=self.md5_key is not None)

    def send_ack(self, now: float) -> None:
        self._emit(now, self.snd_nxt, ACK)

    def send_rst(self, now: float) -> None:
        """An active reset (RFC 9293 §3.10.7.4 abort): RST|ACK at snd_nxt."""
        self._emit(now, self.snd_nxt, RST | ACK, options=self._rst_options(now))

    def _rst_options(self, now: float) -> bytes:
        ts = (self._tsval(now), self.ts_recent) if self.ts_ok else None
        if ts is None and self.md5_key is None:
            return b""
        return encode_options(ts=ts, md5=self.md5_key is not None)

    def _syn_options(self, now: float, synack: bool, peer: Segment | None) -> bytes:
        """Linux's SYN/SYN-ACK option set: only what the peer offered, for a SYN-ACK."""
        cfg = self.config
        mss = self.stack.mtu_mss(self.v6)
        if self.user_mss:
            mss = min(mss, self.user_mss)
        if synack:
            ts = (self._tsval(now), self.ts_recent) if self.ts_ok else None
            sack = self.sack_ok
            wscale = self.rcv_wscale if self.ws_ok else -1
        else:
            ts = (self._tsval(now), 0) if cfg.timestamps else None
            sack = cfg.sack
            wscale = self.rcv_wscale if cfg.window_scaling else -1
        fastopen, fastopen_exp = self.stack.fastopen_syn_option(self, synack, peer)
        return encode_options(mss=mss, ts=ts, sack_permitted=sack, wscale=wscale,
                              fastopen=fastopen, fastopen_exp=fastopen_exp, md5=self.md5_key is not None)

    def _send_syn(self, now: float) -> bool:
        """Send (or resend) the SYN or SYN-ACK; False if the local queue refused it, which
        the first transmission ignores as Linux's tcp_connect/tcp_conn_request do (a loss)."""
        flags = SYN
        payload: list[memoryview] = []
        if self.state is State.SYN_RECEIVED:
            flags |= ACK
            if self.ecn_flags & ECN_OK:
                flags |= ECE         # Linux tcp_ecn_make_synack / tcp_ecn_send_synack
        elif self.ecn_flags & ECN_OK and not (self.syn_retries and self.config.ecn_fallback):
            # Linux tcp_ecn_send_syn; tcp_ecn_clear_syn: a retransmitted SYN goes without
            # ECE|CWR (RFC 3168 §6.1.1.1), in case a middlebox drops ECN-setup SYNs.
            flags |= ECE | CWR
        payload = self.stack.syn_payload(self)
        ok = self._emit(now, 0, flags, payload, options=self._syn_options(now, bool(flags & ACK), None))
        end = 1 + sum(len(p) for p in payload)
        self.snd_nxt = max(self.snd_nxt, end)
        self.snd_max = max(self.snd_max, end)
        if self.rto_deadline == INF:
            self.rto_deadline = now + self.rtt.timeout
        if payload and not self.rtx:
            self.rtx.append(SentSegment(1, end, False, now))
        elif payload and self.rtx[0].start == 1:
            # A retransmitted SYN-ACK with data: Karn's rule must see it (RFC 6298 §3).
            self.rtx[0].tx_count += 1
            self.rtx[0].tx_time = now
        return ok

    # ------------------------------------------------------------------ opening

    def start_active_open(self, now: float) -> None:
        """RFC 9293 §3.10.1 OPEN call, active: choose an ISS and send a SYN."""
        if self.md5_keys is not None:
            self.md5_key = self.md5_keys.lookup(self.remote_ip)
        self.iss = self.stack.new_isn(self, now)
        self.ts_offset = self.stack.ts_offset(self)
        self.snd_una = 0
        self.snd_nxt = 0
        self.snd_max = 0
        # Linux tcp_ecn_send_syn: only tcp_ecn=1 requests ECN on an active open.
        self.ecn_flags = ECN_OK if self.config.ecn == ECN_ON else 0
        self._set_state(State.SYN_SENT, now)
        self.first_rto_time = now
        self._send_syn(now)
        self._schedule()

    def start_passive_open(self, seg: Segment, listener: Listener, now: float) -> None:
        """A SYN arrived at a listener (RFC 9293 §3.10.7.2): record it and send a SYN-ACK."""
        self.passive = True
        self.listener = listener
        self.irs = seg.seq
        self.rcv_nxt = 1
        self.rcv_adv = 1
        self.last_ack_sent = 1
        self.iss = self.stack.new_isn(self, now)
        self.ts_offset = self.stack.ts_offset(self)
        self._negotiate(seg, now)
        self.ecn_flags = ECN_OK if ecn_syn_acceptable(seg, self.config) else 0
        self.snd_wnd = seg.window          # RFC 7323 §2.2: the window in a SYN is not scaled
        self.max_snd_wnd = self.snd_wnd
        self.snd_wl1 = 0
        self.snd_wl2 = 0
        self._set_state(State.SYN_RECEIVED, now)
        self.first_rto_time = now
        self.stack.on_passive_syn(self, seg, now)
        self._send_syn(now)
        self._schedule()

    def _negotiate(self, seg: Segment, now: float) -> None:
        """Options from the peer's SYN (RFC 7323 §2.2/§3.2, RFC 2018 §2, RFC 9293 §3.7.1)."""
        cfg = self.config
        self.ws_ok = cfg.window_scaling and seg.wscale >= 0
        self.snd_wscale = min(seg.wscale, 14) if self.ws_ok else 0
        if not self.ws_ok:
            self.rcv_wscale = 0
        self.sack_ok = cfg.sack and seg.sack_permitted
        self.ts_ok = cfg.timestamps and seg.ts_val >= 0
        if self.ts_ok:
            self.ts_recent = seg.ts_val
            self.ts_recent_time = now
        self.peer_mss = seg.mss if seg.mss > 0 else (1220 if self.v6 else 536)
        self.rcv_mss = min(self.peer_mss, self.stack.mtu_mss(self.v6))
        self._compute_mss()

    # ----------------------------------------------------------- user commands

    def send(self, data: Buffer, now: float, *, more: bool = False) -> int:
        """Queue what the send buffer takes of ``data`` (Linux tcp_sendmsg_locked); returns
        how many bytes were taken, 0 when a new skb is needed and none may be opened."""
        if self.error:
            raise OSError(self.error, "connection failed")
        if self.write_shutdown or self.state not in SENDING:
            raise OSError(errno.EPIPE, "cannot send after shutdown")
        buf = self.snd_buf
        total = len(data)
        mem = self.stack.mem
        view = data if isinstance(data, memoryview) else memoryview(data)
        owned = isinstance(data, bytes)
        goal = self._size_goal()
        copied = 0
        while copied < total:
            copy = buf.tail_room(goal)
            new_skb = copy <= 0
            if new_skb:
                if not self.memory_free:
                    self.sock_nospace = True  # wait_for_space: SOCK_NOSPACE, blocking or not
                    break
                copy = goal
            copy = min(copy, total - copied, mem.room())
            if copy <= 0:
                self.mib["UsertcpSendMemLimited"] += 1
                break
            if owned:
                chunk: Buffer = data if copy == total else view[copied:copied + copy]
            else:
                chunk = bytes(view[copied:copied + copy])   # the caller may reuse a mutable buffer
            buf.append(chunk, new_skb=new_skb)
            copied += copy
            if copied < total and self.is_synchronized and buf.tail_room(goal) == 0:
                # A full skb with more to copy: forced_push() marks PSH and pushes every
                # half max window, else tcp_push_one() sends it when it is the send head.
                forced = buf.end - self.push_end > self.max_snd_wnd >> 1
                if forced:
                    self.push_end = buf.end
                if forced or buf.tail_is_send_head():
                    self._mid_write = True
                    self.more_pending = more
                    self._xmit_budget = -1 if forced else self._tso_bytes()
                    self.output(now)
                    self._xmit_budget = -1
                    self._mid_write = self.more_pending = False
                    goal = self._size_goal()
        if copied <= 0:
            return 0
        if not more:
            self.push_end = buf.end
        if self.is_synchronized:
            # MSG_MORE holds a partial segment for this call's push only (Linux tcp_push with
            # TCP_NAGLE_CORK); a later ACK-clocked transmission sends it as Nagle allows.
            self.more_pending = more
            self.output(now)
            self.more_pending = False
            self._schedule()      # the stack must learn the retransmission deadline
        return copied

    def queue_views(self, views: Sequence[Buffer]) -> int:
        """Append immutable buffers by reference without transmitting (the caller's event ends
        in ``output``); they count as a pushed write (PSH at their end)."""
        total = 0
        for v in views:
            self.snd_buf.append(v)
            total += len(v)
        self.push_end = self.snd_buf.end
        return total

    def send_views(self, views: list[memoryview], now: float) -> int:
        """Queue immutable views by reference (payload objects): no copy, no limit check."""
        if self.write_shutdown or self.state not in SENDING:
            raise OSError(errno.EPIPE, "cannot send after shutdown")
        total = 0
        for v in views:
            self.snd_buf.append(v)
            total += len(v)
        self.more_pending = False
        self.push_end = self.snd_buf.end
        if self.is_synchronized:
            self.output(now)
            self._schedule()
        return total

    def options_changed(self, now: float) -> None:
        """Apply socket options set on a live connection (TCP_NODELAY, uncork, keepalive)."""
        if self.state is not State.CLOSED:
            self.output(now)
            self._schedule()

    def take_error(self) -> int:
        """Read and clear the pending socket error (SO_ERROR semantics)."""
        err, self.error = self.error, 0
        return err

    # -- the exclusive receive claim (payload objects): one owner, every other reader EBUSY --

    def claim_receive(self, owner: object) -> bool:
        """Make ``owner`` the only reader: recv()/recv_into() raise ReceiveClaimedError until
        it calls release_receive(). False (nothing changes) if another owner holds it."""
        if self.collector is not None:
            return False
        self.collector = owner
        return True

    def release_receive(self, owner: object) -> None:
        if self.collector is owner:
            self.collector = None

    def consume_claimed(self, owner: object, n: int, now: float | None) -> None:
        """The claim's owner drops ``n`` decided bytes from the front of the receive queue.
        ``now`` None: inside a segment callback, whose ACK carries the new window; otherwise
        a window update goes out as after recv() (Linux tcp_cleanup_rbuf)."""
        if self.collector is not owner:
            raise ReceiveClaimedError()
        self.rcv_buf.discard(n)
        if now is not None:
            self._after_read(now)
        self._update_prediction()

    def recv(self, n: int, now: float) -> bytes:
        if self.collector is not None:
            raise ReceiveClaimedError()
        data = self.rcv_buf.read(n)
        if data:
            self._after_read(now)
            self._update_prediction()
        return data

    def recv_into(self, target: memoryview, now: float) -> int:
        if self.collector is not None:
            raise ReceiveClaimedError()
        n = self.rcv_buf.read_into(target)
        if n:
            self._after_read(now)
            self._update_prediction()
        return n

    def _after_read(self, now: float) -> None:
        """Send a window update if reading opened the window a lot (Linux tcp_cleanup_rbuf)."""
        if self.state not in RECEIVING:
            return
        free = min(self.rcvbuf_limit - len(self.rcv_buf) - self.ooo.bytes_queued, self.rcv_ssthresh)
        new_wnd = min(max(free, 0) >> self.rcv_wscale, MAX_WINDOW) << self.rcv_wscale
        cur = max(self.rcv_adv - self.rcv_nxt, 0)
        clamp = min(self.rcvbuf_limit, MAX_WINDOW << self.rcv_wscale)
        # Linux tcp_cleanup_rbuf: update when the window at least doubles and was at most half open.
        if 2 * cur <= clamp and new_wnd >= 2 * cur and new_wnd > cur and new_wnd >= self.rcv_mss:
            self.send_ack(now)
            self._schedule()

    def shutdown(self, how_read: bool, how_write: bool, now: float) -> None:
        if how_read:
            self.read_shutdown = True
        if how_write and not self.write_shutdown:
            self.write_shutdown = True
            if self.state in (State.ESTABLISHED, State.CLOSE_WAIT):
                self._queue_fin(now)
            elif self.state is State.SYN_SENT:
                self._close_now(now)
        self._schedule()

    def _queue_fin(self, now: float) -> None:
        self.fin_queued = True
        if self.state is State.ESTABLISHED:
            self._set_state(State.FIN_WAIT_1, now)
        elif self.state is State.CLOSE_WAIT:
            self._set_state(State.LAST_ACK, now)
        self.output(now)

    def close(self, now: float) -> None:
        """RFC 9293 §3.10.4 CLOSE; a close with unread data resets (RFC 2525 §2.17)."""
        if self.closed_by_app:
            return
        self.closed_by_app = True
        self.read_shutdown = True
        if self.state is not State.CLOSED:
            self.stack.orphans += 1    # _close_now takes it off again
        st = self.state
        if st in (State.CLOSED, State.LISTEN):
            self._close_now(now)
            return
        if st is State.SYN_SENT:
            self._close_now(now)
            return
        if len(self.rcv_buf) or self.linger_zero:
            self.mib["TcpExtTCPAbortOnClose" if len(self.rcv_buf) else "TcpExtTCPAbortOnLinger"] += 1
            if st is not State.TIME_WAIT:
                self.send_rst(now)
            self.rcv_buf.discard(len(self.rcv_buf))
            self._close_now(now)
            return
        if not self.write_shutdown:
            self.write_shutdown = True
            if st in (State.ESTABLISHED, State.CLOSE_WAIT, State.SYN_RECEIVED):
                if st is State.SYN_RECEIVED:
                    self.fin_queued = True
                    if not len(self.snd_buf) and not self.passive:
                        # RFC 9293 §3.10.4: nothing to send, so send the FIN now and enter
                        # FIN-WAIT-1; with data queued, the FIN waits for ESTABLISHED.
                        self._set_state(State.FIN_WAIT_1, now)
                        self._emit_new(now, max(self.snd_nxt, 1), 0, fin=True)
                else:
                    self._queue_fin(now)
        if self.state is not State.CLOSED and self.stack.orphans > self.config.max_orphans:
            # Linux tcp_too_many_orphans: past the bound an orphan is reset, not kept.
            self.mib["TcpExtTCPAbortOnMemory"] += 1
            self.abort(now)
            return
        self._schedule()

    def abort(self, now: float) -> None:
        """RFC 9293 §3.10.5 ABORT: send a reset if synchronized, then forget everything."""
        if (self.state in SYNCHRONIZED and self.state is not State.TIME_WAIT) \
                or self.state is State.SYN_RECEIVED:
            self.send_rst(now)
        self._close_now(now)

    def _close_now(self, now: float) -> None:
        if self.closed_by_app and self.state is not State.CLOSED:
            self.stack.orphans -= 1
        # Unsent data goes with the connection: give its memory back to the stack's account.
        if self.snd_buf.acct is not None:
            self.snd_buf.acct.used -= len(self.snd_buf)
            self.snd_buf.acct = None
        if self.closed_by_app and self.rcv_buf.acct is not None:
            self.rcv_buf.acct.used -= len(self.rcv_buf)
            self.rcv_buf.acct = None
        self._set_state(State.CLOSED, now)
        self.rto_deadline = self.delack_deadline = self.probe_deadline = INF
        self.keepalive_deadline = self.time_wait_deadline = INF
        self.rtx.clear()
        self.ooo.clear()
        self.stack.remove(self)
        self._schedule()
        # Wake event-driven users: a reset or a failure is news for readers and writers.
        if self.on_readable is not None:
            self.on_readable(self)
        if self.on_writable is not None:
            self.on_writable(self)

    def _reset_by_peer(self, now: float) -> None:
        if self.state is State.SYN_SENT:
            self.error = errno.ECONNREFUSED
        elif self.state is State.CLOSE_WAIT:
            self.error = errno.EPIPE           # Linux tcp_reset: the peer already closed
        elif self.state in (State.ESTABLISHED, State.FIN_WAIT_1, State.FIN_WAIT_2, State.SYN_RECEIVED):
            self.error = errno.ECONNRESET
            if self.state is State.ESTABLISHED:
                self.mib["TcpEstabResets"] += 1
        elif self.state is not State.TIME_WAIT:
            self.error = errno.EPIPE
        self.mib["UsertcpResetsReceived"] += 1
        self._close_now(now)

    def _fail(self, err: int, now: float, *, send_rst: bool = False) -> None:
        if err == errno.ETIMEDOUT:
            self.mib["TcpExtTCPAbortOnTimeout"] += 1
            # Linux tcp_write_err: the last ICMP soft error explains the timeout better.
            err = self.soft_error or err
        self.error = err
        if send_rst:
            self.send_rst(now)
        self._close_now(now)

    # ------------------------------------------------------------------ input

    def segment_arrives(self, seg: Segment, now: float) -> None:
        """RFC 9293 §3.10.7: process one inbound segment for this connection."""
        self.segs_in += 1
        st = self.state
        if st is State.SYN_SENT:
            self._syn_sent_arrives(seg, now)
        else:
            self._synchronized_arrives(seg, now)
        if self.state is not State.CLOSED:
            self.output(now)
            self._check_space()
        self._schedule()

    def _syn_sent_arrives(self, seg: Segment, now: float) -> None:
        """RFC 9293 §3.10.7.3, SYN-SENT."""
        flags = seg.flags
        if flags & ACK:
            ack_off = seq_diff(seg.ack, self.iss)
            if ack_off <= 0 or ack_off > self.snd_max:
                if not flags & RST:
                    self.stack.send_reset_for(seg, now)
                return
        if flags & RST:
            if flags & ACK:
                self._reset_by_peer(now)
            return
        if not flags & SYN:
            return
        self.irs = seg.seq
        self.rcv_nxt = 1
        self.rcv_adv = 1 + self.syn_window
        self._negotiate(seg, now)
        if self.ecn_flags & ECN_OK:
            # RFC 3168 §6.1.1: a SYN-ACK sets ECN up with ECE alone (ECE|CWR is not a setup:
            # Linux tcp_ecn_rcv_synack); a crossing SYN needs both (tcp_ecn_rcv_syn).
            e = flags & (ECE | CWR)
            if (flags & ACK and e != ECE) or (not flags & ACK and e != ECE | CWR):
                self.ecn_flags = 0
        if flags & ACK:
            self._take_rtt_sample_syn(seg, now)
            self.snd_wnd = seg.window       # unscaled in a SYN-ACK (RFC 7323 §2.2)
            self.max_snd_wnd = self.snd_wnd
            self.snd_wl1 = 0
            self.snd_wl2 = seq_diff(seg.ack, self.iss)
            self._ack_advance(seq_diff(seg.ack, self.iss), now)
            self.stack.on_synack(self, seg, now)
            self._set_state(State.ESTABLISHED, now)
            self.rtt.reset_backoff()
            self.retransmits = 0
            if len(seg.payload) or seg.flags & FIN:
                self._receive_data(seg, 0, now)   # offset of the SYN: its data starts at 1
            if self.fin_queued and self.write_shutdown:
                self._set_state(State.FIN_WAIT_1, now)
            # RFC 9293: ACK the SYN-ACK at once (data, if queued, carries it).
            self.ack_pending = max(self.ack_pending, 1)
            self._ack_now_flag = True
        else:
            # Simultaneous open (RFC 9293 §3.10.7.3 "fifth", Figure 7).
            self.snd_wnd = seg.window
            self.max_snd_wnd = self.snd_wnd
            self._set_state(State.SYN_RECEIVED, now)
            self.rto_deadline = INF
            self.syn_retries = 0
            self._send_syn(now)

    def _take_rtt_sample_syn(self, seg: Segment, now: float) -> None:
        if self.syn_retries == 0:
            self.rtt.on_sample(now - self.first_rto_time)
        elif self.ts_ok and seg.ts_ecr:
            self._ts_rtt(seg.ts_ecr, now)

    def _ts_rtt(self, ecr: int, now: float) -> None:
        sample = ((self._tsval(now) - ecr) & SEQ_MASK) / 1000.0
        if 0 <= sample < 600:
            self.rtt.on_sample(max(sample, 0.0001))

    def _challenge_ack(self, now: float) -> None:
        """RFC 5961 §7: challenge ACKs, limited per stack and per connection."""
        if not self._oow_allowed(now) or not self.stack.challenge_ack_allowed(now):
            self.mib["TcpExtTCPACKSkippedChallenge"] += 1
            return
        self.mib["TcpExtTCPChallengeACK"] += 1
        self.send_ack(now)

    def _oow_allowed(self, now: float, seg: Segment | None = None) -> bool:
        """Linux tcp_oow_rate_limited: at most one out-of-window ACK per invalid_ratelimit.

        Data segments without SYN are exempt ("not likely part of an ACK loop") and do not
        use up the slot that challenge ACKs share.
        """
        if seg is not None and len(seg.payload) and not seg.flags & SYN:
            return True
        if now - self.oow_last < self.config.invalid_ratelimit:
            return False
        self.oow_last = now
        return True

    def _synchronized_arrives(self, seg: Segment, now: float) -> None:
        """RFC 9293 §3.10.7.4: SYN-RECEIVED and the synchronized states."""
        flags = seg.flags
        st = self.state
        mib = self.mib
        seg_off = self._rcv_off(seg.seq)
        plen = len(seg.payload)
        if st is State.ESTABLISHED:
            mib["UsertcpSlowPathSegs"] += 1

        if st is State.TIME_WAIT and flags & SYN and not flags & (RST | ACK):
            # RFC 9293 §3.10.7.4 / RFC 6191: a new SYN may reuse a TIME_WAIT pair.
            if self.stack.time_wait_reuse(self, seg, now):
                return

        # RFC 7323 §5.3: PAWS, before the sequence check.
        if self.ts_ok and seg.ts_val >= 0 and not flags & RST:
            if seq_diff(seg.ts_val, self.ts_recent) < 0 and now - self.ts_recent_time < TS_PAWS_IDLE:
                mib["TcpExtPAWSEstab"] += 1
                if self._oow_allowed(now, seg):
                    self.send_ack(now)
                return

        # First: sequence acceptability (RFC 9293 §3.10.7.4 table).
        seg_len = plen + (1 if flags & SYN else 0) + (1 if flags & FIN else 0)
        wnd = self.rcv_adv - self.rcv_nxt
        if wnd < 0:
            wnd = 0
        if st is State.SYN_RECEIVED and flags & SYN and not flags & ACK and seg.seq == self.irs:
            # A retransmitted SYN: answer with the SYN-ACK again (Linux inet_rtx_syn_ack).
            mib["UsertcpSynAckRetransOnSyn"] += 1
            self._send_syn(now)
            return
        if st is State.SYN_RECEIVED and not self.passive and flags & SYN and flags & ACK \
                and seg.seq == self.irs and self._snd_off(seg.ack) == self.snd_max:
            # Simultaneous open (RFC 9293 Figure 8, line 6): the peer's SYN-ACK completes it.
            # Linux tcp_validate_incoming lets exactly this SYN pass.
            self._establish_passive(seg, self.snd_max, now)
            return
        if st is State.TIME_WAIT and flags & FIN and not flags & (SYN | RST) \
                and seg_off + plen + 1 == self.rcv_nxt:
            # RFC 9293 §3.10.7.4 eighth: a retransmitted FIN in TIME-WAIT is ACKed and
            # restarts the 2 MSL timeout.
            self.send_ack(now)
            self.time_wait_deadline = now + self.config.time_wait
            return
        acceptable = self._acceptable(seg_off, seg_len, wnd)
        if not acceptable:
            if flags & RST:
                return
            if st is State.SYN_RECEIVED and flags & SYN:
                self._challenge_ack(now)
                return
            mib["UsertcpOutOfWindow"] += 1
            if seg_off < self.rcv_nxt and plen:
                mib["TcpExtTCPDSACKOldSent" if self.sack_ok and self.config.dsack else "UsertcpDupData"] += 1
                if self.sack_ok and self.config.dsack:
                    end = min(seg_off + plen, self.rcv_nxt)
                    self.dsack = (seg_off, end)
            if self._oow_allowed(now, seg):
                self.send_ack(now)
            else:
                mib["TcpExtTCPACKSkippedSeq"] += 1
            return

        # Second: RST (RFC 5961 §3.2).
        if flags & RST:
            if seg_off == self.rcv_nxt or (wnd == 0 and seg_off == self.rcv_nxt):
                if st is State.SYN_RECEIVED and self.passive:
                    self.stack.forget_embryonic(self)
                    self.error = errno.ECONNRESET   # only a fast-open child is visible to an app
                    self._close_now(now)
                    return
                if st is State.TIME_WAIT:
                    # RFC 1337: ignore RSTs in TIME_WAIT (Linux does the same by default? no:
                    # Linux tcp_rfc1337=0 kills the TIME_WAIT); follow Linux.
                    self._close_now(now)
                    return
                self._reset_by_peer(now)
            else:
                self._challenge_ack(now)
            return

        # Third: security/precedence is obsolete. Fourth: SYN (RFC 5961 §4).
        if flags & SYN:
            if st is State.SYN_RECEIVED and self.passive:
                self.stack.forget_embryonic(self)
                self.send_rst(now)
                self._close_now(now)
                return
            self._challenge_ack(now)
            return

        # Fifth: ACK.
        if not flags & ACK:
            mib["UsertcpNoAckDrops"] += 1
            return
        ack_off = self._snd_off(seg.ack)
        if st is State.SYN_RECEIVED:
            if not (self.snd_una < ack_off <= self.snd_max):
                # RFC 9293: unacceptable ACK in SYN-RECEIVED -> RST with seq = SEG.ACK.
                self.stack.send_reset_for(seg, now)
                return
            lst = self.listener
            if (self.passive and lst is not None and not lst.closed and self not in lst.tfo_children
                    and len(lst.accept_queue) >= lst.backlog):
                # Linux tcp_check_req/syn_recv_sock: with the accept queue full the 3rd ACK is
                # dropped (the SYN-ACK timer tries again later), or reset with abort_on_overflow.
                mib["TcpExtListenOverflows"] += 1
                mib["TcpExtListenDrops"] += 1
                if self.config.abort_on_overflow:
                    self.stack.forget_embryonic(self)
                    self.stack.send_reset_for(seg, now)
                    self._close_now(now)
                return
            self._establish_passive(seg, ack_off, now)
            st = self.state
            if st is State.CLOSED:
                return
        if ack_off > self.snd_max:
            # RFC 9293 / RFC 5961 §5.2: an ACK for data never sent.
            mib["UsertcpAckUnsent"] += 1
            if self._oow_allowed(now):
                self.send_ack(now)
            return
        if ack_off < self.snd_una - self.max_snd_wnd:
            self._challenge_ack(now)
            return

        # RFC 7323 §4.3: update ts_recent for a segment that covers last_ack_sent.
        if self.ts_ok and seg.ts_val >= 0 and seg_off <= self.last_ack_sent \
                and seq_diff(seg.ts_val, self.ts_recent) >= 0:
            self.ts_recent = seg.ts_val
            self.ts_recent_time = now

        self._process_ack(seg, ack_off, seg_off, now)
        st = self.state
        if st is State.CLOSED:
            return
        if st is State.TIME_WAIT:
            if flags & FIN:
                # A retransmitted FIN: ACK it and restart the 2 MSL timer (RFC 9293 §3.10.7.4).
                self.send_ack(now)
                self.time_wait_deadline = now + self.config.time_wait
            return

        # Sixth: URG. Urgent data is delivered inline (RFC 6093); only count it.
        if flags & URG:
            mib["UsertcpUrgentSegs"] += 1

        # Seventh and eighth: data and FIN.
        if plen or flags & FIN:
            if st in RECEIVING:
                if self.closed_by_app and plen and seg_off + plen > self.rcv_nxt:
                    # Linux: data for a closed (orphaned) socket resets it (TCPAbortOnData).
                    # The reset is built from the segment, as for no socket (Linux tcp_done, then
                    # tcp_v4_send_reset: SEQ = SEG.ACK).
                    mib["TcpExtTCPAbortOnData"] += 1
                    self._close_now(now)
                    self.stack.send_reset_for(seg, now, self.md5_key)
                    return
                self._receive_data(seg, seg_off, now)
            elif plen:
                mib["UsertcpDataAfterFin"] += 1

    def _acceptable(self, seg_off: int, seg_len: int, wnd: int) -> bool:
        """RFC 9293 §3.10.7.4, the four cases of the acceptability test."""
        nxt = self.rcv_nxt
        if seg_len == 0:
            if wnd == 0:
                return seg_off == nxt
            return nxt <= seg_off < nxt + wnd
        if wnd == 0:
            return False
        end = seg_off + seg_len - 1
        return (nxt <= seg_off < nxt + wnd) or (nxt <= end < nxt + wnd)

    def _establish_passive(self, seg: Segment, ack_off: int, now: float) -> None:
        """SYN-RECEIVED -> ESTABLISHED on an acceptable ACK (RFC 9293 §3.10.7.4 fifth)."""
        if self.syn_retries == 0:
            self.rtt.on_sample(now - self.first_rto_time)
        elif self.ts_ok and seg.ts_ecr:
            self._ts_rtt(seg.ts_ecr, now)
        self.snd_wnd = seg.window << self.snd_wscale
        self.max_snd_wnd = max(self.max_snd_wnd, self.snd_wnd)
        self.snd_wl1 = self._rcv_off(seg.seq)
        self.snd_wl2 = ack_off
        self.rto_deadline = INF
        self.rtt.reset_backoff()
        self.syn_retries = 0
        self._set_state(State.ESTABLISHED, now)
        if self.fin_received:
            # A fast-open SYN+FIN was taken at SYN time (tcp_fastopen_add_skb -> tcp_fin).
            self._set_state(State.CLOSE_WAIT, now)
        if self.fin_queued and self.write_shutdown:
            self._set_state(State.LAST_ACK if self.fin_received else State.FIN_WAIT_1, now)
        self.stack.on_established_passive(self, now, ack_off)

    # ------------------------------------------------------------- ACK handling

    def _process_ack(self, seg: Segment, ack_off: int, seg_off: int, now: float) -> None:
        mib = self.mib
        prior_una = self.snd_una
        prior_in_flight = self.in_flight
        flags = seg.flags
        plen = len(seg.payload)
        win = seg.window << self.snd_wscale
        # Linux tcp_ecn_rcv_ecn_echo: the peer saw a CE mark (RFC 3168 §6.1.2).
        ece = bool(flags & ECE) and bool(self.ecn_flags & ECN_OK)
        if flags & CWR:
            # Linux tcp_ecn_accept_cwr (in tcp_ack, so a pure ACK's CWR counts too): the
            # peer reduced, stop echoing; ACK its data at once, its cwnd may be tiny.
            self.ecn_flags &= ~ECN_DEMAND_CWR
            if plen:
                self._ack_now_flag = True

        sack_new = False
        sacked_before = self.sacked_bytes
        lost_before = self.lost_bytes
        self._fack_prior = self.rack_fack
        if seg.sack_blocks and self.sack_ok:
            sack_new = self._process_sack(seg.sack_blocks, ack_off, now)
        newly_sacked = max(self.sacked_bytes - sacked_before, 0)

        # RFC 9293 §3.10.7.4: window update when the segment is newer (Linux tcp_may_update_window).
        if ack_off > self.snd_una or seg_off > self.snd_wl1 \
                or (seg_off == self.snd_wl1 and (win > self.snd_wnd or ack_off == self.snd_wl2)):
            if win != self.snd_wnd:
                self.snd_wnd = win
                if win > self.max_snd_wnd:
                    self.max_snd_wnd = win
            self.snd_wl1 = seg_off
            self.snd_wl2 = ack_off
            if win and self.probe_deadline != INF:
                self.probe_deadline = INF
                self.probes_out = 0

        if ack_off > self.snd_una:
            acked = self._ack_advance(ack_off, now, seg.ts_ecr if seg.ts_val >= 0 else 0)
            self.dupacks = 0
            if self.ca_state in (CA_RECOVERY, CA_LOSS):
                if ack_off >= self.recover:
                    self._exit_recovery()
                elif self.ca_state == CA_RECOVERY and not self.sack_ok:
                    # RFC 6582 §3.2 step 5: a partial ACK retransmits the next hole.
                    self.reno_dupacks = max(self.reno_dupacks - acked // max(self.mss, 1), 0)
                    if self.rtx and not self.rtx[0].lost:
                        self._mark_lost(self.rtx[0])
            elif self.ca_state == CA_DISORDER and not self.sacked_bytes and not self.reno_dupacks:
                self.ca_state = CA_OPEN
            elif self.ca_state == CA_CWR and ack_off > self.recover:
                # Linux tcp_fastretrans_alert: CWR is held until data above high_seq is acked,
                # so the CWR flag reached the receiver.
                self._end_cwr(now)
            if ece:
                self._enter_cwr(now)           # before the window grows (Linux tcp_try_to_open)
            # Without SACK, Linux counts each dupack as one segment delivered (tcp_add_reno_sack);
            # a cumulative ACK then grows cwnd only by what those did not already count.
            reno_credit = min(self.reno_dupacks * self.mss, self._acked_unsacked) if not self.sack_ok else 0
            if self.ca_state in (CA_DISORDER, CA_CWR) and not self.sack_ok:
                self.reno_dupacks = 0          # new data acked: the dupack episode is over
                if not self.lost_bytes and self.ca_state == CA_DISORDER:
                    self.ca_state = CA_OPEN
            if self.sacked_bytes:
                self._detect_losses(now)
            # Linux tcp_ack: tcp_fastretrans_alert runs before tcp_cong_control, so an ACK that
            # starts fast recovery does not grow the window (and ssthresh) first.
            starts_recovery = self.sack_ok and self.lost_bytes and self.ca_state in (CA_OPEN, CA_DISORDER)
            if self.ca_state != CA_RECOVERY and self.ca_state != CA_CWR and not starts_recovery:
                # Grow by what this ACK newly delivered, not bytes SACKed earlier (Linux
                # acked_sacked); slow start after an RTO too (RFC 5681 §3.1), but the window is
                # held during fast recovery (RFC 6675 §5).
                self.cc.on_ack(self._acked_unsacked - reno_credit + newly_sacked, now, self.rtt.latest_rtt,
                               prior_in_flight,
                               app_limited=prior_in_flight < self.cc.cwnd - 2 * self.mss
                               and not self.unsent_bytes)
        elif ack_off == self.snd_una and self.snd_max > self.snd_una:
            # RFC 5681 §2 duplicate ACK: no data, no window change, data outstanding.
            if not plen and not flags & (SYN | FIN) and (win == self.snd_wnd or sack_new):
                self.dupacks += 1
                mib["UsertcpDupAcks"] += 1
                if not self.sack_ok:
                    if self.ca_state in (CA_OPEN, CA_DISORDER, CA_CWR):
                        self.reno_dupacks = min(self.dupacks, self._outstanding_segments())
                        if self.ca_state != CA_CWR:
                            self.ca_state = CA_DISORDER
                        if self.dupacks >= self.config.reordering and self.rtx:
                            self._mark_lost(self.rtx[0])
                            self._enter_recovery(now)
                    elif self.ca_state == CA_RECOVERY:
                        self.reno_dupacks = min(self.reno_dupacks + 1, self._outstanding_segments())
                elif sack_new:
                    self._detect_losses(now)
            elif sack_new:
                self._detect_losses(now)
        if ece:
            self._enter_cwr(now)     # an ECE on an ACK that advanced nothing (no-op if done)
        if self.sack_ok and self.ca_state in (CA_OPEN, CA_DISORDER, CA_CWR) and self.lost_bytes:
            self._enter_recovery(now)
        elif self.sack_ok and self.ca_state == CA_OPEN and self.sacked_bytes:
            self.ca_state = CA_DISORDER
        if (self.ca_state == CA_RECOVERY and self.sack_ok) or self.ca_state == CA_CWR:
            self._prr(self._acked_unsacked + newly_sacked if ack_off > prior_una else newly_sacked,
                      una_advanced=ack_off > prior_una, newly_lost=self.lost_bytes > lost_before)
        if not plen and ack_off >= prior_una and flags == ACK:
            mib["TcpExtTCPPureAcks"] += 1
        if ack_off > prior_una or sack_new:
            self.tlp_deadline = INF
            self._arm_tlp(now)       # Linux tcp_set_xmit_timer: re-arm the probe on progress

    def _outstanding_segments(self) -> int:
        return max((self.snd_nxt - self.snd_una + self.mss - 1) // max(self.mss, 1), 0)

    def _ack_advance(self, ack_off: int, now: float, ts_ecr: int = 0) -> int:
        """SND.UNA advances to ``ack_off``: drop acknowledged data, sample RTT (RFC 6298)."""
        acked = ack_off - self.snd_una
        rtx = self.rtx
        rtt_sample: float | None = None
        acked_unsacked = 0
        while rtx and rtx[0].end <= ack_off:
            r = rtx.popleft()
            n = r.end - r.start
            if not r.sacked:
                acked_unsacked += n
                self._rack_note(r, now, self._fack_prior)
                self.delivered_segs += max(1, (n - (1 if r.fin else 0) + self.mss - 1) // max(self.mss, 1))
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
            r = rtx[0]
            cut = ack_off - r.start
            if r.sacked:
                self.sacked_bytes -= cut
            else:
                acked_unsacked += cut
                if r.lost:
                    self.lost_bytes -= cut
                if r.retrans:
                    self.retrans_bytes -= cut
            r.start = ack_off
        # RFC 7323 §4.1: with timestamps, every ACK of new data gives a sample.
        if ts_ecr > 0 and self.ts_ok:
            self._ts_rtt(ts_ecr, now)
        elif rtt_sample is not None:
            self.rtt.on_sample(max(rtt_sample, 1e-6))
        # Release acknowledged data from the send buffer (offset 1 is data byte 0).
        data_end = min(ack_off - 1, self.snd_buf.end)
        if data_end > self.snd_buf.start:
            self.snd_buf.release(data_end)
        self.snd_una = ack_off
        if self.snd_nxt < ack_off:
            self.snd_nxt = ack_off
        if ack_off > self.snd_max:
            self.snd_max = ack_off
        self.bytes_acked += acked
        self.delivered += acked
        if self.tlp_high >= 0 and ack_off >= self.tlp_high:
            self.tlp_high = -1           # the probe episode is over (RFC 8985 §7.4)
        # Bytes acked here that were not SACKed before (the SYN/FIN are not in rtx).
        self._acked_unsacked = acked_unsacked
        if self.on_writable is not None and data_end > 0:
            self.on_writable(self)
        # RFC 6298 §5.2/5.3: restart or stop the retransmission timer; §5.7 resets backoff.
        self.rtt.reset_backoff()
        self.retransmits = 0
        self.first_rto_time = now
        if self.snd_una >= self.snd_max:
            self.rto_deadline = INF
        else:
            self.rto_deadline = now + self.rtt.timeout
        self._fin_acked_transitions(now)
        return acked

    def _fin_acked_transitions(self, now: float) -> None:
        if not self.fin_queued or self.snd_una < self.snd_buf.end + 2:
            return
        st = self.state
        if st is State.FIN_WAIT_1:
            self._set_state(State.FIN_WAIT_2, now)
            if self.closed_by_app:
                self.time_wait_deadline = now + self.config.fin_timeout
        elif st is State.CLOSING:
            self._enter_time_wait(now)
        elif st is State.LAST_ACK:
            self._close_now(now)

    def _enter_time_wait(self, now: float) -> None:
        self._set_state(State.TIME_WAIT, now)
        self.rto_deadline = self.delack_deadline = self.probe_deadline = self.keepalive_deadline = INF
        self.rtx.clear()
        self.time_wait_deadline = now + self.config.time_wait
        self.stack.on_time_wait(self)

    def _process_sack(self, blocks: tuple[tuple[int, int], ...], ack_off: int, now: float) -> bool:
        """Mark SACKed records (RFC 2018 §3, RFC 6675 §4 update()). Returns True if new data was SACKed."""
        new = False
        rtx = self.rtx
        for left_seq, right_seq in blocks:
            left = self._snd_off(left_seq)
            right = self._snd_off(right_seq)
            if right <= left or right > self.snd_max or left < self.snd_una - self.max_snd_wnd:
                self.mib["TcpExtTCPSACKDiscard"] += 1
                continue
            if right <= ack_off or left < self.snd_una:
                self.mib["TcpExtTCPDSACKRecv"] += 1    # RFC 2883: a duplicate report
                continue
            i = 0
            while i < len(rtx):
                r = rtx[i]
                if r.end <= left:
                    i += 1
                    continue
                if r.start >= right:
                    break
                if not r.sacked:
                    # Linux tcp_match_skb_to_sack: a block marks whole MSS-sized pieces only; a
                    # partial SACK of a one-MSS segment marks nothing.
                    mss = max(self.mss, 1)
                    lo = max(left, r.start)
                    hi = min(right, r.end)
                    if lo != r.start or hi != r.end:
                        if r.end - r.start <= mss:
                            i += 1
                            continue
                        a = r.start + -(-(lo - r.start) // mss) * mss
                        b = hi if hi == r.end else r.start + ((hi - r.start) // mss) * mss
                        if a >= b:
                            i += 1
                            continue
                    else:
                        a, b = lo, hi
                    if r.start < a:
                        tail = SentSegment(a, r.end, r.fin, r.tx_time)
                        tail.tx_count, tail.retrans = r.tx_count, r.retrans
                        tail.lost, tail.first_tx = r.lost, r.first_tx
                        r.end = a
                        r.fin = False
                        rtx.insert(i + 1, tail)
                        i += 1
                        continue
                    if r.end > b:
                        tail = SentSegment(b, r.end, r.fin, r.tx_time)
                        tail.tx_count, tail.retrans = r.tx_count, r.retrans
                        tail.lost, tail.first_tx = r.lost, r.first_tx
                        r.end = b
                        r.fin = False
                        rtx.insert(i + 1, tail)
                    n = r.end - r.start
                    r.sacked = True
                    self.sacked_bytes += n
                    self.delivered_segs += max(1, (n + self.mss - 1) // max(self.mss, 1))
                    if r.lost:
                        self.lost_bytes -= n
                        r.lost = False
                    if r.retrans:
                        self.retrans_bytes -= n
                        r.retrans = False
                    if r.end > self.high_sacked:
                        self.high_sacked = r.end
                    self._rack_note(r, now)
                    new = True
                    if r.tx_count == 1 and not self.ts_ok:
                        self.rtt.on_sample(max(now - r.tx_time, 1e-6))
                i += 1
        return new

    def _mark_lost(self, r: SentSegment) -> None:
        if r.sacked or r.lost:
            return
        n = r.end - r.start
        r.lost = True
        self.lost_bytes += n
        if self.stack.tracer is not None:
            self.stack.trace(self, "tcp:packet_lost", {
                "rel_seq": r.start, "end": r.end, "trigger": "rack" if self.config.rack and self.sack_ok
                else ("sack" if self.sack_ok else "reno")}, self.stack.now)
        if r.retrans:
            # A lost retransmission: it no longer counts in the pipe (RFC 6675 §4 SetPipe).
            r.retrans = False
            self.retrans_bytes -= n

    def _detect_losses(self, now: float) -> None:
        """RACK (RFC 8985 §6.2) when enabled, as Linux does for SACK peers; else RFC 6675 IsLost."""
        if self.config.rack:
            self._rack_detect(now)
        else:
            self._dupthresh_detect()

    def _rack_note(self, r: SentSegment, now: float, fack: int = -1) -> None:
        """RFC 8985 §6.2 steps 1-3: a segment was just delivered (cumulatively or by SACK).

        ``fack`` is the highest delivered end before this ACK, for cumulatively acked
        segments: SACK blocks of the same ACK do not make them look reordered (Linux prior_fack).
        """
        if r.tx_count > 1 and now - r.tx_time < (self.rtt.min_rtt or 0.0):
            return                      # the ACK may be for the original transmission
        if r.tx_time > self.rack_xmit_ts or (r.tx_time == self.rack_xmit_ts and r.end > self.rack_end):
            self.rack_xmit_ts = r.tx_time
            self.rack_end = r.end
            self.rack_rtt = now - r.tx_time
        if r.end < (self.rack_fack if fack < 0 else fack):
            if r.tx_count == 1:
                # Delivered below what was already delivered, never retransmitted: reordering.
                self.rack_reord = True
                dist = -(-(self.rack_fack - r.start) // max(self.mss, 1))
                if dist > self.reordering:
                    self.reordering = min(dist, 300)       # Linux caps at tcp_max_reordering
        else:
            self.rack_fack = r.end

    def _rack_reo_wnd(self) -> float:
        """RFC 8985 §6.2 step 4 (Linux tcp_rack_reo_wnd)."""
        if not self.rack_reord:
            if self.ca_state in (CA_RECOVERY, CA_LOSS):
                return 0.0
            if self.sacked_bytes >= self.reordering * self.mss:
                return 0.0
        min_rtt = self.rtt.min_rtt or 0.0
        return min(min_rtt / 4, self.rtt.srtt or min_rtt)

    def _rack_detect(self, now: float) -> None:
        """RFC 8985 §6.2 step 5: lost if sent before RACK.xmit_ts and older than RTT + reo_wnd."""
        if self.rack_xmit_ts < 0:
            return
        reo = self._rack_reo_wnd()
        xts, xend = self.rack_xmit_ts, self.rack_end
        wait = INF
        for r in self.rtx:
            if r.sacked or (r.lost and not r.retrans):
                continue
            if r.tx_time > xts or (r.tx_time == xts and r.end >= xend):
                continue                 # not sent before the latest delivered segment
            remaining = r.tx_time + self.rack_rtt + reo - now
            if remaining <= 1e-9:
                if r.lost:               # a lost retransmission: eligible again
                    r.retrans = False
                    self.retrans_bytes -= r.end - r.start
                else:
                    self._mark_lost(r)
            elif remaining < wait:
                wait = remaining
        # Linux adds TCP_TIMEOUT_MIN (2 ms) to the reordering timer.
        self.rack_deadline = now + wait + 0.002 if wait != INF else INF

    def _dupthresh_detect(self) -> None:
        """RFC 6675 §4 IsLost: DupThresh SACKed segments, or more than (DupThresh-1)*SMSS bytes, above."""
        thresh = self.config.reordering
        limit = (thresh - 1) * self.mss
        sacked_above = 0
        sacked_segs = 0
        for r in reversed(self.rtx):
            if r.sacked:
                sacked_above += r.end - r.start
                sacked_segs += 1
            elif (sacked_segs >= thresh or sacked_above > limit) and not r.lost and not r.retrans:
                self._mark_lost(r)

    def _init_cwnd_reduction(self, now: float) -> None:
        """Linux tcp_init_cwnd_reduction: start one PRR-paced reduction (RFC 6937)."""
        # RFC 6937 PRR state; Linux uses the cwnd before the reduction as RecoverFS.
        self.prior_cwnd = max(self.cc.cwnd, self.mss)
        self.prr_delivered = 0
        self.prr_out = 0
        # Linux bases ssthresh on cwnd (tcp_reno_ssthresh / bictcp_recalc_ssthresh).
        self.cc.on_congestion_event(now, self.cc.cwnd)
        self.recover = self.snd_max          # Linux high_seq
        self._ecn_queue_cwr()

    def _ecn_queue_cwr(self) -> None:
        """Linux tcp_ecn_queue_cwr: every reduction is announced with CWR (RFC 3168 §6.1.2)."""
        if self.ecn_flags & ECN_OK:
            self.ecn_flags |= ECN_QUEUE_CWR

    def _enter_cwr(self, now: float, trigger: str = "ecn_echo") -> None:
        """Linux tcp_enter_cwr: an ECN echo (or a locally refused transmission) reduces cwnd (by
        the CC's ssthresh) at most once per window of data (RFC 3168 §6.1.2), in the CWR state,
        paced by PRR like a recovery."""
        if self.ca_state >= CA_CWR:
            return
        self.mib["UsertcpECNCwndReductions" if trigger == "ecn_echo" else "UsertcpLocalCwndReductions"] += 1
        self._init_cwnd_reduction(now)
        old = self.ca_state
        self.ca_state = CA_CWR
        if self.stack.tracer is not None:
            self._trace_ca(old, trigger, now)

    def _end_cwr(self, now: float) -> None:
        """Linux tcp_end_cwnd_reduction + TCP_CA_Open: cwnd settles at ssthresh."""
        self.cc.on_recovery_exit()
        self.ca_state = CA_OPEN
        if self.stack.tracer is not None:
            self._trace_ca(CA_CWR, "cwr_done", now)

    def _enter_recovery(self, now: float) -> None:
        """RFC 6675 §5 / RFC 6582 §3.2: fast retransmit and the start of fast recovery."""
        if self.ca_state in (CA_RECOVERY, CA_LOSS):
            return
        self.mib["TcpExtTCPSackRecovery" if self.sack_ok else "TcpExtTCPRenoRecovery"] += 1
        if self.ca_state != CA_CWR:
            # Linux tcp_enter_recovery: an ECN-triggered reduction already under way is the
            # one for this window; the loss does not reduce again.
            self._init_cwnd_reduction(now)
        old = self.ca_state
        self.ca_state = CA_RECOVERY
        if self.stack.tracer is not None:
            self._trace_ca(old, "loss_detected", now)

    def _prr(self, delivered: int, *, una_advanced: bool = False, newly_lost: bool = False) -> None:
        """RFC 6937 proportional rate reduction (Linux tcp_cwnd_reduction): cwnd = pipe + sndcnt."""
        if delivered <= 0 or not self.prior_cwnd:
            return
        self.prr_delivered += delivered
        pipe = self.in_flight
        ssthresh = self.cc.ssthresh
        if pipe > ssthresh:
            sndcnt = -(-self.prr_delivered * ssthresh // self.prior_cwnd) - self.prr_out
        else:
            # PRR-SSRB: grow back towards ssthresh; one MSS more only when SND.UNA moved
            # and nothing new was lost (Linux).
            sndcnt = max(self.prr_delivered - self.prr_out, delivered)
            if una_advanced and not newly_lost:
                sndcnt += self.mss
            sndcnt = min(ssthresh - pipe, sndcnt)
        if not self.prr_out:
            sndcnt = max(sndcnt, self.mss)   # force the fast retransmit on entering recovery
        self.cc.cwnd = max(pipe + max(sndcnt, 0), self.mss)

    def _exit_recovery(self) -> None:
        if self.ca_state == CA_RECOVERY:
            self.cc.on_recovery_exit()
        old = self.ca_state
        self.ca_state = CA_OPEN
        if self.stack.tracer is not None:
            self._trace_ca(old, "recovery_done", self.stack.now)
        self.reno_dupacks = 0
        self.dupacks = 0

    # ------------------------------------------------------------ data receive

    def _receive_data(self, seg: Segment, seg_off: int, now: float) -> None:
        """RFC 9293 §3.10.7.4 seventh/eighth: queue in-order data, reassemble, handle FIN."""
        payload = seg.payload
        fin = bool(seg.flags & FIN)
        if seg.flags & SYN:
            seg_off += 1          # data in a SYN starts after the SYN's sequence number
        plen = len(payload)
        mib = self.mib
        self.last_rcv_time = now
        nxt = self.rcv_nxt
        if plen:
            self.data_segs_in += 1
        # Trim what was already received (RFC 9293 §3.10.7.4 "trim").
        if seg_off < nxt:
            cut = nxt - seg_off
            if cut >= plen and not fin:
                self.dsack = (seg_off, seg_off + plen) if self.sack_ok and self.config.dsack else None
                mib["TcpExtTCPDSACKOldSent" if self.dsack else "UsertcpDupData"] += 1
                self._schedule_ack(now, immediate=True)
                return
            if cut > plen:
                cut = plen
            if self.sack_ok and self.config.dsack and cut:
                self.dsack = (seg_off, seg_off + cut)
            payload = payload[cut:]
            seg_off += cut
            plen -= cut
        # Trim to the receive window's right edge.
        right = self.rcv_nxt + max(self.rcv_adv - self.rcv_nxt, 0)
        if seg_off + plen > right:
            keep = max(right - seg_off, 0)
            payload = payload[:keep]
            plen = keep
            fin = False
            mib["UsertcpBeyondWindow"] += 1
        mem = self.stack.mem
        if plen and mem.limit and mem.used + plen > mem.limit:
            # Past the stack-wide buffer limit (Linux tcp_mem): drop and count the data; the
            # ACK restates what we have, and the peer retransmits when memory frees.
            mib["TcpExtTCPRcvQDrop"] += 1
            self._schedule_ack(now, immediate=True)
            return
        if plen and self.ecn_flags:
            self._ecn_check_ce(seg.ecn)   # Linux tcp_event_data_recv / tcp_data_queue_ofo
        if seg_off == nxt:
            if plen:
                self._grow_window(plen)
                if not self.read_shutdown or not self.closed_by_app:
                    self.rcv_buf.append(payload)
                nxt += plen
                self.bytes_received += plen
            if fin:
                nxt += 1
            if fin and not self.ooo.empty:
                self.ooo.clear()       # nothing can follow a FIN (RFC 9293 §3.10.7.4 eighth)
            if not self.ooo.empty:
                nxt_seq = (self.irs + nxt) & SEQ_MASK
                chunks, new_seq, ooo_fin = self.ooo.pop_ready(nxt_seq)
                for c in chunks:
                    self.rcv_buf.append(c)
                    self.bytes_received += len(c)
                if ooo_fin:
                    fin = True
                nxt += seq_diff(new_seq, nxt_seq)
                immediate = True       # RFC 5681 §4.2: ACK at once when a hole fills
            else:
                immediate = False
            self.rcv_nxt = nxt
            if fin:
                self._fin_arrives(now)
                self._schedule_ack(now, immediate=True)
            elif plen or immediate:
                self._schedule_ack(now, immediate=immediate, length=plen)
            if fin or plen:
                self.sk_wakeups += 1     # sk_data_ready() wakes the wait queue, writers too
            if self.on_readable is not None and (fin or self.rcv_buf.size):
                self.on_readable(self)
        else:
            # Out of order: queue it and send an immediate duplicate ACK (RFC 5681 §4.2).
            irs = self.irs
            if not self.ooo.add((irs + seg_off) & SEQ_MASK, payload, fin, (irs + nxt) & SEQ_MASK):
                mib["TcpExtTCPOFODrop"] += 1
            else:
                mib["TcpExtTCPOFOQueue"] += 1
            self._schedule_ack(now, immediate=True)

    def _ecn_check_ce(self, ecn: int) -> None:
        """Linux __tcp_ecn_check_ce: the IP ECN field of a data segment (RFC 3168 §6.1.3)."""
        ef = self.ecn_flags
        if not ef & ECN_OK:
            return
        if ecn == ECN_CE:
            self.mib["UsertcpECNCeDataSegs"] += 1
            if not ef & ECN_DEMAND_CWR:
                # Echo ECE from now until the peer's CWR; do not delay the ACKs that carry
                # it, the sender may have a very small cwnd.
                self._enter_quickack_mode(2)
                ef |= ECN_DEMAND_CWR
            self.ecn_flags = ef | ECN_SEEN
        elif ecn != ECN_NOT_ECT:
            self.ecn_flags = ef | ECN_SEEN
        elif ef & ECN_SEEN:
            # Not ECT on an ECN connection that has seen ECT: probably a retransmission
            # (RFC 3168 §6.1.5), so ACK it quickly.
            self._enter_quickack_mode(2)

    def _enter_quickack_mode(self, max_quickacks: int) -> None:
        """Linux tcp_enter_quickack_mode: the next ACKs go out at once, interactive mode off."""
        quick = self.rcv_adv - self.rcv_nxt
        quick = quick // (2 * max(self.rcv_mss, 1)) if quick > 0 else 0
        quick = min(quick or 2, max_quickacks)
        if quick > self.quickack:
            self.quickack = quick
        self.pingpong = False

    def _grow_window(self, plen: int) -> None:
        """Linux tcp_grow_window: each full-sized segment opens the window by two MSS."""
        if self.rcv_ssthresh < self.rcvbuf_limit and plen >= self.rcv_mss // 2:
            self.rcv_ssthresh = min(self.rcv_ssthresh + 2 * self.rcv_mss, self.rcvbuf_limit)

    def _fin_arrives(self, now: float) -> None:
        self.fin_received = True
        st = self.state
        if st is State.ESTABLISHED:
            self._set_state(State.CLOSE_WAIT, now)
        elif st is State.FIN_WAIT_1:
            if self.fin_queued and self.snd_una >= self.snd_buf.end + 2:
                self._enter_time_wait(now)
            else:
                self._set_state(State.CLOSING, now)
        elif st is State.FIN_WAIT_2:
            self._enter_time_wait(now)

    def _schedule_ack(self, now: float, *, immediate: bool = False, length: int = 0) -> None:
        """Delayed ACKs (RFC 9293 §3.8.6.3, RFC 5681 §4.2) with Linux's quick-ACK start."""
        self.ack_pending += max(length, 1)
        if immediate:
            self._ack_now_flag = True
            return
        if self.quickack > 0 and not self.pingpong:
            self.quickack -= 1
            self._ack_now_flag = True
            return
        # At least every second full-sized segment.
        if self.rcv_nxt - self.last_ack_sent >= 2 * self.rcv_mss:
            self._ack_now_flag = True
            return
        if self.delack_deadline == INF:
            self.delack_deadline = now + self.config.delack_min


    # ------------------------------------------------------------------ output

    def output(self, now: float) -> None:
        """Send what the windows allow: retransmissions, new data, FIN, then any owed ACK."""
        st = self.state
        if st is State.CLOSED or st is State.LISTEN or st is State.TIME_WAIT:
            if self._ack_now_flag:
                self._ack_now_flag = False
                if st is State.TIME_WAIT:
                    self.send_ack(now)
            return
        if st is State.SYN_SENT or st is State.SYN_RECEIVED:
            self._ack_now_flag = False
            self.stack.syn_state_output(self, now)
            return
        sent = False
        if self.lost_bytes:
            sent = self._send_retransmissions(now)
        if self.snd_nxt <= self.snd_buf.end + (1 if self.fin_queued else 0):
            if self._send_new_data(now):
                sent = True
                # Where a burst stopped inside an skb, Linux split it (tso_fragment).
                self.snd_buf.mark_sent(self.snd_max - 1, self._tso_bytes())
        self._force_push = False
        if self._ack_now_flag:
            self._ack_now_flag = False
            if not sent or self.ack_pending:
                self.send_ack(now)
        if self.snd_max > self.snd_una and self.rto_deadline == INF:
            self.rto_deadline = now + self.rtt.timeout
        if sent:
            self.tlp_deadline = INF      # Linux re-arms the probe after each transmission
            self._arm_tlp(now)
        self._arm_probe(now)
        if self.keepalive and self.state in SYNCHRONIZED:
            self.keepalive_deadline = self.last_rcv_time + self.keepalive_time \
                if self.probes_out == 0 else self.keepalive_deadline

    def _send_retransmissions(self, now: float) -> bool:
        """RFC 6675 §5 NextSeg rule 1: retransmit lost segments while pipe < cwnd."""
        sent = False
        cwnd = self.cc.cwnd
        rtx = self.rtx
        i = -1
        while i + 1 < len(rtx):
            i += 1
            r = rtx[i]
            if not r.lost or r.retrans or r.sacked:
                continue
            if self.in_flight + (r.end - r.start) > cwnd and sent:
                break
            if self.in_flight >= cwnd and not (not sent and self.ca_state == CA_RECOVERY
                                               and self.retrans_bytes == 0):
                break
            if not self._retransmit(r, now, i):
                break             # Linux tcp_xmit_retransmit_queue stops at a failed one
            sent = True
        return sent

    def _retransmit(self, r: SentSegment, now: float, index: int = 0) -> bool:
        # Re-cut to the current MSS (the MSS may have shrunk).
        if r.end - r.start - (1 if r.fin else 0) > self.mss:
            tail = SentSegment(r.start + self.mss, r.end, r.fin, r.tx_time)
            tail.tx_count, tail.lost, tail.first_tx = r.tx_count, r.lost, r.first_tx
            r.end = r.start + self.mss
            r.fin = False
            self.rtx.insert(index + 1, tail)
        dlen = r.end - r.start - (1 if r.fin else 0)
        payload = self.snd_buf.views(r.start - 1, dlen) if dlen else []
        # Linux __tcp_retransmit_skb() cuts the skb to what it resends (tcp_fragment).
        self.snd_buf.split(r.start - 1)
        self.snd_buf.split(r.start - 1 + dlen)
        flags = ACK
        if r.fin:
            flags |= FIN
        if dlen and r.start - 1 + dlen >= self.snd_buf.end:
            flags |= PSH
        if not self._emit(now, r.start, flags, payload):
            return self._retransmit_refused(r)
        if self.ca_state == CA_RECOVERY or self.ca_state == CA_CWR:
            self.prr_out += r.end - r.start
        r.retrans = True
        self.retrans_bytes += r.end - r.start
        r.tx_count += 1
        r.tx_time = now
        self.total_retrans += 1
        if self.stack.tracer is not None:
            reason = {CA_RECOVERY: "fast", CA_LOSS: "rto"}.get(self.ca_state, "probe")
            self.stack.trace(self, "tcp:retransmit", {"rel_seq": r.start, "end": r.end,
                                                      "tx_count": r.tx_count, "reason": reason}, now)
        self.mib["TcpRetransSegs"] += 1
        if self.ca_state == CA_RECOVERY:
            self.mib["TcpExtTCPFastRetrans"] += 1
        if self.rto_deadline == INF:
            self.rto_deadline = now + self.rtt.timeout
        return True

    def _retransmit_refused(self, r: SentSegment) -> bool:
        """Linux __tcp_retransmit_skb when the local queue refused the copy: counted as a
        retransmission (and TCPRetransFail), marked EVER_RETRANS so no RTT sample comes from
        it (Karn), but not SACKED_RETRANS: it is not in flight and stays to be retransmitted."""
        r.tx_count += 1
        self.total_retrans += 1
        self.mib["TcpRetransSegs"] += 1
        self.mib["TcpExtTCPRetransFail"] += 1
        return False

    def _send_new_data(self, now: float) -> bool:
        """RFC 9293 §3.8.6.2.1 sender SWS avoidance, Nagle (Minshall), cwnd and rwnd limits."""
        sent = False
        mss = self.mss
        data_end = self.snd_buf.end + 1          # offset just past the last queued byte
        budget = self._xmit_budget               # tcp_push_one(): one skb's burst at most
        while True:
            nxt = self.snd_nxt
            avail = data_end - nxt
            fin_now = self.fin_queued and avail <= 0 and nxt == data_end
            if avail <= 0 and not fin_now:
                break
            wnd_right = self.snd_una + self.snd_wnd
            wnd_room = wnd_right - nxt
            # Linux counts packets: a fast-open child's unacknowledged SYN-ACK is not in its
            # packets_out, so its sequence byte takes no room from the first flight's cwnd.
            cwnd_room = self.cc.cwnd - self.in_flight + (1 if self.snd_una == 0 else 0)
            if fin_now:
                # A bare FIN is sent regardless of the windows' payload room.
                return self._emit_new(now, nxt, 0, fin=True) or sent
            if cwnd_room <= 0 or wnd_room <= 0:
                break
            # With TSO the link cuts super-segments into MSS pieces (RFC 9293 §3.7.4 still
            # holds on the wire); never with MD5, whose digest covers each segment.
            limit = mss
            if self.stack.gso_max_size > mss and self.md5_key is None:
                limit = max(self.stack.gso_max_size // mss, 1) * mss
            size = min(avail, limit, wnd_room, cwnd_room)
            if budget >= 0:
                if budget == 0:
                    break
                size = min(size, budget)
            if size < mss and size < avail:
                # Window-limited to a small segment: only if it is half the max window (SWS).
                if size < self.max_snd_wnd // 2 or (cwnd_room < mss and cwnd_room < avail):
                    if not (cwnd_room < mss and self.snd_nxt == self.snd_una):
                        break
            if size < mss and size == avail and not self._force_push:
                # A partial segment of all remaining data: Nagle/cork decide (RFC 896, Linux).
                if self._cork or self.more_pending or self._mid_write:
                    break
                if not self._nodelay and self.snd_sml > self.snd_una and self.snd_nxt > self.snd_una:
                    break
            fin = self.fin_queued and nxt + size == data_end
            # Linux marks PSH where a transmit burst ends: the end of the written data, or
            # the last segment the windows let out now (what packetdrill sees of TSO skbs).
            rest = avail - size
            room_after = min(wnd_room, cwnd_room) - size
            # Limited transmit (a dupack let one segment out, RFC 3042) sends no PSH in Linux.
            # Inside a write the burst ends only where the windows stop it.
            burst_end = self.ca_state == CA_OPEN and not self.more_pending \
                and (room_after < mss if self._mid_write else rest <= 0 or room_after < min(mss, rest))
            if not self._emit_new(now, nxt, size, fin=fin, push=burst_end):
                break          # Linux tcp_write_xmit: a refused skb stays at the queue head
            sent = True
            if budget > 0:
                budget -= size
            if size < mss:
                self.snd_sml = nxt + size
        return sent

    def _emit_new(self, now: float, off: int, size: int, *, fin: bool, push: bool = False,
                  force_psh: bool = False) -> bool:
        payload = self.snd_buf.views(off - 1, size) if size else []
        flags = ACK
        end_data = off - 1 + size
        if size and (force_psh or (push and (self._mid_write or end_data <= self.push_end))
                     or (end_data >= self.push_end > off - 1)):
            # Linux pushes at the end of a write without MSG_MORE, and where a burst of such
            # data ends; bytes written with MSG_MORE beyond that point never carry PSH.
            flags |= PSH
        if fin:
            flags |= FIN
        end = off + size + (1 if fin else 0)
        if not self._emit(now, off, flags, payload, gso_size=self.mss if size > self.mss else 0):
            return False       # refused locally: not sent, SND.NXT stays (tcp_write_xmit)
        if self.ca_state == CA_RECOVERY or self.ca_state == CA_CWR:
            self.prr_out += end - off
        self.rtx.append(SentSegment(off, end, fin, now))
        self.snd_nxt = end
        if end > self.snd_max:
            self.snd_max = end
        if size:
            self.data_segs_out += 1
        if self.rto_deadline == INF:
            self.rto_deadline = now + self.rtt.timeout
        if self.last_rcv_time and now - self.last_rcv_time < self.config.delack_min:
            self.pingpong = True    # Linux tcp_event_data_sent: a reply soon after a receive
        return True

    def _arm_probe(self, now: float) -> None:
        """RFC 9293 §3.8.6.1: probe a zero window when data waits and nothing is in flight."""
        # Linux tcp_check_probe_timer also covers data held back by cork/MSG_MORE/Nagle with
        # nothing in flight: the probe timer (one RTO) then sends it (tcp_write_wakeup).
        # A FIN the local queue refused waits in the same way.
        if self.snd_nxt == self.snd_una and (self.unsent_bytes > 0 or (
                self.fin_queued and self.snd_nxt == self.snd_buf.end + 1)):
            if self.probe_deadline == INF:
                self.probe_deadline = now + self.rtt.timeout
                self.probe_backoff = 0      # a new episode (tcp_check_probe_timer)
                self.probes_tstamp = -1.0
        elif self.probe_deadline != INF:
            self.probe_deadline = INF
            self.probes_out = 0

    # ------------------------------------------------------------------ timers

    def next_deadline(self) -> float:
        return min(self.rto_deadline, self.delack_deadline, self.probe_deadline,
                   self.keepalive_deadline, self.time_wait_deadline, self.tlp_deadline, self.rack_deadline)

    def _update_prediction(self) -> None:
        """Turn header prediction on only while nothing forbids it (Linux tcp_fast_path_check)."""
        if (self.state is State.ESTABLISHED and self.config.header_prediction and self.ooo.empty
                and self.ca_state == CA_OPEN and not self.sacked_bytes and not self.lost_bytes
                and not self.reno_dupacks and not self.closed_by_app and self.rcv_adv > self.rcv_nxt
                and self.rcvbuf_limit > len(self.rcv_buf)
                and (self.md5_key is None or self.config.md5_fast_path)):
            hdr_len = 20 + (12 if self.ts_ok else 0) + (20 if self.md5_key is not None else 0)
            window = self.snd_wnd >> self.snd_wscale
            self.pred_flags = (hdr_len >> 2) << 28 | ACK << 16 | window if window <= 0xFFFF else 0
        else:
            self.pred_flags = 0

    def fast_ack(self, ack_off: int, ts_val: int, ts_ecr: int, now: float) -> None:
        """Predicted pure ACK of new data: the slow path's effects for exactly this case."""
        self.segs_in += 1
        seg_off = self.rcv_nxt
        if ts_val >= 0 and seg_off <= self.last_ack_sent and not (ts_val - self.ts_recent) & 0x80000000:
            self.ts_recent = ts_val
            self.ts_recent_time = now
        prior_in_flight = self.in_flight
        self.snd_wl1 = seg_off
        self.snd_wl2 = ack_off
        if self.snd_wnd and self.probe_deadline != INF:
            self.probe_deadline = INF
            self.probes_out = 0
        self._ack_advance(ack_off, now, ts_ecr if ts_val >= 0 else 0)
        self.dupacks = 0
        self.tlp_deadline = INF
        self._arm_tlp(now)
        self.cc.on_ack(self._acked_unsacked, now, self.rtt.latest_rtt, prior_in_flight,
                       app_limited=prior_in_flight < self.cc.cwnd - 2 * self.mss and not self.unsent_bytes)
        if self.state is not State.CLOSED:
            self.output(now)
            self._check_space()
        self._schedule()

    def fast_data(self, payload: memoryview, ts_val: int, ts_ecr: int, now: float, ecn: int = 0) -> None:
        """Predicted in-order data with the ACK unchanged: the slow path's effects, no more.

        ``ecn`` is the IP header's ECN field (Linux tcp_event_data_recv -> tcp_ecn_check_ce).
        """
        self.segs_in += 1
        seg_off = self.rcv_nxt
        if ts_val >= 0 and seg_off <= self.last_ack_sent and not (ts_val - self.ts_recent) & 0x80000000:
            self.ts_recent = ts_val
            self.ts_recent_time = now
        if seg_off > self.snd_wl1 or (seg_off == self.snd_wl1 and self.snd_una == self.snd_wl2):
            self.snd_wl1 = seg_off
            self.snd_wl2 = self.snd_una
            if self.snd_wnd and self.probe_deadline != INF:
                self.probe_deadline = INF
                self.probes_out = 0
        plen = len(payload)
        self.last_rcv_time = now
        self.data_segs_in += 1
        self._grow_window(plen)
        if self.ecn_flags:
            self._ecn_check_ce(ecn)
        self.rcv_buf.append(payload)
        self.rcv_nxt = seg_off + plen
        self.bytes_received += plen
        self._schedule_ack(now, length=plen)
        self.sk_wakeups += 1             # sk_data_ready()
        if self.on_readable is not None:
            self.on_readable(self)
        # output() has work only for these conditions; otherwise it would change nothing.
        if (self._ack_now_flag or self.lost_bytes or self.keepalive or self.probe_deadline != INF
                or self.snd_nxt <= self.snd_buf.end + (1 if self.fin_queued else 0)
                or (self.snd_max > self.snd_una and self.rto_deadline == INF)):
            self.output(now)
        self._schedule()

    def _schedule(self) -> None:
        self._update_prediction()
        d = self.next_deadline() if self.state is not State.CLOSED else INF
        if d != self.timer_deadline:
            self.timer_deadline = d
            if d != INF:
                self.stack.schedule(self, d)

    def handle_timer(self, now: float) -> None:
        if self.state is State.CLOSED:
            return
        self._tx_refused = False
        if now >= self.time_wait_deadline:
            self.time_wait_deadline = INF
            expired = "UsertcpTimeWaitExpired" if self.state is State.TIME_WAIT else "TcpExtTCPAbortOnTimeout"
            self.mib[expired] += 1
            self._close_now(now)
            return
        if now >= self.rack_deadline:
            self.rack_deadline = INF
            self._detect_losses(now)
            if self.lost_bytes and self.ca_state in (CA_OPEN, CA_DISORDER, CA_CWR):
                self._enter_recovery(now)
                if self.sack_ok:
                    self._prr(self.mss)      # Linux tcp_rack_reo_timeout: one segment's worth
        if now >= self.tlp_deadline:
            self.tlp_deadline = INF
            self._on_tlp(now)        # re-arms the RTO when it sends a probe
        if now >= self.rto_deadline:
            self.rto_deadline = INF
            self.tlp_deadline = INF
            self._on_rto(now)
        if self.state is not State.CLOSED and now >= self.delack_deadline:
            self.delack_deadline = INF
            if self.ack_pending:
                self.mib["TcpExtDelayedACKs"] += 1
                self.send_ack(now)
        if self.state is not State.CLOSED and now >= self.probe_deadline:
            self.probe_deadline = INF
            self._on_probe(now)
        if self.state is not State.CLOSED and now >= self.keepalive_deadline:
            self.keepalive_deadline = INF
            self._on_keepalive(now)
        if self.state is not State.CLOSED and not self._tx_refused:
            # After a refusal the timer handlers above have re-armed their retry; like Linux's
            # timers, do not hammer the full local queue again in the same event.
            self.output(now)
        self._schedule()

    def _on_rto(self, now: float) -> None:
        """RFC 6298 §5.4-5.6 and RFC 5681 §3.1: a retransmission timeout."""
        cfg = self.config
        st = self.state
        if st is State.SYN_SENT or st is State.SYN_RECEIVED:
            limit = cfg.syn_retries if st is State.SYN_SENT else cfg.synack_retries
            if self.syn_retries >= limit or self._user_timeout_expired(now):
                if st is State.SYN_RECEIVED and self.passive:
                    self.stack.forget_embryonic(self)
                self._fail(errno.ETIMEDOUT, now)
                return
            self.syn_retries += 1
            # A passive open resends its SYN-ACK as a request sock (tcp_rtx_synack counts only
            # what left); an active one retransmits its SYN like data (__tcp_retransmit_skb).
            passive = st is State.SYN_RECEIVED and self.passive
            if not passive:
                self._count_syn_retrans()
            self.stack.syn_rto(self, now)
            if self._send_syn(now):
                if passive:
                    self._count_syn_retrans()
            elif not passive:
                # Linux tcp_retransmit_timer: local congestion, retry soon without backoff.
                self.rto_deadline = now + RESOURCE_PROBE_INTERVAL
                return
            elif self.listener is None or self not in self.listener.tfo_children:
                # Linux reqsk_timer_handler: a request whose SYN-ACK cannot be resent is
                # dropped (a TFO child, tcp_fastopen_synack_timer, ignores the error).
                self.mib["UsertcpSynAckLocalDrops"] += 1
                self.stack.forget_embryonic(self)
                self._close_now(now)
                return
            self.rtt.on_timeout()
            self.rto_deadline = now + self.rtt.timeout
            return
        if self.snd_una >= self.snd_max:
            return
        if self.retransmits >= cfg.retries2 or self._user_timeout_expired(now):
            self._fail(errno.ETIMEDOUT, now)
            return
        self.mib["TcpExtTCPTimeouts"] += 1
        self.tlp_high = -1
        self.rack_deadline = INF
        # Linux tcp_enter_loss: ssthresh is not cut again inside a CWR reduction's window.
        cwr_window = self.ca_state == CA_CWR and self.recover > self.snd_una
        self.cc.on_rto(now, self.cc.cwnd, first_timeout=self.retransmits == 0 and not cwr_window)
        self._ecn_queue_cwr()
        old_ca = self.ca_state
        self.ca_state = CA_LOSS
        if self.stack.tracer is not None:
            self.stack.trace(self, "tcp:rto_fired",
                             {"backoff": self.rtt.backoff, "rto": self.rtt.timeout}, now)
            self._trace_ca(old_ca, "rto", now)
        self.recover = self.snd_max
        self.reno_dupacks = 0
        self.dupacks = 0
        # Linux tcp_timeout_mark_lost: a SACKed head at an RTO means the receiver reneged
        # (RFC 2018 §8): forget every SACK mark, and retransmit from SND.UNA.
        reneged = bool(self.rtx) and self.rtx[0].sacked
        if reneged:
            self.mib["TcpExtTCPSACKReneging"] += 1
            self.sacked_bytes = 0
        for r in self.rtx:
            if reneged:
                r.sacked = False
            if r.retrans:
                r.retrans = False
            if not r.sacked and not r.lost:
                r.lost = True
        self.retrans_bytes = 0
        self.lost_bytes = sum(r.end - r.start for r in self.rtx if r.lost)
        self.retransmits += 1
        if self.rtx and not self._retransmit(self.rtx[0], now):
            # Linux tcp_retransmit_timer: the retransmission failed for local congestion; retry
            # after TCP_RESOURCE_PROBE_INTERVAL, without backing the RTO off.
            self.rto_deadline = now + RESOURCE_PROBE_INTERVAL
            return
        self.rtt.on_timeout()
        self.rto_deadline = now + self.rtt.timeout

    def _count_syn_retrans(self) -> None:
        self.mib["TcpExtTCPSynRetrans"] += 1
        self.total_retrans += 1
        self.mib["TcpRetransSegs"] += 1

    def _arm_tlp(self, now: float) -> None:
        """RFC 8985 §7.2: arm the probe timeout (PTO) while data is outstanding in Open/CWR state."""
        # Linux tcp_schedule_loss_probe(): SACK peers only (RFC 8985 §2: RACK-TLP needs SACK),
        # in Open or CWR state (an ECN reduction is no loss episode).
        if (not self.config.tlp or not self.sack_ok or self.ca_state not in (CA_OPEN, CA_CWR)
                or self.snd_max <= self.snd_una or self.tlp_high >= 0 or self.tlp_deadline != INF
                or self.state not in (State.ESTABLISHED, State.CLOSE_WAIT, State.FIN_WAIT_1,
                                      State.CLOSING, State.LAST_ACK)):
            return
        srtt = self.rtt.srtt
        if srtt is None:
            pto = 1.0
        else:
            # One segment out: allow for a delayed ACK (RFC 8985 §7.2 WCDelAckT; Linux adds
            # the RTO floor), else TCP_TIMEOUT_MIN; rounded up to a jiffy (usecs_to_jiffies).
            one = self.snd_max - self.snd_una <= self.mss + 1
            pto = 2 * srtt + (self.rtt.rto_min if one else 0.002)
            tick = self.rtt.granularity
            if tick > 0:
                pto = math.ceil(pto / tick - 1e-9) * tick
        # Linux caps the PTO at the RTO; the probe then goes out in the RTO's place.
        self.tlp_deadline = min(now + pto, self.rto_deadline)

    def _on_tlp(self, now: float) -> None:
        """RFC 8985 §7.3: send one new segment if possible, else retransmit the last one."""
        if self.snd_max <= self.snd_una or self.ca_state not in (CA_OPEN, CA_CWR):
            return
        data_end = self.snd_buf.end + 1
        room = self.snd_una + self.snd_wnd - self.snd_nxt
        avail = data_end - self.snd_nxt
        if avail > 0 and room > 0:
            size = min(self.mss, avail, room)
            sent = self._emit_new(now, self.snd_nxt, size,
                                  fin=self.fin_queued and self.snd_nxt + size == data_end)
        elif avail <= 0 and self.fin_queued and self.snd_nxt == data_end:
            sent = self._emit_new(now, self.snd_nxt, 0, fin=True)
        else:
            idx = len(self.rtx) - 1
            while idx >= 0 and self.rtx[idx].sacked:
                idx -= 1
            if idx < 0:
                return
            r = self.rtx[idx]
            if r.end - r.start > self.mss + (1 if r.fin else 0):
                # Probe with the last MSS of a super-segment.
                cut = r.end - self.mss - (1 if r.fin else 0)
                tail = SentSegment(cut, r.end, r.fin, r.tx_time)
                tail.tx_count, tail.retrans = r.tx_count, r.retrans
                tail.lost, tail.first_tx = r.lost, r.first_tx
                r.end = cut
                r.fin = False
                self.rtx.insert(idx + 1, tail)
                r = tail
                idx += 1
            if r.retrans:
                return
            self.mib["TcpExtTCPLossProbeRecovery" if r.lost else "UsertcpLossProbeRetrans"] += 1
            sent = self._retransmit(r, now, idx)
        if not sent:
            return      # Linux tcp_send_loss_probe: refused locally, the RTO stays as armed
        self.mib["TcpExtTCPLossProbes"] += 1
        self.tlp_high = self.snd_max
        self.rto_deadline = now + self.rtt.timeout

    def _user_timeout_expired(self, now: float) -> bool:
        """RFC 5482 / Linux retransmits_timed_out: time since the oldest unacked data first left."""
        if not self.user_timeout:
            return False
        start = self.rtx[0].first_tx if self.rtx else self.first_rto_time
        return now - start >= self.user_timeout

    def _on_probe(self, now: float) -> None:
        """The probe timer: data (or a FIN) waits and nothing is in flight (Linux tcp_probe_timer,
        tcp_send_probe0). With the window open the held data goes out (tcp_write_wakeup), else a
        zero-window probe: an ACK with SEQ = SND.UNA - 1 (tcp_xmit_probe_skb). A probe the local
        queue refused is retried every TCP_RESOURCE_PROBE_INTERVAL without backoff; the count
        (tcpi_probes) still grows, and TCP_USER_TIMEOUT runs from the episode's first probe."""
        data_end = self.snd_buf.end + 1
        fin_unsent = self.fin_queued and self.snd_nxt == data_end
        if self.snd_nxt > self.snd_una or (self.unsent_bytes == 0 and not fin_unsent):
            self._end_probes()
            return
        if self.probes_tstamp < 0:
            self.probes_tstamp = now
        elif self.user_timeout and now - self.probes_tstamp >= self.user_timeout:
            self._fail(errno.ETIMEDOUT, now)
            return
        if self.probes_out >= self.config.retries2:
            self._fail(errno.ETIMEDOUT, now)
            return
        room = self.snd_una + self.snd_wnd - self.snd_nxt
        if room > 0:
            # Linux tcp_write_wakeup: the window is open, so send held data now, with PSH.
            size = min(self.mss, self.unsent_bytes, room)
            if self._emit_new(now, self.snd_nxt, size, fin=fin_unsent or (self.fin_queued and
                                                                        self.snd_nxt + size == data_end),
                              force_psh=True):
                self._end_probes()          # in flight now: the RTO takes over
                return
            sent = False
        else:
            self.mib["UsertcpWindowProbes"] += 1
            sent = self._emit(now, self.snd_una - 1, ACK)
        self.probes_out += 1
        if sent:
            self.probe_backoff = min(self.probe_backoff + 1, self.config.retries2)
            when = min(self.rtt.rto * (1 << self.probe_backoff), self.config.rto_max)
        else:
            when = RESOURCE_PROBE_INTERVAL  # local congestion: no backoff (tcp_send_probe0)
        if self.user_timeout:
            # Linux tcp_clamp_probe0_to_user_timeout: never sleep past the user timeout.
            when = min(when, max(self.user_timeout - (now - self.probes_tstamp), TIMEOUT_MIN))
        self.probe_deadline = now + when

    def _end_probes(self) -> None:
        self.probes_out = 0
        self.probe_backoff = 0
        self.probes_tstamp = -1.0

    def _on_keepalive(self, now: float) -> None:
        """RFC 1122 §4.2.3.6 keepalive, Linux's probe form (SEQ = SND.UNA - 1, no data)."""
        if not self.keepalive or self.state not in SYNCHRONIZED or self.state is State.TIME_WAIT:
            return
        idle = now - self.last_rcv_time
        if self.probes_out == 0 and idle < self.keepalive_time:
            self.keepalive_deadline = self.last_rcv_time + self.keepalive_time
            return
        if self.probes_out >= self.keepalive_probes:
            self.mib["TcpExtTCPAbortOnTimeout"] += 1
            self._fail(errno.ETIMEDOUT, now, send_rst=True)
            return
        self.mib["UsertcpKeepaliveProbes"] += 1
        if self._emit(now, self.snd_una - 1, ACK):
            self.probes_out += 1
            self.keepalive_deadline = now + self.keepalive_intvl
        else:
            # Linux tcp_keepalive_timer: a probe lost to local congestion is not counted and
            # is retried after TCP_RESOURCE_PROBE_INTERVAL.
            self.keepalive_deadline = now + RESOURCE_PROBE_INTERVAL

    # ----------------------------------------------------------------- tcp_info

    def info(self) -> dict[str, int]:
        """A Linux ``struct tcp_info``-like view (field names as tcpi_*)."""
        rtt = self.rtt
        mss = max(self.mss, 1)
        opts = 0
        if self.ts_ok:
            opts |= TCPI_OPT_TIMESTAMPS
        if self.sack_ok:
            opts |= TCPI_OPT_SACK
        if self.ws_ok:
            opts |= TCPI_OPT_WSCALE
        if self.ecn_flags & ECN_OK:
            opts |= TCPI_OPT_ECN
        if self.ecn_flags & ECN_SEEN:
            opts |= TCPI_OPT_ECN_SEEN
        if self.syn_data_acked:
            opts |= TCPI_OPT_SYN_DATA
        out = {
            "tcpi_state": int(self.state),
            "tcpi_ca_state": self.ca_state,
            "tcpi_retransmits": self.retransmits,
            "tcpi_probes": self.probes_out,
            "tcpi_backoff": rtt.backoff,
            "tcpi_options": opts,
            "tcpi_snd_wscale": self.snd_wscale,
            "tcpi_rcv_wscale": self.rcv_wscale,
            "tcpi_rto": int(rtt.timeout * 1e6),
            "tcpi_ato": int(self.config.delack_min * 1e6),
            "tcpi_snd_mss": self.mss,
            "tcpi_rcv_mss": self.rcv_mss,
            "tcpi_unacked": (self.snd_nxt - self.snd_una + mss - 1) // mss,
            "tcpi_sacked": (self.sacked_bytes + mss - 1) // mss,
            "tcpi_lost": (self.lost_bytes + mss - 1) // mss,
            "tcpi_retrans": (self.retrans_bytes + mss - 1) // mss,
            "tcpi_pmtu": self.pmtu or self.config.mtu,
            "tcpi_advmss": (min(self.stack.mtu_mss(self.v6), self.user_mss or 65535)
                            - (12 if self.ts_ok else 0)),
            "tcpi_snd_ssthresh": min(self.cc.ssthresh // mss, 0x7FFFFFFF),
            "tcpi_snd_cwnd": self.cc.cwnd // mss,
            "tcpi_total_retrans": self.total_retrans,
            "tcpi_segs_out": self.segs_out,
            "tcpi_segs_in": self.segs_in,
            "tcpi_data_segs_in": self.data_segs_in,
            "tcpi_data_segs_out": self.data_segs_out,
            "tcpi_bytes_acked": self.bytes_acked,
            "tcpi_bytes_received": self.bytes_received,
            "tcpi_delivered": self.delivered_segs,
            "tcpi_notsent_bytes": self.unsent_bytes,
            "tcpi_snd_wnd": self.snd_wnd,
            "tcpi_reordering": self.reordering,
            "tcpi_rcv_space": self.rcvbuf_limit,
        }
        out.update(rtt.as_info())
        return out
