"""Socket options with Linux semantics: the one home of what ``setsockopt``/``getsockopt`` mean.

Both the Python socket API (:mod:`usertcp.api.sockets`) and the packetdrill system-call shim
(:mod:`usertcp.drill.syscalls`) keep one :class:`SocketOptions` per socket and call
:meth:`SocketOptions.set` / :meth:`SocketOptions.get` with Linux numbers; they differ only in
how they read arguments and report results. Semantics reproduced (as Linux ``sock_setsockopt``,
``do_tcp_setsockopt``, ``do_ip_setsockopt``):

- ``SO_SNDBUF``/``SO_RCVBUF`` are capped by ``net.core.wmem_max``/``rmem_max`` (not by
  ``tcp_wmem``/``tcp_rmem``), doubled (``sk_sndbuf`` counts skb overhead too), raised to the
  minimum, and lock autotuning; ``SO_SNDBUFFORCE``/``SO_RCVBUFFORCE`` skip the cap and need
  root (CAP_NET_ADMIN, EPERM otherwise); ``getsockopt`` reports the buffer as it is now.
- Options set before ``listen()`` are inherited by accepted sockets (``sk_clone_lock``): the
  connection attributes go to ``Listener.options``.
- A pending socket error is reported once (``sock_error``): :func:`take_error`.
- ``SO_ZEROCOPY`` allows ``MSG_ZEROCOPY`` sends; ``SO_TIMESTAMPING`` validates its flags as
  ``sock_set_timestamping`` and keeps them on the connection's error queue
  (:mod:`usertcp.tcp.timestamping`); ``TCP_NOTSENT_LOWAT`` bounds the unsent bytes a writer may
  queue (``tcp_stream_memory_free``) and wakes writers when set (``sk_write_space``).
"""

from __future__ import annotations

import errno
import os
import struct
from enum import IntEnum
from typing import Any, Final

from usertcp.api.constants import (
    IP_FREEBIND,
    IP_MTU,
    IP_MTU_DISCOVER,
    IP_RECVERR,
    IP_TOS,
    IPPROTO_IP,
    IPPROTO_IPV6,
    IPPROTO_TCP,
    IPV6_MTU,
    IPV6_MTU_DISCOVER,
    IPV6_RECVERR,
    SO_ACCEPTCONN,
    SO_ERROR,
    SO_KEEPALIVE,
    SO_LINGER,
    SO_MARK,
    SO_OOBINLINE,
    SO_RCVBUF,
    SO_RCVBUFFORCE,
    SO_REUSEADDR,
    SO_REUSEPORT,
    SO_SNDBUF,
    SO_SNDBUFFORCE,
    SO_TIMESTAMPING,
    SO_TYPE,
    SO_ZEROCOPY,
    SOCK_STREAM,
    SOL_SOCKET,
    TCP_CONGESTION,
    TCP_CORK,
    TCP_FASTOPEN,
    TCP_FASTOPEN_CONNECT,
    TCP_FASTOPEN_KEY,
    TCP_FASTOPEN_NO_COOKIE,
    TCP_INFO,
    TCP_INQ,
    TCP_KEEPCNT,
    TCP_KEEPIDLE,
    TCP_KEEPINTVL,
    TCP_MAXSEG,
    TCP_MD5SIG,
    TCP_MD5SIG_EXT,
    TCP_NODELAY,
    TCP_NOTSENT_LOWAT,
    TCP_PRELOAD,
    TCP_SYNCNT,
    TCP_USER_TIMEOUT,
    os_error,
)
from usertcp.tcp.config import TFO_CLIENT_ENABLE
from usertcp.tcp.congestion import create_congestion_control
from usertcp.tcp.connection import Connection, State
from usertcp.tcp.md5sig import Md5Keys, parse_tcp_md5sig
from usertcp.tcp.stack import Listener, StackConfig
from usertcp.tcp.timestamping import (
    SO_TIMESTAMP_OLD,
    SO_TIMESTAMPNS_OLD,
    SOF_TIMESTAMPING_RX_SOFTWARE,
    TxTimestamps,
    set_timestamping,
)

__all__ = ["Effect", "SocketOptions", "as_bytes_view", "int_value", "take_error", "tcp_info"]

TCP_MIN_MSS: Final = 88          # Linux TCP_MIN_MSS: smallest TCP_MAXSEG accepted
TCP_MAX_MSS: Final = 32767       # Linux MAX_TCP_WINDOW
TCP_MSS_DEFAULT: Final = 536     # what Linux reports for TCP_MAXSEG before a connection exists
SOCK_MIN_SNDBUF: Final = 4608    # Linux 2 * (2048 + sizeof(struct sk_buff)), as on x86-64
SOCK_MIN_RCVBUF: Final = 2304
INT_MAX: Final = 0x7FFFFFFF
MAX_TCP_KEEPIDLE: Final = 32767
MAX_TCP_KEEPINTVL: Final = 32767
MAX_TCP_KEEPCNT: Final = 127
MAX_TCP_SYNCNT: Final = 127
# Connection attributes behind the integer options: (level, optname) -> attribute name.
_KEEPALIVE_ATTRS: Final = {TCP_KEEPIDLE: "keepalive_time", TCP_KEEPINTVL: "keepalive_intvl",
                           TCP_KEEPCNT: "keepalive_probes"}


class Effect(IntEnum):
    """What a ``set`` did to a live connection, so the caller can let it act now."""

    NONE = 0      # nothing on a connection changed
    ATTR = 1      # a connection attribute changed (timers may need re-arming)
    PUSH = 2      # queued data may go now: TCP_NODELAY on, TCP_CORK off (tcp_push_pending_frames)


def take_error(conn: Connection) -> int:
    """Read and clear the connection's pending error: Linux reports ``sk_err`` once."""
    return conn.take_error()


def as_bytes_view(data: Any) -> memoryview:
    """A flat byte view of a bytes-like object (``str`` refused, as CPython does)."""
    if isinstance(data, str):
        raise TypeError("a bytes-like object is required, not 'str'")
    view = memoryview(data)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    return view


def _buffer_request(force: bool, value: int, ceiling: int) -> int:
    """Linux sk_setsockopt SO_{SND,RCV}BUF[FORCE]: the plain options take at most the
    net.core ceiling (a negative value, as a u32, is the ceiling); the FORCE ones need
    CAP_NET_ADMIN (root here) and take any non-negative value; all fit an int once doubled."""
    if force:
        if os.geteuid() != 0:
            raise os_error(errno.EPERM, "SO_*BUFFORCE needs CAP_NET_ADMIN")
        value = max(value, 0)
    else:
        value = min(value & 0xFFFFFFFF, ceiling)
    return min(value, INT_MAX // 2)


def int_value(value: Any) -> int:
    """An integer option value: an int, or at least 4 bytes of a C ``int``."""
    if isinstance(value, int):
        return int(value)
    if value is None:
        raise TypeError("option value must be an int or a bytes-like object")
    raw = as_bytes_view(value)
    if len(raw) < 4:
        raise os_error(errno.EINVAL, "an integer option needs at least 4 bytes")
    v: int = struct.unpack_from("i", raw)[0]
    return v


def tcp_info(conn: Connection | None, listener: Listener | None) -> dict[str, Any]:
    """Linux ``struct tcp_info`` as a dict of tcpi_* fields (plus the controller's name).

    For a listener, as Linux: tcpi_unacked = accept queue length, tcpi_sacked = backlog.
    """
    if conn is not None:
        info: dict[str, Any] = dict(conn.info())
        info["tcpi_ca_name"] = conn.cc.name
        return info
    if listener is not None and not listener.closed:
        return {"tcpi_state": int(State.LISTEN), "tcpi_unacked": len(listener.accept_queue),
                "tcpi_sacked": listener.backlog}
    return {"tcpi_state": int(State.CLOSED)}


class SocketOptions:
    """One socket's option state, applied to its connection or listener as they come to exist."""

    __slots__ = ("_cc_name", "config", "conn_attrs", "error", "freebind", "linger", "mark", "md5_keys",
                 "oob_inline", "rcvbuf", "rcvtstamp", "rcvtstampns", "recv_inq", "reuseaddr", "reuseport",
                 "sndbuf", "tfo_connect", "tfo_key", "tfo_no_cookie", "tfo_qlen", "tsflags", "zerocopy")

    def __init__(self, config: StackConfig) -> None:
        self.config = config
        # Connection attributes set by options: applied to the Connection when it exists, and
        # put in listener.options for accepted children (Linux inherits them).
        self.conn_attrs: dict[str, Any] = {}
        self.sndbuf: int | None = None      # the doubled values getsockopt reports
        self.rcvbuf: int | None = None
        self.linger: tuple[int, int] = (0, 0)
        self.reuseaddr = False
        self.reuseport = False
        self.tfo_qlen = 0                   # TCP_FASTOPEN, applied at listen()
        self.tfo_key: bytes | None = None
        self.tfo_no_cookie = False
        self.tfo_connect = False            # TCP_FASTOPEN_CONNECT: the SYN waits for the first write
        self.md5_keys: Md5Keys | None = None   # TCP_MD5SIG keys (per peer)
        self._cc_name: str | None = None
        self.recv_inq = False               # TCP_INQ: recvmsg reports the bytes left to read
        self.error = 0                      # a failed connect's error once its connection is gone
        self.zerocopy = False               # SO_ZEROCOPY: MSG_ZEROCOPY sends are honoured
        self.tsflags = 0                    # SO_TIMESTAMPING flags (sk_tsflags)
        self.rcvtstamp = False              # SO_TIMESTAMP / SO_TIMESTAMPNS: SOCK_RCVTSTAMP
        self.rcvtstampns = False            # SO_TIMESTAMPNS: SOCK_RCVTSTAMPNS
        self.mark = 0                       # SO_MARK: kept and reported, no policy routing here
        self.freebind = False               # IP_FREEBIND: bind() to an address not on the host
        self.oob_inline = False             # SO_OOBINLINE: urgent data stays in the stream

    @property
    def cc_name(self) -> str | None:
        """The TCP_CONGESTION chosen on this socket (None: the stack's default)."""
        return self._cc_name

    def inherit(self) -> SocketOptions:
        """The options of a socket accepted from this listener (Linux sk_clone_lock)."""
        child = SocketOptions(self.config)
        child.conn_attrs = dict(self.conn_attrs)
        child.sndbuf, child.rcvbuf, child.linger = self.sndbuf, self.rcvbuf, self.linger
        child.reuseaddr, child.reuseport = self.reuseaddr, self.reuseport   # sk_reuse is copied
        child.md5_keys = self.md5_keys
        child._cc_name = self._cc_name
        child.recv_inq = self.recv_inq      # tcp_sock is copied whole (tp->recvmsg_inq)
        child.zerocopy, child.tsflags, child.mark = self.zerocopy, self.tsflags, self.mark   # sock flags
        child.rcvtstamp, child.rcvtstampns = self.rcvtstamp, self.rcvtstampns
        child.freebind = self.freebind
        child.oob_inline = self.oob_inline  # sock flags are copied (sk_clone_lock)
        return child

    def apply_to_listener(self, lst: Listener) -> None:
        lst.options.update(self.conn_attrs)
        if self.md5_keys is not None:
            lst.md5_keys = self.md5_keys
        if self.tfo_key is not None:
            lst.set_fastopen_key(self.tfo_key)
        lst.fastopen_no_cookie = self.tfo_no_cookie
        if self.tfo_qlen:
            lst.fastopen_qlen = self.tfo_qlen

    def apply_to_connection(self, conn: Connection) -> None:
        conn.apply_options(self.conn_attrs)
        conn.set_md5_keys(self.md5_keys)
        if self._cc_name is not None:
            cc = create_congestion_control(self._cc_name, conn.mss, config=conn.config)
            conn.set_congestion_control(cc)
        if self.tsflags:
            self._timestamps(conn).flags = self.tsflags
        if self.oob_inline:
            conn.rx.urgent.set_inline(True)
        self._rx_stamps(conn)

    def _rx_stamps(self, conn: Connection | None) -> None:
        """net_enable_timestamp(): received data keeps its arrival time once SO_TIMESTAMP[NS]
        or SOF_TIMESTAMPING_RX_SOFTWARE asks for it."""
        if conn is not None and (self.rcvtstamp or self.tsflags & SOF_TIMESTAMPING_RX_SOFTWARE):
            conn.rcv_buf.enable_stamps()

    @staticmethod
    def _timestamps(conn: Connection) -> TxTimestamps:
        queue = conn.error_queue()
        if queue.tstamp is None:
            queue.tstamp = TxTimestamps()
        return queue.tstamp

    def adopt_child(self, conn: Connection) -> None:
        """An accepted child: TCP_CONGESTION of the listener applies before it sends data.

        listener.options can only copy attributes, and a controller object must not be shared.
        """
        if self.oob_inline:
            conn.rx.urgent.set_inline(True)
        if self._cc_name is not None and conn.cc.name != self._cc_name \
                and conn.snd_nxt <= conn.snd_una + 1:
            cc = create_congestion_control(self._cc_name, conn.mss, config=conn.config)
            conn.set_congestion_control(cc)

    # ------------------------------------------------------------------------- set

    def set(self, level: int, optname: int, value: Any, *, conn: Connection | None,
            listener: Listener | None) -> Effect:
        """``setsockopt``; raises OSError with Linux's errno on a bad value or option."""
        if level == SOL_SOCKET:
            return self._set_sol(optname, value, conn, listener)
        if level == IPPROTO_TCP:
            return self._set_tcp(optname, value, conn, listener)
        if level in (IPPROTO_IP, IPPROTO_IPV6):
            return self._set_ip(level, optname, value, conn, listener)
        raise os_error(errno.ENOPROTOOPT, f"option level {level} not supported")

    def _attr(self, name: str, value: Any, conn: Connection | None, listener: Listener | None) -> Effect:
        self.conn_attrs[name] = value
        if listener is not None:
            listener.options[name] = value
        if conn is None:
            return Effect.NONE
        conn.apply_options({name: value})
        return Effect.ATTR

    def _set_ip(self, level: int, optname: int, value: Any, conn: Connection | None,
                listener: Listener | None) -> Effect:
        v6 = level == IPPROTO_IPV6
        if optname == (IPV6_MTU_DISCOVER if v6 else IP_MTU_DISCOVER):
            mode = int_value(value)
            if not 0 <= mode <= 5:          # Linux: IP_PMTUDISC_DONT .. IP_PMTUDISC_OMIT
                raise os_error(errno.EINVAL, f"path-MTU discovery mode {mode} out of range")
            return self._attr("pmtudisc", mode, conn, listener)
        if optname == (IPV6_RECVERR if v6 else IP_RECVERR):
            return self._attr("recverr", bool(int_value(value)), conn, listener)
        if not v6 and optname == IP_FREEBIND:
            self.freebind = bool(int_value(value))
            return Effect.NONE
        if not v6 and optname == IP_TOS:
            # Linux ip_setsockopt: the ECN bits are kept by TCP, the rest goes in every packet.
            return self._attr("tos", int_value(value) & 0xFC, conn, listener)
        raise os_error(errno.ENOPROTOOPT, f"IP option {optname} not supported")

    def _set_sol(self, optname: int, value: Any, conn: Connection | None,
                 listener: Listener | None) -> Effect:
        if optname == SO_REUSEADDR:
            self.reuseaddr = bool(int_value(value))
            return Effect.NONE
        if optname == SO_REUSEPORT:
            self.reuseport = bool(int_value(value))
            return Effect.NONE
        if optname == SO_KEEPALIVE:
            return self._attr("keepalive", bool(int_value(value)), conn, listener)
        if optname == SO_OOBINLINE:
            self.oob_inline = bool(int_value(value))     # a sock flag (SOCK_URGINLINE)
            if conn is not None:
                conn.rx.urgent.set_inline(self.oob_inline)
            return Effect.NONE
        if optname in (SO_SNDBUF, SO_SNDBUFFORCE):
            # Doubled and locked against autotuning (SOCK_SNDBUF_LOCK); sk_write_space()
            # may then wake a writer.
            self.sndbuf = max(2 * _buffer_request(optname == SO_SNDBUFFORCE, int_value(value),
                                                  self.config.wmem_max), SOCK_MIN_SNDBUF)
            self._attr("sndbuf_limit", self.sndbuf, conn, listener)
            effect = self._attr("sndbuf_locked", True, conn, listener)
            if conn is not None:
                conn.write_space()
            return effect
        if optname in (SO_RCVBUF, SO_RCVBUFFORCE):
            self.rcvbuf = max(2 * _buffer_request(optname == SO_RCVBUFFORCE, int_value(value),
                                                  self.config.rmem_max), SOCK_MIN_RCVBUF)
            self._attr("rcvbuf_locked", True, conn, listener)      # SOCK_RCVBUF_LOCK
            return self._attr("rcvbuf_limit", self.rcvbuf, conn, listener)
        if optname == SO_LINGER:
            onoff, secs = _linger_value(value)
            self.linger = (1 if onoff else 0, max(secs, 0))
            return self._attr("linger_zero", bool(onoff) and secs == 0, conn, listener)
        if optname == SO_ZEROCOPY:
            v = int_value(value)
            if not 0 <= v <= 1:
                raise os_error(errno.EINVAL, "SO_ZEROCOPY takes 0 or 1")
            self.zerocopy = bool(v)
            return Effect.NONE
        if optname == SO_TIMESTAMPING:
            # sock_set_timestamping(): OPT_ID needs a connection (its key counts from SND.UNA);
            # the flags stay with the socket and go to the connection it gets.
            live = conn if conn is not None and conn.state is not State.CLOSED else None
            state = self._timestamps(live) if live is not None else TxTimestamps()
            state.flags = self.tsflags
            set_timestamping(live, state, int_value(value))
            self.tsflags = state.flags
            self._rx_stamps(conn)
            return Effect.NONE
        if optname in (SO_TIMESTAMP_OLD, SO_TIMESTAMPNS_OLD):
            # sock_set_timestamp(): on sets SOCK_RCVTSTAMP (and RCVTSTAMPNS for the ns form,
            # clearing it for the other), off clears both.
            on = bool(int_value(value))
            self.rcvtstamp = on
            self.rcvtstampns = on and optname == SO_TIMESTAMPNS_OLD
            self._rx_stamps(conn)
            return Effect.NONE
        if optname == SO_MARK:
            self.mark = int_value(value) & 0xFFFFFFFF
            return Effect.NONE
        if optname in (SO_ERROR, SO_TYPE, SO_ACCEPTCONN):
            raise os_error(errno.ENOPROTOOPT, "read-only socket option")
        raise os_error(errno.ENOPROTOOPT, f"SOL_SOCKET option {optname} not supported")

    def _set_tcp(self, optname: int, value: Any, conn: Connection | None,
                 listener: Listener | None) -> Effect:
        if optname == TCP_CONGESTION:
            self._set_congestion(value, conn)
            return Effect.NONE
        if optname == TCP_INFO:
            raise os_error(errno.ENOPROTOOPT, "TCP_INFO is read-only")
        if optname in (TCP_MD5SIG, TCP_MD5SIG_EXT):
            raw = bytes(as_bytes_view(value))
            addr, prefixlen, key = parse_tcp_md5sig(raw, ext=optname == TCP_MD5SIG_EXT)
            self.set_md5_key(addr, key, prefixlen, conn=conn, listener=listener)
            return Effect.NONE
        if optname == TCP_PRELOAD:
            self._replace_preload(bytes(as_bytes_view(value)), listener)
            return Effect.NONE
        if optname == TCP_FASTOPEN_KEY:
            key = bytes(as_bytes_view(value))
            if len(key) not in (16, 32):
                raise os_error(errno.EINVAL, "TCP_FASTOPEN_KEY takes 16 bytes (or 32: primary+backup)")
            self.tfo_key = key
            if listener is not None:
                listener.set_fastopen_key(key)
            return Effect.NONE
        v = int_value(value)
        if optname == TCP_INQ:
            if not 0 <= v <= 1:
                raise os_error(errno.EINVAL, "TCP_INQ takes 0 or 1")
            self.recv_inq = bool(v)
            return Effect.NONE
        if optname == TCP_NODELAY:
            effect = self._attr("nodelay", bool(v), conn, listener)
            return Effect.PUSH if v and effect else effect
        if optname == TCP_CORK:
            effect = self._attr("cork", bool(v), conn, listener)
            return Effect.PUSH if not v and effect else effect
        if optname == TCP_MAXSEG:
            if v and not TCP_MIN_MSS <= v <= TCP_MAX_MSS:
                raise os_error(errno.EINVAL, f"TCP_MAXSEG must be {TCP_MIN_MSS}-{TCP_MAX_MSS} or 0")
            return self._attr("user_mss", v, conn, listener)
        if optname in _KEEPALIVE_ATTRS:
            top = {TCP_KEEPIDLE: MAX_TCP_KEEPIDLE, TCP_KEEPINTVL: MAX_TCP_KEEPINTVL,
                   TCP_KEEPCNT: MAX_TCP_KEEPCNT}[optname]
            if not 1 <= v <= top:
                raise os_error(errno.EINVAL, f"value must be 1-{top}")
            return self._attr(_KEEPALIVE_ATTRS[optname], v if optname == TCP_KEEPCNT else float(v),
                              conn, listener)
        if optname == TCP_NOTSENT_LOWAT:
            # do_tcp_setsockopt: stored as u32, then sk->sk_write_space() may wake writers.
            effect = self._attr("notsent_lowat", v & 0xFFFFFFFF, conn, listener)
            if conn is not None:
                conn.write_space(nospace_only=False)
            return effect
        if optname == TCP_USER_TIMEOUT:
            if v < 0:
                raise os_error(errno.EINVAL, "TCP_USER_TIMEOUT must be >= 0 (milliseconds)")
            return self._attr("user_timeout", v / 1000.0, conn, listener)
        if optname == TCP_SYNCNT:      # icsk_syn_retries: SYN (and a listener's SYN-ACK) retries
            if not 1 <= v <= MAX_TCP_SYNCNT:
                raise os_error(errno.EINVAL, f"TCP_SYNCNT must be 1-{MAX_TCP_SYNCNT}")
            return self._attr("syn_retries_max", v, conn, listener)
        return self._set_fastopen(optname, v, conn, listener)

    def _set_fastopen(self, optname: int, v: int, conn: Connection | None,
                      listener: Listener | None) -> Effect:
        if optname == TCP_FASTOPEN:
            if v < 0:
                raise os_error(errno.EINVAL, "TCP_FASTOPEN queue length must be >= 0")
            self.tfo_qlen = v
            if listener is not None:
                listener.fastopen_qlen = v
        elif optname == TCP_FASTOPEN_CONNECT:
            # Linux do_tcp_setsockopt: 0 or 1, the client bit of tcp_fastopen on, a closed socket.
            if v not in (0, 1):
                raise os_error(errno.EINVAL, "TCP_FASTOPEN_CONNECT takes 0 or 1")
            if not self.config.fastopen & TFO_CLIENT_ENABLE:
                raise os_error(errno.EOPNOTSUPP, "TCP Fast Open (client) is off: net.ipv4.tcp_fastopen & 1")
            if conn is not None and conn.state is not State.CLOSED:
                raise os_error(errno.EINVAL, "TCP_FASTOPEN_CONNECT after connect")
            self.tfo_connect = bool(v)
        elif optname == TCP_FASTOPEN_NO_COOKIE:
            self.tfo_no_cookie = bool(v)
            if listener is not None:
                listener.fastopen_no_cookie = bool(v)
        else:
            raise os_error(errno.ENOPROTOOPT, f"IPPROTO_TCP option {optname} not supported")
        return Effect.NONE

    @staticmethod
    def _replace_preload(data: bytes, listener: Listener | None) -> None:
        """TCP_PRELOAD (usertcp only): replace a listener's preload in one step, empty clears
        it; MSG_PRELOAD writes append (docs/differences-from-linux-patches.md says why
        both exist)."""
        if listener is None or listener.closed:
            raise os_error(errno.EINVAL, "TCP_PRELOAD needs a listening socket")
        try:
            listener.set_preload(data, listener.stack.now)
        except OSError as exc:
            raise os_error(exc.errno or errno.EINVAL, str(exc)) from None

    def set_md5_key(self, addr: str | bytes, key: bytes, prefixlen: int | None, *,
                    conn: Connection | None, listener: Listener | None) -> None:
        """TCP_MD5SIG: sign everything to/from ``addr`` with ``key``; an empty key deletes."""
        if self.md5_keys is None:
            self.md5_keys = Md5Keys()
        if key:
            self.md5_keys.add(addr, key, prefixlen)
        elif not self.md5_keys.delete(addr, prefixlen):
            raise os_error(errno.ENOENT, "no TCP_MD5SIG key for that peer")
        if listener is not None:
            listener.md5_keys = self.md5_keys
        if conn is not None and conn.state is not State.CLOSED:
            conn.set_md5_keys(self.md5_keys)

    def _set_congestion(self, value: Any, conn: Connection | None) -> None:
        if isinstance(value, str):
            name = value
        else:
            name = bytes(as_bytes_view(value)).split(b"\0", 1)[0].decode("ascii", "replace")
        try:
            cc = create_congestion_control(name, conn.mss if conn is not None else TCP_MSS_DEFAULT,
                                           config=conn.config if conn is not None else None)
        except ValueError as e:
            raise os_error(errno.ENOENT, str(e)) from None
        if conn is not None:
            if conn.snd_nxt > conn.snd_una + (0 if conn.is_synchronized else 1):
                # The core's controllers are only valid when chosen before data flows.
                raise os_error(errno.EBUSY, "TCP_CONGESTION can't change while data is in flight")
            conn.set_congestion_control(cc)
        self._cc_name = cc.name

    # ------------------------------------------------------------------------- get

    def get(self, level: int, optname: int, *, conn: Connection | None,
            listener: Listener | None) -> int:
        """``getsockopt`` of an integer option (SO_LINGER, TCP_CONGESTION, TCP_INFO: see
        :attr:`linger`, :meth:`congestion_name`, :func:`tcp_info`)."""
        if level == SOL_SOCKET:
            return self._get_sol(optname, conn, listener)
        if level == IPPROTO_TCP:
            return self._get_tcp(optname, conn, listener)
        if level in (IPPROTO_IP, IPPROTO_IPV6):
            return self._get_ip(level, optname, conn)
        raise os_error(errno.ENOPROTOOPT, f"option level {level} not supported")

    def _opt(self, name: str, conn: Connection | None, default: Any) -> Any:
        if conn is not None:
            return getattr(conn, name)
        return self.conn_attrs.get(name, default)

    def _get_ip(self, level: int, optname: int, conn: Connection | None) -> int:
        v6 = level == IPPROTO_IPV6
        if optname == (IPV6_MTU if v6 else IP_MTU):
            # Linux: the path MTU of a connected socket, ENOTCONN otherwise.
            if conn is None or not conn.is_synchronized:
                raise os_error(errno.ENOTCONN, "IP_MTU needs a connected socket")
            return conn.pmtu or conn.config.mtu
        if optname == (IPV6_MTU_DISCOVER if v6 else IP_MTU_DISCOVER):
            return int(self._opt("pmtudisc", conn, 1))
        if optname == (IPV6_RECVERR if v6 else IP_RECVERR):
            return int(bool(self._opt("recverr", conn, False)))
        if not v6 and optname == IP_TOS:
            return int(self._opt("tos", conn, 0))
        if not v6 and optname == IP_FREEBIND:
            return int(self.freebind)
        raise os_error(errno.ENOPROTOOPT, f"IP option {optname} not supported")

    def _get_sol(self, optname: int, conn: Connection | None, listener: Listener | None) -> int:
        cfg = self.config
        if optname == SO_ERROR:
            if self.error:
                err, self.error = self.error, 0
                return err
            return take_error(conn) if conn is not None else 0
        if optname == SO_REUSEADDR:
            return int(self.reuseaddr)
        if optname == SO_REUSEPORT:
            return int(self.reuseport)
        if optname == SO_KEEPALIVE:
            return int(bool(self._opt("keepalive", conn, False)))
        if optname == SO_OOBINLINE:
            return int(self.oob_inline)
        if optname == SO_SNDBUF:
            # sk_sndbuf: what SO_SNDBUF set, else tcp_wmem[1] as autotuning grew it.
            if conn is not None:
                return int(conn.sndbuf_limit)
            return self.sndbuf if self.sndbuf is not None else cfg.wmem[1]
        if optname == SO_RCVBUF:
            # sk_rcvbuf: what SO_RCVBUF set, else tcp_rmem[1] as auto-tuning grew it.
            if conn is not None:
                return int(conn.rcvbuf_limit)
            return self.rcvbuf if self.rcvbuf is not None else cfg.rmem[1]
        if optname == SO_TYPE:
            return int(SOCK_STREAM)
        if optname == SO_ACCEPTCONN:
            return int(listener is not None and not listener.closed)
        if optname == SO_LINGER:
            return self.linger[0]
        if optname == SO_ZEROCOPY:
            return int(self.zerocopy)
        if optname == SO_TIMESTAMPING:
            return self.tsflags
        if optname == SO_TIMESTAMP_OLD:
            return int(self.rcvtstamp and not self.rcvtstampns)
        if optname == SO_TIMESTAMPNS_OLD:
            return int(self.rcvtstampns)
        if optname == SO_MARK:
            return self.mark
        raise os_error(errno.ENOPROTOOPT, f"SOL_SOCKET option {optname} not supported")

    def _get_tcp(self, optname: int, conn: Connection | None, listener: Listener | None) -> int:
        cfg = self.config
        if optname == TCP_NODELAY:
            return int(bool(self._opt("nodelay", conn, False)))
        if optname == TCP_CORK:
            return int(bool(self._opt("cork", conn, False)))
        if optname == TCP_MAXSEG:
            if conn is not None and conn.state not in (State.CLOSED, State.SYN_SENT):
                return int(conn.mss)       # tp->mss_cache: options excluded
            return int(self.conn_attrs.get("user_mss", 0)) or TCP_MSS_DEFAULT
        if optname in _KEEPALIVE_ATTRS:
            attr = _KEEPALIVE_ATTRS[optname]
            return int(self._opt(attr, conn, getattr(cfg, attr)))
        if optname == TCP_USER_TIMEOUT:
            return round(float(self._opt("user_timeout", conn, 0.0)) * 1000)
        if optname == TCP_SYNCNT:
            return int(self._opt("syn_retries_max", conn, 0)) or cfg.syn_retries
        if optname == TCP_FASTOPEN:
            return listener.fastopen_qlen if listener is not None else self.tfo_qlen
        if optname == TCP_FASTOPEN_CONNECT:
            return int(self.tfo_connect)
        if optname == TCP_INQ:
            return int(self.recv_inq)
        if optname == TCP_NOTSENT_LOWAT:
            lowat = int(self._opt("notsent_lowat", conn, 0))
            return lowat - (1 << 32) if lowat >= 1 << 31 else lowat   # an int, as Linux reports it
        if optname == TCP_FASTOPEN_NO_COOKIE:
            return int(self.tfo_no_cookie)
        raise os_error(errno.ENOPROTOOPT, f"IPPROTO_TCP option {optname} not supported")

    def congestion_name(self, conn: Connection | None) -> str:
        """TCP_CONGESTION: the controller of the connection, else the one chosen, else the default."""
        if conn is not None:
            return str(conn.cc.name)
        return self._cc_name or self.config.congestion_control


def _linger_value(value: Any) -> tuple[int, int]:
    """``struct linger`` bytes (or an ``(onoff, seconds)`` tuple) -> (onoff, seconds)."""
    if isinstance(value, tuple):
        onoff, secs = value
        return int(onoff), int(secs)
    raw = as_bytes_view(value)
    if len(raw) < 8:
        raise os_error(errno.EINVAL, "SO_LINGER needs struct linger: struct.pack('ii', on, secs)")
    onoff, secs = struct.unpack_from("ii", raw)
    return int(onoff), int(secs)
