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

import errno
from collections.abc import Iterable
from typing import Any, BinaryIO, Final, cast

from usertcp.api import constants as _constants
from usertcp.api import errqueue, stdio
from usertcp.api.blocking import BLOCK as _BLOCK
from usertcp.api.blocking import Blocked
from usertcp.api.constants import *  # noqa: F403 - the Linux numbers are part of this API
from usertcp.api.constants import (
    MSG_DONTWAIT,
    MSG_EOR,
    MSG_ERRQUEUE,
    MSG_FASTOPEN,
    MSG_MORE,
    MSG_NOSIGNAL,
    MSG_OOB,
    MSG_PEEK,
    MSG_PRELOAD,
    MSG_WAITALL,
    MSG_ZEROCOPY,
    os_error,
)
from usertcp.api.host import (
    Host,
    SocketDriver,
    get_default_host,
    getdefaulttimeout,
    set_default_host,
    setdefaulttimeout,
    use_host,
)
from usertcp.api.readiness import select
from usertcp.api.socket_core import CONNECTING, SocketCore, eof_or_error
from usertcp.api.sockopts import as_bytes_view, take_error
from usertcp.tcp.connection import Connection, State
from usertcp.tcp.fastopen import tfo_connect
from usertcp.tcp.fastopen_client import client_enabled
from usertcp.tcp.zerocopy import ZerocopySend

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



_SEND_FLAGS = (MSG_DONTWAIT | MSG_NOSIGNAL | MSG_MORE | MSG_EOR | MSG_FASTOPEN | MSG_PRELOAD
               | MSG_ZEROCOPY)
_RECV_FLAGS = MSG_DONTWAIT | MSG_PEEK | MSG_WAITALL | MSG_OOB


# ----------------------------------------------------------------------------- sockets


class Socket(SocketCore):
    """A TCP socket of a usertcp :class:`Host`; the methods mirror :class:`socket.socket`."""

    # -- send --------------------------------------------------------------------

    def send(self, data: Any, flags: int = 0) -> int:
        view = as_bytes_view(data)
        if flags & ~_SEND_FLAGS:
            raise os_error(errno.EOPNOTSUPP, f"unsupported send flags {flags & ~_SEND_FLAGS:#x}")
        if flags & MSG_PRELOAD:
            return self._preload(data, view)
        if flags & MSG_FASTOPEN or self._tfo_deferred:
            return self._sendmsg_fastopen(data, view, flags, None)
        return self._send_some(data, view, flags)

    def _sendmsg_fastopen(self, data: Any, view: memoryview, flags: int, address: Any) -> int:
        """Linux tcp_sendmsg_fastopen: MSG_FASTOPEN (or the first write after a deferred
        TCP_FASTOPEN_CONNECT connect) connects, the SYN carrying what it may of ``data``
        (``tcp/fastopen_client.py``). Non-blocking, the call ends there: the bytes the SYN took,
        or EINPROGRESS if it took none; blocking, it waits for the handshake and then sends the
        rest as any write. A connected socket refuses it (EISCONN), as Linux does."""
        nonblocking = self._timeout == 0.0 or bool(flags & MSG_DONTWAIT)
        drv = self._host.driver
        with drv.lock:
            self._check_open()
            stack = self._host.stack
            if not client_enabled(stack):
                raise os_error(errno.EOPNOTSUPP, "TCP Fast Open (client) is off: net.ipv4.tcp_fastopen & 1")
            now = drv.now()
            copied = 0
            err = errno.EINPROGRESS
            if self._tfo_deferred and self._conn is not None:
                self._tfo_deferred = False
                self._connected = False             # SS_CONNECTING until the handshake ends
                copied = tfo_connect(self._conn, bytes(view), now, no_cookie=self._options.tfo_no_cookie)
            elif self._listener is not None or self._connected:
                raise os_error(errno.EISCONN)
            elif self._conn is not None:
                err = errno.EALREADY                # a connect is in progress
            else:
                if address is None:
                    raise os_error(errno.ENOTCONN, "MSG_FASTOPEN needs an address on an unconnected socket")
                ip, port = self._parse_address(address, "sendto")
                self._tfo_copied = 0
                self._start_connect(ip, port, now, data=bytes(view))
                copied = self._tfo_copied
            conn = self._conn
            if conn is not None and err != errno.EALREADY and flags & MSG_ZEROCOPY and self.options.zerocopy:
                ZerocopySend(conn, syn_data=True).finish(conn)   # the SYN's data takes an id
            connecting = conn is not None and conn.state in CONNECTING
        self._kick()
        if nonblocking and connecting:
            if copied:
                return copied
            raise os_error(err)
        pending = conn if conn is not None and copied < len(view) else None
        if pending is not None:
            pending.writer_waits(True)       # inet_wait_for_connect's writebias: ACK rides on data
        try:
            self._wait_connected()
        finally:
            if pending is not None:
                pending.writer_waits(False)
        rest = view[copied:]
        return copied + (self._send_some(rest, rest, flags & ~MSG_FASTOPEN) if len(rest) else 0)

    def _preload(self, data: Any, view: memoryview) -> int:
        with self._host.driver.lock:
            self._check_open()
            lst = self._listener
            if lst is None or lst.closed:
                raise os_error(errno.EINVAL, "MSG_PRELOAD needs a listening socket")
            try:
                n = lst.append_preload(bytes(view), self._host.driver.now())   # patch 1: appends
            except OSError as exc:
                raise os_error(exc.errno or errno.EINVAL, str(exc)) from None
        self._kick()
        return n

    def _send_some(self, data: Any, view: memoryview, flags: int) -> int:
        more = bool(flags & MSG_MORE)
        eor = bool(flags & MSG_EOR)
        # bytes go to the stack by reference; anything mutable is copied by Connection.send,
        # unless MSG_ZEROCOPY (with SO_ZEROCOPY; else ignored, as Linux TCP) pins it until its
        # completion arrives on the error queue (usertcp.tcp.zerocopy).
        zerocopy = bool(flags & MSG_ZEROCOPY) and self.options.zerocopy
        payload: Any = data if isinstance(data, bytes) else view

        def attempt(now: float) -> int | Blocked:
            conn = self._writable_conn()
            if conn.state in CONNECTING and not (conn.state is State.SYN_RECEIVED and conn.tfo is not None):
                return _BLOCK
            if conn.send_space <= 0 and len(view):
                return _BLOCK
            zc = ZerocopySend(conn) if zerocopy and len(view) else None
            n = conn.send(payload, now, more=more, eor=eor, pinned=zerocopy, tstamp=2)
            if zc is not None:
                zc.finish(conn)
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
                and conn.state not in CONNECTING):
            raise os_error(errno.EPIPE)
        return conn

    def sendall(self, data: Any, flags: int = 0) -> None:
        """Send everything or raise; a timeout bounds the whole call, as in Python."""
        view = as_bytes_view(data)
        if flags & ~(_SEND_FLAGS & ~(MSG_PRELOAD | MSG_FASTOPEN)):
            raise os_error(errno.EOPNOTSUPP, f"unsupported sendall flags {flags:#x}")
        more = bool(flags & MSG_MORE)
        eor = bool(flags & MSG_EOR)
        zerocopy = bool(flags & MSG_ZEROCOPY) and self.options.zerocopy
        total = len(view)
        sent = 0
        if self._tfo_deferred:
            # The first write of a deferred TCP_FASTOPEN_CONNECT sends the SYN with its data.
            sent = self._sendmsg_fastopen(view, view, flags, None)
        whole = data if isinstance(data, bytes) and not sent else None

        def attempt(now: float) -> Blocked | None:
            nonlocal sent
            conn = self._writable_conn()
            while sent < total:
                if conn.state in CONNECTING or conn.send_space <= 0:
                    return _BLOCK
                # A whole bytes object goes by reference; the core copies any other buffer.
                chunk: Any = whole if sent == 0 and whole is not None else view[sent:]
                zc = ZerocopySend(conn) if zerocopy else None     # one send() per chunk
                sent += conn.send(chunk, now, more=more, eor=eor and sent + len(chunk) >= total,
                                  pinned=zerocopy, tstamp=1)
                if zc is not None:
                    zc.finish(conn)
                self._kick()
            return None

        self._run(attempt, self._send_ready, nonblocking=bool(flags & MSG_DONTWAIT))

    def sendto(self, data: Any, flags_or_address: Any, address: Any = None) -> int:
        """sendto(data, address) or sendto(data, flags, address).

        With MSG_FASTOPEN: connect, with data in the SYN if a cookie is cached (Linux
        semantics, see ``_sendmsg_fastopen``): non-blocking, the bytes the SYN carries (or
        BlockingIOError EINPROGRESS if none: a cookie request went out); blocking, all of
        ``data`` once the handshake is done. Without it, TCP ignores the address of a
        connected socket (as Linux does).
        """
        if address is None:
            flags, address = 0, flags_or_address
        else:
            flags = flags_or_address
        if not isinstance(flags, int):
            raise TypeError("sendto(): flags must be int")
        if not flags & MSG_FASTOPEN:
            return self.send(data, flags)
        view = as_bytes_view(data)
        if flags & ~_SEND_FLAGS or flags & MSG_PRELOAD:
            raise os_error(errno.EOPNOTSUPP, f"unsupported send flags {flags & ~_SEND_FLAGS:#x}")
        return self._sendmsg_fastopen(data, view, flags, address)

    # -- recv --------------------------------------------------------------------

    def _recv(self, n: int, flags: int, into: memoryview | None) -> bytes | int:
        if flags & ~_RECV_FLAGS:
            raise os_error(errno.EOPNOTSUPP, f"unsupported recv flags {flags & ~_RECV_FLAGS:#x}")
        peek = bool(flags & MSG_PEEK)
        if flags & MSG_OOB:
            return self._recv_oob(n, peek, into)
        waitall = bool(flags & MSG_WAITALL) and not peek

        def attempt(now: float) -> bytes | int | Blocked:
            conn = self._conn
            if conn is None:
                raise os_error(errno.ENOTCONN)
            if conn.collector is not None:
                # The receive side belongs to a payload-object collector (objects ring COLLECT).
                raise os_error(errno.EBUSY, "the socket's receive side is claimed by a collector")
            if n == 0 or self._early_shutdown & 1:
                return b"" if into is None else 0
            if conn.state in CONNECTING:
                return _BLOCK
            avail = conn.readable_bytes
            if avail:
                if waitall and avail < n and not eof_or_error(conn):
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
                if not out:
                    return _BLOCK   # only the urgent byte went (out of band, tcp/urgent.py)
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
            if conn.state in CONNECTING:
                return False
            avail = conn.readable_bytes
            return (avail >= n if waitall else avail > 0) or eof_or_error(conn)

        # mypy can't split "bytes | int | Blocked" into _T | Blocked by itself.
        return cast("bytes | int", self._run(attempt, ready, nonblocking=bool(flags & MSG_DONTWAIT)))

    def _recv_oob(self, n: int, peek: bool, into: memoryview | None) -> bytes | int:
        """recv(MSG_OOB): the held urgent byte (Linux tcp_recv_urg); never blocks."""
        conn = self._conn
        if conn is None:
            raise os_error(errno.EINVAL)
        try:
            data = conn.rx.urgent.recv_oob(conn, peek, n)
        except OSError as exc:
            raise os_error(exc.errno or errno.EINVAL) from None
        if into is None:
            return data
        into[:len(data)] = data
        return len(data)

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
            return conn.rx.inq_hint()

    def recvfrom(self, bufsize: int, flags: int = 0) -> tuple[bytes, None]:
        """As Python on Linux: a TCP socket reports no source address (None)."""
        return self.recv(bufsize, flags), None

    def recvfrom_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> tuple[int, None]:
        return self.recv_into(buffer, nbytes, flags), None

    # -- the standard library's file and message surface (usertcp.api.stdio) ---------


    def makefile(self, mode: str = "r", buffering: int | None = None, *, encoding: str | None = None,
                 errors: str | None = None, newline: str | None = None) -> Any:
        return stdio.makefile(self, mode, buffering, encoding=encoding, errors=errors, newline=newline)

    def sendmsg(self, buffers: Iterable[Any], ancdata: Iterable[tuple[int, int, Any]] = (),
                flags: int = 0, address: Any = None) -> int:
        return stdio.sendmsg(self, buffers, ancdata, flags, address)

    def recvmsg(self, bufsize: int, ancbufsize: int = 0,
                flags: int = 0) -> tuple[bytes, list[tuple[int, int, bytes]], int, None]:
        """As :meth:`socket.socket.recvmsg`; with MSG_ERRQUEUE, one error-queue entry
        (:mod:`usertcp.api.errqueue`: zerocopy completions, transmit timestamps)."""
        if flags & MSG_ERRQUEUE:
            if bufsize < 0 or ancbufsize < 0:
                raise ValueError("negative buffer size in recvmsg()")
            self._check_open()
            return errqueue.recv_errqueue(self, ancbufsize, bufsize)
        return stdio.recvmsg(self, bufsize, ancbufsize, flags)

    def recvmsg_into(self, buffers: Iterable[Any], ancbufsize: int = 0,
                     flags: int = 0) -> tuple[int, list[tuple[int, int, bytes]], int, None]:
        return stdio.recvmsg_into(self, buffers, ancbufsize, flags)

    def sendfile(self, file: BinaryIO, offset: int = 0, count: int | None = None) -> int:
        return stdio.sendfile(self, file, offset, count)


SocketType = Socket


_CALLS: Final = frozenset({"create_connection", "create_server", "getaddrinfo", "gethostbyname", "socket"})


def __getattr__(name: str) -> Any:
    """The module-level calls live in :mod:`usertcp.api.calls` (they build on :class:`Socket`);
    ``usertcp.api.sockets.create_connection`` and the others still resolve, lazily (PEP 562)."""
    if name in _CALLS:
        from usertcp.api import calls
        return getattr(calls, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
