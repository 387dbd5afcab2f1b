"""The state and life cycle of a usertcp socket (see :mod:`usertcp.api.sockets` for the whole).

:class:`SocketCore` holds what a socket *is*: its host, its connection or listener, its
addresses, options and timeout; it binds, listens, accepts, connects, shuts down and closes,
with Linux's errnos, and reports its readiness. The data calls (send/recv and the standard
library's message and file surface) are :class:`usertcp.api.sockets.Socket`'s.
"""

from __future__ import annotations

import contextlib
import errno
import struct
from collections.abc import Callable
from typing import Any, Self, TypeVar

from usertcp.api.addresses import format_address, parse_address
from usertcp.api.blocking import BLOCK as _BLOCK
from usertcp.api.blocking import Blocked, run_blocking
from usertcp.api.constants import (
    AF_INET,
    AF_INET6,
    IPPROTO_TCP,
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
    TCP_PRELOAD,
    AddressFamily,
    SocketKind,
    gaierror,
    os_error,
)
from usertcp.api.host import Host, check_timeout, getdefaulttimeout, host_or_default
from usertcp.api.sockopts import SocketOptions, take_error, tcp_info
from usertcp.tcp.connection import Connection, State
from usertcp.tcp.fastopen import defer_connect, tfo_connect
from usertcp.tcp.stack import Listener

__all__ = ["CONNECTING", "SocketCore", "eof_or_error"]

CONNECTING = frozenset({State.SYN_SENT, State.SYN_RECEIVED})
# States that still owe the peer data or a FIN: SO_LINGER with a time waits for them to end.
_CLOSING = frozenset({State.FIN_WAIT_1, State.CLOSING, State.LAST_ACK})

_T = TypeVar("_T")


def eof_or_error(conn: Connection) -> bool:
    """No more data will arrive, or there is an error to report: recv must not block."""
    return conn.fin_received or bool(conn.error) or conn.state is State.CLOSED or conn.read_shutdown


class SocketCore:
    """A socket's state and life cycle: addresses, bind/listen/accept/connect, shutdown/close,
    timeouts, options, readiness. :class:`usertcp.api.sockets.Socket` adds the data calls."""

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
        self._connected = False         # Linux SS_CONNECTED (vs. SSCONNECTING while _conn is new)
        self._bound_ip: bytes | None = None
        self._bound_port = 0            # non-zero: this socket holds an entry in the host's port table
        self._explicit_bind = False
        self._tfo_deferred = False      # connect() returned with the SYN not yet sent
        self._tfo_copied = 0            # bytes the last sendto(MSG_FASTOPEN) put in the SYN
        self._options = SocketOptions(self._host.stack.config)
        self._io_refs = 0               # open makefile() files: close() waits for them (as CPython)
        self._close_pending = False     # close() was called while files were open
        self._handles = [1]             # socket objects sharing this socket (dup()), shared list
        self._early_shutdown = 0        # RCV (1) / SEND (2) shutdown asked before a connection
        self._mirrored = False          # fileno() handed out eventfds that follow its readiness

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

    @property
    def fastopen_deferred(self) -> bool:
        """connect() returned under TCP_FASTOPEN_CONNECT and the SYN waits for the first write,
        which it will carry (Linux tcp_fastopen_defer_connect; the connection is still CLOSED)."""
        return self._tfo_deferred

    def _check_open(self) -> None:
        if self._closed:
            raise os_error(errno.EBADF, "Bad file descriptor (socket is closed)")

    def _run(self, attempt: Callable[[float], _T | Blocked], ready: Callable[[], bool], *,
             nonblocking: bool = False, eagain: int = errno.EAGAIN) -> _T:
        """The blocking loop (:func:`usertcp.api.blocking.run_blocking`) for this socket."""
        timeout = 0.0 if nonblocking else self._timeout
        if not self._mirrored:
            def checked(now: float) -> _T | Blocked:
                self._check_open()
                return attempt(now)

            return run_blocking(self._host.driver, checked, ready, timeout, eagain=eagain)

        def mirrored(now: float) -> _T | Blocked:
            self._check_open()
            try:
                return attempt(now)
            finally:
                self._host.readiness.sync_socket(self)   # its eventfds follow every call

        return run_blocking(self._host.driver, mirrored, ready, timeout, eagain=eagain)

    def _kick(self) -> None:
        self._host.driver.kick()

    # -- addresses ---------------------------------------------------------------

    def _parse_address(self, address: object, what: str) -> tuple[bytes | None, int]:
        """(host, port[, flowinfo, scope_id]) -> (packed ip or None for "any", port)."""
        return parse_address(self.family, address, what, self._host.resolve)

    def _format(self, ip: bytes | None, port: int) -> tuple[Any, ...]:
        return format_address(self.family, ip, port)

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
        self._mirrored = True
        return self._host.readiness.fds(self)[0]

    def readiness_fds(self) -> tuple[int, int]:
        """(readable fd, writable fd): the second is *readable* when ``send`` would not block."""
        self._check_open()
        self._mirrored = True
        return self._host.readiness.fds(self)

    def poll_readable(self) -> bool:
        """recv/accept would not block (a pending error or EOF included); EBADF once closed."""
        self._check_open()
        lst = self._listener
        if lst is not None:
            return lst.closed or bool(lst.accept_queue)
        conn = self._conn
        if conn is None or self._early_shutdown & 1:
            return True            # recv fails at once with ENOTCONN / reads EOF
        if conn.state in CONNECTING or conn.collector is not None:
            return False           # a collected socket's bytes belong to the object ring (EBUSY)
        # tcp_poll: a queued zerocopy completion or timestamp is EPOLLERR, which select() and
        # poll() readers see as readable (recvmsg(MSG_ERRQUEUE) reads it).
        return conn.readable_bytes > 0 or eof_or_error(conn) or bool(conn.errqueue)

    def poll_writable(self, *, waiting: bool = True) -> bool:
        """send would not block (a failed or finished connect included); EBADF once closed.

        ``waiting``: the caller will wait for writability, as a poller asking for POLLOUT;
        short of space, Linux tcp_poll() then sets SOCK_NOSPACE so the ACKs that free it grow
        the send buffer and wake the writer. A look without waiting leaves it alone.
        """
        self._check_open()
        if self._listener is not None:
            return False
        return self._send_ready(mark_nospace=waiting)

    def poll_readiness(self) -> tuple[bool, bool]:
        """(readable, writable) for the readiness mirror: a look, not a wait."""
        return self.poll_readable(), self.poll_writable(waiting=False)

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

    def accept(self) -> tuple[Self, tuple[Any, ...]]:
        def attempt(now: float) -> Connection | Blocked:
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

    def _child(self, conn: Connection) -> Self:
        """Wrap an accepted connection; it carries the listener's options (Linux sk_clone)."""
        child = type(self)(self.family, self.type, self.proto, host=self._host)
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
            if conn is None:
                conn = self._start_connect(ip, port, drv.now())
                if self._tfo_deferred:
                    # Linux TCP_FASTOPEN_CONNECT: connect() returns at once; the SYN leaves
                    # with the first write, carrying its data (tcp_fastopen_defer_connect).
                    self._connected = True
                    return conn
                if nonblocking or self._timeout == 0.0:
                    raise os_error(errno.EINPROGRESS)
            elif conn.state in CONNECTING and (nonblocking or self._timeout == 0.0):
                raise os_error(errno.EALREADY)
        return self._wait_connected()

    def _wait_connected(self) -> Connection:
        """The end of Linux __inet_stream_connect: wait out the handshake; a failed connection
        reports its error and leaves the socket free to connect again."""

        def attempt(now: float) -> Connection | Blocked:
            c = self._conn
            if c is None:                      # failed and reset by another thread
                raise os_error(errno.ECONNABORTED)
            if c.state in CONNECTING:
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
            return c is None or c.state not in CONNECTING

        return self._run(attempt, ready, eagain=errno.EALREADY)

    def _start_connect(self, ip: bytes | None, port: int, now: float, *, data: Any = None) -> Connection:
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
        no_cookie = self._options.tfo_no_cookie
        if data is not None:
            self._tfo_copied = tfo_connect(conn, data, now, no_cookie=no_cookie)   # sendto(MSG_FASTOPEN)
        elif self._options.tfo_connect and defer_connect(conn, now, no_cookie=no_cookie):
            self._tfo_deferred = True
        elif self._options.tfo_connect:
            tfo_connect(conn, b"", now, no_cookie=no_cookie)    # a cookie request
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


    def _send_ready(self, *, mark_nospace: bool = True) -> bool:
        conn = self._conn
        if conn is None or conn.error or conn.write_shutdown or self._early_shutdown & 2:
            return True
        if conn.state in CONNECTING:
            return False
        if conn.state not in (State.ESTABLISHED, State.CLOSE_WAIT):
            return True
        # Linux tcp_poll() / sk_stream_write_space(): writable once the free space is half of
        # what is queued; short of it, SOCK_NOSPACE lets the ACKs autotune the buffer.
        if conn.writable:
            return True
        if mark_nospace:
            conn.note_nospace()
        return False

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

    def dup(self) -> Self:
        """Another socket object for the same socket (as ``dup(2)``): the connection or
        listener closes when the last of them does. The handles share the socket as it is
        now; a later ``connect``/``listen`` on one is not seen by the other."""
        self._check_open()
        twin = type(self).__new__(type(self))
        twin.__dict__.update(self.__dict__)
        twin._io_refs = 0
        twin._close_pending = False
        twin._mirrored = False           # its own descriptors, made when asked for
        self._handles[0] += 1
        return twin

    def add_io_ref(self) -> None:
        """A :meth:`makefile` file now refers to this socket."""
        self._io_refs += 1

    def _decref_socketios(self) -> None:
        # The name socket.SocketIO calls when one of our files closes.
        if self._io_refs > 0:
            self._io_refs -= 1
        if self._close_pending and self._io_refs == 0:
            self.close()


    def __enter__(self) -> Self:
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

    def setsockopt(self, level: int, optname: int, value: int | str | bytes | bytearray | memoryview | None,
                   optlen: int | None = None) -> None:
        with self._host.driver.lock:
            self._check_open()
            conn = self._conn
            effect = self._options.set(level, optname, value, conn=conn, listener=self._listener)
            if effect and conn is not None and conn.is_synchronized and conn.state is not State.TIME_WAIT:
                # Let the change act now: push what e.g. TCP_NODELAY/uncork released (Linux
                # tcp_push_pending_frames), re-arm keepalive and hand the new deadlines to the stack.
                conn.options_changed(self._host.driver.now())
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
            if level == IPPROTO_TCP and optname == TCP_PRELOAD:
                data = self._listener.preload if self._listener is not None else b""
                return data[:buflen] if buflen else data
            if level == SOL_SOCKET and optname == SO_LINGER and buflen:
                return struct.pack("ii", *self._options.linger)[:buflen]
            v = self._options.get(level, optname, conn=self._conn, listener=self._listener)
        return struct.pack("i", v)[:buflen] if buflen else v

    def tcp_info(self) -> dict[str, Any]:
        """Linux ``struct tcp_info`` as a dict of tcpi_* fields (plus the controller's name)."""
        with self._host.driver.lock:
            self._check_open()
            return tcp_info(self._conn, self._listener)


