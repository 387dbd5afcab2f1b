"""A BSD-socket API over a sans-IO :class:`~usertcp.tcp.stack.Stack`, shaped like Python's ``socket``.

A :class:`Host` binds a stack to the driver that runs it (virtual or real time);
:class:`Socket` objects created from it behave like Linux TCP sockets: same errnos,
same option semantics (:mod:`usertcp.api.sockopts`, shared with the packetdrill shim),
same non-blocking ``connect`` dance, and the surface the standard library uses
(``makefile``, ``sendmsg``/``recvmsg``, ``sendfile``, ``dup``: :mod:`usertcp.api.stdio`).

Blocking model: every blocking call loops "under ``driver.lock``: try the
operation; if it would block, ``driver.wait_until(ready, remaining)``". A
virtual-time driver runs the whole simulation forward inside that wait, so
timeouts are in *virtual* seconds and the program stays single-threaded; a
blocking call that nothing in the simulation can ever satisfy (e.g. the peer is
served by the same thread) raises ``OSError(EDEADLK)`` instead of hanging. Use
non-blocking sockets and :func:`select` (or :class:`usertcp.selectors.UsertcpSelector`)
to run both ends of a connection from one thread. A real-time driver runs events on
its own I/O thread, so any number of application threads may block at once.

Deviations from the OS, on purpose: ``fileno()`` is an eventfd whose readability mirrors
the socket's (:mod:`usertcp.api.readiness`), not a socket descriptor: ``os.read`` on it
reads nothing of the stream; names resolve only through the host's table
(:meth:`Host.add_name`) or as IP literals, others raise :class:`socket.gaierror`;
``getsockopt(IPPROTO_TCP, TCP_INFO)`` returns the ``tcp_info()`` dict rather than
packed bytes; ``getsockopt(IPPROTO_TCP, TCP_CONGESTION)`` returns the name as bytes
(NUL-padded to ``buflen`` when one is given).
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import os
import struct
from collections.abc import Callable, Iterable
from typing import Any, BinaryIO, Final, TypeVar, cast

from usertcp.api import constants as _constants
from usertcp.api import stdio
from usertcp.api.constants import *  # noqa: F403 - the Linux numbers are part of this API
from usertcp.api.constants import (
    AF_INET,
    AF_INET6,
    IPPROTO_TCP,
    MSG_DONTWAIT,
    MSG_FASTOPEN,
    MSG_MORE,
    MSG_NOSIGNAL,
    MSG_PEEK,
    MSG_PRELOAD,
    MSG_WAITALL,
    SHUT_RD,
    SHUT_RDWR,
    SHUT_WR,
    SO_LINGER,
    SOCK_CLOEXEC,
    SOCK_NONBLOCK,
    SOCK_STREAM,
    SOL_SOCKET,
    TCP_CONGESTION,
    TCP_INFO,
    AddressFamily,
    SocketKind,
    gaierror,
    os_error,
)
from usertcp.api.host import (
    Host,
    SocketDriver,
    check_timeout,
    get_default_host,
    getdefaulttimeout,
    host_or_default,
    set_default_host,
    setdefaulttimeout,
    use_host,
)
from usertcp.api.readiness import select
from usertcp.api.sockopts import SocketOptions, as_bytes_view, take_error, tcp_info
from usertcp.tcp.connection import Connection, State
from usertcp.tcp.fastopen import cookie_cached, tfo_connect
from usertcp.tcp.stack import Listener

__all__ = [
    *_constants.__all__,
    "Host",
    "Socket",
    "SocketDriver",
    "SocketType",
    "get_default_host",
    "getdefaulttimeout",
    "select",
    "set_default_host",
    "setdefaulttimeout",
    "use_host",
]



_SEND_FLAGS = MSG_DONTWAIT | MSG_NOSIGNAL | MSG_MORE | MSG_FASTOPEN | MSG_PRELOAD
_RECV_FLAGS = MSG_DONTWAIT | MSG_PEEK | MSG_WAITALL
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


def _eof_or_error(conn: Connection) -> bool:
    """No more data will arrive, or there is an error to report: recv must not block."""
    return conn.fin_received or bool(conn.error) or conn.state is State.CLOSED or conn.read_shutdown


# ----------------------------------------------------------------------------- sockets


class Socket:
    """A TCP socket of a usertcp :class:`Host`; the methods mirror :class:`socket.socket`."""

    def __init__(self, family: int = AF_INET, type: int = SOCK_STREAM, proto: int = 0, *,
                 host: Host | None = None) -> None:
        if family not in (AF_INET, AF_INET6):
            raise os_error(errno.EAFNOSUPPORT, f"address family {family} not supported (AF_INET/AF_INET6)")
        kind = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)
        if kind != SOCK_STREAM:
            raise os_error(errno.ESOCKTNOSUPPORT, f"socket type {kind} not supported (only SOCK_STREAM)")
        if proto not in (0, IPPROTO_TCP):
            raise os_error(errno.EPROTONOSUPPORT, f"protocol {proto} not supported (only TCP)")
        self._host = host_or_default(host)
        self.family = AddressFamily(family)
        self.type = SocketKind(kind)
        self.proto = proto
        self._timeout: float | None = 0.0 if type & SOCK_NONBLOCK else getdefaulttimeout()
        self._closed = False
        self._conn: Connection | None = None
        self._listener: Listener | None = None
        self._connected = False         # Linux SS_CONNECTED (vs. SS_CONNECTING while _conn is new)
        self._bound_ip: bytes | None = None
        self._bound_port = 0            # non-zero: this socket holds an entry in the host's port table
        self._explicit_bind = False
        self._tfo_deferred = False      # connect() returned with the SYN not yet sent
        self._options = SocketOptions(self._host.stack.config)
        self._io_refs = 0               # open makefile() files: close() waits for them (as CPython)
        self._close_pending = False     # close() was called while files were open
        self._handles = [1]             # socket objects sharing this socket (dup()), shared list
        self._early_shutdown = 0        # RCV (1) / SEND (2) shutdown asked before a connection

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
    def options(self) -> SocketOptions:
        """This socket's option state (the module shared with the packetdrill shim)."""
        return self._options

    @property
    def bound_ip(self) -> bytes | None:
        """The local address ``bind()`` chose (None: any)."""
        return self._bound_ip

    @property
    def timeout(self) -> float | None:
        return self._timeout

    def _check_open(self) -> None:
        if self._closed:
            raise os_error(errno.EBADF, "Bad file descriptor (socket is closed)")

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
                try:
                    result = attempt(now)
                finally:
                    self._host.readiness.sync_socket(self)
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
                    raise os_error(errno.EDEADLK, "blocking call can never complete: the driver has no "
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
        # A name of the host's table, or an IP literal; anything else: gaierror, as getaddrinfo(3).
        found = self._host.resolve(host_s)
        if not v6:
            found = [f for f in found if len(f) == 4] or found    # a literal keeps its family
        ip = ipaddress.ip_address(found[0])
        if isinstance(ip, ipaddress.IPv6Address):
            if not v6:
                raise os_error(errno.EAFNOSUPPORT, f"{host_s} is an IPv6 address on an AF_INET socket")
            if ip.ipv4_mapped is not None:
                return ip.ipv4_mapped.packed, port
            if ip.is_unspecified:
                return None, port
            return ip.packed, port
        if v6:
            raise os_error(errno.EAFNOSUPPORT, f"{host_s} is an IPv4 address on an AF_INET6 socket "
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
            raise os_error(errno.ENOTCONN)
        return self._format(conn.remote_ip, conn.remote_port)

    def fileno(self) -> int:
        """A real descriptor (an eventfd) readable exactly when ``recv``/``accept`` would not
        block: for ``selectors`` and event loops (:mod:`usertcp.api.readiness`); -1 once closed."""
        if self._closed:
            return -1
        return self._host.readiness.fds(self)[0]

    def readiness_fds(self) -> tuple[int, int]:
        """(readable fd, writable fd): the second is *readable* when ``send`` would not block."""
        self._check_open()
        return self._host.readiness.fds(self)

    def poll_readiness(self) -> tuple[bool, bool]:
        """(recv/accept would not block, send would not block); EBADF once closed."""
        self._check_open()
        lst = self._listener
        if lst is not None:
            return lst.closed or bool(lst.accept_queue), False
        conn = self._conn
        if conn is None:
            return True, True      # recv fails at once with ENOTCONN, send with EPIPE
        if conn.state in _CONNECTING or conn.collector is not None:
            # a collected socket's bytes belong to the object ring (recv gets EBUSY)
            readable = False
        else:
            readable = conn.readable_bytes > 0 or _eof_or_error(conn) or bool(self._early_shutdown & 1)
        return readable, self._send_ready()

    # -- bind / listen / accept --------------------------------------------------

    def bind(self, address: tuple[Any, ...]) -> None:
        ip, port = self._parse_address(address, "bind")
        with self._host.driver.lock:
            self._check_open()
            if self._bound_port or self._conn is not None or self._listener is not None:
                raise os_error(errno.EINVAL, "socket is already bound")
            stack = self._host.stack
            if ip is not None and ip not in stack.addresses:
                raise os_error(errno.EADDRNOTAVAIL, "address not on this host")
            if port == 0:
                port = self._host.pick_port()
            else:
                self._host.check_bind(self, ip, port)
            self._bound_ip = ip
            self._bound_port = port
            self._explicit_bind = True
            self._host.register_port(self, port)

    def _release_port(self) -> None:
        if self._bound_port:
            self._host.release_port(self, self._bound_port)

    def listen(self, backlog: int = 128) -> None:
        with self._host.driver.lock:
            self._check_open()
            if self._conn is not None:
                raise os_error(errno.EINVAL, "listen() on a connected or connecting socket")
            backlog = max(backlog, 0)
            if self._listener is not None:
                # Linux allows listen() again to change the backlog.
                cap = self._host.stack.config.somaxconn
                self._listener.backlog = max(1, min(backlog, cap))
                return
            if not self._bound_port:
                self._bound_port = self._host.pick_port()
                self._host.register_port(self, self._bound_port)
            lst = self._host.stack.listen(self._bound_port, address=self._bound_ip, backlog=backlog)
            self._options.apply_to_listener(lst)
            self._listener = lst

    def accept(self) -> tuple[Socket, tuple[Any, ...]]:
        def attempt(now: float) -> Connection | _Blocked:
            lst = self._listener
            if lst is None or lst.closed:
                raise os_error(errno.EINVAL, "accept() on a socket that is not listening")
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
        child._options = self._options.inherit()
        self._options.adopt_child(conn)
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
                raise os_error(errno.EISCONN)
            conn = self._conn
            if conn is None and self._options.tfo_connect and cookie_cached(self._host.stack, ip or b""):
                # Linux TCP_FASTOPEN_CONNECT: connect() returns at once; the SYN leaves
                # with the first write, carrying its data (tcp_fastopen_defer_connect).
                conn = self._start_connect(ip, port, drv.now(), defer=True)
                self._connected = True
                return conn
            if conn is None:
                conn = self._start_connect(ip, port, drv.now())
                if nonblocking or self._timeout == 0.0:
                    raise os_error(errno.EINPROGRESS)
            elif conn.state in _CONNECTING and (nonblocking or self._timeout == 0.0):
                raise os_error(errno.EALREADY)

        def attempt(now: float) -> Connection | _Blocked:
            c = self._conn
            if c is None:                      # failed and reset by another thread
                raise os_error(errno.ECONNABORTED)
            if c.state in _CONNECTING:
                return _BLOCK
            if c.state is State.CLOSED:
                # Linux: report the error, then the socket may connect() again.
                err = take_error(c) or self._options.error or errno.ECONNABORTED
                self._options.error = 0
                self._drop_failed_connection()
                raise os_error(err)
            self._connected = True
            return c

        def ready() -> bool:
            c = self._conn
            return c is None or c.state not in _CONNECTING

        return self._run(attempt, ready, eagain=errno.EALREADY)

    def _start_connect(self, ip: bytes | None, port: int, now: float, *, defer: bool = False,
                       data: Any = None) -> Connection:
        if ip is None:
            raise os_error(errno.EADDRNOTAVAIL, "cannot connect to the unspecified address")
        if port == 0:
            raise os_error(errno.EADDRNOTAVAIL, "cannot connect to port 0")
        stack = self._host.stack
        if self._bound_ip is not None and len(self._bound_ip) != len(ip):
            raise os_error(errno.EAFNOSUPPORT, "bound and remote addresses are of different families")
        local_port = self._bound_port or self._host.pick_port()
        conn = stack.create_connection(ip, port, local=self._bound_ip, local_port=local_port)
        self._options.apply_to_connection(conn)
        if defer:
            self._tfo_deferred = True
        elif data is not None or self._options.tfo_connect:
            tfo_connect(conn, b"" if data is None else data, now)
        else:
            stack.connect(conn, now)
        if not self._bound_port:
            self._bound_port = local_port
            self._host.register_port(self, local_port)
        self._conn = conn
        self._kick()
        return conn

    def _drop_failed_connection(self) -> None:
        self._conn = None
        self._connected = False
        if not self._explicit_bind:
            self._release_port()
            self._bound_port = 0


    # -- send --------------------------------------------------------------------

    def send(self, data: Any, flags: int = 0) -> int:
        view = as_bytes_view(data)
        if flags & ~_SEND_FLAGS:
            raise os_error(errno.EOPNOTSUPP, f"unsupported send flags {flags & ~_SEND_FLAGS:#x}")
        if flags & MSG_PRELOAD:
            return self._preload(data, view)
        return self._send_some(data, view, flags)

    def _preload(self, data: Any, view: memoryview) -> int:
        with self._host.driver.lock:
            self._check_open()
            lst = self._listener
            if lst is None or lst.closed:
                raise os_error(errno.EINVAL, "MSG_PRELOAD needs a listening socket")
            set_preload = getattr(lst, "set_preload", None)
            if set_preload is None:
                raise os_error(errno.EOPNOTSUPP, "this stack's Listener has no set_preload()")
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
        if conn is None or self._early_shutdown & 2:
            raise os_error(errno.EPIPE, "send on a socket that is not connected")
        if conn.error:
            raise os_error(take_error(conn))
        if conn.write_shutdown or (conn.state not in (State.ESTABLISHED, State.CLOSE_WAIT) \
                and conn.state not in _CONNECTING):
            raise os_error(errno.EPIPE)
        return conn

    def _send_ready(self) -> bool:
        conn = self._conn
        if conn is None or conn.error or conn.write_shutdown or self._early_shutdown & 2:
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
        view = as_bytes_view(data)
        if flags & ~(_SEND_FLAGS & ~(MSG_PRELOAD | MSG_FASTOPEN)):
            raise os_error(errno.EOPNOTSUPP, f"unsupported sendall flags {flags:#x}")
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
        view = as_bytes_view(data)
        if not flags & MSG_FASTOPEN or self._conn is not None:
            return self.send(data, flags & ~MSG_FASTOPEN)
        if flags & ~_SEND_FLAGS:
            raise os_error(errno.EOPNOTSUPP, f"unsupported send flags {flags & ~_SEND_FLAGS:#x}")
        ip, port = self._parse_address(address, "sendto")
        drv = self._host.driver
        with drv.lock:
            self._check_open()
            if self._listener is not None:
                raise os_error(errno.EISCONN)
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
            raise os_error(errno.EOPNOTSUPP, f"unsupported recv flags {flags & ~_RECV_FLAGS:#x}")
        peek = bool(flags & MSG_PEEK)
        waitall = bool(flags & MSG_WAITALL) and not peek

        def attempt(now: float) -> bytes | int | _Blocked:
            conn = self._conn
            if conn is None:
                raise os_error(errno.ENOTCONN)
            if conn.collector is not None:
                # The receive side belongs to a payload-object collector (objects ring COLLECT).
                raise os_error(errno.EBUSY, "the socket's receive side is claimed by a collector")
            if n == 0 or self._early_shutdown & 1:
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
                raise os_error(take_error(conn))
            return _BLOCK

        def ready() -> bool:
            conn = self._conn
            if conn is None or self._early_shutdown & 1:
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
            raise os_error(errno.ENOTCONN)
        out = self._recv(bufsize, flags, None)
        assert isinstance(out, bytes)
        return out

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        view = as_bytes_view(buffer)
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
            raise os_error(errno.ENOTCONN)
        out = self._recv(nbytes, flags, view)
        assert isinstance(out, int)
        return out

    def inq_hint(self) -> int:
        """Linux tcp_inq_hint(): bytes left to read, counting a received FIN as one (so a
        reader sees "not done" until it has read the EOF)."""
        with self._host.driver.lock:
            conn = self._conn
            if conn is None:
                return 0
            return int(conn.readable_bytes) + (1 if conn.fin_received else 0)

    def recvfrom(self, bufsize: int, flags: int = 0) -> tuple[bytes, None]:
        """As Python on Linux: a TCP socket reports no source address (None)."""
        return self.recv(bufsize, flags), None

    def recvfrom_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> tuple[int, None]:
        return self.recv_into(buffer, nbytes, flags), None

    # -- shutdown / close --------------------------------------------------------

    def shutdown(self, how: int) -> None:
        if how not in (SHUT_RD, SHUT_WR, SHUT_RDWR):
            raise os_error(errno.EINVAL, "how must be SHUT_RD, SHUT_WR or SHUT_RDWR")
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
                # Linux inet_shutdown: ENOTCONN, yet sk_shutdown keeps the bits: a later
                # connect() gives a socket that cannot send (EPIPE) / reads EOF at once.
                self._early_shutdown |= how + 1      # SHUT_RD 0 -> 1, SHUT_WR 1 -> 2, RDWR 2 -> 3
                raise os_error(errno.ENOTCONN)
            conn.shutdown(how != SHUT_WR, how != SHUT_RD, drv.now())
        self._kick()

    def close(self) -> None:
        """Close (idempotent). The socket stays open while a :meth:`makefile` file is, and
        while a :meth:`dup` of it is. With SO_LINGER on and a time, a blocking socket waits up
        to that long for the peer to acknowledge the FIN; with a zero time it resets."""
        if self._closed:
            return
        if self._io_refs > 0:
            self._close_pending = True
            return
        self._host.readiness.discard(self)
        self._handles[0] -= 1
        if self._handles[0] > 0:
            self._closed = True       # another handle (dup) keeps the socket itself open
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
        onoff, secs = self._options.linger
        if conn is not None and onoff and secs > 0 and self._timeout != 0.0:
            with contextlib.suppress(TimeoutError):
                drv.wait_until(lambda: conn.state not in _CLOSING, float(secs))

    def detach(self) -> int:
        raise os_error(errno.EOPNOTSUPP, "a usertcp socket has no kernel descriptor to detach")

    def dup(self) -> Socket:
        """Another socket object for the same socket (as ``dup(2)``): the connection or
        listener closes when the last of them does. The handles share the socket as it is
        now; a later ``connect``/``listen`` on one is not seen by the other."""
        self._check_open()
        twin = Socket.__new__(Socket)
        twin.__dict__.update(self.__dict__)
        twin._io_refs = 0
        twin._close_pending = False
        self._handles[0] += 1
        return twin

    # -- the standard library's file and message surface (usertcp.api.stdio) ---------

    def add_io_ref(self) -> None:
        """A :meth:`makefile` file now refers to this socket."""
        self._io_refs += 1

    def _decref_socketios(self) -> None:
        # The name socket.SocketIO calls when one of our files closes.
        if self._io_refs > 0:
            self._io_refs -= 1
        if self._close_pending and self._io_refs == 0:
            self.close()

    def makefile(self, mode: str = "r", buffering: int | None = None, *, encoding: str | None = None,
                 errors: str | None = None, newline: str | None = None) -> Any:
        return stdio.makefile(self, mode, buffering, encoding=encoding, errors=errors, newline=newline)

    def sendmsg(self, buffers: Iterable[Any], ancdata: Iterable[tuple[int, int, Any]] = (),
                flags: int = 0, address: Any = None) -> int:
        return stdio.sendmsg(self, buffers, ancdata, flags, address)

    def recvmsg(self, bufsize: int, ancbufsize: int = 0,
                flags: int = 0) -> tuple[bytes, list[tuple[int, int, bytes]], int, None]:
        return stdio.recvmsg(self, bufsize, ancbufsize, flags)

    def recvmsg_into(self, buffers: Iterable[Any], ancbufsize: int = 0,
                     flags: int = 0) -> tuple[int, list[tuple[int, int, bytes]], int, None]:
        return stdio.recvmsg_into(self, buffers, ancbufsize, flags)

    def sendfile(self, file: BinaryIO, offset: int = 0, count: int | None = None) -> int:
        return stdio.sendfile(self, file, offset, count)

    def __enter__(self) -> Socket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        parts = [f"<usertcp.socket{' [closed]' if self._closed else ''}",
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
        self._timeout = check_timeout(value)

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
            conn = self._conn
            effect = self._options.set(level, optname, value, conn=conn, listener=self._listener)
            if effect and conn is not None and conn.is_synchronized and conn.state is not State.TIME_WAIT:
                # Let the change act now: output() pushes what e.g. TCP_NODELAY/uncork released
                # (Linux tcp_push_pending_frames) and re-arms keepalive; _schedule() hands the
                # new deadlines to the stack.
                conn.output(self._host.driver.now())
                conn._schedule()
        self._kick()

    def add_md5_key(self, peer: str, key: bytes, prefixlen: int | None = None) -> None:
        """The plain-Python form of TCP_MD5SIG: sign everything to/from ``peer`` with ``key``."""
        with self._host.driver.lock:
            self._check_open()
            self._options.set_md5_key(peer, key, prefixlen, conn=self._conn, listener=self._listener)

    def getsockopt(self, level: int, optname: int, buflen: int = 0) -> Any:
        """As Linux; TCP_INFO gives :meth:`tcp_info`'s dict, TCP_CONGESTION the name as bytes."""
        if not 0 <= buflen <= 1024:
            raise os_error(errno.EINVAL, "getsockopt buflen out of range")
        with self._host.driver.lock:
            self._check_open()
            if level == IPPROTO_TCP and optname == TCP_INFO:
                return tcp_info(self._conn, self._listener)
            if level == IPPROTO_TCP and optname == TCP_CONGESTION:
                name = self._options.congestion_name(self._conn).encode()
                return name.ljust(buflen, b"\0")[:buflen] if buflen else name
            if level == SOL_SOCKET and optname == SO_LINGER and buflen:
                return struct.pack("ii", *self._options.linger)[:buflen]
            v = self._options.get(level, optname, conn=self._conn, listener=self._listener)
        return struct.pack("i", v)[:buflen] if buflen else v

    def tcp_info(self) -> dict[str, Any]:
        """Linux ``struct tcp_info`` as a dict of tcpi_* fields (plus the controller's name)."""
        with self._host.driver.lock:
            self._check_open()
            return tcp_info(self._conn, self._listener)


SocketType = Socket


_CALLS: Final = frozenset({"create_connection", "create_server", "getaddrinfo", "gethostbyname", "socket"})


def __getattr__(name: str) -> Any:
    """The module-level calls live in :mod:`usertcp.api.calls` (they build on :class:`Socket`);
    ``usertcp.api.sockets.create_connection`` and the others still resolve, lazily (PEP 562)."""
    if name in _CALLS:
        from usertcp.api import calls
        return getattr(calls, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
