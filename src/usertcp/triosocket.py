"""trio on usertcp: a trio socket class and the factory ``trio.socket.set_custom_socket_factory``
takes, so ``trio.open_tcp_stream`` / ``trio.serve_tcp`` run over a usertcp stack::

    trio.socket.set_custom_socket_factory(UsertcpSocketFactory(host))
    stream = await trio.open_tcp_stream("10.0.0.2", 80)

Each :class:`TrioSocket` wraps a non-blocking :class:`usertcp.api.sockets.Socket`. An operation
is tried at once; when it would block, the task waits in trio's own I/O loop on the socket's
readiness eventfds (:mod:`usertcp.api.readiness`: one readable when ``recv`` would not block,
one readable when ``send`` would not), which the real-time driver's watcher keeps in step.
With a :class:`~usertcp.net.driver.RealTimeDriver` the driver's watcher thread keeps them in
step. With a :class:`~usertcp.net.driver.VirtualTimeDriver`, run trio with
:class:`VirtualClock`: trio's clock is then the network's virtual clock, and whenever no trio
task can run, the clock runs the simulation up to trio's next deadline or the first change of
a socket's readiness, whichever comes first. Timeouts, ``trio.sleep(60)`` and retransmissions
all happen at once, and a run with the same seed is the same run::

    trio.run(main, clock=VirtualClock(driver))
"""

from __future__ import annotations

import errno
import socket as _pysocket
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from usertcp.api.constants import SHUT_RDWR, SHUT_WR, SO_ERROR, SOCK_NONBLOCK, SOL_SOCKET, os_error
from usertcp.api.host import Host
from usertcp.api.readiness import sync_driver
from usertcp.api.sockets import Socket
from usertcp.net.driver import VirtualTimeDriver

__all__ = ["TrioSocket", "UsertcpSocketFactory", "VirtualClock"]

_T = TypeVar("_T")


class TrioSocket(trio.socket.SocketType):
    """trio's socket interface over a usertcp socket (async calls wait in trio's loop)."""

    def __init__(self, sock: Socket) -> None:
        super().__init__()
        sock.setblocking(False)
        self._sock = sock
        self._did_shutdown_wr = False

    @property
    def usertcp_socket(self) -> Socket:
        return self._sock

    # -- plain calls --------------------------------------------------------------------

    def fileno(self) -> int:
        return self._sock.fileno()

    def detach(self) -> int:
        return self._sock.detach()

    def getpeername(self) -> Any:
        return self._sock.getpeername()

    def getsockname(self) -> Any:
        return self._sock.getsockname()

    def getsockopt(self, level: int, optname: int, buflen: int | None = None) -> Any:
        return self._sock.getsockopt(level, optname, buflen or 0)

    def setsockopt(self, level: int, optname: int, value: Any, optlen: int | None = None) -> None:
        self._sock.setsockopt(level, optname, value, optlen)

    def listen(self, backlog: int = 128) -> None:
        self._sock.listen(backlog)

    def get_inheritable(self) -> bool:
        return False

    def set_inheritable(self, inheritable: bool) -> None:
        if inheritable:
            raise os_error(errno.EOPNOTSUPP, "a usertcp socket cannot be inherited")

    @property
    def family(self) -> _pysocket.AddressFamily:
        return _pysocket.AddressFamily(int(self._sock.family))

    @property
    def type(self) -> _pysocket.SocketKind:
        return _pysocket.SocketKind(int(self._sock.type))

    @property
    def proto(self) -> int:
        return self._sock.proto

    @property
    def did_shutdown_SHUT_WR(self) -> bool:
        return self._did_shutdown_wr

    def __repr__(self) -> str:
        return f"<usertcp TrioSocket {self._sock!r}>"

    def dup(self) -> TrioSocket:
        return TrioSocket(self._sock.dup())

    def close(self) -> None:
        sock = self._sock
        if sock.host.readiness.has(sock):
            # Tasks waiting on its descriptors get ClosedResourceError, as trio's own sockets.
            trio.lowlevel.notify_closing(sock.readiness_fds()[0])
            trio.lowlevel.notify_closing(sock.readiness_fds()[1])
        sock.close()

    def shutdown(self, flag: int) -> None:
        self._sock.shutdown(flag)
        if flag in (SHUT_WR, SHUT_RDWR):
            self._did_shutdown_wr = True

    def is_readable(self) -> bool:
        with self._sock.host.driver.lock:
            return self._sock.poll_readable()

    # -- waiting --------------------------------------------------------------------------

    async def wait_writable(self) -> None:
        # Asking for writability as a POLLOUT poller does (SOCK_NOSPACE when short of space).
        with self._sock.host.driver.lock:
            writable = self._sock.poll_writable()
        if writable:
            await trio.lowlevel.checkpoint()
            return
        await trio.lowlevel.wait_readable(self._sock.readiness_fds()[1])

    async def _wait_readable(self) -> None:
        await trio.lowlevel.wait_readable(self._sock.readiness_fds()[0])

    async def _nonblocking(self, op: Callable[[], _T], wait: Callable[[], Awaitable[None]]) -> _T:
        """Try ``op``; while it would block, wait in trio's loop (trio's checkpoint rules)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            try:
                result = op()
            except BlockingIOError:
                await wait()
                continue
            await trio.lowlevel.cancel_shielded_checkpoint()
            return result

    # -- async calls ----------------------------------------------------------------------

    async def bind(self, address: Any) -> None:
        await trio.lowlevel.checkpoint()
        self._sock.bind(address)

    async def accept(self) -> tuple[TrioSocket, Any]:
        child, addr = await self._nonblocking(self._sock.accept, self._wait_readable)
        return TrioSocket(child), addr

    async def connect(self, address: Any) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            self._sock.connect(address)
        except BlockingIOError:
            pass
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        try:
            await self.wait_writable()
        except trio.Cancelled:
            self._sock.close()       # as trio: a cancelled connect leaves the socket unusable
            raise
        err = self._sock.getsockopt(SOL_SOCKET, SO_ERROR)
        if err:
            raise os_error(err, f"Error connecting to {address!r}")

    async def recv(self, buflen: int, flags: int = 0, /) -> bytes:
        return await self._nonblocking(lambda: self._sock.recv(buflen, flags), self._wait_readable)

    async def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        return await self._nonblocking(lambda: self._sock.recv_into(buffer, nbytes, flags),
                                       self._wait_readable)

    async def recvfrom(self, bufsize: int, flags: int = 0) -> tuple[bytes, Any]:
        return await self._nonblocking(lambda: self._sock.recvfrom(bufsize, flags), self._wait_readable)

    async def recvfrom_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> tuple[int, Any]:
        return await self._nonblocking(lambda: self._sock.recvfrom_into(buffer, nbytes, flags),
                                       self._wait_readable)

    async def recvmsg(self, bufsize: int, ancbufsize: int = 0, flags: int = 0) -> Any:
        return await self._nonblocking(lambda: self._sock.recvmsg(bufsize, ancbufsize, flags),
                                       self._wait_readable)

    async def recvmsg_into(self, buffers: Any, ancbufsize: int = 0, flags: int = 0) -> Any:
        return await self._nonblocking(lambda: self._sock.recvmsg_into(buffers, ancbufsize, flags),
                                       self._wait_readable)

    async def send(self, data: Any, flags: int = 0, /) -> int:
        return await self._nonblocking(lambda: self._sock.send(data, flags), self.wait_writable)

    async def sendto(self, *args: Any) -> int:
        return await self._nonblocking(lambda: self._sock.sendto(*args), self.wait_writable)

    async def sendmsg(self, buffers: Any, ancdata: Any = (), flags: int = 0, address: Any = None) -> int:
        return await self._nonblocking(lambda: self._sock.sendmsg(buffers, ancdata, flags, address),
                                       self.wait_writable)


class VirtualClock(trio.abc.Clock):
    """trio's clock = a :class:`VirtualTimeDriver`'s; idle waits run the simulation."""

    # Real seconds trio may block in its I/O wait when the simulation has nothing left to do
    # (only a real descriptor, e.g. a thread's, could then wake it).
    IDLE_POLL = 0.05
    MAX_STEP = 3600.0        # virtual seconds one idle wait may run the simulation

    def __init__(self, driver: VirtualTimeDriver) -> None:
        self._driver = driver
        self._polled = False     # trio polled its descriptors since the simulation last moved

    def start_clock(self) -> None:
        pass

    def current_time(self) -> float:
        return self._driver.now()

    def deadline_to_sleep_time(self, deadline: float) -> float:
        # trio asks only when no task is runnable: the moment to move the simulation on, but
        # only once trio has polled its descriptors without waiting (a waiter whose fd is
        # already ready must run before virtual time moves). So every other call polls.
        drv = self._driver
        now = drv.now()
        if deadline <= now:
            return 0.0
        if not self._polled:
            self._polled = True
            return 0.0
        self._polled = False
        # No trio deadline: still hand back control now and then (an idle connection's
        # keepalive timers would otherwise keep this call busy for ever).
        limit = min(deadline - now, self.MAX_STEP)
        if drv.run_until(lambda: sync_driver(drv), limit):
            return 0.0                   # a socket became ready: trio's I/O poll sees it now
        if drv.now() >= deadline:
            return 0.0                   # trio's own deadline came first
        return self.IDLE_POLL


class UsertcpSocketFactory(trio.abc.SocketFactory):
    """``trio.socket.set_custom_socket_factory(UsertcpSocketFactory(host))``: trio's sockets
    are then usertcp sockets of ``host``."""

    def __init__(self, host: Host) -> None:
        self.host = host

    def socket(self, family: int = _pysocket.AF_INET, type: int = _pysocket.SOCK_STREAM,
               proto: int = 0) -> TrioSocket:
        return TrioSocket(Socket(int(family), int(type) | SOCK_NONBLOCK, proto, host=self.host))
