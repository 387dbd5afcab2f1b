"""A Linux system-call shim over the usertcp core, in packetdrill's fd/errno model.

Every call is a generator: it ``yield``\\ s a wake-up deadline (or None) while it would block
and returns the call's result; errors raise :class:`SysError` (the errno), a mismatch of an
expected output value (``getsockopt(..., [1100], ...)``, poll revents, read contents) raises
:class:`Mismatch`.  The runner drives the generators (see :mod:`usertcp.drill.runner`), so a
blocking call can stay pending in virtual time while later script events run.

This module owns the fd table (lowest free fd from 3, shared by sockets and other files) and
``poll``; the calls live by family: :mod:`~usertcp.drill.lifecycle` (socket, bind, listen,
accept, connect, close, shutdown), :mod:`~usertcp.drill.transfer` (send and receive),
:mod:`~usertcp.drill.sockopt_calls` (setsockopt, getsockopt, fcntl, ioctl),
:mod:`~usertcp.drill.epoll` and :mod:`~usertcp.drill.files` (open, pipe, sendfile, splice).
Non-blocking sockets never yield.
"""

from __future__ import annotations

import errno
from collections.abc import Callable

from usertcp.drill.ast import Expr, Int, List, Struct
from usertcp.drill.defaults import SYMBOLS
from usertcp.drill.epoll import EpollCalls
from usertcp.drill.fdtable import FIRST_FD, ScriptFds
from usertcp.drill.files import FileCalls
from usertcp.drill.lifecycle import LifecycleCalls
from usertcp.drill.profile import Unsupported
from usertcp.drill.sockopt_calls import SUPPORTED_SOCKOPTS, OptionCalls
from usertcp.drill.sysargs import value
from usertcp.drill.sysbase import Host, Mismatch, Sock, SyscallGen, SysError
from usertcp.drill.transfer import TransferCalls
from usertcp.tcp.connection import Connection, State
from usertcp.tcp.stack import Stack

__all__ = [
    "FD_RESULT_CALLS",
    "SUPPORTED_SOCKOPTS",
    "SUPPORTED_SYSCALLS",
    "Host",
    "Mismatch",
    "Sock",
    "SysError",
    "SyscallGen",
    "Syscalls",
    "value",
]

# Calls whose result is a new descriptor: packetdrill checks it with CHECK_FD (drill/fdtable.py).
FD_RESULT_CALLS = frozenset(["socket", "accept", "accept4", "epoll_create", "epoll_create1", "open"])

S = SYMBOLS

SUPPORTED_SYSCALLS = frozenset(
    [
        # drill/lifecycle.py
        "socket",
        "bind",
        "listen",
        "accept",
        "accept4",
        "connect",
        "shutdown",
        "close",
        # drill/transfer.py
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
        # drill/sockopt_calls.py
        "setsockopt",
        "getsockopt",
        "fcntl",
        "ioctl",
        # here
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


class Syscalls:
    def __init__(self, host: Host) -> None:
        self.host = host
        # Live descriptors (the kernel's numbers, see drill/fdtable.py): sockets, and other
        # open files (epoll instances, pipes, regular files) in the same number space.
        self.fds: dict[int, Sock] = {}
        self.files: dict[int, object] = {}
        self.script_fds = ScriptFds()   # the script's numbers for them
        self.last_sock: Sock | None = None
        self.fd_hint: int | None = None  # packetdrill: the script's expected result names the new fd
        self.lifecycle = LifecycleCalls(self)
        self.transfer = TransferCalls(self)
        self._calls: tuple[object, ...] = (self.lifecycle, self.transfer, OptionCalls(self),
                                           EpollCalls(self), FileCalls(self))

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

    # ---------------------------------------------------------------- the fd table

    def live_fd(self, expr: Expr) -> int:
        """The live descriptor a script fd argument names (-1 for none: EBADF)."""
        return self.script_fds.live(value(expr))

    def sock(self, expr: Expr) -> Sock:
        """The socket an fd argument names (ENOTSOCK for another file, EBADF for none)."""
        fd = self.live_fd(expr)
        sock = self.fds.get(fd)
        if sock is None:
            raise SysError(errno.ENOTSOCK if fd in self.files else errno.EBADF)
        return sock

    def new_fd(self) -> int:
        """alloc_fd(): the lowest free descriptor."""
        fd = FIRST_FD
        while fd in self.fds or fd in self.files:
            fd += 1
        return fd

    def add_sock(self, sock: Sock) -> int:
        """Install a new socket at its descriptor; returns the script's number for it."""
        self.fds[sock.fd] = sock
        return self._name(sock.fd, None)

    def new_file(self, obj: object, script_fd: int | None = None) -> int:
        """Give a non-socket file the lowest free descriptor; returns the script's number for
        it (``script_fd``, else the call's expected result)."""
        fd = self.new_fd()
        self.files[fd] = obj
        return self._name(fd, script_fd)

    def _name(self, live: int, script_fd: int | None) -> int:
        """CHECK_FD: the new descriptor passes as the number the script expects, which names
        it from now on (with no such number, its own)."""
        hint, self.fd_hint = self.fd_hint, None
        if script_fd is None:
            script_fd = hint if hint is not None and hint >= 0 else live
        self.script_fds.name(live, script_fd)
        return script_fd

    def close_fd(self, live: int) -> object | None:
        """Close a live descriptor: the socket or file it held (None if it held nothing)."""
        obj: object | None = self.fds.pop(live, None)
        if obj is None:
            obj = self.files.pop(live, None)
        if obj is not None:
            self.script_fds.forget(live)
        return obj

    def send_bytes(self, sock: Sock, data: bytes, flags: int) -> SyscallGen:
        """A write of ``data`` with send flags (sendfile's path into the socket)."""
        return (yield from self.transfer.send(sock, data, flags))

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
        if conn.rx.urgent.readable(conn):      # a lone urgent byte at the mark does not count
            out |= S["POLLIN"] | S["POLLRDNORM"]
        if conn.rx.urgent.pollpri:             # tcp_poll: the urgent byte is held
            out |= S["POLLPRI"]
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
            got = [self.revents(self.fds.get(self.script_fds.live(fd)), ev) for fd, ev, _ in entries]
            ready = sum(1 for r in got if r)
            if ready or (deadline is not None and self.host.now() >= deadline):
                for (fd, _ev, want), actual in zip(entries, got, strict=True):
                    if want is not None and want != actual:
                        raise Mismatch(f"poll() revents of fd {fd}: expected {want:#x}, actual {actual:#x}")
                return ready
            yield deadline
