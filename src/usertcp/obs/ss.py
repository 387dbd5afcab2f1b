"""``usertcp ss``: a stack's sockets with state, queues, cwnd, RTT and retransmissions (``ss -ti``).

Library: :func:`ss_rows` (one dict per socket; JSON-ready) and :func:`format_ss` (text
like ``ss -tni``: a line per socket plus an indented tcp_info line).
CLI: ``usertcp ss`` runs a short in-memory transfer (``--demo``, the default) and shows
both stacks mid-transfer, or reads a stats file (``--stats-file``, see
:mod:`usertcp.obs.stats`) written by a running stack.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

from usertcp.cli import parse_size
from usertcp.tcp.congestion import INFINITE_SSTHRESH
from usertcp.tcp.connection import State
from usertcp.tcp.stack import Stack

# ss indents the tcp_info line with a tab and a space: 9 columns on a terminal.
_INDENT = "\t "
_INDENT_COLUMNS = 9
CA_STATES = ("Open", "Disorder", "CWR", "Recovery", "Loss")
# ss's short state names.
SS_STATE = {
    State.ESTABLISHED: "ESTAB", State.SYN_SENT: "SYN-SENT", State.SYN_RECEIVED: "SYN-RECV",
    State.FIN_WAIT_1: "FIN-WAIT-1", State.FIN_WAIT_2: "FIN-WAIT-2", State.TIME_WAIT: "TIME-WAIT",
    State.CLOSED: "UNCONN", State.CLOSE_WAIT: "CLOSE-WAIT", State.LAST_ACK: "LAST-ACK",
    State.LISTEN: "LISTEN", State.CLOSING: "CLOSING",
}


def _endpoint(stack: Stack, ip: bytes | None, port: int | str) -> str:
    addr = stack.fmt_addr(ip)
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def ss_rows(stack: Stack, *, listening: bool = True) -> list[dict[str, Any]]:
    """One dict per listener and connection, sorted by (local, peer).

    Keys: ``state`` (ss name), ``recv_q``/``send_q`` (bytes: unread / not yet acked; for a
    listener, the accept queue length and the backlog, as ss shows), ``local``, ``peer``,
    and for connections ``cwnd``/``ssthresh`` (segments; ssthresh None while infinite),
    ``mss``, ``rtt_ms``/``rttvar_ms``/``rto_ms``/``min_rtt_ms``, ``ca_state``, ``unacked``,
    ``retrans`` (segments now retransmitted and unacked), ``total_retrans``, ``lost``,
    ``sacked``, ``bytes_acked``, ``bytes_received``, ``segs_out``, ``segs_in``,
    ``snd_wnd``, ``notsent`` and the whole ``tcp_info`` dict.
    """
    rows: list[dict[str, Any]] = []
    if listening:
        for lst in stack.listeners.values():
            rows.append({"state": "LISTEN", "recv_q": len(lst.accept_queue), "send_q": lst.backlog,
                         "local": _endpoint(stack, lst.local_ip, lst.port), "peer": "*:*"})
    for conn in stack.connections.values():
        info = conn.info()
        ssthresh = info["tcpi_snd_ssthresh"]
        rows.append({
            "state": SS_STATE.get(conn.state, conn.state.name),
            "recv_q": conn.readable_bytes,
            "send_q": conn.send_queue_bytes,
            "local": _endpoint(stack, conn.local_ip, conn.local_port),
            "peer": _endpoint(stack, conn.remote_ip, conn.remote_port),
            "cwnd": info["tcpi_snd_cwnd"],
            "ssthresh": None if conn.cc.ssthresh >= INFINITE_SSTHRESH else ssthresh,
            "mss": conn.mss,
            "rtt_ms": info["tcpi_rtt"] / 1000,
            "rttvar_ms": info["tcpi_rttvar"] / 1000,
            "rto_ms": info["tcpi_rto"] / 1000,
            "min_rtt_ms": None if info["tcpi_min_rtt"] == 0xFFFFFFFF else info["tcpi_min_rtt"] / 1000,
            "ca_state": CA_STATES[info["tcpi_ca_state"]] if 0 <= info["tcpi_ca_state"] < 5
            else str(info["tcpi_ca_state"]),
            "unacked": info["tcpi_unacked"],
            "retrans": info["tcpi_retrans"],
            "total_retrans": info["tcpi_total_retrans"],
            "lost": info["tcpi_lost"],
            "sacked": info["tcpi_sacked"],
            "bytes_acked": info["tcpi_bytes_acked"],
            "bytes_received": info["tcpi_bytes_received"],
            "segs_out": info["tcpi_segs_out"],
            "segs_in": info["tcpi_segs_in"],
            "snd_wnd": info["tcpi_snd_wnd"],
            "notsent": info["tcpi_notsent_bytes"],
            "tcp_info": info,
        })
    rows.sort(key=lambda r: (r["state"] != "LISTEN", r["local"], r["peer"]))
    return rows


def _num(v: float) -> str:
    return f"{v:.3f}".rstrip("0").rstrip(".")


def _detail(r: dict[str, Any], width: int | None = None) -> str:
    """The indented tcp_info line of ``ss -ti``, wrapped to ``width`` columns when given."""
    parts = [f"rto:{_num(r['rto_ms'])}", f"rtt:{_num(r['rtt_ms'])}/{_num(r['rttvar_ms'])}",
             f"mss:{r['mss']}", f"cwnd:{r['cwnd']}"]
    if r["ssthresh"] is not None:
        parts.append(f"ssthresh:{r['ssthresh']}")
    parts += [f"bytes_acked:{r['bytes_acked']}", f"bytes_received:{r['bytes_received']}",
              f"segs_out:{r['segs_out']}", f"segs_in:{r['segs_in']}"]
    if r["unacked"]:
        parts.append(f"unacked:{r['unacked']}")
    parts.append(f"retrans:{r['retrans']}/{r['total_retrans']}")
    if r["lost"]:
        parts.append(f"lost:{r['lost']}")
    if r["sacked"]:
        parts.append(f"sacked:{r['sacked']}")
    if r["min_rtt_ms"] is not None:
        parts.append(f"minrtt:{_num(r['min_rtt_ms'])}")
    if r["ca_state"] != "Open":
        parts.append(f"ca:{r['ca_state']}")
    if width is None:
        return _INDENT + " ".join(parts)
    # Wrapped at field boundaries, never inside one (a terminal would split "rtt:1.2/0.6").
    room = max(width - _INDENT_COLUMNS, 20)
    return "\n".join(_INDENT + line for line in textwrap.wrap(" ".join(parts), room,
                                                              break_long_words=False))


def format_ss(source: Stack | Sequence[dict[str, Any]], *, info: bool = True, width: int | None = None
              ) -> str:
    """Text like ``ss -tni`` (``info=False``: ``ss -tn``) for a stack or rows of :func:`ss_rows`.

    ``width`` (a terminal's columns) wraps the tcp_info line to fit; addresses are never cut.
    """
    rows = ss_rows(source) if isinstance(source, Stack) else list(source)
    lw = max([len("Local Address:Port")] + [len(r["local"]) for r in rows])
    header = f"{'State':<11}{'Recv-Q':>7} {'Send-Q':>7} {'Local Address:Port':<{lw}}  Peer Address:Port"
    lines = [header]
    for r in rows:
        lines.append(f"{r['state']:<11}{r['recv_q']:>7} {r['send_q']:>7} {r['local']:<{lw}}  {r['peer']}")
        if info and r["state"] != "LISTEN":
            lines.append(_detail(r, width))
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- CLI


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Options ``ss`` and ``nstat`` share: where the stack to look at comes from."""
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--stats-file", metavar="PATH",
                     help="read a stats file written by a running stack (e.g. usertcp serve --stats-file)")
    src.add_argument("--demo", action="store_true",
                     help="run a short in-memory transfer and look at its two stacks (the default)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--size", type=parse_size, default=1_000_000,
                        help="demo: bytes to transfer (%(default)s; 5M, 64Ki... allowed)")
    parser.add_argument("--loss", type=float, default=0.02, help="demo: packet loss (%(default)s)")
    parser.add_argument("--seed", type=int, default=1, help="demo: random seed (%(default)s)")
    parser.add_argument("--at", type=float, default=0.5, metavar="FRACTION",
                        help="demo: take the snapshot when this fraction has arrived (%(default)s)")


def snapshots_from_args(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Stats snapshots (see :mod:`usertcp.obs.stats`) from ``--stats-file`` or the demo."""
    from usertcp.obs.stats import read_stats_file, stats_snapshot

    if args.stats_file:
        return read_stats_file(args.stats_file)
    from usertcp.obs.scenario import run_transfer

    sc = run_transfer(size=args.size, loss=args.loss, seed=args.seed, stop_at=args.at)
    return [stats_snapshot(s, now=sc.driver.now()) for s in sc.stacks]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Show TCP sockets like 'ss -ti': state, Recv-Q/Send-Q, cwnd, ssthresh, "
                          "RTT, RTO and retransmissions. Without --stats-file it runs a short "
                          "in-memory transfer with loss and shows both stacks mid-transfer.")
    add_common_arguments(parser)
    parser.add_argument("-l", "--listening", action="store_true", help="show only listening sockets")
    parser.add_argument("--no-info", action="store_true", help="omit the tcp_info line (like ss without -i)")


def cli(args: argparse.Namespace) -> int:
    try:
        snaps = snapshots_from_args(args)
    except (OSError, ValueError) as e:
        print(f"usertcp ss: {e}", file=sys.stderr)
        return 1
    for snap in snaps:
        rows = snap["connections"]
        if args.listening:
            snap["connections"] = rows = [r for r in rows if r["state"] == "LISTEN"]
    if args.json:
        print(json.dumps([{"stack": s.get("stack", ""), "connections": s["connections"]} for s in snaps]))
        return 0
    # On a terminal the ss -ti layout is fitted to its width (a wide table would cut addresses
    # and lose the tcp_info line on 80 columns); piped output keeps one tcp_info line per socket.
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    for snap in snaps:
        print(f"# stack {snap.get('stack') or '?'} at t={snap.get('time', 0):.3f}s")
        print(format_ss(snap["connections"], info=not args.no_info, width=width), end="")
    return 0
