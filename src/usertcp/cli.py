"""The ``usertcp`` command: one entry point, subcommands imported lazily.

To add a subcommand, add one line to :data:`COMMANDS`: the module is imported only
when the subcommand is used (``usertcp --help`` imports nothing), and must expose
``add_arguments(parser)`` and ``cli(args) -> int`` (or the names given in the
:class:`Command`). Benchmarks are registered the same way in :data:`BENCHMARKS`:
a module with ``run(**options) -> dict``.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
from collections.abc import Sequence
from typing import Any, NamedTuple

import usertcp


class Command(NamedTuple):
    module: str
    help: str
    setup: str = "add_arguments"    # function(parser) adding the subcommand's options
    run: str = "cli"                # function(args) -> exit status


COMMANDS: dict[str, Command] = {
    "demo": Command("usertcp.apps.demo",
                    "two stacks on an in-memory network transfer data through the socket API "
                    "(virtual time, 1%% loss) and print a summary"),
    "bench": Command("usertcp.cli", "run a micro-benchmark and print its results",
                     "_bench_arguments", "_bench_cli"),
    "drill": Command("usertcp.drill.command",
                     "run packetdrill scripts against a fresh usertcp stack each, in virtual time",
                     "add_arguments", "main"),
    "serve": Command("usertcp.apps.serve",
                     "serve echo/discard/source/smtp/cache over a TUN device to the Linux kernel"),
    "ss": Command("usertcp.obs.ss",
                  "TCP sockets like 'ss -ti': state, queues, cwnd, RTT, retransmissions "
                  "(demo run or --stats-file)"),
    "nstat": Command("usertcp.obs.counters",
                     "stack counters under Linux nstat names (demo run or --stats-file)"),
    "trace": Command("usertcp.obs.trace",
                     "run a lossy in-memory transfer and write its JSON-lines event trace (--pcap, --plot)"),
    # helper "stdlib": the netcat-like client
    "connect": Command("usertcp.apps.connect",
                       "netcat-like client: stdin to a TCP connection, the connection to stdout, "
                       "half-close at EOF (in memory against a built-in echo/smtp host, or over TUN)"),
    "plot": Command("usertcp.obs.plot",
                    "draw a connection's time/sequence and cwnd graphs from a trace to PNG"),
}

# name -> (module exposing run(**options) -> dict, one-line help)
BENCHMARKS: dict[str, tuple[str, str]] = {
    "throughput": ("usertcp.bench.throughput",
                   "stack-to-stack bulk transfer in virtual time, per CPU second and per segment"),
    "checksum": ("usertcp.bench.checksum", "Internet checksum, segment parse and build"),
    "objects": ("usertcp.bench.objects",
                "receiver/sender CPU per GB: recv() vs capture vs DISCARD, send() vs OBJ_SEND, ranges"),
    "preload": ("usertcp.bench.preload",
                "banner latency in RTTs and wake-ups: accept-then-send vs preload vs preload+TFO"),
    "tun": ("usertcp.bench.tun",
            "kernel<->usertcp throughput over TUN (offload on/off) vs kernel<->kernel over veth"),
    "fastpath": ("usertcp.bench.fastpath",
                 "receive cost per segment with header prediction on and off, plain and TCP-MD5"),
    "apps": ("usertcp.bench.apps",
             "uvicorn requests/s on usertcp over TUN vs the kernel (wrk); SMTP setup rate, preload or not"),
}


def build_parser(selected: str | None = None) -> argparse.ArgumentParser:
    """The parser; only the ``selected`` subcommand's module is imported to add its options."""
    parser = argparse.ArgumentParser(
        prog="usertcp", description="usertcp: a sans-IO TCP/IP stack in pure Python.",
        epilog="Run 'usertcp COMMAND --help' for the options of one command.")
    parser.add_argument("--version", action="version", version=f"usertcp {usertcp.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, cmd in COMMANDS.items():
        p = sub.add_parser(name, help=cmd.help, description=cmd.help.replace("%%", "%"))
        if name == selected:
            mod = importlib.import_module(cmd.module)
            getattr(mod, cmd.setup)(p)
            p.set_defaults(_run=getattr(mod, cmd.run))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    selected = next((a for a in args_list if not a.startswith("-")), None)
    parser = build_parser(selected if selected in COMMANDS else None)
    args = parser.parse_args(args_list)
    run = getattr(args, "_run", None)
    if run is None:       # a command whose module didn't wire itself (shouldn't happen)
        parser.error(f"{args.command}: not available")
    try:
        status: int = run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:      # e.g. piped into head
        return 141
    return status


# ----------------------------------------------------------------------------- bench


def _bench_arguments(parser: argparse.ArgumentParser) -> None:
    listing = "; ".join(f"{k}: {h}" for k, (_, h) in BENCHMARKS.items())
    parser.description = f"Run a benchmark. Available: {listing}."
    parser.add_argument("name", choices=sorted(BENCHMARKS), metavar="NAME",
                        help="benchmark to run: " + ", ".join(sorted(BENCHMARKS)))
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object")
    parser.add_argument("--size", type=int, help="bytes to transfer (throughput)")
    parser.add_argument("--loss", type=float, help="packet loss probability (throughput)")
    parser.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                        help="any other keyword of the benchmark's run() (repeatable)")


def _parse_value(text: str) -> Any:
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def _bench_cli(args: argparse.Namespace) -> int:
    module, _ = BENCHMARKS[args.name]
    opts: dict[str, Any] = {}
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"usertcp bench: -o needs KEY=VALUE, got {item!r}", file=sys.stderr)
            return 2
        opts[key.replace("-", "_")] = _parse_value(value)
    for key in ("size", "loss"):
        if getattr(args, key) is not None:
            opts[key] = getattr(args, key)
    run = importlib.import_module(module).run
    accepted = inspect.signature(run).parameters
    unknown = sorted(set(opts) - set(accepted))
    if unknown:
        print(f"usertcp bench {args.name}: unknown option(s) {', '.join(unknown)}; "
              f"it takes: {', '.join(accepted) or 'none'}", file=sys.stderr)
        return 2
    try:
        if sys.stderr.isatty():
            # A live status on a terminal while a long benchmark runs; nothing otherwise.
            from rich.console import Console

            with Console(stderr=True).status(f"bench {args.name}: running"):
                results: dict[str, Any] = run(**opts)
        else:
            print(f"bench {args.name}: running", file=sys.stderr)
            results = run(**opts)
    except ValueError as e:
        print(f"usertcp bench {args.name}: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(results))
    elif sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"bench {args.name}", title_justify="left")
        table.add_column("metric")
        table.add_column("value", justify="right")
        for k, v in results.items():
            table.add_row(k, _fmt(v))
        Console().print(table)
    else:
        for k, v in results.items():
            print(f"{k}: {_fmt(v)}")
    return 0


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


if __name__ == "__main__":
    sys.exit(main())
