"""A BSD-socket API over a sans-IO :class:`~usertcp.tcp.stack.Stack`, shaped like Python's ``socket``.

A :class:`Host` binds a stack to the driver that runs it (virtual or real time);
:class:`Socket` objects created from it behave like Linux TCP sockets: same errnos,
same option semantics (``SO_SNDBUF`` doubled, options set before ``listen()``
inherited by accepted sockets), same non-blocking ``connect`` dance.

Blocking model: every blocking call loops "under ``driver.lock``: try the
operation; if it would block, ``driver.wait_until(ready, remaining)``". A
virtual-time driver runs the whole simulation forward inside that wait, so
timeouts are in *virtual* seconds and the program stays single-threaded; a
blocking call that nothing in the simulation can ever satisfy (e.g. the peer is
served by the same thread) raises ``OSError(EDEADLK)`` instead of hanging. Use
non-blocking sockets and :func:`select` to run both ends of a connection from
one thread. A real-time driver runs events on its own I/O thread, so any number
of application threads may block at once.

Deviations from the OS, on purpose: ``fileno()`` is -1 (there is no kernel
object, so these sockets can't go into ``select.select``; use :func:`select`);
only IP literals are accepted as addresses (no name resolution);
``getsockopt(IPPROTO_TCP, TCP_INFO)`` returns the ``tcp_info()`` dict rather than
packed bytes; ``getsockopt(IPPROTO_TCP, TCP_CONGESTION)`` returns the name as bytes
(NUL-padded to ``buflen`` when one is given).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import ipaddress
import os
import socket as _pysocket
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from enum import IntEnum
from typing import Any, Final, Protocol, TypeVar, cast

import usertcp
from usertcp.tcp.congestion import create_congestion_control
from usertcp.tcp.connection import Connection, State
from usertcp.tcp.fastopen import cookie_cached, tfo_connect
from usertcp.tcp.md5sig import Md5Keys, build_tcp_md5sig, parse_tcp_md5sig
from usertcp.tcp.stack import EPHEMERAL_PORTS, Listener, Stack

__all__ = [
    "AF_INET",
    "AF_INET6",
    "IPPROTO_IP",
    "IPPROTO_IPV6",
    "IPPROTO_TCP",
    "IPV6_MTU",
    "IPV6_MTU_DISCOVER",
    "IPV6_RECVERR",
    "IP_MTU",
    "IP_MTU_DISCOVER",
    "IP_PMTUDISC_DO",
    "IP_PMTUDISC_DONT",
    "IP_PMTUDISC_PROBE",
    "IP_PMTUDISC_WANT",
    "IP_RECVERR",
    "MSG_DONTWAIT",
    "MSG_FASTOPEN",
    "MSG_MORE",
    "MSG_NOSIGNAL",
    "MSG_OOB",
    "MSG_PEEK",
    "MSG_PRELOAD",
    "MSG_WAITALL",
    "SHUT_RD",
    "SHUT_RDWR",
    "SHUT_WR",
    "SOCK_CLOEXEC",
    "SOCK_DGRAM",
    "SOCK_NONBLOCK",
    "SOCK_RAW",
    "SOCK_STREAM",
    "SOL_SOCKET",
    "SO_ACCEPTCONN",
    "SO_ERROR",
    "SO_KEEPALIVE",
    "SO_LINGER",
    "SO_RCVBUF",
    "SO_REUSEADDR",
    "SO_SNDBUF",
    "SO_TYPE",
    "TCP_CONGESTION",
    "TCP_CORK",
    "TCP_FASTOPEN",
    "TCP_FASTOPEN_CONNECT",
    "TCP_FASTOPEN_KEY",
    "TCP_FASTOPEN_NO_COOKIE",
    "TCP_INFO",
    "TCP_KEEPCNT",
    "TCP_KEEPIDLE",
    "TCP_KEEPINTVL",
    "TCP_MAXSEG",
    "TCP_MD5SIG",
    "TCP_NODELAY",
    "TCP_USER_TIMEOUT",
    "AddressFamily",
    "Host",
    "Socket",
    "SocketDriver",
    "SocketKind",
    "SocketType",
    "create_connection",
    "create_server",
    "error",
    "gaierror",
    "get_default_host",
    "getdefaulttimeout",
    "has_ipv6",
    "select",
    "set_default_host",
    "setdefaulttimeout",
    "socket",
    "timeout",
    "use_host",
]


class AddressFamily(IntEnum):
    AF_INET = 2
    AF_INET6 = 10


class SocketKind(IntEnum):
    SOCK_STREAM = 1
    SOCK_DGRAM = 2
    SOCK_RAW = 3


# Linux numbers throughout, so code written against Linux reads the same on any platform.
AF_INET: Final = AddressFamily.AF_INET
AF_INET6: Final = AddressFamily.AF_INET6
SOCK_STREAM: Final = SocketKind.SOCK_STREAM
SOCK_DGRAM: Final = SocketKind.SOCK_DGRAM
SOCK_RAW: Final = SocketKind.SOCK_RAW
SOCK_NONBLOCK: Final = 0o4000
SOCK_CLOEXEC: Final = 0o2000000
IPPROTO_IP: Final = 0
IPPROTO_TCP: Final = 6
IPPROTO_IPV6: Final = 41
SOL_SOCKET: Final = 1

SO_REUSEADDR: Final = 2
SO_TYPE: Final = 3
SO_ERROR: Final = 4
SO_SNDBUF: Final = 7
SO_RCVBUF: Final = 8
SO_KEEPALIVE: Final = 9
SO_LINGER: Final = 13
SO_ACCEPTCONN: Final = 30

TCP_NODELAY: Final = 1
TCP_MAXSEG: Final = 2
TCP_CORK: Final = 3
TCP_KEEPIDLE: Final = 4
TCP_KEEPINTVL: Final = 5
TCP_KEEPCNT: Final = 6
TCP_INFO: Final = 11
TCP_CONGESTION: Final = 13
TCP_USER_TIMEOUT: Final = 18
TCP_MD5SIG: Final = 14
TCP_FASTOPEN: Final = 23
TCP_FASTOPEN_CONNECT: Final = 30
TCP_FASTOPEN_KEY: Final = 33
TCP_FASTOPEN_NO_COOKIE: Final = 34
TCP_MD5SIG_EXT: Final = 32
# IP-level options TCP honours (Linux values): path-MTU discovery mode, hard ICMP errors, MTU.
IP_MTU_DISCOVER: Final = 10
IP_RECVERR: Final = 11
IP_MTU: Final = 14
IPV6_MTU_DISCOVER: Final = 23
IPV6_MTU: Final = 24
IPV6_RECVERR: Final = 25
IP_PMTUDISC_DONT: Final = 0
IP_PMTUDISC_WANT: Final = 1
IP_PMTUDISC_DO: Final = 2
IP_PMTUDISC_PROBE: Final = 3

MSG_OOB: Final = 0x1
MSG_PEEK: Final = 0x2
MSG_DONTWAIT: Final = 0x40
MSG_WAITALL: Final = 0x100
MSG_NOSIGNAL: Final = 0x4000
MSG_MORE: Final = 0x8000
MSG_FASTOPEN: Final = usertcp.MSG_FASTOPEN
MSG_PRELOAD: Final = usertcp.MSG_PRELOAD

SHUT_RD: Final = 0
SHUT_WR: Final = 1
SHUT_RDWR: Final = 2

has_ipv6: Final = True
error = OSError
timeout = TimeoutError
gaierror = _pysocket.gaierror

_SEND_FLAGS = MSG_DONTWAIT | MSG_NOSIGNAL | MSG_MORE | MSG_FASTOPEN | MSG_PRELOAD
_RECV_FLAGS = MSG_DONTWAIT | MSG_PEEK | MSG_WAITALL
_TCP_MIN_MSS = 88          # Linux TCP_MIN_MSS: smallest TCP_MAXSEG accepted
_TCP_MAX_MSS = 32767       # Linux MAX_TCP_WINDOW
_TCP_MSS_DEFAULT = 536     # what Linux reports for TCP_MAXSEG before a connection exists
_SOCK_MIN_SNDBUF = 4608    # Linux 2 * (2048 + sizeof(struct sk_buff)), as on x86-64
_SOCK_MIN_RCVBUF = 2304
_TCP_CA_NAME_MAX = 16
_CONNECTING = frozenset({State.SYN_SENT, State.SYN_RECEIVED})
# States that still owe the peer data or a FIN: SO_LINGER with a time waits for them to end.
_CLOSING = frozenset({State.FIN_WAIT_1, State.CLOSING, State.LAST_ACK})
# Re-attempts allowed after ``wait_until`` said "ready" without the clock moving: a guard
# against a ready predicate that disagrees with its operation, which would spin forever.
_MAX_SPURIOUS = 1000

_T = TypeVar("_T")


class _Blocked:
    """Returned by an operation's attempt when it would block."""


_BLOCK: Final = _Blocked()


def _oserror(code: int, detail: str | None = None) -> OSError:
    # OSError(errno, ...) instantiates the matching subclass (BrokenPipeError, ...).
    return OSError(code, detail or os.strerror(code))


def _take_error(conn: Connection) -> int:
    """Read and clear the connection's pending error: Linux reports sk_err once."""
    err = conn.error
    conn.error = 0
    return err


# ----------------------------------------------------------------------------- hosts


class SocketDriver(Protocol):
    """:class:`usertcp.net.endpoint.Driver` with ``lock`` read-only.

    A read-only member is covariant, so RealTimeDriver (whose lock is an RLock) fits;
    with the plain attribute of ``Driver`` mypy rejects it.
    """

    @property
    def lock(self) -> AbstractContextManager[object]: ...

    def now(self) -> float: ...

    def kick(self) -> None: ...

    def wait_until(self, predicate: Callable[[], bool], timeout: float | None) -> bool: ...


class Host:
    """A stack plus the driver that runs it: the factory for sockets of that stack.

    Also keeps the table of bound-but-not-yet-listening ports, which the stack itself
    doesn't know about, so ``bind()`` can report EADDRINUSE like Linux.
    """

    def __init__(self, stack: Stack, driver: SocketDriver, *, name: str | None = None) -> None:
        self.stack = stack
        self.driver = driver
        self.name = name or stack.name or "host"
        self._bound: dict[int, list[Socket]] = {}
        self._next_port = EPHEMERAL_PORTS[0]

    def __repr__(self) -> str:
        addrs = ", ".join(Stack.fmt_addr(a) for a in self.stack.addresses)
        return f"<usertcp.Host {self.name!r} [{addrs}]>"

    def socket(self, family: int = AF_INET, type: int = SOCK_STREAM, proto: int = 0) -> Socket:
        return Socket(family, type, proto, host=self)

    def now(self) -> float:
        return self.driver.now()

    # -- port table --------------------------------------------------------------

    def _ports_in_use(self) -> set[int]:
        used = {p for p, socks in self._bound.items() if socks}
        used.update(port for _, port in self.stack.listeners)
        used.update(key[1] for key in self.stack.connections)
        return used

    def _pick_port(self) -> int:
        lo, hi = EPHEMERAL_PORTS
        span = hi - lo + 1
        used = self._ports_in_use()
        for _ in range(span):
            port = self._next_port
            self._next_port = lo + (port - lo + 1) % span
            if port not in used:
                return port
        raise _oserror(errno.EADDRINUSE, "no free ephemeral port")

    def _check_bind(self, sock: Socket, ip: bytes | None, port: int) -> None:
        """Linux inet_csk_bind_conflict, simplified: overlapping addresses on one port
        conflict unless both sides set SO_REUSEADDR and neither listens."""
        def overlaps(other: bytes | None) -> bool:
            return ip is None or other is None or other == ip

        for other in self._bound.get(port, ()):
            if other is sock or not overlaps(other._bound_ip):
                continue
            if not (sock._reuseaddr and other._reuseaddr and other._listener is None):
                raise _oserror(errno.EADDRINUSE, "address already in use")
        for lip, lport in self.stack.listeners:
            if lport == port and overlaps(lip or None):
                raise _oserror(errno.EADDRINUSE, "address already in use")
        if not sock._reuseaddr:
            # Connections still using the port (accepted children, TIME_WAIT) block a
            # rebind until SO_REUSEADDR is set: the classic server-restart case.
            for lip, lport, _, _ in self.stack.connections:
                if lport == port and overlaps(lip):
                    raise _oserror(errno.EADDRINUSE, "address already in use")

    def _register(self, sock: Socket, port: int) -> None:
        self._bound.setdefault(port, []).append(sock)

    def _unregister(self, sock: Socket, port: int) -> None:
        socks = self._bound.get(port)
        if socks and sock in socks:
            socks.remove(sock)
            if not socks:
                del self._bound[port]


_default_host: Host | None = None
_context_host: contextvars.ContextVar[Host | None] = contextvars.ContextVar("usertcp_host", default=None)
_default_timeout: float | None = None


def set_default_host(host: Host | None) -> None:
    """The host module-level :func:`socket` uses when given none (process-wide)."""
    global _default_host
    _default_host = host


def get_default_host() -> Host | None:
    return _context_host.get() or _default_host


@contextlib.contextmanager
def use_host(host: Host) -> Iterator[Host]:
    """Make ``host`` the default for this thread/task within the ``with`` block (nests)."""
    token = _context_host.set(host)
    try:
        yield host
    finally:
        _context_host.reset(token)


def _resolve_host(host: Host | None) -> Host:
    h = host or get_default_host()
    if h is None:
        raise ValueError("no usertcp Host: pass host=, or call set_default_host() / use_host()")
    return h


def getdefaulttimeout() -> float | None:
    return _default_timeout


def setdefaulttimeout(value: float | None) -> None:
    global _default_timeout
    _default_timeout = _check_timeout(value)


def _check_timeout(value: float | None) -> float | None:
    if value is None:
        return None
    t = float(value)
    if t < 0 or t != t:
        raise ValueError("Timeout value out of range")
    return t


# ----------------------------------------------------------------------------- sockets


class Socket:
    """A TCP socket of a usertcp :class:`Host`; the methods mirror :class:`socket.socket`."""

    def __init__(self, family: int = AF_INET, type: int = SOCK_STREAM, proto: int = 0, *,
                 host: Host | None = None) -> None:
        if family not in (AF_INET, AF_INET6):
            raise _oserror(errno.EAFNOSUPPORT, f"address family {family} not supported (AF_INET/AF_INET6)")
        kind = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)
        if kind != SOCK_STREAM:
            raise _oserror(errno.ESOCKTNOSUPPORT, f"socket type {kind} not supported (only SOCK_STREAM)")
        if proto not in (0, IPPROTO_TCP):
            raise _oserror(errno.EPROTONOSUPPORT, f"protocol {proto} not supported (only TCP)")
        self._host = _resolve_host(host)
        self.family = AddressFamily(family)
        self.type = SocketKind(kind)
        self.proto = proto
        self._timeout: float | None = 0.0 if type & SOCK_NONBLOCK else _default_timeout
        self._closed = False
        self._conn: Connection | None = None
        self._listener: Listener | None = None
        self._connected = False         # Linux SS_CONNECTED (vs. SS_CONNECTING while _conn is new)
        self._bound_ip: bytes | None = None
        self._bound_port = 0            # non-zero: this socket holds an entry in the host's port table
        self._explicit_bind = False
        self._reuseaddr = False
        self._error = 0                 # a failed connect's error once its connection is gone
        self._md5_keys: Md5Keys | None = None   # TCP_MD5SIG keys (per peer), Linux semantics
        self._tfo_qlen = 0              # TCP_FASTOPEN, applied at listen()
        self._tfo_key: bytes | None = None
        self._tfo_no_cookie = False
        self._tfo_connect = False       # TCP_FASTOPEN_CONNECT: the SYN waits for the first write
        self._tfo_deferred = False      # connect() returned with the SYN not yet sent
        self._linger: tuple[int, int] = (0, 0)
        # Connection attributes set by options: applied to the Connection when it exists,
        # and put in listener.options for accepted children (Linux inherits them).
        self._conn_opts: dict[str, Any] = {}
        self._sndbuf: int | None = None   # the doubled values getsockopt reports
        self._rcvbuf: int | None = None
        self._cc_name: str | None = None

    # -- plumbing ----------------------------------------------------------------

    @property
    def host(self) -> Host:
        return self._host

    @property
    def connection(self) -> Connection | None:
        """The stack's Connection behind this socket (None before connect / for listeners)."""
        return self._conn

    @property
    def listener(self) -> Listener | None:
        return self._listener

    @property
    def timeout(self) -> float | None:
        return self._timeout

    def _check_open(self) -> None:
        if self._closed:
            raise _oserror(errno.EBADF, "Bad file descriptor (socket is closed)")

    def _run(self, attempt: Callable[[float], _T | _Blocked], ready: Callable[[], bool], *,
             nonblocking: bool = False, eagain: int = errno.EAGAIN) -> _T:
        """The blocking loop: try under the lock, else wait for ``ready`` (see module doc).

        ``ready()`` must be true exactly when ``attempt`` would no longer block.
        """
        drv = self._host.driver
        tmo = 0.0 if nonblocking else self._timeout
        deadline: float | None = None
        spurious = 0
        last_now = -1.0
        while True:
            with drv.lock:
                self._check_open()
                now = drv.now()
                result = attempt(now)
            if not isinstance(result, _Blocked):
                return result
            if tmo == 0.0:
                raise BlockingIOError(eagain, os.strerror(eagain))
            if now == last_now:
                spurious += 1
                if spurious > _MAX_SPURIOUS:
                    raise RuntimeError("usertcp socket: ready() and the operation disagree (bug)")
            else:
                spurious = 0
            last_now = now
            remaining: float | None = None
            if tmo is not None:
                if deadline is None:
                    deadline = now + tmo
                remaining = deadline - now
                if remaining <= 0:
                    raise TimeoutError("timed out")
            if not drv.wait_until(ready, remaining):
                if remaining is None:
                    raise _oserror(errno.EDEADLK, "blocking call can never complete: the driver has no "
                                                  "event left (single-threaded virtual time? use "
                                                  "non-blocking sockets and usertcp.socket.select)")
                raise TimeoutError("timed out")

    def _kick(self) -> None:
        self._host.driver.kick()

    # -- addresses ---------------------------------------------------------------

    def _parse_address(self, address: object, what: str) -> tuple[bytes | None, int]:
        """(host, port[, flowinfo, scope_id]) -> (packed ip or None for "any", port)."""
        v6 = self.family == AF_INET6
        if not isinstance(address, tuple) or not (len(address) == 2 or (v6 and 2 <= len(address) <= 4)):
            shape = "(host, port[, flowinfo, scope_id])" if v6 else "(host, port)"
            raise TypeError(f"{what}(): {self.family.name} address must be a tuple {shape}, "
                            f"not {address!r}")
        host_s, port = address[0], address[1]
        if not isinstance(host_s, str):
            raise TypeError(f"{what}(): host must be str, not {type(host_s).__name__}")
        if not isinstance(port, int) or isinstance(port, bool):
            raise TypeError(f"{what}(): port must be int, not {type(port).__name__}")
        if not 0 <= port <= 65535:
            raise ValueError(f"{what}(): port must be 0-65535")
        if v6 and len(address) >= 3 and not (isinstance(address[2], int) and 0 <= address[2] < 1 << 20):
            raise ValueError(f"{what}(): flowinfo must be 0-1048575")
        if host_s in ("", "0.0.0.0" if not v6 else "::"):
            return None, port
        try:
            ip = ipaddress.ip_address(host_s)
        except ValueError:
            raise gaierror(_pysocket.EAI_NONAME,
                           f"{host_s!r} is not an IP literal (usertcp does no name resolution)") from None
        if isinstance(ip, ipaddress.IPv6Address):
            if not v6:
                raise _oserror(errno.EAFNOSUPPORT, f"{host_s} is an IPv6 address on an AF_INET socket")
            if ip.ipv4_mapped is not None:
                return ip.ipv4_mapped.packed, port
            if ip.is_unspecified:
                return None, port
            return ip.packed, port
        if v6:
            raise _oserror(errno.EAFNOSUPPORT, f"{host_s} is an IPv4 address on an AF_INET6 socket "
                                               f"(use ::ffff:{host_s})")
        return ip.packed, port

    def _format(self, ip: bytes | None, port: int) -> tuple[Any, ...]:
        if self.family == AF_INET6:
            if ip is None:
                text = "::"
            elif len(ip) == 4:
                text = f"::ffff:{ipaddress.IPv4Address(ip)}"   # a v4 peer of a dual-stack socket
            else:
                text = str(ipaddress.IPv6Address(ip))
            return (text, port, 0, 0)
        if ip is None:
            return ("0.0.0.0", port)
        # A wildcard listener of the stack also takes IPv6 SYNs: show what arrived.
        return (str(ipaddress.ip_address(ip)), port)

    def getsockname(self) -> tuple[Any, ...]:
        self._check_open()
        if self._conn is not None:
            return self._format(self._conn.local_ip, self._conn.local_port)
        if self._listener is not None:
            return self._format(self._listener.local_ip, self._listener.port)
        return self._format(self._bound_ip, self._bound_port)

    def getpeername(self) -> tuple[Any, ...]:
        self._check_open()
        conn = self._conn
        if conn is None or conn.state in (State.CLOSED, State.SYN_SENT):
            raise _oserror(errno.ENOTCONN)
        return self._format(conn.remote_ip, conn.remote_port)

    def fileno(self) -> int:
        """Always -1: a usertcp socket has no kernel file descriptor."""
        return -1

    # -- bind / listen / accept --------------------------------------------------

    def bind(self, address: tuple[Any, ...]) -> None:
        ip, port = self._parse_address(address, "bind")
        with self._host.driver.lock:
            self._check_open()
            if self._bound_port or self._conn is not None or self._listener is not None:
                raise _oserror(errno.EINVAL, "socket is already bound")
            stack = self._host.stack
            if ip is not None and ip not in stack.addresses:
                raise _oserror(errno.EADDRNOTAVAIL, "address not on this host")
            if port == 0:
                port = self._host._pick_port()
            else:
                self._host._check_bind(self, ip, port)
            self._bound_ip = ip
            self._bound_port = port
            self._explicit_bind = True
            self._host._register(self, port)

    def _release_port(self) -> None:
        if self._bound_port:
            self._host._unregister(self, self._bound_port)

    def listen(self, backlog: int = 128) -> None:
        with self._host.driver.lock:
            self._check_open()
            if self._conn is not None:
                raise _oserror(errno.EINVAL, "listen() on a connected or connecting socket")
            backlog = max(backlog, 0)
            if self._listener is not None:
                # Linux allows listen() again to change the backlog.
                cap = self._host.stack.config.somaxconn
                self._listener.backlog = max(1, min(backlog, cap))
                return
            if not self._bound_port:
                self._bound_port = self._host._pick_port()
                self._host._register(self, self._bound_port)
            lst = self._host.stack.listen(self._bound_port, address=self._bound_ip, backlog=backlog)
            lst.options.update(self._conn_opts)
            lst.md5_keys = self._md5_keys
            if self._tfo_key is not None:
                lst.set_fastopen_key(self._tfo_key)
            if self._tfo_no_cookie:
                lst.fastopen_no_cookie = True
            if self._tfo_qlen:
                lst.fastopen_qlen = self._tfo_qlen
            self._listener = lst

    def accept(self) -> tuple[Socket, tuple[Any, ...]]:
        def attempt(now: float) -> Connection | _Blocked:
            lst = self._listener
            if lst is None or lst.closed:
                raise _oserror(errno.EINVAL, "accept() on a socket that is not listening")
            conn = lst.accept()
            return _BLOCK if conn is None else conn

        def ready() -> bool:
            lst = self._listener
            return lst is None or lst.closed or bool(lst.accept_queue)

        conn = self._run(attempt, ready)
        child = self._child(conn)
        return child, child._format(conn.remote_ip, conn.remote_port)

    def _child(self, conn: Connection) -> Socket:
        """Wrap an accepted connection; it carries the listener's options (Linux sk_clone)."""
        child = Socket(self.family, self.type, self.proto, host=self._host)
        child._conn = conn
        child._connected = True
        child._conn_opts = dict(self._conn_opts)
        child._sndbuf, child._rcvbuf, child._linger = self._sndbuf, self._rcvbuf, self._linger
        child._cc_name = self._cc_name
        if self._cc_name is not None and conn.cc.name != self._cc_name \
                and conn.snd_nxt <= conn.snd_una + 1:
            # listener.options can only copy attributes, and a controller object must not
            # be shared, so TCP_CONGESTION is applied here, before the child sends data.
            conn.cc = create_congestion_control(self._cc_name, conn.mss)
        return child

    # -- connect -----------------------------------------------------------------

    def connect(self, address: tuple[Any, ...]) -> None:
        self._connect(address, nonblocking=False)

    def connect_ex(self, address: tuple[Any, ...]) -> int:
        """connect() returning the errno instead of raising (0 on success)."""
        try:
            self._connect(address, nonblocking=False)
        except TimeoutError:
            return errno.EAGAIN
        except gaierror:
            raise
        except OSError as e:
            if e.errno is None:
                raise
            return e.errno
        return 0

    def _connect(self, address: tuple[Any, ...], *, nonblocking: bool) -> Connection:
        ip, port = self._parse_address(address, "connect")
        drv = self._host.driver
        with drv.lock:
            self._check_open()
            if self._listener is not None or self._connected:
                raise _oserror(errno.EISCONN)
            conn = self._conn
            if conn is None and self._tfo_connect and cookie_cached(self._host.stack, ip or b""):
                # Linux TCP_FASTOPEN_CONNECT: connect() returns at once; the SYN leaves
                # with the first write, carrying its data (tcp_fastopen_defer_connect).
                conn = self._start_connect(ip, port, drv.now(), defer=True)
                self._connected = True
                return conn
            if conn is None:
                conn = self._start_connect(ip, port, drv.now())
                if nonblocking or self._timeout == 0.0:
                    raise _oserror(errno.EINPROGRESS)
            elif conn.state in _CONNECTING and (nonblocking or self._timeout == 0.0):
                raise _oserror(errno.EALREADY)

        def attempt(now: float) -> Connection | _Blocked:
            c = self._conn
            if c is None:                      # failed and reset by another thread
                raise _oserror(errno.ECONNABORTED)
            if c.state in _CONNECTING:
                return _BLOCK
            if c.state is State.CLOSED:
                # Linux: report the error, then the socket may connect() again.
                err = _take_error(c) or self._error or errno.ECONNABORTED
                self._error = 0
                self._drop_failed_connection()
                raise _oserror(err)
            self._connected = True
            return c

        def ready() -> bool:
            c = self._conn
            return c is None or c.state not in _CONNECTING

        return self._run(attempt, ready, eagain=errno.EALREADY)

    def _start_connect(self, ip: bytes | None, port: int, now: float, *, defer: bool = False,
                       data: Any = None) -> Connection:
        if ip is None:
            raise _oserror(errno.EADDRNOTAVAIL, "cannot connect to the unspecified address")
        if port == 0:
            raise _oserror(errno.EADDRNOTAVAIL, "cannot connect to port 0")
        stack = self._host.stack
        if self._bound_ip is not None and len(self._bound_ip) != len(ip):
            raise _oserror(errno.EAFNOSUPPORT, "bound and remote addresses are of different families")
        local_port = self._bound_port or self._host._pick_port()
        conn = stack.create_connection(ip, port, local=self._bound_ip, local_port=local_port)
        self._apply_options(conn)
        if defer:
            self._tfo_deferred = True
        elif data is not None or self._tfo_connect:
            tfo_connect(conn, b"" if data is None else data, now)
        else:
            stack.connect(conn, now)
        if not self._bound_port:
            self._bound_port = local_port
            self._host._register(self, local_port)
        self._conn = conn
        self._kick()
        return conn

    def _drop_failed_connection(self) -> None:
        self._conn = None
        self._connected = False
        if not self._explicit_bind:
            self._release_port()
            self._bound_port = 0

    def _apply_options(self, conn: Connection) -> None:
        for name, value in self._conn_opts.items():
            setattr(conn, name, value)
        conn.md5_keys = self._md5_keys
        if self._cc_name is not None:
            conn.cc = create_congestion_control(self._cc_name, conn.mss)

    # -- send --------------------------------------------------------------------

    def send(self, data: Any, flags: int = 0) -> int:
        view = _as_bytes_view(data)
        if flags & ~_SEND_FLAGS:
            raise _oserror(errno.EOPNOTSUPP, f"unsupported send flags {flags & ~_SEND_FLAGS:#x}")
        if flags & MSG_PRELOAD:
            return self._preload(data, view)
        return self._send_some(data, view, flags)

    def _preload(self, data: Any, view: memoryview) -> int:
        with self._host.driver.lock:
            self._check_open()
            lst = self._listener
            if lst is None or lst.closed:
                raise _oserror(errno.EINVAL, "MSG_PRELOAD needs a listening socket")
            set_preload = getattr(lst, "set_preload", None)
            if set_preload is None:
                raise _oserror(errno.EOPNOTSUPP, "this stack's Listener has no set_preload()")
            set_preload(bytes(view), self._host.driver.now())
        self._kick()
        return len(view)

    def _send_some(self, data: Any, view: memoryview, flags: int) -> int:
        more = bool(flags & MSG_MORE)
        # bytes go to the stack by reference; anything mutable is copied by Connection.send.
        payload: Any = data if isinstance(data, bytes) else view

        def attempt(now: float) -> int | _Blocked:
            if self._tfo_deferred and self._conn is not None:
                self._tfo_deferred = False
                n = tfo_connect(self._conn, payload, now)
                self._kick()
                return n
            conn = self._writable_conn()
            if conn.state in _CONNECTING and not (conn.state is State.SYN_RECEIVED and conn.tfo is not None):
                return _BLOCK
            if conn.send_space <= 0 and len(view):
                return _BLOCK
            n = conn.send(payload, now, more=more)
            if conn.state is State.SYN_RECEIVED:
                conn.output(now)        # a fast-open child may send before the 3rd ACK (Linux)
            self._kick()
            return n

        return self._run(attempt, self._send_ready, nonblocking=bool(flags & MSG_DONTWAIT))

    def _writable_conn(self) -> Connection:
        """The connection to send on, or the error Linux tcp_sendmsg would return."""
        conn = self._conn
        if conn is None:
            raise _oserror(errno.EPIPE, "send on a socket that is not connected")
        if conn.error:
            raise _oserror(_take_error(conn))
        if conn.write_shutdown or (conn.state not in (State.ESTABLISHED, State.CLOSE_WAIT) \
                and conn.state not in _CONNECTING):
            raise _oserror(errno.EPIPE)
        return conn

    def _send_ready(self) -> bool:
        conn = self._conn
        if conn is None or conn.error or conn.write_shutdown:
            return True
        if conn.state in _CONNECTING:
            return False
        if conn.state not in (State.ESTABLISHED, State.CLOSE_WAIT):
            return True
        # Linux tcp_poll() / sk_stream_write_space(): writable once the free space is half of
        # what is queued; short of it, SOCK_NOSPACE lets the ACKs autotune the buffer.
        if conn.writable:
            return True
        conn.sock_nospace = True
        return False

    def sendall(self, data: Any, flags: int = 0) -> None:
        """Send everything or raise; a timeout bounds the whole call, as in Python."""
        view = _as_bytes_view(data)
        if flags & ~(_SEND_FLAGS & ~(MSG_PRELOAD | MSG_FASTOPEN)):
            raise _oserror(errno.EOPNOTSUPP, f"unsupported sendall flags {flags:#x}")
        more = bool(flags & MSG_MORE)
        total = len(view)
        sent = 0
        whole = data if isinstance(data, bytes) else None

        def attempt(now: float) -> _Blocked | None:
            nonlocal sent
            conn = self._writable_conn()
            while sent < total:
                if conn.state in _CONNECTING or conn.send_space <= 0:
                    return _BLOCK
                # A whole bytes object goes by reference; the core copies any other buffer.
                chunk: Any = whole if sent == 0 and whole is not None else view[sent:]
                sent += conn.send(chunk, now, more=more)
                self._kick()
            return None

        self._run(attempt, self._send_ready, nonblocking=bool(flags & MSG_DONTWAIT))

    def sendto(self, data: Any, flags_or_address: Any, address: Any = None) -> int:
        """sendto(data, address) or sendto(data, flags, address).

        With MSG_FASTOPEN on an unconnected socket: connect, queue ``data`` before the
        handshake completes (it leaves with the first ACK), return its length. A
        blocking socket then waits for the handshake so a refused connect is reported.
        Without it, TCP ignores the address of a connected socket (as Linux does).
        """
        if address is None:
            flags, address = 0, flags_or_address
        else:
            flags = flags_or_address
        if not isinstance(flags, int):
            raise TypeError("sendto(): flags must be int")
        view = _as_bytes_view(data)
        if not flags & MSG_FASTOPEN or self._conn is not None:
            return self.send(data, flags & ~MSG_FASTOPEN)
        if flags & ~_SEND_FLAGS:
            raise _oserror(errno.EOPNOTSUPP, f"unsupported send flags {flags & ~_SEND_FLAGS:#x}")
        ip, port = self._parse_address(address, "sendto")
        drv = self._host.driver
        with drv.lock:
            self._check_open()
            if self._listener is not None:
                raise _oserror(errno.EISCONN)
            conn = self._start_connect(ip, port, drv.now(), data=bytes(view))
            n = len(conn.snd_buf)
        self._kick()
        if self._timeout == 0.0 or flags & MSG_DONTWAIT:
            return n
        self._connect(address, nonblocking=False)
        return n

    # -- recv --------------------------------------------------------------------

    def _recv(self, n: int, flags: int, into: memoryview | None) -> bytes | int:
        if flags & ~_RECV_FLAGS:
            raise _oserror(errno.EOPNOTSUPP, f"unsupported recv flags {flags & ~_RECV_FLAGS:#x}")
        peek = bool(flags & MSG_PEEK)
        waitall = bool(flags & MSG_WAITALL) and not peek

        def attempt(now: float) -> bytes | int | _Blocked:
            conn = self._conn
            if conn is None:
                raise _oserror(errno.ENOTCONN)
            if conn.collector is not None:
                # The receive side belongs to a payload-object collector (objects ring COLLECT).
                raise _oserror(errno.EBUSY, "the socket's receive side is claimed by a collector")
            if n == 0:
                return b"" if into is None else 0
            if conn.state in _CONNECTING:
                return _BLOCK
            avail = conn.readable_bytes
            if avail:
                if waitall and avail < n and not _eof_or_error(conn):
                    return _BLOCK
                if peek:
                    data = conn.rcv_buf.peek(0, min(n, avail))
                    if into is None:
                        return data
                    into[:len(data)] = data
                    return len(data)
                if into is None:
                    out: bytes | int = conn.recv(n, now)
                else:
                    out = conn.recv_into(into[:n], now)
                self._kick()    # reading may open the window: the update must leave now
                return out
            if conn.fin_received or (not conn.error and (conn.state is State.CLOSED or conn.read_shutdown)):
                return b"" if into is None else 0
            if conn.error:
                raise _oserror(_take_error(conn))
            return _BLOCK

        def ready() -> bool:
            conn = self._conn
            if conn is None:
                return True
            if conn.state in _CONNECTING:
                return False
            avail = conn.readable_bytes
            return (avail >= n if waitall else avail > 0) or _eof_or_error(conn)

        # mypy can't split "bytes | int | _Blocked" into _T | _Blocked by itself.
        return cast("bytes | int", self._run(attempt, ready, nonblocking=bool(flags & MSG_DONTWAIT)))

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        if bufsize < 0:
            raise ValueError("negative buffersize in recv")
        self._check_open()
        if self._listener is not None:
            raise _oserror(errno.ENOTCONN)
        out = self._recv(bufsize, flags, None)
        assert isinstance(out, bytes)
        return out

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        view = _as_bytes_view(buffer)
        if view.readonly:
            raise TypeError("recv_into() needs a writable buffer")
        if nbytes < 0:
            raise ValueError("negative buffersize in recv_into")
        if nbytes == 0:
            nbytes = len(view)
        elif nbytes > len(view):
            raise ValueError("buffer too small for requested bytes")
        self._check_open()
        if self._listener is not None:
            raise _oserror(errno.ENOTCONN)
        out = self._recv(nbytes, flags, view)
        assert isinstance(out, int)
        return out

    def recvfrom(self, bufsize: int, flags: int = 0) -> tuple[bytes, None]:
        """As Python on Linux: a TCP socket reports no source address (None)."""
        return self.recv(bufsize, flags), None

    def recvfrom_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> tuple[int, None]:
        return self.recv_into(buffer, nbytes, flags), None

    # -- shutdown / close --------------------------------------------------------

    def shutdown(self, how: int) -> None:
        if how not in (SHUT_RD, SHUT_WR, SHUT_RDWR):
            raise _oserror(errno.EINVAL, "how must be SHUT_RD, SHUT_WR or SHUT_RDWR")
        drv = self._host.driver
        with drv.lock:
            self._check_open()
            lst = self._listener
            if lst is not None:
                # Linux: shutting down the read side of a listener stops it; accept() -> EINVAL.
                if how != SHUT_WR and not lst.closed:
                    lst.close(drv.now())
                self._kick()
                return
            conn = self._conn
            if conn is None or conn.state is State.CLOSED:
                raise _oserror(errno.ENOTCONN)
            conn.shutdown(how != SHUT_WR, how != SHUT_RD, drv.now())
        self._kick()

    def close(self) -> None:
        """Close (idempotent). With SO_LINGER on and a time, a blocking socket waits up to
        that long for the peer to acknowledge the FIN; with a zero time it resets."""
        if self._closed:
            return
        drv = self._host.driver
        with drv.lock:
            self._closed = True
            now = drv.now()
            conn = self._conn
            if self._listener is not None:
                if not self._listener.closed:
                    self._listener.close(now)
            elif conn is not None and not conn.closed_by_app:
                conn.close(now)
            self._release_port()
        self._kick()
        onoff, secs = self._linger
        if conn is not None and onoff and secs > 0 and self._timeout != 0.0:
            with contextlib.suppress(TimeoutError):
                drv.wait_until(lambda: conn.state not in _CLOSING, float(secs))

    def __enter__(self) -> Socket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        parts = [f"<usertcp.socket{' [closed]' if self._closed else ''} fd=-1",
                 f"family={self.family.name}", f"type={self.type.name}", f"proto={self.proto}"]
        if not self._closed:
            laddr = self.getsockname()
            if laddr[1]:
                parts.append(f"laddr={laddr}")
            conn = self._conn
            if conn is not None:
                parts.append(f"raddr={self._format(conn.remote_ip, conn.remote_port)}")
                parts.append(f"state={conn.state.name}")
            elif self._listener is not None:
                parts.append("state=LISTEN")
        return ", ".join(parts) + ">"

    # -- blocking mode -----------------------------------------------------------

    def settimeout(self, value: float | None) -> None:
        self._timeout = _check_timeout(value)

    def gettimeout(self) -> float | None:
        return self._timeout

    def setblocking(self, flag: bool) -> None:
        self._timeout = None if flag else 0.0

    def getblocking(self) -> bool:
        return self._timeout != 0.0

    # -- options -----------------------------------------------------------------

    def setsockopt(self, level: int, optname: int, value: int | bytes | bytearray | memoryview | None,
                   optlen: int | None = None) -> None:
        with self._host.driver.lock:
            self._check_open()
            if level == SOL_SOCKET:
                self._set_sol(optname, value)
            elif level == IPPROTO_TCP:
                self._set_tcp(optname, value)
            elif level in (IPPROTO_IP, IPPROTO_IPV6):
                self._set_ip(level, optname, value)
            else:
                raise _oserror(errno.ENOPROTOOPT, f"option level {level} not supported")
        self._kick()

    def _set_ip(self, level: int, optname: int, value: Any) -> None:
        v6 = level == IPPROTO_IPV6
        if optname == (IPV6_MTU_DISCOVER if v6 else IP_MTU_DISCOVER):
            mode = _int_value(value)
            if not 0 <= mode <= 5:          # Linux: IP_PMTUDISC_DONT .. IP_PMTUDISC_OMIT
                raise _oserror(errno.EINVAL, f"path-MTU discovery mode {mode} out of range")
            self._set_conn_attr("pmtudisc", mode)
        elif optname == (IPV6_RECVERR if v6 else IP_RECVERR):
            self._set_conn_attr("recverr", bool(_int_value(value)))
        else:
            raise _oserror(errno.ENOPROTOOPT, f"IP option {optname} not supported")

    def _set_conn_attr(self, name: str, value: Any) -> None:
        self._conn_opts[name] = value
        if self._listener is not None:
            self._listener.options[name] = value
        conn = self._conn
        if conn is not None:
            setattr(conn, name, value)
            if conn.is_synchronized and conn.state is not State.TIME_WAIT:
                # Let the change act now: output() pushes what e.g. TCP_NODELAY/uncork
                # released (Linux tcp_push_pending_frames), re-arms keepalive and hands
                # the new deadlines to the stack.
                conn.options_changed(self._host.driver.now())

    def _set_sol(self, optname: int, value: Any) -> None:
        cfg = self._host.stack.config
        if optname == SO_REUSEADDR:
            self._reuseaddr = bool(_int_value(value))
        elif optname == SO_KEEPALIVE:
            self._set_conn_attr("keepalive", bool(_int_value(value)))
        elif optname == SO_SNDBUF:
            # Linux doubles the request (sk_sndbuf also counts each skb's overhead), reports
            # the doubled value and stops autotuning (SOCK_SNDBUF_LOCK); sk_write_space()
            # may then wake a writer.
            v = min(_int_value(value), cfg.wmem[2])
            self._sndbuf = max(2 * v, _SOCK_MIN_SNDBUF)
            self._set_conn_attr("sndbuf_limit", self._sndbuf)
            self._set_conn_attr("sndbuf_locked", True)
            if self._conn is not None:
                self._conn.write_space()
        elif optname == SO_RCVBUF:
            v = min(_int_value(value), cfg.rmem[2])
            self._rcvbuf = max(2 * v, _SOCK_MIN_RCVBUF)
            self._set_conn_attr("rcvbuf_limit", self._rcvbuf // 2)
        elif optname == SO_LINGER:
            if isinstance(value, tuple):
                onoff, secs = value
            else:
                raw = _as_bytes_view(value)
                if len(raw) < 8:
                    raise _oserror(errno.EINVAL, "SO_LINGER needs struct linger: struct.pack('ii', on, secs)")
                onoff, secs = struct.unpack_from("ii", raw)
            self._linger = (1 if onoff else 0, max(int(secs), 0))
            self._set_conn_attr("linger_zero", bool(onoff) and secs == 0)
        elif optname in (SO_ERROR, SO_TYPE, SO_ACCEPTCONN):
            raise _oserror(errno.ENOPROTOOPT, "read-only socket option")
        else:
            raise _oserror(errno.ENOPROTOOPT, f"SOL_SOCKET option {optname} not supported")

    def _set_tcp(self, optname: int, value: Any) -> None:
        if optname == TCP_CONGESTION:
            self._set_congestion(value)
            return
        if optname == TCP_INFO:
            raise _oserror(errno.ENOPROTOOPT, "TCP_INFO is read-only")
        if optname in (TCP_MD5SIG, TCP_MD5SIG_EXT):
            self._set_md5sig(bytes(_as_bytes_view(value)), ext=optname == TCP_MD5SIG_EXT)
            return
        if optname == TCP_FASTOPEN_KEY:
            key = bytes(_as_bytes_view(value))
            if len(key) not in (16, 32):
                raise _oserror(errno.EINVAL, "TCP_FASTOPEN_KEY takes 16 bytes (or 32: primary+backup)")
            self._tfo_key = key
            if self._listener is not None:
                self._listener.set_fastopen_key(key)
            return
        v = _int_value(value)
        if optname == TCP_NODELAY:
            self._set_conn_attr("nodelay", bool(v))
        elif optname == TCP_CORK:
            self._set_conn_attr("cork", bool(v))
        elif optname == TCP_MAXSEG:
            if v and not _TCP_MIN_MSS <= v <= _TCP_MAX_MSS:
                raise _oserror(errno.EINVAL, f"TCP_MAXSEG must be {_TCP_MIN_MSS}-{_TCP_MAX_MSS} or 0")
            self._set_conn_attr("user_mss", v)
        elif optname in (TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT):
            top = 127 if optname == TCP_KEEPCNT else 32767
            if not 1 <= v <= top:
                raise _oserror(errno.EINVAL, f"value must be 1-{top}")
            attr = {TCP_KEEPIDLE: "keepalive_time", TCP_KEEPINTVL: "keepalive_intvl",
                    TCP_KEEPCNT: "keepalive_probes"}[optname]
            self._set_conn_attr(attr, v if optname == TCP_KEEPCNT else float(v))
        elif optname == TCP_USER_TIMEOUT:
            if v < 0:
                raise _oserror(errno.EINVAL, "TCP_USER_TIMEOUT must be >= 0 (milliseconds)")
            self._set_conn_attr("user_timeout", v / 1000.0)
        elif optname == TCP_FASTOPEN:
            if v < 0:
                raise _oserror(errno.EINVAL, "TCP_FASTOPEN queue length must be >= 0")
            self._tfo_qlen = v
            if self._listener is not None:
                self._listener.fastopen_qlen = v
        elif optname == TCP_FASTOPEN_CONNECT:
            if self._conn is not None:
                raise _oserror(errno.EISCONN)
            self._tfo_connect = bool(v)
        elif optname == TCP_FASTOPEN_NO_COOKIE:
            self._tfo_no_cookie = bool(v)
            if self._listener is not None:
                self._listener.fastopen_no_cookie = bool(v)
        else:
            raise _oserror(errno.ENOPROTOOPT, f"IPPROTO_TCP option {optname} not supported")

    def _set_md5sig(self, value: bytes, *, ext: bool) -> None:
        """TCP_MD5SIG with Linux's ``struct tcp_md5sig`` bytes; a zero key length deletes."""
        addr, prefixlen, key = parse_tcp_md5sig(value, ext=ext)
        if self._md5_keys is None:
            self._md5_keys = Md5Keys()
        if key:
            self._md5_keys.add(addr, key, prefixlen)
        elif not self._md5_keys.delete(addr, prefixlen):
            raise _oserror(errno.ENOENT, "no TCP_MD5SIG key for that peer")
        if self._listener is not None:
            self._listener.md5_keys = self._md5_keys
        if self._conn is not None and self._conn.state is not State.CLOSED:
            self._conn.md5_keys = self._md5_keys

    def add_md5_key(self, peer: str, key: bytes, prefixlen: int | None = None) -> None:
        """The plain-Python form of TCP_MD5SIG: sign everything to/from ``peer`` with ``key``."""
        with self._host.driver.lock:
            self._set_md5sig(build_tcp_md5sig(peer, key, prefixlen), ext=prefixlen is not None)

    def _set_congestion(self, value: Any) -> None:
        if isinstance(value, str):
            name = value
        else:
            name = bytes(_as_bytes_view(value)).split(b"\0", 1)[0].decode("ascii", "replace")
        conn = self._conn
        try:
            cc = create_congestion_control(name, conn.mss if conn is not None else 536)
        except ValueError as e:
            raise _oserror(errno.ENOENT, str(e)) from None
        if conn is not None:
            if conn.snd_nxt > conn.snd_una + (0 if conn.is_synchronized else 1):
                # The core's controllers are only valid when chosen before data flows.
                raise _oserror(errno.EBUSY, "TCP_CONGESTION can't change while data is in flight")
            conn.cc = cc
        self._cc_name = cc.name

    def getsockopt(self, level: int, optname: int, buflen: int = 0) -> Any:
        if not 0 <= buflen <= 1024:
            raise _oserror(errno.EINVAL, "getsockopt buflen out of range")
        with self._host.driver.lock:
            self._check_open()
            if level == IPPROTO_TCP and optname == TCP_INFO:
                return self.tcp_info()
            if level == IPPROTO_TCP and optname == TCP_CONGESTION:
                name = self._congestion_name().encode()
                return name.ljust(buflen, b"\0")[:buflen] if buflen else name
            if level == SOL_SOCKET and optname == SO_LINGER:
                if buflen:
                    return struct.pack("ii", *self._linger)[:buflen]
                return self._linger[0]
            if level == SOL_SOCKET:
                v = self._get_sol(optname)
            elif level == IPPROTO_TCP:
                v = self._get_tcp(optname)
            elif level in (IPPROTO_IP, IPPROTO_IPV6):
                v = self._get_ip(level, optname)
            else:
                raise _oserror(errno.ENOPROTOOPT, f"option level {level} not supported")
        return struct.pack("i", v)[:buflen] if buflen else v

    def _get_ip(self, level: int, optname: int) -> int:
        v6 = level == IPPROTO_IPV6
        conn = self._conn
        if optname == (IPV6_MTU if v6 else IP_MTU):
            # Linux: the path MTU of a connected socket, ENOTCONN otherwise.
            if conn is None or not conn.is_synchronized:
                raise _oserror(errno.ENOTCONN, "IP_MTU needs a connected socket")
            return conn.pmtu or conn.config.mtu
        if optname == (IPV6_MTU_DISCOVER if v6 else IP_MTU_DISCOVER):
            return int(self._opt("pmtudisc", 1))
        if optname == (IPV6_RECVERR if v6 else IP_RECVERR):
            return int(bool(self._opt("recverr", False)))
        raise _oserror(errno.ENOPROTOOPT, f"IP option {optname} not supported")

    def _get_sol(self, optname: int) -> int:
        conn = self._conn
        cfg = self._host.stack.config
        if optname == SO_ERROR:
            if conn is not None and conn.error:
                return _take_error(conn)
            err, self._error = self._error, 0
            return err
        if optname == SO_REUSEADDR:
            return int(self._reuseaddr)
        if optname == SO_KEEPALIVE:
            return int(bool(self._opt("keepalive", False)))
        if optname == SO_SNDBUF:
            if self._sndbuf is not None:
                return self._sndbuf
            return conn.sndbuf_limit if conn is not None else cfg.wmem[1]
        if optname == SO_RCVBUF:
            if self._rcvbuf is not None:
                return self._rcvbuf
            return conn.rcvbuf_limit if conn is not None else cfg.rmem[1]
        if optname == SO_TYPE:
            return int(self.type)
        if optname == SO_ACCEPTCONN:
            return int(self._listener is not None and not self._listener.closed)
        raise _oserror(errno.ENOPROTOOPT, f"SOL_SOCKET option {optname} not supported")

    def _get_tcp(self, optname: int) -> int:
        cfg = self._host.stack.config
        if optname == TCP_NODELAY:
            return int(bool(self._opt("nodelay", False)))
        if optname == TCP_CORK:
            return int(bool(self._opt("cork", False)))
        if optname == TCP_MAXSEG:
            conn = self._conn
            if conn is not None and conn.is_synchronized:
                return conn.mss
            return int(self._opt("user_mss", 0)) or _TCP_MSS_DEFAULT
        if optname == TCP_KEEPIDLE:
            return int(self._opt("keepalive_time", cfg.keepalive_time))
        if optname == TCP_KEEPINTVL:
            return int(self._opt("keepalive_intvl", cfg.keepalive_intvl))
        if optname == TCP_KEEPCNT:
            return int(self._opt("keepalive_probes", cfg.keepalive_probes))
        if optname == TCP_USER_TIMEOUT:
            return round(float(self._opt("user_timeout", 0.0)) * 1000)
        if optname == TCP_FASTOPEN:
            return self._listener.fastopen_qlen if self._listener is not None else self._tfo_qlen
        if optname == TCP_FASTOPEN_CONNECT:
            return int(self._tfo_connect)
        if optname == TCP_FASTOPEN_NO_COOKIE:
            return int(self._tfo_no_cookie)
        raise _oserror(errno.ENOPROTOOPT, f"IPPROTO_TCP option {optname} not supported")

    def _opt(self, name: str, default: Any) -> Any:
        if self._conn is not None:
            return getattr(self._conn, name)
        return self._conn_opts.get(name, default)

    def _congestion_name(self) -> str:
        if self._conn is not None:
            return self._conn.cc.name
        return self._cc_name or self._host.stack.config.congestion_control

    def tcp_info(self) -> dict[str, Any]:
        """Linux ``struct tcp_info`` as a dict of tcpi_* fields (plus the controller's name).

        For a listener, as Linux: tcpi_unacked = accept queue length, tcpi_sacked = backlog.
        """
        with self._host.driver.lock:
            self._check_open()
            conn = self._conn
            if conn is not None:
                info: dict[str, Any] = dict(conn.info())
                info["tcpi_ca_name"] = conn.cc.name
                return info
            lst = self._listener
            if lst is not None and not lst.closed:
                return {"tcpi_state": int(State.LISTEN), "tcpi_unacked": len(lst.accept_queue),
                        "tcpi_sacked": lst.backlog}
            return {"tcpi_state": int(State.CLOSED)}


SocketType = Socket


def _as_bytes_view(data: Any) -> memoryview:
    if isinstance(data, str):
        raise TypeError("a bytes-like object is required, not 'str'")
    view = memoryview(data)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    return view


def _int_value(value: Any) -> int:
    if isinstance(value, int):
        return int(value)
    if value is None:
        raise TypeError("option value must be an int or a bytes-like object")
    raw = _as_bytes_view(value)
    if len(raw) < 4:
        raise _oserror(errno.EINVAL, "an integer option needs at least 4 bytes")
    v: int = struct.unpack_from("i", raw)[0]
    return v


def _eof_or_error(conn: Connection) -> bool:
    """No more data will arrive, or there is an error to report: recv must not block."""
    return conn.fin_received or bool(conn.error) or conn.state is State.CLOSED or conn.read_shutdown


# ----------------------------------------------------------------------------- module-level API


def socket(family: int = AF_INET, type: int = SOCK_STREAM, proto: int = 0, *,
           host: Host | None = None) -> Socket:
    """A new socket on ``host`` (or the default host: :func:`set_default_host`, :func:`use_host`)."""
    return Socket(family, type, proto, host=host)


class _DefaultTimeout:
    """Sentinel: "use getdefaulttimeout()", as socket._GLOBAL_DEFAULT_TIMEOUT."""


_GLOBAL_DEFAULT_TIMEOUT: Final = _DefaultTimeout()


def _family_of(address: Any) -> AddressFamily:
    if isinstance(address, tuple) and address and isinstance(address[0], str) and ":" in address[0]:
        return AF_INET6
    return AF_INET


def create_connection(address: tuple[Any, ...],
                      timeout: float | _DefaultTimeout | None = _GLOBAL_DEFAULT_TIMEOUT,
                      source_address: tuple[Any, ...] | None = None, *, host: Host | None = None) -> Socket:
    """Connect to ``(ip, port)`` and return the socket (the family follows the address)."""
    sock = Socket(_family_of(address), SOCK_STREAM, host=host)
    try:
        if not isinstance(timeout, _DefaultTimeout):
            sock.settimeout(timeout)
        if source_address is not None:
            sock.bind(source_address)
        sock.connect(address)
    except BaseException:
        sock.close()
        raise
    return sock


def create_server(address: tuple[Any, ...], *, family: int | None = None, backlog: int | None = 128,
                  reuse_port: bool = False, dualstack_ipv6: bool = False,
                  host: Host | None = None) -> Socket:
    """A listening socket with SO_REUSEADDR set (as Python does on POSIX).

    An AF_INET6 socket bound to ``::`` also accepts IPv4 (the stack is dual-stack),
    so ``dualstack_ipv6`` is accepted and changes nothing.
    """
    if reuse_port:
        raise ValueError("SO_REUSEPORT is not supported by usertcp")
    fam = _family_of(address) if family is None else family
    if dualstack_ipv6 and fam != AF_INET6:
        raise ValueError("dualstack_ipv6 requires AF_INET6 family")
    sock = Socket(fam, SOCK_STREAM, host=host)
    try:
        sock.setsockopt(SOL_SOCKET, SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128 if backlog is None else backlog)
    except BaseException:
        sock.close()
        raise
    return sock


def _readable(s: Socket) -> bool:
    s._check_open()
    lst = s._listener
    if lst is not None:
        return lst.closed or bool(lst.accept_queue)
    conn = s._conn
    if conn is None:
        return True    # recv fails at once with ENOTCONN
    if conn.state in _CONNECTING or conn.collector is not None:
        return False    # a collected socket's bytes belong to the object ring (recv gets EBUSY)
    return conn.readable_bytes > 0 or _eof_or_error(conn)


def _writable(s: Socket) -> bool:
    s._check_open()
    if s._listener is not None:
        return False
    return s._send_ready()


def select(rlist: Iterable[Socket], wlist: Iterable[Socket], xlist: Iterable[Socket],
           timeout: float | None = None) -> tuple[list[Socket], list[Socket], list[Socket]]:
    """``select.select`` for usertcp sockets (which have no file descriptor).

    A socket is readable when ``recv``/``accept`` would not block, writable when
    ``send`` would not block (a finished or failed ``connect`` included). ``xlist``
    never reports anything (no urgent data). All sockets must share one driver;
    in virtual time, the wait runs the simulation.
    """
    rs, ws, xs = list(rlist), list(wlist), list(xlist)
    socks: Sequence[Socket] = rs + ws + xs
    if not socks:
        raise ValueError("select() needs at least one socket")
    drv = socks[0]._host.driver
    if any(s._host.driver is not drv for s in socks):
        raise ValueError("select(): all sockets must be run by the same driver")
    tmo = _check_timeout(timeout)

    def poll() -> tuple[list[Socket], list[Socket], list[Socket]]:
        return [s for s in rs if _readable(s)], [s for s in ws if _writable(s)], []

    with drv.lock:
        got = poll()
    if got[0] or got[1] or tmo == 0.0:
        return got

    def ready() -> bool:
        return any(_readable(s) for s in rs) or any(_writable(s) for s in ws)

    if not drv.wait_until(ready, tmo) and tmo is None:
        raise _oserror(errno.EDEADLK, "select() can never return: the driver has no event left")
    with drv.lock:
        return poll()
