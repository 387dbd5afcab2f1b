"""``usertcp bench fastpath``: receive-side cost per segment with header prediction on and off.

Method: record the packets a server stack receives in a two-stack transfer (bulk
in-order data; or, for the ACK stream, the ACKs a sending server gets), then
replay the identical trace into fresh stacks with the fast path on and off and
time only the ``Stack.receive`` calls (each includes the ACK or data segments it
triggers, as a kernel's receive path does). Best of ``repeat`` runs; ratios are
within one run of this process. Plain and TCP-MD5-signed connections.
"""

from __future__ import annotations

from typing import Any

from usertcp.bench.replay import Trace, fixed_config, record, replay

MD5_KEY = b"benchmark-md5-key"


def _cost(trace: Trace, fast: bool, repeat: int, *, segments_kind: str) -> tuple[float, int, float]:
    best = float("inf")
    packets = 0
    ratio = 0.0
    for _ in range(repeat):
        r = replay(trace, header_prediction=fast, keep_output=False)
        if r.receive_seconds < best:
            best = r.receive_seconds
            packets = r.packets
            ratio = r.stack.counters.fast_path_ratio()
    return best / max(packets, 1) * 1e6, packets, ratio


def _pair_figures(trace: Trace, repeat: int, kind: str) -> dict[str, float]:
    fast_us, n, ratio = _cost(trace, True, repeat, segments_kind=kind)
    slow_us, _, _ = _cost(trace, False, repeat, segments_kind=kind)
    return {
        "segments": n,
        "fast_us": round(fast_us, 3),
        "slow_us": round(slow_us, 3),
        "speedup": round(slow_us / fast_us, 3) if fast_us else 0.0,
        "fast_segments_per_s": round(1e6 / fast_us) if fast_us else 0,
        "slow_segments_per_s": round(1e6 / slow_us) if slow_us else 0,
        "fast_path_share": round(ratio, 3),
    }


def run(size: int = 3_000_000, repeat: int = 3, **_: Any) -> dict[str, Any]:
    method = __doc__.split("\n\n")[1].replace("\n", " ") if __doc__ else ""
    out: dict[str, Any] = {"method": method}
    for label, key in (("plain", None), ("md5", MD5_KEY)):
        cfg = fixed_config()
        data = record(size=size, upload=0, seed=11, md5_key=key, config=cfg)
        acks = record(size=1000, upload=size, seed=12, md5_key=key, config=cfg)
        out[label] = {"data": _pair_figures(data, repeat, "data"),
                      "acks": _pair_figures(acks, repeat, "acks")}
    out["goal"] = "fast path >= 1.5x cheaper than the slow path for plain in-order data"
    out["goal_met"] = out["plain"]["data"]["speedup"] >= 1.5
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
