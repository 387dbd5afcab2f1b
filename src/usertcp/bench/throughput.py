"""Bulk transfer between two stacks in virtual time, timed in process CPU seconds.

Virtual time makes the network free: what is measured is the stack (both ends,
plus the in-memory links and the event loop), which is what a pure-Python TCP
spends per segment. The raw Connection API is used, not sockets, so the socket
layer's overhead is not counted.

Both builds in one run: when the per-packet modules are installed compiled (mypyc,
see setup.py), each build runs in its own subprocess (``USERTCP_PURE=1`` for the pure
one), alternating, ``repeats`` times; each build's figures are its fastest run (noise
on a shared machine only adds CPU time). ``compiled_speedup`` is the pure build's CPU
per segment over the compiled one's. The top-level figures are those of the build this
process runs (``build``).

With ``instructions=True`` each build is also measured in CPU instructions per segment
under ``valgrind --tool=callgrind`` (stable on a shared machine, unlike CPU time): two
transfers of ``instr_size`` and twice that, in fresh interpreters; the difference of their
instruction counts over the difference of their segment counts leaves out start-up,
imports and the handshake. Both sizes must reach the steady state: the sender closes once
its last write is queued, and for the rest (the last ~1.5 MB here, what the send buffer
holds) header prediction is off on its side, every ACK taking the slow path (Linux too
leaves ESTABLISHED at close()); below ~2 MB a transfer is all in that regime, hence 4 MB.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import usertcp
from usertcp import builds
from usertcp.net.driver import VirtualTimeDriver
from usertcp.net.memnet import LinkConfig, Network
from usertcp.tcp.connection import Connection
from usertcp.tcp.stack import Stack

_CHUNK = 1 << 18


def run(size: int = 20_000_000, loss: float = 0.0, delay: float = 0.001, bandwidth_bps: float = 100e6,
        seed: int = 1, repeats: int = 3, instructions: bool = False,
        instr_size: int = 4_000_000) -> dict[str, Any]:
    """Send ``size`` bytes a -> b under each installed build; see the module docstring."""
    result = _run_timed(size, loss, delay, bandwidth_bps, seed, repeats)
    if instructions:
        result["instructions"] = instruction_figures(instr_size, loss, delay, bandwidth_bps, seed)
    return result


def _run_timed(size: int, loss: float, delay: float, bandwidth_bps: float, seed: int,
               repeats: int) -> dict[str, Any]:
    if size <= 0:
        raise ValueError("size must be > 0")
    if not 0.0 <= loss < 1.0:
        raise ValueError("loss must be in [0, 1)")
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    options: dict[str, Any] = {"size": size, "loss": loss, "delay": delay, "bandwidth_bps": bandwidth_bps,
                               "seed": seed}
    current = builds.current()
    if not builds.compiled_modules():
        best = min((measure(**options) for _ in range(repeats)), key=lambda r: r["cpu_s"])
        return {**best, "build": current, "builds": {"pure": best}, "compiled_speedup": None}
    runs: dict[str, list[dict[str, Any]]] = {"compiled": [], "pure": []}
    for _ in range(repeats):
        for build in runs:
            runs[build].append(_measure_in_subprocess(build, options))
    by_build = {b: min(rs, key=lambda r: r["cpu_s"]) for b, rs in runs.items()}
    compiled, pure = by_build["compiled"], by_build["pure"]
    speedup = pure["us_per_segment"] / compiled["us_per_segment"]
    return {**by_build[current], "build": current, "builds": by_build,
            "compiled_speedup": round(speedup, 2), "goal_compiled_3x": speedup >= 3.0,
            "goal_compiled_under_15us": compiled["us_per_segment"] < 15.0}


def _build_env(build: str) -> dict[str, str]:
    """The environment of a fresh interpreter that runs ``build`` from this same install."""
    env = dict(os.environ)
    here = str(Path(usertcp.__file__).resolve().parents[1])     # the directory usertcp came from
    env["PYTHONPATH"] = here + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("USERTCP_PURE", None)
    if build == "pure":
        env["USERTCP_PURE"] = "1"
    return env


def _measure_in_subprocess(build: str, options: dict[str, Any]) -> dict[str, Any]:
    """One :func:`measure` in a fresh interpreter running ``build`` from this same install."""
    args = [f"{k}={v}" for k, v in options.items()]
    p = subprocess.run([sys.executable, "-m", "usertcp.bench.throughput", *args], env=_build_env(build),
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"bench throughput ({build} build) failed: {p.stderr.strip()}")
    result: dict[str, Any] = json.loads(p.stdout)
    if result["build"] != build:
        raise RuntimeError(f"asked for the {build} build, the subprocess ran {result['build']}")
    return result


_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def _instructions(build: str, options: dict[str, Any]) -> tuple[int, int]:
    """(instructions, data segments) of one :func:`measure` under callgrind, running ``build``."""
    args = [f"{k}={v}" for k, v in options.items()]
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
           sys.executable, "-m", "usertcp.bench.throughput", *args]
    p = subprocess.run(cmd, env=_build_env(build), capture_output=True, text=True, timeout=3600)
    m = _COLLECTED.search(p.stderr)
    if p.returncode != 0 or m is None:
        raise RuntimeError(f"bench throughput under callgrind ({build} build) failed: {p.stderr[-2000:]}")
    return int(m.group(1)), int(json.loads(p.stdout)["segments"])


def instruction_figures(size: int, loss: float, delay: float, bandwidth_bps: float,
                        seed: int) -> dict[str, Any]:
    """Instructions per segment of each installed build (see the module docstring)."""
    if shutil.which("valgrind") is None:
        raise ValueError("instructions=True needs valgrind")
    if size <= 0:
        raise ValueError("instr_size must be > 0")
    builds_here = ["compiled", "pure"] if builds.compiled_modules() else ["pure"]
    out: dict[str, Any] = {"size": size}
    for build in builds_here:
        (i1, s1), (i2, s2) = (_instructions(build, {"size": n, "loss": loss, "delay": delay,
                                                    "bandwidth_bps": bandwidth_bps, "seed": seed})
                              for n in (size, 2 * size))
        out[build] = {"instr_per_segment": round((i2 - i1) / max(s2 - s1, 1)), "segments": s2 - s1}
    if "compiled" in out:
        out["compiled_speedup"] = round(out["pure"]["instr_per_segment"] /
                                        out["compiled"]["instr_per_segment"], 2)
    return out


def measure(size: int, loss: float, delay: float, bandwidth_bps: float, seed: int) -> dict[str, Any]:
    """One transfer of ``size`` bytes a -> b in this process; rates per CPU second and per segment."""
    net = Network(seed=seed)
    a, b = Stack(["10.0.0.1"], name="a"), Stack(["10.0.0.2"], name="b")
    ha, hb = net.add_host(a, ["10.0.0.1"]), net.add_host(b, ["10.0.0.2"])
    net.connect(ha, hb, LinkConfig(delay=delay, bandwidth_bps=bandwidth_bps, loss=loss))
    drv = VirtualTimeDriver(net)
    payload = bytes(_CHUNK)      # content doesn't matter; bytes go by reference
    cpu0 = time.process_time()
    lst = b.listen(5001)
    c = a.create_connection("10.0.0.2", 5001)
    a.connect(c, drv.now())
    if not drv.run_until(lambda: bool(lst.accept_queue), 30):
        raise RuntimeError("handshake did not complete")
    s = lst.accept()
    assert s is not None
    sent = received = 0
    while received < size:
        if sent < size and c.send_space > 0:
            n = c.send(payload if size - sent >= _CHUNK else payload[:size - sent], drv.now())
            sent += n
            if sent == size:
                c.close(drv.now())
            drv.kick()
        if s.readable_bytes:
            received += len(s.recv(1 << 22, drv.now()))
            drv.kick()
            continue
        if not drv.run_until(_progress(c, s, sent < size), 120):
            raise RuntimeError(f"transfer stalled at {received}/{size} bytes")
    cpu = time.process_time() - cpu0
    info = c.info()
    segs = max(int(info["tcpi_data_segs_out"]), 1)
    return {
        "bytes": size,
        "bytes_per_s": size / cpu if cpu > 0 else float("inf"),
        "us_per_segment": cpu * 1e6 / segs,
        "segments": segs,
        "retransmits": a.counters["TcpRetransSegs"],
        "cpu_s": cpu,
        "virtual_s": drv.now(),
        "goodput_bps": size * 8 / drv.now() if drv.now() > 0 else 0.0,
        "events": drv.events,
    }


def _progress(c: Connection, s: Connection, sending: bool) -> Callable[[], bool]:
    """The sender has room (while it still has data) or the receiver has something to read."""
    return lambda: s.readable_bytes > 0 or (sending and c.send_space > 0)


if __name__ == "__main__":
    # One measurement in this process, as JSON: what run() starts per build.
    opts = {k: float(v) if k in ("loss", "delay", "bandwidth_bps") else int(v)
            for k, v in (a.split("=", 1) for a in sys.argv[1:])}
    print(json.dumps({**measure(**opts), "build": builds.current()}))  # type: ignore[arg-type]
