"""The retransmission queue: sent, not yet cumulatively acknowledged ranges, in sequence order.

Linux keeps this queue in an rb-tree keyed by sequence number (``tcp_rtx_queue``), so that
SACK processing finds the first record a block touches in logarithmic time
(``tcp_sacktag_bsearch``) instead of walking from SND.UNA for every block; a scan from the
head for each block is what made crafted SACKs a CPU denial of service (CVE-2019-11478,
CVE-2019-5599). Here the records sit in a list ordered by offset, found by bisection over
their end offsets; acknowledged records leave from the head without moving the rest.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from operator import attrgetter

# Acknowledged records are dropped from the list's front in one slice once this many have
# gathered (and they are at least half of it), so that popping the head stays O(1) amortised.
_COMPACT_AT = 64

_END = attrgetter("end")


class SentSegment:
    """One transmitted range [start, end) of sequence offsets awaiting acknowledgement."""

    __slots__ = ("end", "fin", "first_tx", "lost", "retrans", "sacked", "start", "tx_count", "tx_time")

    def __init__(self, start: int, end: int, fin: bool, now: float) -> None:
        self.start = start
        self.end = end
        self.fin = fin
        self.tx_time = now
        self.first_tx = now
        self.tx_count = 1
        self.retrans = False
        self.sacked = False
        self.lost = False

    def split(self, at: int) -> SentSegment:
        """Cut this range at offset ``at`` and return the tail [at, end), which keeps the
        transmission history (as Linux tcp_fragment copies the skb's control block)."""
        tail = SentSegment(at, self.end, self.fin, self.tx_time)
        tail.tx_count, tail.retrans = self.tx_count, self.retrans
        tail.lost, tail.first_tx = self.lost, self.first_tx
        self.end = at
        self.fin = False
        return tail


class RtxQueue:
    """Sent records ordered by offset, with positional access relative to the head (index 0
    is the oldest unacknowledged record) and bisection by offset (Linux tcp_rtx_queue)."""

    __slots__ = ("_head", "_segs")

    def __init__(self) -> None:
        self._segs: list[SentSegment] = []
        self._head = 0              # records before this index are acknowledged and gone

    def __len__(self) -> int:
        return len(self._segs) - self._head

    def __bool__(self) -> bool:
        return len(self._segs) > self._head

    def __getitem__(self, index: int) -> SentSegment:
        n = len(self._segs) - self._head
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("retransmission queue index out of range")
        return self._segs[self._head + index]

    def __iter__(self) -> Iterator[SentSegment]:
        segs = self._segs
        for i in range(self._head, len(segs)):
            yield segs[i]

    def __reversed__(self) -> Iterator[SentSegment]:
        segs = self._segs
        for i in range(len(segs) - 1, self._head - 1, -1):
            yield segs[i]

    def append(self, record: SentSegment) -> None:
        """A newly transmitted range, above every queued one."""
        self._segs.append(record)

    def insert(self, index: int, record: SentSegment) -> None:
        """Put ``record`` at position ``index`` (a split's tail goes right after its head)."""
        self._segs.insert(self._head + index, record)

    def popleft(self) -> SentSegment:
        """Remove and return the oldest record (it was cumulatively acknowledged)."""
        segs = self._segs
        head = self._head
        if head >= len(segs):
            raise IndexError("pop from an empty retransmission queue")
        record = segs[head]
        head += 1
        if head >= _COMPACT_AT and 2 * head >= len(segs):
            del segs[:head]
            head = 0
        self._head = head
        return record

    def clear(self) -> None:
        self._segs.clear()
        self._head = 0

    def index_ending_after(self, offset: int) -> int:
        """Position of the first record whose end lies above ``offset`` (``len(self)`` if
        none): the first record a SACK block starting at ``offset`` can touch, found by
        bisection as Linux tcp_sacktag_bsearch walks the rb-tree."""
        return bisect_right(self._segs, offset, self._head, len(self._segs), key=_END) - self._head
