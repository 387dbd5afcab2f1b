"""Receiver out-of-order queue (RFC 9293 §3.10.7.4 "segment text") with SACK blocks (RFC 2018).

Segments that arrive beyond RCV.NXT are kept here until the hole before them is filled.
Data is never copied: the queue holds ``memoryview`` slices of the caller's buffers.
Overlaps are resolved in favour of bytes already held (as Linux's tcp_data_queue_ofo()
does), so a retransmission can never change data we have.

Sequence numbers wrap: internally every sequence number is mapped to an unbounded
integer relative to an anchor that follows RCV.NXT, so ordering stays exact across 2**32.

Memory (issue 20): each held chunk is charged to the stack's account at its truesize, as
Linux charges an out-of-order skb's ``skb->truesize`` (tcp_try_rmem_schedule). For our
buffers that is ``buffers.truesize``: the whole packet buffer the chunk's view keeps alive
plus the view and buffer objects (RX_CHUNK_OVERHEAD), so a 1-byte segment costs what its
packet costs, not 1 byte. Under memory pressure the queue is collapsed (contiguous chunks
copied into one buffer, tcp_collapse_ofo_queue) and pruned from its highest sequence
downward (tcp_prune_ofo_queue): see tcp/prune.py.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right

from usertcp.tcp.buffers import COLLAPSE_AFTER, truesize
from usertcp.tcp.memory import MemAccount
from usertcp.tcp.seq import SEQ_MASK, seq_diff

__all__ = ["ReassemblyQueue"]


class ReassemblyQueue:
    """Disjoint, sorted chunks beyond RCV.NXT, plus an optional out-of-order FIN."""

    __slots__ = (
        "_anchor_abs",
        "_anchor_seq",
        "_bytes",
        "_charged",
        "_clock",
        "_costs",
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
        self._costs: list[int] = []   # the truesize charged for each chunk
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

    @property
    def truesize(self) -> int:
        """What the queue costs the stack: the truesize of every held chunk."""
        return self._charged

    def clear(self) -> None:
        self._starts.clear()
        self._ends.clear()
        self._data.clear()
        self._costs.clear()
        self._stamps.clear()
        self._fin = None
        self._bytes = 0
        self._recharge(-self._charged)

    def _recharge(self, delta: int) -> None:
        """Charge (or give back) ``delta`` bytes of truesize to the stack's account."""
        self._charged += delta
        if self.acct is not None:
            self.acct.add(delta)

    def drop_last(self, seq: int, rcv_nxt: int) -> int:
        """Drop the highest held chunk if it starts at or above ``seq`` (Linux
        tcp_prune_ofo_queue stops where the incoming segment would land last); a queued FIN
        goes with it. Returns the truesize freed, or -1 if nothing may be dropped."""
        base = self._reanchor(rcv_nxt)
        floor = base + seq_diff(seq, rcv_nxt)
        if not self._starts:
            if self._fin is None or self._fin < floor:
                return -1
            self._fin = None
            return 0
        if self._starts[-1] < floor:
            return -1
        start = self._starts.pop()
        self._bytes -= self._ends.pop() - start
        self._data.pop()
        self._stamps.pop()
        cost = self._costs.pop()
        self._fin = None
        self._recharge(-cost)
        return cost

    def collapse(self) -> int:
        """Copy each run of two or more contiguous chunks into one buffer (Linux
        tcp_collapse_ofo_queue), which frees the packet buffers they kept alive. Returns the
        number of chunks collapsed (TcpExtTCPRcvCollapsed)."""
        starts, ends = self._starts, self._ends
        collapsed = 0
        i = 0
        while i < len(starts):
            j = i
            while j + 1 < len(starts) and starts[j + 1] == ends[j]:
                j += 1
            if j > i:
                self._merge(i, j)
                collapsed += j - i + 1
            i += 1
        return collapsed

    def _merge(self, i: int, j: int) -> None:
        """Copy the contiguous chunks ``i..j`` into one buffer: the packet buffers they kept
        alive are freed, the block keeps its most recent arrival stamp."""
        starts, ends = self._starts, self._ends
        merged = memoryview(b"".join(self._data[i:j + 1]))
        cost = truesize(merged)
        freed = sum(self._costs[i:j + 1]) - cost
        stamp = max(self._stamps[i:j + 1])
        end = ends[j]
        del starts[i + 1:j + 1], ends[i:j], self._data[i + 1:j + 1]
        del self._costs[i + 1:j + 1], self._stamps[i + 1:j + 1]
        ends[i] = end
        self._data[i] = merged
        self._costs[i] = cost
        self._stamps[i] = stamp
        self._recharge(-freed)

    def _collapse_small_run(self, j: int) -> None:
        """Small segments as they arrive (Linux coalesces an out-of-order skb into the one
        before it, tcp_ooo_try_coalesce; tcp_collapse copies runs of small skbs): once
        COLLAPSE_AFTER contiguous chunks around chunk ``j`` each cost over twice their
        payload, as RecvBuffer does for in-order data, they are copied into one buffer. A peer
        sending tiny contiguous segments out of order then neither costs a packet buffer per
        byte nor runs into ``max_segments`` (TcpExtTCPRcvCollapsed)."""
        starts, ends, costs = self._starts, self._ends, self._costs
        if costs[j] <= 2 * (ends[j] - starts[j]):
            return
        k = j
        while k > 0 and starts[k] == ends[k - 1] and costs[k - 1] > 2 * (ends[k - 1] - starts[k - 1]):
            k -= 1
        m = j
        last = len(starts) - 1
        while m < last and starts[m + 1] == ends[m] and costs[m + 1] > 2 * (ends[m + 1] - starts[m + 1]):
            m += 1
        if m - k + 1 >= COLLAPSE_AFTER:
            self._merge(k, m)
            if self.acct is not None and self.acct.mib is not None:
                self.acct.mib["TcpExtTCPRcvCollapsed"] += m - k + 1

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

        pieces: list[tuple[int, int]] = []
        touched = self._gaps(s, e, pieces) if e > s else -1
        new_bytes = sum(b - a for a, b in pieces)
        if len(self._data) + len(pieces) > self.max_segments or self._bytes + new_bytes > self.max_bytes:
            return False  # caller counts TcpExtTCPOFODrop

        self._clock += 1
        stamp = self._clock
        charged = self._store(pieces, data, s, stamp)
        self._bytes += new_bytes
        if charged:
            self._recharge(charged)
            self._collapse_small_run(bisect_left(self._starts, pieces[-1][0]))
        if not pieces and touched >= 0:
            # Pure duplicate: its block still becomes the most recent one (Linux
            # tcp_sack_new_ofo_skb() is called for it too).
            self._stamps[touched] = stamp
        if fin:
            self._fin = e
            self._fin_stamp = stamp
        return True

    def _gaps(self, s: int, e: int, pieces: list[tuple[int, int]]) -> int:
        """Append to ``pieces`` the gaps of [s, e) (e > s) no stored chunk covers; return the
        index of the first stored chunk the range overlaps, -1 if none."""
        touched = -1
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
        return touched

    def _store(self, pieces: list[tuple[int, int]], data: memoryview, s: int, stamp: int) -> int:
        """Insert each gap of ``pieces`` as a slice of ``data`` (which starts at ``s``), in
        order, stamped ``stamp``; return the truesize charged for them."""
        charged = 0
        for a, b in pieces:
            j = bisect_left(self._starts, a)
            piece = data[a - s : b - s]
            # Each piece keeps its packet's buffer alive: charged its whole truesize.
            cost = truesize(piece)
            self._starts.insert(j, a)
            self._ends.insert(j, b)
            self._data.insert(j, piece)
            self._costs.insert(j, cost)
            self._stamps.insert(j, stamp)
            charged += cost
        return charged

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
            cost = sum(self._costs[:n])
            del self._starts[:n], self._ends[:n], self._data[:n], self._stamps[:n], self._costs[:n]
            self._bytes -= freed
            self._recharge(-cost)
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
