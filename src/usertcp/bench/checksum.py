"""Micro-benchmarks of the wire layer: checksum, parse and build of a data segment."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from usertcp.wire.checksum import internet_checksum
from usertcp.wire.packet import build_packet, parse_packet
from usertcp.wire.tcp import encode_options

_SRC = bytes((10, 0, 0, 1))
_DST = bytes((10, 0, 0, 2))


def _best_us(fn: Callable[[], object], number: int, repeat: int) -> float:
    """Best-of-``repeat`` mean time per call in microseconds (perf_counter)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        dt = time.perf_counter() - t0
        best = min(best, dt)
    return best / number * 1e6


def run(number: int = 20000, repeat: int = 5) -> dict[str, float]:
    """Time checksum (1460 B, 64 KiB), parse and build of a 1460-byte IPv4 segment with TS."""
    small = os.urandom(1460)
    big = os.urandom(65536)
    opts = encode_options(ts=(0x12345678, 0x9ABCDEF0))

    def build() -> object:
        return build_packet(src=_SRC, dst=_DST, sport=40000, dport=80, seq=1, ack=2, flags=0x18,
                            window=502, options=opts, payload=(small,))

    wire = build_packet(src=_SRC, dst=_DST, sport=40000, dport=80, seq=1, ack=2, flags=0x18,
                        window=502, options=opts, payload=(small,)).tobytes()
    return {
        "us_per_1460B": _best_us(lambda: internet_checksum((small,)), number, repeat),
        "us_per_64KiB": _best_us(lambda: internet_checksum((big,)), max(1, number // 40), repeat),
        "parse_us": _best_us(lambda: parse_packet(wire), number, repeat),
        "build_us": _best_us(build, number, repeat),
    }


if __name__ == "__main__":
    for k, v in run().items():
        print(f"{k:>14}: {v:8.2f}")
