"""Send and receive buffers that hold references to byte chunks, not copies.

The send buffer keeps every unacknowledged byte by reference (an application
``bytes`` object or a payload-object view), so segments are built as memoryview
slices of it. The receive buffer keeps the memoryviews the segments arrived in.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from typing import Final

from usertcp.tcp.memory import MemAccount
from usertcp.wire.segment import Buffer

__all__ = ["MAX_SKB_FRAGS", "PAGE_SIZE", "RX_CHUNK_OVERHEAD", "SKB_TRUESIZE_OVERHEAD", "MemAccount",
           "RecvBuffer", "SendBuffer", "truesize"]

# Linux MAX_SKB_FRAGS (CONFIG_MAX_SKB_FRAGS default 17) and the page a zerocopy frag pins.
MAX_SKB_FRAGS: Final = 17
PAGE_SIZE: Final = 4096


# Linux skb->truesize of an empty skb from tcp_stream_alloc_skb(): SKB_TRUESIZE() of a
# kmalloc-1024 head for MAX_TCP_HEADER (320) = 704 + sk_buff (256) + skb_shared_info (320).
# Copied payload adds its own length (page fragments), so sk_wmem_queued = bytes + this per skb.
SKB_TRUESIZE_OVERHEAD: Final = 1280
# Control-block flags of one skb (Linux TCP_SKB_CB(skb)->tcp_flags & TCPHDR_PSH, ->eor).
SKB_PSH: Final = 1          # tcp_mark_push(): the segment that ends this skb carries PSH
SKB_EOR: Final = 2          # MSG_EOR: no later byte joins this skb (tcp_skb_can_collapse_to)
SKB_FRAGS_FULL = 4   # MAX_SKB_FRAGS zerocopy frags: nothing more fits (skb_zerocopy_iter_stream, skb_shift)
# What closes an skb to later bytes, written or pulled in by tcp_grow_skb().
_SKB_CLOSED: Final = SKB_EOR | SKB_FRAGS_FULL


class SendBuffer:
    """Stream bytes from ``start`` (oldest unacknowledged) to ``end`` (last written).

    Offsets are 0-based stream offsets (the first data byte is 0), unbounded ints.

    Besides the bytes it keeps the layout Linux gives them in skbs (start offsets of each
    skb still holding unacknowledged bytes), because the send-buffer limit counts every
    skb's overhead (``wmem_queued``, Linux sk_wmem_queued): skbs are opened by writes
    (tcp_sendmsg_locked, up to the size goal) and split where a transmission stops inside
    one (tso_fragment / tcp_fragment); an ACK frees the skbs it covers entirely.
    Each skb also keeps its PSH and EOR marks; a split hands them to the tail piece, as
    tcp_fragment() does ("PSH and FIN should only be set in the second packet",
    tcp_skb_fragment_eor()).
    """

    __slots__ = ("_bufs", "_fence_ends", "_head", "_offs", "_sent", "_skb", "_skb_head", "_skf", "acct",
                 "end", "start", "tail_frags")

    def __init__(self, acct: MemAccount | None = None) -> None:
        self.acct = acct
        self._offs: list[int] = []
        self._bufs: list[memoryview] = []
        self._head = 0
        self._skb: list[int] = []      # start offset of each skb, ascending
        self._skf: list[int] = []      # SKB_PSH | SKB_EOR of each skb (parallel to _skb)
        # End offsets of the skbs closed to later bytes (MSG_EOR, frags exhausted); splits
        # never move them.
        self._fence_ends: list[int] = []
        self.tail_frags = 0            # zerocopy frags (pinned pages) of the last skb
        self._skb_head = 0             # first skb with unacknowledged bytes
        self._sent = 0                 # highest offset ever transmitted
        self.start = 0
        self.end = 0

    def __len__(self) -> int:
        return self.end - self.start

    # ------------------------------------------------------------ skb accounting

    @property
    def skb_count(self) -> int:
        return len(self._skb) - self._skb_head

    @property
    def wmem_queued(self) -> int:
        """Linux sk_wmem_queued: queued bytes plus each skb's truesize overhead."""
        return self.end - self.start + (len(self._skb) - self._skb_head) * SKB_TRUESIZE_OVERHEAD

    def skb_starts(self) -> list[int]:
        """Start offsets of the skbs holding unacknowledged bytes (the first may be trimmed)."""
        return self._skb[self._skb_head:]

    def tail_room(self, size_goal: int) -> int:
        """Bytes a write may still add to the last skb: it must be unsent (still in the
        write queue, tcp_write_queue_tail) and shorter than the size goal."""
        if len(self._skb) == self._skb_head or self._skb[-1] < self._sent or self._skf[-1] & _SKB_CLOSED:
            return 0
        return max(size_goal - (self.end - self._skb[-1]), 0)

    def tail_len(self) -> int:
        """Bytes of the last skb (0 without one)."""
        return self.end - self._skb[-1] if len(self._skb) > self._skb_head else 0

    def tail_is_send_head(self) -> bool:
        """The last skb is the first unsent one (Linux skb == tcp_send_head(sk))."""
        return len(self._skb) > self._skb_head and self._skb[-1] == self._sent < self.end

    def room(self, size_goal: int, sndbuf: int) -> int:
        """Bytes one write could queue now (tcp_sendmsg_locked without transmissions): fill
        the tail skb, then open skbs of ``size_goal`` while sk_stream_memory_free()."""
        # Inlined tail_room() and wmem_queued: applications poll this after every event.
        skb = self._skb
        live = len(skb) - self._skb_head
        room = 0
        if live and skb[-1] >= self._sent and not self._skf[-1] & _SKB_CLOSED:
            room = size_goal - (self.end - skb[-1])
            if room < 0:
                room = 0
        q = self.end - self.start + live * SKB_TRUESIZE_OVERHEAD + room
        if q < sndbuf:
            room += -(-(sndbuf - q) // (size_goal + SKB_TRUESIZE_OVERHEAD)) * size_goal
        return room

    def mark_sent(self, upto: int, chunk: int) -> None:
        """New data up to ``upto`` was transmitted, in bursts of at most ``chunk`` bytes per
        skb (the TSO size): split each skb where a burst ends inside it (tso_fragment)."""
        upto = min(upto, self.end)
        pos = max(self._sent, self.start)
        if upto <= pos:
            return
        self._sent = upto
        skb = self._skb
        i = bisect_right(skb, pos, self._skb_head) - 1
        if i < self._skb_head:
            return
        if skb[i] != pos:
            self._cut(i, pos)
            i += 1
        chunk = max(chunk, 1)
        while pos < upto:
            e = skb[i + 1] if i + 1 < len(skb) else self.end
            cut = min(e, upto, pos + chunk)
            if cut < e:
                self._cut(i, cut)
            i += 1
            pos = cut

    def _cut(self, i: int, at: int) -> None:
        """Split skb ``i`` at ``at``: the new tail piece takes its PSH/EOR marks."""
        self._skb.insert(i + 1, at)
        self._skf.insert(i + 1, self._skf[i])
        self._skf[i] = 0

    def split(self, off: int) -> None:
        """Cut the sent skb holding ``off`` there (tcp_fragment on a partial retransmission)."""
        if self.start < off < min(self._sent, self.end):
            i = bisect_right(self._skb, off, self._skb_head) - 1
            if i >= self._skb_head and self._skb[i] != off:
                self._cut(i, off)

    def skb_end(self, off: int) -> int:
        """End offset of the skb holding ``off`` (where a packet built from it must stop)."""
        skb = self._skb
        i = bisect_right(skb, off, self._skb_head)
        return skb[i] if i < len(skb) else self.end

    def collapse_end(self, off: int) -> int:
        """How far a packet starting at ``off`` may reach: Linux tcp_grow_skb() pulls the
        next skbs into the one being sent while tcp_skb_can_collapse() allows, that is up
        to the end of an skb written with MSG_EOR, or of one whose frags are exhausted
        (skb_shift() fails), or the last queued byte."""
        ends = self._fence_ends
        i = bisect_right(ends, off)
        return ends[i] if i < len(ends) else self.end

    def packet_flags(self, start: int, end: int) -> int:
        """The marks a packet [start, end) takes once sent (send_packet): those of every skb
        it covers whole; a partly covered skb keeps its own (tcp_fragment)."""
        skb, skf = self._skb, self._skf
        i = bisect_right(skb, start, self._skb_head) - 1
        if i < self._skb_head:
            i = self._skb_head
        n = len(skb)
        flags = 0
        while i < n and skb[i] < end:
            e = skb[i + 1] if i + 1 < n else self.end
            if max(skb[i], self.start) >= start and e <= end:    # a trimmed head counts whole
                flags |= skf[i]
            i += 1
        return flags

    def send_packet(self, start: int, end: int) -> None:
        """[start, end) left as one packet: it becomes one sent skb, the skbs it covers
        merged into it (tcp_grow_skb) and the skb it ends in cut there (tso_fragment)."""
        skb, skf = self._skb, self._skf
        i = bisect_right(skb, start, self._skb_head) - 1
        if i < self._skb_head:
            return
        if skb[i] != start:
            self._cut(i, start)
            i += 1
        flags = skf[i]
        j = i + 1
        while j < len(skb) and skb[j] < end:
            e = skb[j + 1] if j + 1 < len(skb) else self.end
            if e <= end:
                flags |= skf[j]
                j += 1
            else:
                break
        if j < len(skb) and skb[j] < end:
            skb[j] = end                   # skb_shift(): the partly pulled skb now starts at end
            del skb[i + 1:j]
            del skf[i + 1:j]
        else:
            del skb[i + 1:j]
            del skf[i + 1:j]
            e = skb[i + 1] if i + 1 < len(skb) else self.end
            if end < e:
                skb.insert(i + 1, end)     # tso_fragment: the rest keeps the marks
                skf.insert(i + 1, flags)
                flags = 0
        skf[i] = flags
        if self._sent < end:
            self._sent = end

    def skb_flags(self, off: int) -> int:
        """SKB_PSH / SKB_EOR of the skb holding ``off`` (0 past the queued bytes)."""
        i = bisect_right(self._skb, off, self._skb_head) - 1
        return self._skf[i] if i >= self._skb_head and off < self.end else 0

    def mark_push(self) -> None:
        """Linux tcp_mark_push(): PSH on the last skb (the end of a write, or forced_push)."""
        if len(self._skb) > self._skb_head:
            self._skf[-1] |= SKB_PSH

    def clear_push(self) -> None:
        """A new write appends to the unsent last skb: its PSH mark waits for the new end."""
        if len(self._skb) > self._skb_head:
            self._skf[-1] &= ~SKB_PSH

    def mark_eor(self) -> None:
        """MSG_EOR (tcp_sendmsg_locked: TCP_SKB_CB(skb)->eor = 1): close the last skb."""
        if len(self._skb) > self._skb_head:
            self._skf[-1] |= SKB_EOR
            self._fence()

    def tail_frags_full(self) -> bool:
        """The unsent last skb holds MAX_SKB_FRAGS frags: a write that would add to it marks it
        PSH and opens another (tcp_sendmsg_locked on -EMSGSIZE, or i >= sysctl_max_skb_frags)."""
        return (len(self._skb) > self._skb_head and self._skb[-1] >= self._sent
                and bool(self._skf[-1] & SKB_FRAGS_FULL))

    def _fence(self) -> None:
        if not self._fence_ends or self._fence_ends[-1] != self.end:
            self._fence_ends.append(self.end)

    # -------------------------------------------------------------------- bytes

    def append(self, data: Buffer, new_skb: bool = False, frags: int = 0) -> None:
        """Keep ``data`` by reference; the caller hands over an immutable buffer.

        The bytes extend the last skb unless ``new_skb`` or that skb was already sent;
        ``frags`` zerocopy frags come with them (MAX_SKB_FRAGS close the skb)."""
        n = len(data)
        if not n:
            return
        if (new_skb or len(self._skb) == self._skb_head or self._skb[-1] < self._sent
                or self._skf[-1] & _SKB_CLOSED):
            self._skb.append(self.end)
            self._skf.append(0)
            self.tail_frags = 0
        self._offs.append(self.end)
        self._bufs.append(data if isinstance(data, memoryview) else memoryview(data))
        self.end += n
        if frags:
            self.tail_frags += frags
            if self.tail_frags >= MAX_SKB_FRAGS:
                self._skf[-1] |= SKB_FRAGS_FULL
                self._fence()
        if self.acct is not None:
            self.acct.add(n)

    def views(self, offset: int, length: int) -> list[memoryview]:
        """The bytes [offset, offset+length) as slices of the stored chunks."""
        if offset < self.start or offset + length > self.end:
            raise ValueError(f"range {offset}+{length} outside {self.start}..{self.end}")
        out: list[memoryview] = []
        i = bisect_right(self._offs, offset, self._head) - 1
        offs, bufs = self._offs, self._bufs
        while length > 0:
            buf = bufs[i]
            skip = offset - offs[i]
            take = min(length, len(buf) - skip)
            out.append(buf[skip:skip + take] if skip or take != len(buf) else buf)
            offset += take
            length -= take
            i += 1
        return out

    def release(self, upto: int) -> None:
        """Forget every byte before stream offset ``upto`` (it was acknowledged)."""
        if upto <= self.start:
            return
        upto = min(upto, self.end)
        if self.acct is not None:
            self.acct.used -= upto - self.start
        offs, bufs = self._offs, self._bufs
        head = self._head
        n = len(offs)
        while head < n and offs[head] + len(bufs[head]) <= upto:
            bufs[head] = memoryview(b"")   # drop the reference now
            head += 1
        self._head = head
        self.start = upto
        if head > 64 and head * 2 > n:
            del offs[:head]
            del bufs[:head]
            self._head = 0
        # Free the skbs the ACK covers entirely; a partly acknowledged one is trimmed
        # (tcp_trim_head), which only its byte count shows.
        skb = self._skb
        sh = self._skb_head
        if self._fence_ends:
            del self._fence_ends[:bisect_right(self._fence_ends, upto)]
        if upto >= self.end:
            skb.clear()
            self._skf.clear()
            sh = 0
        else:
            while sh + 1 < len(skb) and skb[sh + 1] <= upto:
                sh += 1
            if sh > 64 and sh * 2 > len(skb):
                del skb[:sh]
                del self._skf[:sh]
                sh = 0
        self._skb_head = sh
        if self._sent < upto:
            self._sent = upto


# What one kept segment costs beyond the packet buffer it keeps alive: the memoryview
# object and the bytes object's header (sys.getsizeof: 184 + 33, rounded up), the part of
# Linux's skb->truesize that is not data.
RX_CHUNK_OVERHEAD: Final = 256
# Linux tcp_collapse: once this many small segments (each costing over twice its payload)
# sit in a row at the tail, their bytes are copied into one compact buffer.
COLLAPSE_AFTER: Final = 32


def truesize(data: memoryview) -> int:
    """Memory a received chunk keeps alive (Linux skb->truesize): the whole packet buffer it
    is a view of, plus the objects around it; not just its payload bytes."""
    base = data.obj
    n = len(base) if isinstance(base, (bytes, bytearray)) else data.nbytes
    return n + RX_CHUNK_OVERHEAD


class RecvBuffer:
    """In-order received bytes not yet read, as the memoryviews they arrived in.

    The stack's account is charged each chunk's truesize, not its length (Linux charges
    sk_rmem_alloc with skb->truesize, tcp_try_rmem_schedule): a 1-byte segment keeps a whole
    packet buffer alive. Runs of small segments are collapsed into one buffer (tcp_collapse,
    counted as TcpExtTCPRcvCollapsed), which gives most of that memory back.

    Once receive timestamps are on (:meth:`enable_stamps`: SO_TIMESTAMP, SO_TIMESTAMPNS or
    SOF_TIMESTAMPING_RX_SOFTWARE, Linux net_enable_timestamp), each chunk keeps its arrival
    time (skb->tstamp) and a read leaves in ``last_stamp`` that of the last chunk it took
    bytes from (tcp_update_recv_tstamps); chunks queued before have none (-1)."""

    __slots__ = ("_chunks", "_costs", "_small", "_stamps", "acct", "charged", "last_stamp", "size")

    def __init__(self, acct: MemAccount | None = None) -> None:
        self._chunks: deque[memoryview] = deque()
        self._costs: deque[int] = deque()      # the truesize charged for each chunk
        self._small = 0                        # small chunks in a row at the tail
        self._stamps: deque[float] | None = None   # arrival time of each chunk, when asked for
        self.last_stamp = -1.0                 # of the last chunk the last read took from
        self.size = 0
        self.charged = 0
        self.acct = acct

    def enable_stamps(self) -> None:
        """Keep arrival times from now on (chunks already queued have none)."""
        if self._stamps is None:
            self._stamps = deque([-1.0] * len(self._chunks))

    def __len__(self) -> int:
        return self.size

    def append(self, data: memoryview, now: float = -1.0) -> None:
        """Queue an in-order chunk that arrived at ``now`` (its receive timestamp)."""
        n = len(data)
        if not n:
            return
        cost = truesize(data)
        self._chunks.append(data)
        self._costs.append(cost)
        if self._stamps is not None:
            self._stamps.append(now)
        self.size += n
        self._charge(cost)
        if cost > 2 * n:
            self._small += 1
            if self._small >= COLLAPSE_AFTER:
                self._collapse_tail(self._small)
        else:
            self._small = 0

    def _charge(self, cost: int) -> None:
        self.charged += cost
        if self.acct is not None:
            self.acct.add(cost)

    def _collapse_tail(self, count: int) -> None:
        """Copy the last ``count`` chunks into one buffer (Linux tcp_collapse)."""
        chunks, costs = self._chunks, self._costs
        parts = [chunks.pop() for _ in range(count)]
        freed = sum(costs.pop() for _ in range(count))
        parts.reverse()
        merged = memoryview(b"".join(parts))
        chunks.append(merged)
        stamps = self._stamps
        if stamps is not None:             # the collapsed skb keeps the first one's header
            first = -1.0
            for _ in range(count):
                first = stamps.pop()
            stamps.append(first)
        cost = truesize(merged)
        costs.append(cost)
        # Still small (tiny segments): it joins the next run, so runs grow until their bytes
        # outweigh one buffer's overhead instead of staying RX_CHUNK_OVERHEAD per 32 bytes.
        self._small = 1 if cost > 2 * len(merged) else 0
        self._uncharge(freed - cost)
        if self.acct is not None and self.acct.mib is not None:
            self.acct.mib["TcpExtTCPRcvCollapsed"] += count

    def _uncharge(self, cost: int) -> None:
        self.charged -= cost
        if self.acct is not None:
            self.acct.used -= cost

    def _pop_head(self) -> memoryview:
        """The head chunk was consumed entirely: its whole truesize is freed."""
        self._uncharge(self._costs.popleft())
        if self._stamps is not None:
            self.last_stamp = self._stamps.popleft()
        if len(self._chunks) == 1:
            self._small = 0
        return self._chunks.popleft()

    def detach_account(self) -> None:
        """Give everything charged back to the stack and stop charging (socket closed)."""
        if self.acct is not None:
            self.acct.used -= self.charged
            self.acct = None

    def read(self, n: int) -> bytes:
        """Copy out and consume up to ``n`` bytes."""
        self.last_stamp = -1.0
        if n >= self.size:
            out = b"".join(self._chunks)
            self._chunks.clear()
            self._costs.clear()
            if self._stamps:
                self.last_stamp = self._stamps[-1]
                self._stamps.clear()
            self._small = 0
            self._uncharge(self.charged)
            self.size = 0
            return out
        parts: list[memoryview] = []
        chunks = self._chunks
        need = n
        while need:
            c = chunks[0]
            if len(c) <= need:
                parts.append(self._pop_head())
                need -= len(c)
            else:
                parts.append(c[:need])
                chunks[0] = c[need:]
                need = 0
                self._note_partial()
        self.size -= n
        return b"".join(parts)

    def _note_partial(self) -> None:
        """The head chunk was read in part: its stamp is the read's (tcp_recvmsg)."""
        if self._stamps:
            self.last_stamp = self._stamps[0]

    def read_into(self, target: memoryview) -> int:
        self.last_stamp = -1.0
        n = min(len(target), self.size)
        pos = 0
        chunks = self._chunks
        while pos < n:
            c = chunks[0]
            take = min(len(c), n - pos)
            target[pos:pos + take] = c[:take]
            pos += take
            if take == len(c):
                self._pop_head()
            else:
                chunks[0] = c[take:]
                self._note_partial()
        self.size -= n
        return n

    def peek(self, offset: int, length: int) -> bytes:
        """The bytes [offset, offset+length) left queued (MSG_PEEK); ``last_stamp`` is that of
        the last chunk they come from, as a read's."""
        self.last_stamp = -1.0
        stamps = self._stamps
        if stamps and length > 0:
            pos = 0
            for i, c in enumerate(self._chunks):
                pos += len(c)
                if pos >= offset + length:
                    self.last_stamp = stamps[i]
                    break
        return b"".join(self.views(offset, length))

    def views(self, offset: int, length: int) -> list[memoryview]:
        """References to [offset, offset+length) of the unread bytes, no copy."""
        if offset < 0 or length < 0 or offset + length > self.size:
            raise ValueError("range outside the received bytes")
        out: list[memoryview] = []
        pos = 0
        for c in self._chunks:
            if length <= 0:
                break
            end = pos + len(c)
            if end > offset:
                lo = max(offset - pos, 0)
                take = min(len(c) - lo, length)
                out.append(c[lo:lo + take] if lo or take != len(c) else c)
                offset += take
                length -= take
            pos = end
        return out

    def discard(self, n: int) -> None:
        self.last_stamp = -1.0
        n = min(n, self.size)
        chunks = self._chunks
        left = n
        while left:
            c = chunks[0]
            if len(c) <= left:
                self._pop_head()
                left -= len(c)
            else:
                chunks[0] = c[left:]
                left = 0
        self.size -= n

    def chunks(self) -> deque[memoryview]:
        return self._chunks
