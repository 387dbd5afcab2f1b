"""Connections and servers on usertcp sockets, for the loop and for the driver-level API.

The pieces both entry points share: a socket host per (driver, stack)
(:func:`socket_host`), a non-blocking connect awaited on the driver
(:func:`connect_socket`), wrapping a connected socket in a transport with or without TLS
(:func:`wrap_socket`), and :class:`Server`, an ``asyncio.Server``-like listener.

TLS is asyncio's own: ``sslproto.SSLProtocol`` (also behind ``loop.start_tls``) runs over the
:class:`~usertcp.aio.transport.UsertcpTransport` (which implements the Transport API it
needs), so the handshake, TLS 1.3 and ``server_hostname`` checks are the standard
library's.
"""

from __future__ import annotations

import asyncio
import errno
import os
import ssl as _ssl
import weakref
from asyncio import sslproto
from collections.abc import Callable
from typing import Any

from usertcp.aio.transport import TransportSocket, UsertcpTransport
from usertcp.api import sockets as usock
from usertcp.net.aio_driver import LoopDriver
from usertcp.tcp.stack import Listener, Stack

__all__ = ["Server", "connect_socket", "socket_host", "wrap_socket"]

ProtocolFactory = Callable[[], asyncio.BaseProtocol]

_hosts: weakref.WeakKeyDictionary[LoopDriver, dict[int, usock.Host]] = weakref.WeakKeyDictionary()


def socket_host(driver: LoopDriver, stack: Stack) -> usock.Host:
    """The socket-API host of ``stack`` on ``driver`` (one per pair: it owns the port table)."""
    per_driver = _hosts.setdefault(driver, {})
    host = per_driver.get(id(stack))
    if host is None or host.stack is not stack:
        host = per_driver[id(stack)] = usock.Host(stack, driver, name=stack.name or None)
    return host


async def connect_socket(driver: LoopDriver, sock: usock.Socket, address: tuple[Any, ...],
                         timeout: float | None = None) -> None:
    """Connect a usertcp socket without blocking the loop; raises as ``connect()`` would."""
    sock.setblocking(False)
    try:
        sock.connect(address)
        return
    except BlockingIOError as exc:
        if exc.errno != errno.EINPROGRESS:
            raise

    def settled() -> bool:
        conn = sock.connection
        return conn is None or conn.state.name not in ("SYN_SENT", "SYN_RECEIVED")

    try:
        done = await driver.wait_for(settled, timeout)
    except BaseException:          # cancelled: do not leave a half-open attempt behind
        sock.close()
        raise
    if not done:
        sock.close()
        raise TimeoutError(errno.ETIMEDOUT, f"connect to {address[0]}:{address[1]} timed out")
    err = sock.getsockopt(usock.SOL_SOCKET, usock.SO_ERROR)
    if err:
        sock.close()
        raise OSError(err, f"connect to {address[0]}:{address[1]}: {os.strerror(err)}")


async def wrap_socket(driver: LoopDriver, sock: usock.Socket, protocol: asyncio.BaseProtocol, *,
                      server: Server | None = None, ssl: _ssl.SSLContext | None = None,
                      server_side: bool = False, server_hostname: str | None = None,
                      ssl_handshake_timeout: float | None = None,
                      ssl_shutdown_timeout: float | None = None) -> asyncio.Transport:
    """Make the transport of a connected socket and start ``protocol`` on it.

    With ``ssl``, asyncio's ``sslproto.SSLProtocol`` runs over the transport: the
    protocol's ``connection_made`` gets the TLS transport once the handshake completes.
    """
    if ssl is None:
        transport = UsertcpTransport(driver, sock, protocol, server=server)
        transport.begin()
        return transport
    # As asyncio's own _create_connection_transport: SSLProtocol calls the application's
    # connection_made when the handshake completes, before any decrypted data reaches it
    # (a client's request often arrives in the same read as its Finished message).
    waiter: asyncio.Future[None] = driver.loop.create_future()
    ssl_protocol = sslproto.SSLProtocol(driver.loop, protocol, ssl, waiter, server_side, server_hostname,
                                        # typeshed says int; asyncio takes seconds as a float
                                        ssl_handshake_timeout=ssl_handshake_timeout,  # type: ignore[arg-type]
                                        ssl_shutdown_timeout=ssl_shutdown_timeout)
    raw = UsertcpTransport(driver, sock, ssl_protocol, server=server)
    raw.begin()
    try:
        await waiter
    except BaseException:
        raw.close()
        raise
    # The transport the application uses; asyncio's loop returns the same object.
    app_transport: asyncio.Transport = ssl_protocol._app_transport
    return app_transport


def client_ssl_context(ssl: _ssl.SSLContext | bool | None) -> _ssl.SSLContext | None:
    """asyncio's rule: ``ssl=True`` means a default (verifying) client context."""
    if ssl is True:
        return _ssl.create_default_context()
    if ssl is False or ssl is None:
        return None
    if not isinstance(ssl, _ssl.SSLContext):
        raise TypeError(f"ssl must be an SSLContext, True or None, not {type(ssl).__name__}")
    return ssl


class Server(asyncio.AbstractServer):
    """Listening usertcp sockets serving ``protocol_factory``; ``asyncio.Server``-like.

    ``wait_closed()`` waits for the listeners to be closed and for every connection they
    accepted to be lost (the Python 3.12 behaviour). ``preload(data)`` sets the
    listeners' preload (MSG_PRELOAD): data the stack sends on every connection accepted
    from then on, right after the handshake; ``preload(data, app_sends_it=True)`` serves an
    unmodified application that still writes that greeting itself. With ``ssl``, each
    accepted connection first completes a TLS handshake (a failure is logged and the
    connection closed).
    """

    def __init__(self, driver: LoopDriver, socks: list[usock.Socket], protocol_factory: ProtocolFactory,
                 *, ssl: _ssl.SSLContext | None = None, ssl_handshake_timeout: float | None = None,
                 ssl_shutdown_timeout: float | None = None) -> None:
        self._driver = driver
        self._loop = driver.loop
        self._socks = socks
        self._factory = protocol_factory
        self._ssl = ssl
        self._ssl_timeouts = (ssl_handshake_timeout, ssl_shutdown_timeout)
        self._transports: set[UsertcpTransport] = set()
        self._serving = False
        self._closed = False
        self._remove_hook: Callable[[], None] | None = None
        self._serving_forever: asyncio.Future[None] | None = None
        self._sockets = tuple(TransportSocket(s) for s in socks)
        self._app_sends_preload = False
        # Connections whose application repeated the preload exactly / wrote something else.
        self.preload_repeats = {"matched": 0, "mismatched": 0}

    @property
    def listener(self) -> Listener:
        """The (first) listener: the stack-level object behind the listening socket."""
        lst = self._socks[0].listener
        assert lst is not None
        return lst

    def __repr__(self) -> str:
        return f"<usertcp.aio.Server {[s.listener for s in self._socks]!r}>"

    # -- asyncio.AbstractServer --------------------------------------------------------

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return self._serving

    @property
    def sockets(self) -> tuple[TransportSocket, ...]:
        return () if self._closed else self._sockets

    async def start_serving(self) -> None:
        self.begin_serving()

    def begin_serving(self) -> None:
        if self._serving or self._closed:
            return
        self._serving = True
        for s in self._socks:
            lst = s.listener
            assert lst is not None
            lst.on_accept_ready = self._on_accept_ready
        self._remove_hook = self._driver.add_hook(self._accept_ready)   # also catches TFO children
        self._loop.call_soon(self._accept_ready)

    async def serve_forever(self) -> None:
        if self._serving_forever is not None:
            raise RuntimeError(f"server {self!r} is already being awaited on serve_forever()")
        if self._closed:
            raise RuntimeError(f"server {self!r} is closed")
        self.begin_serving()
        self._serving_forever = self._loop.create_future()
        try:
            await self._serving_forever
        except asyncio.CancelledError:
            self.close()
            await self.wait_closed()
            raise
        finally:
            self._serving_forever = None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._serving = False
        if self._remove_hook is not None:
            self._remove_hook()
        for s in self._socks:
            lst = s.listener
            if lst is not None:
                lst.on_accept_ready = None
            s.close()
        if self._serving_forever is not None and not self._serving_forever.done():
            self._serving_forever.cancel()
        self._driver.notify()

    async def wait_closed(self) -> None:
        await self._driver.wait_for(lambda: self._closed and not self._transports)

    # -- 3.13 additions, and usertcp's own -------------------------------------------------

    def close_clients(self) -> None:
        for t in list(self._transports):
            t.close()

    def abort_clients(self) -> None:
        for t in list(self._transports):
            t.abort()

    def preload(self, data: bytes, *, app_sends_it: bool = False) -> int:
        """Set (replace) the listeners' preload (``setsockopt(TCP_PRELOAD)``; ``send(data,
        MSG_PRELOAD)`` would append); empty clears it. Returns ``len(data)``.

        ``app_sends_it``: the application writes the same bytes itself on every connection,
        as an unmodified server writes its greeting (aiosmtpd, for one). The stack has
        already sent them, so each accepted connection's transport compares the
        application's first bytes with the listener's preload byte for byte and does not
        send the equal ones twice: the peer gets the byte stream the application wrote,
        only sooner. Nothing else is ever dropped: bytes that differ are sent as written
        and reported through the loop's exception handler; ``preload_repeats`` counts the
        connections of each kind. Plain (not ``ssl``) servers only. The choice stays until
        the next ``preload()`` call, also for a preload set on the socket itself.
        """
        if app_sends_it and self._ssl is not None:
            raise ValueError("app_sends_it: the preload is sent before TLS, the application writes inside it")
        for s in self._socks:
            s.setsockopt(usock.IPPROTO_TCP, usock.TCP_PRELOAD, bytes(data))
        self._app_sends_preload = app_sends_it
        return len(data)

    def count_preload_repeat(self, *, matched: bool) -> None:
        """A transport's verdict on its application's repeat of the preload (``preload_repeats``)."""
        self.preload_repeats["matched" if matched else "mismatched"] += 1

    # -- internals ---------------------------------------------------------------------

    def _on_accept_ready(self, _lst: Listener) -> None:
        self._loop.call_soon(self._accept_ready)

    def _accept_ready(self) -> None:
        for lsock in self._socks:
            lst = lsock.listener
            # Runs after every driver step: look at the queue before paying for accept().
            while self._serving and lst is not None and lst.accept_queue:
                try:
                    child, _addr = lsock.accept()
                except BlockingIOError:
                    break
                except OSError as exc:
                    self._loop.call_exception_handler({"message": "accept() failed", "exception": exc,
                                                       "server": self})
                    break
                self._serve(child, lst.preload if self._app_sends_preload and lst is not None else b"")

    def _serve(self, child: usock.Socket, preload_repeat: bytes = b"") -> None:
        conn = child.connection
        if conn is None or conn.state.name == "CLOSED":
            child.close()        # reset before it was accepted: nothing to serve
            return
        child.setblocking(False)
        try:
            protocol = self._factory()
        except Exception as exc:
            self._loop.call_exception_handler({"message": "protocol factory failed",
                                               "exception": exc, "server": self})
            conn.abort(self._driver.now())
            child.close()
            self._driver.kick_soon()
            return
        if self._ssl is None:
            transport = UsertcpTransport(self._driver, child, protocol, server=self)
            if preload_repeat:
                transport.expect_preload_repeat(preload_repeat)
            transport.begin()
            return
        self._loop.create_task(self._tls_accept(child, protocol))

    async def _tls_accept(self, child: usock.Socket, protocol: asyncio.BaseProtocol) -> None:
        handshake, shutdown = self._ssl_timeouts
        try:
            await wrap_socket(self._driver, child, protocol, server=self, ssl=self._ssl, server_side=True,
                              ssl_handshake_timeout=handshake, ssl_shutdown_timeout=shutdown)
        except (TimeoutError, OSError, _ssl.SSLError, ConnectionError) as exc:
            # As asyncio's own servers do: a failed handshake is logged, the server goes on.
            self._loop.call_exception_handler({"message": "TLS handshake failed on an accepted connection",
                                               "exception": exc, "server": self})

    def track(self, transport: UsertcpTransport) -> None:
        self._transports.add(transport)

    def untrack(self, transport: UsertcpTransport) -> None:
        self._transports.discard(transport)
        self._driver.notify()       # wait_closed may be done now
