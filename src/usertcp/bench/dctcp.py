"""``usertcp bench dctcp``: a bottleneck on the in-memory network, DCTCP against CUBIC.

One bulk transfer through a bandwidth-limited link direction with a packet queue, in
virtual time (deterministic: the figures are properties of the protocols, not of this
machine), for each of:

* ``dctcp_step``: DCTCP (RFC 8257) with a step marker at K packets, as DCTCP's switches do;
* ``dctcp_ramp``: DCTCP with a linear marking ramp between two queue lengths;
* ``dctcp_accecn_step``: DCTCP on Accurate ECN feedback (RFC 9768, ``tcp_ecn=3`` both
  ends: every CE mark counted, not one echo per window of marks) behind the step marker;
* ``cubic_ecn_step``: CUBIC with RFC 3168 ECN behind the same step marker;
* ``cubic_taildrop``: CUBIC behind a plain tail-drop queue.

For each: the queueing delay every packet met (mean, p50, p99, max, in ms), the link
utilisation (goodput over link rate), CE marks, queue drops, retransmissions and the ECN
feedback negotiated. With
``plot=PATH`` (needs ``usertcp[plot]``) the queueing delay over time of every run is drawn.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from usertcp.net.memnet import LinkConfig
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import Connection
from usertcp.tcp.info import TCPI_OPT_ECN
from usertcp.testing import Pair, pair

SCENARIOS: dict[str, tuple[str, int, dict[str, Any]]] = {
    # name: (congestion control, tcp_ecn, AQM fields of LinkConfig)
    "dctcp_step": ("dctcp", 1, {"ecn_threshold": 20}),
    "dctcp_ramp": ("dctcp", 1, {"ecn_ramp": (10, 30)}),
    "dctcp_accecn_step": ("dctcp", 3, {"ecn_threshold": 20}),
    "cubic_ecn_step": ("cubic", 1, {"ecn_threshold": 20}),
    "cubic_taildrop": ("cubic", 0, {}),
}


@dataclass(slots=True)
class Run:
    """The queue as each packet met it: (time, queueing delay in seconds)."""

    name: str
    samples: list[tuple[float, float]]
    summary: dict[str, float | int | str]


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def bottleneck(name: str, *, size: int, mbit: float, rtt_ms: float, queue_limit: int,
               seed: int = 4) -> Run:
    """One transfer of ``size`` bytes a -> b through the bottleneck of scenario ``name``."""
    cc, ecn, aqm = SCENARIOS[name]
    link = LinkConfig(delay=rtt_ms / 2000, bandwidth_bps=mbit * 1e6, queue_limit=queue_limit, **aqm)
    cfg = StackConfig(ecn=ecn, congestion_control=cc)
    p = pair(link, seed=seed, cfg_a=cfg, cfg_b=cfg)
    ab = p.link.ab
    samples: list[tuple[float, float]] = []

    def tap(data: bytes, t: float, _direction: object) -> None:
        # What the packet waits for: the packets ahead of it, each a serialisation time.
        samples.append((t, ab.queue_length * len(data) * 8 / (mbit * 1e6)))
    p.net.add_tap(tap, link=ab)
    t0 = p.now
    client, server = p.open()
    data = random.Random(seed).randbytes(size)
    got = _transfer(p, client, server, data)
    elapsed = p.now - t0
    if got != data:
        raise RuntimeError(f"{name}: the data arrived altered")
    delays = sorted(d for _t, d in samples)
    st = ab.stats
    return Run(name, samples, {
        "queue_delay_mean_ms": round(sum(delays) / max(len(delays), 1) * 1e3, 3),
        "queue_delay_p50_ms": round(_percentile(delays, 0.5) * 1e3, 3),
        "queue_delay_p99_ms": round(_percentile(delays, 0.99) * 1e3, 3),
        "queue_delay_max_ms": round((delays[-1] if delays else 0.0) * 1e3, 3),
        "utilisation": round(size * 8 / elapsed / (mbit * 1e6), 3),
        "ce_marked": st.ce_marked,
        "queue_drops": st.queue_drops + st.aqm_drops,
        "retransmits": p.a.counters.get("TcpRetransSegs", 0),
        "ecn_cwnd_reductions": p.a.counters.get("UsertcpECNCwndReductions", 0),
        "alpha_end": int(client.cc.state_info().get("dctcp_alpha", -1)),
        "feedback": _feedback(client),
    })


def _feedback(conn: Connection) -> str:
    """The ECN feedback the handshake settled on: "accecn", "rfc3168" or "none"."""
    if conn.accecn is not None:
        return "accecn"
    return "rfc3168" if conn.info()["tcpi_options"] & TCPI_OPT_ECN else "none"


def _transfer(p: Pair, client: Connection, server: Connection, data: bytes) -> bytes:
    """Keep the client's send buffer full and drain the server until all of ``data`` is read."""
    view = memoryview(data)
    sent = 0
    got = bytearray()
    deadline = p.now + 600

    def ready() -> bool:
        return (client.send_space > 0 and sent < len(data)) or server.readable_bytes > 0

    while len(got) < len(data):
        while sent < len(data) and client.send_space > 0:
            n = client.send(view[sent:sent + 65536], p.now)
            if not n:
                break
            sent += n
        if server.readable_bytes:
            got += server.recv(1 << 22, p.now)
        p.driver.kick()
        if len(got) < len(data) and not p.driver.run_until(ready, max(deadline - p.now, 0.0)):
            raise RuntimeError(f"transfer stalled at {len(got)}/{len(data)} bytes")
    return bytes(got)


def plot_runs(runs: list[Run], output: str) -> None:
    """Queueing delay over time of each run, one line each, to ``output`` (PNG, SVG, ...)."""
    from usertcp.extras import require
    require("matplotlib", "usertcp bench dctcp plot=")
    from matplotlib.figure import Figure
    fig = Figure(figsize=(9, 4.5))
    ax = fig.subplots()
    for run in runs:
        t0 = run.samples[0][0] if run.samples else 0.0
        ax.plot([t - t0 for t, _d in run.samples], [d * 1e3 for _t, d in run.samples],
                label=run.name, linewidth=0.8)
    ax.set_xlabel("time since the first packet (s, virtual)")
    ax.set_ylabel("queueing delay (ms)")
    ax.set_title("Bottleneck queue: DCTCP with ECN marking vs CUBIC")
    ax.legend()
    fig.savefig(output)


def run(size: int = 3_000_000, mbit: float = 20.0, rtt_ms: float = 4.0, queue_limit: int = 80,
        plot: str = "") -> dict[str, Any]:
    """Every scenario, side by side in one run; ``plot`` names an image file to draw."""
    runs = [bottleneck(name, size=int(size), mbit=float(mbit), rtt_ms=float(rtt_ms),
                       queue_limit=int(queue_limit)) for name in SCENARIOS]
    if plot:
        plot_runs(runs, plot)
    out: dict[str, Any] = {"link": {"mbit": float(mbit), "rtt_ms": float(rtt_ms),
                                    "queue_limit": int(queue_limit), "bytes": int(size),
                                    "step_threshold": 20, "ramp": [10, 30]}}
    for r in runs:
        out[r.name] = r.summary
    taildrop = out["cubic_taildrop"]["queue_delay_mean_ms"]
    if taildrop:
        out["dctcp_step_vs_cubic_taildrop_delay_ratio"] = round(
            out["dctcp_step"]["queue_delay_mean_ms"] / taildrop, 3)
    return out


if __name__ == "__main__":
    import json
    print(json.dumps(run(), indent=2))
