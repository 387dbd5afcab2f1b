"""asyncio integration: run usertcp stacks inside an asyncio event loop, with no extra thread.

Two drivers implement the ``Driver`` protocol on the loop's clock (``loop.time()``):

* :class:`AsyncioDriver` runs an in-memory :class:`~usertcp.net.memnet.Network`: packet
  deliveries and stack timers live in one heap (ties keep insertion order, as in the
  other memnet drivers) and one ``loop.call_at`` handle is armed for its head.
* :class:`AsyncioTunDriver` runs one stack on a TUN device: ``loop.add_reader`` on the
  device fd plus one ``call_at`` timer re-armed to ``get_timer()`` after every step.

On top of either, the asyncio APIs: :func:`create_connection`/:func:`create_server` with
``Protocol``/``Transport`` semantics (:class:`UsertcpTransport`: flow control through
``pause_writing``/``resume_writing``, ``write_eof``, ``get_extra_info``) and the streams
pair :func:`open_connection`/:func:`start_server`, built from ``asyncio.StreamReader``
and ``StreamReaderProtocol`` exactly as asyncio builds its own. Listener preload is the
``preload=`` argument (or :meth:`Server.preload`); the transport's TCP connection is
``get_extra_info("connection")`` and ``get_extra_info("socket")`` is a target the
objects ring can COLLECT (``ring.prep_collect(sock, ud)``).

Every stack callback (``on_readable``/``on_writable``) only schedules work with
``loop.call_soon``: protocol code never runs inside the stack's packet processing.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import os
import socket as _socket
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from heapq import heappop
from typing import Any

from usertcp.net.driver import _EventLoop
from usertcp.net.memnet import Host as NetHost
from usertcp.net.memnet import Network
from usertcp.net.tun import PacketSink, TunDevice, flush_to_device
from usertcp.tcp.connection import SENDING, Connection, State
from usertcp.tcp.stack import Listener, Stack

__all__ = [
    "AsyncioDriver", "AsyncioTunDriver", "LoopDriver", "Server", "TransportSocket", "UsertcpTransport",
    "create_connection", "create_server", "driver_for", "open_connection", "start_server",
]

_MAX_EVENTS_PER_STEP = 10_000     # then yield to the loop, so a zero-delay storm cannot starve it
_READ_CHUNK = 256 * 1024          # bytes handed to one data_received() call at most

_drivers: weakref.WeakSet[LoopDriver] = weakref.WeakSet()


def driver_for(stack: Stack) -> LoopDriver:
    """The asyncio driver running ``stack`` (created earlier in this loop)."""
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    for drv in list(_drivers):
        if (loop is None or drv.loop is loop) and drv.runs(stack):
            return drv
    raise RuntimeError(f"no asyncio driver runs stack {stack.name or stack!r}: "
                       "create an AsyncioDriver (memnet) or AsyncioTunDriver first")


class LoopDriver:
    """What both asyncio drivers share: the loop clock, ``wait_for`` waiters, after-step hooks.

    ``lock`` is a no-op (everything runs on the loop thread); ``wait_until`` can only
    answer at once (the loop cannot block): coroutines ``await driver.wait_for(pred)``.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self.loop = loop if loop is not None else asyncio.get_running_loop()
        # Single-threaded: everything runs on the loop, so the lock is a no-op.
        self.lock: AbstractContextManager[object] = contextlib.nullcontext()
        self._waiters: list[tuple[Callable[[], bool], asyncio.Future[bool]]] = []
        self._hooks: list[Callable[[], None]] = []
        self._kick_handle: asyncio.Handle | None = None
        self.events = 0
        _drivers.add(self)

    def runs(self, stack: Stack) -> bool:
        raise NotImplementedError

    def now(self) -> float:
        return self.loop.time()

    def kick(self) -> None:
        raise NotImplementedError

    def kick_soon(self) -> None:
        """``kick()`` once at the end of this loop iteration (coalesces many writes)."""
        if self._kick_handle is None:
            self._kick_handle = self.loop.call_soon(self._kick_now)

    def _kick_now(self) -> None:
        self._kick_handle = None
        self.kick()

    def wait_until(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """Driver protocol: the loop cannot block, so only an immediate answer is possible."""
        if predicate() or timeout == 0:
            return predicate()
        raise RuntimeError("an asyncio driver cannot block: use 'await driver.wait_for(...)' "
                           "or non-blocking sockets")

    async def wait_for(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        """Wait until ``predicate()`` holds (checked after every driver step); False on timeout."""
        if predicate():
            return True
        fut: asyncio.Future[bool] = self.loop.create_future()
        entry = (predicate, fut)
        self._waiters.append(entry)
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            return predicate()
        finally:
            with contextlib.suppress(ValueError):
                self._waiters.remove(entry)

    def add_hook(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Run ``hook()`` after every step; returns a function that removes it."""
        self._hooks.append(hook)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._hooks.remove(hook)
        return remove

    def _stepped(self) -> None:
        for hook in list(self._hooks):
            hook()
        if self._waiters:
            for pred, fut in list(self._waiters):
                if not fut.done() and pred():
                    fut.set_result(True)


class AsyncioDriver(_EventLoop, LoopDriver):
    """Runs an in-memory :class:`Network` on the asyncio loop clock (real time).

    Create it inside the running loop (or pass ``loop``); one driver per network. It
    implements the ``Driver`` protocol, so the socket API (non-blocking sockets) and the
    objects store work on it too. ``close()`` cancels its timer.
    """

    def __init__(self, network: Network, *, loop: asyncio.AbstractEventLoop | None = None) -> None:
        LoopDriver.__init__(self, loop)
        _EventLoop.__init__(self, network)
        self._handle: asyncio.TimerHandle | None = None
        self._armed = float("inf")
        self._closed = False
        self.loop.call_soon(self.kick)

    def runs(self, stack: Stack) -> bool:
        return any(h.endpoint is stack for h in self.network.hosts)

    def kick(self) -> None:
        if self._closed:
            return
        self._kick_all(self.loop.time())
        self._stepped()
        self._rearm()

    def close(self) -> None:
        self._closed = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        _drivers.discard(self)

    # Every push to the heap happens inside _after (deliveries via Network.transmit).
    def _after(self, host: NetHost, now: float) -> None:
        super()._after(host, now)
        heap = self._heap
        if heap and heap[0][0] < self._armed:
            self._rearm()

    def _rearm(self) -> None:
        if self._closed:
            return
        self._drop_stale_top()
        t = self._heap[0][0] if self._heap else float("inf")
        if t == self._armed and self._handle is not None:
            return
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._armed = t
        if t != float("inf"):
            self._handle = self.loop.call_at(t, self._run_due)

    def _run_due(self) -> None:
        self._handle = None
        self._armed = float("inf")
        heap = self._heap
        now = self.loop.time()
        n = 0
        while heap and heap[0][0] <= now and n < _MAX_EVENTS_PER_STEP:
            # Late events run at the current time: a stack's clock never goes backwards.
            if not self._dispatch(heappop(heap), now):
                continue
            n += 1
        self.events += n
        self._stepped()
        self._rearm()


class AsyncioTunDriver(LoopDriver):
    """Runs one stack on a :class:`TunDevice` from the loop: ``add_reader`` + one timer.

    ``start()`` registers the reader (done by the constructor unless ``start=False``);
    ``close()`` unregisters it and cancels the timer (the device stays the caller's).
    Writes use ``TunDevice.write``, which waits briefly for POLLOUT if the queue is full.
    """

    def __init__(self, endpoint: Stack, device: TunDevice, *, pcap: PacketSink | None = None,
                 max_batch: int = 64, loop: asyncio.AbstractEventLoop | None = None,
                 start: bool = True) -> None:
        super().__init__(loop)
        self.endpoint = endpoint
        self.device = device
        self.pcap = pcap
        self.max_batch = max_batch
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._reading = False
        self.stats: dict[str, int] = {"rx_packets": 0, "tx_packets": 0, "tx_errors": 0, "timers": 0}
        if start:
            self.start()

    def runs(self, stack: Stack) -> bool:
        return stack is self.endpoint

    def start(self) -> None:
        if not self._reading:
            self.loop.add_reader(self.device.fileno(), self._on_readable)
            self._reading = True
        self.kick()

    def close(self) -> None:
        if self._reading:
            self.loop.remove_reader(self.device.fileno())
            self._reading = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        _drivers.discard(self)

    def kick(self) -> None:
        self._flush()
        self._stepped()
        self._rearm()

    def _on_readable(self) -> None:
        batch = self.device.read_batch(self.max_batch)
        now = self.loop.time()
        receive = self.endpoint.receive
        pcap = self.pcap
        wall = time.time()            # pcap timestamps are wall-clock time, as TunDriver's
        for packet, verified in batch:
            if pcap is not None:
                pcap.write(packet, wall)
            receive(packet, now, checksum_verified=verified)
        self.stats["rx_packets"] += len(batch)
        self.events += len(batch)
        self._run_timer_if_due()
        self.kick()

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        self._run_timer_if_due()
        self.kick()

    def _run_timer_if_due(self) -> None:
        t = self.endpoint.get_timer()
        now = self.loop.time()
        if t is not None and t <= now:
            self.stats["timers"] += 1
            self.endpoint.handle_timer(now)

    def _rearm(self) -> None:
        t = self.endpoint.get_timer()
        if t == self._timer_at and self._timer is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = t
        if t is not None:
            self._timer = self.loop.call_at(t, self._on_timer)

    def _flush(self) -> None:
        flush_to_device(self.endpoint, self.device, self.pcap, self.stats)


# ----------------------------------------------------------------------------- transport


def _sockaddr(addr: bytes, port: int) -> tuple[Any, ...]:
    """asyncio's address shape: (host, port) for IPv4, (host, port, flowinfo, scope_id) for IPv6."""
    ip = str(ipaddress.ip_address(addr))
    return (ip, port) if len(addr) == 4 else (ip, port, 0, 0)


class TransportSocket:
    """What ``get_extra_info("socket")`` returns: addresses, family, and the TCP connection.

    There is no kernel socket (``fileno()`` is -1). ``conn`` makes it a target for the
    objects ring (``ring.prep_collect(sock, user_data)``).
    """

    type = _socket.SOCK_STREAM
    proto = _socket.IPPROTO_TCP

    def __init__(self, conn: Connection | None, listener: Listener | None = None) -> None:
        self.conn = conn
        self.listener = listener
        ip = conn.local_ip if conn is not None else (listener.local_ip if listener is not None else None)
        self.family = _socket.AF_INET6 if ip is not None and len(ip) == 16 else _socket.AF_INET

    def fileno(self) -> int:
        return -1

    def getsockname(self) -> tuple[Any, ...]:
        if self.conn is not None:
            return _sockaddr(self.conn.local_ip, self.conn.local_port)
        assert self.listener is not None
        ip = self.listener.local_ip or bytes(4 if self.family == _socket.AF_INET else 16)
        return _sockaddr(ip, self.listener.port)

    def getpeername(self) -> tuple[Any, ...]:
        if self.conn is None:
            raise OSError(errno.ENOTCONN, os.strerror(errno.ENOTCONN))
        return _sockaddr(self.conn.remote_ip, self.conn.remote_port)

    def __repr__(self) -> str:
        return f"<TransportSocket {self.conn or self.listener!r}>"


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

    def __init__(self, driver: LoopDriver, conn: Connection, protocol: asyncio.BaseProtocol, *,
                 server: Server | None = None) -> None:
        super().__init__({
            "peername": _sockaddr(conn.remote_ip, conn.remote_port),
            "sockname": _sockaddr(conn.local_ip, conn.local_port),
            "socket": TransportSocket(conn),
            "connection": conn,
            "stack": conn.stack,
            "driver": driver,
        })
        self._driver = driver
        self._loop = driver.loop
        self._conn = conn
        self._protocol = protocol
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
        conn.on_readable = self._on_readable
        conn.on_writable = self._on_writable

    def __repr__(self) -> str:
        return f"<UsertcpTransport {self._conn!r} buffered={self._buf_size}>"

    def _start(self) -> None:
        """connection_made, then whatever already arrived."""
        if server := self._server:
            server._attach(self)
        self._protocol.connection_made(self)
        self._schedule_read()

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
        proto = self._protocol
        # While the objects ring collects this connection it owns the receive side.
        if conn.collector is None and not self._closing:
            read = False
            while conn.readable_bytes and not self._reading_paused and not self._lost:
                data = conn.recv(min(conn.readable_bytes, _READ_CHUNK), self._driver.now())
                read = True
                proto.data_received(data)  # type: ignore[attr-defined]
            if read:
                self._driver.kick_soon()   # the read may have opened the window: send the update
            if self._lost or self._reading_paused:
                return
            if conn.fin_received and not conn.readable_bytes and not self._eof_received:
                self._eof_received = True
                keep_open = proto.eof_received()  # type: ignore[attr-defined]
                if not keep_open and not self._closing:
                    self.close()
        self._check_dead()

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
        elif conn.state is State.CLOSED and not conn.readable_bytes:
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
        chunk = data if isinstance(data, bytes) else bytes(data)   # the caller may reuse its buffer
        self._buf.append(chunk)
        self._buf_size += len(chunk)
        self._flush()
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
            while buf and conn.send_space > 0:
                chunk = buf.popleft()
                n = conn.send(chunk, now, more=bool(buf))
                self._buf_size -= n
                if n < len(chunk):
                    buf.appendleft(memoryview(chunk)[n:])
                    break
        except OSError as e:
            self._fatal(e)
            return
        self._driver.kick_soon()
        if not buf:
            if self._closing:
                self._close_tcp()
            elif self._eof and not conn.write_shutdown and conn.state in SENDING:
                conn.shutdown(False, True, now)
        self._maybe_resume_protocol()

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
            self._close_tcp()

    def _close_tcp(self) -> None:
        conn = self._conn
        self._detach()
        if conn.state is not State.CLOSED:
            conn.close(self._driver.now())
            self._driver.kick_soon()
        self._finish(None)

    def abort(self) -> None:
        self._fatal(None)

    def _fatal(self, exc: Exception | None) -> None:
        """Reset the connection and tell the protocol (``exc`` is None for a plain abort)."""
        self._closing = True
        self._buf.clear()
        self._buf_size = 0
        self._detach()
        if self._conn.state is not State.CLOSED:
            self._conn.abort(self._driver.now())
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
            if self._server is not None:
                self._server._detach(self)
                self._server = None

    # -- misc --------------------------------------------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "tcp_info":
            return self._conn.info()
        return super().get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol


# ----------------------------------------------------------------------------- client / server


def _pick_driver(stack: Stack, driver: LoopDriver | None) -> LoopDriver:
    return driver if driver is not None else driver_for(stack)


async def create_connection(protocol_factory: Callable[[], asyncio.BaseProtocol], host: str, port: int,
                            *, stack: Stack, driver: LoopDriver | None = None,
                            local_addr: tuple[str, int] | None = None,
                            timeout: float | None = None) -> tuple[UsertcpTransport, asyncio.BaseProtocol]:
    """Like ``loop.create_connection``: open a TCP connection from ``stack`` to ``host:port``.

    Returns ``(transport, protocol)`` after ``protocol.connection_made``. A reset answer
    raises ``ConnectionRefusedError``; SYN retries running out raise ``TimeoutError``;
    ``timeout`` (seconds) bounds the wait (``TimeoutError``, the attempt is aborted).
    """
    drv = _pick_driver(stack, driver)
    local, lport = local_addr if local_addr is not None else (None, 0)
    conn = stack.create_connection(host, port, local=local, local_port=lport)
    stack.connect(conn, drv.now())
    drv.kick()
    try:
        done = await drv.wait_for(lambda: conn.state is not State.SYN_SENT, timeout)
    except BaseException:         # cancelled: do not leave a half-open attempt behind
        conn.abort(drv.now())
        drv.kick_soon()
        raise
    if not done:
        conn.abort(drv.now())
        drv.kick_soon()
        raise TimeoutError(errno.ETIMEDOUT, f"connect to {host}:{port} timed out")
    if conn.error or conn.state is State.CLOSED:
        err = conn.error or errno.ETIMEDOUT
        raise OSError(err, f"connect to {host}:{port}: {os.strerror(err)}")
    protocol = protocol_factory()
    transport = UsertcpTransport(drv, conn, protocol)
    transport._start()
    return transport, protocol


class Server(asyncio.AbstractServer):
    """A listening usertcp socket serving ``protocol_factory``; ``asyncio.Server``-like.

    ``wait_closed()`` waits for the listener to be closed and for every connection it
    accepted to be lost (the Python 3.12 behaviour). ``preload(data)`` sets the
    listener's preload (the MSG_PRELOAD feature): data sent on every connection accepted
    from then on.
    """

    def __init__(self, driver: LoopDriver, listener: Listener,
                 protocol_factory: Callable[[], asyncio.BaseProtocol]) -> None:
        self._driver = driver
        self._loop = driver.loop
        self.listener = listener
        self._factory = protocol_factory
        self._transports: set[UsertcpTransport] = set()
        self._serving = False
        self._closed = False
        self._remove_hook: Callable[[], None] | None = None
        self._serving_forever: asyncio.Future[None] | None = None
        self._sockets = (TransportSocket(None, listener),)

    def __repr__(self) -> str:
        return f"<usertcp.aio.Server {self.listener!r}>"

    # -- asyncio.AbstractServer --------------------------------------------------------

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return self._serving

    @property
    def sockets(self) -> tuple[TransportSocket, ...]:
        return () if self._closed else self._sockets

    async def start_serving(self) -> None:
        self._start_serving()

    def _start_serving(self) -> None:
        if self._serving or self._closed:
            return
        self._serving = True
        self.listener.on_accept_ready = self._on_accept_ready
        self._remove_hook = self._driver.add_hook(self._accept_ready)   # also catches TFO children
        self._loop.call_soon(self._accept_ready)

    async def serve_forever(self) -> None:
        if self._serving_forever is not None:
            raise RuntimeError(f"server {self!r} is already being awaited on serve_forever()")
        if self._closed:
            raise RuntimeError(f"server {self!r} is closed")
        self._start_serving()
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
        self.listener.on_accept_ready = None
        self.listener.close(self._driver.now())
        self._driver.kick_soon()
        if self._serving_forever is not None and not self._serving_forever.done():
            self._serving_forever.cancel()
        self._driver._stepped()

    async def wait_closed(self) -> None:
        await self._driver.wait_for(lambda: self._closed and not self._transports)

    # -- 3.13 additions, and usertcp's own -------------------------------------------------

    def close_clients(self) -> None:
        for t in list(self._transports):
            t.close()

    def abort_clients(self) -> None:
        for t in list(self._transports):
            t.abort()

    def preload(self, data: bytes) -> int:
        """Set the listener's preload (``send(MSG_PRELOAD)``); empty clears it."""
        set_preload = getattr(self.listener, "set_preload", None)
        if set_preload is None:
            raise NotImplementedError("this stack's listeners have no preload support")
        n: int = set_preload(bytes(data), self._driver.now())
        return n

    # -- internals ---------------------------------------------------------------------

    def _on_accept_ready(self, _lst: Listener) -> None:
        self._loop.call_soon(self._accept_ready)

    def _accept_ready(self) -> None:
        lst = self.listener
        while self._serving and lst.accept_queue:
            conn = lst.accept()
            if conn is None:
                break
            if conn.state is State.CLOSED:
                continue          # reset before it was accepted: nothing to serve
            try:
                protocol = self._factory()
            except Exception as exc:
                self._loop.call_exception_handler({"message": "protocol factory failed",
                                                   "exception": exc, "server": self})
                conn.abort(self._driver.now())
                self._driver.kick_soon()
                continue
            UsertcpTransport(self._driver, conn, protocol, server=self)._start()

    def _attach(self, transport: UsertcpTransport) -> None:
        self._transports.add(transport)

    def _detach(self, transport: UsertcpTransport) -> None:
        self._transports.discard(transport)
        self._driver._stepped()       # wait_closed may be done now


async def create_server(protocol_factory: Callable[[], asyncio.BaseProtocol], host: str | None = None,
                        port: int = 0, *, stack: Stack, driver: LoopDriver | None = None,
                        backlog: int = 128, preload: bytes | None = None,
                        start_serving: bool = True) -> Server:
    """Like ``loop.create_server``: listen on ``host:port`` (``None``/``""``: any address).

    ``preload``: bytes sent on every accepted connection right after the handshake (the
    listener preload feature; see :meth:`Server.preload`).
    """
    drv = _pick_driver(stack, driver)
    listener = stack.listen(port, address=host, backlog=backlog)
    server = Server(drv, listener, protocol_factory)
    if preload:
        try:
            server.preload(preload)
        except BaseException:
            server.close()
            raise
    if start_serving:
        server._start_serving()
    return server


# ----------------------------------------------------------------------------- streams

_DEFAULT_LIMIT = 2 ** 16   # asyncio.streams' default


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
                       backlog: int = 128, preload: bytes | None = None,
                       start_serving: bool = True) -> Server:
    """Like ``asyncio.start_server``: ``client_connected_cb(reader, writer)`` per connection."""
    loop = asyncio.get_running_loop()

    def factory() -> asyncio.BaseProtocol:
        reader = asyncio.StreamReader(limit=limit, loop=loop)
        return asyncio.StreamReaderProtocol(reader, client_connected_cb, loop=loop)

    return await create_server(factory, host, port, stack=stack, driver=driver, backlog=backlog,
                               preload=preload, start_serving=start_serving)
