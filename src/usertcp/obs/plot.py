"""``usertcp plot``: a connection's sequence/time graph and cwnd/time graph, to PNG.

Reads a JSON-lines trace (:mod:`usertcp.obs.trace`). The top panel is a tcptrace-style
time/sequence graph of the data the connection sent: each segment is a vertical bar
from its first to its last byte (retransmissions in red), with the ACK line and the
advertised-window line (ACK + window) of the packets coming back, and SACK blocks.
The bottom panel shows cwnd, ssthresh and bytes in flight from
``recovery:metrics_updated``, with the congestion-state changes marked.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from typing import Any

from usertcp.extras import require
from usertcp.obs.trace import Event, read_trace


def reverse_id(conn: str) -> str:
    """``"a:1-b:2"`` -> ``"b:2-a:1"`` (IPv6 addresses contain ':' but never '-')."""
    local, _, remote = conn.partition("-")
    return f"{remote}-{local}"


def connections(events: list[Event]) -> dict[str, int]:
    """Payload bytes sent per connection id (``transport:packet_sent``), largest first."""
    sent: Counter[str] = Counter()
    for ev in events:
        if ev["name"] == "transport:packet_sent":
            d = ev["data"]
            sent[d["conn"]] += d.get("len", 0)
    return dict(sent.most_common())


def plot_trace(source: str | os.PathLike[str] | list[Event], output: str | os.PathLike[str], *,
               conn: str | None = None, title: str | None = None) -> dict[str, Any]:
    """Draw ``conn`` (default: the one that sent the most bytes) from a trace into ``output``.

    Returns a summary: ``conn``, ``segments``, ``retransmissions``, ``acks``,
    ``metrics`` (samples), ``duration_s``. ValueError if the trace has nothing to draw;
    :class:`usertcp.extras.MissingExtra` without matplotlib (``usertcp[plot]``).
    """
    fig, summary = draw_trace(source, conn=conn, title=title)
    fig.savefig(output)
    return {**summary, "output": os.fspath(output)}


def draw_trace(source: str | os.PathLike[str] | list[Event], *, conn: str | None = None,
               title: str | None = None) -> tuple[Any, dict[str, Any]]:
    """The matplotlib ``Figure`` of :func:`plot_trace` and its summary, not saved."""
    require("matplotlib", "usertcp plot")
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter

    events = read_trace(source) if not isinstance(source, list) else source
    conns = connections(events)
    if conn is None:
        if not conns:
            raise ValueError("the trace has no transport:packet_sent events (use a Sampler)")
        conn = next(iter(conns))
    back = reverse_id(conn)
    seg_t: list[float] = []
    seg_lo: list[int] = []
    seg_hi: list[int] = []
    rtx_t: list[float] = []
    rtx_lo: list[int] = []
    rtx_hi: list[int] = []
    ack_t: list[float] = []
    ack_v: list[int] = []
    win_v: list[int] = []
    sack_t: list[float] = []
    sack_lo: list[int] = []
    sack_hi: list[int] = []
    m_t: list[float] = []
    cwnd: list[float] = []
    ssthresh: list[float] = []
    inflight: list[float] = []
    marks: list[tuple[float, str]] = []
    # ACKs as the sender gets them (received); fall back to when the peer sent them.
    ack_event = "transport:packet_received" if any(
        e["name"] == "transport:packet_received" and e["data"]["conn"] == back for e in events) \
        else "transport:packet_sent"
    t0: float | None = None
    for ev in events:
        name = ev["name"]
        d = ev.get("data", {})
        c = d.get("conn")
        if c != conn and c != back:
            continue
        t = float(ev["time"])
        if t0 is None:
            t0 = t
        t -= t0
        if name == "transport:packet_sent" and c == conn:
            # A FIN occupies one sequence number, so a FIN-only retransmission is drawn too.
            fin = "F" in d.get("flags", "")
            if d.get("len", 0) > 0 or (fin and d.get("retransmission")):
                lo, hi = d["rel_seq"], d["rel_seq"] + max(d.get("len", 0), 1 if fin else 0)
                if d.get("retransmission"):
                    rtx_t.append(t)
                    rtx_lo.append(lo)
                    rtx_hi.append(hi)
                else:
                    seg_t.append(t)
                    seg_lo.append(lo)
                    seg_hi.append(hi)
        elif name == ack_event and c == back and d.get("rel_ack") is not None and "A" in d.get("flags", ""):
            ack_t.append(t)
            ack_v.append(d["rel_ack"])
            win_v.append(d["rel_ack"] + d.get("window", 0))
            for lo, hi in d.get("sack", ()):
                sack_t.append(t)
                sack_lo.append(lo)
                sack_hi.append(hi)
        elif name == "recovery:metrics_updated" and c == conn:
            m_t.append(t)
            cwnd.append(d["cwnd"])
            ssthresh.append(float("nan") if d.get("ssthresh") is None else d["ssthresh"])
            inflight.append(d.get("bytes_in_flight", 0))
        elif name == "recovery:congestion_state_updated" and c == conn:
            marks.append((t, d["new"]))
    if not seg_t and not rtx_t:
        raise ValueError(f"connection {conn} sent no data in this trace")
    fig = Figure(figsize=(11, 8.5), dpi=100, layout="constrained")
    ax1, ax2 = fig.subplots(2, 1, sharex=True, height_ratios=[3, 2])
    if ack_t:
        ax1.step(ack_t, ack_v, where="post", color="tab:green", lw=1, label="ACK")
        ax1.step(ack_t, win_v, where="post", color="tab:olive", lw=0.8, alpha=0.7, label="ACK + window")
    ax1.vlines(seg_t, seg_lo, seg_hi, color="tab:blue", lw=1.2, label="data sent")
    if rtx_t:
        # A retransmitted segment is one MSS tall on an axis of the whole transfer: a bar alone
        # is invisible, so each gets a marker, and the legend shows that same marker.
        ax1.vlines(rtx_t, rtx_lo, rtx_hi, color="tab:red", lw=2)
        ax1.plot(rtx_t, rtx_hi, ls="none", marker="x", ms=8, mew=2, color="tab:red",
                 label="retransmission")
    if sack_t:
        ax1.vlines(sack_t, sack_lo, sack_hi, color="tab:purple", lw=0.8, alpha=0.6, label="SACK")
    ax1.set_ylabel("sequence offset")
    ax1.yaxis.set_major_formatter(EngFormatter(unit="B"))      # 200 kB, not a bare 1e6 offset
    ax1.set_title(title or f"{conn}: time/sequence")
    ax1.legend(loc="upper left", fontsize="small")
    ax1.grid(True, alpha=0.3)
    if m_t:
        ax2.step(m_t, cwnd, where="post", color="tab:blue", label="cwnd")
        ax2.step(m_t, ssthresh, where="post", color="tab:orange", ls="--", label="ssthresh")
        ax2.step(m_t, inflight, where="post", color="tab:gray", lw=0.8, alpha=0.8, label="bytes in flight")
    for t, state in marks:
        if state in ("Recovery", "Loss"):
            ax2.axvline(t, color="tab:red" if state == "Loss" else "tab:pink", ls=":", lw=1)
    ax2.set_ylabel("bytes")
    ax2.yaxis.set_major_formatter(EngFormatter(unit="B"))
    ax2.set_xlabel("time (s)")
    ax2.set_title("congestion window (dotted: recovery pink, RTO loss red)")
    ax2.legend(loc="upper left", fontsize="small")
    ax2.grid(True, alpha=0.3)
    end = max(seg_t[-1:] + rtx_t[-1:] + ack_t[-1:] + m_t[-1:])
    return fig, {"conn": conn, "segments": len(seg_t), "retransmissions": len(rtx_t), "acks": len(ack_t),
                 "metrics": len(m_t), "duration_s": end}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Draw a connection's time/sequence graph (segments, retransmissions, ACK "
                          "and window lines, SACKs) and its cwnd/ssthresh/in-flight over time to a "
                          "PNG, from a JSON-lines trace (see 'usertcp trace').")
    parser.add_argument("trace", metavar="TRACE.jsonl", help="trace to read")
    parser.add_argument("-o", "--output", metavar="OUT.png", help="image to write (required unless --list)")
    parser.add_argument("--conn", metavar="ID", help="connection id 'ip:port-ip:port' (default: the one "
                        "that sent the most data)")
    parser.add_argument("--list", action="store_true", help="list the connections in the trace and exit")
    parser.add_argument("--title", help="title of the sequence graph")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def cli(args: argparse.Namespace) -> int:
    try:
        events = read_trace(args.trace)
        if args.list:
            conns = connections(events)
            if args.json:
                print(json.dumps(conns))
            else:
                for c, n in conns.items():
                    print(f"{c}  {n} bytes")
            return 0
        if not args.output:
            print("usertcp plot: -o/--output is required", file=sys.stderr)
            return 2
        summary = plot_trace(events, args.output, conn=args.conn, title=args.title)
    except (OSError, ValueError, RuntimeError) as e:
        print(f"usertcp plot: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{summary['output']}: {summary['conn']}, {summary['segments']} segments, "
              f"{summary['retransmissions']} retransmissions, {summary['metrics']} cwnd samples")
    return 0
