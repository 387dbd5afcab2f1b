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
from collections.abc import Callable, Iterator
from operator import attrgetter
from typing import TYPE_CHECKING, Final

from usertcp.tcp.buffers import SKB_TRUESIZE_OVERHEAD

if TYPE_CHECKING:
    from usertcp.tcp.buffers import SendBuffer

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

    __slots__ = ("end", "fin", "first_tx", "gso_size", "lost", "retrans", "sacked", "sent_next",
                 "sent_prev", "start", "tx_count", "tx_time")

    def __init__(self, start: int, end: int, fin: bool, now: float, gso_size: int = 0) -> None:
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
        # The MSS of a multi-segment packet (Linux tcp_skb_mss, the skb's gso_size), 0 for a
        # single-segment one: what tcp_skb_seglen() reads.
        self.gso_size = gso_size

    @property
    def seglen(self) -> int:
        """Linux tcp_skb_seglen(): the length of each segment this record went out as (its
        MSS when it was a multi-segment packet, else its whole payload)."""
        n = self.end - self.start - (1 if self.fin else 0)
        gso = self.gso_size
        return gso if 0 < gso < n else n

    @property
    def pcount(self) -> int:
        """Linux tcp_skb_pcount(): how many segments this record is (its MSS into its length),
        1 for a single-segment one; what delivered counts when it is acked or SACKed."""
        n = self.end - self.start - (1 if self.fin else 0)
        gso = self.gso_size
        return -(-n // gso) if 0 < gso < n else 1

    def split(self, at: int) -> SentSegment:
        """Cut this range at offset ``at`` and return the tail [at, end), which keeps the
        transmission history (as Linux tcp_fragment copies the skb's control block)."""
        tail = SentSegment(at, self.end, self.fin, self.tx_time, self.gso_size)
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
        prev, nxt = r.sent_prev, r.sent_next
        if prev is None and self.sent_first is not r:
            return                       # not linked (_linked, inlined: once per SACKed record)
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

    # The per-block work a hostile peer controls (CVE-2019-11477/11478, CVE-2019-5599), so it
    # runs on the list itself, without per-record method calls. The first record the block
    # touches is found by bisection (tcp_sacktag_bsearch). A record the block covers only in
    # part is cut at the block's edges, on whole-MSS boundaries only (tcp_match_skb_to_sack: a
    # partial SACK of a one-MSS record marks nothing), unless tcp_fragment's memory check
    # (split_refused, ``snd_buf``'s sk_wmem_queued against ``sndbuf``) refuses it: then
    # ``refused`` counts it and the block ends. The send buffer's skb is cut there too. ``tag``
    # counts each newly SACKed record, which is then folded into SACKed neighbours it touches
    # (tcp_shifted_skb), so that a SACKed range is one record and a block repeated in later
    # ACKs costs a lookup, not a walk.
    def sack_range(self, left: int, right: int, mss: int, snd_buf: SendBuffer, sndbuf: int,
                   refused: Callable[[], None], tag: Callable[[SentSegment, float], None],
                   now: float) -> float:
        """Mark [left, right) of one SACK block (Linux tcp_sacktag_walk). Returns -1.0 if no
        record was newly SACKed, else the send time of the first newly SACKed one never
        retransmitted (tcp_sacktag_one's first_sackt), or -2.0 if each was retransmitted.
        The comment above says how it bounds a hostile peer's work."""
        segs = self._segs
        head = self._head
        n = len(segs)
        i = bisect_right(segs, left, head, n, key=_END)
        new = -1.0
        # tcp_fragment's check needs sk_wmem_queued only once it may be near the limit: each
        # cut adds at most one skb's overhead to it, so an upper bound spares the exact sum.
        # Refused when (wmem >> 1) > sndbuf + allowance, that is wmem >= limit.
        limit = 2 * (sndbuf + FRAGMENT_ALLOWANCE) + 2
        wmem = snd_buf.wmem_queued
        while i < n:
            r = segs[i]
            start = r.start
            if start >= right:
                break
            if r.sacked:
                i += 1
                continue
            end = r.end
            if start < left or end > right:
                if end - start <= mss:
                    i += 1
                    continue
                # Whole pieces only: [a, b) is left rounded up, right rounded down to an MSS
                # boundary from the record's start (the record's own end counts as one).
                a = start if left <= start else start - (start - left) // mss * mss
                b = end if right >= end else start + (right - start) // mss * mss
                if a >= b:
                    i += 1
                    continue
                if a > start:
                    wmem = self._cut(i, a, wmem, limit, snd_buf, refused)
                    if wmem < 0:
                        break
                    n += 1
                    i += 1
                    r = segs[i]
                if b < end:
                    wmem = self._cut(i, b, wmem, limit, snd_buf, refused)
                    if wmem < 0:
                        break
                    n += 1
            tag(r, now)
            if new < 0.0:
                new = r.tx_time if r.tx_count == 1 else -2.0
            self.unlink_sent(r)            # no longer waiting for RACK
            i = self._fold_sacked(i, r)
            n = len(segs)
        return new

    def _fold_sacked(self, i: int, r: SentSegment) -> int:
        """Fold the newly SACKed record ``r`` at position ``i`` into SACKed neighbours it
        touches (tcp_shifted_skb); the position of the record after it."""
        segs = self._segs
        if i + 1 < len(segs):
            nxt = segs[i + 1]
            if nxt.sacked and nxt.start == r.end:
                r.end, r.fin = nxt.end, nxt.fin
                del segs[i + 1]
        if i > self._head:
            prev = segs[i - 1]
            if prev.sacked and prev.end == r.start:
                prev.end, prev.fin = r.end, r.fin
                del segs[i]
                return i                   # segs[i] is now the record after it
        return i + 1

    def _cut(self, i: int, at: int, wmem: int, limit: int, snd_buf: SendBuffer,
             refused: Callable[[], None]) -> int:
        """Cut record ``i`` and its skb at ``at`` for a SACK block; the send queue's memory
        after it, or -1 if tcp_fragment's check refuses the cut (``refused`` counts it). Only
        records between the first and the last are refused, as split_refused does."""
        if wmem >= limit and self._head < i < len(self._segs) - 1:
            wmem = snd_buf.wmem_queued
            if wmem >= limit:
                refused()
                return -1
        snd_buf.split(at - 1)           # offset 1 is data byte 0
        self._split_at(i, at)
        return wmem + SKB_TRUESIZE_OVERHEAD

    def _split_at(self, i: int, at: int) -> None:
        """Cut the record at list position ``i`` at offset ``at``; the tail follows it in
        both orders (sent with it). SentSegment.split and _link_after, inlined."""
        segs = self._segs
        r = segs[i]
        tail = SentSegment(at, r.end, r.fin, r.tx_time, r.gso_size)
        tail.tx_count = r.tx_count
        tail.retrans = r.retrans
        tail.lost = r.lost
        tail.first_tx = r.first_tx
        r.end = at
        r.fin = False
        segs.insert(i + 1, tail)
        if r.sent_prev is not None or self.sent_first is r:
            nxt = r.sent_next
            tail.sent_prev = r
            tail.sent_next = nxt
            r.sent_next = tail
            if nxt is None:
                self.sent_last = tail
            else:
                nxt.sent_prev = tail

    def first_lost(self, hint: int) -> tuple[int, int]:
        """Position of the first record at or after offset ``hint`` that is lost and neither
        SACKed nor retransmitted (``len(self)`` if none), and the hint for the next search
        (Linux tcp_xmit_retransmit_queue's retransmit_skb_hint)."""
        segs = self._segs
        head = self._head
        n = len(segs)
        i = bisect_right(segs, hint, head, n, key=_END)
        while i < n:
            r = segs[i]
            if r.lost and not r.retrans and not r.sacked:
                return i - head, r.start
            i += 1
        return n - head, segs[n - 1].end if n > head else hint

    def split_refused(self, index: int, wmem_queued: int, sndbuf: int) -> bool:
        """Linux tcp_fragment's memory check: with half of sk_wmem_queued over sk_sndbuf plus
        the allowance, only the first and the last record may still be split, so that a peer
        cannot cut the queue into tiny pieces without bound (CVE-2019-11478)."""
        return (0 < index < len(self._segs) - self._head - 1
                and (wmem_queued >> 1) > sndbuf + FRAGMENT_ALLOWANCE)
