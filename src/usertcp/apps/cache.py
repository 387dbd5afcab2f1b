"""A memcached-text-protocol cache on the object ring: values are objects.

Commands: ``set <key> <flags> <exptime> <bytes> [noreply]``, ``get <key>*``,
``delete <key> [noreply]``, ``version``, ``stats``, ``quit``, answered byte for byte as
memcached 1.6 answers them (tests/test_cache_memcached.py compares the two): lines may
end in ``\\n`` alone, keys are at most 250 bytes (``CLIENT_ERROR bad command line
format``), a data block not followed by ``\\r\\n`` is ``CLIENT_ERROR bad data chunk`` and
parsing goes on right after the ``<bytes>`` + 2 bytes, and ``quit`` (like any close)
reads what has arrived before closing, so the peer sees a FIN, never a reset.
``version`` names usertcp's version and ``stats`` reports memcached's names for the
counters this cache has. A ``set`` reads only its command line
(INSPECT); the data block becomes an object by reference (RECV_OBJECT), and a
``get`` serves it with OBJ_SEND: prefix ``VALUE <key> <flags> <bytes>\\r\\n``, the
object, suffix ``\\r\\nEND\\r\\n`` (``\\r\\n`` between the values of a multi-key get).
Every reply goes through OBJ_SEND, so replies keep the order of the commands.

Not implemented: expiry (``exptime`` is parsed and ignored), eviction (a set that
does not fit the store's budget answers ``SERVER_ERROR out of memory``), CAS,
incr/decr, the binary and meta protocols.
"""

from __future__ import annotations

import errno
import itertools
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import usertcp
from usertcp.objects.ops import INSPECT_WAITALL, Cqe
from usertcp.objects.ring import Ring
from usertcp.objects.store import Store, conn_of
from usertcp.tcp.connection import Connection
from usertcp.tcp.stack import Listener, Stack

MAX_LINE = 2048
MAX_KEY = 250
MAX_VALUE = 1 << 20
# Replies one client may have queued and not yet handed to TCP. A client that pipelines
# requests and never reads would otherwise grow them without bound, and their prefixes are
# charged to the store's budget that every client shares; past this, the next command line
# is read only once a reply has gone (memcached stops reading a connection whose writes block).
MAX_REPLIES_IN_FLIGHT = 64
BAD_FORMAT = b"CLIENT_ERROR bad command line format\r\n"
DELETE_USAGE = b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"

# What a completion is for.
_COLLECT, _LINE, _DROP, _VALUE, _CRLF, _REPLY, _DETACH = range(7)


class _Value:
    __slots__ = ("handle", "flags", "length")

    def __init__(self, handle: int, flags: int, length: int) -> None:
        self.handle = handle
        self.flags = flags
        self.length = length


class _Client:
    """One client connection's parser state; commands run one at a time, in order."""

    __slots__ = ("conn", "sid", "pos", "pending_set", "closing", "replies", "held_line")

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.sid = -1
        self.pos = 0                 # stream offset of the next command line
        # set in progress: [key, flags, length, noreply, handle or None, crlf ok or None, err]
        self.pending_set: list[Any] | None = None
        self.closing = False
        self.replies = 0             # OBJ_SENDs in flight
        self.held_line: tuple[int, bool] | None = None   # the next line's read, held back


class CacheServer:
    """The cache. Feed it connections with :meth:`attach` (or give it a listener) and
    drive it with :meth:`poll`; :meth:`start` runs it on a thread for a real-time driver."""

    __slots__ = ("store", "ring", "values", "listener", "stats", "started", "_ud", "_tags", "_clients",
                 "_thread", "_stop", "__weakref__")

    def __init__(self, store: Store, ring: Ring | None = None, *, listener: Listener | None = None) -> None:
        self.store = store
        self.ring = ring or Ring(store, sq_entries=1024)
        self.values: dict[bytes, _Value] = {}
        self.listener = listener
        self.stats = {"get_hits": 0, "get_misses": 0, "sets": 0, "deletes": 0, "connections": 0,
                      "errors": 0, "reply_backlog_full": 0}
        self.started = time.time()
        self._ud = itertools.count(1)
        self._tags: dict[int, tuple[int, _Client]] = {}
        self._clients: set[_Client] = set()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # -------------------------------------------------------------- plumbing

    def _prep(self, kind: int, cl: _Client, prep: Callable[[int], bool]) -> None:
        ud = next(self._ud)
        self._tags[ud] = (kind, cl)
        if not prep(ud):
            self.ring.submit()
            prep(ud)

    def attach(self, sock: object) -> None:
        conn = conn_of(sock)
        if conn is None:
            raise TypeError("attach() needs a Connection or a usertcp socket")
        cl = _Client(conn)
        self._clients.add(cl)
        self.stats["connections"] += 1
        self._prep(_COLLECT, cl, lambda ud: self.ring.prep_collect(conn, ud))
        self.ring.submit()

    def _accept(self) -> None:
        lst = self.listener
        if lst is None:
            return
        with self.store.stack_lock:
            conns = []
            while lst.accept_queue:
                c = lst.accept()
                if c is not None:
                    conns.append(c)
        for c in conns:
            self.attach(c)

    def poll(self) -> int:
        """Accept, then handle every completion that is ready; returns how many."""
        self._accept()
        n = 0
        while True:
            cqes = self.ring.reap()
            if not cqes:
                break
            for cqe in cqes:
                self._handle(cqe)
            n += len(cqes)
            self.ring.submit()
        return n

    def _ready(self) -> bool:
        return self.ring.cq_ready > 0 or bool(self.listener is not None and self.listener.accept_queue)

    def start(self) -> None:
        """Serve on a thread (real-time driver): sleep until a completion or a new client."""
        drv = self.store.driver
        if drv is None or not hasattr(drv, "wait_until"):
            raise RuntimeError("start() needs a store created with a driver")

        def loop() -> None:
            while not self._stop.is_set():
                drv.wait_until(self._ready, 0.05)
                self.poll()

        self._stop.clear()
        self._thread = threading.Thread(target=loop, name="usertcp-cache", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def close(self) -> None:
        """Stop, drop every value and connection claim: the store ends empty."""
        self.stop()
        for v in self.values.values():
            if v.handle:
                self.ring.prep_free(v.handle, 0)
        self.values.clear()
        self.ring.submit()
        self.store.close()
        self.ring.reap()

    # --------------------------------------------------------------- protocol

    def _next_line(self, cl: _Client, want: int = MAX_LINE, waitall: bool = False) -> None:
        if cl.replies >= MAX_REPLIES_IN_FLIGHT:
            cl.held_line = (want, waitall)      # read on once a reply has gone (_handle)
            self.stats["reply_backlog_full"] += 1
            return
        self._prep(_LINE, cl, lambda ud: self.ring.prep_inspect(
            cl.sid, cl.pos, want, ud, flags=INSPECT_WAITALL if waitall else 0))

    def _reply(self, cl: _Client, text: bytes, ranges: list[tuple[int, int, int]] | None = None,
               suffix: bytes = b"") -> None:
        cl.replies += 1
        self._prep(_REPLY, cl, lambda ud: self.ring.prep_obj_send(
            cl.conn, ranges or [], ud, prefix=text, suffix=suffix))

    def _drop(self, cl: _Client, offset: int, length: int) -> None:
        if length:
            self._prep(_DROP, cl, lambda ud: self.ring.prep_discard(cl.sid, length, ud, offset=offset))

    def _finish(self, cl: _Client) -> None:
        """The client is gone or quit: release the receive claim, close when replies are out."""
        if not cl.closing:
            cl.closing = True
            if cl.sid >= 0:
                self._prep(_DETACH, cl, lambda ud: self.ring.prep_detach(cl.sid, ud))
        if cl.replies == 0 and cl in self._clients:
            self._clients.discard(cl)
            self.ring.submit()        # the last line's DISCARD and the DETACH run before the close
            with self.store.stack_lock:
                conn, now = cl.conn, self.store.now()
                # memcached has read what arrived (its read buffer) when it closes: the peer gets
                # a FIN. Closing with those bytes unread would reset (RFC 2525 §2.17).
                if conn.readable_bytes:
                    conn.recv(conn.readable_bytes, now)
                conn.close(now)
            self.store.kick()

    def _handle(self, cqe: Cqe) -> None:
        tag = self._tags.pop(cqe.user_data, None)
        if tag is None:
            return
        kind, cl = tag
        res = cqe.res
        if kind == _REPLY:
            cl.replies -= 1
            if cl.closing:
                self._finish(cl)
            elif cl.held_line is not None and cl.replies < MAX_REPLIES_IN_FLIGHT:
                want, waitall = cl.held_line
                cl.held_line = None
                self._next_line(cl, want, waitall)
            return
        if kind in (_DETACH, _DROP):
            return
        if cl.closing:
            if kind == _VALUE and res > 0:
                self.ring.prep_free(res, 0)
            return
        if kind == _COLLECT:
            if res < 0:
                self._finish(cl)
                return
            cl.sid = res
            self._next_line(cl)
        elif kind == _LINE:
            if res < 0 or not cqe.data:
                self._finish(cl)     # EOF or reset
                return
            self._on_line(cl, cqe.data)
        elif kind in (_VALUE, _CRLF):
            ps = cl.pending_set
            assert ps is not None
            if kind == _VALUE:
                ps[4] = res
                if res < 0 and res in (-errno.ENOBUFS, -errno.EMFILE):
                    # Nobody took the data block: drop it so the CRLF check can proceed.
                    self._drop(cl, ps[6], ps[2])
            else:
                ps[5] = cqe.data == b"\r\n"
            if ps[4] is not None and ps[5] is not None:
                self._set_done(cl, ps)

    def _on_line(self, cl: _Client, data: bytes) -> None:
        eol = data.find(b"\n")      # memcached ends a line at \n; a \r before it is dropped
        if eol < 0:
            if len(data) >= MAX_LINE:
                self.stats["errors"] += 1
                self._reply(cl, b"CLIENT_ERROR line too long\r\n")
                self._finish(cl)
                return
            self._next_line(cl, len(data) + 1, True)   # wait for more of the line
            return
        line = data[:eol - 1] if eol and data[eol - 1] == 0x0D else data[:eol]
        start = cl.pos
        cl.pos = start + eol + 1
        self._drop(cl, start, eol + 1)
        parts = line.split()
        cmd = parts[0] if parts else b""
        if cmd == b"set" and len(parts) in (5, 6):
            self._on_set(cl, parts)
            return
        if cmd == b"quit":
            self._finish(cl)
            return
        if cmd == b"get" and len(parts) >= 2:
            self._on_get(cl, parts[1:])
        elif cmd == b"delete" and len(parts) in (2, 3):
            self._on_delete(cl, parts)
        elif cmd == b"version":
            self._reply(cl, b"VERSION %s\r\n" % usertcp.__version__.encode())
        elif cmd == b"stats" and len(parts) == 1:
            self._reply(cl, self._stats_reply())
        else:
            self.stats["errors"] += 1
            self._reply(cl, b"ERROR\r\n")
        self._next_line(cl)

    def _on_delete(self, cl: _Client, parts: list[bytes]) -> None:
        # memcached still takes a legacy "0" hold time; anything else is a usage error.
        if len(parts) == 3 and parts[2] not in (b"noreply", b"0"):
            self._reply(cl, DELETE_USAGE)
            return
        if len(parts[1]) > MAX_KEY:
            self._reply(cl, BAD_FORMAT)
            return
        noreply = len(parts) == 3 and parts[2] == b"noreply"
        v = self.values.pop(parts[1], None)
        if v is not None:
            self.stats["deletes"] += 1
            if v.handle:
                self.ring.prep_free(v.handle, 0)
        if not noreply:
            self._reply(cl, b"DELETED\r\n" if v is not None else b"NOT_FOUND\r\n")

    def _stats_reply(self) -> bytes:
        """``stats``: memcached's names for what this cache counts (a subset of its list)."""
        st = self.stats
        now = time.time()
        items = [
            ("pid", os.getpid()), ("uptime", int(now - self.started)), ("time", int(now)),
            ("version", usertcp.__version__), ("curr_connections", len(self._clients)),
            ("total_connections", st["connections"]), ("cmd_get", st["get_hits"] + st["get_misses"]),
            ("cmd_set", st["sets"]), ("get_hits", st["get_hits"]), ("get_misses", st["get_misses"]),
            ("delete_hits", st["deletes"]), ("curr_items", len(self.values)),
            ("bytes", sum(v.length for v in self.values.values())),
            ("limit_maxbytes", self.store.budget),
        ]
        return b"".join(b"STAT %s %s\r\n" % (k.encode(), str(v).encode()) for k, v in items) + b"END\r\n"

    def _on_set(self, cl: _Client, parts: list[bytes]) -> None:
        key = parts[1]
        try:
            flags = int(parts[2])
            int(parts[3])
            length = int(parts[4])
        except ValueError:
            length = -1
        noreply = len(parts) == 6 and parts[5] == b"noreply"
        if length < 0 or len(key) > MAX_KEY or not 0 <= flags < 1 << 32:
            # As memcached: the error, then the data block is read as the next command line.
            self.stats["errors"] += 1
            self._reply(cl, BAD_FORMAT)
            self._next_line(cl)
            return
        vpos = cl.pos
        cl.pos = vpos + length + 2
        if length > MAX_VALUE:
            self._drop(cl, vpos, length + 2)
            if not noreply:
                self._reply(cl, b"SERVER_ERROR object too large for cache\r\n")
            self._next_line(cl)
            return
        cl.pending_set = [key, flags, length, noreply, None, None, vpos]
        if length:
            self._prep(_VALUE, cl, lambda ud: self.ring.prep_recv_object(cl.sid, vpos, length, ud))
        else:
            cl.pending_set[4] = 0
        self._prep(_CRLF, cl, lambda ud: self.ring.prep_inspect(
            cl.sid, vpos + length, 2, ud, flags=INSPECT_WAITALL))
        self._drop(cl, vpos + length, 2)

    def _set_done(self, cl: _Client, ps: list[Any]) -> None:
        key, flags, length, noreply, handle, crlf_ok, _ = ps
        cl.pending_set = None
        if handle < 0:
            if handle in (-errno.ENOBUFS, -errno.EMFILE):
                if not noreply:
                    self._reply(cl, b"SERVER_ERROR out of memory storing object\r\n")
                self._next_line(cl)
            else:
                self._finish(cl)
            return
        if not crlf_ok:
            # memcached 1.6 reads <bytes> + 2 whatever they are and parses on after them.
            if handle:
                self.ring.prep_free(handle, 0)
            self.stats["errors"] += 1
            self._reply(cl, b"CLIENT_ERROR bad data chunk\r\n")
            self._next_line(cl)
            return
        old = self.values.get(key)
        if old is not None and old.handle:
            self.ring.prep_free(old.handle, 0)   # a send still in flight keeps its own reference
        self.values[key] = _Value(handle, flags, length)   # handle 0: the empty value
        self.stats["sets"] += 1
        if not noreply:
            self._reply(cl, b"STORED\r\n")
        self._next_line(cl)

    def _on_get(self, cl: _Client, keys: list[bytes]) -> None:
        if any(len(k) > MAX_KEY for k in keys):
            self.stats["errors"] += 1
            self._reply(cl, BAD_FORMAT)
            return
        found = [(k, v) for k in keys if (v := self.values.get(k)) is not None]
        self.stats["get_hits"] += len(found)
        self.stats["get_misses"] += len(keys) - len(found)
        if not found:
            self._reply(cl, b"END\r\n")
            return
        for i, (k, v) in enumerate(found):
            last = i == len(found) - 1
            head = b"VALUE %s %d %d\r\n" % (k, v.flags, v.length)
            self._reply(cl, head, [(v.handle, 0, v.length)] if v.length else None,
                        b"\r\nEND\r\n" if last else b"\r\n")


def serve_cache(host_or_stack: Any, port: int = 11211, *, store: Store | None = None,
                budget: int = 64 << 20, driver: Any = None, start: bool = True) -> CacheServer:
    """Listen on ``port`` of a usertcp ``Host`` (socket API) or a ``Stack`` and serve.

    ``driver`` is needed with a bare Stack (a Host brings its own). With a real-time
    driver and ``start=True`` the server runs on its own thread; otherwise call
    ``poll()`` (e.g. from a virtual-time ``run_until`` predicate).
    """
    stack: Stack = getattr(host_or_stack, "stack", host_or_stack)
    drv = driver if driver is not None else getattr(host_or_stack, "driver", None)
    if drv is None:
        raise ValueError("serve_cache needs a driver (pass driver= with a bare Stack)")
    st = store if store is not None else Store(budget, driver=drv)
    with drv.lock:
        lst = stack.listen(port)
    server = CacheServer(st, listener=lst)
    if start and hasattr(drv, "start"):
        server.start()
    return server
