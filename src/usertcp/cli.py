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
import re
import sys
from collections.abc import Sequence
from typing import Any, NamedTuple

import usertcp
from usertcp.extras import available, missing_extra


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
                "banner latency in RTTs, wake-ups, CPU per connection: accept-then-send vs preload vs "
                "preload+TFO, SYN-ACK loss both ways; over TUN the design's table, kernel as client"),
    "tun": ("usertcp.bench.tun",
            "kernel<->usertcp throughput over TUN (offload on/off) vs kernel<->kernel over veth"),
    "fastpath": ("usertcp.bench.fastpath",
                 "receive cost per segment with header prediction on and off: bulk, ACKs, "
                 "request/response, passive and active side, plain and TCP-MD5 (-o instructions=True)"),
    "dctcp": ("usertcp.bench.dctcp",
              "bottleneck queue delay and utilisation: DCTCP (step, ramp marking) vs CUBIC (ECN, tail drop)"),
    "apps": ("usertcp.bench.apps",
             "uvicorn requests/s on usertcp over TUN vs the kernel (wrk); SMTP setup rate, preload or not"),
    "hostile": ("usertcp.bench.hostile",
                "per-ACK cost of SACK attacks; legitimate clients served during SYN flood, "
                "zero-window hoarding and SACK storm vs no attack"),
}


class _VersionAction(argparse.Action):
    """``--version``: says which build runs, so it inspects the install only when asked."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        from usertcp import builds

        print(f"usertcp {usertcp.__version__} ({builds.describe()})")
        parser.exit()


def build_parser(selected: str | None = None) -> argparse.ArgumentParser:
    """The parser; only the ``selected`` subcommand's module is imported to add its options."""
    parser = argparse.ArgumentParser(
        prog="usertcp", description="usertcp: a sans-IO TCP/IP stack in pure Python.",
        epilog="Run 'usertcp COMMAND --help' for the options of one command.")
    parser.add_argument("--version", action=_VersionAction, nargs=0,
                        help="show the version and which build runs (pure Python or compiled), then exit")
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
    except ImportError as e:     # an optional dependency (pyroute2, rich, matplotlib) is missing
        err = missing_extra(e, f"usertcp {args.command}")
        if err is None:
            raise
        print(err, file=sys.stderr)      # "usertcp CMD needs X ...: pip install 'usertcp[EXTRA]'"
        return 2
    return status


# ----------------------------------------------------------------------------- sizes

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([kKMGT]?)(i?)B?\s*$")
_SIZE_POWER = {"": 0, "k": 1, "K": 1, "M": 2, "G": 3, "T": 4}


def parse_size(text: str) -> int:
    """A byte count for every command's size option: ``5M`` = 5,000,000, ``64Ki`` = 65,536.

    Suffixes k/K, M, G, T are powers of 1000, ``Ki``/``Mi``/``Gi``/``Ti`` powers of 1024;
    a trailing ``B`` is allowed (``5MB``, ``1MiB``). An argparse ``type=``: a bad size is a
    usage error, never a traceback.
    """
    m = _SIZE.match(text)
    if m is None or (m.group(3) and not m.group(2)):
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 500000, 64k, 5M, 1Mi)")
    base = 1024 if m.group(3) else 1000
    value = float(m.group(1)) * base ** _SIZE_POWER[m.group(2)]
    if value != int(value):
        raise argparse.ArgumentTypeError(f"not a whole number of bytes: {text!r}")
    return int(value)


# ----------------------------------------------------------------------------- bench


def _bench_arguments(parser: argparse.ArgumentParser) -> None:
    listing = "; ".join(f"{k}: {h}" for k, (_, h) in BENCHMARKS.items())
    parser.description = f"Run a benchmark. Available: {listing}."
    parser.add_argument("name", choices=sorted(BENCHMARKS), metavar="NAME",
                        help="benchmark to run: " + ", ".join(sorted(BENCHMARKS)))
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object")
    parser.add_argument("--size", type=parse_size, help="bytes to transfer (throughput; 5M, 64Ki...)")
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
        if sys.stderr.isatty() and available("rich"):
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
    elif sys.stdout.isatty() and available("rich"):
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
