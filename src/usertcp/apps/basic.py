"""Echo, discard and source servers on a :class:`~usertcp.tcp.stack.Listener`, event-driven.

They run entirely inside the driver's loop (``Listener.on_accept_ready``,
``Connection.on_readable`` / ``on_writable`` callbacks, called under the driver's lock
while it processes packets; the driver flushes output after each step), so no
application thread and no lock hand-off sits in the data path: a bulk transfer costs
only the stack's own per-packet work.

* ``discard``: reads and hashes everything, closes at EOF.
* ``echo``: sends back what it reads (by reference, no copy), closes at EOF once all is
  echoed; reading pauses while more than ``ECHO_BACKLOG`` bytes of this connection, or
  ``backlog_limit`` bytes of all of them, wait to be echoed (counted in ``stats``), so the
  receive window closes on a slow reader and readers that never read cannot pile up memory
  outside the stack's account.
* ``source``: sends ``source_bytes`` of the deterministic :func:`pattern` stream on
  accept, then closes (FIN); what the client sends is read and hashed.

Every connection produces one :class:`ConnReport` (bytes and SHA-256 each way) at close;
``tx_digest=False`` leaves the sent side's SHA-256 empty (a benchmark whose reference sender
does not hash what it sends: the receiver checks the bytes).
"""

from __future__ import annotations

import hashlib
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from usertcp.tcp.connection import Connection, State
from usertcp.tcp.stack import Listener, Stack

APPS = ("echo", "discard", "source")
ECHO_BACKLOG = 1 << 20
ECHO_BACKLOG_TOTAL = 32 << 20     # all connections of one server together...
ECHO_BACKLOG_MIN = 64 << 10       # ...beyond which each connection still gets this much
_SEND_CHUNK = 1 << 16


def _make_block() -> bytes:
    # 1 MiB of SHA-256 output in counter mode: no short period, cheap to regenerate anywhere.
    return b"".join(hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(1 << 15))


PATTERN_BLOCK = _make_block()


def pattern_views(n: int, offset: int = 0, chunk: int = _SEND_CHUNK) -> Iterator[memoryview]:
    """Bytes [offset, offset+n) of the pattern stream (``PATTERN_BLOCK`` repeated), as views."""
    block = memoryview(PATTERN_BLOCK)
    size = len(PATTERN_BLOCK)
    end = offset + n
    while offset < end:
        lo = offset % size
        take = min(chunk, size - lo, end - offset)
        yield block[lo:lo + take]
        offset += take


def pattern(n: int, offset: int = 0) -> bytes:
    return b"".join(pattern_views(n, offset))


def pattern_sha256(n: int) -> str:
    h = hashlib.sha256()
    for v in pattern_views(n, chunk=len(PATTERN_BLOCK)):
        h.update(v)
    return h.hexdigest()


@dataclass
class ConnReport:
    app: str
    local: str
    remote: str
    rx_bytes: int = 0
    rx_sha256: str = ""
    tx_bytes: int = 0
    tx_sha256: str = ""
    error: int = 0
    state: str = ""
    started: float = field(default_factory=time.monotonic)
    duration: float = 0.0
    retransmits: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _endpoint(ip: bytes, port: int) -> str:
    addr = Stack.fmt_addr(ip)
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


class _Session:
    __slots__ = ("server", "conn", "rx_hash", "tx_hash", "rx_bytes", "tx_bytes", "to_send", "echo_q",
                 "echo_bytes", "report", "done")

    def __init__(self, server: BasicServer, conn: Connection) -> None:
        self.server = server
        self.conn = conn
        self.rx_hash = hashlib.sha256()
        self.tx_hash = hashlib.sha256()
        self.rx_bytes = 0
        self.tx_bytes = 0
        self.to_send = server.source_bytes if server.app == "source" else 0
        self.echo_q: deque[memoryview] = deque()
        self.echo_bytes = 0
        self.done = False
        self.report = ConnReport(server.app, _endpoint(conn.local_ip, conn.local_port),
                                 _endpoint(conn.remote_ip, conn.remote_port))


class BasicServer:
    """One of :data:`APPS` on ``listener``.

    ``now()`` must return the time of the event being processed (``stack.now`` when
    called from the driver loop), never a later clock read: see usertcp.apps.serve.
    """

    def __init__(self, app: str, listener: Listener, now: Callable[[], float], *, source_bytes: int = 0,
                 on_report: Callable[[ConnReport], None] | None = None,
                 backlog_limit: int = ECHO_BACKLOG_TOTAL, tx_digest: bool = True) -> None:
        if app not in APPS:
            raise ValueError(f"unknown app {app!r}; one of {', '.join(APPS)}")
        self.app = app
        self.listener = listener
        self.now = now
        self.source_bytes = source_bytes
        self.on_report = on_report
        self.tx_digest = tx_digest
        self.sessions: dict[Connection, _Session] = {}
        self.reports: list[ConnReport] = []
        self.stats = {"accepted": 0, "closed": 0, "rx_bytes": 0, "tx_bytes": 0,
                      "echo_backlog": 0, "echo_backlog_full": 0}
        self.backlog_limit = backlog_limit
        self._paused: set[Connection] = set()   # reading stopped by the server-wide backlog
        listener.on_accept_ready = self._accept_ready
        self._accept_ready(listener)

    # -- events (driver loop, lock held) ---------------------------------------------------------

    def _accept_ready(self, lst: Listener) -> None:
        while True:
            conn = lst.accept()
            if conn is None:
                return
            self.stats["accepted"] += 1
            s = _Session(self, conn)
            self.sessions[conn] = s
            conn.on_readable = self._readable
            conn.on_writable = self._writable
            if self.app == "source":
                self._fill(s)
            self._readable(conn)

    def _readable(self, conn: Connection) -> None:
        s = self.sessions.get(conn)
        if s is None or s.done:
            return
        now = self.now()
        room = len(conn.rcv_buf)
        if self.app == "echo" and room:
            # Every connection may hold ECHO_BACKLOG_MIN whatever the others hold, as TCP
            # guarantees each socket tcp_rmem[0]: hoarders cannot starve the rest.
            room = min(room, ECHO_BACKLOG - s.echo_bytes,
                       max(self.backlog_limit - self.stats["echo_backlog"],
                           ECHO_BACKLOG_MIN - s.echo_bytes))
            if room <= 0:
                self.stats["echo_backlog_full"] += 1
                if s.echo_bytes < ECHO_BACKLOG:
                    self._paused.add(conn)        # woken when another echo drains
        if room > 0:
            data = conn.recv(room, now)
            if data:
                s.rx_hash.update(data)
                s.rx_bytes += len(data)
                self.stats["rx_bytes"] += len(data)
                if self.app == "echo":
                    s.echo_q.append(memoryview(data))
                    s.echo_bytes += len(data)
                    self.stats["echo_backlog"] += len(data)
                    self._fill(s)
        self._check_end(s, now)

    def _writable(self, conn: Connection) -> None:
        s = self.sessions.get(conn)
        if s is None or s.done:
            return
        self._fill(s)
        if self.app == "echo" and len(conn.rcv_buf):
            self._readable(conn)      # the backlog drained: read what waited
        else:
            self._check_end(s, self.now())

    def _fill(self, s: _Session) -> None:
        """Queue data up to the send buffer's free space, by reference (send_views)."""
        conn = s.conn
        if conn.state not in (State.ESTABLISHED, State.CLOSE_WAIT, State.SYN_RECEIVED) \
                or conn.write_shutdown:
            return
        space = conn.send_space
        views: list[memoryview] = []
        if self.app == "source":
            n = min(space, s.to_send)
            if n > 0:
                views = list(pattern_views(n, s.tx_bytes))
                s.to_send -= n
        elif self.app == "echo":
            q = s.echo_q
            while q and space > 0:
                v = q[0]
                if len(v) <= space:
                    q.popleft()
                else:
                    q[0] = v[space:]
                    v = v[:space]
                views.append(v)
                space -= len(v)
                s.echo_bytes -= len(v)
                self.stats["echo_backlog"] -= len(v)
        if not views:
            return
        n = 0
        for v in views:
            if self.tx_digest:
                s.tx_hash.update(v)
            n += len(v)
        s.tx_bytes += n
        self.stats["tx_bytes"] += n
        conn.send_views(views, self.now())
        if self._paused:
            self._wake_paused()         # after this echo is queued, never inside it

    def _wake_paused(self) -> None:
        """Server-wide backlog room came back: resume the readers it stopped."""
        while self._paused and self.stats["echo_backlog"] < self.backlog_limit:
            self._readable(self._paused.pop())

    def _check_end(self, s: _Session, now: float) -> None:
        conn = s.conn
        if conn.state is State.CLOSED or conn.error:
            self._finish(s)
            return
        eof = conn.fin_received and not len(conn.rcv_buf)
        if self.app == "source":
            if s.to_send == 0 and not conn.write_shutdown:
                conn.shutdown(False, True, now)        # all queued: FIN after the data
            if eof and conn.write_shutdown:
                conn.close(now)
                self._finish(s)
        elif eof and not s.echo_q:
            conn.close(now)
            self._finish(s)

    def _finish(self, s: _Session) -> None:
        if s.done:
            return
        s.done = True
        conn = s.conn
        self.sessions.pop(conn, None)
        self.stats["echo_backlog"] -= s.echo_bytes      # what it never echoed is freed
        s.echo_bytes = 0
        s.echo_q.clear()
        self._paused.discard(conn)
        self._wake_paused()
        r = s.report
        r.rx_bytes, r.rx_sha256 = s.rx_bytes, s.rx_hash.hexdigest()
        r.tx_bytes, r.tx_sha256 = s.tx_bytes, s.tx_hash.hexdigest() if self.tx_digest else ""
        r.error = conn.error
        r.state = conn.state.name
        r.duration = time.monotonic() - r.started
        r.retransmits = conn.total_retrans
        self.stats["closed"] += 1
        self.reports.append(r)
        if self.on_report is not None:
            self.on_report(r)

    def close(self) -> list[ConnReport]:
        """Report the connections still open (shutdown of the server); returns every report."""
        for s in list(self.sessions.values()):
            self._finish(s)
        return self.reports
