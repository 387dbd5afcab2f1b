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

Rates are ``MB_per_s``: 10^6 bytes per second of wall time, connect to the receiver's EOF.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from usertcp.apps.basic import pattern_sha256, pattern_views
from usertcp.net import netns

DEV = "utbench0"
PEER, US = "10.77.0.1", "10.77.0.2"
VETH_A, VETH_B = "10.77.1.1", "10.77.1.2"
MB = 1_000_000


class ServeProcess:
    """``usertcp serve`` in namespace ``ns`` until :meth:`stop` (SIGTERM)."""

    def __init__(self, ns: str, *args: str, timeout: float = 30.0) -> None:
        src = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
        from usertcp import cli

        cmd = [sys.executable, "-m", "usertcp", "serve"] if "serve" in cli.COMMANDS else \
            [sys.executable, "-m", "usertcp.apps.serve"]
        # stderr to a file: a pipe nobody reads could fill up and block the server.
        self._err = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(["ip", "netns", "exec", ns, *cmd, "--tun", DEV, "--address", US,
                                      "--peer-address", f"{PEER}/24", "--quiet", *args],
                                     stdout=subprocess.PIPE, stderr=self._err, text=True, env=env)
        self.stderr = ""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line or line.startswith("ready "):
                break
        if not line.startswith("ready "):
            self.stop()
            raise RuntimeError(f"usertcp serve did not start: {self.stderr}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._err.seek(0)
        self.stderr = self._err.read()
        self._err.close()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode


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


def _usertcp_run(size: int, offload: bool, direction: str, tmp: Path, *, profile: bool = False,
                 queues: int = 1, queue_mode: str = "thread", flows: int = 1) -> dict[str, Any]:
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
            srv = ServeProcess(ns, "--app", "discard", *args)
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
            srv = ServeProcess(ns, "--app", "source", "--bytes", str(size), *args)
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
                           "sha256_ok": ok,
                           "retrans_segs": c.get("TcpRetransSegs", 0), "segs_in": c.get("TcpInSegs", 0),
                           "segs_out": c.get("TcpOutSegs", 0)}
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
        flows: int = 4, mq_size: int = 25 * MB) -> dict[str, Any]:
    """Measure; see the module docstring. ``queues`` 1 skips the multi-queue runs."""
    if os.geteuid() != 0 or not os.path.exists("/dev/net/tun"):
        raise ValueError("bench tun needs root and /dev/net/tun (it makes network namespaces)")
    if size <= 0 or profile_size < 0:
        raise ValueError("size must be > 0")
    results: dict[str, Any] = {"size": size}
    with tempfile.TemporaryDirectory(prefix="utcp-bench-") as d:
        tmp = Path(d)
        veth = _veth_run(size)
        results["kernel_veth"] = veth
        for offload in (True, False):
            key = "offload" if offload else "plain"
            for direction in ("rx", "tx"):
                r = _usertcp_run(size, offload, direction, tmp)
                results[f"usertcp_{direction}_{key}"] = r
                results[f"ratio_{direction}_{key}"] = round(r["MB_per_s"] / veth["MB_per_s"], 3)
        if profile_size:
            prof: dict[str, Any] = {}
            for offload in (True, False):
                key = "offload" if offload else "plain"
                r = _usertcp_run(profile_size, offload, "rx", tmp, profile=True)
                prof[f"rx_{key}"] = {"size": profile_size, "MB_per_s_profiled": r["MB_per_s"],
                                     **r["profile"]}
                prof[f"rx_{key}"]["top"] = prof[f"rx_{key}"]["top"][:profile_top]
            results["profile"] = prof
        if queues > 1:
            mq: dict[str, Any] = {"flows": flows, "bytes_per_flow": mq_size, "offload": False}
            mq["queues_1"] = _usertcp_run(mq_size, False, "rx", tmp, flows=flows)
            for mode in ("thread", "process"):
                mq[f"queues_{queues}_{mode}"] = _usertcp_run(mq_size, False, "rx", tmp, queues=queues,
                                                             queue_mode=mode, flows=flows)
            results["multiqueue"] = mq
    results["goal_rx_quarter_of_kernel"] = results["ratio_rx_offload"] >= 0.25
    return results


if __name__ == "__main__":
    print(json.dumps(run(**{k: int(v) for k, v in (a.split("=", 1) for a in sys.argv[1:])}), indent=1))
