"""``usertcp bench fastpath``: receive-side cost per segment with header prediction on and off.

Method: record the packets one stack receives in a two-stack run, then replay the
identical trace into fresh stacks with the fast path on and off and time only the
``Stack.receive`` calls (each includes the ACK or data segments it triggers, as a
kernel's receive path does). Best of ``repeat`` runs; ratios are within one run of
this process. Workloads, each on the passive (server) and the active (client) side:
bulk data received, the ACK stream of a bulk sender, and request/response (netperf
TCP_RR: one small request, one small reply, many transactions). Plain and TCP-MD5;
for MD5 "slow" is the thread's choice (``md5_fast_path=False``: no prediction for
MD5 flows). With ``instructions=True`` each figure is also measured as CPU
instructions per segment under ``valgrind --tool=callgrind`` (stable on a shared
machine): a replay run minus a run that only loads the trace.
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from usertcp.bench.replay import Replay, Trace, fixed_config, record, record_rr, replay

MD5_KEY = b"benchmark-md5-key"


def _workloads(size: int, transactions: int, key: bytes | None) -> dict[str, Callable[[], Trace]]:
    cfg = fixed_config()
    return {
        "data": lambda: record(size=size, upload=0, seed=11, md5_key=key, config=cfg),
        "acks": lambda: record(size=1000, upload=size, seed=12, md5_key=key, config=cfg),
        "active_data": lambda: record(size=1000, upload=size, seed=13, md5_key=key, config=cfg, active=True),
        "active_acks": lambda: record(size=size, upload=0, seed=14, md5_key=key, config=cfg, active=True),
        "rr": lambda: record_rr(transactions=transactions, seed=15, md5_key=key, config=cfg),
        "rr_active": lambda: record_rr(transactions=transactions, seed=16, md5_key=key, config=cfg,
                                       active=True),
    }


def _modes(md5: bool) -> dict[str, dict[str, bool]]:
    if md5:
        return {"fast": {"header_prediction": True, "md5_fast_path": True},
                "slow": {"header_prediction": True, "md5_fast_path": False}}
    return {"fast": {"header_prediction": True}, "slow": {"header_prediction": False}}


def _replay(trace: Trace, mode: dict[str, bool]) -> Replay:
    return replay(trace, header_prediction=mode["header_prediction"],
                  md5_fast_path=mode.get("md5_fast_path", True), keep_output=False)


def _cost(trace: Trace, mode: dict[str, bool], repeat: int) -> tuple[float, int, float]:
    best = float("inf")
    packets = 0
    ratio = 0.0
    for _ in range(repeat):
        r = _replay(trace, mode)
        if r.receive_seconds < best:
            best = r.receive_seconds
            packets = r.packets
            ratio = r.stack.counters.fast_path_ratio()
    return best / max(packets, 1) * 1e6, packets, ratio


def _pair_figures(trace: Trace, repeat: int, md5: bool) -> dict[str, float]:
    modes = _modes(md5)
    fast_us, n, ratio = _cost(trace, modes["fast"], repeat)
    slow_us, _, _ = _cost(trace, modes["slow"], repeat)
    out: dict[str, float] = {
        "segments": n,
        "fast_us": round(fast_us, 3),
        "slow_us": round(slow_us, 3),
        "speedup": round(slow_us / fast_us, 3) if fast_us else 0.0,
        "fast_segments_per_s": round(1e6 / fast_us) if fast_us else 0,
        "slow_segments_per_s": round(1e6 / slow_us) if slow_us else 0,
        "fast_path_share": round(ratio, 3),
    }
    if "transactions" in trace.meta:
        out["fast_us_per_transaction"] = round(fast_us * n / trace.meta["transactions"], 3)
        out["slow_us_per_transaction"] = round(slow_us * n / trace.meta["transactions"], 3)
    return out


# ------------------------------------------------------------ callgrind counts

_COLLECTED = re.compile(rb"Collected\s*:\s*(\d+)")


def _instructions(trace_file: str, mode: str) -> int:
    """Instructions of one child process (``mode`` "none" only loads the trace)."""
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
           sys.executable, "-m", "usertcp.bench.fastpath", "--callgrind-child", trace_file, mode]
    res = subprocess.run(cmd, capture_output=True, check=True, timeout=1800)
    m = _COLLECTED.search(res.stderr)
    if m is None:
        raise RuntimeError("callgrind printed no instruction count")
    return int(m.group(1))


def _callgrind_figures(trace: Trace, md5: bool, packets: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.pickle")
        with open(path, "wb") as f:
            pickle.dump((trace, _modes(md5)), f)
        base = _instructions(path, "none")
        fast = (_instructions(path, "fast") - base) / max(packets, 1)
        slow = (_instructions(path, "slow") - base) / max(packets, 1)
    return {"fast_instr": round(fast), "slow_instr": round(slow),
            "instr_speedup": round(slow / fast, 3) if fast > 0 else 0.0}


def _callgrind_child(trace_file: str, mode: str) -> None:
    with open(trace_file, "rb") as f:
        trace, modes = pickle.load(f)      # our own file, written by the parent just now
    if mode != "none":
        _replay(trace, modes[mode])


# ------------------------------------------------------------------------ run

def run(size: int = 3_000_000, repeat: int = 3, transactions: int = 2000, instructions: bool = False,
        instr_size: int = 300_000, instr_transactions: int = 300, **_: Any) -> dict[str, Any]:
    """Wall-clock figures for every workload; ``instructions`` adds callgrind counts
    (on smaller traces: ``instr_size`` bytes, ``instr_transactions`` transactions)."""
    method = __doc__.split("\n\n")[1].replace("\n", " ") if __doc__ else ""
    out: dict[str, Any] = {"method": method}
    if instructions and shutil.which("valgrind") is None:
        raise RuntimeError("instructions=True needs valgrind (apt-get install valgrind)")
    for label, key in (("plain", None), ("md5", MD5_KEY)):
        md5 = key is not None
        figures: dict[str, Any] = {}
        for name, make in _workloads(size, transactions, key).items():
            figures[name] = _pair_figures(make(), repeat, md5)
        if instructions:
            for name, make in _workloads(instr_size, instr_transactions, key).items():
                small = make()
                n = len([e for e in small.events if e.kind == "pkt"])
                figures[name].update(_callgrind_figures(small, md5, n))
        out[label] = figures
    out["goal"] = "fast path >= 1.5x cheaper than the slow path for plain in-order data"
    out["goal_met"] = out["plain"]["data"]["speedup"] >= 1.5
    out["md5_fast_path_pays"] = {name: f["speedup"] > 1.0 for name, f in out["md5"].items()}
    return out


if __name__ == "__main__":
    import json

    if len(sys.argv) == 4 and sys.argv[1] == "--callgrind-child":
        _callgrind_child(sys.argv[2], sys.argv[3])
    else:
        print(json.dumps(run(), indent=2))
