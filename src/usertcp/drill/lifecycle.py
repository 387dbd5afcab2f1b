"""The socket lifecycle calls of the drill shim: ``socket``, ``bind``, ``listen``, ``accept``,
``connect``, ``close``, ``shutdown``.

Linux semantics reproduced: options set on a listener inherited by accepted sockets
(``sk_clone_lock``), connect() EINPROGRESS / EALREADY / EISCONN by ``sock->state``
(``__inet_stream_connect``), connect(AF_UNSPEC) disconnects (``tcp_disconnect``), a deferred
TCP_FASTOPEN_CONNECT socket sends its SYN on the first write.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

from usertcp.api.sockopts import SocketOptions, take_error
from usertcp.drill.ast import Expr
from usertcp.drill.defaults import SYMBOLS
from usertcp.drill.profile import Unsupported
from usertcp.drill.sysargs import ellipsis, sockaddr, value
from usertcp.drill.sysbase import SS_CONNECTED, SS_CONNECTING, SS_UNCONNECTED, Sock, SyscallGen, SysError
from usertcp.tcp import fastopen
from usertcp.tcp.connection import Connection, State

if TYPE_CHECKING:
    from usertcp.drill.syscalls import Syscalls

__all__ = ["LifecycleCalls"]

S = SYMBOLS


class LifecycleCalls:
    """socket/bind/listen/accept/connect/close/shutdown of one shim; sockets live in ``Syscalls.fds``
    (by live descriptor, drill/fdtable.py)."""

    def __init__(self, sys: Syscalls) -> None:
        self.sys = sys

    def sys_socket(self, args: list[Expr]) -> SyscallGen:
        sys = self.sys
        v6 = ":" in sys.host.local_ip or sys.host.mapped
        family = S["AF_INET6"] if v6 else S["AF_INET"]
        if not ellipsis(args[0]):
            family = value(args[0])
            if family not in (S["AF_INET"], S["AF_INET6"]):
                raise SysError(errno.EAFNOSUPPORT)
        kind = value(args[1])
        if kind & 0xF != S["SOCK_STREAM"]:
            raise Unsupported("only SOCK_STREAM sockets are emulated")
        if len(args) > 2 and not ellipsis(args[2]) and value(args[2]) not in (0, S["IPPROTO_TCP"]):
            raise SysError(errno.EPROTONOSUPPORT)   # inet_create: no such protocol for the type
        sock = Sock(sys.new_fd(), family, SocketOptions(sys.stack.config),
                    nonblocking=bool(kind & S["SOCK_NONBLOCK"]))
        sys.last_sock = sock
        return sys.add_sock(sock)
        yield  # pragma: no cover

    def sys_bind(self, args: list[Expr]) -> SyscallGen:
        sys = self.sys
        sock = sys.sock(args[0])
        if sock.bound is not None:
            raise SysError(errno.EINVAL)
        _fam, ip, port = sockaddr(args[1], sys.host.local_ip, sys.host.bind_port)
        for other in sys.fds.values():   # sockets the script no longer names count too
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
        sys = self.sys
        sock = sys.sock(args[0])
        backlog = value(args[1])
        if sock.conn is not None:
            raise SysError(errno.EINVAL)
        if sock.listener is None:
            ip, port = sock.bound or (sys.host.local_ip, 0)
            try:
                lst = sys.stack.listen(port, address=ip, backlog=backlog)
            except OSError as exc:
                raise SysError(exc.errno or errno.EINVAL) from exc
            sock.listener = lst
            sock.options.apply_to_listener(lst)
        sys.host.on_listen(sock)
        return 0
        yield  # pragma: no cover

    def sys_accept(self, args: list[Expr]) -> SyscallGen:
        sys = self.sys
        sock = sys.sock(args[0])
        lst = sock.listener
        if lst is None:
            raise SysError(errno.EINVAL)
        while True:
            conn = lst.accept()
            if conn is not None:
                child = Sock(
                    sys.new_fd(),
                    sock.family,
                    sock.options.inherit(),    # Linux sk_clone_lock
                    bound=sock.bound,
                    conn=conn,
                    sock_state=SS_CONNECTED,   # inet_accept
                )
                sock.options.adopt_child(conn)   # sock flags such as SO_OOBINLINE
                sys.last_sock = child
                script_fd = sys.add_sock(child)
                sys.host.on_accept(child)
                return script_fd
            if sock.nonblocking:
                raise SysError(errno.EAGAIN)
            yield None

    def sys_accept4(self, args: list[Expr]) -> SyscallGen:
        return self.sys_accept(args)

    def sys_connect(self, args: list[Expr]) -> SyscallGen:
        sys = self.sys
        sock = sys.sock(args[0])
        fam, ip, port = sockaddr(args[1], sys.host.remote_ip, sys.host.connect_port)
        if fam == S["AF_UNSPEC"]:
            self._disconnect(sock)
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
            if self._start_connect(sock, ip, port):
                return 0
            err = errno.EINPROGRESS
        return (yield from self.connect_wait(sock, err, sock.nonblocking))

    def _disconnect(self, sock: Sock) -> None:
        """tcp_disconnect(): abort whatever is there (a listener stops listening,
        inet_csk_listen_stop); the socket can connect (or listen) again."""
        now = self.sys.host.now()
        if sock.listener is not None:
            sock.listener.close(now)
            sock.listener = None
        if sock.conn is not None:
            sock.conn.abort(now)
        self.sys.host.flush()
        sock.conn = None
        sock.deferred_connect = False
        sock.sock_state = SS_UNCONNECTED

    def _start_connect(self, sock: Sock, ip: str, port: int) -> bool:
        """Send the SYN of an unconnected socket; True when TCP_FASTOPEN_CONNECT defers it."""
        sys = self.sys
        now = sys.host.now()
        conn = self.new_conn(sock, ip, port)
        sock.sock_state = SS_CONNECTING
        no_cookie = sock.options.tfo_no_cookie
        if sock.options.tfo_connect and fastopen.defer_connect(conn, now, no_cookie=no_cookie):
            sock.deferred_connect = True  # Linux defers the SYN to the first write
            sys.host.on_connect(sock)
            return True
        try:
            if sock.options.tfo_connect:
                fastopen.tfo_connect(conn, b"", now, no_cookie=no_cookie)   # a cookie request
            else:
                sys.stack.connect(conn, now)
        except OSError as exc:
            raise SysError(exc.errno or errno.EINVAL) from exc
        sys.host.on_connect(sock)
        sys.host.flush()
        return False

    def new_conn(self, sock: Sock, ip: str, port: int) -> Connection:
        """A connection for an unconnected socket (tcp_v4_connect's part before the SYN)."""
        sys = self.sys
        lip, lport = sock.bound or (sys.host.local_ip, 0)
        try:
            conn = sys.stack.create_connection(ip, port, local=lip, local_port=lport)
        except OSError as exc:
            raise SysError(exc.errno or errno.EINVAL) from exc
        sock.options.apply_to_connection(conn)
        sock.conn = conn
        sys.last_sock = sock
        return conn

    def connect_wait(self, sock: Sock, err: int, nonblocking: bool, writer: bool = False) -> SyscallGen:
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

    def sys_close(self, args: list[Expr]) -> SyscallGen:
        sys = self.sys
        sock = sys.close_fd(sys.live_fd(args[0]))
        if sock is None:
            raise SysError(errno.EBADF)
        if not isinstance(sock, Sock):
            return 0
        now = sys.host.now()
        if sock.listener is not None:
            sock.listener.close(now)
        if sock.conn is not None:
            if sock.deferred_connect:
                sock.conn = None
            else:
                sock.conn.close(now)
        sys.host.flush()
        return 0
        yield  # pragma: no cover

    def sys_shutdown(self, args: list[Expr]) -> SyscallGen:
        sys = self.sys
        sock = sys.sock(args[0])
        how = value(args[1])
        if how not in (0, 1, 2):
            raise SysError(errno.EINVAL)
        conn = sock.conn
        if conn is None or conn.state in (State.CLOSED, State.LISTEN) or sock.deferred_connect:
            if sock.listener is not None and how != 1:
                return 0  # Linux: shutdown(SHUT_RD) of a listener stops it listening; not modelled
            raise SysError(errno.ENOTCONN)
        conn.shutdown(how in (0, 2), how in (1, 2), sys.host.now())
        sys.host.flush()
        return 0
        yield  # pragma: no cover


def _reuse(sock: Sock) -> bool:
    """SO_REUSEADDR or SO_REUSEPORT: packetdrill's bind() treats both as a shared port."""
    return sock.options.reuseaddr or sock.options.reuseport
