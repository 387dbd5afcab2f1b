"""``usertcp drill``: run packetdrill scripts against fresh usertcp stacks (virtual time).

The CLI owner wires it: ``add_arguments(subparser)`` then ``main(args)`` (exit status).
Besides its own options it takes packetdrill's (``--local_ip=...``, ``--mss 1000``,
``--tolerance_usecs=...``, ``-D NAME=VALUE``...), which win over a script's own, so a
packetdrill command line works unchanged; ``--ip-version ksft`` runs each script the way the
kernel's ksft_runner.sh does (the families its name allows, with that runner's addresses), and
``--ip-version run_all`` the way packetdrill's own run_all.py runs the upstream corpus.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TextIO

from usertcp.drill.cmdline import KSFT_ARGS, RUN_ALL_ARGS, ksft_families, parse_argv, run_all_families
from usertcp.drill.defaults import KNOWN_OPTIONS
from usertcp.drill.runner import RunOptions, ScriptResult, iter_scripts, run_file
from usertcp.obs.progress import progress

__all__ = ["add_arguments", "main", "summary_line"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths", nargs="+", metavar="PATH", help=".pkt files or folders (searched recursively)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object with every result")
    parser.add_argument("--verbose", "-v", action="store_true", help="print details of passing scripts too")
    parser.add_argument(
        "--ip-version",
        choices=("4", "6", "both", "ksft", "run_all"),
        default="4",
        help="address family to run each script over (default 4); ksft: as the kernel's "
        "ksft_runner.sh (the families a script's name allows, that runner's addresses); "
        "run_all: as packetdrill's run_all.py (its name rule and addresses; ipv4, "
        "ipv4-mapped-ipv6 and ipv6)",
    )
    parser.add_argument(
        "-D",
        dest="defines",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="define a script symbol (like packetdrill -D)",
    )
    parser.add_argument(
        "--tolerance-usecs",
        type=int,
        default=None,
        help="timing tolerance in microseconds (overrides the scripts' --tolerance_usecs)",
    )
    pd = parser.add_argument_group("packetdrill options (they win over a script's own)")
    for name, takes_value in KNOWN_OPTIONS.items():
        if name in ("verbose", "define"):
            continue            # -v/--verbose and -D above
        if takes_value:
            pd.add_argument(f"--{name}", dest=f"pd_{name}", metavar="VALUE", default=None)
        else:
            pd.add_argument(f"--{name}", dest=f"pd_{name}", action="store_const", const="", default=None)
    pd.add_argument("--define", dest="defines", action="append", metavar="NAME=VALUE", help="as -D")


def summary_line(results: list[ScriptResult]) -> str:
    counts = {s: sum(1 for r in results if r.status == s) for s in ("passed", "failed", "skipped")}
    return f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"


def _defines(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        name, sep, val = item.partition("=")
        if not name or not sep:
            raise SystemExit(f"usertcp drill: -D expects NAME=VALUE, got {item!r}")
        out[name] = val
    return out


def _packetdrill_options(args: argparse.Namespace) -> dict[str, str]:
    return {name: val for name in KNOWN_OPTIONS if (val := getattr(args, f"pd_{name}", None)) is not None}


def _run_options(args: argparse.Namespace, path: Path, ipv: str) -> RunOptions:
    """One run's options: the runner's (ksft, run_all) per-family command line first, then the
    user's (they win)."""
    options = _packetdrill_options(args)
    defines = _defines(args.defines)
    runner_args = {"ksft": KSFT_ARGS, "run_all": RUN_ALL_ARGS}.get(args.ip_version)
    if runner_args is not None:
        inv = parse_argv(runner_args[ipv])
        options = {**inv.options, **options}
        defines = {**inv.defines, **defines}
    return RunOptions(ip_version=ipv, defines=defines, tolerance_usecs=args.tolerance_usecs,
                      verbose=args.verbose, options=options)  # fmt: skip


def _families(args: argparse.Namespace, path: Path) -> list[str]:
    if args.ip_version == "ksft":
        return ksft_families(path.name)
    if args.ip_version == "run_all":
        return run_all_families(path.name)
    pinned = _packetdrill_options(args).get("ip_version")
    if pinned is not None:
        return [pinned]
    return {"4": ["ipv4"], "6": ["ipv6"], "both": ["ipv4", "ipv6"]}[args.ip_version]


def main(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    _defines(args.defines)          # reject a malformed -D before running anything
    results: list[ScriptResult] = []
    scripts = list(iter_scripts(args.paths))
    missing = [str(p) for p in scripts if not p.exists()]
    runs = [(path, ipv) for path in scripts for ipv in _families(args, path)]
    tag = len({ipv for _, ipv in runs}) > 1
    # A progress bar on a terminal; plain result lines otherwise (and always with --json off).
    tty = out is sys.stdout and sys.stdout.isatty() and not args.verbose
    for path, ipv in progress(runs, len(runs), "drill", tty=tty) if tty else runs:
        res = run_file(path, _run_options(args, path, ipv))
        results.append(res)
        if not args.json and (not tty or res.status != "passed"):
            _print_result(res, out, verbose=args.verbose, tag=tag)
    if args.json:
        doc = {
            "scripts": [r.to_json() | {"details": r.details} for r in results],
            "passed": sum(r.status == "passed" for r in results),
            "failed": sum(r.status == "failed" for r in results),
            "skipped": sum(r.status == "skipped" for r in results),
        }
        out.write(json.dumps(doc, indent=2) + "\n")
    else:
        out.write(summary_line(results) + "\n")
    if missing and not results:
        return 2
    return 1 if any(r.status == "failed" for r in results) else 0


def _print_result(res: ScriptResult, out: TextIO, *, verbose: bool, tag: bool) -> None:
    name = res.path + (f" [{res.ip_version}]" if tag else "")
    where = f":{res.line}" if res.line is not None else ""
    if res.status == "passed":
        out.write(f"PASS  {name}" + (f"  ({res.reason})" if res.reason else "") + "\n")
    elif res.status == "skipped":
        out.write(f"SKIP  {name}{where}: {res.reason}\n")
    else:
        out.write(f"FAIL  {name}{where}: {res.reason}\n")
    if res.status == "failed" or verbose:
        for line in res.details:
            out.write(f"      {line}\n")


if __name__ == "__main__":  # pragma: no cover - the CLI owner wires the real entry point
    p = argparse.ArgumentParser(prog="usertcp drill")
    add_arguments(p)
    raise SystemExit(main(p.parse_args()))
