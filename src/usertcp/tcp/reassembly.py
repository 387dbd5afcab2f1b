"""Receiver out-of-order queue (RFC 9293 §3.10.7.4 "segment text") with SACK blocks (RFC 2018).

Segments that arrive beyond RCV.NXT are kept here until the hole before them is filled.
Data is never copied: the queue holds ``memoryview`` slices of the caller's buffers.
Overlaps are resolved in favour of bytes already held (as Linux's tcp_data_queue_ofo()
does), so a retransmission can never change data we have.

Sequence numbers wrap: internally every sequence number is mapped to an unbounded
integer relative to an anchor that follows RCV.NXT, so ordering stays exact across 2**32.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right

from usertcp.tcp.memory import MemAccount
from usertcp.tcp.seq import SEQ_MASK, seq_diff

# What a held chunk costs the stack beyond its bytes (its view and the packet's header;
# RecvBuffer's RX_CHUNK_OVERHEAD): the queue is charged to the stack's account (issue 20).
OOO_CHUNK_OVERHEAD = 256

__all__ = ["ReassemblyQueue"]


class ReassemblyQueue:
    """Disjoint, sorted chunks beyond RCV.NXT, plus an optional out-of-order FIN."""

    __slots__ = (
        "_anchor_abs",
        "_anchor_seq",
        "_bytes",
        "_charged",
        "_clock",
        "_data",
        "_ends",
        "_fin",
        "_fin_stamp",
        "_stamps",
        "_starts",
        "acct",
        "max_bytes",
        "max_segments",
    )

    def __init__(self, *, max_segments: int = 1024, max_bytes: int = 4 << 20,
                 acct: MemAccount | None = None) -> None:
        self.acct = acct            # the stack's buffer account (Linux charges ofo skbs too)
        self._charged = 0
        self.max_segments = max_segments
        self.max_bytes = max_bytes
        self._starts: list[int] = []  # absolute start of each chunk, ascending
        self._ends: list[int] = []  # absolute end (exclusive), ascending, disjoint
        self._data: list[memoryview] = []
        self._stamps: list[int] = []  # arrival order, for RFC 2018 §4 block ordering
        self._fin: int | None = None  # absolute sequence number occupied by the FIN
        self._fin_stamp = 0
        self._bytes = 0
        self._clock = 0
        self._anchor_seq = 0
        self._anchor_abs = 0

    # -- sequence mapping ----------------------------------------------------------------

    def held_bytes(self) -> int:
        """The bytes of every held chunk, recounted (``bytes_queued`` keeps the running sum)."""
        return sum(len(x) for x in self._data)

    def first_offset_from(self, rcv_nxt: int) -> int | None:
        """How far the first held chunk starts beyond the 32-bit ``rcv_nxt``; None if empty."""
        if not self._starts:
            return None
        return self._starts[0] - self._abs(rcv_nxt)

    def _abs(self, seq: int) -> int:
        return self._anchor_abs + seq_diff(seq, self._anchor_seq)

    def _seq(self, a: int) -> int:
        return (self._anchor_seq + (a - self._anchor_abs)) & SEQ_MASK

    def _reanchor(self, rcv_nxt: int) -> int:
        """Move the anchor to rcv_nxt (keeps every stored offset < 2**31); return its abs."""
        if self.empty:
            self._anchor_seq = rcv_nxt & SEQ_MASK
            self._anchor_abs = 0
            return 0
        a = self._abs(rcv_nxt)
        self._anchor_seq = rcv_nxt & SEQ_MASK
        self._anchor_abs = a
        return a

    # -- queries -----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._data)

    @property
    def bytes_queued(self) -> int:
        return self._bytes

    @property
    def empty(self) -> bool:
        return not self._data and self._fin is None

    @property
    def highest_seq(self) -> int | None:
        """Sequence number just past the highest byte held (a queued FIN counts as one)."""
        if self._fin is not None:
            return self._seq(self._fin + 1)
        if self._ends:
            return self._seq(self._ends[-1])
        return None

    def clear(self) -> None:
        self._starts.clear()
        self._ends.clear()
        self._data.clear()
        self._stamps.clear()
        self._fin = None
        self._bytes = 0
        self._recharge()

    def _recharge(self) -> None:
        """Keep the stack's account equal to what the queue holds (bytes and chunks)."""
        if self.acct is not None:
            cost = self._bytes + len(self._data) * OOO_CHUNK_OVERHEAD
            self.acct.add(cost - self._charged)
            self._charged = cost

    def duplicate_span(self, seq: int, length: int) -> tuple[int, int] | None:
        """The bytes of a new segment ``[seq, seq+length)`` already held, as offsets from
        ``seq``: the first overlap, extended by the next ones while they touch it (Linux
        tcp_data_queue_ofo's tcp_dsack_set/tcp_dsack_extend: the D-SACK block, RFC 2883).
        None when nothing overlaps."""
        if not self._starts or length <= 0:
            return None
        a = self._abs(seq)
        b = a + length
        span: tuple[int, int] | None = None
        i = bisect_right(self._ends, a)
        while i < len(self._starts) and self._starts[i] < b:
            lo, hi = max(self._starts[i], a), min(self._ends[i], b)
            if span is None:
                span = (lo, hi)
            elif lo <= span[1]:
                span = (span[0], max(span[1], hi))
            else:
                break
            i += 1
        return None if span is None else (span[0] - a, span[1] - a)

    # -- insertion ---------------------------------------------------------------------

    def add(self, seq: int, data: memoryview, fin: bool, rcv_nxt: int) -> bool:
        """Queue an out-of-order segment; False (nothing stored) if a limit would be exceeded.

        Bytes already held win over the new copy; only the gaps are stored, as slices of
        ``data``.  Anything at or before ``rcv_nxt`` is trimmed off.
        """
        base = self._reanchor(rcv_nxt)
        s = self._abs(seq)
        e = s + len(data)
        if e < base:
            return True  # entirely old (a duplicate): nothing to hold
        if s < base:  # partly received in order: RFC 9293 §3.10.7.4 trims to the window
            data = data[base - s :]
            s = base
        if self._fin is not None:
            # Nothing exists beyond a FIN; a second, different FIN is ignored.
            if e > self._fin:
                cut = max(self._fin - s, 0)
                data = data[:cut]
                e = s + cut
            if fin and e != self._fin:
                fin = False
        elif fin:
            fin_end = self._ends[-1] if self._ends else base
            if e < fin_end:  # a FIN inside data we hold is inconsistent: drop the FIN
                fin = False

        # Gaps of [s, e) not covered by stored chunks.
        pieces: list[tuple[int, int]] = []
        touched = -1
        if e > s:
            i = bisect_right(self._ends, s)
            cur = s
            while i < len(self._starts) and self._starts[i] < e:
                if touched < 0:
                    touched = i
                if self._starts[i] > cur:
                    pieces.append((cur, self._starts[i]))
                cur = max(cur, self._ends[i])
                i += 1
            if cur < e:
                pieces.append((cur, e))

        new_bytes = sum(b - a for a, b in pieces)
        if len(self._data) + len(pieces) > self.max_segments or self._bytes + new_bytes > self.max_bytes:
            return False  # caller counts TcpExtTCPOFODrop

        self._clock += 1
        stamp = self._clock
        for a, b in pieces:
            j = bisect_left(self._starts, a)
            self._starts.insert(j, a)
            self._ends.insert(j, b)
            self._data.insert(j, data[a - s : b - s])
            self._stamps.insert(j, stamp)
        self._bytes += new_bytes
        self._recharge()
        if not pieces and touched >= 0:
            # Pure duplicate: its block still becomes the most recent one (Linux
            # tcp_sack_new_ofo_skb() is called for it too).
            self._stamps[touched] = stamp
        if fin:
            self._fin = e
            self._fin_stamp = stamp
        return True

    # -- delivery ----------------------------------------------------------------------

    def pop_ready(self, rcv_nxt: int) -> tuple[list[memoryview], int, bool]:
        """Remove what is now contiguous with rcv_nxt.

        Returns (chunks, new rcv_nxt, fin) where a FIN that became in order is included
        in the returned rcv_nxt (it occupies one sequence number, RFC 9293 §3.4).
        """
        if self.empty:
            return [], rcv_nxt, False
        base = self._reanchor(rcv_nxt)
        cur = base
        out: list[memoryview] = []
        n = 0
        freed = 0
        while n < len(self._starts) and self._starts[n] <= cur:
            st, en, mv = self._starts[n], self._ends[n], self._data[n]
            if en > cur:
                out.append(mv[cur - st :])
                cur = en
            freed += en - st
            n += 1
        if n:
            del self._starts[:n], self._ends[:n], self._data[:n], self._stamps[:n]
            self._bytes -= freed
            self._recharge()
        fin = False
        if self._fin is not None and self._fin <= cur:
            if self._fin == cur:
                fin = True
                cur += 1
            self._fin = None
            if fin:
                self.clear()  # nothing can follow a FIN
        return out, (rcv_nxt + (cur - base)) & SEQ_MASK, fin

    # -- SACK ----------------------------------------------------------------------------

    def sack_blocks(self, max_blocks: int = 4) -> list[tuple[int, int]]:
        """Maximal contiguous ranges held, most recently updated first (RFC 2018 §4).

        Each block is (left edge, right edge) in sequence space; a queued FIN is part of
        the range it ends (Linux SACKs end_seq including FIN).
        """
        blocks: list[tuple[int, int, int]] = []  # (stamp, start, end)
        for st, en, sp in zip(self._starts, self._ends, self._stamps, strict=True):
            if blocks and blocks[-1][2] == st:
                ps, pst, _ = blocks[-1]
                blocks[-1] = (max(ps, sp), pst, en)
            else:
                blocks.append((sp, st, en))
        if self._fin is not None:
            if blocks and blocks[-1][2] == self._fin:
                ps, pst, pen = blocks[-1]
                blocks[-1] = (max(ps, self._fin_stamp), pst, pen + 1)
            else:
                blocks.append((self._fin_stamp, self._fin, self._fin + 1))
        # Only the few most recent are wanted: nlargest instead of sorting every block on every
        # ACK (a queue of 1024 tiny segments made the sort the dominant cost).
        recent = heapq.nlargest(max_blocks, blocks, key=lambda b: b[0])
        return [(self._seq(st), self._seq(en)) for _, st, en in recent]
