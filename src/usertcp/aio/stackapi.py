"""The stack-level API: asyncio calls that name the usertcp stack (``stack=``), on any loop.

These work on a standard asyncio loop with an :class:`~usertcp.net.aio_driver.AsyncioDriver`
or :class:`~usertcp.net.aio_driver.AsyncioTunDriver` created in it. On a
:class:`~usertcp.aio.UsertcpEventLoop` the plain asyncio calls (``loop.create_connection``,
``asyncio.open_connection``, ...) reach usertcp without naming a stack.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Awaitable, Callable

from usertcp.aio.server import ProtocolFactory, Server, connect_socket, socket_host, wrap_socket
from usertcp.aio.transport import UsertcpTransport
from usertcp.api import sockets as usock
from usertcp.net.aio_driver import LoopDriver, driver_for
from usertcp.tcp.stack import Stack

__all__ = ["create_connection", "create_server", "listening_socket", "open_connection", "start_server"]

_DEFAULT_LIMIT = 2 ** 16   # asyncio.streams' default


def _family(address: str | None) -> int:
    if not address:
        return usock.AF_INET
    return usock.AF_INET6 if ipaddress.ip_address(address).version == 6 else usock.AF_INET


def _pick_driver(stack: Stack, driver: LoopDriver | None) -> LoopDriver:
    return driver if driver is not None else driver_for(stack)


def listening_socket(driver: LoopDriver, stack: Stack, host: str | None, port: int, backlog: int,
                     family: int | None = None) -> usock.Socket:
    """A bound, listening, non-blocking usertcp socket of ``stack``."""
    fam = family if family is not None else _family(host)
    sock = usock.Socket(fam, usock.SOCK_STREAM, host=socket_host(driver, stack))
    try:
        sock.setblocking(False)
        sock.setsockopt(usock.SOL_SOCKET, usock.SO_REUSEADDR, 1)   # as asyncio's servers do
        # Accepted sockets inherit TCP_NODELAY (Linux sk_clone_lock copies tcp_sock's nonagle),
        # so each transport finds it on and does not set it per connection as asyncio does.
        sock.setsockopt(usock.IPPROTO_TCP, usock.TCP_NODELAY, 1)
        sock.bind((host or ("::" if fam == usock.AF_INET6 else "0.0.0.0"), port))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


async def create_connection(protocol_factory: ProtocolFactory, host: str, port: int,
                            *, stack: Stack, driver: LoopDriver | None = None,
                            local_addr: tuple[str, int] | None = None,
                            timeout: float | None = None) -> tuple[UsertcpTransport, asyncio.BaseProtocol]:
    """Like ``loop.create_connection``: open a TCP connection from ``stack`` to ``host:port``.

    Returns ``(transport, protocol)`` after ``protocol.connection_made``. A reset answer
    raises ``ConnectionRefusedError``; SYN retries running out raise ``TimeoutError``;
    ``timeout`` (seconds) bounds the wait (``TimeoutError``, the attempt is aborted).
    """
    drv = _pick_driver(stack, driver)
    sock = usock.Socket(_family(host), usock.SOCK_STREAM, host=socket_host(drv, stack))
    if local_addr is not None:
        sock.bind(local_addr)
    await connect_socket(drv, sock, (host, port), timeout)
    protocol = protocol_factory()
    transport = await wrap_socket(drv, sock, protocol)
    assert isinstance(transport, UsertcpTransport)
    return transport, protocol


async def create_server(protocol_factory: ProtocolFactory, host: str | None = None,
                        port: int = 0, *, stack: Stack, driver: LoopDriver | None = None,
                        backlog: int = 128, preload: bytes | None = None, app_sends_preload: bool = False,
                        start_serving: bool = True) -> Server:
    """Like ``loop.create_server``: listen on ``host:port`` (``None``/``""``: any address).

    ``preload``: bytes sent on every accepted connection right after the handshake (the
    listener preload feature); ``app_sends_preload``: the application still writes them
    itself (see :meth:`Server.preload`, ``app_sends_it``).
    """
    drv = _pick_driver(stack, driver)
    server = Server(drv, [listening_socket(drv, stack, host, port, backlog)], protocol_factory)
    if preload:
        try:
            server.preload(preload, app_sends_it=app_sends_preload)
        except BaseException:
            server.close()
            raise
    if start_serving:
        server.begin_serving()
    return server


async def open_connection(host: str, port: int, *, stack: Stack, driver: LoopDriver | None = None,
                          limit: int = _DEFAULT_LIMIT, local_addr: tuple[str, int] | None = None,
                          timeout: float | None = None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Like ``asyncio.open_connection``: a (StreamReader, StreamWriter) pair over usertcp."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit, loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    transport, _ = await create_connection(lambda: protocol, host, port, stack=stack, driver=driver,
                                           local_addr=local_addr, timeout=timeout)
    writer = asyncio.StreamWriter(transport, protocol, reader, loop)
    return reader, writer


ClientConnected = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None] | None]


async def start_server(client_connected_cb: ClientConnected, host: str | None = None, port: int = 0, *,
                       stack: Stack, driver: LoopDriver | None = None, limit: int = _DEFAULT_LIMIT,
                       backlog: int = 128, preload: bytes | None = None, app_sends_preload: bool = False,
                       start_serving: bool = True) -> Server:
    """Like ``asyncio.start_server``: ``client_connected_cb(reader, writer)`` per connection
    (``preload``, ``app_sends_preload``: as :func:`create_server`)."""
    loop = asyncio.get_running_loop()

    def factory() -> asyncio.BaseProtocol:
        reader = asyncio.StreamReader(limit=limit, loop=loop)
        return asyncio.StreamReaderProtocol(reader, client_connected_cb, loop=loop)

    return await create_server(factory, host, port, stack=stack, driver=driver, backlog=backlog,
                               preload=preload, app_sends_preload=app_sends_preload,
                               start_serving=start_serving)
