"""Drivers that run usertcp stacks on an asyncio event loop, with no extra thread.

Both implement the ``Driver`` protocol on the loop's clock (``loop.time()``), so they run
in real time on a standard loop and in virtual time on a :class:`usertcp.aio.UsertcpEventLoop`
whose clock is virtual:

* :class:`AsyncioDriver` runs an in-memory :class:`~usertcp.net.memnet.Network` with the
  event heap and endpoint stepping of :mod:`usertcp.net.driver` (deliveries and stack
  timers in one heap, ties in insertion order) and one ``loop.call_at`` handle armed for
  the heap's head.
* :class:`AsyncioTunDriver` runs one stack on a TUN device: ``loop.add_reader`` on the
  device fd plus one ``call_at`` timer re-armed to ``get_timer()`` after every step; it
  reads and writes with :func:`usertcp.net.tun.receive_batch` and
  :func:`~usertcp.net.tun.flush_to_device`, as the threaded ``TunDriver`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from heapq import heappop

from usertcp.net.driver import DriverBase
from usertcp.net.memnet import Host as NetHost
from usertcp.net.memnet import Network
from usertcp.net.tun import PacketSink, TunDevice, flush_to_device, receive_batch
from usertcp.tcp.stack import Stack

__all__ = ["AsyncioDriver", "AsyncioTunDriver", "LoopDriver", "driver_for"]

_MAX_EVENTS_PER_STEP = 10_000     # then yield to the loop, so a zero-delay storm cannot starve it

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

    async def wait_for(self, predicate: Callable[[], bool], timeout: float | None = None, *,
                       next_step: bool = False) -> bool:
        """Wait until ``predicate()`` holds (checked after every driver step); False on timeout.

        ``next_step``: do not answer before the next step, even if it holds now (a caller
        whose attempt failed although ``predicate()`` held must not spin).
        """
        if not next_step and predicate():
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

    def notify(self) -> None:
        """Re-check the ``wait_for`` predicates and run the hooks now (state changed outside a step)."""
        self._stepped()

    def _stepped(self) -> None:
        for hook in list(self._hooks):
            hook()
        if self._waiters:
            for pred, fut in list(self._waiters):
                if not fut.done() and pred():
                    fut.set_result(True)


class AsyncioDriver(DriverBase, LoopDriver):
    """Runs an in-memory :class:`Network` on the asyncio loop clock (real time).

    Create it inside the running loop (or pass ``loop``); one driver per network. It
    implements the ``Driver`` protocol, so the socket API (non-blocking sockets) and the
    objects store work on it too. ``close()`` cancels its timer.
    """

    def __init__(self, network: Network, *, loop: asyncio.AbstractEventLoop | None = None) -> None:
        LoopDriver.__init__(self, loop)
        DriverBase.__init__(self, network)
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
        self.stats: dict[str, int] = {"rx_packets": 0, "rx_bytes": 0, "tx_packets": 0, "tx_errors": 0,
                                      "timers": 0}
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
        batch = self.device.read_segments(self.max_batch)
        if batch:
            self.stats["rx_packets"] += len(batch)
            self.events += len(batch)
            receive_batch(self.endpoint, batch, self.loop.time(), self.pcap, self.stats)
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

