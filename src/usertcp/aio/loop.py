"""An asyncio event loop whose TCP is usertcp: unmodified asyncio applications run on it.

:class:`UsertcpEventLoop` is a ``SelectorEventLoop`` (timers, subprocesses, signals,
executors, Unix sockets: the standard loop's) whose TCP calls go to usertcp stacks, on an
in-memory :class:`~usertcp.net.memnet.Network` or on a TUN device:
``create_connection``/``create_server`` (so ``asyncio.open_connection``/``start_server``),
``connect_accepted_socket``, ``sock_connect``/``sock_accept``/``sock_recv``/
``sock_recv_into``/``sock_sendall``/``sock_sendfile``, ``start_tls`` and ``ssl=``
(asyncio's own ``sslproto``), ``getaddrinfo``/``getnameinfo`` for literal addresses and a
hosts table (:class:`HostsTable`). There is no UDP: ``create_datagram_endpoint`` raises
``NotImplementedError``.

On an in-memory network the loop runs in **virtual time** by default: ``loop.time()`` is
a virtual clock, and when nothing is runnable (no ready callback, no pending I/O on a real
file descriptor) it jumps to the next deadline, whether a packet delivery, a TCP timer or
an application's ``asyncio.sleep``. ``asyncio.sleep(60)`` takes no real time, and a run
with the same network seed and stack secrets is reproducible to the byte. Real file
descriptors (a subprocess's pipes, a thread's result) are polled without waiting, so they
do not hold the virtual clock back: code that must wait for real processes should use
real time (``virtual_time=False``). On a TUN device the loop runs in real time.

Which stack a call uses: the one owning the local address it names (``local_addr``, a
server's ``host``), else the one set with :func:`use_stack` in the calling context, else
the loop's default stack (``stack=``, or the network's first host).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import errno
import functools
import ipaddress
import selectors
import socket as _socket
import ssl as _ssl
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

from usertcp.aio.server import (
    ProtocolFactory,
    Server,
    client_ssl_context,
    connect_socket,
    socket_host,
    wrap_socket,
)
from usertcp.aio.stackapi import listening_socket
from usertcp.aio.transport import UsertcpTransport
from usertcp.api import sockets as usock
from usertcp.net.aio_driver import AsyncioDriver, AsyncioTunDriver, LoopDriver
from usertcp.net.memnet import Network
from usertcp.net.tun import PacketSink, TunDevice
from usertcp.tcp.connection import State
from usertcp.tcp.stack import Stack

__all__ = ["HostsTable", "UsertcpEventLoop", "use_stack"]

_current_stack: contextvars.ContextVar[Stack | None] = contextvars.ContextVar("usertcp_stack", default=None)
_SENDFILE_CHUNK = 256 * 1024


@contextlib.contextmanager
def use_stack(stack: Stack) -> Iterator[Stack]:
    """Make ``stack`` the one this context's TCP calls use (tasks created inside inherit it)."""
    token = _current_stack.set(stack)
    try:
        yield stack
    finally:
        _current_stack.reset(token)


class HostsTable:
    """Names the loop resolves: ``{"name": "10.0.0.2"}`` or ``{"name": ["10.0.0.2", "fd00::2"]}``.

    Names are case-insensitive; a name not in the table raises ``socket.gaierror``
    (EAI_NONAME), as a resolver does for an unknown name. There is no DNS.
    """

    def __init__(self, entries: Mapping[str, str | list[str]] | None = None) -> None:
        self._names: dict[str, list[str]] = {}
        for name, addrs in (entries or {}).items():
            self.add(name, *([addrs] if isinstance(addrs, str) else addrs))

    def add(self, name: str, *addresses: str) -> None:
        for a in addresses:
            ipaddress.ip_address(a)       # ValueError now rather than at lookup time
        self._names.setdefault(name.lower().rstrip("."), []).extend(addresses)

    def lookup(self, name: str) -> list[str]:
        try:
            return [str(ipaddress.ip_address(name))]
        except ValueError:
            pass
        found = self._names.get(name.lower().rstrip("."))
        if not found:
            raise _socket.gaierror(_socket.EAI_NONAME,
                                   f"{name}: Name or service not known (usertcp hosts table)")
        return list(found)

    def reverse(self, address: str) -> str | None:
        for name, addrs in self._names.items():
            if address in addrs:
                return name
        return None


class _VirtualClockSelector(selectors.BaseSelector):
    """The loop's selector in virtual time: poll real fds, else jump the clock to the deadline."""

    def __init__(self, real: selectors.BaseSelector, advance: Callable[[float], None]) -> None:
        self._real = real
        self._advance = advance

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._real.get_map()

    def close(self) -> None:
        self._real.close()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._real.select(0)
        if ready or (timeout is not None and timeout <= 0):
            return ready
        if timeout is None:
            # Nothing is scheduled: only real I/O (a signal, a thread, a child) can wake the loop.
            return self._real.select(None)
        self._advance(timeout)          # nothing runnable: time jumps to the next deadline
        return []


def _port_number(port: int | str | bytes | None) -> int:
    if port is None:
        return 0
    if isinstance(port, bytes):
        port = port.decode("ascii")
    if isinstance(port, int):
        return port
    if port.isdigit():
        return int(port)
    try:
        return _socket.getservbyname(port, "tcp")
    except OSError:
        raise _socket.gaierror(_socket.EAI_SERVICE,
                               f"{port}: Servname not supported for ai_socktype") from None


def _family_of(ip: str) -> int:
    return _socket.AF_INET6 if ":" in ip else _socket.AF_INET


class UsertcpEventLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose TCP runs on usertcp (see the module doc).

    ``network`` (in-memory, virtual time unless ``virtual_time=False``) or ``stack`` +
    ``device`` (a TUN device, real time; ``pcap`` records its packets). ``hosts`` is the
    name table for ``getaddrinfo``; ``start_time`` the virtual clock's first reading.
    A network takes one driver for its lifetime, so it serves one loop: build a new
    network for the next ``run``. ``reuse_port`` of ``create_server`` is accepted and
    ignored (usertcp has no SO_REUSEPORT groups).
    """

    def __init__(self, network: Network | None = None, *, stack: Stack | None = None,
                 device: TunDevice | None = None, pcap: PacketSink | None = None,
                 hosts: HostsTable | Mapping[str, str | list[str]] | None = None,
                 virtual_time: bool | None = None, start_time: float = 0.0) -> None:
        if (network is None) == (device is None):
            raise ValueError("give either network= (in-memory) or stack= and device= (TUN)")
        if device is not None and stack is None:
            raise ValueError("a TUN device needs the stack= it runs")
        if device is not None and virtual_time:
            raise ValueError("a TUN device runs in real time")
        self._virtual = network is not None if virtual_time is None else virtual_time
        self._vnow = start_time
        if not self._virtual:
            # asyncio's own clock (BaseEventLoop.time), without a Python frame per reading:
            # the loop reads it several times per iteration.
            self.time = time.monotonic  # type: ignore[method-assign]
        real = selectors.DefaultSelector()
        super().__init__(_VirtualClockSelector(real, self._advance) if self._virtual else real)
        self.hosts = hosts if isinstance(hosts, HostsTable) else HostsTable(hosts)
        self._adopted: weakref.WeakKeyDictionary[_socket.socket, usock.Socket] = weakref.WeakKeyDictionary()
        self.driver: LoopDriver
        if network is not None:
            self.network: Network | None = network
            self.driver = AsyncioDriver(network, loop=self)
            self._stacks = [h.endpoint for h in network.hosts if isinstance(h.endpoint, Stack)]
            if not self._stacks:
                raise ValueError("the network has no usertcp Stack")
        else:
            assert stack is not None and device is not None
            self.network = None
            self.driver = AsyncioTunDriver(stack, device, pcap=pcap, loop=self)
            self._stacks = [stack]
        self.default_stack = stack if stack is not None else self._stacks[0]

    # -- clock -------------------------------------------------------------------------

    @property
    def virtual_time(self) -> bool:
        return self._virtual

    def time(self) -> float:
        return self._vnow if self._virtual else super().time()

    def _advance(self, seconds: float) -> None:
        self._vnow += seconds

    def close(self) -> None:
        if not self.is_closed():
            close_driver = getattr(self.driver, "close", None)
            if close_driver is not None:
                close_driver()
        super().close()

    # -- stacks ------------------------------------------------------------------------

    def stack_for(self, address: str | None = None) -> Stack:
        """The stack owning ``address``, else the context's (:func:`use_stack`), else the default."""
        if address:
            with contextlib.suppress(ValueError):
                packed = ipaddress.ip_address(address).packed
                for st in self._stacks:
                    if packed in st.addresses:
                        return st
        current = _current_stack.get()
        if current is not None and any(current is st for st in self._stacks):
            return current
        return self.default_stack

    def socket_host(self, stack: Stack | None = None) -> usock.Host:
        """The socket-API host of ``stack`` on this loop: ``usertcp.socket.socket(host=...)``
        makes a socket to configure (preload, Fast Open, MD5 keys) and pass as ``sock=``."""
        return socket_host(self.driver, stack if stack is not None else self.stack_for())

    def socket(self, family: int = _socket.AF_INET, *, stack: Stack | None = None) -> usock.Socket:
        """A new non-blocking usertcp socket on ``stack`` (default: as :meth:`stack_for`)."""
        s = usock.Socket(family, usock.SOCK_STREAM, host=self.socket_host(stack))
        s.setblocking(False)
        return s

    def _usertcp_socket(self, sock: Any) -> usock.Socket | None:
        if isinstance(sock, usock.Socket):
            return sock
        if isinstance(sock, _socket.socket):
            return self._adopted.get(sock)
        return None

    # -- names -------------------------------------------------------------------------

    async def getaddrinfo(self, host: bytes | str | None, port: bytes | str | int | None, *,
                          family: int = 0, type: int = 0, proto: int = 0,
                          flags: int = 0) -> list[tuple[Any, ...]]:
        """Literal addresses and the hosts table; TCP only (``type`` 0 gives SOCK_STREAM)."""
        if type not in (0, _socket.SOCK_STREAM):
            raise _socket.gaierror(_socket.EAI_SOCKTYPE, "usertcp resolves TCP (SOCK_STREAM) only")
        number = _port_number(port)
        if isinstance(host, bytes):
            host = host.decode("idna")
        if host is None:
            v6 = family == _socket.AF_INET6
            passive = bool(flags & _socket.AI_PASSIVE)
            addrs = [("::" if v6 else "0.0.0.0") if passive else ("::1" if v6 else "127.0.0.1")]
        else:
            addrs = self.hosts.lookup(host)
        out: list[tuple[Any, ...]] = []
        for ip in addrs:
            fam = _family_of(ip)
            if family not in (0, _socket.AF_UNSPEC, fam):
                continue
            canon = host if flags & _socket.AI_CANONNAME and host is not None else ""
            addr: tuple[Any, ...] = (ip, number) if fam == _socket.AF_INET else (ip, number, 0, 0)
            out.append((_socket.AddressFamily(fam), _socket.SOCK_STREAM, _socket.IPPROTO_TCP, canon, addr))
        if not out:
            raise _socket.gaierror(_socket.EAI_ADDRFAMILY, f"{host}: no address of the requested family")
        return out

    async def getnameinfo(self, sockaddr: tuple[Any, ...], flags: int = 0) -> tuple[str, str]:
        ip, port = str(sockaddr[0]), int(sockaddr[1])
        name = None if flags & _socket.NI_NUMERICHOST else self.hosts.reverse(ip)
        if name is None and flags & _socket.NI_NAMEREQD:
            raise _socket.gaierror(_socket.EAI_NONAME, f"{ip}: no name in the usertcp hosts table")
        return (name or ip, str(port))

    # -- connections -------------------------------------------------------------------

    async def create_connection(  # type: ignore[override]
            self, protocol_factory: ProtocolFactory, host: str | None = None, port: int | None = None, *,
            ssl: _ssl.SSLContext | bool | None = None, family: int = 0, proto: int = 0, flags: int = 0,
            sock: Any = None, local_addr: tuple[str, int] | None = None, server_hostname: str | None = None,
            ssl_handshake_timeout: float | None = None, ssl_shutdown_timeout: float | None = None,
            happy_eyeballs_delay: float | None = None, interleave: int | None = None,
            all_errors: bool = False) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        context = client_ssl_context(ssl)
        if server_hostname is not None and context is None:
            raise ValueError("server_hostname is only meaningful with ssl")
        if server_hostname is None and context is not None:
            if not host:
                raise ValueError("You must set server_hostname when using ssl without a host")
            server_hostname = host
        if sock is not None:
            if host is not None or port is not None:
                raise ValueError("host/port and sock can not be specified at the same time")
            s = self._take_socket(sock)
        elif host is None and port is None:
            raise ValueError("host and port was not specified and no sock specified")
        else:
            s = await self._connect_any(host, port, family, proto, flags, local_addr, all_errors)
        protocol = protocol_factory()
        try:
            transport = await wrap_socket(self.driver, s, protocol, ssl=context,
                                          server_hostname=server_hostname,
                                          ssl_handshake_timeout=ssl_handshake_timeout,
                                          ssl_shutdown_timeout=ssl_shutdown_timeout)
        except BaseException:
            s.close()
            raise
        return transport, protocol

    def _take_socket(self, sock: Any) -> usock.Socket:
        s = self._usertcp_socket(sock)
        if s is None:
            raise ValueError(f"{sock!r} is not a usertcp socket: this loop's TCP is usertcp "
                             "(make one with loop.socket() or "
                             "usertcp.socket.socket(host=loop.socket_host()))")
        if isinstance(sock, _socket.socket):
            del self._adopted[sock]
            sock.close()                   # the kernel socket stood for it and was never connected
        if s.connection is None and s.listener is None:
            raise OSError(errno.ENOTCONN, "the socket passed as sock= must be connected")
        s.setblocking(False)
        return s

    async def _connect_any(self, host: str | None, port: int | None, family: int, proto: int, flags: int,
                           local_addr: tuple[str, int] | None, all_errors: bool) -> usock.Socket:
        infos = await self.getaddrinfo(host, port, family=family, type=_socket.SOCK_STREAM,
                                       proto=proto, flags=flags)
        stack = self.stack_for(local_addr[0] if local_addr else None)
        errors: list[OSError] = []
        for fam, _type, _proto, _canon, address in infos:
            s = usock.Socket(fam, usock.SOCK_STREAM, host=socket_host(self.driver, stack))
            try:
                if local_addr is not None:
                    s.bind(local_addr)
                await connect_socket(self.driver, s, address)
                return s
            except OSError as exc:
                s.close()
                errors.append(exc)
        if all_errors:
            raise ExceptionGroup("create_connection failed", errors)
        if len(errors) == 1 or len({str(e) for e in errors}) == 1:
            raise errors[0]
        raise OSError(f"Multiple exceptions: {', '.join(str(e) for e in errors)}")

    async def connect_accepted_socket(  # type: ignore[override]
            self, protocol_factory: ProtocolFactory, sock: Any, *, ssl: _ssl.SSLContext | None = None,
            ssl_handshake_timeout: float | None = None,
            ssl_shutdown_timeout: float | None = None) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        s = self._take_socket(sock)
        protocol = protocol_factory()
        transport = await wrap_socket(self.driver, s, protocol, ssl=ssl, server_side=True,
                                      ssl_handshake_timeout=ssl_handshake_timeout,
                                      ssl_shutdown_timeout=ssl_shutdown_timeout)
        return transport, protocol

    async def create_server(  # type: ignore[override]
            self, protocol_factory: ProtocolFactory, host: str | list[str] | None = None,
            port: int | None = None, *, family: int = _socket.AF_UNSPEC, flags: int = _socket.AI_PASSIVE,
            sock: Any = None, backlog: int = 100, ssl: _ssl.SSLContext | None = None,
            reuse_address: bool | None = None, reuse_port: bool | None = None, keep_alive: bool | None = None,
            ssl_handshake_timeout: float | None = None, ssl_shutdown_timeout: float | None = None,
            start_serving: bool = True) -> Server:
        if isinstance(ssl, bool):
            raise TypeError("ssl argument must be an SSLContext or None")
        if sock is not None:
            if host is not None or port is not None:
                raise ValueError("host/port and sock can not be specified at the same time")
            s = self._take_socket(sock)
            if s.listener is None:
                s.listen(backlog)
            socks = [s]
        else:
            socks = await self._listen_all(host, port or 0, family, flags, backlog)
        if keep_alive:
            for s in socks:               # accepted connections inherit it (Linux sk_clone)
                s.setsockopt(usock.SOL_SOCKET, usock.SO_KEEPALIVE, 1)
        server = Server(self.driver, socks, protocol_factory, ssl=ssl,
                        ssl_handshake_timeout=ssl_handshake_timeout,
                        ssl_shutdown_timeout=ssl_shutdown_timeout)
        if start_serving:
            server.begin_serving()
            await asyncio.sleep(0)        # as asyncio: let the server start accepting
        return server

    async def _listen_all(self, host: str | list[str] | None, port: int, family: int, flags: int,
                          backlog: int) -> list[usock.Socket]:
        names: list[str | None] = [None] if host in (None, "") else (
            [host] if isinstance(host, str) else list(host))
        socks: list[usock.Socket] = []
        try:
            for name in names:
                for fam, _t, _p, _c, address in await self.getaddrinfo(name, port, family=family,
                                                                       type=_socket.SOCK_STREAM, flags=flags):
                    ip = None if name is None else address[0]
                    socks.append(listening_socket(self.driver, self.stack_for(ip), ip, port, backlog, fam))
        except BaseException:
            for s in socks:
                s.close()
            raise
        return socks

    async def create_datagram_endpoint(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("usertcp has no UDP: create_datagram_endpoint is not available on "
                                  "UsertcpEventLoop (TCP only)")

    # -- sock_* ------------------------------------------------------------------------

    async def _retry(self, attempt: Callable[[], Any], ready: Callable[[], bool]) -> Any:
        """Run a non-blocking socket call until it stops raising BlockingIOError."""
        while True:
            try:
                return attempt()
            except (BlockingIOError, InterruptedError):
                pass
            # If ready() already holds the attempt disagreed: wait for the next step, not spin.
            await self.driver.wait_for(ready, next_step=ready())

    async def sock_connect(self, sock: Any, address: Any) -> None:
        s = self._usertcp_socket(sock)
        if s is None and isinstance(sock, _socket.socket) \
                and sock.family in (_socket.AF_INET, _socket.AF_INET6):
            # A kernel TCP socket (e.g. from aiohappyeyeballs): this loop's TCP is usertcp, so a
            # usertcp socket stands in for it; create_connection(sock=...) then takes it over.
            s = usock.Socket(sock.family, usock.SOCK_STREAM, host=self.socket_host())
            self._adopted[sock] = s
        if s is None:
            return await super().sock_connect(sock, address)
        infos = await self.getaddrinfo(address[0], address[1], family=int(s.family), type=_socket.SOCK_STREAM)
        await connect_socket(self.driver, s, infos[0][4])
        return None

    async def sock_accept(self, sock: Any) -> tuple[Any, Any]:
        s = self._usertcp_socket(sock)
        if s is None:
            return await super().sock_accept(sock)
        child, address = await self._retry(s.accept, lambda: _acceptable(s))
        child.setblocking(False)
        return child, address

    async def sock_recv(self, sock: Any, n: int) -> bytes:
        data: bytes = await self._sock_read(sock, lambda s: s.recv(n), super().sock_recv, n)
        return data

    async def sock_recv_into(self, sock: Any, buf: Any) -> int:
        count: int = await self._sock_read(sock, lambda s: s.recv_into(buf), super().sock_recv_into, buf)
        return count

    async def _sock_read(self, sock: Any, read: Callable[[usock.Socket], Any],
                         standard: Callable[[Any, Any], Awaitable[Any]], arg: Any) -> Any:
        """``read(s)`` on a usertcp socket, retried until it has data or EOF; a kernel socket
        goes to the standard loop's ``standard(sock, arg)``."""
        s = self._usertcp_socket(sock)
        if s is None:
            return await standard(sock, arg)
        return await self._retry(lambda: read(s), lambda: _readable(s))

    async def sock_sendall(self, sock: Any, data: Any) -> None:
        s = self._usertcp_socket(sock)
        if s is None:
            return await super().sock_sendall(sock, data)
        view = memoryview(data).cast("B")
        while view:
            sent: int = await self._retry(functools.partial(s.send, view), lambda: _writable(s))
            view = view[sent:]
        return None

    async def sock_sendfile(self, sock: Any, file: Any, offset: int = 0, count: int | None = None,
                            *, fallback: bool | None = True) -> int:
        """Copy ``file`` to the socket (usertcp has no zero-copy path from a file: read + send)."""
        s = self._usertcp_socket(sock)
        if s is None:
            return await super().sock_sendfile(sock, file, offset, count, fallback=bool(fallback))
        if "b" not in getattr(file, "mode", "b"):
            raise ValueError("file should be opened in binary mode")
        if count is not None and count <= 0:
            raise ValueError(f"count must be a positive integer (got {count!r})")
        file.seek(offset)
        total = 0
        try:
            while count is None or total < count:
                chunk = file.read(_SENDFILE_CHUNK if count is None else min(_SENDFILE_CHUNK, count - total))
                if not chunk:
                    break
                await self.sock_sendall(s, chunk)
                total += len(chunk)
        finally:
            file.seek(offset + total)     # as asyncio: the file position ends after what was sent
        return total


    async def sendfile(self, transport: asyncio.WriteTransport, file: Any, offset: int = 0,
                       count: int | None = None, *, fallback: bool = True) -> int:
        """``loop.sendfile``: a usertcp transport has no zero-copy file path, so this is
        asyncio's fallback (read a chunk, write it, wait for the buffer to drain)."""
        if not isinstance(transport, UsertcpTransport):
            return await super().sendfile(transport, file, offset, count, fallback=fallback)
        if not fallback:
            raise RuntimeError(f"fallback is disabled and native sendfile is not supported for {transport!r}")
        if count is not None and count <= 0:
            raise ValueError(f"count must be a positive integer (got {count!r})")
        file.seek(offset)
        total = 0
        try:
            while count is None or total < count:
                chunk = file.read(_SENDFILE_CHUNK if count is None else min(_SENDFILE_CHUNK, count - total))
                if not chunk:
                    break
                transport.write(chunk)
                total += len(chunk)
                await transport.drained()
        finally:
            file.seek(offset + total)
        return total


def _acceptable(s: usock.Socket) -> bool:
    lst = s.listener
    return lst is None or lst.closed or bool(lst.accept_queue)


def _readable(s: usock.Socket) -> bool:
    c = s.connection
    return (c is None or c.readable_bytes > 0 or c.fin_received or bool(c.error)
            or c.state is State.CLOSED or c.read_shutdown)


def _writable(s: usock.Socket) -> bool:
    c = s.connection
    return c is None or c.writable or bool(c.error) or c.state is State.CLOSED
