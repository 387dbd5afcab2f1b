"""The object store: budget, tables, objects, collectors, ordered sends, compaction.

An *object* is a list of immutable memoryviews. Captured from a stream, those are
slices of the packets the segments arrived in (``view.obj`` is the packet), so
capture copies nothing; a send hands the same views to the TCP send buffer, which
builds its segments from slices of them, and the only copy is where the packet
leaves the process (the link or device turns it into bytes).

Accounting (``used``) counts the memory the store keeps alive, not payload bytes: every
buffer an object version holds a view of is charged whole, once, however many objects
share it (a captured fragment pins the whole packet it arrived in, headers and
neighbouring bytes included), until the last version holding it is gone (a freed handle
whose bytes a queued send still needs stays counted until that send has handed them to
TCP). Besides buffers: the full length of every pending RECV_OBJECT (reserved at issue,
so a capture can never overrun the budget halfway) and the prefix/suffix copies of
queued sends. With ``compact_ratio`` set, a captured fragment that fills less than that
fraction of a buffer the store does not hold yet is copied into store-owned memory
instead (the design copies "the rest"; by default nothing is copied at capture, see
docs/objects.md for the measurement); a capture whose buffers do not fit is copied whole.
Before an admission fails, objects whose buffers cost more than their bytes are compacted.
The store charges the same bytes to the stack-wide memory account (Linux tcp_mem,
``Stack.mem``) of the first connection it collects or sends on, so the stack's limit and
the store's budget count one memory. Bytes already handed to
TCP belong to the socket's send buffer, which ``send_space`` bounds. An operation that
would exceed the budget or a table completes with ``-ENOBUFS``/``-EMFILE`` and changes
nothing.

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
from typing import TYPE_CHECKING, Final, Protocol

from usertcp.objects.ops import CQE_F_CONSUMED, INSPECT_WAITALL, MAX_RANGES, SEND_LAST, ObjRange, Op
from usertcp.tcp.buffers import MemAccount
from usertcp.tcp.connection import SENDING, Connection, State

_INF: Final = float("inf")
# The operations bound once: compiled, ``Op.INSPECT`` is an attribute lookup on an interpreted
# enum class at every use (~800 instructions); a Final module constant is a C static.
_DISCARD: Final = Op.DISCARD
_INSPECT: Final = Op.INSPECT
_RECV_OBJECT: Final = Op.RECV_OBJECT

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


def buffer_size(o: object) -> int:
    """Bytes of the buffer a view keeps alive (``view.obj``)."""
    return len(o) if isinstance(o, bytes | bytearray) else memoryview(o).nbytes  # type: ignore[arg-type]


def backing_bytes(views: list[memoryview]) -> int:
    """Bytes of the distinct underlying buffers the views keep alive."""
    seen: dict[int, int] = {}
    for v in views:
        o = v.obj
        seen.setdefault(id(o), buffer_size(o))
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
        self.wake_at: float = _INF


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
    (fixed at creation). ``compact_ratio``: a captured fragment that fills less than this
    fraction of a buffer the store does not hold yet is copied at capture (default 0:
    every fragment is kept by reference, its whole buffer charged, and compaction runs
    only when an admission needs the room; measured in docs/objects.md). ``driver`` supplies the clock,
    the stack lock and ``kick()`` (flush packets after application-side operations).
    """

    __slots__ = ("budget", "max_objects", "max_streams", "max_extents", "compact_ratio", "lock",
                 "stack_lock", "_driver", "used", "extents", "versions", "_objects", "_next_handle",
                 "_streams", "_next_sid", "_tx", "stats", "mem", "_bufs")

    def __init__(self, budget: int, *, max_objects: int = 4096, max_streams: int = 64,
                 max_extents: int = 1 << 20, compact_ratio: float = 0.0,
                 driver: DriverLike | None = None, mem: MemAccount | None = None) -> None:
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
                      "compactions": 0, "compacted_bytes": 0, "callback_errors": 0,
                      "collector_passes": 0}
        # The stack-wide account this store's bytes count in (set by the first connection).
        self.mem = mem
        # id(buffer) -> [bytes charged, views of live versions on it]: each buffer charged once.
        self._bufs: dict[int, list[int]] = {}

    # ------------------------------------------------------------------ helpers

    def now(self) -> float:
        return self._driver.now() if self._driver is not None else time.monotonic()

    @property
    def driver(self) -> DriverLike | None:
        """The driver the store was created with (clock, stack lock, kick), or None."""
        return self._driver

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

    def _bind(self, conn: Connection) -> None:
        """Count the store's bytes in the stack-wide memory of its first connection."""
        if self.mem is None:
            self.mem = conn.stack.mem
            self.mem.add(self.used)

    def _add_used(self, n: int) -> None:
        self.used += n
        if self.mem is not None:
            self.mem.add(n)

    def _fits(self, n: int) -> bool:
        return self.used + n <= self.budget and (n <= 0 or self.mem is None or n <= self.mem.room())

    def _admit(self, n: int) -> bool:
        """True if ``n`` more bytes fit, after compacting wasteful objects if they did not."""
        return self._fits(n) or (self._make_room(n) and self._fits(n))

    def _charge(self, nbytes: int, versions: int = 0, extents: int = 0, *, hold: bool = False) -> None:
        """Admit ``nbytes`` more and the table entries, or raise; ``hold``: the caller's
        ``_hold`` charges the bytes (buffers), only the tables are taken here."""
        if self.versions + versions > self.max_objects:
            raise OpError(errno.EMFILE)
        if self.extents + extents > self.max_extents or not self._admit(nbytes):
            raise OpError(errno.ENOBUFS)
        if not hold:
            self._add_used(nbytes)
        self.versions += versions
        self.extents += extents

    # Buffers: charged whole, once, while any live version holds a view of them.

    def _new_bytes(self, views: list[memoryview]) -> int:
        """Bytes holding ``views`` would add: their buffers the store does not hold yet."""
        bufs = self._bufs
        seen: set[int] = set()
        n = 0
        for v in views:
            k = id(v.obj)
            if k not in bufs and k not in seen:
                seen.add(k)
                n += buffer_size(v.obj)
        return n

    def _hold(self, views: list[memoryview]) -> None:
        bufs = self._bufs
        for v in views:
            e = bufs.get(id(v.obj))
            if e is None:
                n = buffer_size(v.obj)
                bufs[id(v.obj)] = [n, 1]
                self._add_used(n)
            else:
                e[1] += 1

    def _let_go(self, views: list[memoryview]) -> None:
        bufs = self._bufs
        for v in views:
            k = id(v.obj)
            e = bufs[k]
            e[1] -= 1
            if e[1] == 0:
                del bufs[k]
                self._add_used(-e[0])

    def _freed_by(self, obj: _Object) -> int:
        """Bytes dropping ``obj``'s views would free: buffers no other version holds."""
        count: dict[int, int] = {}
        for v in obj.views:
            count[id(v.obj)] = count.get(id(v.obj), 0) + 1
        bufs = self._bufs
        return sum(bufs[k][0] for k, c in count.items() if bufs[k][1] == c)

    def _make_room(self, need: int) -> bool:
        """Compact the objects whose buffers cost more than their bytes (most waste first)
        until ``need`` more bytes fit; True if any was compacted."""
        waste = [(self._freed_by(o) - o.length, o) for o in self._objects.values() if not o.is_dense()]
        if not self._fits(need - sum(w for w, _ in waste if w > 0)):
            return False          # compacting everything would not be enough: change nothing
        waste.sort(key=lambda w: -w[0])
        done = False
        # Some headroom, so that a store at its budget does not scan its objects on every
        # admission: compaction then runs once per budget/8 bytes admitted at most.
        want = need + self.budget // 8
        for saved, obj in waste:
            if saved <= 0 or self._fits(want):
                break
            self._densify(obj)
            done = True
        return done

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
            self._let_go(obj.views)
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
        views = [memoryview(data)] if n else []
        self._charge(self._new_bytes(views), 1, len(views), hold=True)
        self._hold(views)
        return self._install(views, n).handle

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
        """Copy ``obj`` into one buffer of its own (the caller checked the budget)."""
        data = b"".join(obj.views)
        self.extents += (1 if data else 0) - len(obj.views)
        if obj.refs:
            self._let_go(obj.views)
        obj.views = [memoryview(data)] if data else []
        if obj.refs:
            self._hold(obj.views)
        self.stats["compactions"] += 1
        self.stats["compacted_bytes"] += len(data)
        return len(data)

    def compact(self, handle: int) -> int:
        """COMPACT: copy into dense backing under the same handle; 0 if already dense."""
        obj = self._get(handle)
        if obj.is_dense():
            return 0
        if not self._admit(obj.length - self._freed_by(obj)):
            raise OpError(errno.ENOBUFS)
        return self._densify(obj)

    def compact_sparse(self, ratio: float | None = None) -> int:
        """Compact every live object using less than ``ratio`` of the buffers it pins."""
        r = self.compact_ratio if ratio is None else ratio
        total = 0
        for obj in list(self._objects.values()):
            if not obj.is_dense() and obj.length < r * backing_bytes(obj.views) \
                    and self._fits(obj.length - self._freed_by(obj)):
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
        self._bind(conn)
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
        st.wake_at = _INF
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
        if offset < st.front or length < 0 or (kind is _RECV_OBJECT and length == 0):
            raise OpError(errno.EINVAL)
        if buf is not None and len(buf) < length:
            raise OpError(errno.EINVAL)
        if kind is _RECV_OBJECT:
            self._charge(length, 1, 1)      # reserved; released if the capture fails
        op = _RxOp(kind, ring, user_data, offset, offset + length, bool(flags & INSPECT_WAITALL), buf)
        if kind is not _INSPECT:
            st.tail = max(st.tail, op.end)
        st.pending.append(op)
        self._pump_rx(st, in_cb=False)
        return op not in st.pending

    def _pump_rx(self, st: _Stream, *, in_cb: bool) -> None:
        """One collector pass: every pending op takes what arrived, then the front advances."""
        self.stats["collector_passes"] += 1
        conn = st.conn
        rb = conn.rcv_buf
        front = st.front
        avail = front + rb.size
        ended = conn.fin_received or conn.state is State.CLOSED or bool(conn.error)
        still: list[_RxOp] = []
        for op in st.pending:
            if op.pos < avail and op.pos < op.end:
                n = min(op.end, avail) - op.pos
                if op.kind is _INSPECT:
                    op.out += rb.peek(op.pos - front, n)
                else:
                    if op.kind is _RECV_OBJECT:
                        op.views += rb.views(op.pos - front, n)
                    st.decided.append((op.pos, op.pos + n))
                op.pos += n
            if op.pos >= op.end or (op.kind is _INSPECT and not op.waitall and op.pos > op.start):
                self._finish_rx(op)
            elif ended:
                if conn.error:
                    self._fail_rx(op, conn.error)
                elif op.kind is _RECV_OBJECT:
                    self._fail_rx(op, errno.ENODATA)
                else:
                    self._finish_rx(op)      # a short INSPECT/DISCARD count reports the EOF
            else:
                still.append(op)
        st.pending = still
        wake = _INF
        for op in still:
            at = op.start + 1 if op.kind is _INSPECT and not op.waitall else op.end
            if at < wake:
                wake = float(at)
        st.wake_at = wake
        self._advance(st, in_cb=in_cb)

    def _advance(self, st: _Stream, *, in_cb: bool) -> None:
        """Drop decided bytes at the front of rcv_buf and let the window open."""
        decided = st.decided
        if not decided:
            return
        front = st.front
        if len(decided) == 1 and decided[0][0] <= front:     # in-order parsing: the usual case
            front = max(front, decided[0][1])
            st.decided = []
        else:
            decided.sort()
            keep: list[tuple[int, int]] = []
            for s, e in decided:
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
        if op.kind is _INSPECT:
            data = bytes(op.out)
            if op.buf is not None:
                op.buf[:n] = data
            op.ring.post_completion(op.user_data, n, 0, data)
        elif op.kind is _DISCARD:
            self.stats["discarded_bytes"] += n
            op.ring.post_completion(op.user_data, n, 0, None)
        else:
            op.ring.post_completion(op.user_data, self._capture(op.views, n), 0, None)

    def _capture(self, views: list[memoryview], n: int) -> int:
        """Install a finished capture; its reservation (n bytes, a version, an extent) becomes
        the charge of what it holds. Returns the handle."""
        self.extents -= 1
        self._add_used(-n)
        copied = 0
        ratio = self.compact_ratio
        if ratio:
            # A fragment that fills little of a buffer nobody holds yet is copied (cheap: it
            # is small) rather than pinning its whole packet; same measure as compact_ratio.
            bufs = self._bufs
            for i, v in enumerate(views):
                if id(v.obj) not in bufs and v.nbytes < ratio * buffer_size(v.obj):
                    views[i] = memoryview(v.tobytes())
                    copied += v.nbytes
        if self.extents + len(views) > self.max_extents or not self._admit(self._new_bytes(views)):
            views = [memoryview(b"".join(views))]     # fits: n bytes were reserved
            copied = n
        if copied:
            self.stats["compactions"] += 1
            self.stats["compacted_bytes"] += copied
        self.extents += len(views)
        self._hold(views)
        self.stats["captured_bytes"] += n
        return self._install(views, n).handle

    def _fail_rx(self, op: _RxOp, err: int) -> None:
        if op.kind is _RECV_OBJECT:
            self._add_used(-(op.end - op.start))
            self.versions -= 1
            self.extents -= 1
            op.views = []
        op.ring.post_completion(op.user_data, -err, 0, None)

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
        self._bind(conn)
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
        self._add_used(-s.staged)
        s.views.clear()
        for o in s.objs:
            self._unref(o)
        s.ring.post_completion(s.user_data, res, CQE_F_CONSUMED if s.consumed else 0, None)

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
