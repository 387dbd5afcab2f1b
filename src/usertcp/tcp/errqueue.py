"""A socket's error queue (Linux ``sk->sk_error_queue``): transmit notifications for the application.

Two producers fill it, each in its own module: MSG_ZEROCOPY completions (:mod:`usertcp.tcp.zerocopy`)
and transmit timestamps (:mod:`usertcp.tcp.timestamping`). The application reads it with
``recvmsg(MSG_ERRQUEUE)`` (Linux ``ip_recv_error``/``ipv6_recv_error``): one entry per call, as a
``struct sock_extended_err`` control message, EAGAIN when it is empty. A non-empty queue makes
the socket report EPOLLERR (``tcp_poll``) and each new entry wakes the socket with an EPOLLERR key
(``sk_error_report``).

The connection tells the queue about its data: what was transmitted (``on_sent``), acknowledged
(``on_acked``) or dropped with the connection (``on_purge``); the producers turn those into
entries. Sans-IO: times are the caller's ``now``.
"""

from __future__ import annotations

import errno
from collections import deque
from typing import TYPE_CHECKING, Final

from usertcp.tcp.wakeup import KEY_ERROR

if TYPE_CHECKING:
    from usertcp.tcp.connection import Connection
    from usertcp.tcp.timestamping import TxTimestamps
    from usertcp.tcp.zerocopy import Zerocopy

__all__ = [
    "SO_EE_CODE_ZEROCOPY_COPIED",
    "SO_EE_ORIGIN_TIMESTAMPING",
    "SO_EE_ORIGIN_ZEROCOPY",
    "ErrorQueue",
    "ExtendedError",
]

# include/uapi/linux/errqueue.h
SO_EE_ORIGIN_TIMESTAMPING: Final = 4
SO_EE_ORIGIN_ZEROCOPY: Final = 5
SO_EE_CODE_ZEROCOPY_COPIED: Final = 1
_U32: Final = 1 << 32


class ExtendedError:
    """One queued notification: ``struct sock_extended_err`` plus what the skb carried (the
    software timestamp of a timestamping entry, the length of the data it holds, or the
    SCM_TIMESTAMPING_OPT_STATS payload it holds instead)."""

    __slots__ = ("code", "data", "errno", "info", "length", "origin", "stats", "tstamp", "type")

    def __init__(self, origin: int, *, err: int = 0, code: int = 0, info: int = 0, data: int = 0,
                 tstamp: float | None = None, length: int = 0, stats: bytes | None = None) -> None:
        self.errno = err
        self.origin = origin
        self.type = 0
        self.code = code
        self.info = info
        self.data = data
        self.tstamp = tstamp       # seconds, the caller's clock (SCM_TIMESTAMPING ts[0])
        self.length = length       # bytes recvmsg could copy out (MSG_TRUNC beyond the iovec)
        self.stats = stats         # tcp_get_timestamping_opt_stats() (wire/opt_stats.py)

    def __repr__(self) -> str:
        return (f"ExtendedError(origin={self.origin}, errno={self.errno}, code={self.code}, "
                f"info={self.info}, data={self.data}, tstamp={self.tstamp}, length={self.length})")


class ErrorQueue:
    """The error queue of one connection and the transmit notifiers that feed it."""

    __slots__ = ("_q", "ack_ttl", "conn", "tstamp", "zerocopy")

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.ack_ttl = -1          # TTL / hop limit of the last ACK processed (TCP_NLA_TTL)
        self._q: deque[ExtendedError] = deque()
        self.zerocopy: Zerocopy | None = None     # SO_ZEROCOPY sends in flight
        self.tstamp: TxTimestamps | None = None   # SO_TIMESTAMPING state

    def __len__(self) -> int:
        return len(self._q)

    def pop(self) -> ExtendedError | None:
        """recvmsg(MSG_ERRQUEUE): the oldest entry (sock_dequeue_err_skb), None when empty."""
        return self._q.popleft() if self._q else None

    def push(self, entry: ExtendedError) -> None:
        """sock_queue_err_skb(): queue and report (sk_error_report wakes with EPOLLERR)."""
        self._q.append(entry)
        self.conn.wake(KEY_ERROR)

    def push_zerocopy(self, lo: int, count: int, copied: bool) -> None:
        """__msg_zerocopy_callback(): the ids lo..lo+count-1 completed; extend the tail entry
        when it is a zerocopy range that ends right before (skb_zerocopy_notify_extend)."""
        hi = (lo + count - 1) % _U32
        tail = self._q[-1] if self._q else None
        if (tail is not None and tail.origin == SO_EE_ORIGIN_ZEROCOPY
                and lo == (tail.data + 1) % _U32
                and (tail.data - tail.info) % _U32 + 1 + count < _U32):
            tail.data = hi
            if copied:
                tail.code |= SO_EE_CODE_ZEROCOPY_COPIED
            self.conn.wake(KEY_ERROR)
            return
        self.push(ExtendedError(SO_EE_ORIGIN_ZEROCOPY, info=lo, data=hi,
                                code=SO_EE_CODE_ZEROCOPY_COPIED if copied else 0))

    def push_timestamp(self, kind: int, key: int, now: float, length: int,
                       stats: bytes | None = None) -> None:
        """__skb_complete_tx_timestamp(): ee_errno ENOMSG, ee_info the SCM_TSTAMP_* kind,
        ee_data the byte key (with SOF_TIMESTAMPING_OPT_ID); ``stats`` with OPT_STATS."""
        self.push(ExtendedError(SO_EE_ORIGIN_TIMESTAMPING, err=errno.ENOMSG, info=kind, data=key % _U32,
                                tstamp=now, length=len(stats) if stats else length, stats=stats))

    # ---------------------------------------------------------------- connection events

    def mark_write(self) -> None:
        """A write ends: transmit timestamps mark its last byte (tcp_tx_timestamp)."""
        if self.tstamp is not None:
            self.tstamp.mark_write(self.conn)

    def on_sent(self, start: int, end: int, now: float) -> None:
        """Data stream bytes [start, end) left for the first time (0 is the first data byte)."""
        if self.tstamp is not None:
            self.tstamp.on_sent(self, start, end, now)

    def on_acked(self, upto: int, now: float) -> None:
        """Every data byte before stream offset ``upto`` is acknowledged (its skb freed)."""
        if self.zerocopy is not None:
            self.zerocopy.on_acked(self, upto)
        if self.tstamp is not None:
            self.tstamp.on_acked(self, upto, now)

    def on_purge(self) -> None:
        """tcp_write_queue_purge(): the connection dropped its unacknowledged data; zerocopy
        buffers are released (and reported, unless the socket is already closed: SOCK_DEAD)."""
        if self.zerocopy is not None:
            self.zerocopy.on_purge(self, report=not self.conn.closed_by_app)
