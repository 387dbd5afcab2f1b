"""libFuzzer/atheris target, structure-aware: each input is a program of peer actions that
drives whole connections (fuzz/structfuzz.py), never a raw packet that dies at the checksum.

    .venv/bin/pip install atheris
    .venv/bin/python fuzz/fuzz_struct.py -max_total_time=600 -timeout=20

Any exception (a stack bug or a broken invariant) is a finding; the crash file is the
program, which ``structfuzz.run_program(data)`` replays, to be kept as a regression test in
tests/test_fuzz_struct.py. CI runs the same target on a fixed budget of deterministic
random programs (tests/test_fuzz_struct.py).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import structfuzz


def test_one_input(data: bytes) -> None:
    structfuzz.run_program(data)


def main() -> None:
    atheris = importlib.import_module("atheris")      # optional: not a test dependency

    atheris.instrument_all()
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
