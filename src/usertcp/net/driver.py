"""Drivers that run a :class:`~usertcp.net.memnet.Network`: virtual time and real time.

Both keep one heap of events ``(time, sequence, kind, target, data)``; the
sequence number breaks ties by insertion order, so equal-time events run in the
order they were scheduled and a virtual-time run is fully deterministic. Two
kinds exist: a delivery (target = link direction, data = the packet bytes) and
a timer (target = host, data = the host's timer generation when it was armed).
Re-arming a timer bumps the host's generation instead of searching the heap, so
stale timer entries are skipped in O(1) when popped.

After every ``receive``/``handle_timer`` on an endpoint the driver drains its
``datagrams_to_send()`` into the links and re-reads its ``get_timer()``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from heapq import heappop, heappush
from types import TracebackType
from typing import Any, Final

from usertcp.native import mypyc_attr
from usertcp.net.memnet import Host, LinkDirection, Network
from usertcp.wire.segment import Buffer, TxPacket

_DELIVER: Final = 0
_TIMER: Final = 1
_INF: Final = float("inf")
# handle_timer calls in a row that leave the timer due at or before now: an
# endpoint that never clears its timer would otherwise spin forever in virtual time.
_MAX_TIMER_SPIN: Final = 10_000

Event = tuple[float, int, int, Any, Any]


# Typed float | None, not the literal None: assigning None would narrow ``host.timer_at`` to
# None for mypy across the _after() call that sets it, and mypyc would then check the float
# read back against None (a TypeError at run time).
_NO_TIMER: float | None = None


# Compiled by mypyc; the asyncio driver (net/aio_driver.py) is an interpreted subclass.
@mypyc_attr(allow_interpreted_subclasses=True)
class DriverBase:
    """The heap and the per-endpoint stepping shared by both drivers."""

    def __init__(self, network: Network) -> None:
        self.network = network
        self._heap: list[Event] = []
        self._seq = 0     # orders events of equal time: FIFO (a native int, not an iterator)
        self.events = 0   # events processed (deliveries and live timers), for measurements
        network.attach_driver(self, self._schedule_delivery)

    def _schedule_delivery(self, t: float, direction: LinkDirection, data: bytes) -> None:
        self._seq += 1
        heappush(self._heap, (t, self._seq, _DELIVER, direction, data))

    def _after(self, host: Host, now: float) -> None:
        """Drain what ``host`` wants to send and re-arm its timer if it moved."""
        ep = host.endpoint
        # Network.transmit takes packets or plain buffers (a metering endpoint may hand over
        # bytes): typed so, the compiled build checks each item against both.
        out: Sequence[TxPacket | Buffer] = ep.datagrams_to_send()
        if out:
            tx = self.network.transmit
            for p in out:
                tx(host, p, now)
        t = ep.get_timer()
        if t != host.timer_at:
            host.timer_gen += 1
            host.timer_at = t
            if t is not None:
                # A deadline in the past fires now, never back in time.
                self._seq += 1
                heappush(self._heap, (t if t > now else now, self._seq, _TIMER, host, host.timer_gen))

    def _fire(self, host: Host, now: float) -> None:
        host.timer_at = _NO_TIMER     # consumed: asking for the same deadline again re-arms it
        host.endpoint.handle_timer(now)
        self._after(host, now)
        t = host.timer_at
        if t is not None and t <= now:
            host.timer_spin += 1
            if host.timer_spin > _MAX_TIMER_SPIN:
                raise RuntimeError(f"{host!r} keeps asking for a timer at {t} <= now={now} "
                                   "after handle_timer")
        else:
            host.timer_spin = 0

    def _dispatch(self, ev: tuple[Any, ...], now: float) -> bool:
        """Run one heap event at ``now`` (late events run late: a clock never goes back).

        False for a stale timer entry. The virtual-time loop inlines this, being the hot path.
        """
        if ev[2] == _DELIVER:
            if ev[3].gro:
                self._deliver_batch(ev[3], ev[4], ev[0], now)
                return True
            data = ev[4]
            host = ev[3].arrive(data, now)
            if ev[3].trusted_csum:
                host.endpoint.receive(data, now, checksum_verified=True)
            else:
                host.endpoint.receive(data, now)
            self._after(host, now)
            return True
        host = ev[3]
        if ev[4] != host.timer_gen:
            return False
        self._fire(host, now)
        return True

    def _deliver_batch(self, direction: LinkDirection, data: bytes, due: float, now: float) -> None:
        """A GRO link's delivery: with it, every delivery on the same direction due at the same
        time (the next heap entries, nothing else between), as one poll batch; the link
        coalesces the batch (Linux napi_gro_receive) and the receiver takes each result."""
        heap = self._heap
        batch = [data]
        while heap:
            nxt = heap[0]
            if nxt[0] != due or nxt[2] != _DELIVER or nxt[3] is not direction:
                break
            batch.append(heappop(heap)[4])
        host = direction.dst
        receive = host.endpoint.receive
        for pkt in direction.arrive_batch(batch, now):
            receive(pkt, now, checksum_verified=True)
            self._after(host, now)

    def _kick_all(self, now: float) -> None:
        for host in self.network.hosts:
            self._after(host, now)

    def _drop_stale_top(self) -> None:
        heap = self._heap
        while heap:
            ev = heap[0]
            if ev[2] == _TIMER and ev[4] != ev[3].timer_gen:
                heappop(heap)
            else:
                return

    def pending(self) -> int:
        """Events still queued (stale timer entries included)."""
        return len(self._heap)


class VirtualTimeDriver(DriverBase):
    """A deterministic discrete-event loop: time jumps from one event to the next.

    Single-threaded; ``lock`` is a no-op. Blocking application calls use
    ``wait_until`` (= ``run_until``), which runs the whole simulation forward until
    their condition holds.
    """

    def __init__(self, network: Network, start: float = 0.0) -> None:
        super().__init__(network)
        self._now = start
        self.lock: AbstractContextManager[object] = contextlib.nullcontext()

    def now(self) -> float:
        return self._now

    def kick(self) -> None:
        """Drain every endpoint at the current time and refresh its timer."""
        self._kick_all(self._now)

    def _run(self, predicate: Callable[[], bool] | None, deadline: float) -> bool:
        """Process events up to ``deadline``; True as soon as ``predicate()`` holds."""
        heap = self._heap
        pop = heappop
        after = self._after
        n = 0
        try:
            while heap:
                ev = heap[0]
                t = ev[0]
                if t > deadline:
                    return False
                pop(heap)
                if ev[2] == _DELIVER:
                    self._now = t
                    if ev[3].gro:
                        self._deliver_batch(ev[3], ev[4], t, t)
                        n += 1
                        if predicate is not None and predicate():
                            return True
                        continue
                    data = ev[4]
                    host = ev[3].arrive(data, t)
                    if ev[3].trusted_csum:       # an offload link, as loopback: no checksum pass
                        host.endpoint.receive(data, t, checksum_verified=True)
                    else:
                        host.endpoint.receive(data, t)
                    after(host, t)
                else:
                    host = ev[3]
                    if ev[4] != host.timer_gen:
                        continue   # re-armed since: stale
                    self._now = t
                    self._fire(host, t)
                n += 1
                if predicate is not None and predicate():
                    return True
            return False
        finally:
            self.events += n

    def run_until(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        """Run until ``predicate()`` holds (checked after each event), ``timeout``
        virtual seconds pass, or no event is left; returns ``predicate()``.

        When it gives up with a finite ``timeout`` the clock is left at the deadline,
        as if the caller had really waited that long.
        """
        self.kick()
        if predicate():
            return True
        deadline = _INF if timeout is None else self._now + timeout
        if self._run(predicate, deadline):
            return True
        if deadline != _INF and self._now < deadline:
            self._now = deadline
        return predicate()

    def wait_until(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        """The blocking-call entry point drivers share; here the same as :meth:`run_until`.

        A method rather than a class-level alias: mypyc compiles no method aliases.
        """
        return self.run_until(predicate, timeout)

    def run_for(self, seconds: float) -> None:
        """Process every event in the next ``seconds``; the clock ends at now + seconds."""
        self.kick()
        deadline = self._now + seconds
        self._run(None, deadline)
        if self._now < deadline:
            self._now = deadline

    def run_until_idle(self, limit: float) -> bool:
        """Run until no event is left (True) or ``limit`` virtual seconds pass (False)."""
        self.kick()
        deadline = self._now + limit
        self._run(None, deadline)
        self._drop_stale_top()
        if self._heap:
            self._now = max(self._now, deadline)
            return False
        return True


class RealTimeDriver(DriverBase):
    """The same event loop run by a background thread against ``time.monotonic()``.

    Thread safety: the I/O thread holds ``lock`` (an RLock) while it steps
    endpoints, so application code must call stack methods only while holding
    ``driver.lock``, then ``kick()`` (which takes the lock itself and may be called
    with it held). ``wait_until`` may be called with or without the lock held; it
    must not be called from the I/O thread (i.e. from inside an endpoint callback).
    Taps and pcap writers run on the I/O thread.
    """

    def __init__(self, network: Network) -> None:
        super().__init__(network)
        self.lock = threading.RLock()
        self._cond = threading.Condition(self.lock)
        self._io_thread: threading.Thread | None = None
        self._running = False
        self.error: BaseException | None = None   # what killed the I/O thread, if anything

    def now(self) -> float:
        return time.monotonic()

    def start(self) -> None:
        with self._cond:
            if self._running:
                return
            self._running = True
            self._kick_all(time.monotonic())
        self._io_thread = threading.Thread(target=self._loop, name="usertcp-realtime", daemon=True)
        self._io_thread.start()

    def stop(self) -> None:
        with self._cond:
            self._running = False
            self._cond.notify_all()
        thread = self._io_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._io_thread = None

    def __enter__(self) -> RealTimeDriver:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def kick(self) -> None:
        """Flush every endpoint now and wake the I/O thread to re-plan its sleep."""
        with self._cond:
            self._kick_all(time.monotonic())
            self._cond.notify_all()

    def _loop(self) -> None:
        heap = self._heap
        monotonic = time.monotonic
        with self._cond:
            try:
                while self._running:
                    n = 0
                    now = monotonic()
                    while heap and heap[0][0] <= now:
                        # Late events run at the current time: the endpoint's clock
                        # must never go back behind a now() the application saw.
                        if not self._dispatch(heappop(heap), now):
                            continue
                        n += 1
                        now = monotonic()
                    if n:
                        self.events += n
                        self._cond.notify_all()
                    self._drop_stale_top()
                    if heap:
                        delay = heap[0][0] - monotonic()
                        if delay > 0:
                            self._cond.wait(delay)
                    else:
                        self._cond.wait()
            except BaseException as e:
                self.error = e
                self._running = False
                self._cond.notify_all()
                raise

    def wait_until(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """Sleep until ``predicate()`` holds (True) or ``timeout`` real seconds pass (False).

        The predicate is evaluated with ``lock`` held, after each batch of events.
        """
        if threading.current_thread() is self._io_thread:
            raise RuntimeError("wait_until called from the driver's own I/O thread")
        with self._cond:
            if predicate():
                return True
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                if self.error is not None:
                    raise RuntimeError("the real-time driver's I/O thread died") from self.error
                if not self._running:
                    raise RuntimeError("the real-time driver is not running (call start())")
                if deadline is None:
                    self._cond.wait()
                else:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._cond.wait(remaining)
                if predicate():
                    return True
