"""libFuzzer/atheris target: the stack's packet input, seeded from the pcaps the tests write.

    .venv/bin/pip install atheris            # 3.0.0 works with Python 3.11
    .venv/bin/python fuzz/make_corpus.py     # writes fuzz/corpus/*.pcap from pair transfers
    .venv/bin/python fuzz/fuzz_stack.py fuzz/corpus -max_total_time=600 -timeout=20

An input is a (mutated) pcap: its records are replayed to the fuzz server stack
(stackfuzz.run_trace) with ``check_invariants`` after every event. Any exception is a
finding; libFuzzer writes the input as crash-<sha1>, itself a pcap that
``stackfuzz.run_trace(stackfuzz.parse_lenient(data))`` replays, to be turned into a
regression test in tests/test_fuzz.py. CI runs the same target under a fixed budget
with the deterministic mutator instead (tests/test_fuzz.py).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import stackfuzz


def test_one_input(data: bytes) -> None:
    trace = stackfuzz.parse_lenient(data)
    if trace:
        stackfuzz.run_trace(trace, tail=60.0)


def main() -> None:
    atheris = importlib.import_module("atheris")      # optional: not a test dependency

    atheris.instrument_all()
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
