"""The stack: demultiplexes packets to connections and listeners, owns timers and output.

Sans-IO surface (the :class:`usertcp.net.endpoint.Endpoint` protocol):
``receive(packet, now)``, ``datagrams_to_send()``, ``get_timer()``, ``handle_timer(now)``.
Application-side calls (``listen``, ``connect``, ``Connection.send`` ...) take ``now`` too.
"""

from __future__ import annotations

import errno
import heapq
import ipaddress
from collections.abc import Callable, Iterable
from typing import Any, Final

from usertcp.tcp import fastopen, syncookies
from usertcp.tcp.appguard import notify_listener
from usertcp.tcp.buffers import MemAccount, truesize
from usertcp.tcp.challenge import ChallengeAckBudget
from usertcp.tcp.config import TFO_SERVER_ENABLE, TFO_SERVER_WO_SOCKOPT1, StackConfig
from usertcp.tcp.connection import Connection, State
from usertcp.tcp.cookies import IsnGenerator
from usertcp.tcp.counters import Counters
from usertcp.tcp.host import FeatureHooks
from usertcp.tcp.icmp_errors import icmp_arrives
from usertcp.tcp.martians import martian_reason
from usertcp.tcp.md5sig import Md5Keys
from usertcp.tcp.siphash import siphash24
from usertcp.wire.icmp import IPPROTO_ICMP, IPPROTO_ICMPV6, parse_icmp
from usertcp.wire.md5 import verify_segment_md5
from usertcp.wire.packet import build_packet, parse_packet
from usertcp.wire.predict import HP_MASK, checksums_ok, peek_tcp, predicted_options
from usertcp.wire.segment import ACK, FIN, RST, SYN, Buffer, DropPacket, NotTcp, Segment, TxPacket
from usertcp.wire.tcp import encode_options

EPHEMERAL_PORTS: Final = (32768, 60999)   # Linux ip_local_port_range


def pack_ip(addr: str | bytes | ipaddress.IPv4Address | ipaddress.IPv6Address) -> bytes:
    if isinstance(addr, bytes):
        if len(addr) not in (4, 16):
            raise ValueError("a packed address has 4 or 16 bytes")
        return addr
    return ipaddress.ip_address(addr).packed


class Listener:
    """A passive-open endpoint (RFC 9293 LISTEN) with its SYN and accept queues."""

    def __init__(self, stack: Stack, local_ip: bytes | None, port: int, backlog: int) -> None:
        self.stack = stack
        self.local_ip = local_ip          # None: any address of the stack
        self.port = port
        self.backlog = max(1, min(backlog, stack.config.somaxconn))
        self.accept_queue: list[Connection] = []
        self.embryonic: set[Connection] = set()
        self.closed = False
        # TCP Fast Open server (RFC 7413; see usertcp.tcp.fastopen).
        self._fastopen_qlen = 0           # TCP_FASTOPEN: max pending TFO children (fastopenq.max_qlen)
        self.fastopen_no_cookie = False   # TCP_FASTOPEN_NO_COOKIE
        self.fastopen_key: bytes | None = None          # TCP_FASTOPEN_KEY (None: the sysctl key)
        self.fastopen_backup_key: bytes | None = None
        self.tfo_children: set[Connection] = set()      # TFO children, accepted before the 3rd ACK
        self.preload: bytes = b""         # MSG_PRELOAD: sent on every later passive connection
        self.options: dict[str, Any] = {}  # socket options inherited by children
        self.on_accept_ready: Callable[[Listener], None] | None = None
        self.md5_keys: Md5Keys | None = None   # TCP_MD5SIG on the listening socket
        self.family: int | None = None         # 4 or 6: only SYNs of that IP version (AF_INET)
        self.child_init: Callable[[Connection], None] | None = None   # per-child setup (e.g. cc)
        # Time of the last SYN-queue overflow (Linux rx_opt.ts_recent_stamp of the listener,
        # set by tcp_synq_overflow); None: never. SYN cookies are checked only shortly after.
        self.synq_overflow_time: float | None = None
        cfg = stack.config.fastopen
        if cfg & TFO_SERVER_WO_SOCKOPT1 and cfg & TFO_SERVER_ENABLE:
            fastopen.install(stack)       # inet_listen: the backlog is the TFO queue length

    def __repr__(self) -> str:
        addr = self.stack.fmt_addr(self.local_ip) if self.local_ip else "*"
        return f"<Listener {addr}:{self.port} queued={len(self.accept_queue)}>"

    # ---------------------------------------------------------- preload / TFO

    def append_preload(self, data: bytes, now: float) -> int:
        """send(MSG_PRELOAD): append to the data sent on every later passive connection.

        As the patch series (patch 1 fills the tail of the listener's write queue), successive
        writes append. At most ``fastopen.PRELOAD_MAX`` (64 KiB) in all, else EMSGSIZE and
        nothing is appended. Which connections see it: the snapshot rule in ``fastopen``.
        """
        if self.closed:
            raise OSError(errno.EPIPE, "listener closed")
        if not data:
            return 0                      # Linux tcp_sendmsg: a zero-length write does nothing
        if len(self.preload) + len(data) > fastopen.PRELOAD_MAX:
            raise OSError(errno.EMSGSIZE, f"preload is limited to {fastopen.PRELOAD_MAX} bytes")
        self.set_preload(self.preload + bytes(data), now)
        return len(data)

    def set_preload(self, data: bytes, now: float) -> int:
        """Replace the preload at once (setsockopt TCP_PRELOAD, a usertcp extension); empty
        clears it. At most ``fastopen.PRELOAD_MAX`` (64 KiB) bytes, else EMSGSIZE.
        Connections that already took their snapshot keep it.
        """
        if self.closed:
            raise OSError(errno.EPIPE, "listener closed")
        if len(data) > fastopen.PRELOAD_MAX:
            raise OSError(errno.EMSGSIZE, f"preload is limited to {fastopen.PRELOAD_MAX} bytes")
        self.preload = bytes(data)        # a new immutable object: snapshots share it by reference
        if data:
            fastopen.install(self.stack)
        return len(data)

    @property
    def fastopen_qlen(self) -> int:
        return self._fastopen_qlen

    @fastopen_qlen.setter
    def fastopen_qlen(self, value: int) -> None:
        """setsockopt(TCP_FASTOPEN): fastopen_queue_tune() caps it at somaxconn."""
        if value < 0:
            raise OSError(errno.EINVAL, "TCP_FASTOPEN queue length must be >= 0")
        self._fastopen_qlen = min(value, self.stack.config.somaxconn)
        if value:
            fastopen.install(self.stack)

    @property
    def fastopen_max_qlen(self) -> int:
        """The effective queue limit: the option, else the backlog with sysctl bit 0x400."""
        if self._fastopen_qlen:
            return self._fastopen_qlen
        if self.stack.config.fastopen & TFO_SERVER_WO_SOCKOPT1:
            return self.backlog
        return 0

    @property
    def fastopen_pending(self) -> int:
        """TFO children still in SYN-RECEIVED (Linux fastopenq.qlen)."""
        done = [c for c in self.tfo_children if c.state is not State.SYN_RECEIVED]
        for c in done:
            self.tfo_children.discard(c)
        return len(self.tfo_children)

    def set_fastopen_key(self, key: bytes) -> None:
        """setsockopt(TCP_FASTOPEN_KEY): 16 bytes (primary) or 32 (primary + backup)."""
        if len(key) not in (16, 32):
            raise OSError(errno.EINVAL, "TCP_FASTOPEN_KEY takes 16 or 32 bytes")
        self.fastopen_key = bytes(key[:16])
        self.fastopen_backup_key = bytes(key[16:]) if len(key) == 32 else None

    def fastopen_keys(self) -> tuple[bytes, bytes | None]:
        """(primary, backup): the listener's own key overrides the sysctl pair."""
        if self.fastopen_key is not None:
            return self.fastopen_key, self.fastopen_backup_key
        cfg = self.stack.config
        return cfg.fastopen_key, cfg.fastopen_backup_key

    def note_synq_overflow(self, now: float) -> None:
        """Linux tcp_synq_overflow(): a cookie SYN-ACK was sent for this listener."""
        self.synq_overflow_time = now

    # ---------------------------------------------------------------- queues

    def accept(self) -> Connection | None:
        """Pop one established connection, or None (the caller maps that to EAGAIN)."""
        if self.accept_queue:
            conn = self.accept_queue.pop(0)
            conn.mark_accepted(conn in self.tfo_children)
            return conn
        return None

    def close(self, now: float) -> None:
        """Closing a listener resets every connection not yet accepted (Linux inet_csk_listen_stop)."""
        self.closed = True
        self.preload = b""
        for conn in list(self.accept_queue) + list(self.embryonic):
            conn.abort(now)
        self.accept_queue.clear()
        self.embryonic.clear()
        self.tfo_children.clear()
        self.stack.remove_listener(self)


class Stack:
    """A TCP/IP host: addresses, connections, listeners, timers and counters."""

    def __init__(self, addresses: Iterable[str | bytes], config: StackConfig | None = None,
                 *, name: str = "") -> None:
        self.config = config or StackConfig()
        self.name = name
        self.addresses: list[bytes] = [pack_ip(a) for a in addresses]
        self.counters = Counters()
        self.connections: dict[tuple[bytes, int, bytes, int], Connection] = {}
        self.listeners: dict[tuple[bytes, int], Listener] = {}
        self._out: list[TxPacket] = []
        self._timers: list[tuple[float, int, Connection]] = []
        self._timer_seq = 0
        self._isn = IsnGenerator(self.config.isn_secret)
        self._next_port = EPHEMERAL_PORTS[0]
        self.challenge_budget = ChallengeAckBudget(self.config.isn_secret)
        self.app_faults: list[Connection] = []   # to reset: an application callback raised
        self.time_wait_count = 0
        self.orphans = 0                  # closed by the application, not yet CLOSED (tcp_orphan_count)
        self.mem = MemAccount(self.config.mem_limit, self.counters.table)   # Linux tcp_mem
        self.gso_max_size = 0             # > 0 when the link segments for us (TSO)
        self.tx_csum_offload = False
        self.tracer: Callable[[dict[str, Any]], None] | None = None
        self.hooks: FeatureHooks | None = None   # feature extensions (fast open, preload)
        # Set by a driver or link whose local queue can refuse a packet (Linux: a qdisc
        # answering NET_XMIT_DROP): called with each packet before it is queued for
        # ``datagrams_to_send``; True means refused, and TCP reacts to the local congestion.
        self.tx_refuse: Callable[[TxPacket], bool] | None = None
        self.now = 0.0

    # ------------------------------------------------------------ Endpoint API

    def receive(self, packet: Buffer, now: float, *, checksum_verified: bool = False,
                gso_size: int = 0) -> None:
        """Take one inbound IP packet. Every malformed packet is dropped and counted.

        ``gso_size``: the packet is a GRO aggregate of segments of that size (the device's
        virtio_net_hdr, Linux tcp_gro_receive); TCP takes it as one segment."""
        self._receive(packet, now, checksum_verified, gso_size)
        if self.app_faults:
            self.reset_app_faults(now)

    def _receive(self, packet: Buffer, now: float, checksum_verified: bool, gso_size: int) -> None:
        self.now = now
        known: Connection | None = None
        if self.config.header_prediction:
            handled, known = self._fast_receive(packet, now, checksum_verified, gso_size)
            if handled:
                return
        mib = self.counters.table
        try:
            seg = parse_packet(packet, verify_checksum=not checksum_verified)
        except NotTcp as other:
            if other.protocol == (IPPROTO_ICMPV6 if other.ip_version == 6 else IPPROTO_ICMP):
                self._icmp_receive(other, now)
            else:
                mib[other.counter] += 1
            return
        except DropPacket as drop:
            mib[drop.counter] += 1
            if drop.counter == "TcpInCsumErrors":
                mib["TcpInErrs"] += 1
            return
        seg.gso_size = gso_size
        self.counters.hot.in_segs += 1
        self.counters.hot.count_ecn_in(seg.ip_version == 4, seg.tos & 3)
        if seg.dst not in self.addresses:
            mib["IpInAddrErrors"] += 1
            return
        martian = martian_reason(seg.src, seg.dst, self.addresses)
        if martian is not None:
            self.count_martian(seg.ip_version, *martian)
            return
        # The connection the header peek found for this 4-tuple (same bytes the parser read):
        # a missed prediction does not pay the lookup twice.
        self.segment_arrives(seg, now, known)

    def count_martian(self, ip_version: int, reason: str, source: bool) -> None:
        """A martian address (tcp/martians.py): rt_cache in_martian_src/dst, Linux's drop
        reason, and ip6_rcv_core's header error."""
        mib = self.counters.table
        mib["UsertcpInMartianSrc" if source else "UsertcpInMartianDst"] += 1
        mib[reason] += 1
        if ip_version == 6:
            mib["Ip6InHdrErrors"] += 1

    def _icmp_receive(self, where: NotTcp, now: float) -> None:
        """ICMP/ICMPv6 for one of our addresses: validated and counted, then to TCP's handler."""
        mib = self.counters.table
        if where.dst not in self.addresses:
            mib["IpInAddrErrors"] += 1
            return
        martian = martian_reason(where.src, where.dst, self.addresses, tcp=False)
        if martian is not None:
            self.count_martian(where.ip_version, *martian)
            return
        try:
            msg = parse_icmp(where.mv, where.offset, where.end, where.ip_version, where.src, where.dst)
        except DropPacket as drop:
            mib[drop.counter] += 1
            if drop.counter.endswith("CsumErrors"):
                mib["Icmp6InErrors" if where.ip_version == 6 else "IcmpInErrors"] += 1
            return
        icmp_arrives(self, msg, now)

    def _fast_receive(self, packet: Buffer, now: float, checksum_verified: bool, gso_size: int
                      ) -> tuple[bool, Connection | None]:
        """Header prediction (Linux tcp_rcv_established): handle the expected segment cheaply.

        One comparison of the raw 4th header word (data offset, flags, window) with the
        connection's prediction word plus the expected sequence number picks the segment;
        only the timestamp (and MD5) option at its canonical place is decoded. Anything
        unusual returns (False, the connection found or None) and the full slow path runs,
        which also counts errors.
        """
        ip_len, tot, tos, src, dst, sport, dport, seq, ack, hp_word = peek_tcp(packet)
        if not ip_len:
            return False, None
        conn = self.connections.get((dst, dport, src, sport))
        if conn is None:
            return False, None
        pred = conn.pred_flags
        if not pred or (hp_word & HP_MASK) != pred or seq != (conn.irs + conn.rcv_nxt) & 0xFFFFFFFF:
            return False, conn
        # The view only for a predicted segment: a missed prediction (a window update, most
        # of a bulk sender's ACK stream) costs no more than the peek and the lookup.
        mv = packet if type(packet) is memoryview else memoryview(packet)
        if not checksums_ok(mv, ip_len, tot, checksum_verified):
            return False, conn
        opts = predicted_options(mv, ip_len, tot, hp_word, conn.md5_key, conn.ts_ok, src, dst)
        if opts is None:
            return False, conn
        start, ts_val, ts_ecr = opts
        # RFC 7323 §5.3 PAWS: an old timestamp goes to the slow path, which drops it.
        if ts_val >= 0 and (ts_val - conn.ts_recent) & 0x80000000:
            return False, conn
        una = (conn.iss + conn.snd_una) & 0xFFFFFFFF
        adv = (ack - una) & 0xFFFFFFFF
        if adv >= 0x80000000 or conn.snd_una + adv > conn.snd_max:
            return False, conn           # an old ACK or one beyond SND.NXT: the slow path decides
        plen = tot - start
        if plen and (plen > conn.rcv_adv - conn.rcv_nxt
                     or (self.mem.limit and self.mem.used + truesize(mv) > self.mem.limit)):
            return False, conn           # the slow path decides: a minimum, or a counted drop
        self._fast_dispatch(conn, mv, start, tot, adv, ts_val, ts_ecr, tos, ip_len == 20, now,
                            gso_size, (hp_word >> 16) & 0xFF)
        return True, conn

    def _fast_dispatch(self, conn: Connection, mv: memoryview, start: int, tot: int, adv: int,
                       ts_val: int, ts_ecr: int, tos: int, v4: bool, now: float, gso_size: int,
                       flags: int) -> None:
        """Linux tcp_rcv_established's fast path takes every predicted segment with
        SND.UNA <= SEG.ACK <= SND.NXT: pure ACKs (advancing or duplicate) and in-order data
        (with or without an advancing ACK). The plain cases run the specialised routines; a
        duplicate ACK, or any segment while recovery or SACK state is held, gets the full
        ACK processing (``Receive.predicted``), as Linux's fast path calls tcp_ack."""
        hot = self.counters.hot
        hot.in_segs += 1
        hot.count_ecn_in(v4, tos & 3)
        if adv:
            hot.hp_acks += 1     # TcpExtTCPHPAcks: tcp_ack's fast branch (with FLAG_DATA for data too)
        if tot > start:
            hot.hp_hits += 1     # TcpExtTCPHPHits
        if not (adv or tot > start) or not conn.recovery.ack_state_plain:
            seg = parse_packet(mv, verify_checksum=False)
            seg.gso_size = gso_size
            conn.rx.predicted(seg, now)
        elif tot == start:
            conn.recovery.fast_ack(conn.snd_una + adv, ts_val, ts_ecr, now)
        elif adv:
            conn.rx.fast_data_ack(conn.snd_una + adv, mv[start:tot], ts_val, ts_ecr, now, tos & 3,
                                  gso_size, flags)
        else:
            conn.rx.fast_data(mv[start:tot], ts_val, ts_ecr, now, tos & 3, gso_size, flags)

    def datagrams_to_send(self) -> list[TxPacket]:
        out = self._out
        self._out = []
        return out

    def get_timer(self) -> float | None:
        timers = self._timers
        while timers:
            deadline, _, conn = timers[0]
            if conn.timer_deadline == deadline and conn.state is not State.CLOSED:
                return deadline
            heapq.heappop(timers)
        return None

    def timer_entries(self) -> list[tuple[float, Connection]]:
        """Every (deadline, connection) in the timer heap, stale entries included."""
        return [(deadline, conn) for deadline, _, conn in self._timers]

    def handle_timer(self, now: float) -> None:
        self.now = now
        timers = self._timers
        while timers and timers[0][0] <= now:
            deadline, _, conn = heapq.heappop(timers)
            conn.timer_fires(deadline, now)
        if self.app_faults:
            self.reset_app_faults(now)

    def app_failed(self, conn: Connection) -> None:
        """An application callback raised on ``conn`` (tcp/appguard.py): count it and reset
        the connection once the current event is processed."""
        self.counters.table["UsertcpAppCallbackErrors"] += 1
        if conn not in self.app_faults:
            self.app_faults.append(conn)

    def reset_app_faults(self, now: float) -> None:
        """Reset each connection whose application callback raised (ABORT, RFC 9293 §3.10.5)."""
        while self.app_faults:
            conn = self.app_faults.pop(0)
            # The failed application is not called on this connection again.
            conn.on_readable = conn.on_writable = None
            if conn.state is not State.CLOSED:
                conn.abort(now, errno.ECONNABORTED)

    # ------------------------------------------------------- used by Connection

    def output(self, pkt: TxPacket) -> bool:
        """Queue one packet for the link; False if ``tx_refuse`` refused it (counted).

        The caller learns of the refusal synchronously, as Linux's TCP does from
        ip_queue_xmit()'s NET_XMIT_DROP (tcp_transmit_skb returns > 0).
        """
        refuse = self.tx_refuse
        if refuse is not None and refuse(pkt):
            self.counters.table["UsertcpTxLocalDrops"] += 1
            return False
        self._out.append(pkt)
        return True

    def orphan_count_add(self, delta: int) -> int:
        """Connections closed by the application and not yet CLOSED (Linux tcp_orphan_count)."""
        self.orphans += delta
        return self.orphans

    def schedule(self, conn: Connection, deadline: float) -> None:
        self._timer_seq += 1
        heapq.heappush(self._timers, (deadline, self._timer_seq, conn))

    def mtu_mss(self, v6: bool) -> int:
        return self.config.mtu - (60 if v6 else 40)

    def new_isn(self, conn: Connection, now: float) -> int:
        return self._isn.isn(conn.local_ip, conn.local_port, conn.remote_ip, conn.remote_port, now)

    def ts_offset(self, conn: Connection) -> int:
        """Linux secure_tcp_ts_off: a keyed per-connection offset hides the host's clock."""
        if not self.config.random_ts_offset:
            return 0
        data = conn.local_ip + conn.remote_ip
        return siphash24(self.config.ts_secret, data) & 0xFFFFFFFF

    def challenge_ack_allowed(self, now: float) -> bool:
        """RFC 5961 §7: the stack-wide challenge-ACK budget (tcp/challenge.py)."""
        if self.challenge_budget.allow(now, self.config.challenge_ack_limit):
            return True
        self.counters.table["UsertcpChallengeACKBudgetSpent"] += 1
        return False

    def remove(self, conn: Connection) -> None:
        if self.connections.get(conn.key) is conn:
            del self.connections[conn.key]
            if conn.was_time_wait:
                self.time_wait_count -= 1
        if conn.listener is not None:
            # A reset child still in the accept queue stays there: accept() returns it and
            # the first call on it reports the error.
            conn.listener.embryonic.discard(conn)

    def on_time_wait(self, conn: Connection) -> None:
        self.time_wait_count += 1
        if self.time_wait_count > self.config.max_time_wait:
            self.counters.table["TcpExtTCPTimeWaitOverflow"] += 1
            conn.close_now(self.now)

    def trace_state(self, conn: Connection, old: State, new: State, now: float) -> None:
        if self.tracer is not None:
            self.trace(conn, "tcp:state_updated", {"old": old.name, "new": new.name}, now)

    def trace(self, conn: Connection, name: str, data: dict[str, Any], now: float) -> None:
        """One qlog-style event (callers check ``self.tracer`` first, so tracing off costs nothing)."""
        if self.tracer is None:
            return
        data["conn"] = conn.trace_id
        self.tracer({"time": now, "name": name, "data": data})

    @staticmethod
    def fmt_addr(addr: bytes | None) -> str:
        if addr is None:
            return "*"
        return str(ipaddress.ip_address(addr))

    # Feature hooks: the defaults are plain RFC 9293 behaviour; the fast-open/preload
    # module installs an object with the same methods in ``self.hooks``.

    def fastopen_syn_option(self, conn: Connection, synack: bool, peer: Segment | None
                            ) -> tuple[bytes | None, bool]:
        if self.hooks is not None:
            return self.hooks.fastopen_syn_option(conn, synack, peer)
        return None, False

    def syn_payload(self, conn: Connection) -> list[memoryview]:
        if self.hooks is not None:
            return self.hooks.syn_payload(conn)
        return []

    def on_passive_syn(self, conn: Connection, seg: Segment, now: float) -> None:
        if self.hooks is not None:
            self.hooks.on_passive_syn(conn, seg, now)

    def on_synack(self, conn: Connection, seg: Segment, now: float) -> None:
        if self.hooks is not None:
            self.hooks.on_synack(conn, seg, now)

    def syn_state_output(self, conn: Connection, now: float) -> None:
        if self.hooks is not None:
            self.hooks.syn_state_output(conn, now)

    def syn_rto(self, conn: Connection, now: float) -> None:
        if self.hooks is not None:
            self.hooks.syn_rto(conn, now)

    def write_timeout(self, conn: Connection, expired: bool, now: float) -> None:
        if self.hooks is not None:
            self.hooks.write_timeout(conn, expired, now)

    def on_destroy(self, conn: Connection, now: float) -> None:
        if self.hooks is not None:
            self.hooks.on_destroy(conn, now)

    def on_established_passive(self, conn: Connection, now: float, ack_off: int = -1) -> None:
        lst = conn.listener
        queued = False
        if self.hooks is not None:
            # Fast open/preload: resend SYN-ACK data the 3rd ACK left out; True when the
            # child was already put in the accept queue at SYN time (a TFO child).
            queued = bool(self.hooks.on_established_passive(conn, now, ack_off))
        if lst is None:
            return
        lst.embryonic.discard(conn)
        if lst.closed and not conn.accepted:
            conn.abort(now)     # an unaccepted child dies with its listener (inet_csk_listen_stop)
            return
        if queued:
            return              # accepted (or waiting) since its SYN; do not queue it twice
        if conn not in lst.accept_queue:
            lst.accept_queue.append(conn)
        notify_listener(lst, conn)

    def forget_embryonic(self, conn: Connection) -> None:
        if conn.listener is not None:
            conn.listener.embryonic.discard(conn)

    def time_wait_reuse(self, conn: Connection, seg: Segment, now: float) -> bool:
        """RFC 9293 §3.6.1 / RFC 6191: a SYN may reopen a TIME_WAIT pair if it is newer."""
        newer = (conn.ts_ok and seg.ts_val >= 0 and ((seg.ts_val - conn.ts_recent) & 0xFFFFFFFF) < 1 << 31
                 and seg.ts_val != conn.ts_recent) or \
            (((seg.seq - (conn.irs + conn.rcv_nxt)) & 0xFFFFFFFF) < 1 << 31
             and seg.seq != (conn.irs + conn.rcv_nxt) & 0xFFFFFFFF)
        if not newer:
            return False
        listener = self._find_listener(seg.dst, seg.dport)
        if listener is None:
            return False
        conn.close_now(now)
        self.counters.table["TcpExtTWRecycled"] += 1
        self._listen_syn(listener, seg, now)
        return True

    # ------------------------------------------------------------ demultiplex

    def _md5_ok(self, seg: Segment, key: bytes | None) -> bool:
        """RFC 2385 §2.0 / Linux tcp_inbound_md5_hash: drop unsigned, unexpected or bad signatures."""
        if key is None:
            if seg.md5 is None:
                return True
            self.counters.table["TcpExtTCPMD5Unexpected"] += 1
            return False
        if seg.md5 is None:
            self.counters.table["TcpExtTCPMD5NotFound"] += 1
            return False
        if not verify_segment_md5(seg, key):
            self.counters.table["TcpExtTCPMD5Failure"] += 1
            return False
        return True

    def segment_arrives(self, seg: Segment, now: float, conn: Connection | None = None) -> None:
        """``conn``: the connection of the segment's 4-tuple when the caller looked it up."""
        if conn is None:
            conn = self.connections.get((seg.dst, seg.dport, seg.src, seg.sport))
        if conn is not None and (conn.md5_key is not None or seg.md5 is not None) \
                and not self._md5_ok(seg, conn.md5_key):
            return
        if conn is not None:
            if self.hooks is not None and not self.hooks.accept_segment(conn, seg, now):
                return
            conn.segment_arrives(seg, now)
            return
        listener = self._find_listener(seg.dst, seg.dport)
        if listener is not None and not listener.closed:
            lkey = listener.md5_keys.lookup(seg.src) if listener.md5_keys is not None else None
            if (lkey is not None or seg.md5 is not None) and not self._md5_ok(seg, lkey):
                return
            if self.hooks is not None and not self.hooks.accept_listener_segment(listener, seg, now):
                return
            flags = seg.flags
            if flags & RST:
                self.counters.table["SKB_DROP_REASON_TCP_RESET"] += 1
                return
            if flags & ACK:
                # RFC 9293 §3.10.7.2: an ACK to a listener gets a reset, unless it is the
                # 3rd ACK of a SYN cookie handshake (RFC 4987 §3.6, Linux cookie_v4_check).
                if syncookies.cookie_ack(self, listener, seg, now):
                    return
                self.send_reset_for(seg, now, lkey)
                return
            if flags & SYN and not flags & FIN:
                self._listen_syn(listener, seg, now)
            else:
                # Linux tcp_rcv_state_process in LISTEN: SYN+FIN, or no SYN, is discarded.
                self.counters.table["SKB_DROP_REASON_TCP_FLAGS"] += 1
            return
        self.counters.table["UsertcpNoSocket"] += 1
        self.send_reset_for(seg, now)

    def _find_listener(self, ip: bytes, port: int) -> Listener | None:
        lst = self.listeners.get((ip, port))
        if lst is None:
            lst = self.listeners.get((b"", port))
            if lst is not None and lst.family is not None and lst.family != (4 if len(ip) == 4 else 6):
                return None
        return lst

    def _listen_syn(self, listener: Listener, seg: Segment, now: float) -> None:
        cfg = self.config
        mib = self.counters.table
        if len(listener.accept_queue) >= listener.backlog:
            # Linux drops SYNs while the accept queue is full (ListenOverflows).
            mib["TcpExtListenOverflows"] += 1
            mib["TcpExtListenDrops"] += 1
            return
        if cfg.syncookies == 2 or len(listener.embryonic) >= syncookies.syn_queue_limit(self, listener):
            # SYN queue full (or tcp_syncookies=2): a stateless cookie SYN-ACK (RFC 4987 §3.6,
            # Linux tcp_conn_request/tcp_syn_flood_action), a TFO bypass, or a counted drop.
            verdict = syncookies.on_syn_overflow(self, listener, seg, now)
            if verdict is syncookies.SynVerdict.HANDLED:
                return
            if verdict is syncookies.SynVerdict.DROP:
                mib["TcpExtListenDrops"] += 1
                mib["UsertcpSynQueueDrops"] += 1
                return
        conn = self.new_child(listener, seg)
        self.connections[conn.key] = conn
        listener.embryonic.add(conn)
        conn.handshake.start_passive_open(seg, listener, now)

    def new_child(self, listener: Listener, seg: Segment) -> Connection:
        """A passive child for ``seg``'s 4-tuple carrying what the listening socket set (Linux
        sk_clone): socket options, the peer's TCP-MD5 key, and the listener's own setup hook."""
        conn = Connection(self, seg.dst, seg.dport, seg.src, seg.sport)
        conn.inherit(listener.options, listener.md5_keys)
        if listener.child_init is not None:
            listener.child_init(conn)
        return conn

    def send_reset_for(self, seg: Segment, now: float, md5_key: bytes | None = None) -> None:
        """RFC 9293 §3.10.7.1: the reset sent for a segment that belongs to no connection."""
        if seg.flags & RST:
            return
        if seg.md5 is not None and md5_key is None:
            # RFC 2385: never answer a signed segment with an unsigned reset (Linux does the same).
            self.counters.table["UsertcpMd5ResetSuppressed"] += 1
            return
        if self.hooks is not None and not self.hooks.may_send_reset(seg):
            return
        if seg.flags & ACK:
            seq, ack, flags = seg.ack, 0, RST
        else:
            seg_len = len(seg.payload) + (1 if seg.flags & SYN else 0) + (1 if seg.flags & FIN else 0)
            seq, ack, flags = 0, (seg.seq + seg_len) & 0xFFFFFFFF, RST | ACK
        pkt = build_packet(src=seg.dst, dst=seg.src, sport=seg.dport, dport=seg.sport, seq=seq, ack=ack,
                           flags=flags, window=0, ttl=self.config.ttl,
                           options=encode_options(md5=True) if md5_key is not None else b"", md5_key=md5_key)
        self.counters.table["TcpOutRsts"] += 1
        self.counters.hot.out_segs += 1
        self.output(pkt)

    # -------------------------------------------------------- application API

    def listen(self, port: int, *, address: str | bytes | None = None, backlog: int = 128) -> Listener:
        local = pack_ip(address) if address not in (None, "", "0.0.0.0", "::") else None
        if local is not None and local not in self.addresses:
            raise OSError(errno.EADDRNOTAVAIL, "address not on this stack")
        if not 0 < port < 65536:
            raise OSError(errno.EINVAL, "port out of range")
        key = (local or b"", port)
        if key in self.listeners or (local is None and any(k[1] == port for k in self.listeners)):
            raise OSError(errno.EADDRINUSE, "address already in use")
        lst = Listener(self, local, port, backlog)
        self.listeners[key] = lst
        return lst

    def remove_listener(self, lst: Listener) -> None:
        key = (lst.local_ip or b"", lst.port)
        if self.listeners.get(key) is lst:
            del self.listeners[key]

    def create_connection(self, remote: str | bytes, remote_port: int, *, local: str | bytes | None = None,
                          local_port: int = 0) -> Connection:
        """A CLOSED connection with its 4-tuple chosen; ``connect`` on it sends the SYN."""
        rip = pack_ip(remote)
        if local is None:
            lip = next((a for a in self.addresses if len(a) == len(rip)), None)
            if lip is None:
                raise OSError(errno.ENETUNREACH, "no local address of this family")
        else:
            lip = pack_ip(local)
            if lip not in self.addresses:
                raise OSError(errno.EADDRNOTAVAIL, "address not on this stack")
        if not 0 < remote_port < 65536:
            raise OSError(errno.EINVAL, "port out of range")
        if local_port == 0:
            local_port = self._ephemeral_port(lip, rip, remote_port)
        elif (lip, local_port, rip, remote_port) in self.connections:
            raise OSError(errno.EADDRINUSE, "address already in use")
        return Connection(self, lip, local_port, rip, remote_port)

    def connect(self, conn: Connection, now: float) -> None:
        if conn.key in self.connections:
            raise OSError(errno.EADDRINUSE, "address already in use")
        self.connections[conn.key] = conn
        conn.handshake.start_active_open(now)

    def _ephemeral_port(self, lip: bytes, rip: bytes, rport: int) -> int:
        lo, hi = EPHEMERAL_PORTS
        span = hi - lo + 1
        for _ in range(span):
            port = self._next_port
            self._next_port = lo + (port - lo + 1) % span
            if (lip, port, rip, rport) not in self.connections and (lip, port) not in self.listeners \
                    and (b"", port) not in self.listeners:
                return port
        raise OSError(errno.EADDRNOTAVAIL, "no free ephemeral port")
