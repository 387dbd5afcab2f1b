"""``usertcp nstat``: a stack's counters under their Linux nstat/SNMP names.

(The module is ``counters`` so that it does not shadow the :func:`nstat` function.)

Library: :func:`nstat` (a sorted dict) and :func:`format_nstat` (text like ``nstat -a``).
CLI: ``usertcp nstat`` runs the same short in-memory transfer as ``usertcp ss`` or
reads a stats file (``--stats-file``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

from usertcp.extras import available
from usertcp.tcp.stack import Stack


def nstat(stack: Stack | Mapping[str, int], *, zeros: bool = False) -> dict[str, int]:
    """Counter name -> value, sorted by name; zero counters only with ``zeros``."""
    counters = stack.counters if isinstance(stack, Stack) else stack
    return {k: v for k, v in sorted(counters.items()) if v or zeros}


def format_nstat(counters: Mapping[str, int], *, title: str = "usertcp") -> str:
    """Text like ``nstat -a``: a ``#kernel``-style header, then ``Name  Value`` lines."""
    width = max([len("#" + title)] + [len(k) for k in counters]) + 2
    lines = [f"#{title}"]
    lines += [f"{k:<{width}}{v:>12}" for k, v in sorted(counters.items())]
    return "\n".join(lines) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from usertcp.obs.ss import add_common_arguments

    parser.description = ("Show a stack's counters under Linux nstat names (TcpInSegs, "
                          "TcpRetransSegs, TcpExtTCPHPHits, ...). Without --stats-file it runs a "
                          "short in-memory transfer with loss and shows both stacks.")
    add_common_arguments(parser)
    parser.add_argument("-z", "--zeros", action="store_true", help="also show counters that are zero")
    parser.add_argument("pattern", nargs="*", help="only counters whose name contains one of these")


def _filter(counters: Mapping[str, int], patterns: list[str], zeros: bool) -> dict[str, int]:
    out = nstat(counters, zeros=zeros)
    if patterns:
        low = [p.lower() for p in patterns]
        out = {k: v for k, v in out.items() if any(p in k.lower() for p in low)}
    return out


def cli(args: argparse.Namespace) -> int:
    from usertcp.obs.ss import snapshots_from_args

    try:
        snaps = snapshots_from_args(args)
    except (OSError, ValueError) as e:
        print(f"usertcp nstat: {e}", file=sys.stderr)
        return 1
    result: list[dict[str, Any]] = [
        {"stack": s.get("stack", ""), "counters": _filter(s["counters"], args.pattern, args.zeros)}
        for s in snaps]
    if args.json:
        print(json.dumps(result))
        return 0
    if sys.stdout.isatty() and available("rich"):
        from rich.console import Console
        from rich.table import Table

        console = Console()
        for r in result:
            table = Table(title=f"stack {r['stack'] or '?'}", title_justify="left")
            table.add_column("Name")
            table.add_column("Value", justify="right")
            for k, v in r["counters"].items():
                table.add_row(k, f"{v:,}")
            console.print(table)
    else:
        for r in result:
            print(format_nstat(r["counters"], title=r["stack"] or "usertcp"), end="")
    return 0
