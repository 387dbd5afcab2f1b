"""``usertcp bench tun``: bulk throughput between the kernel and usertcp over a TUN device.

Everything runs in network namespaces made here and removed afterwards (needs root
and /dev/net/tun). For each of offloads on / off, ``usertcp serve`` runs as a
subprocess in a fresh namespace and a kernel client in the same namespace moves
``size`` bytes of the :func:`usertcp.apps.basic.pattern` stream:

* ``rx``: kernel -> usertcp (the ``discard`` app, which hashes what it reads);
* ``tx``: usertcp -> kernel (the ``source`` app; the client hashes and checks).

The reference is kernel -> kernel over a veth pair between two namespaces, same size,
same client code; ``ratio_*`` is usertcp's rate over that. A second receive run with
``--profile`` (cProfile of the serve process's loop, which costs some speed, so it is
not the measured run) gives the top functions by own time under ``profile``.
``queues`` > 1 adds a multi-queue receive run with ``flows`` parallel connections,
plain link, once with threads and once with processes, against one queue.

Latency, against the same kernel -> kernel veth reference: ``connect`` is connection
setup (SYN to established: a kernel client's ``connect()`` to the ``echo`` app, then
close), ``rr`` a 1-byte request/response round trip on one connection (TCP_NODELAY);
medians in microseconds, ``ratio_*`` the kernel's median over usertcp's (1.0 = as fast).

Rates are ``MB_per_s``: 10^6 bytes per second of wall time, connect to the receiver's EOF.
``build`` says which usertcp build served (pure or compiled, see setup.py); with a compiled
install, ``pure`` repeats the usertcp runs on the pure build (``USERTCP_PURE=1``) in the
same invocation, so both builds' ratios sit side by side.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from usertcp import builds
from usertcp.apps.basic import pattern_sha256, pattern_views
from usertcp.bench.process import NamespaceProcess
from usertcp.net import netns

DEV = "utbench0"
PEER, US = "10.77.0.1", "10.77.0.2"
VETH_A, VETH_B = "10.77.1.1", "10.77.1.2"
MB = 1_000_000


class ServeProcess(NamespaceProcess):
    """``usertcp serve`` on the bench's TUN device in namespace ``ns`` until :meth:`stop` (SIGTERM)."""

    def __init__(self, ns: str, *args: str, timeout: float = 30.0, pure: bool = False) -> None:
        from usertcp import cli

        module = "usertcp" if "serve" in cli.COMMANDS else "usertcp.apps.serve"
        prefix = ("serve",) if module == "usertcp" else ()
        super().__init__(ns, module, *prefix, "--tun", DEV, "--address", US, "--peer-address", f"{PEER}/24",
                         "--quiet", *args, timeout=timeout, pure=pure)


def _send(addr: str, port: int, n: int) -> float:
    s = socket.create_connection((addr, port), timeout=60)
    try:
        t0 = time.monotonic()
        for v in pattern_views(n, chunk=1 << 20):
            s.sendall(v)
        s.shutdown(socket.SHUT_WR)
        while s.recv(65536):
            pass
        return time.monotonic() - t0
    finally:
        s.close()


def _recv(addr: str, port: int) -> tuple[int, str, float]:
    s = socket.create_connection((addr, port), timeout=60)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        t0 = time.monotonic()
        h = hashlib.sha256()
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        n = 0
        while k := s.recv_into(buf):
            h.update(view[:k])
            n += k
        return n, h.hexdigest(), time.monotonic() - t0
    finally:
        s.close()


def _parallel_send(addr: str, port: int, n: int, flows: int) -> float:
    errors: list[BaseException] = []

    def one() -> None:
        try:
            _send(addr, port, n)
        except BaseException as e:
            errors.append(e)

    t0 = time.monotonic()
    ts = [threading.Thread(target=one) for _ in range(flows)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    return time.monotonic() - t0


def _connect_times(addr: str, port: int, n: int) -> list[float]:
    """``n`` connection setups: the wall time of each ``connect()`` (SYN out to established)."""
    times = []
    for _ in range(n):
        s = socket.socket()
        s.settimeout(10)
        try:
            t0 = time.perf_counter()
            s.connect((addr, port))
            times.append(time.perf_counter() - t0)
        finally:
            s.close()
    return times


def _rr_times(addr: str, port: int, n: int) -> list[float]:
    """``n`` 1-byte request/response round trips on one connection to an echo server."""
    s = socket.create_connection((addr, port), timeout=10)
    try:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            s.sendall(b"x")
            if s.recv(1) != b"x":
                raise RuntimeError("echo server: wrong or no reply")
            times.append(time.perf_counter() - t0)
        return times
    finally:
        s.close()


def _latency(addr: str, port: int, connects: int, round_trips: int) -> dict[str, Any]:
    ct = sorted(_connect_times(addr, port, connects))
    rr = sorted(_rr_times(addr, port, round_trips))

    def us(times: list[float], q: float) -> float:
        return round(times[int(len(times) * q)] * 1e6, 1)

    return {"connect_us": us(ct, 0.5), "connect_us_p90": us(ct, 0.9), "rr_us": us(rr, 0.5),
            "rr_us_p90": us(rr, 0.9), "connects": connects, "round_trips": round_trips}


def _usertcp_latency(tmp: Path, connects: int, round_trips: int, *, pure: bool = False,
                     profile: bool = False) -> dict[str, Any]:
    """Connection setup and 1-byte round trips: a kernel client against usertcp's echo over TUN."""
    prof = tmp / "profile.json"
    args = ["--app", "echo", "--offload"] + (["--profile", str(prof)] if profile else [])
    with netns.namespace("utcpb") as ns:
        srv = ServeProcess(ns, *args, pure=pure)
        try:
            out = netns.call_in_namespace(ns, _latency, US, 7, connects, round_trips)
        finally:
            rc = srv.stop()
    if rc != 0:
        raise RuntimeError(f"usertcp serve failed ({rc}): {srv.stderr}")
    if profile:
        out["profile"] = json.loads(prof.read_text())
    return out


def _echo_forever(srv: socket.socket) -> None:
    """A kernel echo server, one connection at a time, until ``srv`` is closed."""
    while True:
        try:
            conn, _ = srv.accept()
        except OSError:
            return
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while data := conn.recv(65536):
                conn.sendall(data)


def _veth_latency(connects: int, round_trips: int) -> dict[str, Any]:
    """The kernel -> kernel reference for :func:`_usertcp_latency`, over a veth pair."""
    with netns.namespace("utcpb") as a, netns.namespace("utcpb") as b:
        netns.connect_veth(a, b, "vbench", VETH_A, VETH_B)
        srv = netns.call_in_namespace(b, _kernel_server, 7)
        t = threading.Thread(target=_echo_forever, args=(srv,), daemon=True)
        t.start()
        try:
            out: dict[str, Any] = netns.call_in_namespace(a, _latency, VETH_B, 7, connects, round_trips)
        finally:
            srv.shutdown(socket.SHUT_RDWR)
            srv.close()
            t.join(10)
    return out


def _usertcp_run(size: int, offload: bool, direction: str, tmp: Path, *, profile: bool = False,
                 queues: int = 1, queue_mode: str = "thread", flows: int = 1,
                 pure: bool = False) -> dict[str, Any]:
    stats = tmp / "stats.json"
    report = tmp / "report.jsonl"
    for f in (stats, report):
        f.unlink(missing_ok=True)
    args = ["--offload" if offload else "--no-offload", "--stats-file", str(stats), "--report", str(report),
            "--queues", str(queues), "--queue-mode", queue_mode]
    prof = tmp / "profile.json"
    if profile:
        args += ["--profile", str(prof)]
    with netns.namespace("utcpb") as ns:
        if direction == "rx":
            srv = ServeProcess(ns, "--app", "discard", *args, pure=pure)
            try:
                if flows == 1:
                    dt = netns.call_in_namespace(ns, _send, US, 9, size)
                else:
                    dt = netns.call_in_namespace(ns, _parallel_send, US, 9, size, flows)
            finally:
                rc = srv.stop()
            reps = [json.loads(line) for line in report.read_text().splitlines()]
            ok = len(reps) == flows and all(r["rx_sha256"] == pattern_sha256(size) for r in reps)
        else:
            srv = ServeProcess(ns, "--app", "source", "--bytes", str(size), *args, pure=pure)
            try:
                n, digest, dt = netns.call_in_namespace(ns, _recv, US, 19)
            finally:
                rc = srv.stop()
            ok = n == size and digest == pattern_sha256(size)
    if rc != 0:
        raise RuntimeError(f"usertcp serve failed ({rc}): {srv.stderr}")
    st = json.loads(stats.read_text())
    c = st["counters"]
    out: dict[str, Any] = {"MB_per_s": round(size * flows / dt / MB, 1), "seconds": round(dt, 3),
                           "sha256_ok": ok, "retrans_segs": c.get("TcpRetransSegs", 0),
                           "segs_in": c.get("TcpInSegs", 0), "segs_out": c.get("TcpOutSegs", 0)}
    if profile:
        out["profile"] = json.loads(prof.read_text())
    return out


def _kernel_server(port: int) -> socket.socket:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((VETH_B, port))
    srv.listen(8)
    return srv


def _discard_one(srv: socket.socket, result: list[str]) -> None:
    conn, _ = srv.accept()
    h = hashlib.sha256()
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    while k := conn.recv_into(buf):
        h.update(view[:k])
    result.append(h.hexdigest())
    conn.close()


def _veth_run(size: int) -> dict[str, Any]:
    """Kernel -> kernel over a veth pair between two namespaces (offloads as the kernel sets them)."""
    with netns.namespace("utcpb") as a, netns.namespace("utcpb") as b:
        netns.connect_veth(a, b, "vbench", VETH_A, VETH_B)
        srv = netns.call_in_namespace(b, _kernel_server, 5001)
        result: list[str] = []
        t = threading.Thread(target=_discard_one, args=(srv, result), daemon=True)
        t.start()
        try:
            dt = netns.call_in_namespace(a, _send, VETH_B, 5001, size)
            t.join(30)
        finally:
            srv.close()
    return {"MB_per_s": round(size / dt / MB, 1), "seconds": round(dt, 3),
            "sha256_ok": result == [pattern_sha256(size)]}


def run(size: int = 200 * MB, profile_size: int = 50 * MB, profile_top: int = 15, queues: int = 2,
        flows: int = 4, mq_size: int = 25 * MB, connects: int = 200, round_trips: int = 2000,
        pure_too: int = 1) -> dict[str, Any]:
    """Measure; see the module docstring. ``queues`` 1 skips the multi-queue runs, ``pure_too`` 0
    the pure-build runs of a compiled install, ``profile_size`` 0 the profiles."""
    if os.geteuid() != 0 or not os.path.exists("/dev/net/tun"):
        raise ValueError("bench tun needs root and /dev/net/tun (it makes network namespaces)")
    if size <= 0 or profile_size < 0 or connects <= 0 or round_trips <= 0:
        raise ValueError("size, connects and round_trips must be > 0")
    build = builds.current()
    results: dict[str, Any] = {"size": size, "build": build}
    with tempfile.TemporaryDirectory(prefix="utcp-bench-") as d:
        tmp = Path(d)
        veth = _veth_run(size)
        veth.update(_veth_latency(connects, round_trips))
        results["kernel_veth"] = veth
        results.update(_usertcp_figures(size, veth, tmp, connects, round_trips, pure=build == "pure"))
        if pure_too and build == "compiled":
            results["pure"] = _usertcp_figures(size, veth, tmp, connects, round_trips, pure=True)
        if profile_size:
            results["profile"] = _profiles(profile_size, profile_top, tmp, connects, round_trips)
        if queues > 1:
            mq: dict[str, Any] = {"flows": flows, "bytes_per_flow": mq_size, "offload": False}
            mq["queues_1"] = _usertcp_run(mq_size, False, "rx", tmp, flows=flows)
            for mode in ("thread", "process"):
                mq[f"queues_{queues}_{mode}"] = _usertcp_run(mq_size, False, "rx", tmp, queues=queues,
                                                             queue_mode=mode, flows=flows)
            results["multiqueue"] = mq
    results["goal_rx_quarter_of_kernel"] = results["ratio_rx_offload"] >= 0.25
    # Issue 19's targets: offloads >= 0.8x (rx) / 0.6x (tx) of kernel-to-kernel, plain >= 0.15x.
    results["goal_rx_offload_0.8"] = results["ratio_rx_offload"] >= 0.8
    results["goal_tx_offload_0.6"] = results["ratio_tx_offload"] >= 0.6
    results["goal_plain_0.15"] = min(results["ratio_rx_plain"], results["ratio_tx_plain"]) >= 0.15
    return results


def _usertcp_figures(size: int, veth: dict[str, Any], tmp: Path, connects: int, round_trips: int,
                     *, pure: bool) -> dict[str, Any]:
    """Every usertcp run against the kernel reference: throughput both ways with and without
    offloads, then connection setup and round trips."""
    out: dict[str, Any] = {}
    for offload in (True, False):
        key = "offload" if offload else "plain"
        for direction in ("rx", "tx"):
            r = _usertcp_run(size, offload, direction, tmp, pure=pure)
            out[f"usertcp_{direction}_{key}"] = r
            out[f"ratio_{direction}_{key}"] = round(r["MB_per_s"] / veth["MB_per_s"], 3)
    lat = _usertcp_latency(tmp, connects, round_trips, pure=pure)
    out["usertcp_latency"] = lat
    out["ratio_connect"] = round(veth["connect_us"] / lat["connect_us"], 3)
    out["ratio_rr"] = round(veth["rr_us"] / lat["rr_us"], 3)
    return out


def _profiles(size: int, top: int, tmp: Path, connects: int, round_trips: int) -> dict[str, Any]:
    """cProfile of the serve loop on each path (separate runs: profiling costs speed). Functions
    of a compiled build appear as single entries (their callees are not seen)."""
    prof: dict[str, Any] = {}
    for offload in (True, False):
        key = "offload" if offload else "plain"
        for direction in ("rx", "tx"):
            r = _usertcp_run(size, offload, direction, tmp, profile=True)
            prof[f"{direction}_{key}"] = {"size": size, "MB_per_s_profiled": r["MB_per_s"], **r["profile"]}
            prof[f"{direction}_{key}"]["top"] = prof[f"{direction}_{key}"]["top"][:top]
    lat = _usertcp_latency(tmp, connects, round_trips, profile=True)
    prof["connect_rr"] = {**lat["profile"], "connects": connects, "round_trips": round_trips}
    prof["connect_rr"]["top"] = prof["connect_rr"]["top"][:top]
    return prof


if __name__ == "__main__":
    print(json.dumps(run(**{k: int(v) for k, v in (a.split("=", 1) for a in sys.argv[1:])}), indent=1))
