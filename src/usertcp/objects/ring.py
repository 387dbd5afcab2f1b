"""A submission/completion ring over a :class:`~usertcp.objects.store.Store`.

The application fills the submission queue (``prep_*``), then ``submit()`` issues
every queued entry in order. Each completes with one :class:`Cqe` carrying its
``user_data``: at once (most operations), or later when the bytes it waits for
arrive or the send has been handed to TCP (INSPECT, RECV_OBJECT, DISCARD and
OBJ_SEND may stay pending). Errors never raise: a bad handle, range, stream or
socket completes with a negative errno and changes nothing.

Locking. One ring is meant for one thread at a time (like an io_uring instance),
but its SQ and CQ have their own small locks, so a second thread may reap while
the owner submits. Several rings, in different threads, may share one store:
``submit()`` issues each batch holding the stack lock (the driver's ``lock``; the
real-time I/O thread holds it while it steps the stack) and then ``Store.lock``.
Completions of pending operations are posted from connection callbacks on the I/O
thread, which already holds the stack lock and takes ``Store.lock``, then the
ring's CQ lock. The order is always stack lock -> store lock -> CQ lock, so no
path can deadlock. ``wait_cqe`` must not be called with the stack lock held (the
I/O thread could not make progress). CREATE copies the application's bytes before
any lock is taken, so a large CREATE never stalls the stack.
"""

from __future__ import annotations

import errno
import threading
from collections import deque
from collections.abc import Callable
from typing import Final

from usertcp.objects.ops import AT_TAIL, Cqe, ObjRange, Op, Sqe
from usertcp.objects.store import OpError, Store
from usertcp.wire.segment import Buffer

# The operations bound once: compiled, ``Op.INSPECT`` is an attribute lookup on an interpreted
# enum class at every use (~800 instructions); a Final module constant is a C static.
_COLLECT: Final = Op.COLLECT
_COMPACT: Final = Op.COMPACT
_CREATE: Final = Op.CREATE
_DETACH: Final = Op.DETACH
_DISCARD: Final = Op.DISCARD
_FREE: Final = Op.FREE
_INSPECT: Final = Op.INSPECT
_NOP: Final = Op.NOP
_OBJ_SEND: Final = Op.OBJ_SEND
_READ_OBJECT: Final = Op.READ_OBJECT
_RECV_OBJECT: Final = Op.RECV_OBJECT


class Ring:
    """``sq_entries`` submissions may wait to be issued; the CQ holds ``cq_entries``
    completions, and completions beyond that wait in an overflow list (never lost),
    counted in ``cq_overflow``."""

    __slots__ = ("store", "sq_entries", "cq_entries", "_sq", "_cq", "_overflow", "_sq_lock",
                 "_cq_lock", "_cond", "cq_overflow", "_waiters", "__weakref__")

    def __init__(self, store: Store, sq_entries: int = 256, cq_entries: int | None = None) -> None:
        if sq_entries < 1:
            raise ValueError("sq_entries must be >= 1")
        self.store = store
        self.sq_entries = sq_entries
        self.cq_entries = cq_entries or 2 * sq_entries
        self._sq: deque[Sqe] = deque()
        self._cq: deque[Cqe] = deque()
        self._overflow: deque[Cqe] = deque()
        self._sq_lock = threading.Lock()
        self._cq_lock = threading.Lock()
        self._cond = threading.Condition(self._cq_lock)   # for rings without a driver
        self._waiters = 0        # threads in _cond.wait: a completion notifies only if any
        self.cq_overflow = 0

    # ------------------------------------------------------------ submission side

    def queue(self, sqe: Sqe) -> bool:
        """Put one entry on the SQ; False (nothing queued) when the SQ is full."""
        with self._sq_lock:
            if len(self._sq) >= self.sq_entries:
                return False
            self._sq.append(sqe)
            return True

    @property
    def sq_pending(self) -> int:
        return len(self._sq)

    def prep_nop(self, user_data: int) -> bool:
        return self.queue(Sqe(_NOP, user_data))

    def prep_collect(self, sock: object, user_data: int) -> bool:
        return self.queue(Sqe(_COLLECT, user_data, target=sock))

    def prep_detach(self, stream: int, user_data: int) -> bool:
        return self.queue(Sqe(_DETACH, user_data, target=stream))

    def prep_inspect(self, stream: int, offset: int, length: int, user_data: int, *, flags: int = 0,
                     buf: memoryview | bytearray | None = None) -> bool:
        return self.queue(Sqe(_INSPECT, user_data, target=stream, offset=offset, length=length,
                              flags=flags, buf=buf))

    def prep_recv_object(self, stream: int, offset: int, length: int, user_data: int) -> bool:
        return self.queue(Sqe(_RECV_OBJECT, user_data, target=stream, offset=offset, length=length))

    def prep_discard(self, stream: int, length: int, user_data: int, *, offset: int = AT_TAIL) -> bool:
        return self.queue(Sqe(_DISCARD, user_data, target=stream, offset=offset, length=length))

    def prep_read_object(self, handle: int, offset: int, length: int, user_data: int, *,
                         buf: memoryview | bytearray | None = None) -> bool:
        return self.queue(Sqe(_READ_OBJECT, user_data, handle=handle, offset=offset, length=length,
                              buf=buf))

    def prep_free(self, handle: int, user_data: int) -> bool:
        return self.queue(Sqe(_FREE, user_data, handle=handle))

    def prep_create(self, data: Buffer, user_data: int) -> bool:
        return self.queue(Sqe(_CREATE, user_data, data=data))

    def prep_compact(self, handle: int, user_data: int) -> bool:
        return self.queue(Sqe(_COMPACT, user_data, handle=handle))

    def prep_obj_send(self, sock: object, ranges: list[ObjRange] | ObjRange, user_data: int, *,
                      prefix: Buffer = b"", suffix: Buffer = b"", flags: int = 0) -> bool:
        """One (handle, offset, length) range or a list of up to MAX_RANGES."""
        rs = [ranges] if isinstance(ranges, tuple) else ranges
        return self.queue(Sqe(_OBJ_SEND, user_data, target=sock, ranges=rs, prefix=prefix,
                              suffix=suffix, flags=flags))

    def submit(self) -> int:
        """Issue every queued entry in order; returns how many were issued."""
        with self._sq_lock:
            batch = list(self._sq)
            self._sq.clear()
        if not batch:
            return 0
        # Copies of application memory happen here, outside the locks.
        private = [_copy(sqe.data) if sqe.opcode is _CREATE else None for sqe in batch]
        store = self.store
        with store.stack_lock, store.lock:
            for sqe, data in zip(batch, private, strict=True):
                self._issue(sqe, data)
        store.kick()
        return len(batch)

    def _issue(self, sqe: Sqe, data: bytes | None) -> None:
        store = self.store
        op = sqe.opcode
        ud = sqe.user_data
        try:
            if op is _RECV_OBJECT or op is _DISCARD or op is _INSPECT:   # the hot ones first
                store.stream_op(self, op, ud, _int(sqe.target), _int(sqe.offset), _int(sqe.length),
                                sqe.flags, sqe.buf)
                return                        # completes from the collector, now or later
            if op is _FREE:
                res = store.free(sqe.handle)
            elif op is _NOP:
                res = 0
            elif op is _CREATE:
                if data is None:
                    raise OpError(errno.EINVAL)
                res = store.create(data)
            elif op is _READ_OBJECT:
                res, out = store.read_object(sqe.handle, sqe.offset, sqe.length, sqe.buf)
                self.post_completion(ud, res, 0, out)
                return
            elif op is _COMPACT:
                res = store.compact(sqe.handle)
            elif op is _COLLECT:
                res = store.collect(sqe.target)
            elif op is _DETACH:
                res = store.detach(_int(sqe.target))
            elif op is _OBJ_SEND:
                prefix = _copy(sqe.prefix)
                suffix = _copy(sqe.suffix)
                if prefix is None or suffix is None:
                    raise OpError(errno.EINVAL)
                store.obj_send(self, ud, sqe.target, sqe.ranges, prefix, suffix, sqe.flags)
                return
            else:
                raise OpError(errno.EINVAL)
        except OpError as e:
            res = -e.errno
        except (TypeError, ValueError, OverflowError, AttributeError):
            res = -errno.EINVAL               # malformed entry: wrong field types
        self.post_completion(ud, res, 0, None)

    # ------------------------------------------------------------ completion side

    def post_completion(self, user_data: int, res: int, flags: int, data: bytes | None) -> None:
        """Queue one completion (the store's side of the ring); past cq_entries it waits in the
        overflow list (io_uring's CQ overflow)."""
        cqe = Cqe(user_data, res, flags, data)
        with self._cq_lock:
            if len(self._cq) < self.cq_entries and not self._overflow:
                self._cq.append(cqe)
            else:
                self._overflow.append(cqe)
                self.cq_overflow += 1
            if self._waiters:
                self._cond.notify_all()

    @property
    def cq_ready(self) -> int:
        return len(self._cq) + len(self._overflow)

    def peek_cqe(self) -> Cqe | None:
        """Take the oldest completion, or None."""
        with self._cq_lock:
            if not self._cq:
                return None
            cqe = self._cq.popleft()
            while self._overflow and len(self._cq) < self.cq_entries:
                self._cq.append(self._overflow.popleft())
            return cqe

    def reap(self) -> list[Cqe]:
        """Take every completion that is ready, oldest first."""
        with self._cq_lock:
            out = list(self._cq)
            out += self._overflow
            self._cq.clear()
            self._overflow.clear()
            return out

    def wait_cqe(self, timeout: float | None = None) -> Cqe | None:
        """Wait for one completion (running the simulation forward on a virtual-time
        driver, sleeping on a real-time one); None if ``timeout`` passes first."""
        drv = self.store.driver
        if drv is not None and hasattr(drv, "wait_until"):
            drv.wait_until(lambda: bool(self._cq), timeout)
        else:
            self._wait(lambda: bool(self._cq), timeout)
        return self.peek_cqe()

    def _wait(self, predicate: Callable[[], bool], timeout: float | None) -> None:
        with self._cond:
            self._waiters += 1
            try:
                self._cond.wait_for(predicate, timeout)
            finally:
                self._waiters -= 1

    def submit_and_wait(self, wait_nr: int = 1, timeout: float | None = None) -> list[Cqe]:
        """Submit, then wait until ``wait_nr`` completions are ready (or the timeout)."""
        self.submit()
        drv = self.store.driver
        if drv is not None and hasattr(drv, "wait_until"):
            drv.wait_until(lambda: self.cq_ready >= wait_nr, timeout)
        else:
            self._wait(lambda: self.cq_ready >= wait_nr, timeout)
        return self.reap()


def _int(x: object) -> int:
    if not isinstance(x, int) or isinstance(x, bool):
        raise OpError(errno.EBADF if x is None else errno.EINVAL)
    return x


def _copy(data: object) -> bytes | None:
    """A private immutable copy of application memory (None if it is not a buffer)."""
    if isinstance(data, bytes):
        return data            # immutable already: a reference is as good as a copy
    try:
        return bytes(memoryview(data))   # type: ignore[arg-type]
    except TypeError:
        return None
