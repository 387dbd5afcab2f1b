"""asyncio transports over usertcp connections: :class:`UsertcpTransport` and :class:`TransportSocket`.

Every stack callback (``on_readable``/``on_writable``) only schedules work with
``loop.call_soon``: protocol code never runs inside the stack's packet processing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket as _socket
from collections import deque
from typing import TYPE_CHECKING, Any

from usertcp.api import sockets as usock
from usertcp.net.aio_driver import LoopDriver
from usertcp.tcp.connection import SENDING, Connection, State
from usertcp.tcp.stack import Listener

if TYPE_CHECKING:
    from usertcp.aio.server import Server

__all__ = ["TransportSocket", "UsertcpTransport"]

_READ_CHUNK = 256 * 1024          # bytes handed to one data_received() call at most
_BUFFERED_HINT = 64 * 1024        # the size hint given to BufferedProtocol.get_buffer()
_COALESCE_MAX = 16 * 1024         # small writes queued together go to TCP in one send (one copy anyway)

def _sockaddr(addr: bytes, port: int) -> tuple[Any, ...]:
    """asyncio's address shape: (host, port) for IPv4, (host, port, flowinfo, scope_id) for IPv6."""
    # inet_ntop, not ipaddress: this runs for every accepted connection.
    if len(addr) == 4:
        return (_socket.inet_ntop(_socket.AF_INET, addr), port)
    return (_socket.inet_ntop(_socket.AF_INET6, addr), port, 0, 0)


class TransportSocket:
    """What ``get_extra_info("socket")`` returns, shaped like asyncio's ``TransportSocket``.

    It wraps the usertcp socket behind the transport (``usertcp.socket.Socket``):
    ``setsockopt``/``getsockopt`` (TCP_NODELAY, TCP_CORK, keepalive, SO_LINGER,
    TCP_MD5SIG, ... with the socket API's Linux semantics), ``getsockname``,
    ``getpeername``, ``family``/``type``/``proto``. There is no kernel socket, so
    ``fileno()`` is -1 (what asyncio's TransportSocket reports for a closed socket).
    ``conn`` makes it a target for the objects ring (``ring.prep_collect(sock, ud)``).
    The calls that would bypass the transport (``recv``, ``send``, ``close``, ...) are
    refused, as asyncio refuses them.
    """

    type = _socket.SOCK_STREAM
    proto = _socket.IPPROTO_TCP

    def __init__(self, sock: usock.Socket,
                 names: tuple[tuple[Any, ...], tuple[Any, ...]] | None = None) -> None:
        self._sock = sock
        self.family = _socket.AddressFamily(int(sock.family))
        # (sockname, peername) of a connected socket: fixed, so asked of the socket only once
        # (servers such as uvicorn ask for the peer's address on every connection).
        self._names = names

    @property
    def conn(self) -> Connection | None:
        return self._sock.connection

    @property
    def listener(self) -> Listener | None:
        return self._sock.listener

    @property
    def usertcp_socket(self) -> usock.Socket:
        """The usertcp socket itself (for the options only usertcp has)."""
        return self._sock

    def fileno(self) -> int:
        return -1

    def getsockname(self) -> tuple[Any, ...]:
        return self._names[0] if self._names is not None else self._sock.getsockname()

    def getpeername(self) -> tuple[Any, ...]:
        return self._names[1] if self._names is not None else self._sock.getpeername()

    def setsockopt(self, level: int, optname: int, value: Any, optlen: int | None = None) -> None:
        self._sock.setsockopt(level, optname, value, optlen)

    def getsockopt(self, level: int, optname: int, buflen: int = 0) -> Any:
        return self._sock.getsockopt(level, optname, buflen)

    def gettimeout(self) -> float:
        return 0.0

    def setblocking(self, flag: bool) -> None:
        if flag:
            raise ValueError("setblocking(): transport sockets cannot be blocking")

    def settimeout(self, value: float | None) -> None:
        if value == 0:
            return
        raise ValueError("settimeout(): only 0 timeout is allowed on transport sockets")

    def __getattr__(self, name: str) -> Any:
        if name in ("recv", "recv_into", "send", "sendall", "sendto", "close", "shutdown",
                    "accept", "connect", "bind", "listen", "detach", "dup", "makefile"):
            raise RuntimeError(f"{name}() is not allowed on a transport's socket: use the transport")
        raise AttributeError(name)

    def __repr__(self) -> str:
        return f"<usertcp TransportSocket {self.conn or self.listener!r}>"


class UsertcpTransport(asyncio.Transport):
    """An asyncio ``Transport`` over one usertcp :class:`Connection`.

    ``write()`` hands bytes to TCP as far as its send buffer allows and keeps the rest;
    that remainder is ``get_write_buffer_size()``, and crossing the high/low water marks
    calls ``protocol.pause_writing()``/``resume_writing()``. ``pause_reading()`` leaves
    data in the TCP receive buffer, so the advertised window closes (real flow control).
    ``close()`` flushes the buffer, then closes TCP (a FIN; unread data makes it a reset,
    as with the kernel) and calls ``connection_lost(None)``. A reset or timeout reports
    ``connection_lost(ConnectionResetError/TimeoutError/...)``.

    Extra info: ``peername``, ``sockname``, ``socket`` (:class:`TransportSocket`),
    ``connection`` (the :class:`Connection`), ``stack``, ``driver``, ``tcp_info``
    (a fresh ``conn.info()``).
    """

    # asyncio's loop.start_tls() checks this flag: the transport implements
    # set_protocol/pause_reading/resume_reading as sslproto.SSLProtocol needs them.
    _start_tls_compatible = True

    def __init__(self, driver: LoopDriver, sock: usock.Socket, protocol: asyncio.BaseProtocol, *,
                 server: Server | None = None, nodelay: bool = True) -> None:
        conn = sock.connection
        if conn is None:
            raise ValueError("UsertcpTransport needs a connected usertcp socket")
        if sock.family == usock.AF_INET6 or len(conn.local_ip) == 16:
            names = (sock.getsockname(), sock.getpeername())     # the socket's v4-mapped rules
        else:
            names = (_sockaddr(conn.local_ip, conn.local_port), _sockaddr(conn.remote_ip, conn.remote_port))
        self._tsock = TransportSocket(sock, names)
        super().__init__({
            "peername": names[1],
            "sockname": names[0],
            "socket": self._tsock,
            "connection": conn,
            "stack": conn.stack,
            "driver": driver,
        })
        if nodelay and not sock.getsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY):
            # As asyncio does for every TCP transport (base_events._set_nodelay).
            sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        self._sock = sock
        self._driver = driver
        self._loop = driver.loop
        self._conn = conn
        self._protocol = protocol
        self._buffered = isinstance(protocol, asyncio.BufferedProtocol)
        self._server = server
        self._buf: deque[bytes | memoryview] = deque()
        self._buf_size = 0
        self._high = 64 * 1024
        self._low = 16 * 1024
        self._closing = False
        self._eof = False              # write_eof() called
        self._eof_received = False
        self._reading_paused = False
        self._writing_paused = False   # protocol.pause_writing() in effect
        self._read_scheduled = False
        self._write_scheduled = False
        self._lost = False
        self._preload_left: bytes | None = None   # see expect_preload_repeat()
        conn.on_readable = self._on_readable
        conn.on_writable = self._on_writable

    def __repr__(self) -> str:
        return f"<UsertcpTransport {self._conn!r} buffered={self._buf_size}>"

    def begin(self, *, connection_made: bool = True) -> None:
        """``connection_made`` (unless the caller makes it, as ``start_tls`` does), then
        whatever already arrived."""
        if server := self._server:
            server.track(self)
        if connection_made:
            self._protocol.connection_made(self)
        self._schedule_read()

    def expect_preload_repeat(self, preload: bytes) -> None:
        """The listener already sent ``preload`` on this connection and the application will
        write the same bytes itself (an unmodified server's greeting): the application's
        first bytes are compared with it byte for byte and, where equal, not sent again.

        Set by :meth:`Server.preload` with ``app_sends_it=True`` (an explicit choice: without
        it every written byte is sent). Bytes that differ from the preload are sent as written
        and reported through the loop's exception handler: the peer already has the preload,
        so what the application meant instead cannot be delivered in its place.
        """
        self._preload_left = preload or None

    def _drop_preload_repeat(self, data: bytes | bytearray | memoryview) -> bytes | bytearray | memoryview:
        """What of ``data`` is left to send once its repeat of the preload is taken off."""
        expected = self._preload_left
        assert expected is not None
        k = min(len(expected), len(data))
        if memoryview(data)[:k] != expected[:k]:
            self._preload_left = None
            if self._server is not None:
                self._server.count_preload_repeat(matched=False)
            self._loop.call_exception_handler({
                "message": "the application's first bytes differ from the listener's preload the stack "
                           "already sent (app_sends_it=True): they are sent as written",
                "transport": self, "protocol": self._protocol})
            return data
        rest = expected[k:]
        self._preload_left = rest or None
        if not rest and self._server is not None:
            self._server.count_preload_repeat(matched=True)
        return memoryview(data)[k:]

    # -- callbacks from the stack: only schedule ---------------------------------------

    def _on_readable(self, _conn: Connection) -> None:
        self._schedule_read()

    def _on_writable(self, _conn: Connection) -> None:
        if not self._write_scheduled and not self._lost:
            self._write_scheduled = True
            self._loop.call_soon(self._write_ready)

    def _schedule_read(self) -> None:
        if not self._read_scheduled and not self._lost:
            self._read_scheduled = True
            self._loop.call_soon(self._read_ready)

    # -- reading -----------------------------------------------------------------------

    def _read_ready(self) -> None:
        self._read_scheduled = False
        if self._lost:
            return
        conn = self._conn
        # While the objects ring collects this connection it owns the receive side.
        if conn.collector is None and not self._closing:
            read = self._deliver_buffered() if self._buffered else self._deliver_bytes()
            if read:
                self._driver.kick_soon()   # the read may have opened the window: send the update
            if self._lost or self._reading_paused:
                return
            if conn.fin_received and not conn.readable_bytes and not self._eof_received:
                self._eof_received = True
                try:
                    keep_open = self._protocol.eof_received()  # type: ignore[attr-defined]
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:
                    self._fatal_protocol("protocol.eof_received() call failed", exc)
                    return
                if not keep_open and not self._closing:
                    self.close()
        self._check_dead()

    def _deliver_bytes(self) -> bool:
        conn = self._conn
        read = False
        while conn.readable_bytes and not self._reading_paused and not self._lost:
            data = conn.recv(min(conn.readable_bytes, _READ_CHUNK), self._driver.now())
            read = True
            try:
                self._protocol.data_received(data)  # type: ignore[attr-defined]
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_protocol("protocol.data_received() call failed", exc)
                break
        return read

    def _deliver_buffered(self) -> bool:
        """BufferedProtocol: TCP copies straight into the protocol's buffer (no bytes object)."""
        conn = self._conn
        read = False
        while conn.readable_bytes and not self._reading_paused and not self._lost:
            proto = self._protocol
            assert isinstance(proto, asyncio.BufferedProtocol)
            try:
                buf = memoryview(proto.get_buffer(min(conn.readable_bytes, _BUFFERED_HINT)))
                if not len(buf):
                    raise RuntimeError("get_buffer() returned an empty buffer")
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_protocol("get_buffer() call failed", exc)
                return read
            n = conn.recv_into(buf.cast("B") if buf.format != "B" else buf, self._driver.now())
            read = True
            try:
                proto.buffer_updated(n)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_protocol("protocol.buffer_updated() call failed", exc)
                break
        return read

    def _fatal_protocol(self, message: str, exc: BaseException) -> None:
        self._loop.call_exception_handler({"message": message, "exception": exc,
                                           "transport": self, "protocol": self._protocol})
        self._fatal(exc if isinstance(exc, Exception) else None)

    def _check_dead(self) -> None:
        """A failed or fully closed connection ends the transport."""
        if self._lost:
            return
        conn = self._conn
        if conn.fin_received and not self._eof_received and conn.collector is None \
                and not self._closing:
            self._schedule_read()      # deliver the data and the EOF first
        elif conn.error:
            self._fatal(OSError(conn.error, os.strerror(conn.error)))
        elif conn.state is State.CLOSED and not conn.readable_bytes and not self._sock.fastopen_deferred:
            self._finish(None)

    def pause_reading(self) -> None:
        self._reading_paused = True

    def resume_reading(self) -> None:
        if self._reading_paused:
            self._reading_paused = False
            self._schedule_read()

    def is_reading(self) -> bool:
        return not self._reading_paused and not self._closing

    # -- writing -----------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data argument must be a bytes-like object, not {type(data).__name__!r}")
        if self._eof:
            raise RuntimeError("Cannot call write() after write_eof()")
        if self._closing or self._lost or not data:
            return
        if self._preload_left is not None:
            data = self._drop_preload_repeat(data)
            if not data:
                return
        chunk = data if isinstance(data, bytes) else bytes(data)   # the caller may reuse its buffer
        self._buf.append(chunk)
        self._buf_size += len(chunk)
        # Writes made in one loop iteration go to TCP together at its end (as Linux's
        # tcp_autocorking merges small writes while earlier ones are still queued): a server
        # writing headers then body sends one segment, not two.
        if not self._write_scheduled:
            self._write_scheduled = True
            self._loop.call_soon(self._write_ready)
        self._maybe_pause_protocol()

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def _write_ready(self) -> None:
        self._write_scheduled = False
        if not self._lost:
            self._flush()
            self._check_dead()

    def _flush(self) -> None:
        """Move buffered bytes into TCP's send buffer; finish a pending close or EOF."""
        conn = self._conn
        now = self._driver.now()
        buf = self._buf
        try:
            if buf and self._sock.fastopen_deferred:
                self._fastopen_write()
            while buf and conn.send_space > 0:
                chunk = buf.popleft()
                if buf and len(chunk) + len(buf[0]) <= _COALESCE_MAX:
                    chunk = self._coalesce(chunk)
                n = conn.send(chunk, now, more=bool(buf))
                self._buf_size -= n
                if n < len(chunk):
                    buf.appendleft(memoryview(chunk)[n:])
                    break
        except OSError as e:
            self._fatal(e)
            return
        if conn.state is State.SYN_RECEIVED:
            # A Fast Open child may send before the 3rd ACK (Linux tcp_sendmsg_locked lets a
            # passive fastopen socket write in SYN-RECV), as the socket API's send does.
            conn.output(now)
        self._driver.kick_soon()
        if not buf:
            if conn.state is State.SYN_SENT or conn.state is State.SYN_RECEIVED:
                # A Fast Open connect in flight (the write sent the SYN): EOF and close wait for
                # the handshake, as shutdown/close in SYN-SENT would drop the connection (Linux
                # tcp_close_state); the handshake's end wakes the writer (on_writable).
                pass
            elif self._closing:
                self._close_tcp()
            elif self._eof and not conn.write_shutdown and conn.state in SENDING:
                conn.shutdown(False, True, now)
        self._maybe_resume_protocol()

    def _fastopen_write(self) -> None:
        """The first write of a deferred TCP_FASTOPEN_CONNECT socket (``sock_connect`` returned
        at once): the socket's own send sends the SYN carrying what it may of the data (with a
        cached cookie), as the first ``send()`` of asyncio's kernel socket would."""
        buf = self._buf
        chunk = buf.popleft()
        if buf and len(chunk) + len(buf[0]) <= _COALESCE_MAX:
            chunk = self._coalesce(chunk)
        try:
            n = self._sock.send(chunk)
        except BlockingIOError:        # EINPROGRESS: the SYN left without data; it waits in TCP
            n = 0
        self._buf_size -= n
        if n < len(chunk):
            buf.appendleft(memoryview(chunk)[n:])

    def _coalesce(self, first: bytes | memoryview) -> bytes:
        """``first`` joined with the small writes queued after it (up to ``_COALESCE_MAX``
        bytes): one ``Connection.send`` for a response's headers and body, not one each."""
        buf = self._buf
        parts = [first]
        size = len(first)
        while buf and size + len(buf[0]) <= _COALESCE_MAX:
            nxt = buf.popleft()
            parts.append(nxt)
            size += len(nxt)
        return b"".join(parts)

    def write_eof(self) -> None:
        if self._closing or self._eof:
            return
        self._eof = True
        if not self._buf:
            self._flush()

    def can_write_eof(self) -> bool:
        return True

    def get_write_buffer_size(self) -> int:
        return self._buf_size

    async def drained(self) -> None:
        """Wait until the write buffer is at or below the low-water mark (or the transport ends)."""
        await self._driver.wait_for(lambda: self._buf_size <= self._low or self._lost)
        if self._lost or self._closing:
            raise ConnectionError("Connection closed")

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (self._low, self._high)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if high is None:
            high = 64 * 1024 if low is None else 4 * low
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
        self._high, self._low = high, low
        self._maybe_pause_protocol()

    def _maybe_pause_protocol(self) -> None:
        if not self._writing_paused and self._buf_size > self._high:
            self._writing_paused = True
            self._call_protocol("pause_writing")

    def _maybe_resume_protocol(self) -> None:
        if self._writing_paused and self._buf_size <= self._low:
            self._writing_paused = False
            self._call_protocol("resume_writing")

    def _call_protocol(self, name: str) -> None:
        try:
            getattr(self._protocol, name)()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._loop.call_exception_handler({
                "message": f"protocol.{name}() failed", "exception": exc,
                "transport": self, "protocol": self._protocol})

    # -- closing -----------------------------------------------------------------------

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        if not self._buf:
            self._flush()              # closes TCP now, or once a Fast Open handshake ends

    def _close_tcp(self) -> None:
        """The buffer is flushed: close the socket (FIN after the queued data, as Linux close())."""
        self._detach()
        with contextlib.suppress(OSError):
            self._sock.close()
        self._driver.kick_soon()
        self._finish(None)

    def abort(self) -> None:
        self._fatal(None)

    def _force_close(self, exc: Exception | None) -> None:
        """What ``sslproto.SSLProtocol`` calls on a fatal TLS error (asyncio's transports have it)."""
        self._fatal(exc)

    def _fatal(self, exc: Exception | None) -> None:
        """Reset the connection and tell the protocol (``exc`` is None for a plain abort)."""
        self._closing = True
        self._buf.clear()
        self._buf_size = 0
        self._detach()
        if self._conn.state is not State.CLOSED:
            self._conn.abort(self._driver.now())
        with contextlib.suppress(OSError):
            self._sock.close()
        self._driver.kick_soon()
        self._finish(exc)

    def _detach(self) -> None:
        conn = self._conn
        # Only our own hooks: the objects store may have chained itself in front of them.
        if conn.on_readable == self._on_readable:
            conn.on_readable = None
        if conn.on_writable == self._on_writable:
            conn.on_writable = None

    def _finish(self, exc: Exception | None) -> None:
        """connection_lost(exc), once, from the loop (never from inside a caller's call)."""
        if self._lost:
            return
        self._lost = True
        self._closing = True
        self._detach()
        self._loop.call_soon(self._call_connection_lost, exc)

    def _call_connection_lost(self, exc: Exception | None) -> None:
        try:
            self._protocol.connection_lost(exc)
        finally:
            with contextlib.suppress(OSError):
                self._sock.close()        # releases the port in the host's table
            if self._server is not None:
                self._server.untrack(self)
                self._server = None

    # -- misc --------------------------------------------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "tcp_info":
            return self._conn.info()
        return super().get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol
        self._buffered = isinstance(protocol, asyncio.BufferedProtocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

