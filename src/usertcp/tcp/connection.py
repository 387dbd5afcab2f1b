"""One TCP connection: the control block, the RFC 9293 §3.10 arrival steps and the user calls.

The parts of the connection live beside it, each an object the connection owns: opening
(``tcp/handshake.py``), loss recovery (``tcp/recovery.py``), what to send (``tcp/output.py``),
receiving data (``tcp/receive.py``), the timers (``tcp/timers.py``), closing on the
application's request (``tcp/closing.py``) and the state table (``tcp/states.py``). The
connection talks to its stack only through ``tcp/host.py``.

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
- RFC 3168 ECN and RFC 9768 Accurate ECN as Linux (``tcp_ecn``; ``tcp/accecn.py``, docs/ecn.md).
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from usertcp.native import mypyc_attr
from usertcp.tcp.appguard import notify
from usertcp.tcp.buffers import RecvBuffer, SendBuffer
from usertcp.tcp.challenge import OutOfWindowLimit
from usertcp.tcp.closing import abort_connection, close_connection, shutdown_connection
from usertcp.tcp.congestion import CongestionControl, create_congestion_control
from usertcp.tcp.errqueue import ErrorQueue
from usertcp.tcp.handshake import AccEcn, Handshake
from usertcp.tcp.info import tcp_info
from usertcp.tcp.md5sig import Md5Keys
from usertcp.tcp.mtu_probe import PathMtu
from usertcp.tcp.output import IP_PMTUDISC_WANT, MAX_WINDOW, Output
from usertcp.tcp.reassembly import ReassemblyQueue
from usertcp.tcp.receive import Receive
from usertcp.tcp.recovery import INF, Recovery
from usertcp.tcp.rtt import RttEstimator
from usertcp.tcp.seq import SEQ_MASK, seq_diff
from usertcp.tcp.states import CURR_ESTAB, RECEIVING, SENDING, SYNCHRONIZED, Effect, State, transition_effects
from usertcp.tcp.timers import Timers
from usertcp.tcp.timewait import TS_PAWS_IDLE, timewait_arrives
from usertcp.tcp.tso import size_goal
from usertcp.tcp.wakeup import KEY_ANY, KEY_WRITABLE, notsent_below_lowat
from usertcp.wire.segment import ACK, FIN, RST, SYN, URG, Buffer, Segment

if TYPE_CHECKING:
    from usertcp.tcp.config import StackConfig
    from usertcp.tcp.host import ConnectionHost
    from usertcp.tcp.stack import Listener



@mypyc_attr(native_class=False)      # mypyc compiles no subclass of this builtin exception
class ReceiveClaimedError(OSError):
    """A read of a receive side that a payload-object collector owns (the objects design's
    patch 1, an exclusive receive claim): the socket, asyncio and drill layers report EBUSY."""

    def __init__(self) -> None:
        super().__init__(errno.EBUSY, "the receive side is claimed by a collector")


class Connection:
    """A TCP control block (RFC 9293 §3.3.1) and its buffers."""

    def __init__(self, stack: ConnectionHost, local_ip: bytes, local_port: int, remote_ip: bytes,
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
        self.path = PathMtu(self)      # the cached route and RFC 4821 MTU probing
        self.closed_by_app = False     # close() called: the socket is orphaned
        self.read_shutdown = False
        self.write_shutdown = False
        self.fin_received = False
        self.passive = False
        self.was_time_wait = False
        self.timer_deadline = INF
        self.mib, self.hot = stack.counters.table, stack.counters.hot   # incremented by the packet path
        self.timers = Timers(self)
        self.recovery = Recovery(self, cfg.reordering)
        self.tx = Output(self)
        self.handshake = Handshake(self)
        self.rx = Receive(self, cfg.quickack_segments)
        self._init_send_space(cfg)
        self._init_receive_space(cfg)
        self._init_options(cfg)
        self._init_statistics()

    def _init_send_space(self, cfg: StackConfig) -> None:
        """Send sequence space, as offsets from ISS (RFC 9293 §3.3.1), and the send buffer."""
        self.iss = 0
        self.snd_una = 0
        self.snd_nxt = 0
        self.snd_max = 0               # highest offset ever sent (retransmissions rewind snd_nxt)
        self.snd_wnd = 0               # peer's window in bytes (already scaled)
        self.max_snd_wnd = 0
        self.snd_wl1 = 0               # offset in the *receive* space of the last window update
        self.snd_wl2 = 0
        self.fin_queued = False        # FIN to send after the data
        self.snd_buf = SendBuffer(self.stack.mem)
        self.sndbuf_limit = cfg.wmem[1]    # sk_sndbuf: bound on snd_buf.wmem_queued (skb truesize)
        self.sndbuf_locked = False         # SOCK_SNDBUF_LOCK: SO_SNDBUF set, no autotuning
        self.sock_nospace = False          # SOCK_NOSPACE: a writer ran out of send buffer
        self.sk_wakeups = 0                # wake-ups of the socket's wait queue (sleeping writers)
        self.write_pending = 0             # sk_write_pending: writers waiting for the handshake
        # Other entries of the wait queue (epoll items): called with each wake-up's poll key.
        self.wait_entries: list[Callable[[int], None]] = []
        self.notsent_lowat = 0             # TCP_NOTSENT_LOWAT (0: the sysctl's value)
        self.errqueue: ErrorQueue | None = None   # sk_error_queue, once zerocopy/timestamping is used
        self.total_retrans = 0
        self.syn_retries = 0

    def _init_receive_space(self, cfg: StackConfig) -> None:
        """Receive sequence space, the receive buffer and the reassembly queue."""
        self.irs = 0
        self.rcv_nxt = 0               # offset from IRS
        self.rcv_adv = 0               # right edge of the window we advertised (offset)
        self.rcv_buf = RecvBuffer(self.stack.mem)
        self.rcvbuf_limit = cfg.rmem[1]
        self.ooo = ReassemblyQueue(max_segments=cfg.reassembly_max_segments,
                                   max_bytes=max(cfg.rmem[2], self.rcvbuf_limit), acct=self.stack.mem)
        self.last_ack_sent = 0
        self.syn_window = 0
        self.rcv_ssthresh = min(self.rcvbuf_limit, MAX_WINDOW)   # Linux tp->rcv_ssthresh
        self.rcvbuf_locked = False     # SOCK_RCVBUF_LOCK: SO_RCVBUF set
        self.syn_retries_max = 0       # TCP_SYNCNT (Linux icsk_syn_retries), 0: the sysctls
        self.last_rcv_time = 0.0
        self.last_snd_time = 0.0
        self.accepted = False          # handed to the application by accept()
        self.rcv_mss = 536

    def _init_options(self, cfg: StackConfig) -> None:
        """Options negotiated at the handshake, then socket options."""
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
        self.md5_key: bytes | None = None
        self.md5_keys: Md5Keys | None = None   # TCP_MD5SIG keys set on this socket
        self.pred_flags = 0                    # 0: header prediction off
        self.ecn_flags = 0                     # ECN_* (Linux tp->ecn_flags)
        self.accecn: AccEcn | None = None      # Accurate ECN state (tcp/accecn.py), if asked for

        # Socket options.
        self.keepalive = False
        self.keepalive_time = cfg.keepalive_time
        self.keepalive_intvl = cfg.keepalive_intvl
        self.keepalive_probes = cfg.keepalive_probes
        self.user_timeout = 0.0        # TCP_USER_TIMEOUT in seconds, 0 = off
        self.linger_zero = False
        self.tos = 0                   # IP_TOS for every packet of this connection
        self.oow = OutOfWindowLimit()  # out-of-window ACKs' rate limit (tcp_invalid_ratelimit)
        self.rtt = RttEstimator(rto_initial=cfg.rto_initial, rto_min=cfg.rto_min, rto_max=cfg.rto_max)
        self.cc: CongestionControl = create_congestion_control(cfg.congestion_control, 536, config=cfg)

    def _init_statistics(self) -> None:
        """tcp_info counters, feature state and the callbacks of event-driven users."""
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
        return self.tx.nagle_off

    @nodelay.setter
    def nodelay(self, value: bool) -> None:
        # Linux do_tcp_setsockopt(TCP_NODELAY): setting it also pushes what is pending,
        # corked or not (TCP_NAGLE_PUSH).
        self.tx.nagle_off = bool(value)
        if value:
            self.tx.force_push = True

    @property
    def cork(self) -> bool:
        return self.tx.corked

    @cork.setter
    def cork(self, value: bool) -> None:
        if self.tx.corked and not value:
            self.tx.force_push = True      # uncorking pushes the pending partial frame
        self.tx.corked = bool(value)

    # ------------------------------------------------------------------ helpers

    def __repr__(self) -> str:
        return f"<Connection {self.stack.fmt_addr(self.local_ip)}:{self.local_port} -> " \
               f"{self.stack.fmt_addr(self.remote_ip)}:{self.remote_port} {self.state.name}>"

    @property
    def trace_id(self) -> str:
        fmt = self.stack.fmt_addr
        return f"{fmt(self.local_ip)}:{self.local_port}-{fmt(self.remote_ip)}:{self.remote_port}"

    def snd_off(self, seq: int) -> int:
        """Map a 32-bit ACK number onto the send offset space near snd_una."""
        return self.snd_una + seq_diff(seq, (self.iss + self.snd_una) & SEQ_MASK)

    def rcv_off(self, seq: int) -> int:
        return self.rcv_nxt + seq_diff(seq, (self.irs + self.rcv_nxt) & SEQ_MASK)

    @property
    def in_flight(self) -> int:
        """Bytes believed to be in the network (RFC 6675 pipe; Linux packets_in_flight)."""
        rec = self.recovery
        out = self.snd_nxt - self.snd_una - rec.sacked_bytes - rec.lost_bytes + rec.retrans_bytes
        if rec.reno_dupacks:
            out -= min(rec.reno_dupacks * self.mss, out)
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
        goal = size_goal(self)
        # tcp_stream_memory_free(): past TCP_NOTSENT_LOWAT only the tail skb may still grow.
        room = self.snd_buf.room(goal, self.sndbuf_limit) if notsent_below_lowat(self, 0) \
            else self.snd_buf.tail_room(goal)
        return min(room, self.stack.mem.send_room(self.snd_buf.wmem_queued, self.config.wmem[0]))

    @property
    def memory_free(self) -> bool:
        """Linux sk_stream_memory_free(): a write may open a new skb."""
        return self.snd_buf.wmem_queued < self.sndbuf_limit and notsent_below_lowat(self, 0)

    @property
    def writable(self) -> bool:
        """Linux __sk_stream_is_writeable(sk, 1): POLLOUT, and when a sleeping writer is woken
        (sk_stream_write_space): free space >= half of what is queued, unsent < lowat / 2."""
        q = self.snd_buf.wmem_queued
        return q < self.sndbuf_limit and self.sndbuf_limit - q >= q >> 1 and notsent_below_lowat(self, 1)

    def writer_waits(self, waiting: bool) -> None:
        """A writer starts (or stops) waiting for the handshake to end (Linux sk_write_pending):
        while one waits, the SYN-ACK's ACK is left for its data to carry."""
        self.write_pending += 1 if waiting else -1

    def write_space(self, *, nospace_only: bool = True) -> None:
        """Linux sk_stream_write_space(): wake writers once writable; after an ACK
        (tcp_check_space) only if one ran short (SOCK_NOSPACE), from a socket option always."""
        if (self.sock_nospace or not nospace_only) and self.writable:
            self.sock_nospace = False
            self.wake(KEY_WRITABLE)

    def error_queue(self) -> ErrorQueue:
        """The socket's error queue (zerocopy completions, transmit timestamps), made on first use."""
        if self.errqueue is None:
            self.errqueue = ErrorQueue(self)
        return self.errqueue

    def wake(self, key: int) -> None:
        """Wake the socket's wait queue: sleeping callers re-check, epoll items see ``key``."""
        self.sk_wakeups += 1
        for entry in self.wait_entries:
            entry(key)

    @property
    def is_synchronized(self) -> bool:
        return self.state in SYNCHRONIZED

    def set_state(self, state: State, now: float) -> None:
        """Take one transition of the state table (``tcp/states.py``) with its side effects;
        a transition the table does not list raises ``IllegalTransition``."""
        old = self.state
        if state is old:
            return
        effects = transition_effects(old, state)
        self.state = state
        was = old in CURR_ESTAB
        now_in = state in CURR_ESTAB
        if now_in and not was:
            self.mib["TcpCurrEstab"] += 1
        elif was and not now_in:
            self.mib["TcpCurrEstab"] -= 1
        self.wake(KEY_ANY)               # sk_state_change() wakes every sleeper
        if effects & Effect.OPENED:
            self.mib["TcpActiveOpens" if not self.passive else "TcpPassiveOpens"] += 1
            if not self.sndbuf_locked:
                self.tx.sndbuf_expand()    # tcp_init_buffer_space()
            self.delivered_segs += 1     # the SYN (or SYN-ACK) was delivered (Linux tp->delivered)
            self.rx.opened(now)          # tcp_finish_connect / tcp_create_openreq_child
        elif effects & Effect.ATTEMPT_FAILED:
            self.mib["TcpAttemptFails"] += 1
        self.stack.trace_state(self, old, state, now)
        if effects & Effect.TIME_WAIT:
            self._time_wait_entered(now)

    def compute_mss(self, mtu: int = 0) -> None:
        """Send MSS for the path MTU (or ``mtu``): RFC 9293 §3.7.1, Linux tcp_sync_mss."""
        mtu = mtu or self.path.mtu()
        mss = min(self.peer_mss, mtu - (60 if self.v6 else 40))
        if self.user_mss:
            mss = min(mss, self.user_mss)
        mss = max(mss, self.config.min_snd_mss)     # Linux __tcp_mtu_to_mss: before the options
        if self.ts_ok:
            mss -= 12
        if self.md5_key is not None:
            mss -= 20
        self.mss = self.path.sync_mss(max(mss, 8), mtu)   # 8: TCP_MIN_SND_MSS less all options
        self.cc.set_mss(self.mss)

    def pmtu_reduced(self, mtu: int) -> bool:
        """A path MTU report (RFC 1191, RFC 8201): if it is smaller, take it and recompute
        the MSS; False if it is not smaller than what is known."""
        if mtu >= (self.pmtu or self.config.mtu):
            return False
        self.pmtu = mtu
        self.compute_mss()
        return True

    def icmp_error(self, err: int) -> None:
        """An ICMP error for an established connection (RFC 1122 §4.2.3.9, Linux tcp_v4_err):
        hard with IP_RECVERR (reported and wakes the application), else kept as a soft error."""
        if not self.recverr:
            self.soft_error = err
            return
        self.error = err
        if self.on_readable is not None:
            notify(self, self.on_readable)
        if self.on_writable is not None:
            notify(self, self.on_writable)

    def inherit(self, options: dict[str, object], md5_keys: Md5Keys | None) -> None:
        """A passive child takes what its listening socket set (Linux sk_clone): the socket
        options, and the TCP-MD5 key for its peer (RFC 2385)."""
        self.apply_options(options)
        if md5_keys is not None:
            self.md5_keys = md5_keys
            self.md5_key = md5_keys.lookup(self.remote_ip)

    def apply_options(self, options: dict[str, object]) -> None:
        """Socket options the socket layer keeps by attribute name (TCP_NODELAY, keepalive...)."""
        for name, value in options.items():
            setattr(self, name, value)

    def set_md5_keys(self, keys: Md5Keys | None) -> None:
        """TCP_MD5SIG: the socket's key list (the key for this peer is looked up at open)."""
        self.md5_keys = keys

    def set_congestion_control(self, cc: CongestionControl) -> None:
        """TCP_CONGESTION; the socket layer allows it only before data flows."""
        self.cc = cc

    def take_error(self) -> int:
        """Read and clear the pending socket error: Linux reports sk_err once (sock_error)."""
        err = self.error
        self.error = 0
        return err

    def note_nospace(self) -> None:
        """A writer is short of send buffer (Linux SOCK_NOSPACE): the ACK that makes the socket
        writable again wakes it (``write_space``), and ACKs may grow the buffer."""
        self.sock_nospace = True

    def mark_accepted(self, fastopen_child: bool) -> None:
        """accept() handed this connection to the application. A fast-open child reset in
        SYN_RECV stayed queued; Linux tcp_reset reports ECONNRESET on it."""
        self.accepted = True
        if fastopen_child and self.state is State.CLOSED and not self.error:
            self.error = errno.ECONNRESET

    # ----------------------------------------------------------- user commands

    def send(self, data: Buffer, now: float, *, more: bool = False, eor: bool = False,
             pinned: bool = False, tstamp: int = 0, regions: Sequence[int] = ()) -> int:
        """Queue what the send buffer takes of ``data`` (Linux tcp_sendmsg_locked); returns
        how many bytes were taken, 0 when a new skb is needed and none may be opened.
        ``pinned`` (MSG_ZEROCOPY) keeps a mutable buffer by reference until its completion, as
        frags of its ``regions``; ``tstamp``: SO_TIMESTAMPING (Output.write)."""
        if self.error:
            raise OSError(self.error, "connection failed")
        if self.write_shutdown or self.state not in SENDING:
            raise OSError(errno.EPIPE, "cannot send after shutdown")
        copied = self.tx.write(data, now, more, eor, pinned, tstamp, regions)
        if copied and self.is_synchronized:
            self.reschedule()      # the stack must learn the retransmission deadline
        return copied

    def queue_views(self, views: Sequence[Buffer]) -> int:
        """Append immutable buffers by reference without transmitting (the caller's event ends
        in ``output``); they count as a pushed write (PSH at their end)."""
        total = 0
        for v in views:
            self.snd_buf.append(v)
            total += len(v)
        self.tx.mark_pushed()
        return total

    def send_views(self, views: list[memoryview], now: float) -> int:
        """Queue immutable views by reference (payload objects): no copy, no limit check."""
        if self.write_shutdown or self.state not in SENDING:
            raise OSError(errno.EPIPE, "cannot send after shutdown")
        total = self.queue_views(views)
        self.tx.more_pending = False
        self.tx.mark_pushed()
        if self.is_synchronized:
            self.tx.run(now)
            self.reschedule()
        return total

    def options_changed(self, now: float) -> None:
        """Apply socket options set on a live connection (TCP_NODELAY, uncork, keepalive)."""
        if self.state is not State.CLOSED:
            self.tx.run(now)
            self.reschedule()

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
            self.rx.after_read(now)
        self.rx.update_prediction()

    def recv(self, n: int, now: float) -> bytes:
        if self.collector is not None:
            raise ReceiveClaimedError()
        data = self.rx.read(n)             # bounded by the urgent mark (tcp/urgent.py)
        if data:
            self.rx.after_read(now)
            self.rx.update_prediction()
        return data

    def recv_into(self, target: memoryview, now: float) -> int:
        if self.collector is not None:
            raise ReceiveClaimedError()
        n = self.rx.read_into(target)
        if n:
            self.rx.after_read(now)
            self.rx.update_prediction()
        return n

    def shutdown(self, how_read: bool, how_write: bool, now: float) -> None:
        """shutdown(2) of one or both directions (tcp/closing.py)."""
        shutdown_connection(self, how_read, how_write, now)

    def close(self, now: float) -> None:
        """RFC 9293 §3.10.4 CLOSE (tcp/closing.py)."""
        close_connection(self, now)

    def abort(self, now: float, error: int = 0) -> None:
        """RFC 9293 §3.10.5 ABORT; ``error`` is what the application's next call reports."""
        abort_connection(self, now, error)

    def close_now(self, now: float) -> None:
        if self.closed_by_app and self.state is not State.CLOSED:
            self.stack.orphan_count_add(-1)
        # Unsent data goes with the connection: give its memory back to the stack's account.
        if self.snd_buf.acct is not None:
            self.snd_buf.acct.used -= len(self.snd_buf)
            self.snd_buf.acct = None
        if self.closed_by_app:
            self.rcv_buf.detach_account()
        if self.errqueue is not None:
            self.errqueue.on_purge()       # tcp_write_queue_purge frees the zerocopy buffers
        self.set_state(State.CLOSED, now)
        self.stack.on_destroy(self, now)
        self.timers.rto_deadline = self.timers.delack_deadline = self.timers.probe_deadline = INF
        self.timers.keepalive_deadline = self.timers.time_wait_deadline = INF
        self.recovery.rtx.clear()
        self.ooo.clear()
        self.stack.remove(self)
        self.reschedule()
        # Wake event-driven users: a reset or a failure is news for readers and writers.
        if self.on_readable is not None:
            notify(self, self.on_readable)
        if self.on_writable is not None:
            notify(self, self.on_writable)

    def reset_by_peer(self, now: float) -> None:
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
        self.close_now(now)

    def fail(self, err: int, now: float, *, send_rst: bool = False) -> None:
        if err == errno.ETIMEDOUT:
            self.mib["TcpExtTCPAbortOnTimeout"] += 1
            # Linux tcp_write_err: the last ICMP soft error explains the timeout better.
            err = self.soft_error or err
        self.error = err
        if send_rst:
            self.tx.send_rst(now)
        self.close_now(now)

    # ------------------------------------------------------------------ input

    def segment_arrives(self, seg: Segment, now: float) -> None:
        """RFC 9293 §3.10.7: process one inbound segment for this connection."""
        self.segs_in += 1
        st = self.state
        if st is State.SYN_SENT:
            self.handshake.syn_sent_arrives(seg, now)
        elif st is State.TIME_WAIT:
            timewait_arrives(self, seg, now)
        else:
            self._synchronized_arrives(seg, now)
        if self.state is not State.CLOSED:
            self.tx.run(now)
            self.tx.check_space()
        self.reschedule()

    def ts_rtt_sample(self, ecr: int, now: float) -> None:
        sample = ((self.tx.tsval(now) - ecr) & SEQ_MASK) / 1000.0
        if 0 <= sample < 600:
            self.rtt.on_sample(max(sample, 0.0001))

    def _challenge_ack(self, now: float) -> None:
        """RFC 5961 §7: challenge ACKs, limited per connection, then by the stack's budget."""
        if not self.oow_ack_allowed(now):
            self.mib["TcpExtTCPACKSkippedChallenge"] += 1
        elif self.stack.challenge_ack_allowed(now):    # Linux counts no skip for the budget
            self.mib["TcpExtTCPChallengeACK"] += 1
            self.tx.send_ack(now)

    def oow_ack_allowed(self, now: float, seg: Segment | None = None) -> bool:
        """May an out-of-window ACK go now (tcp_oow_rate_limited, tcp/challenge.py)?"""
        return self.oow.allowed(now, self.config.invalid_ratelimit, seg)

    def _synchronized_arrives(self, seg: Segment, now: float) -> None:
        """RFC 9293 §3.10.7.4: SYN-RECEIVED and the synchronized states, step by step; each
        step returns True when it has dealt with the segment."""
        flags = seg.flags
        seg_off = self.rcv_off(seg.seq)
        if self.state is State.ESTABLISHED:
            self.hot.slow_path_segs += 1
        if not flags & (ACK | RST | SYN) and not (self.passive and self.state is State.SYN_RECEIVED):
            # Linux tcp_rcv_established / tcp_rcv_state_process: none of ACK, RST and SYN
            # (a bare FIN, data without ACK): dropped before any check, and unanswered.
            self.mib["SKB_DROP_REASON_TCP_FLAGS"] += 1
            return
        if self._before_sequence_check(seg, now) or self._sequence_step(seg, seg_off, now):
            return
        if flags & RST:
            self._rst_step(seg_off, now)         # second
        elif flags & SYN:
            self._syn_step(now)                  # third is obsolete; fourth
        elif not flags & ACK:
            self.mib["UsertcpNoAckDrops"] += 1
        elif not self._ack_step(seg, seg_off, now):
            self._text_step(seg, seg_off, now)

    def _before_sequence_check(self, seg: Segment, now: float) -> bool:
        """PAWS (RFC 7323 §5.3), before the sequence check (TIME-WAIT: tcp/timewait.py)."""
        flags = seg.flags
        if self.ts_ok and seg.ts_val >= 0 and not flags & RST:
            if seq_diff(seg.ts_val, self.ts_recent) < 0 and now - self.ts_recent_time < TS_PAWS_IDLE:
                self.mib["TcpExtPAWSEstab"] += 1
                self.mib["SKB_DROP_REASON_TCP_RFC7323_PAWS"] += 1
                if self.oow_ack_allowed(now, seg):
                    self.tx.send_ack(now)
                return True
        return False

    def _sequence_step(self, seg: Segment, seg_off: int, now: float) -> bool:
        """First: sequence acceptability (RFC 9293 §3.10.7.4 table), with the handshake and
        TIME-WAIT cases Linux handles before it."""
        flags = seg.flags
        st = self.state
        plen = len(seg.payload)
        if st is State.SYN_RECEIVED and self.handshake.syn_received_sequence(seg, now):
            return True
        seg_len = plen + (1 if flags & SYN else 0) + (1 if flags & FIN else 0)
        if self._acceptable(seg_off, seg_len, max(self.rcv_adv - self.rcv_nxt, 0)) or (
                seg_len == plen and seg_off + plen == self.rcv_nxt):   # tcp_sequence: data to rcv_wup
            return False
        mib = self.mib
        # Linux tcp_sequence (RCV.NXT standing in for rcv_wup, the last window update).
        mib["SKB_DROP_REASON_TCP_OLD_SEQUENCE" if seg_off + seg_len < self.rcv_nxt
            else "SKB_DROP_REASON_TCP_INVALID_SEQUENCE"] += 1
        if flags & RST:
            return True
        if flags & SYN:
            # tcp_validate_incoming: an out-of-window SYN is challenged like one in window.
            self._syn_challenge(now)
            return True
        mib["UsertcpOutOfWindow"] += 1
        if seg_off < self.rcv_nxt and plen:
            dsack = self.sack_ok and self.config.dsack
            mib["TcpExtTCPDSACKOldSent" if dsack else "UsertcpDupData"] += 1
            if dsack:
                self.rx.dsack = (seg_off, min(seg_off + plen, self.rcv_nxt))
        if self.oow_ack_allowed(now, seg):
            self.tx.send_ack(now)
        else:
            mib["TcpExtTCPACKSkippedSeq"] += 1
        return True

    def _rst_step(self, seg_off: int, now: float) -> None:
        """Second: RST (RFC 5961 §3.2): exactly RCV.NXT resets, elsewhere in the window challenges."""
        if seg_off != self.rcv_nxt:
            self.mib["SKB_DROP_REASON_TCP_RESET"] += 1
            self._challenge_ack(now)
            return
        st = self.state
        if st is State.SYN_RECEIVED and self.passive:
            self.stack.forget_embryonic(self)
            self.error = errno.ECONNRESET   # only a fast-open child is visible to an app
            self.close_now(now)
        else:
            self.reset_by_peer(now)

    def _syn_step(self, now: float) -> None:
        """Fourth: a SYN in a synchronized state (RFC 5961 §4): challenge ACK; a passive
        SYN-RECEIVED child is reset instead (Linux tcp_check_req)."""
        if self.state is State.SYN_RECEIVED and self.passive:
            self.stack.forget_embryonic(self)
            self.tx.send_rst(now)
            self.close_now(now)
            return
        self._syn_challenge(now)

    def _syn_challenge(self, now: float) -> None:
        """Linux tcp_validate_incoming's syn_challenge: counted (TCPSYNChallenge, TcpInErrs on
        the established path, SKB_DROP_REASON_TCP_INVALID_SYN), then a challenge ACK."""
        mib = self.mib
        if not (self.passive and self.state is State.SYN_RECEIVED):
            mib["TcpExtTCPSYNChallenge"] += 1
            mib["SKB_DROP_REASON_TCP_INVALID_SYN"] += 1
            if self.state is State.ESTABLISHED:
                mib["TcpInErrs"] += 1
        self._challenge_ack(now)

    def _ack_step(self, seg: Segment, seg_off: int, now: float) -> bool:
        """Fifth: the ACK field (RFC 9293 §3.10.7.4, RFC 5961 §5.2)."""
        ack_off = self.snd_off(seg.ack)
        if self.state is State.SYN_RECEIVED:
            if self.handshake.syn_received_ack(seg, ack_off, now):
                return True
        if ack_off > self.snd_max:
            # RFC 9293 / RFC 5961 §5.2: an ACK for data never sent.
            self.mib["UsertcpAckUnsent"] += 1
            self.mib["SKB_DROP_REASON_TCP_ACK_UNSENT_DATA"] += 1
            if self.oow_ack_allowed(now):
                self.tx.send_ack(now)
            return True
        if ack_off < self.snd_una - self.max_snd_wnd:
            self.mib["SKB_DROP_REASON_TCP_TOO_OLD_ACK"] += 1
            self._challenge_ack(now)
            return True
        # RFC 7323 §4.3: update ts_recent for a segment that covers last_ack_sent.
        if self.ts_ok and seg.ts_val >= 0 and seg_off <= self.last_ack_sent \
                and seq_diff(seg.ts_val, self.ts_recent) >= 0:
            self.rx.store_ts_recent(seg.ts_val, now)
        self.recovery.on_ack(seg, ack_off, seg_off, now)
        st = self.state
        return st is State.CLOSED or st is State.TIME_WAIT

    def _text_step(self, seg: Segment, seg_off: int, now: float) -> None:
        """Sixth (URG), seventh (data) and eighth (FIN) steps."""
        mib = self.mib
        flags = seg.flags
        plen = len(seg.payload)
        if flags & URG or self.rx.urgent.held:
            self.rx.urgent.on_segment(self, seg, seg_off)   # tcp_urg (tcp/urgent.py)
        if not plen and not flags & FIN:
            return
        if self.state not in RECEIVING:
            if plen:
                mib["UsertcpDataAfterFin"] += 1
            return
        if self.closed_by_app and plen and seg_off + plen > self.rcv_nxt:
            # Linux: data for a closed (orphaned) socket resets it (TCPAbortOnData). The reset
            # is built from the segment, as for no socket (tcp_done, then tcp_v4_send_reset).
            mib["TcpExtTCPAbortOnData"] += 1
            self.close_now(now)
            self.stack.send_reset_for(seg, now, self.md5_key)
            return
        self.rx.data_arrives(seg, seg_off, now)

    def update_send_window(self, seg_off: int, ack_off: int, win: int) -> None:
        """RFC 9293 §3.10.7.4: take the window from a newer segment (Linux tcp_may_update_window)."""
        if ack_off > self.snd_una or seg_off > self.snd_wl1 \
                or (seg_off == self.snd_wl1 and (win > self.snd_wnd or ack_off == self.snd_wl2)):
            if win != self.snd_wnd:
                self.snd_wnd = win
                if win > self.max_snd_wnd:
                    self.max_snd_wnd = win
            self.snd_wl1 = seg_off
            self.snd_wl2 = ack_off
            if win and self.timers.probe_deadline != INF:
                self.timers.probe_deadline = INF
                self.timers.probes_out = 0

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

    # ------------------------------------------------------------- ACK handling

    def fin_acked(self, now: float) -> None:
        if not self.fin_queued or self.snd_una < self.snd_buf.end + 2:
            return
        st = self.state
        if st is State.FIN_WAIT_1:
            self.set_state(State.FIN_WAIT_2, now)
            if self.closed_by_app:
                self.timers.time_wait_deadline = now + self.config.fin_timeout
        elif st is State.CLOSING:
            self.set_state(State.TIME_WAIT, now)
        elif st is State.LAST_ACK:
            self.close_now(now)

    def _time_wait_entered(self, now: float) -> None:
        """The TIME_WAIT effect of the state table: only the 2 MSL timer runs (RFC 9293 §3.10.7.4)."""
        self.timers.stop()
        self.recovery.rtx.clear()
        self.timers.time_wait_deadline = now + self.config.time_wait
        self.was_time_wait = True
        self.stack.on_time_wait(self)

    # ------------------------------------------------------------ data receive

    def fin_arrives(self, now: float) -> None:
        self.fin_received = True
        st = self.state
        if st is State.ESTABLISHED:
            self.set_state(State.CLOSE_WAIT, now)
        elif st is State.FIN_WAIT_1:
            # Our FIN is not acked: step five (ACK) already moved an acked one to FIN-WAIT-2,
            # so a FIN here crosses ours (Linux tcp_fin: FIN_WAIT1 -> CLOSING).
            self.set_state(State.CLOSING, now)
        elif st is State.FIN_WAIT_2:
            self.set_state(State.TIME_WAIT, now)

    # ------------------------------------------------------ timers, tcp_info

    def output(self, now: float) -> None:
        """Send what the windows allow (see ``tcp/output.py``)."""
        self.tx.run(now)

    def next_deadline(self) -> float:
        return self.timers.next_deadline()

    def timer_fires(self, deadline: float, now: float) -> None:
        """The stack's timer entry for ``deadline`` is due: run the timers if it is still the
        deadline this connection asked for (a rescheduled one leaves a stale entry behind)."""
        if deadline != self.timer_deadline or self.state is State.CLOSED:
            return
        self.timer_deadline = INF
        self.timers.handle(now)

    def reschedule(self) -> None:
        self.rx.update_prediction()
        d = self.timers.next_deadline() if self.state is not State.CLOSED else INF
        if d != self.timer_deadline:
            self.timer_deadline = d
            if d != INF:
                self.stack.schedule(self, d)

    def info(self, now: float | None = None) -> dict[str, int]:
        """A Linux ``struct tcp_info``-like view (``tcp/info.py``)."""
        return tcp_info(self, now)
