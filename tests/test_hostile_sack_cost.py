"""What one attack SACK ACK costs beside an ordinary ACK (issue 20 point 2).

The benchmark (``usertcp bench hostile -o instructions=True``) measures this in callgrind
instructions per ACK; a test cannot run callgrind in its time budget, so it counts what the
interpreter executes instead: bytecode instructions in usertcp's own code (sys.settrace opcode
events), deterministic on any machine. Each kind of ACK is fed to a freshly loaded sender with
1,000 MSS-48 pieces in flight, as in the benchmark. The crafted kinds cut records in two
(``split``) or repeat large blocks over what is already SACKed (``mixed``); before the SACK
walk ran on the queue itself they cost 4.0x and 3.5x an ordinary ACK here (now 3.3x, 2.5x).
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

import pytest

from usertcp import builds
from usertcp.bench import hostile

pytestmark = pytest.mark.skipif(builds.current() == "compiled",
                                reason="counts interpreted bytecode: the compiled build has none")

PIECES = 1000
ACKS = 100


def bytecodes_per_ack(pattern: str) -> float:
    st, packets, now = hostile._prepared_acks(PIECES, ACKS, pattern)
    count = 0

    def trace(frame: FrameType, event: str, _arg: Any) -> Any:
        nonlocal count
        if event == "call":
            if "usertcp" not in frame.f_code.co_filename:
                return None
            frame.f_trace_opcodes = True
            frame.f_trace_lines = False
        elif event == "opcode":
            count += 1
        return trace

    old = sys.gettrace()
    sys.settrace(trace)
    try:
        hostile._feed(st, packets, now)
    finally:
        sys.settrace(old)
    return count / ACKS


def test_attack_sack_acks_cost_a_bounded_multiple_of_an_ordinary_ack() -> None:
    ordinary = bytecodes_per_ack("ordinary")
    split = bytecodes_per_ack("split")
    mixed = bytecodes_per_ack("mixed")
    assert ordinary > 0
    assert split / ordinary <= 3.6, (split, ordinary)
    assert mixed / ordinary <= 3.0, (mixed, ordinary)
