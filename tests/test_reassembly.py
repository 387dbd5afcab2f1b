"""ReassemblyQueue: out-of-order data, overlaps, FIN, SACK blocks, limits, wraparound."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from usertcp.tcp.reassembly import ReassemblyQueue
from usertcp.tcp.seq import SEQ_MASK, seq_add, seq_diff

WRAP = 1 << 32


def mv(b: bytes) -> memoryview:
    return memoryview(b)


def joined(chunks: list[memoryview]) -> bytes:
    return b"".join(bytes(c) for c in chunks)


def test_basic_out_of_order_then_fill() -> None:
    q = ReassemblyQueue()
    assert q.empty and len(q) == 0 and q.highest_seq is None
    assert q.add(110, mv(b"klmno"), False, 100)
    assert q.add(105, mv(b"fghij"), False, 100)
    assert len(q) == 2 and q.bytes_queued == 10 and q.highest_seq == 115
    assert q.pop_ready(100) == ([], 100, False)  # hole at 100..105
    chunks, nxt, fin = q.pop_ready(105)
    assert joined(chunks) == b"fghijklmno" and nxt == 115 and not fin
    assert q.empty and q.bytes_queued == 0


def test_overlap_keeps_existing_bytes_and_does_not_copy() -> None:
    q = ReassemblyQueue()
    first = bytearray(b"BBBB")
    assert q.add(104, memoryview(first), False, 100)
    assert q.add(102, mv(b"xxYYYYzz"), False, 100)  # overlaps both ends of [104, 108)
    assert len(q) == 3 and q.bytes_queued == 8
    first[0] = ord("Q")  # the queue holds views, not copies
    chunks, nxt, _ = q.pop_ready(102)
    assert joined(chunks) == b"xxQBBBzz" and nxt == 110
    assert all(isinstance(c, memoryview) for c in chunks)


def test_pop_trims_before_rcv_nxt() -> None:
    q = ReassemblyQueue()
    q.add(110, mv(b"0123456789"), False, 100)
    chunks, nxt, _ = q.pop_ready(114)  # caller delivered up to 114 in order meanwhile
    assert joined(chunks) == b"456789" and nxt == 120


def test_duplicate_is_accepted_without_storing() -> None:
    q = ReassemblyQueue()
    q.add(110, mv(b"abcdef"), False, 100)
    assert q.add(112, mv(b"cd"), False, 100)
    assert len(q) == 1 and q.bytes_queued == 6


def test_fin_out_of_order() -> None:
    q = ReassemblyQueue()
    assert q.add(110, mv(b"world"), True, 100)
    assert q.highest_seq == 116  # FIN occupies 115
    assert q.sack_blocks() == [(110, 116)]
    # Data claimed beyond the FIN is ignored.
    q.add(115, mv(b"junk"), False, 100)
    assert q.bytes_queued == 5
    chunks, nxt, fin = q.pop_ready(100)
    assert chunks == [] and not fin
    chunks, nxt, fin = q.pop_ready(110)
    assert joined(chunks) == b"world" and nxt == 116 and fin
    assert q.empty


def test_bare_fin_and_fin_exactly_at_rcv_nxt() -> None:
    q = ReassemblyQueue()
    assert q.add(120, mv(b""), True, 100)
    assert q.sack_blocks() == [(120, 121)] and len(q) == 0 and not q.empty
    q.add(100, mv(b"x" * 20), False, 100)  # fills the gap (caller may hand us in-order data)
    chunks, nxt, fin = q.pop_ready(100)
    assert len(joined(chunks)) == 20 and nxt == 121 and fin


def test_sack_block_order_rfc2018() -> None:
    q = ReassemblyQueue()
    q.add(200, mv(b"a" * 10), False, 100)  # A [200, 210)
    q.add(300, mv(b"b" * 10), False, 100)  # B [300, 310)
    q.add(400, mv(b"c" * 10), False, 100)  # C [400, 410)
    assert q.sack_blocks() == [(400, 410), (300, 310), (200, 210)]
    q.add(210, mv(b"a" * 5), False, 100)  # extends A: it becomes first, merged
    assert q.sack_blocks() == [(200, 215), (400, 410), (300, 310)]
    q.add(302, mv(b"b" * 3), False, 100)  # duplicate inside B still refreshes B
    assert q.sack_blocks()[0] == (300, 310)
    q.add(500, mv(b"d"), False, 100)
    q.add(600, mv(b"e"), False, 100)
    assert q.sack_blocks(max_blocks=3) == [(600, 601), (500, 501), (300, 310)]
    assert len(q.sack_blocks(max_blocks=4)) == 4
    q.add(215, mv(b"f" * 85), False, 100)  # bridges A and B
    assert q.sack_blocks(max_blocks=1) == [(200, 310)]


def test_limits_segments_and_bytes() -> None:
    q = ReassemblyQueue(max_segments=3, max_bytes=100)
    assert q.add(110, mv(b"a"), False, 100)
    assert q.add(120, mv(b"b"), False, 100)
    assert q.add(130, mv(b"c"), False, 100)
    assert not q.add(140, mv(b"d"), False, 100)
    # One segment bridging two gaps would need two new chunks: rejected whole.
    assert not q.add(111, mv(b"x" * 15), False, 100)
    assert len(q) == 3 and q.bytes_queued == 3
    assert q.add(120, mv(b"b"), False, 100)  # a pure duplicate needs no room
    assert q.sack_blocks() == [(120, 121), (130, 131), (110, 111)]


def test_limits_exact() -> None:
    q = ReassemblyQueue(max_segments=3, max_bytes=100)
    for s in (110, 120, 130):
        assert q.add(s, mv(b"z"), False, 100)
    assert not q.add(131, mv(b"c" * 50), True, 100)
    assert q.highest_seq == 131  # the refused FIN was not stored
    q2 = ReassemblyQueue(max_segments=10, max_bytes=10)
    assert q2.add(110, mv(b"x" * 10), False, 100)
    assert not q2.add(130, mv(b"y"), False, 100)
    assert q2.add(105, mv(b"x" * 10), False, 100) is False  # 5 new bytes would exceed
    q2.clear()
    assert q2.empty and q2.bytes_queued == 0 and len(q2) == 0


def test_wraparound() -> None:
    q = ReassemblyQueue()
    rcv_nxt = WRAP - 10
    assert q.add(WRAP - 4, mv(b"abcdefgh"), False, rcv_nxt)  # crosses 0
    assert q.add(4, mv(b"EFGH"), True, rcv_nxt)
    assert q.add(WRAP - 6, mv(b"XYab"), False, rcv_nxt)
    assert q.sack_blocks() == [(WRAP - 6, 9)]
    assert q.highest_seq == 9
    chunks, nxt, fin = q.pop_ready(rcv_nxt)
    assert chunks == [] and nxt == rcv_nxt
    chunks, nxt, fin = q.pop_ready(WRAP - 6)
    assert joined(chunks) == b"XYabcdefghEFGH"[:14] and nxt == 9 and fin


# --- property tests ------------------------------------------------------------------


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[int, bytes, list[tuple[int, int, bool]], bool]:
    n = draw(st.integers(1, 400))
    stream = bytes(draw(st.lists(st.integers(0, 255), min_size=n, max_size=n)))
    isn = draw(st.one_of(st.integers(0, SEQ_MASK), st.integers(WRAP - 500, SEQ_MASK)))
    with_fin = draw(st.booleans())
    # A partition guarantees coverage; extra random segments add overlaps and duplicates.
    cuts = sorted(set(draw(st.lists(st.integers(1, n - 1), max_size=30)) if n > 1 else []))
    bounds = [0, *cuts, n]
    segs = [(a, b, with_fin and b == n) for a, b in itertools.pairwise(bounds)]
    for _ in range(draw(st.integers(0, 20))):
        a = draw(st.integers(0, n - 1))
        b = draw(st.integers(a, n))
        segs.append((a, b, with_fin and b == n and draw(st.booleans())))
    order = draw(st.permutations(segs))
    return isn, stream, list(order), with_fin


def check_blocks(q: ReassemblyQueue, isn: int, held: set[int]) -> None:
    """SACK blocks are disjoint, maximal and cover exactly the held offsets."""
    blocks = q.sack_blocks(max_blocks=10_000)
    covered: set[int] = set()
    for left, right in blocks:
        lo = seq_diff(left, isn)
        hi = seq_diff(right, isn)
        assert lo < hi
        rng = set(range(lo, hi))
        assert not (rng & covered)
        covered |= rng
    assert covered == held
    # Maximal: no two blocks touch.
    edges = sorted((seq_diff(a, isn), seq_diff(b, isn)) for a, b in blocks)
    for (_, e1), (s2, _) in itertools.pairwise(edges):
        assert e1 < s2


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_reassembles_exact_stream(case: tuple[int, bytes, list[tuple[int, int, bool]], bool]) -> None:
    isn, stream, segs, with_fin = case
    n = len(stream)
    q = ReassemblyQueue()
    rcv = 0  # offset of rcv_nxt relative to isn
    out = bytearray()
    got_fin = False
    held: set[int] = set()  # offsets held in the queue (FIN as offset n)
    for a, b, fin in segs:
        if got_fin:
            break
        rcv_nxt = seq_add(isn, rcv)
        if a <= rcv:
            # In-order path of the caller: take the new part directly, then drain the queue.
            if b > rcv:
                out += stream[rcv:b]
                rcv = b
            if fin and b == rcv:
                got_fin = True
                rcv += 1
            chunks, nxt, qfin = q.pop_ready(seq_add(isn, rcv))
            if got_fin:
                assert not chunks and not qfin
                q.clear()
                held.clear()
                break
            for c in chunks:
                out += c
            rcv = seq_diff(nxt, isn)
            if qfin:
                got_fin = True
            held = {x for x in held if x >= rcv}
            if got_fin:
                held.clear()
        else:
            assert q.add(seq_add(isn, a), memoryview(stream)[a:b], fin, rcv_nxt)
            held |= set(range(a, b))
            if fin:
                held.add(n)
        if not got_fin:
            check_blocks(q, isn, held)
            assert q.bytes_queued == len(held - {n})
            if held:
                assert q.highest_seq == seq_add(isn, max(held) + 1)
            else:
                assert q.highest_seq is None
    assert bytes(out) == stream
    assert rcv == n + (1 if with_fin else 0)
    assert got_fin == with_fin
    assert q.empty


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, SEQ_MASK),
    st.lists(st.tuples(st.integers(1, 300), st.integers(0, 40)), min_size=1, max_size=60),
    st.integers(1, 8),
    st.integers(1, 200),
)
def test_limits_respected(isn: int, segs: list[tuple[int, int]], max_segments: int, max_bytes: int) -> None:
    q = ReassemblyQueue(max_segments=max_segments, max_bytes=max_bytes)
    held: set[int] = set()
    for a, length in segs:
        new = set(range(a, a + length)) - held
        runs = sum(1 for x in new if x - 1 not in new)  # chunks the segment would add
        fits = len(held) + len(new) <= max_bytes and len(q) + runs <= max_segments
        ok = q.add(seq_add(isn, a), memoryview(bytes(length)), False, isn)
        assert ok == fits
        if ok:
            held |= new
        assert len(q) <= max_segments
        assert q.bytes_queued <= max_bytes
        assert q.bytes_queued == len(held)
        check_blocks(q, isn, held)
