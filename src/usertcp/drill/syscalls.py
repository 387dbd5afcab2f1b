"""A Linux system-call shim over the usertcp core, in packetdrill's fd/errno model.

Every call is a generator: it ``yield``\\ s a wake-up deadline (or None) while it would block
and returns the call's result; errors raise :class:`SysError` (the errno), a mismatch of an
expected output value (``getsockopt(..., [1100], ...)``, poll revents, read contents) raises
:class:`Mismatch`.  The runner drives the generators (see :mod:`usertcp.drill.runner`), so a
blocking call can stay pending in virtual time while later script events run.

Non-blocking sockets never yield.  Linux semantics reproduced: lowest free fd from 3, SO_SNDBUF /
SO_RCVBUF doubled, options set on a listener inherited by accepted sockets, a pending socket error
reported once (then EPIPE / 0), connect() EINPROGRESS / EALREADY / EISCONN, connect(AF_UNSPEC)
disconnects, SO_LINGER {1, 0} resets on close.
"""

from __future__ import annotations

import errno
import struct
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol

from usertcp.api.ioctl import TCP_IOCTLS, tcp_ioctl
from usertcp.api.sockopts import Effect, SocketOptions, take_error
from usertcp.drill.ast import BinOr, Call, EllipsisExpr, Expr, Int, List, String, Struct, Symbol
from usertcp.drill.cmsg import check_recv_control, recv_control
from usertcp.drill.defaults import SYMBOLS, UNSUPPORTED_SYMBOLS
from usertcp.drill.epoll import EpollCalls
from usertcp.drill.errqueue import SendNotes, recv_errqueue
from usertcp.drill.files import FileCalls
from usertcp.drill.profile import Environment, Unsupported
from usertcp.tcp import fastopen, fastopen_client
from usertcp.tcp.connection import Connection, State
from usertcp.tcp.stack import Listener, Stack

__all__ = [
    "SUPPORTED_SOCKOPTS",
    "SUPPORTED_SYSCALLS",
    "Host",
    "Mismatch",
    "Sock",
    "SysError",
    "SyscallGen",
    "Syscalls",
]

SyscallGen = Generator[float | None, None, int]

# Linux sock->state of a stream socket (include/uapi/linux/net.h socket_state).
SS_UNCONNECTED, SS_CONNECTING, SS_CONNECTED = 1, 2, 3

S = SYMBOLS

# (level, optname) pairs the shim implements for setsockopt / getsockopt.
SUPPORTED_SOCKOPTS: frozenset[tuple[str, str]] = frozenset(
    [("SOL_SOCKET", n) for n in ("SO_REUSEADDR", "SO_REUSEPORT", "SO_KEEPALIVE", "SO_SNDBUF", "SO_RCVBUF",
                                 "SO_LINGER", "SO_ERROR", "SO_TYPE", "SO_ACCEPTCONN", "SO_ZEROCOPY",
                                 "SO_TIMESTAMPING", "SO_MARK", "SO_SNDBUFFORCE", "SO_RCVBUFFORCE")]
    + [(lvl, n) for lvl in ("SOL_TCP", "IPPROTO_TCP") for n in (
        "TCP_NODELAY", "TCP_CORK", "TCP_MAXSEG", "TCP_USER_TIMEOUT", "TCP_KEEPIDLE", "TCP_KEEPINTVL",
        "TCP_KEEPCNT", "TCP_FASTOPEN", "TCP_FASTOPEN_KEY", "TCP_FASTOPEN_CONNECT", "TCP_FASTOPEN_NO_COOKIE",
        "TCP_MD5SIG", "TCP_MD5SIG_EXT", "TCP_NOTSENT_LOWAT", "TCP_INQ", "TCP_SYNCNT")]
    + [(lvl, n) for lvl in ("SOL_IP", "IPPROTO_IP") for n in ("IP_TOS", "IP_MTU_DISCOVER", "IP_FREEBIND")]
)  # fmt: skip

SUPPORTED_SYSCALLS = frozenset(
    [
        "socket",
        "bind",
        "listen",
        "accept",
        "accept4",
        "connect",
        "write",
        "send",
        "sendto",
        "sendmsg",
        "writev",
        "read",
        "recv",
        "recvfrom",
        "recvmsg",
        "readv",
        "shutdown",
        "close",
        "setsockopt",
        "getsockopt",
        "fcntl",
        "ioctl",
        "poll",
        # drill/epoll.py
        "epoll_create",
        "epoll_create1",
        "epoll_ctl",
        "epoll_wait",
        "epoll_pwait",
        # drill/files.py
        "open",
        "pipe",
        "pipe2",
        "sendfile",
        "splice",
    ]
)


class SysError(Exception):
    def __init__(self, err: int, detail: str = "") -> None:
        super().__init__(errno.errorcode.get(err, str(err)) + (f": {detail}" if detail else ""))
        self.errno = err


class Mismatch(Exception):
    """An output value of the call differs from what the script expects."""


class Host(Protocol):
    """What the shim needs from the runner."""

    @property
    def stack(self) -> Stack: ...

    local_ip: str
    remote_ip: str
    bind_port: int
    connect_port: int
    md5_key: bytes | None
    tol_us: int        # the script's timing tolerance (times reported by calls are checked too)
    tol_pct: float
    env: Environment   # the script's commands (its scratch files)

    def now(self) -> float: ...
    def flush(self) -> None: ...
    def on_listen(self, sock: Sock) -> None: ...
    def on_connect(self, sock: Sock) -> None: ...
    def on_accept(self, sock: Sock) -> None: ...


@dataclass(eq=False)
class Sock:
    fd: int
    family: int
    options: SocketOptions  # the socket options, with the socket API's semantics (one home)
    nonblocking: bool = False
    bound: tuple[str, int] | None = None
    listener: Listener | None = None
    conn: Connection | None = None
    deferred_connect: bool = False  # TCP_FASTOPEN_CONNECT: connect() returned, SYN not sent
    sock_state: int = SS_UNCONNECTED  # Linux sock->state (SS_*)


# ----------------------------------------------------------------------------- expressions


def value(expr: Expr) -> int:
    """An integer argument: literals, symbols, ``A|B``, ``[n]``, ``htons(n)``."""
    if isinstance(expr, Int):
        return expr.value
    if isinstance(expr, Symbol):
        if expr.name in UNSUPPORTED_SYMBOLS:
            raise Unsupported(f"{expr.name}: {UNSUPPORTED_SYMBOLS[expr.name]}")
        if expr.name not in SYMBOLS:
            raise Unsupported(f"unknown symbol {expr.name}")
        return SYMBOLS[expr.name]
    if isinstance(expr, BinOr):
        return value(expr.left) | value(expr.right)
    if isinstance(expr, List) and len(expr.items) == 1:
        return value(expr.items[0])
    if isinstance(expr, Call) and expr.name in ("htons", "ntohs", "htonl", "ntohl") and len(expr.args) == 1:
        return value(expr.args[0])
    raise Unsupported(f"cannot evaluate {expr!r} as an integer")


def _ellipsis(expr: Expr) -> bool:
    return isinstance(expr, EllipsisExpr)


def _sockaddr(expr: Expr, default_ip: str, default_port: int) -> tuple[int | None, str, int]:
    """(family or None for ``...``, ip, port) of a sockaddr argument."""
    if _ellipsis(expr):
        return None, default_ip, default_port
    if not isinstance(expr, Struct):
        raise Unsupported(f"sockaddr form not supported: {expr!r}")
    fields = expr.named()
    fam = value(fields["sa_family"].value) if "sa_family" in fields else None
    port = default_port
    ip = default_ip
    for name in ("sin_port", "sin6_port"):
        if name in fields:
            port = value(fields[name].value)
    for name in ("sin_addr", "sin6_addr"):
        if name in fields:
            v = fields[name].value
            if isinstance(v, Call) and v.args and isinstance(v.args[-1], String):
                ip = v.args[-1].value.decode()
            elif isinstance(v, String):
                ip = v.value.decode()
            else:
                raise Unsupported(f"address form not supported: {v!r}")
    return fam, ip, port


def _buffer(expr: Expr, length: int) -> bytes:
    """Data to send: ``...`` is zeros (packetdrill callocs), a string is sent as is."""
    if isinstance(expr, String):
        data = expr.value
        if len(data) < length:
            data += bytes(length - len(data))
        return data[:length]
    return bytes(length)


def _user_buffer(expr: Expr, length: int) -> bytes | None:
    """Data a send reads from user memory; None when the kernel's copy faults (EFAULT): a
    NULL pointer with a non-zero length (the syscall_bad_arg/ scripts)."""
    if length and _null(expr):
        return None
    return _buffer(expr, length)


def _null(expr: Expr) -> bool:
    return (isinstance(expr, Symbol) and expr.name == "NULL") or (isinstance(expr, Int) and expr.value == 0)


def _unspec(expr: Expr) -> bool:
    """An address of family AF_UNSPEC: the bare constant, or a struct with sa_family=AF_UNSPEC."""
    if isinstance(expr, Symbol | Int):
        return value(expr) == S["AF_UNSPEC"]
    return isinstance(expr, Struct) and "sa_family" in expr.named() \
        and value(expr.named()["sa_family"].value) == S["AF_UNSPEC"]


def _iov(expr: Expr) -> list[tuple[Expr, int]]:
    if not isinstance(expr, List):
        raise Unsupported(f"iovec form not supported: {expr!r}")
    out = []
    for item in expr.items:
        if not isinstance(item, Struct):
            raise Unsupported(f"iovec form not supported: {item!r}")
        pos = item.positional()
        named = item.named()
        base = named["iov_base"].value if "iov_base" in named else (pos[0] if pos else EllipsisExpr())
        ln = named["iov_len"].value if "iov_len" in named else pos[-1]
        out.append((base, value(ln)))
    return out


# ----------------------------------------------------------------------------- the shim


class Syscalls:
    def __init__(self, host: Host) -> None:
        self.host = host
        self.fds: dict[int, Sock] = {}
        self.last_sock: Sock | None = None
        self.fd_hint: int | None = None  # packetdrill: the script's expected result names the new fd
        # Sockets whose script fd a newer socket took (packetdrill maps script fds to live fds
        # and finds the newest first): still open, no longer reachable from the script.
        self.shadowed: list[Sock] = []
        # Other open files (epoll instances, pipes, regular files): same fd space as sockets.
        self.files: dict[int, object] = {}
        self._calls: tuple[object, ...] = (EpollCalls(self), FileCalls(self))

    # The stack the host runs; looked up each time (it is created after the init command).
    @property
    def stack(self) -> Stack:
        return self.host.stack

    def start(self, name: str, args: list[Expr]) -> SyscallGen:
        handler: Callable[[list[Expr]], SyscallGen] | None = getattr(self, "sys_" + name, None)
        for calls in self._calls:
            handler = handler or getattr(calls, "sys_" + name, None)
        if handler is None:
            raise Unsupported(f"system call {name}() not emulated")
        return handler(args)

    def _sock(self, expr: Expr) -> Sock:
        fd = value(expr)
        sock = self.fds.get(fd)
        if sock is None:
            raise SysError(errno.ENOTSOCK if fd in self.files else errno.EBADF)
        return sock

    def new_file(self, obj: object) -> int:
        """Give a non-socket file the lowest free fd."""
        fd = self._new_fd()
        self.files[fd] = obj
        return fd

    def _new_fd(self) -> int:
        hint, self.fd_hint = self.fd_hint, None
        if hint is not None and hint >= 0:
            old = self.fds.pop(hint, None)
            if old is not None:
                self.shadowed.append(old)
            return hint
        fd = 3
        while fd in self.fds or fd in self.files:
            fd += 1
        return fd

    # ---------------------------------------------------------------- lifecycle

    def sys_socket(self, args: list[Expr]) -> SyscallGen:
        v6 = ":" in self.host.local_ip
        family = S["AF_INET6"] if v6 else S["AF_INET"]
        if not _ellipsis(args[0]):
            family = value(args[0])
            if family not in (S["AF_INET"], S["AF_INET6"]):
                raise SysError(errno.EAFNOSUPPORT)
        kind = value(args[1])
        if kind & 0xF != S["SOCK_STREAM"]:
            raise Unsupported("only SOCK_STREAM sockets are emulated")
        if len(args) > 2 and not _ellipsis(args[2]) and value(args[2]) not in (0, S["IPPROTO_TCP"]):
            raise SysError(errno.EPROTONOSUPPORT)   # inet_create: no such protocol for the type
        sock = Sock(self._new_fd(), family, SocketOptions(self.stack.config),
                    nonblocking=bool(kind & S["SOCK_NONBLOCK"]))
        self.fds[sock.fd] = sock
        self.last_sock = sock
        return sock.fd
        yield  # pragma: no cover

    def sys_bind(self, args: list[Expr]) -> SyscallGen:
        sock = self._sock(args[0])
        if sock.bound is not None:
            raise SysError(errno.EINVAL)
        _fam, ip, port = _sockaddr(args[1], self.host.local_ip, self.host.bind_port)
        for other in [*self.fds.values(), *self.shadowed]:
            if (
                other is not sock
                and other.bound
                and other.bound[1] == port
                and not (_reuse(other) and _reuse(sock) and other.listener is None)
            ):
                raise SysError(errno.EADDRINUSE)
        sock.bound = (ip, port)
        return 0
        yield  # pragma: no cover

    def sys_listen(self, args: list[Expr]) -> SyscallGen:
        sock = self._sock(args[0])
        backlog = value(args[1])
        if sock.conn is not None:
            raise SysError(errno.EINVAL)
        if sock.listener is None:
            ip, port = sock.bound or (self.host.local_ip, 0)
            try:
                lst = self.stack.listen(port, address=ip, backlog=backlog)
            except OSError as exc:
                raise SysError(exc.errno or errno.EINVAL) from exc
            sock.listener = lst
            self._apply_listener(sock)
        self.host.on_listen(sock)
        return 0
        yield  # pragma: no cover

    def _apply_listener(self, sock: Sock) -> None:
        lst = sock.listener
        if lst is None:
            return
        sock.options.apply_to_listener(lst)

    def sys_accept(self, args: list[Expr]) -> SyscallGen:
        sock = self._sock(args[0])
        lst = sock.listener
        if lst is None:
            raise SysError(errno.EINVAL)
        while True:
            conn = lst.accept()
            if conn is not None:
                child = Sock(
                    self._new_fd(),
                    sock.family,
                    sock.options.inherit(),    # Linux sk_clone_lock
                    bound=sock.bound,
                    conn=conn,
                    sock_state=SS_CONNECTED,   # inet_accept
                )
                self.fds[child.fd] = child
                self.last_sock = child
                self.host.on_accept(child)
                return child.fd
            if sock.nonblocking:
                raise SysError(errno.EAGAIN)
            yield None

    sys_accept4 = sys_accept

    def sys_connect(self, args: list[Expr]) -> SyscallGen:
        sock = self._sock(args[0])
        fam, ip, port = _sockaddr(args[1], self.host.remote_ip, self.host.connect_port)
        now = self.host.now()
        if fam == S["AF_UNSPEC"]:
            # tcp_disconnect(): abort whatever is there (a listener stops listening,
            # inet_csk_listen_stop); the socket can connect (or listen) again.
            if sock.listener is not None:
                sock.listener.close(now)
                sock.listener = None
            if sock.conn is not None:
                sock.conn.abort(now)
            self.host.flush()
            sock.conn = None
            sock.deferred_connect = False
            sock.sock_state = SS_UNCONNECTED
            return 0
        if sock.listener is not None:
            raise SysError(errno.EINVAL)
        # Linux __inet_stream_connect, by sock->state.
        if sock.sock_state == SS_CONNECTED:
            raise SysError(errno.EISCONN)
        if sock.sock_state == SS_CONNECTING:
            if sock.deferred_connect:
                raise SysError(errno.EISCONN)
            err = errno.EALREADY
        else:
            conn = self._new_conn(sock, ip, port)
            sock.sock_state = SS_CONNECTING
            no_cookie = sock.options.tfo_no_cookie
            if sock.options.tfo_connect and fastopen.defer_connect(conn, now, no_cookie=no_cookie):
                sock.deferred_connect = True  # Linux defers the SYN to the first write
                self.host.on_connect(sock)
                return 0
            try:
                if sock.options.tfo_connect:
                    fastopen.tfo_connect(conn, b"", now, no_cookie=no_cookie)   # a cookie request
                else:
                    self.stack.connect(conn, now)
            except OSError as exc:
                raise SysError(exc.errno or errno.EINVAL) from exc
            self.host.on_connect(sock)
            self.host.flush()
            err = errno.EINPROGRESS
        return (yield from self._connect_wait(sock, err, sock.nonblocking))

    def _new_conn(self, sock: Sock, ip: str, port: int) -> Connection:
        """A connection for an unconnected socket (tcp_v4_connect's part before the SYN)."""
        lip, lport = sock.bound or (self.host.local_ip, 0)
        try:
            conn = self.stack.create_connection(ip, port, local=lip, local_port=lport)
        except OSError as exc:
            raise SysError(exc.errno or errno.EINVAL) from exc
        self._apply_conn(sock, conn)
        sock.conn = conn
        self.last_sock = sock
        return conn

    def _connect_wait(self, sock: Sock, err: int, nonblocking: bool, writer: bool = False) -> SyscallGen:
        """The end of __inet_stream_connect: wait out the handshake (or fail with ``err`` if
        non-blocking); a failed connection reports its error and leaves the socket unconnected.
        ``writer``: data waits to be written (inet_wait_for_connect's writebias)."""
        conn = sock.conn
        assert conn is not None
        if conn.state in (State.SYN_SENT, State.SYN_RECEIVED):
            if nonblocking:
                raise SysError(err)
            if writer:
                conn.writer_waits(True)
            try:
                while conn.state in (State.SYN_SENT, State.SYN_RECEIVED) and not conn.error:
                    yield None
            finally:
                if writer:
                    conn.writer_waits(False)
        if conn.state is State.CLOSED:
            sock.sock_state = SS_UNCONNECTED
            raise SysError(take_error(conn) or errno.ECONNABORTED)
        sock.sock_state = SS_CONNECTED
        return 0

    def _apply_conn(self, sock: Sock, conn: Connection) -> None:
        sock.options.apply_to_connection(conn)

    def sys_close(self, args: list[Expr]) -> SyscallGen:
        if self.files.pop(value(args[0]), None) is not None:
            return 0
        sock = self._sock(args[0])
        now = self.host.now()
        del self.fds[sock.fd]
        if sock.listener is not None:
            sock.listener.close(now)
        if sock.conn is not None:
            if sock.deferred_connect:
                sock.conn = None
            else:
                sock.conn.close(now)
        self.host.flush()
        return 0
        yield  # pragma: no cover

    def sys_shutdown(self, args: list[Expr]) -> SyscallGen:
        sock = self._sock(args[0])
        how = value(args[1])
        if how not in (0, 1, 2):
            raise SysError(errno.EINVAL)
        conn = sock.conn
        if conn is None or conn.state in (State.CLOSED, State.LISTEN) or sock.deferred_connect:
            if sock.listener is not None and how != 1:
                return 0  # Linux: shutdown(SHUT_RD) of a listener stops it listening; not modelled
            raise SysError(errno.ENOTCONN)
        conn.shutdown(how in (0, 2), how in (1, 2), self.host.now())
        self.host.flush()
        return 0
        yield  # pragma: no cover

    # ---------------------------------------------------------------- data

    def _send(self, sock: Sock, data: bytes | None, flags: int, addr: Expr | None = None) -> SyscallGen:
        """tcp_sendmsg_locked; ``data`` None is a buffer the kernel cannot read (EFAULT)."""
        notes = SendNotes(sock, flags) if sock.conn is not None else None   # MSG_ZEROCOPY, timestamps
        try:
            return (yield from self._send_data(sock, data, flags, addr))
        finally:
            if notes is not None:
                notes.finish(sock)

    def _send_data(self, sock: Sock, data: bytes | None, flags: int, addr: Expr | None) -> SyscallGen:
        if flags & S["MSG_PRELOAD"]:
            # Listener preload: appended to what goes out on every later passive connection,
            # sent by the stack itself (after the 3rd ACK, or in a fast-open SYN-ACK).
            lst = sock.listener
            if lst is None or lst.closed:
                raise SysError(errno.EINVAL)
            if data is None:
                raise SysError(errno.EFAULT)
            try:
                lst.append_preload(data, self.host.now())
            except OSError as exc:
                raise SysError(exc.errno or errno.EINVAL) from exc
            return len(data)
        more = bool(flags & S["MSG_MORE"])
        eor = bool(flags & S["MSG_EOR"])
        nonblocking = sock.nonblocking or bool(flags & S["MSG_DONTWAIT"])
        total = 0
        if flags & S["MSG_FASTOPEN"] or sock.deferred_connect:
            total, done = yield from self._sendmsg_fastopen(sock, data, addr, nonblocking)
            if done:
                return total       # EINPROGRESS with data in the SYN: the SYN's bytes count
        conn = sock.conn
        asleep = -1  # the socket's wake-up count when this writer went to sleep
        while True:
            if conn is None:
                if sock.options.error:
                    err, sock.options.error = sock.options.error, 0
                    raise SysError(err)
                raise SysError(errno.EPIPE)
            if conn.error:
                raise SysError(take_error(conn))
            if conn.write_shutdown or conn.state not in (
                State.ESTABLISHED,
                State.CLOSE_WAIT,
                State.SYN_SENT,
                State.SYN_RECEIVED,
            ):
                raise SysError(errno.EPIPE)
            if conn.state is State.SYN_SENT or (conn.state is State.SYN_RECEIVED and not conn.passive):
                # sk_stream_wait_connect: only a passive fast-open child sends before ESTABLISHED.
                if nonblocking:
                    if total:
                        return total
                    raise SysError(errno.EAGAIN)
                conn.writer_waits(True)        # sk_stream_wait_connect
                try:
                    yield None
                finally:
                    conn.writer_waits(False)
                continue
            if data is None:
                raise SysError(errno.EFAULT)   # the copy from user memory failed
            if asleep >= 0:
                # Linux sk_stream_wait_memory(): sleep until woken (sk_stream_write_space once
                # writable, or any other wake-up), then go on if sk_stream_memory_free().
                if conn.sk_wakeups == asleep or not conn.memory_free:
                    asleep = conn.sk_wakeups
                    conn.note_nospace()
                    yield None
                    continue
                asleep = -1
            try:
                n = conn.send(data[total:], self.host.now(), more=more, eor=eor,
                              tstamp=2 if nonblocking else 1)
            except OSError as exc:
                raise SysError(exc.errno or errno.EPIPE) from exc
            if n and not conn.is_synchronized:
                conn.output(self.host.now())  # a TFO child may send in SYN-RECEIVED
            self.host.flush()
            total += n
            if total >= len(data):
                return total
            conn.note_nospace()  # tcp_sendmsg_locked wait_for_space: SOCK_NOSPACE
            if nonblocking:
                if total:
                    return total
                raise SysError(errno.EAGAIN)
            asleep = conn.sk_wakeups
            yield None

    def _sendmsg_fastopen(self, sock: Sock, data: bytes | None, addr: Expr | None, nonblocking: bool
                          ) -> Generator[float | None, None, tuple[int, bool]]:
        """tcp_sendmsg_fastopen then __inet_stream_connect(is_sendmsg): connect with what the SYN
        may carry of ``data``. Returns (bytes the SYN took, True if the call ends there)."""
        if not fastopen_client.client_enabled(self.stack) or (addr is not None and _unspec(addr)):
            raise SysError(errno.EOPNOTSUPP)
        now = self.host.now()
        no_cookie = sock.options.tfo_no_cookie
        copied = 0
        if sock.deferred_connect and sock.conn is not None:
            sock.deferred_connect = False
            copied = fastopen.tfo_connect(sock.conn, data, now, no_cookie=no_cookie)
            self.host.on_connect(sock)
            self.host.flush()
            err = errno.EINPROGRESS
        elif sock.sock_state == SS_CONNECTED:
            raise SysError(errno.EISCONN)
        elif sock.sock_state == SS_CONNECTING:
            err = errno.EALREADY
        else:
            _fam, ip, port = _sockaddr(addr if addr is not None else EllipsisExpr(), self.host.remote_ip,
                                       self.host.connect_port)
            conn = self._new_conn(sock, ip, port)
            sock.sock_state = SS_CONNECTING
            copied = fastopen.tfo_connect(conn, data, now, no_cookie=no_cookie)
            self.host.on_connect(sock)
            self.host.flush()
            err = errno.EINPROGRESS
        try:
            yield from self._connect_wait(sock, err, nonblocking, writer=data is None or copied < len(data))
        except SysError as exc:
            if exc.errno == errno.EINPROGRESS and copied:
                return copied, True
            raise
        return copied, False

    def sys_write(self, args: list[Expr]) -> SyscallGen:
        sock = self._sock(args[0])
        return (yield from self._send(sock, _user_buffer(args[1], value(args[2])), 0))

    def send_bytes(self, sock: Sock, data: bytes, flags: int) -> SyscallGen:
        """A write of ``data`` with send flags (sendfile's path into the socket)."""
        return (yield from self._send(sock, data, flags))

    def sys_send(self, args: list[Expr]) -> SyscallGen:
        sock = self._sock(args[0])
        return (yield from self._send(sock, _user_buffer(args[1], value(args[2])), value(args[3])))

    def sys_sendto(self, args: list[Expr]) -> SyscallGen:
        sock = self._sock(args[0])
        data = _user_buffer(args[1], value(args[2]))
        return (yield from self._send(sock, data, value(args[3]), args[4] if len(args) > 4 else None))

    def sys_sendmsg(self, args: list[Expr]) -> SyscallGen:
        sock = self._sock(args[0])
        msg = args[1]
        if not isinstance(msg, Struct):
            raise Unsupported("sendmsg() needs a msghdr struct")
        named = msg.named()
        if "msg_control" in named:
            raise Unsupported("sendmsg() control messages not emulated")
        iov = _iov(named["msg_iov"].value) if "msg_iov" in named else []
        parts = [_user_buffer(base, ln) for base, ln in iov]
        data = None if None in parts else b"".join(p for p in parts if p is not None)
        addr = named["msg_name"].value if "msg_name" in named else None
        return (yield from self._send(sock, data, value(args[2]), addr))

    def sys_writev(self, args: list[Expr]) -> SyscallGen:
        sock = self._sock(args[0])
        data = b"".join(_buffer(base, ln) for base, ln in _iov(args[1]))
        return (yield from self._send(sock, data, 0))

    def _recv(self, sock: Sock, want: Expr, n: int, flags: int) -> SyscallGen:
        nonblocking = sock.nonblocking or bool(flags & S["MSG_DONTWAIT"])
        peek = bool(flags & S["MSG_PEEK"])
        while True:
            conn = sock.conn
            if conn is None or sock.deferred_connect:
                if sock.options.error:
                    err, sock.options.error = sock.options.error, 0
                    raise SysError(err)
                raise SysError(errno.ENOTCONN)
            if conn.collector is not None:
                raise SysError(errno.EBUSY)
            if conn.readable_bytes:
                if n and _null(want):
                    raise SysError(errno.EFAULT)   # the copy to user memory failed: data stays
                if peek:
                    data = conn.rcv_buf.peek(0, min(n, conn.readable_bytes))
                else:
                    data = conn.recv(n, self.host.now())
                    self.host.flush()
                _check_contents(want, data)
                return len(data)
            if conn.error:
                raise SysError(take_error(conn))
            if conn.fin_received or conn.read_shutdown or conn.state is State.CLOSED:
                _check_contents(want, b"")
                return 0
            if conn.state is State.SYN_SENT and nonblocking:
                raise SysError(errno.EAGAIN)
            if nonblocking:
                raise SysError(errno.EAGAIN)
            yield None

    def sys_read(self, args: list[Expr]) -> SyscallGen:
        sock = self._sock(args[0])
        return (yield from self._recv(sock, args[1], value(args[2]), 0))

    def sys_recv(self, args: list[Expr]) -> SyscallGen:
        sock = self._sock(args[0])
        return (yield from self._recv(sock, args[1], value(args[2]), value(args[3])))

    sys_recvfrom = sys_recv

    def sys_recvmsg(self, args: list[Expr]) -> SyscallGen:
        sock = self._sock(args[0])
        msg = args[1]
        if not isinstance(msg, Struct) or "msg_iov" not in msg.named():
            raise Unsupported("recvmsg() needs a msghdr with msg_iov")
        flags = value(args[2])
        if flags & S["MSG_ERRQUEUE"]:
            return recv_errqueue(self.host, sock, msg)
        iov = _iov(msg.named()["msg_iov"].value)
        want: Expr = iov[0][0] if len(iov) == 1 else EllipsisExpr()
        n = yield from self._recv(sock, want, sum(ln for _b, ln in iov), flags)
        bad = check_recv_control(msg, recv_control(sock.options, sock.conn), value)   # TCP_CM_INQ
        if bad:
            raise Mismatch(bad)
        return n

    def sys_readv(self, args: list[Expr]) -> SyscallGen:
        sock = self._sock(args[0])
        iov = _iov(args[1])
        want: Expr = iov[0][0] if len(iov) == 1 else EllipsisExpr()
        return (yield from self._recv(sock, want, sum(ln for _b, ln in iov), 0))

    # ---------------------------------------------------------------- options

    def sys_setsockopt(self, args: list[Expr]) -> SyscallGen:
        sock = self._sock(args[0])
        level, name = _names(args[1], args[2])
        if (level, name) not in SUPPORTED_SOCKOPTS:
            raise Unsupported(f"setsockopt({level}, {name}) not emulated")
        arg = args[3]
        length = value(args[4]) if not _ellipsis(args[4]) else 4
        conn = sock.conn
        if name in ("TCP_MD5SIG", "TCP_MD5SIG_EXT") and _ellipsis(arg):
            # Our extension: the script's --md5_key for the remote address.
            if self.host.md5_key is None:
                raise Unsupported("setsockopt(TCP_MD5SIG, ...) needs --md5_key")
            raw: Any = None
        else:
            raw = _option_value(name, arg, length)
        try:
            if raw is None:
                sock.options.set_md5_key(self.host.remote_ip, self.host.md5_key or b"", None,
                                         conn=conn, listener=sock.listener)
                effect = Effect.NONE
            else:
                effect = sock.options.set(S[level], S[name], raw, conn=conn, listener=sock.listener)
        except OSError as exc:
            raise SysError(exc.errno or errno.EINVAL) from exc
        if effect is Effect.PUSH and conn is not None and conn.is_synchronized:
            conn.output(self.host.now())   # Linux tcp_push_pending_frames
            self.host.flush()
        return 0
        yield  # pragma: no cover

    def sys_getsockopt(self, args: list[Expr]) -> SyscallGen:
        sock = self._sock(args[0])
        level, name = _names(args[1], args[2])
        if (level, name) not in SUPPORTED_SOCKOPTS or name in (
            "TCP_FASTOPEN_KEY",
            "TCP_MD5SIG",
            "TCP_MD5SIG_EXT",
            "SO_LINGER",
        ):
            raise Unsupported(f"getsockopt({level}, {name}) not emulated")
        try:
            actual = sock.options.get(S[level], S[name], conn=sock.conn, listener=sock.listener)
        except OSError as exc:
            raise SysError(exc.errno or errno.EINVAL) from exc
        want = args[3]
        if not _ellipsis(want):
            expected = value(want)
            if (expected - actual) % (1 << 32):      # an int: [0xffffffff] reads as -1
                raise Mismatch(f"getsockopt({name}) value: expected {expected}, actual {actual}")
        return 0
        yield  # pragma: no cover

    def sys_fcntl(self, args: list[Expr]) -> SyscallGen:
        sock = self._sock(args[0])
        cmd = value(args[1])
        if cmd == S["F_GETFL"]:
            return S["O_RDWR"] | (S["O_NONBLOCK"] if sock.nonblocking else 0)
        if cmd == S["F_SETFL"]:
            sock.nonblocking = bool(value(args[2]) & S["O_NONBLOCK"])
            return 0
        if cmd in (S["F_GETFD"], S["F_SETFD"]):
            return 0
        raise Unsupported(f"fcntl command {cmd} not emulated")
        yield  # pragma: no cover

    def sys_ioctl(self, args: list[Expr]) -> SyscallGen:
        sock = self._sock(args[0])
        req = value(args[1])
        if req not in TCP_IOCTLS:
            raise Unsupported(f"ioctl request {req:#x} not emulated")
        try:
            actual = tcp_ioctl(sock.conn, req, listening=sock.listener is not None)
        except OSError as exc:
            raise SysError(exc.errno or errno.EINVAL) from exc
        if not _ellipsis(args[2]):
            expected = value(args[2])
            if expected != actual:
                raise Mismatch(f"ioctl value: expected {expected}, actual {actual}")
        return 0
        yield  # pragma: no cover

    # ---------------------------------------------------------------- poll

    def revents(self, sock: Sock | None, events: int) -> int:
        if sock is None:
            return S["POLLNVAL"]
        out = 0
        if sock.listener is not None:
            if sock.listener.accept_queue:
                out |= S["POLLIN"] | S["POLLRDNORM"]
            return out & (events | S["POLLERR"] | S["POLLHUP"])
        conn = sock.conn
        if conn is None:
            return S["POLLOUT"] | S["POLLHUP"] if events & S["POLLOUT"] else S["POLLHUP"]
        if sock.deferred_connect:
            # tcp_poll: a deferred TCP_FASTOPEN_CONNECT socket is writable (write() sends the SYN).
            return (S["POLLOUT"] | S["POLLWRNORM"]) & events
        if conn.error or conn.errqueue:
            out |= S["POLLERR"]             # tcp_poll: sk_err or a non-empty sk_error_queue
        closed = conn.state is State.CLOSED
        if closed or (conn.write_shutdown and (conn.fin_received or conn.read_shutdown)):
            out |= S["POLLHUP"]
        if conn.fin_received or conn.read_shutdown or closed:
            # tcp_done (reset, timeout) sets SHUTDOWN_MASK: readable (EOF or the error).
            out |= S["POLLIN"] | S["POLLRDNORM"] | S["POLLRDHUP"]
        if conn.readable_bytes:
            out |= S["POLLIN"] | S["POLLRDNORM"]
        if (
            not closed
            and not conn.write_shutdown
            and conn.state not in (State.SYN_SENT, State.SYN_RECEIVED)
            and self._poll_writable(conn)
        ) or closed:
            out |= S["POLLOUT"] | S["POLLWRNORM"]
        return out & (events | S["POLLERR"] | S["POLLHUP"] | S["POLLNVAL"])

    @staticmethod
    def _poll_writable(conn: Connection) -> bool:
        """Linux tcp_poll(): POLLOUT when __sk_stream_is_writeable(), else SOCK_NOSPACE so the
        next ACK that frees enough space wakes the poller (tcp_check_space)."""
        if conn.writable:
            return True
        conn.note_nospace()
        return False

    def sys_poll(self, args: list[Expr]) -> SyscallGen:
        fds = args[0]
        if not isinstance(fds, List):
            raise Unsupported("poll() needs a pollfd array")
        entries: list[tuple[int, int, int | None]] = []
        for item in fds.items:
            if not isinstance(item, Struct):
                raise Unsupported("poll() needs {fd=..., events=...} entries")
            fd = value(item.get("fd") or Int(-1, "-1"))
            events = value(item.get("events") or Int(0, "0"))
            rv = item.get("revents")
            entries.append((fd, events, None if rv is None else value(rv)))
        timeout_ms = value(args[2])
        deadline = None if timeout_ms < 0 else self.host.now() + timeout_ms / 1000.0
        while True:
            got = [self.revents(self.fds.get(fd), ev) for fd, ev, _ in entries]
            ready = sum(1 for r in got if r)
            if ready or (deadline is not None and self.host.now() >= deadline):
                for (fd, _ev, want), actual in zip(entries, got, strict=True):
                    if want is not None and want != actual:
                        raise Mismatch(f"poll() revents of fd {fd}: expected {want:#x}, actual {actual:#x}")
                return ready
            yield deadline


def _reuse(sock: Sock) -> bool:
    """SO_REUSEADDR or SO_REUSEPORT: packetdrill's bind() treats both as a shared port."""
    return sock.options.reuseaddr or sock.options.reuseport


def _option_value(name: str, arg: Expr, length: int) -> Any:
    """A setsockopt argument as the option module takes it: an int, or the struct's bytes."""
    if name == "SO_LINGER":
        if not isinstance(arg, Struct):
            raise Unsupported("SO_LINGER needs {onoff=..., linger=...}")
        fields = (arg.get("onoff") or Int(0, "0"), arg.get("linger") or Int(0, "0"))
        return struct.pack("ii", *(value(v) for v in fields))
    if name == "TCP_FASTOPEN_KEY":
        key = arg.value if isinstance(arg, String) else b""
        return key[:length] + bytes(max(0, length - len(key)))   # the optlen counts
    if name in ("TCP_MD5SIG", "TCP_MD5SIG_EXT"):
        if not isinstance(arg, String):
            raise Unsupported("TCP_MD5SIG value must be ... or struct tcp_md5sig bytes")
        return arg.value
    return value(arg)


def _names(level: Expr, name: Expr) -> tuple[str, str]:
    if not isinstance(level, Symbol) or not isinstance(name, Symbol):
        raise Unsupported("socket option level and name must be symbolic")
    return level.name, name.name


def _check_contents(want: Expr, data: bytes) -> None:
    """Our extension: a string buffer argument of read()/recv() is the data expected."""
    if isinstance(want, String):
        expected = want.value
        if want.ellipsis:
            ok = data.startswith(expected)
        else:
            ok = data == expected
        if not ok:
            raise Mismatch(
                f"data read: expected {expected!r}{'...' if want.ellipsis else ''}, actual {data!r}"
            )
