"""The object store: budget, tables, objects, collectors, ordered sends, compaction.

An *object* is a list of immutable memoryviews. Captured from a stream, those are
slices of the packets the segments arrived in (``view.obj`` is the packet), so
capture copies nothing; a send hands the same views to the TCP send buffer, which
builds its segments from slices of them, and the only copy is where the packet
leaves the process (the link or device turns it into bytes).

Accounting (``used``) is exact and counts: the bytes of every object version still
alive (a freed handle whose bytes a queued send still needs stays counted until
that send has handed them to TCP), the full length of every pending RECV_OBJECT
(reserved at issue, so a capture can never overrun the budget halfway), and the
prefix/suffix copies of queued sends. Bytes already handed to TCP belong to the
socket's send buffer, which ``send_space`` bounds. An operation that would exceed
the budget or a table completes with ``-ENOBUFS``/``-EMFILE`` and changes nothing.

Locking (see also :mod:`usertcp.objects.ring`). Order: the stack lock (the driver's
``lock``, which the real-time I/O thread holds while it steps the stack) ->
``Store.lock`` -> a ring's CQ lock. Ring submission takes the first two around each
batch; connection callbacks (``on_readable``/``on_writable``) run with the stack
lock already held and take ``Store.lock``. So any number of rings, in any threads,
can share one store, and the I/O thread can complete their pending operations.
"""

from __future__ import annotations

import errno
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Protocol

from usertcp.objects.ops import CQE_F_CONSUMED, INSPECT_WAITALL, MAX_RANGES, SEND_LAST, ObjRange, Op
from usertcp.tcp.connection import SENDING, Connection, State

if TYPE_CHECKING:
    from usertcp.objects.ring import Ring


class DriverLike(Protocol):
    """What the store needs of a driver (read-only ``lock`` so RealTimeDriver's RLock fits)."""

    @property
    def lock(self) -> AbstractContextManager[object]: ...

    def now(self) -> float: ...

    def kick(self) -> None: ...


class OpError(Exception):
    """An operation fails with this errno (completed as ``-errno``, never raised out)."""

    __slots__ = ("errno",)

    def __init__(self, err: int) -> None:
        super().__init__(errno.errorcode.get(err, str(err)))
        self.errno = err


def conn_of(target: object) -> Connection | None:
    """The TCP connection behind a Connection or a socket-API object wrapping one."""
    if isinstance(target, Connection):
        return target
    for name in ("conn", "_conn", "connection"):
        c = getattr(target, name, None)
        if isinstance(c, Connection):
            return c
    return None


def slice_views(views: list[memoryview], offset: int, length: int) -> list[memoryview]:
    """References to [offset, offset+length) of the concatenation of ``views``."""
    out: list[memoryview] = []
    for v in views:
        if length <= 0:
            break
        n = v.nbytes
        if offset >= n:
            offset -= n
            continue
        take = min(n - offset, length)
        out.append(v if offset == 0 and take == n else v[offset:offset + take])
        length -= take
        offset = 0
    return out


def backing_bytes(views: list[memoryview]) -> int:
    """Bytes of the distinct underlying buffers the views keep alive."""
    seen: dict[int, int] = {}
    for v in views:
        o = v.obj
        seen.setdefault(id(o), memoryview(o).nbytes)
    return sum(seen.values())


class _Object:
    """One immutable object version; ``refs`` = the handle (if live) + queued sends."""

    __slots__ = ("handle", "views", "length", "refs", "live")

    def __init__(self, handle: int, views: list[memoryview], length: int) -> None:
        self.handle = handle
        self.views = views
        self.length = length
        self.refs = 1
        self.live = True

    def is_dense(self) -> bool:
        return len(self.views) <= 1 and (not self.views or memoryview(self.views[0].obj).nbytes
                                         == self.views[0].nbytes)


class _RxOp:
    """A pending INSPECT/RECV_OBJECT/DISCARD: progresses as bytes arrive at ``pos``."""

    __slots__ = ("kind", "ring", "user_data", "start", "end", "pos", "views", "out", "waitall", "buf")

    def __init__(self, kind: Op, ring: Ring, user_data: int, start: int, end: int, waitall: bool,
                 buf: memoryview | bytearray | None) -> None:
        self.kind = kind
        self.ring = ring
        self.user_data = user_data
        self.start = start
        self.end = end
        self.pos = start
        self.views: list[memoryview] = []
        self.out = bytearray()
        self.waitall = waitall
        self.buf = buf


class _Stream:
    """A collected socket. ``front`` = stream offset of rcv_buf[0] (bytes gone before it)."""

    __slots__ = ("sid", "conn", "front", "tail", "pending", "decided", "prev_readable", "hook",
                 "wake_at")

    def __init__(self, sid: int, conn: Connection) -> None:
        self.sid = sid
        self.conn = conn
        self.front = 0
        self.tail = 0                       # end of the furthest range decided or being decided
        self.pending: list[_RxOp] = []
        self.decided: list[tuple[int, int]] = []   # decided ranges not yet dropped from rcv_buf
        self.prev_readable: Callable[[Connection], None] | None = conn.on_readable
        self.hook: Callable[[Connection], None] | None = None
        # Stream offset at which some pending op can complete (INF: none pending).
        self.wake_at: float = float("inf")


class _Send:
    """A queued OBJ_SEND: the views still to hand to TCP, in order."""

    __slots__ = ("ring", "user_data", "views", "total", "objs", "consumed", "staged")

    def __init__(self, ring: Ring, user_data: int, views: deque[memoryview], total: int,
                 objs: list[_Object], consumed: bool, staged: int) -> None:
        self.ring = ring
        self.user_data = user_data
        self.views = views
        self.total = total
        self.objs = objs
        self.consumed = consumed
        self.staged = staged


class _TxStream:
    """Sends through this store to one socket, in enqueue order (the store's TX order)."""

    __slots__ = ("conn", "queue", "prev_writable", "hook")

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.queue: deque[_Send] = deque()
        self.prev_writable: Callable[[Connection], None] | None = conn.on_writable
        self.hook: Callable[[Connection], None] | None = None


class Store:
    """Objects, their budget and the tables, shared by any number of rings.

    ``budget`` bytes of accounted memory; ``max_objects`` live object versions,
    ``max_streams`` collected sockets, ``max_extents`` views held by all objects
    (fixed at creation). ``compact_ratio``: an object captured from a stream whose
    bytes are below this fraction of the receive buffers it pins is copied into dense
    backing at once (0 turns automatic compaction off). ``driver`` supplies the clock,
    the stack lock and ``kick()`` (flush packets after application-side operations).
    """

    __slots__ = ("budget", "max_objects", "max_streams", "max_extents", "compact_ratio", "lock",
                 "stack_lock", "_driver", "used", "extents", "versions", "_objects", "_next_handle",
                 "_streams", "_next_sid", "_tx", "stats")

    def __init__(self, budget: int, *, max_objects: int = 4096, max_streams: int = 64,
                 max_extents: int = 1 << 20, compact_ratio: float = 0.25,
                 driver: DriverLike | None = None) -> None:
        if budget < 0 or max_objects < 1 or max_streams < 1 or max_extents < 1:
            raise ValueError("budget and table sizes must be positive")
        self.budget = budget
        self.max_objects = max_objects
        self.max_streams = max_streams
        self.max_extents = max_extents
        self.compact_ratio = compact_ratio
        self.lock = threading.RLock()
        self._driver = driver
        self.stack_lock: AbstractContextManager[object] = driver.lock if driver is not None \
            else nullcontext()
        self.used = 0            # accounted bytes
        self.extents = 0         # views held by object versions (+1 per pending capture)
        self.versions = 0        # object versions alive (+1 per pending capture)
        self._objects: dict[int, _Object] = {}
        self._next_handle = 1    # handles are never reused: a stale one is always -EBADF
        self._streams: dict[int, _Stream] = {}
        self._next_sid = 1
        self._tx: dict[Connection, _TxStream] = {}
        self.stats = {"captured_bytes": 0, "discarded_bytes": 0, "sent_bytes": 0,
                      "compactions": 0, "compacted_bytes": 0, "callback_errors": 0}

    # ------------------------------------------------------------------ helpers

    def now(self) -> float:
        return self._driver.now() if self._driver is not None else time.monotonic()

    def kick(self) -> None:
        if self._driver is not None:
            self._driver.kick()

    @property
    def objects(self) -> int:
        """Live handles."""
        return len(self._objects)

    @property
    def streams(self) -> int:
        return len(self._streams)

    def is_empty(self) -> bool:
        """No byte, version, extent, stream or queued send is accounted."""
        return (self.used == 0 and self.versions == 0 and self.extents == 0 and not self._objects
                and not self._streams and not self._tx)

    def pinned_bytes(self) -> int:
        """Receive/packet buffer bytes the live objects keep alive (for compaction)."""
        return backing_bytes([v for o in self._objects.values() for v in o.views])

    def _charge(self, nbytes: int, versions: int = 0, extents: int = 0) -> None:
        if self.used + nbytes > self.budget:
            raise OpError(errno.ENOBUFS)
        if self.versions + versions > self.max_objects:
            raise OpError(errno.EMFILE)
        if self.extents + extents > self.max_extents:
            raise OpError(errno.ENOBUFS)
        self.used += nbytes
        self.versions += versions
        self.extents += extents

    def _get(self, handle: int) -> _Object:
        obj = self._objects.get(handle) if isinstance(handle, int) else None
        if obj is None:
            raise OpError(errno.EBADF)
        return obj

    def _install(self, views: list[memoryview], length: int) -> _Object:
        """A new live version; the caller has already charged bytes/version/extents."""
        h = self._next_handle
        self._next_handle += 1
        obj = _Object(h, views, length)
        self._objects[h] = obj
        return obj

    def _unref(self, obj: _Object) -> None:
        obj.refs -= 1
        if obj.refs == 0:
            self.used -= obj.length
            self.versions -= 1
            self.extents -= len(obj.views)
            obj.views = []     # drop the buffer references now, not at garbage collection

    def _drop_handle(self, obj: _Object) -> None:
        obj.live = False
        del self._objects[obj.handle]
        self._unref(obj)

    # ------------------------------------------------------------ object operations

    def create(self, data: bytes) -> int:
        """CREATE: ``data`` is already a private copy (taken before the locks)."""
        n = len(data)
        self._charge(n, 1, 1 if n else 0)
        return self._install([memoryview(data)] if n else [], n).handle

    def free(self, handle: int) -> int:
        self._drop_handle(self._get(handle))
        return 0

    def read_object(self, handle: int, offset: int, length: int,
                    buf: memoryview | bytearray | None) -> tuple[int, bytes]:
        obj = self._get(handle)
        if offset < 0 or length < 0 or offset + length > obj.length:
            raise OpError(errno.EINVAL)
        data = b"".join(slice_views(obj.views, offset, length))
        if buf is not None:
            if len(buf) < length:
                raise OpError(errno.EINVAL)
            buf[:length] = data
        return length, data

    def _densify(self, obj: _Object) -> int:
        data = b"".join(obj.views)
        self.extents += (1 if data else 0) - len(obj.views)
        obj.views = [memoryview(data)] if data else []
        self.stats["compactions"] += 1
        self.stats["compacted_bytes"] += len(data)
        return len(data)

    def compact(self, handle: int) -> int:
        """COMPACT: copy into dense backing under the same handle; 0 if already dense."""
        obj = self._get(handle)
        return 0 if obj.is_dense() else self._densify(obj)

    def compact_sparse(self, ratio: float | None = None) -> int:
        """Compact every live object using less than ``ratio`` of the buffers it pins."""
        r = self.compact_ratio if ratio is None else ratio
        total = 0
        for obj in list(self._objects.values()):
            if not obj.is_dense() and obj.length < r * backing_bytes(obj.views):
                total += self._densify(obj)
        return total

    # ----------------------------------------------------------------- collection

    def collect(self, target: object) -> int:
        conn = conn_of(target)
        if conn is None:
            raise OpError(errno.EBADF)
        if conn.collector is not None:
            raise OpError(errno.EBUSY)       # one receive owner (the design's patch 1)
        if conn.state not in (State.ESTABLISHED, State.FIN_WAIT_1, State.FIN_WAIT_2,
                              State.CLOSE_WAIT, State.CLOSING, State.LAST_ACK, State.TIME_WAIT):
            raise OpError(errno.ENOTCONN)
        if len(self._streams) >= self.max_streams:
            raise OpError(errno.EMFILE)
        sid = self._next_sid
        self._next_sid += 1
        st = _Stream(sid, conn)
        if not conn.claim_receive(st):   # the receive claim: every other reader gets EBUSY
            raise OpError(errno.EBUSY)
        self._streams[sid] = st

        def on_readable(c: Connection, st: _Stream = st) -> None:
            # A pass per segment would cost more than the copy it saves: run one only when an
            # op can complete, the undecided bytes fill half the window, or the stream ends.
            # Until then the bytes wait in rcv_buf, where a later pass finds them.
            rb = c.rcv_buf
            if (st.front + rb.size >= st.wake_at or 2 * rb.size >= c.rcvbuf_limit
                    or c.fin_received or c.state is State.CLOSED or c.error) \
                    and self._streams.get(st.sid) is st:   # not a stale hook of a detached stream
                self._callback(lambda: self._pump_rx(st, in_cb=True))
            if st.prev_readable is not None:
                st.prev_readable(c)

        conn.on_readable = st.hook = on_readable
        return sid

    def _stream(self, sid: object) -> _Stream:
        st = self._streams.get(sid) if isinstance(sid, int) else None
        if st is None:
            raise OpError(errno.EBADF)
        return st

    def detach(self, sid: int) -> int:
        st = self._stream(sid)
        for op in st.pending:
            self._fail_rx(op, errno.ECANCELED)
        st.pending.clear()
        st.wake_at = float("inf")
        # Reads resume at ``front``: bytes not yet dropped (even ones a capture took a
        # reference to, or a cancelled capture had started on) are readable again.
        conn = st.conn
        conn.release_receive(st)
        if conn.on_readable is st.hook:
            conn.on_readable = st.prev_readable
        del self._streams[sid]
        return 0

    def stream_op(self, ring: Ring, kind: Op, user_data: int, sid: int, offset: int, length: int,
                  flags: int, buf: memoryview | bytearray | None) -> bool:
        """Queue INSPECT/RECV_OBJECT/DISCARD; True if it already completed."""
        st = self._stream(sid)
        if offset == -1:
            offset = st.tail
        if offset < st.front or length < 0 or (kind is Op.RECV_OBJECT and length == 0):
            raise OpError(errno.EINVAL)
        if buf is not None and len(buf) < length:
            raise OpError(errno.EINVAL)
        if kind is Op.RECV_OBJECT:
            self._charge(length, 1, 1)      # reserved; released if the capture fails
        op = _RxOp(kind, ring, user_data, offset, offset + length, bool(flags & INSPECT_WAITALL), buf)
        if kind is not Op.INSPECT:
            st.tail = max(st.tail, op.end)
        st.pending.append(op)
        self._pump_rx(st, in_cb=False)
        return op not in st.pending

    def _pump_rx(self, st: _Stream, *, in_cb: bool) -> None:
        """One collector pass: every pending op takes what arrived, then the front advances."""
        conn = st.conn
        rb = conn.rcv_buf
        front = st.front
        avail = front + rb.size
        ended = conn.fin_received or conn.state is State.CLOSED or bool(conn.error)
        still: list[_RxOp] = []
        for op in st.pending:
            if op.pos < avail and op.pos < op.end:
                n = min(op.end, avail) - op.pos
                if op.kind is Op.INSPECT:
                    op.out += rb.peek(op.pos - front, n)
                else:
                    if op.kind is Op.RECV_OBJECT:
                        op.views += rb.views(op.pos - front, n)
                    st.decided.append((op.pos, op.pos + n))
                op.pos += n
            if op.pos >= op.end or (op.kind is Op.INSPECT and not op.waitall and op.pos > op.start):
                self._finish_rx(op)
            elif ended:
                if conn.error:
                    self._fail_rx(op, conn.error)
                elif op.kind is Op.RECV_OBJECT:
                    self._fail_rx(op, errno.ENODATA)
                else:
                    self._finish_rx(op)      # a short INSPECT/DISCARD count reports the EOF
            else:
                still.append(op)
        st.pending = still
        st.wake_at = min((op.start + 1 if op.kind is Op.INSPECT and not op.waitall else op.end
                          for op in still), default=float("inf"))
        self._advance(st, in_cb=in_cb)

    def _advance(self, st: _Stream, *, in_cb: bool) -> None:
        """Drop decided bytes at the front of rcv_buf and let the window open."""
        if not st.decided:
            return
        st.decided.sort()
        front = st.front
        keep: list[tuple[int, int]] = []
        for s, e in st.decided:
            if s <= front:
                front = max(front, e)
            else:
                keep.append((s, e))
        st.decided = [(s, e) for s, e in keep if e > front]
        if front > st.front:
            # Inside a segment callback the ACK the stack is about to send carries the
            # new window; from the application it needs a window update of its own.
            st.conn.consume_claimed(st, front - st.front, None if in_cb else self.now())
            st.front = front

    def _finish_rx(self, op: _RxOp) -> None:
        n = op.pos - op.start
        if op.kind is Op.INSPECT:
            data = bytes(op.out)
            if op.buf is not None:
                op.buf[:n] = data
            op.ring._post(op.user_data, n, 0, data)
        elif op.kind is Op.DISCARD:
            self.stats["discarded_bytes"] += n
            op.ring._post(op.user_data, n, 0, None)
        else:
            views = op.views
            self.extents -= 1                   # the reserved extent
            obj = _Object(0, views, n)
            if self.extents + len(views) > self.max_extents or (
                    self.compact_ratio and obj.length < self.compact_ratio * backing_bytes(views)):
                self.extents += len(views)      # _densify swaps these for one
                self._densify(obj)
            else:
                self.extents += len(views)
            handle = self._install(obj.views, n).handle
            self.stats["captured_bytes"] += n
            op.ring._post(op.user_data, handle, 0, None)

    def _fail_rx(self, op: _RxOp, err: int) -> None:
        if op.kind is Op.RECV_OBJECT:
            self.used -= op.end - op.start
            self.versions -= 1
            self.extents -= 1
            op.views = []
        op.ring._post(op.user_data, -err, 0, None)

    # ---------------------------------------------------------------------- sends

    def obj_send(self, ring: Ring, user_data: int, target: object, ranges: list[ObjRange] | None,
                 prefix: bytes, suffix: bytes, flags: int) -> bool:
        """Queue OBJ_SEND; True if it already completed (all bytes handed to TCP)."""
        conn = conn_of(target)
        if conn is None:
            raise OpError(errno.EBADF)
        rs = ranges or []
        if len(rs) > MAX_RANGES:
            raise OpError(errno.EINVAL)
        if conn.error:
            raise OpError(conn.error)
        if conn.write_shutdown or conn.state not in SENDING:
            raise OpError(errno.EPIPE)
        # Validate everything before changing anything.
        objs: list[_Object] = []
        for r in rs:
            if not isinstance(r, tuple) or len(r) != 3:
                raise OpError(errno.EINVAL)
            h, off, ln = r
            obj = self._get(h)
            if not isinstance(off, int) or not isinstance(ln, int) or off < 0 or ln < 0 \
                    or off + ln > obj.length:
                raise OpError(errno.EINVAL)
            objs.append(obj)
        staged = len(prefix) + len(suffix)
        self._charge(staged)
        views: deque[memoryview] = deque()
        if prefix:
            views.append(memoryview(prefix))
        for (_, off, ln), obj in zip(rs, objs, strict=True):
            views.extend(slice_views(obj.views, off, ln))
        if suffix:
            views.append(memoryview(suffix))
        total = len(prefix) + sum(r[2] for r in rs) + len(suffix)
        held = list({id(o): o for o in objs}.values())
        for o in held:
            o.refs += 1                      # the send's own reference
        consumed = bool(flags & SEND_LAST)
        if consumed:
            for o in held:
                self._drop_handle(o)         # ownership moves to the send now
        tx = self._tx.get(conn)
        if tx is None:
            tx = self._tx[conn] = _TxStream(conn)

            def on_writable(c: Connection, tx: _TxStream = tx) -> None:
                self._callback(lambda: self._pump_tx(tx, in_cb=True))
                if tx.prev_writable is not None:
                    tx.prev_writable(c)

            conn.on_writable = tx.hook = on_writable
        s = _Send(ring, user_data, views, total, held, consumed, staged)
        tx.queue.append(s)
        self._pump_tx(tx, in_cb=False)
        return s not in tx.queue

    def _pump_tx(self, tx: _TxStream, *, in_cb: bool) -> None:
        """Hand queued views to TCP, head of the queue first, as send space allows."""
        conn = tx.conn
        if self._tx.get(conn) is not tx:
            return                           # a stale hook left in someone's callback chain
        q = tx.queue
        while q:
            if conn.error or conn.write_shutdown or conn.state not in SENDING:
                err = conn.error or errno.EPIPE
                while q:
                    self._end_send(q.popleft(), -err)
                break
            s = q[0]
            space = conn.send_space
            batch: list[memoryview] = []
            views = s.views
            while views and space > 0:
                v = views[0]
                if v.nbytes <= space:
                    batch.append(views.popleft())
                    space -= v.nbytes
                else:
                    batch.append(v[:space])
                    views[0] = v[space:]
                    space = 0
            if batch:
                if in_cb:
                    # Called from ACK processing: queue only; the stack transmits when it
                    # finishes the segment (segment_arrives ends with output()).
                    for v in batch:
                        conn.queue_views([v])
                else:
                    conn.send_views(batch, self.now())
            if views:
                break                        # wait for on_writable
            q.popleft()
            self.stats["sent_bytes"] += s.total
            self._end_send(s, s.total)
        if not q:
            del self._tx[conn]      # idle: the next send re-hooks on_writable
            if conn.on_writable is tx.hook:
                conn.on_writable = tx.prev_writable

    def _end_send(self, s: _Send, res: int) -> None:
        self.used -= s.staged
        s.views.clear()
        for o in s.objs:
            self._unref(o)
        s.ring._post(s.user_data, res, CQE_F_CONSUMED if s.consumed else 0, None)

    # -------------------------------------------------------------------- plumbing

    def _callback(self, fn: Callable[[], None]) -> None:
        """Run store work from a connection callback; never let it break the stack."""
        with self.lock:
            try:
                fn()
            except Exception:     # a bug here must not take the stack down
                self.stats["callback_errors"] += 1

    def close(self) -> None:
        """Detach every stream, fail queued sends, free every handle: the store is empty."""
        with self.stack_lock, self.lock:
            for sid in list(self._streams):
                self.detach(sid)
            for tx in list(self._tx.values()):
                while tx.queue:
                    self._end_send(tx.queue.popleft(), -errno.ECANCELED)
                self._tx.pop(tx.conn, None)
                if tx.conn.on_writable is tx.hook:
                    tx.conn.on_writable = tx.prev_writable
            for obj in list(self._objects.values()):
                self._drop_handle(obj)
        self.kick()
