"""The data calls of the drill shim: ``write``, ``send``, ``sendto``, ``sendmsg``, ``writev``
(``tcp_sendmsg_locked``, with MSG_FASTOPEN / TCP_FASTOPEN_CONNECT through
``tcp_sendmsg_fastopen`` and MSG_PRELOAD to a listener) and ``read``, ``recv``, ``recvfrom``,
``recvmsg``, ``readv`` (``tcp_recvmsg``, MSG_PEEK, MSG_ERRQUEUE, the TCP_INQ cmsg).

Non-blocking sockets never yield; a pending socket error is reported once (then EPIPE / 0).
"""

from __future__ import annotations

import errno
from collections.abc import Generator
from typing import TYPE_CHECKING

from usertcp.api.sockopts import take_error
from usertcp.drill.ast import EllipsisExpr, Expr, Struct
from usertcp.drill.cmsg import check_recv_control, recv_control
from usertcp.drill.defaults import SYMBOLS
from usertcp.drill.errqueue import SendNotes, recv_errqueue
from usertcp.drill.profile import Unsupported
from usertcp.drill.sysargs import (
    buffer,
    check_contents,
    iov,
    is_null,
    is_unspec,
    sockaddr,
    user_buffer,
    value,
)
from usertcp.drill.sysbase import SS_CONNECTED, SS_CONNECTING, Mismatch, Sock, SyscallGen, SysError
from usertcp.tcp import fastopen, fastopen_client
from usertcp.tcp.connection import Connection, State
from usertcp.tcp.zerocopy import regions_after

if TYPE_CHECKING:
    from usertcp.drill.syscalls import Syscalls

__all__ = ["TransferCalls"]

S = SYMBOLS

# The states a socket may send in (tcp_sendmsg_locked: else EPIPE).
_SEND_STATES = (State.ESTABLISHED, State.CLOSE_WAIT, State.SYN_SENT, State.SYN_RECEIVED)


class TransferCalls:
    """The send and receive calls of one shim."""

    def __init__(self, sys: Syscalls) -> None:
        self.sys = sys

    # ---------------------------------------------------------------- send

    def send(self, sock: Sock, data: bytes | None, flags: int, addr: Expr | None = None,
             regions: tuple[int, ...] = ()) -> SyscallGen:
        """tcp_sendmsg_locked; ``data`` None is a buffer the kernel cannot read (EFAULT);
        ``regions``: the lengths of its iovec (MSG_ZEROCOPY frags)."""
        notes = SendNotes(sock, flags)     # MSG_ZEROCOPY (timestamps are the core's)
        try:
            return (yield from self._send_data(sock, data, flags, addr, notes, regions))
        finally:
            notes.finish(sock)

    def _send_preload(self, sock: Sock, data: bytes | None) -> int:
        """Listener preload: appended to what goes out on every later passive connection,
        sent by the stack itself (after the 3rd ACK, or in a fast-open SYN-ACK)."""
        lst = sock.listener
        if lst is None or lst.closed:
            raise SysError(errno.EINVAL)
        if data is None:
            raise SysError(errno.EFAULT)
        try:
            lst.append_preload(data, self.sys.host.now())
        except OSError as exc:
            raise SysError(exc.errno or errno.EINVAL) from exc
        return len(data)

    def _send_data(self, sock: Sock, data: bytes | None, flags: int, addr: Expr | None,
                   notes: SendNotes, regions: tuple[int, ...]) -> SyscallGen:
        if flags & S["MSG_PRELOAD"]:
            return self._send_preload(sock, data)
        more = bool(flags & S["MSG_MORE"])
        eor = bool(flags & S["MSG_EOR"])
        nonblocking = sock.nonblocking or bool(flags & S["MSG_DONTWAIT"])
        total = 0
        if flags & S["MSG_FASTOPEN"] or sock.deferred_connect:
            total, done = yield from self._sendmsg_fastopen(sock, data, addr, nonblocking, notes)
            if done:
                return total       # EINPROGRESS with data in the SYN: the SYN's bytes count
        conn = sock.conn
        asleep = -1  # the socket's wake-up count when this writer went to sleep
        while True:
            conn = self._sendable(sock, conn)
            if conn.state is State.SYN_SENT or (conn.state is State.SYN_RECEIVED and not conn.passive):
                # sk_stream_wait_connect: only a passive fast-open child sends before ESTABLISHED.
                if nonblocking:
                    if total:
                        return total
                    raise SysError(errno.EAGAIN)
                yield from _wait_connect(conn)
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
            zerocopy = bool(flags & S["MSG_ZEROCOPY"]) and sock.options.zerocopy
            total += self._send_chunk(conn, data[total:], more, eor, nonblocking, zerocopy,
                                      regions_after(regions, total))
            if total >= len(data):
                return total
            conn.note_nospace()  # tcp_sendmsg_locked wait_for_space: SOCK_NOSPACE
            if nonblocking:
                if total:
                    return total
                raise SysError(errno.EAGAIN)
            asleep = conn.sk_wakeups
            yield None

    @staticmethod
    def _sendable(sock: Sock, conn: Connection | None) -> Connection:
        """The connection a send may go on, else the error the send fails with."""
        if conn is None:
            if sock.options.error:
                err, sock.options.error = sock.options.error, 0
                raise SysError(err)
            raise SysError(errno.EPIPE)
        if conn.error:
            raise SysError(take_error(conn))
        if conn.write_shutdown or conn.state not in _SEND_STATES:
            raise SysError(errno.EPIPE)
        return conn

    def _send_chunk(self, conn: Connection, data: bytes, more: bool, eor: bool, nonblocking: bool,
                    pinned: bool, regions: tuple[int, ...]) -> int:
        host = self.sys.host
        try:
            n = conn.send(data, host.now(), more=more, eor=eor, pinned=pinned,
                          tstamp=2 if nonblocking else 1, regions=regions)
        except OSError as exc:
            raise SysError(exc.errno or errno.EPIPE) from exc
        if n and not conn.is_synchronized:
            conn.output(host.now())  # a TFO child may send in SYN-RECEIVED
        host.flush()
        return n

    def _sendmsg_fastopen(self, sock: Sock, data: bytes | None, addr: Expr | None, nonblocking: bool,
                          notes: SendNotes) -> Generator[float | None, None, tuple[int, bool]]:
        """tcp_sendmsg_fastopen then __inet_stream_connect(is_sendmsg): connect with what the SYN
        may carry of ``data``. Returns (bytes the SYN took, True if the call ends there)."""
        sys = self.sys
        if not fastopen_client.client_enabled(sys.stack) or (addr is not None and is_unspec(addr)):
            raise SysError(errno.EOPNOTSUPP)
        now = sys.host.now()
        no_cookie = sock.options.tfo_no_cookie
        copied = 0
        if sock.deferred_connect and sock.conn is not None:
            sock.deferred_connect = False
            copied = fastopen.tfo_connect(sock.conn, data, now, no_cookie=no_cookie)
            sys.host.on_connect(sock)
            sys.host.flush()
            err = errno.EINPROGRESS
        elif sock.sock_state == SS_CONNECTED:
            raise SysError(errno.EISCONN)
        elif sock.sock_state == SS_CONNECTING:
            err = errno.EALREADY
        else:
            _fam, ip, port = sockaddr(addr if addr is not None else EllipsisExpr(), sys.host.remote_ip,
                                      sys.host.connect_port)
            conn = sys.lifecycle.new_conn(sock, ip, port)
            notes.attach(sock)
            sock.sock_state = SS_CONNECTING
            copied = fastopen.tfo_connect(conn, data, now, no_cookie=no_cookie)
            sys.host.on_connect(sock)
            sys.host.flush()
            err = errno.EINPROGRESS
        try:
            yield from sys.lifecycle.connect_wait(sock, err, nonblocking,
                                                  writer=data is None or copied < len(data))
        except SysError as exc:
            if exc.errno == errno.EINPROGRESS and copied:
                return copied, True
            raise
        return copied, False

    def sys_write(self, args: list[Expr]) -> SyscallGen:
        sock = self.sys.sock(args[0])
        return (yield from self.send(sock, user_buffer(args[1], value(args[2])), 0))

    def sys_send(self, args: list[Expr]) -> SyscallGen:
        sock = self.sys.sock(args[0])
        return (yield from self.send(sock, user_buffer(args[1], value(args[2])), value(args[3])))

    def sys_sendto(self, args: list[Expr]) -> SyscallGen:
        sock = self.sys.sock(args[0])
        data = user_buffer(args[1], value(args[2]))
        return (yield from self.send(sock, data, value(args[3]), args[4] if len(args) > 4 else None))

    def sys_sendmsg(self, args: list[Expr]) -> SyscallGen:
        sock = self.sys.sock(args[0])
        msg = args[1]
        if not isinstance(msg, Struct):
            raise Unsupported("sendmsg() needs a msghdr struct")
        named = msg.named()
        if "msg_control" in named:
            raise Unsupported("sendmsg() control messages not emulated")
        vec = iov(named["msg_iov"].value) if "msg_iov" in named else []
        parts = [user_buffer(base, ln) for base, ln in vec]
        data = None if None in parts else b"".join(p for p in parts if p is not None)
        addr = named["msg_name"].value if "msg_name" in named else None
        return (yield from self.send(sock, data, value(args[2]), addr, tuple(ln for _b, ln in vec)))

    def sys_writev(self, args: list[Expr]) -> SyscallGen:
        sock = self.sys.sock(args[0])
        data = b"".join(buffer(base, ln) for base, ln in iov(args[1]))
        return (yield from self.send(sock, data, 0))

    # ---------------------------------------------------------------- receive

    def recv(self, sock: Sock, want: Expr, n: int, flags: int) -> SyscallGen:
        nonblocking = sock.nonblocking or bool(flags & S["MSG_DONTWAIT"])
        peek = bool(flags & S["MSG_PEEK"])
        if flags & S["MSG_OOB"]:
            return _recv_oob(sock, want, n, peek)
        host = self.sys.host
        while True:
            conn = sock.conn
            if conn is None:
                if sock.options.error:
                    err, sock.options.error = sock.options.error, 0
                    raise SysError(err)
                raise SysError(errno.ENOTCONN)
            if sock.deferred_connect:
                # tcp_recvmsg_locked: a deferred TCP_FASTOPEN_CONNECT socket is in SYN-SENT
                # (tcp_v4_connect set it before tcp_fastopen_defer_connect), nothing to read.
                if nonblocking:
                    raise SysError(errno.EAGAIN)
                yield None
                continue
            if conn.collector is not None:
                raise SysError(errno.EBUSY)
            if conn.readable_bytes:
                if n and is_null(want):
                    raise SysError(errno.EFAULT)   # the copy to user memory failed: data stays
                if peek:
                    data = conn.rcv_buf.peek(0, min(n, conn.readable_bytes))
                else:
                    data = conn.recv(n, host.now())
                    host.flush()
                    if n and not data:
                        continue       # only the urgent byte went (out of band): nothing yet
                check_contents(want, data)
                return len(data)
            if conn.error:
                raise SysError(take_error(conn))
            if conn.fin_received or conn.read_shutdown or conn.state is State.CLOSED:
                check_contents(want, b"")
                return 0
            if conn.state is State.SYN_SENT and nonblocking:
                raise SysError(errno.EAGAIN)
            if nonblocking:
                raise SysError(errno.EAGAIN)
            yield None

    def sys_read(self, args: list[Expr]) -> SyscallGen:
        sock = self.sys.sock(args[0])
        return (yield from self.recv(sock, args[1], value(args[2]), 0))

    def sys_recv(self, args: list[Expr]) -> SyscallGen:
        sock = self.sys.sock(args[0])
        return (yield from self.recv(sock, args[1], value(args[2]), value(args[3])))

    def sys_recvfrom(self, args: list[Expr]) -> SyscallGen:
        return self.sys_recv(args)

    def sys_recvmsg(self, args: list[Expr]) -> SyscallGen:
        sock = self.sys.sock(args[0])
        msg = args[1]
        if not isinstance(msg, Struct) or "msg_iov" not in msg.named():
            raise Unsupported("recvmsg() needs a msghdr with msg_iov")
        flags = value(args[2])
        if flags & S["MSG_ERRQUEUE"]:
            return recv_errqueue(self.sys.host, sock, msg)
        vec = iov(msg.named()["msg_iov"].value)
        want: Expr = vec[0][0] if len(vec) == 1 else EllipsisExpr()
        n = yield from self.recv(sock, want, sum(ln for _b, ln in vec), flags)
        bad = check_recv_control(msg, recv_control(sock.options, sock.conn), value)   # TCP_CM_INQ
        if bad:
            raise Mismatch(bad)
        return n

    def sys_readv(self, args: list[Expr]) -> SyscallGen:
        sock = self.sys.sock(args[0])
        vec = iov(args[1])
        want: Expr = vec[0][0] if len(vec) == 1 else EllipsisExpr()
        return (yield from self.recv(sock, want, sum(ln for _b, ln in vec), 0))


def _recv_oob(sock: Sock, want: Expr, n: int, peek: bool) -> int:
    """recv(MSG_OOB): the held urgent byte (tcp_recv_urg); it never blocks."""
    conn = sock.conn
    if conn is None:
        raise SysError(errno.EINVAL)
    try:
        data = conn.rx.urgent.recv_oob(conn, peek, n)
    except OSError as exc:
        raise SysError(exc.errno or errno.EINVAL) from exc
    check_contents(want, data)
    return len(data)


def _wait_connect(conn: Connection) -> Generator[float | None, None, None]:
    """sk_stream_wait_connect: sleep once as a writer waiting for the handshake."""
    conn.writer_waits(True)
    try:
        yield None
    finally:
        conn.writer_waits(False)
