"""The retransmission queue (tcp/rtx_queue.py): positional access relative to the head,
bisection by offset, head removal, against a plain list as the model (issue 20 point 2)."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from usertcp.tcp.rtx_queue import RtxQueue, SentSegment


def _queue(bounds: list[int]) -> tuple[RtxQueue, list[SentSegment]]:
    q = RtxQueue()
    model: list[SentSegment] = []
    for lo, hi in pairwise(bounds):
        r = SentSegment(lo, hi, False, 0.0)
        q.append(r)
        model.append(r)
    return q, model


def test_empty_queue() -> None:
    q = RtxQueue()
    assert not q and len(q) == 0 and list(q) == [] and q.index_ending_after(5) == 0
    with pytest.raises(IndexError):
        q.popleft()
    with pytest.raises(IndexError):
        q[0]


def test_index_ending_after_finds_the_first_record_a_block_touches() -> None:
    q, model = _queue([1, 11, 21, 31, 41])
    assert [q.index_ending_after(x) for x in (0, 1, 10, 11, 20, 39, 40, 41, 99)] == \
        [0, 0, 0, 1, 1, 3, 3, 4, 4]
    q.popleft()
    assert q.index_ending_after(0) == 0 and q.index_ending_after(21) == 1 and q[0] is model[1]


def test_split_tail_inserted_after_its_head_keeps_order() -> None:
    q, _ = _queue([1, 101, 201])
    tail = q[0].split(51)
    q.insert(1, tail)
    assert [(r.start, r.end) for r in q] == [(1, 51), (51, 101), (101, 201)]
    assert q.index_ending_after(51) == 1 and q[-1].start == 101
    assert [r.start for r in reversed(q)] == [101, 51, 1]


def test_popping_many_heads_compacts_without_losing_records() -> None:
    q, model = _queue(list(range(1, 1002, 1)))
    for i in range(700):
        assert q.popleft() is model[i]
        assert len(q) == 1000 - i - 1
    assert q[0] is model[700] and q[-1] is model[-1]
    assert q.index_ending_after(701) == 0 and q.index_ending_after(702) == 1
    q.clear()
    assert not q


ops = st.lists(st.tuples(st.sampled_from(["append", "pop", "split", "find", "again", "unlink", "remove"]),
                         st.integers(0, 200)), max_size=80)


def sent_order(q: RtxQueue) -> list[SentSegment]:
    out: list[SentSegment] = []
    r = q.sent_first
    while r is not None:
        out.append(r)
        r = r.sent_next
    back: list[SentSegment] = []
    r = q.sent_last
    while r is not None:
        back.append(r)
        r = r.sent_prev
    assert back == out[::-1]
    return out


@settings(max_examples=150, deadline=None)
@given(ops)
def test_queue_matches_a_list_model(script: list[tuple[str, int]]) -> None:
    q = RtxQueue()
    model: list[SentSegment] = []
    sent: list[SentSegment] = []          # Linux tsorted_sent_queue
    top = 1
    for op, arg in script:
        if op == "append":
            r = SentSegment(top, top + 1 + arg, False, 0.0)
            top = r.end
            q.append(r)
            model.append(r)
            sent.append(r)
        elif op == "pop" and model:
            r = model.pop(0)
            assert q.popleft() is r
            if r in sent:
                sent.remove(r)
        elif op == "split" and model:
            i = arg % len(model)
            r = model[i]
            if r.end - r.start > 1:
                tail = q.split(i, r.start + 1 + arg % (r.end - r.start - 1))
                model.insert(i + 1, tail)
                if r in sent:
                    sent.insert(sent.index(r) + 1, tail)
        elif op in ("again", "unlink", "remove") and model:
            i = arg % len(model)
            r = model[i]
            if r in sent:
                sent.remove(r)
            if op == "again":
                q.sent_again(r)
                sent.append(r)
            elif op == "unlink":
                q.unlink_sent(r)
            else:
                assert q.remove(i) is model.pop(i)
        elif op == "find":
            off = arg * 3
            expect = next((i for i, r in enumerate(model) if r.end > off), len(model))
            assert q.index_ending_after(off) == expect
        assert len(q) == len(model) and list(q) == model and bool(q) == bool(model)
        assert list(reversed(q)) == model[::-1]
        assert sent_order(q) == sent
        if model:
            assert q[0] is model[0] and q[-1] is model[-1]
