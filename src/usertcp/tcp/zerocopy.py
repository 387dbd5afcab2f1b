"""MSG_ZEROCOPY for TCP (Linux ``tcp_sendmsg_locked`` with ``SOCK_ZEROCOPY``, ``msg_zerocopy_realloc``,
``__msg_zerocopy_callback``): completion notifications on the error queue.

Each ``send(MSG_ZEROCOPY)`` that queues data takes the socket's next notification id
(``sk_zckey``); a send whose data joins the still unsent tail of the previous zerocopy send
extends that send's range instead (``msg_zerocopy_realloc``: one ``ubuf_info`` for both, up to
512 KiB). When every byte of a range is acknowledged (its skbs freed) the range completes: an
entry ``ee_info..ee_data`` goes on the error queue, merged into the queue's tail entry when the
ranges are consecutive (``skb_zerocopy_notify_extend``). A send that queues nothing (an error,
EAGAIN, a fast-open SYN without data) takes no id (``net_zcopy_put_abort``).

In usertcp the application's buffer is kept by reference, not copied, until the notification
(``Connection.send(..., pinned=True)``): the notification tells when it may be reused. Every
usertcp link copies a payload out of the send buffer when the packet leaves (memnet joins the
parts, TUN writes them with ``writev``), as Linux's tun device copies zerocopy frags
(``skb_orphan_frags_rx`` -> ``skb_copy_ubufs``); so, as on such a device, the completion carries
``SO_EE_CODE_ZEROCOPY_COPIED``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from usertcp.tcp.buffers import PAGE_SIZE

if TYPE_CHECKING:
    from usertcp.tcp.connection import Connection
    from usertcp.tcp.errqueue import ErrorQueue

__all__ = ["LINKS_COPY_PAYLOAD", "Zerocopy", "ZerocopySend", "frag_fit", "regions_after"]

# msg_zerocopy_realloc(): a range grows while it holds at most this many bytes and ids.
ZEROCOPY_BYTE_LIMIT: Final = 1 << 19
ZEROCOPY_MAX_IDS: Final = 0xFFFF - 1
# Every link copies the payload when the packet leaves (see the module docstring).
LINKS_COPY_PAYLOAD: Final = True
_U32: Final = 1 << 32


class _Range:
    """One ubuf_info_msgzc: ids lo..lo+count-1 cover stream bytes up to ``end``."""

    __slots__ = ("bytelen", "count", "end", "lo")

    def __init__(self, lo: int, end: int, bytelen: int) -> None:
        self.lo = lo
        self.count = 1
        self.end = end
        self.bytelen = bytelen


class Zerocopy:
    """The zerocopy state of one socket: the next id and the ranges not yet completed."""

    __slots__ = ("_ranges", "next_id")

    def __init__(self) -> None:
        self.next_id = 0                      # sk_zckey
        self._ranges: deque[_Range] = deque()

    @property
    def pending(self) -> int:
        """Ranges whose data is not yet acknowledged."""
        return len(self._ranges)

    def begin(self, conn: Connection) -> bool:
        """Before a zerocopy send (msg_zerocopy_realloc): may it extend the last range? Only if
        that range's data is still in the unsent tail skb (skb_zcopy(tail)) and no id was
        taken since."""
        last = self._ranges[-1] if self._ranges else None
        end = conn.snd_buf.end
        return (last is not None and last.end == end and end >= conn.snd_max
                and (last.lo + last.count) % _U32 == self.next_id and last.count < ZEROCOPY_MAX_IDS)

    def record(self, extend: bool, start: int, end: int) -> None:
        """The send queued stream bytes [start, end): take an id or extend the last range; a
        send that queued nothing takes no id (net_zcopy_put_abort)."""
        n = end - start
        if n <= 0:
            return
        last = self._ranges[-1] if self._ranges else None
        if extend and last is not None and last.bytelen + n <= ZEROCOPY_BYTE_LIMIT:
            last.count += 1
            last.bytelen += n
            last.end = end
        else:
            self._ranges.append(_Range(self.next_id, end, n))
        self.next_id = (self.next_id + 1) % _U32

    def on_acked(self, queue: ErrorQueue, upto: int) -> None:
        ranges = self._ranges
        while ranges and ranges[0].end <= upto:
            r = ranges.popleft()
            queue.push_zerocopy(r.lo, r.count, LINKS_COPY_PAYLOAD)

    def on_purge(self, queue: ErrorQueue, *, report: bool) -> None:
        while self._ranges:
            r = self._ranges.popleft()
            if report:
                queue.push_zerocopy(r.lo, r.count, LINKS_COPY_PAYLOAD)


class ZerocopySend:
    """One MSG_ZEROCOPY send call on a socket with SO_ZEROCOPY, from start to end (Linux holds
    one ubuf_info for the whole tcp_sendmsg_locked call, through any waits for space)."""

    __slots__ = ("extend", "start", "zerocopy")

    def __init__(self, conn: Connection, *, syn_data: bool = False) -> None:
        """``syn_data``: the call opened ``conn`` with MSG_FASTOPEN (tcp_sendmsg_fastopen hands
        the call's ``uarg`` to the SYN, tcp_send_syn_data): the range starts at the stream's
        first byte, whatever the SYN took of it."""
        queue = conn.error_queue()
        if queue.zerocopy is None:
            queue.zerocopy = Zerocopy()
        self.zerocopy = queue.zerocopy
        self.start = 0 if syn_data else conn.snd_buf.end
        self.extend = False if syn_data else self.zerocopy.begin(conn)

    def finish(self, conn: Connection) -> None:
        """The call ended (returned or failed): the bytes it queued take their id."""
        self.zerocopy.record(self.extend, self.start, conn.snd_buf.end)


def frag_fit(ends: Sequence[int], pos: int, want: int, room: int) -> tuple[int, int]:
    """Linux __zerocopy_sg_from_iter(): of ``want`` bytes of a zerocopy write from its byte
    ``pos``, how many ``room`` more frags of the skb hold, and the frags they take.

    ``ends`` are the end positions of the write's separate memory regions (its iovec): each
    page a region's bytes touch is one frag, and no frag spans two regions (separate user
    buffers do not coalesce, skb_can_coalesce). A region is taken to start on a page
    boundary: Python does not tell where a buffer lies in its page.
    """
    i = bisect_right(ends, pos)
    taken = frags = 0
    n = len(ends)
    while taken < want and i < n:
        at = pos + taken
        first = (at - (ends[i - 1] if i else 0)) % PAGE_SIZE    # offset in its page
        rem = min(ends[i], pos + want) - at
        pages = (first + rem + PAGE_SIZE - 1) // PAGE_SIZE
        if frags + pages > room:
            fit = (room - frags) * PAGE_SIZE - first
            if fit > 0:
                taken += fit
                frags = room
            break
        taken += rem
        frags += pages
        i += 1
    return taken, frags


def regions_after(regions: Sequence[int], skip: int) -> tuple[int, ...]:
    """The region lengths of a write's bytes after its first ``skip`` (what a write resumed
    after a partial one still has to queue)."""
    out: list[int] = []
    for n in regions:
        if skip >= n:
            skip -= n
            continue
        out.append(n - skip)
        skip = 0
    return tuple(out)
