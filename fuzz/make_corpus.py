"""Write the seed corpus: one pcap per stackfuzz scenario (pair transfers, both directions).

    .venv/bin/python fuzz/make_corpus.py [directory]     # default: fuzz/corpus
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import stackfuzz


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "corpus"
    out.mkdir(parents=True, exist_ok=True)
    for sc in stackfuzz.SCENARIOS:
        path = out / f"{sc.name}.pcap"
        got = stackfuzz.record_scenario(sc, path)
        print(f"{path}: {len(stackfuzz.seed_trace(path))} packets to the server, {got} bytes received")


if __name__ == "__main__":
    main()
