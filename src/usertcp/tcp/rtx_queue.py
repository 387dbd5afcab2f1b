"""The retransmission queue: sent, not yet cumulatively acknowledged ranges, in sequence order.

Linux keeps this queue in an rb-tree keyed by sequence number (``tcp_rtx_queue``), so that
SACK processing finds the first record a block touches in logarithmic time
(``tcp_sacktag_bsearch``) instead of walking from SND.UNA for every block; a scan from the
head for each block is what made crafted SACKs a CPU denial of service (CVE-2019-11478,
CVE-2019-5599). Here the records sit in a list ordered by offset, found by bisection over
their end offsets; acknowledged records leave from the head without moving the rest.

Beside the offset order, the records still waiting for RACK (RFC 8985) are linked in the
order they were last sent, as Linux's ``tsorted_sent_queue``: a SACKed record, or one RACK
marked lost, leaves that list; a retransmitted one moves to its tail. RACK then walks only
the oldest-sent records, and stops at the first one it must wait for.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from operator import attrgetter
from typing import Final

# Acknowledged records are dropped from the list's front in one slice once this many have
# gathered (and they are at least half of it), so that popping the head stays O(1) amortised.
_COMPACT_AT: Final = 64

_END = attrgetter("end")

# Linux tcp_fragment's allowance over sk_sndbuf before it refuses to split a queued skb
# (CVE-2019-11478): 2 * SKB_TRUESIZE(GSO_LEGACY_MAX_SIZE), a 64 KiB payload plus the
# cache-aligned sk_buff (256) and skb_shared_info (320).
FRAGMENT_ALLOWANCE: Final = 2 * (65536 + 256 + 320)


class SentSegment:
    """One transmitted range [start, end) of sequence offsets awaiting acknowledgement."""

    __slots__ = ("end", "fin", "first_tx", "lost", "retrans", "sacked", "sent_next", "sent_prev",
                 "start", "tx_count", "tx_time")

    def __init__(self, start: int, end: int, fin: bool, now: float) -> None:
        # Neighbours in send-time order (Linux tcp_tsorted_anchor); None on both sides when
        # not linked, unless it is the queue's only linked record (RtxQueue.sent_first).
        self.sent_prev: SentSegment | None = None
        self.sent_next: SentSegment | None = None
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

    __slots__ = ("_head", "_segs", "sent_first", "sent_last")

    def __init__(self) -> None:
        self._segs: list[SentSegment] = []
        self._head = 0              # records before this index are acknowledged and gone
        self.sent_first: SentSegment | None = None    # oldest in send-time order
        self.sent_last: SentSegment | None = None

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
        """A newly transmitted range, above every queued one (and the latest sent)."""
        self._segs.append(record)
        self._link_after(self.sent_last, record)

    def insert(self, index: int, record: SentSegment) -> None:
        """Put the tail of a split at position ``index``, right after its head; in send-time
        order it follows the head too (sent with it), if the head is still there."""
        self._segs.insert(self._head + index, record)
        if index > 0:
            prev = self._segs[self._head + index - 1]
            if self._linked(prev):
                self._link_after(prev, record)

    def popleft(self) -> SentSegment:
        """Remove and return the oldest record (it was cumulatively acknowledged)."""
        segs = self._segs
        head = self._head
        if head >= len(segs):
            raise IndexError("pop from an empty retransmission queue")
        record = segs[head]
        self.unlink_sent(record)
        head += 1
        if head >= _COMPACT_AT and 2 * head >= len(segs):
            del segs[:head]
            head = 0
        self._head = head
        return record

    def clear(self) -> None:
        for i in range(self._head, len(self._segs)):
            r = self._segs[i]
            r.sent_prev = r.sent_next = None
        self._segs.clear()
        self._head = 0
        self.sent_first = self.sent_last = None

    def remove(self, index: int) -> SentSegment:
        """Take the record at ``index`` out (merged into a neighbour)."""
        record = self._segs.pop(self._head + index)
        self.unlink_sent(record)
        return record

    # ------------------------------------------------------------ send-time order

    def _linked(self, r: SentSegment) -> bool:
        return r.sent_prev is not None or self.sent_first is r

    def _link_after(self, anchor: SentSegment | None, r: SentSegment) -> None:
        nxt = self.sent_first if anchor is None else anchor.sent_next
        r.sent_prev = anchor
        r.sent_next = nxt
        if anchor is None:
            self.sent_first = r
        else:
            anchor.sent_next = r
        if nxt is None:
            self.sent_last = r
        else:
            nxt.sent_prev = r

    def unlink_sent(self, r: SentSegment) -> None:
        """``r`` no longer waits for RACK: SACKed, acknowledged or marked lost (Linux
        list_del_init of its tcp_tsorted_anchor)."""
        if not self._linked(r):
            return
        prev, nxt = r.sent_prev, r.sent_next
        if prev is None:
            self.sent_first = nxt
        else:
            prev.sent_next = nxt
        if nxt is None:
            self.sent_last = prev
        else:
            nxt.sent_prev = prev
        r.sent_prev = r.sent_next = None

    def sent_again(self, r: SentSegment) -> None:
        """``r`` was just retransmitted: it is now the latest sent (Linux
        tcp_update_skb_after_send moves it to the tail of tsorted_sent_queue)."""
        self.unlink_sent(r)
        self._link_after(self.sent_last, r)

    def index_ending_after(self, offset: int) -> int:
        """Position of the first record whose end lies above ``offset`` (``len(self)`` if
        none): the first record a SACK block starting at ``offset`` can touch, found by
        bisection as Linux tcp_sacktag_bsearch walks the rb-tree."""
        return bisect_right(self._segs, offset, self._head, len(self._segs), key=_END) - self._head

    def split(self, index: int, at: int) -> SentSegment:
        """Cut the record at position ``index`` at offset ``at``; the tail, which keeps the
        transmission history, is queued right after it and returned (Linux tcp_fragment)."""
        tail = self[index].split(at)
        self.insert(index + 1, tail)
        return tail

    def split_refused(self, index: int, wmem_queued: int, sndbuf: int) -> bool:
        """Linux tcp_fragment's memory check: with half of sk_wmem_queued over sk_sndbuf plus
        the allowance, only the first and the last record may still be split, so that a peer
        cannot cut the queue into tiny pieces without bound (CVE-2019-11478)."""
        return (wmem_queued >> 1) > sndbuf + FRAGMENT_ALLOWANCE and 0 < index < len(self) - 1
