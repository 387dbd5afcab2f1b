"""``usertcp bench apps``: real asyncio servers on usertcp over TUN against the same on the kernel.

Needs root, /dev/net/tun and the test extras (uvicorn, aiosmtpd). Everything runs in network
namespaces made here and removed afterwards. One namespace holds the load generator; the
server under test is a subprocess (``python -m usertcp.bench.apps serve ...``) either

* **usertcp**: uvicorn on a :class:`usertcp.aio.UsertcpEventLoop` whose stack runs on a TUN
  device in the load generator's namespace, or
* **kernel**: the same uvicorn app on the standard asyncio loop, in a second namespace
  joined by a veth pair (so both servers sit one network device away from the client).

HTTP/1.1 requests per second come from ``wrk`` (Debian package ``wrk``) when it is
installed, else from a bounded Python load generator (``generator`` says which), for
``duration`` seconds each, with keep-alive (``connections`` connections) and without
(``Connection: close``, one request per connection). Kernel and usertcp alternate
``rounds`` times; ``ratio_*`` is usertcp's median rate over the kernel's, in the same run.
Each run also reads the server process's CPU time (user + system, so the kernel's packet
work done in its system calls counts): ``server_cpu_ms_per_request``, and ``cpu_ratio_*``
the kernel-hosted server's CPU per request over usertcp's. On a shared machine with busy
cores the rates also measure how soon each process gets a core; the CPU per request does not.
``profile`` is a cProfile summary (top functions by own time, and own time by area, built-ins
charged to their callers; ``usertcp_share``) of a separate, profiled keep-alive run of the
usertcp server: profiling slows it, so it is not the measured run.

The connection setup rate (connect, read the banner, close) is measured against an SMTP
server (aiosmtpd) on usertcp over TUN, once with the greeting sent by the application after
accept and once preloaded on the listening socket (MSG_PRELOAD), from a Python client (kernel
sockets) that keeps ``setup_concurrency`` connections in flight for ``setup_duration``
seconds; the two alternate ``setup_rounds`` times and the medians are compared.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiosmtpd.smtp import SMTP
from aiosmtpd.smtp import __ident__ as smtp_ident

from usertcp import aio, builds
from usertcp.bench.process import NamespaceProcess, usertcp_env
from usertcp.net import netns
from usertcp.net.tun import TunDevice
from usertcp.tcp.stack import Stack

DEV = "utapps0"
PEER, US = "10.78.0.1", "10.78.0.2"            # kernel side of the TUN, usertcp's address
VETH_CLIENT, VETH_SERVER = "10.78.1.1", "10.78.1.2"
HTTP_PORT, SMTP_PORT = 8000, 2525
SMTP_HOSTNAME = "mail.bench.test"

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


# ----------------------------------------------------------------------------- the apps


async def asgi_app(scope: Scope, receive: Receive, send: Send) -> None:
    """A small ASGI app: ``/hello/NAME``, ``/json`` and ``/echo`` (the request body back)."""
    if scope["type"] != "http":
        return
    path: str = scope["path"]
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    if path.startswith("/hello/"):
        payload, ctype = f"hello {path[7:]}\n".encode(), b"text/plain"
    elif path == "/json":
        payload, ctype = json.dumps({"path": path, "method": scope["method"]}).encode(), b"application/json"
    elif path == "/echo":
        payload, ctype = body, b"application/octet-stream"
    else:
        payload, ctype = b"hello, world\n", b"text/plain"
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", ctype), (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})


def smtp_greeting(hostname: str) -> bytes:
    """The greeting aiosmtpd sends (``220 HOST IDENT``), as bytes to preload on the listener."""
    return f"220 {hostname} {smtp_ident}\r\n".encode()


# ----------------------------------------------------------------------------- server process


def _profile_summary(prof: cProfile.Profile, top: int) -> dict[str, Any]:
    """Own time by function (top ``top``) and by area (usertcp core, drivers, asyncio glue, app).

    A built-in function's time goes to the area of whoever called it (``len`` called by the
    TCP core is the core's time), split as cProfile's caller records split it; system calls
    (the TUN device's reads and writes, which include the kernel's own packet processing,
    and epoll) are an area of their own. ``usertcp_share`` sums usertcp's areas.
    """
    stats = pstats.Stats(prof)
    entries: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in entries.values()) or 1e-12
    areas: dict[str, float] = {}
    rows = []
    for (filename, line, name), (_cc, ncalls, tottime, _ct, callers) in entries.items():
        rows.append((tottime, ncalls, f"{_short(filename)}:{line}({name})"))
        for area, seconds in _charged_areas(filename, name, tottime, callers):
            areas[area] = areas.get(area, 0.0) + seconds
    rows.sort(reverse=True)
    return {
        "seconds_profiled": round(total, 3),
        "by_area": {k: round(v / total, 3) for k, v in sorted(areas.items(), key=lambda kv: -kv[1])},
        "usertcp_share": round(sum(v for k, v in areas.items() if k.startswith("usertcp")) / total, 3),
        "top": [{"function": f, "calls": n, "own_s": round(t, 4), "share": round(t / total, 3)}
                for t, n, f in rows[:top]],
    }


def _charged_areas(filename: str, name: str, tottime: float,
                   callers: dict[Any, Any]) -> list[tuple[str, float]]:
    """Where one profile entry's own time is charged: its file's area, or for a built-in its
    callers' areas (in proportion to the time each caller spent in it)."""
    area = _area(filename)
    if area != _BUILTIN:
        return [(area, tottime)]
    if any(call in name for call in _SYSCALLS):
        return [(_SYSCALL_AREA, tottime)]
    split = [(_area(caller[0]), record[2]) for caller, record in callers.items()]
    spent = sum(seconds for _a, seconds in split)
    if spent <= 0:
        return [(area, tottime)]
    return [(a, tottime * seconds / spent) for a, seconds in split]


_AREAS = (("/usertcp/tcp/", "usertcp.tcp (TCP core)"),
          ("/usertcp/wire/", "usertcp.wire (headers, checksums)"),
          ("/usertcp/net/", "usertcp.net (TUN driver)"), ("/usertcp/aio/", "usertcp.aio (loop, transports)"),
          ("/usertcp/api/", "usertcp.api (sockets)"), ("/usertcp/bench/", "the ASGI/SMTP app (bench)"),
          ("/usertcp/", "usertcp (other)"),
          ("/uvicorn/", "uvicorn"), ("/h11/", "h11 (HTTP parser)"), ("/aiosmtpd/", "aiosmtpd"),
          ("/asyncio/", "asyncio"), ("selectors.py", "selectors"))
_BUILTIN = "builtins and other"
# Built-ins that are system calls: the TUN device's I/O (whose writes run the kernel's receive
# path for the packet) and the loop's epoll.
_SYSCALLS = ("posix.writev", "posix.readv", "posix.read", "posix.write", "select.epoll")
_SYSCALL_AREA = "system calls (TUN read/write incl. the kernel's packet work, epoll)"


def _area(filename: str) -> str:
    for needle, area in _AREAS:
        if needle in filename:
            return area
    return _BUILTIN if filename.startswith("~") or "<" in filename else "python stdlib and other"


def _short(filename: str) -> str:
    parts = Path(filename).parts
    return "/".join(parts[-2:]) if len(parts) >= 2 else filename


async def _serve(mode: str, app: str, preload: bool) -> None:
    """Run the app until stdin closes; print ``ready`` once listening."""
    loop = asyncio.get_running_loop()
    address = US if mode == "usertcp" else VETH_SERVER
    stop = asyncio.Event()
    loop.add_reader(sys.stdin.fileno(), stop.set)          # the bench closes our stdin to stop us
    if app == "http":
        import uvicorn

        config = uvicorn.Config(asgi_app, host=address, port=HTTP_PORT, log_level="error", lifespan="off",
                                http="h11", ws="none", access_log=False)
        server = uvicorn.Server(config)
        config.load()
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        print("ready", flush=True)
        await stop.wait()
        server.should_exit = True
        await task
        return
    from aiosmtpd.handlers import Sink

    if preload:
        # aiosmtpd unmodified: it still writes its greeting, which the listener already sent
        # (app_sends_it: the transport does not send those bytes twice; usertcp.aio.server).
        assert isinstance(loop, aio.UsertcpEventLoop)
        lsock = loop.socket()
        lsock.bind((address, SMTP_PORT))
        lsock.listen(1024)
        usertcp_server = await loop.create_server(lambda: SMTP(Sink(), hostname=SMTP_HOSTNAME), sock=lsock,
                                                  start_serving=False)
        assert isinstance(usertcp_server, aio.Server)
        usertcp_server.preload(smtp_greeting(SMTP_HOSTNAME), app_sends_it=True)
        await usertcp_server.start_serving()
        smtp_server: asyncio.AbstractServer = usertcp_server
    else:
        smtp_server = await loop.create_server(lambda: SMTP(Sink(), hostname=SMTP_HOSTNAME), address,
                                               SMTP_PORT, backlog=1024)
    print("ready", flush=True)
    await stop.wait()
    smtp_server.close()


def _serve_main(args: argparse.Namespace) -> None:
    prof = cProfile.Profile() if args.profile else None
    main = _serve(args.mode, args.app, args.preload)
    if prof is not None:
        prof.enable()
    try:
        if args.mode == "usertcp":
            dev = TunDevice.open(DEV)
            dev.configure(peer_address=f"{PEER}/24")
            aio.run(main, stack=Stack([US], name="bench-apps"), device=dev)
        else:
            asyncio.run(main)
    finally:
        if prof is not None:
            prof.disable()
            Path(args.profile).write_text(json.dumps(_profile_summary(prof, args.top)))


# ----------------------------------------------------------------------------- load generators


async def _setup_client(address: str, port: int, seconds: float, concurrency: int) -> dict[str, Any]:
    """Connect, read the banner line, close; ``concurrency`` loops for ``seconds`` (kernel sockets)."""
    done = 0
    errors = 0
    latencies: list[float] = []
    deadline = time.monotonic() + seconds

    async def worker() -> None:
        nonlocal done, errors
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(address, port), 5)
                line = await asyncio.wait_for(reader.readline(), 5)
                writer.close()
                if not line.startswith(b"220 "):
                    errors += 1
                    continue
            except (OSError, TimeoutError):
                errors += 1
                continue
            latencies.append(time.monotonic() - t0)
            done += 1

    t0 = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.monotonic() - t0
    latencies.sort()
    return {"per_s": round(done / elapsed, 1), "connections": done, "errors": errors,
            "banner_ms_p50": round(1000 * latencies[len(latencies) // 2], 3) if latencies else None}


async def _http_client(address: str, port: int, seconds: float, connections: int,
                       keepalive: bool) -> dict[str, Any]:
    """The fallback load generator: HTTP/1.1 GETs on kernel sockets for ``seconds``."""
    done = 0
    errors = 0
    deadline = time.monotonic() + seconds
    request = (f"GET / HTTP/1.1\r\nHost: {address}\r\n" + ("" if keepalive else "Connection: close\r\n")
               + "\r\n").encode()

    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
        await reader.readexactly(length)

    async def worker() -> None:
        nonlocal done, errors
        conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        while time.monotonic() < deadline:
            try:
                if conn is None:
                    conn = await asyncio.open_connection(address, port)
                await one(*conn)
                done += 1
                if not keepalive:
                    conn[1].close()
                    conn = None
            except (OSError, asyncio.IncompleteReadError):
                errors += 1
                conn = None
        if conn is not None:
            conn[1].close()

    t0 = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(connections)))
    return {"rps": round(done / (time.monotonic() - t0), 1), "requests": done, "errors": errors}


def _client_main(args: argparse.Namespace) -> None:
    if args.kind == "setup":
        out = asyncio.run(_setup_client(args.address, args.port, args.seconds, args.connections))
    else:
        out = asyncio.run(_http_client(args.address, args.port, args.seconds, args.connections,
                                       args.kind == "http-keepalive"))
    print(json.dumps(out))


# ----------------------------------------------------------------------------- orchestration


class _Server(NamespaceProcess):
    """``python -m usertcp.bench.apps serve ...`` in namespace ``ns`` until :meth:`stop` (stdin closed)."""

    def __init__(self, ns: str, *args: str) -> None:
        # The build this process runs (USERTCP_PURE=1 here: the pure sources there too).
        super().__init__(ns, "usertcp.bench.apps", "serve", *args, stop_by_stdin=True,
                         pure=builds.current() == "pure")

    def cpu_seconds(self) -> float:
        """The server's CPU time so far (user + system, from /proc: ``ip netns exec`` execs it)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> int:
        rc = super().stop()
        if rc != 0:
            raise RuntimeError(f"bench server failed ({rc}): {self.stderr[-2000:]}")
        return rc


def _run_client(ns: str, *args: str) -> dict[str, Any]:
    cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "usertcp.bench.apps", "client", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, env=usertcp_env(), timeout=120, check=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def _wrk(ns: str, address: str, seconds: float, connections: int, keepalive: bool) -> dict[str, Any]:
    cmd = ["ip", "netns", "exec", ns, "wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s",
           "--timeout", "5s"]
    if not keepalive:
        cmd += ["-H", "Connection: close"]
    out = subprocess.run([*cmd, f"http://{address}:{HTTP_PORT}/"], capture_output=True, text=True,
                         timeout=seconds + 60, check=True).stdout
    rps = re.search(r"Requests/sec:\s*([\d.]+)", out)
    total = re.search(r"(\d+) requests in", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if rps is None or total is None:
        raise RuntimeError(f"could not parse wrk output: {out}")
    return {"rps": float(rps.group(1)), "requests": int(total.group(1)),
            "errors": sum(int(x) for x in errors.groups()) if errors else 0,
            "non_2xx": int(non2xx.group(1)) if non2xx else 0}


def _load(ns: str, address: str, seconds: float, connections: int, keepalive: bool,
          use_wrk: bool) -> dict[str, Any]:
    if use_wrk:
        return _wrk(ns, address, seconds, connections, keepalive)
    kind = "http-keepalive" if keepalive else "http-close"
    return _run_client(ns, kind, address, str(HTTP_PORT), str(seconds), str(connections))


def _http_runs(client_ns: str, server_ns: str, seconds: float, connections: int, use_wrk: bool,
               rounds: int) -> dict[str, Any]:
    """Kernel and usertcp alternated ``rounds`` times (the machine is shared and noisy); medians."""
    runs: dict[str, list[dict[str, Any]]] = {}
    servers = (("kernel", server_ns, VETH_SERVER), ("usertcp", client_ns, US))
    for i in range(rounds):
        for mode, ns, address in servers if i % 2 == 0 else servers[::-1]:
            srv = _Server(ns, "--mode", mode, "--app", "http")
            try:
                for keepalive in (True, False):
                    key = f"{mode}_{'keepalive' if keepalive else 'close'}"
                    cpu0 = srv.cpu_seconds()
                    result = _load(client_ns, address, seconds, connections, keepalive, use_wrk)
                    result["server_cpu_s"] = srv.cpu_seconds() - cpu0
                    runs.setdefault(key, []).append(result)
            finally:
                srv.stop()
    out: dict[str, Any] = {"rounds": rounds}
    for key, results in runs.items():
        rates = sorted(r["rps"] for r in results)
        requests = sum(r["requests"] for r in results)
        cpu = sum(r["server_cpu_s"] for r in results)
        out[key] = {"rps_median": statistics.median(rates), "rps": [r["rps"] for r in results],
                    "requests": requests, "errors": sum(r["errors"] + r.get("non_2xx", 0) for r in results),
                    "server_cpu_ms_per_request": round(1000 * cpu / requests, 4) if requests else None,
                    "server_cpu_busy": round(cpu / (seconds * len(results)), 3)}
    for kind in ("keepalive", "close"):
        kernel, user = out[f"kernel_{kind}"], out[f"usertcp_{kind}"]
        krps = kernel["rps_median"]
        out[f"ratio_{kind}"] = round(user["rps_median"] / krps, 3) if krps else None
        # The same comparison in server CPU per request: on a shared machine whose cores are
        # busy with other work, requests/s also measure how soon each process gets a core.
        kcpu, ucpu = kernel["server_cpu_ms_per_request"], user["server_cpu_ms_per_request"]
        out[f"cpu_ratio_{kind}"] = round(kcpu / ucpu, 3) if kcpu and ucpu else None
    return out


def _profile_run(client_ns: str, profile_seconds: float, profile_top: int, connections: int, use_wrk: bool,
                 tmp: Path) -> dict[str, Any]:
    """A separate keep-alive run of the usertcp server under cProfile (slower: not a measured run)."""
    prof_file = tmp / "profile.json"
    srv = _Server(client_ns, "--mode", "usertcp", "--app", "http", "--profile", str(prof_file),
                  "--top", str(profile_top))
    try:
        profiled = _load(client_ns, US, profile_seconds, connections, True, use_wrk)
    finally:
        srv.stop()
    return {"rps_while_profiled": profiled["rps"], **json.loads(prof_file.read_text())}


def _setup_runs(client_ns: str, seconds: float, concurrency: int, rounds: int) -> dict[str, Any]:
    """Accept-then-send and preload, alternated ``rounds`` times (the machine is noisy); medians."""
    runs: dict[str, list[dict[str, Any]]] = {"accept_then_send": [], "preload": []}
    for _ in range(rounds):
        for preload in (False, True):
            args = ["--mode", "usertcp", "--app", "smtp"] + (["--preload"] if preload else [])
            srv = _Server(client_ns, *args)
            try:
                cpu0 = srv.cpu_seconds()
                result = _run_client(client_ns, "setup", US, str(SMTP_PORT), str(seconds), str(concurrency))
                result["server_cpu_s"] = srv.cpu_seconds() - cpu0
                runs["preload" if preload else "accept_then_send"].append(result)
            finally:
                srv.stop()
    out: dict[str, Any] = {"concurrency": concurrency, "rounds": rounds}
    for key, results in runs.items():
        rates = sorted(r["per_s"] for r in results)
        banners = sorted(r["banner_ms_p50"] for r in results if r["banner_ms_p50"] is not None)
        done = sum(r["connections"] for r in results)
        out[key] = {"per_s_median": statistics.median(rates), "per_s": [r["per_s"] for r in results],
                    "banner_ms_p50_median": round(statistics.median(banners), 3) if banners else None,
                    "errors": sum(r["errors"] for r in results),
                    "server_cpu_ms_per_connection":
                        round(1000 * sum(r["server_cpu_s"] for r in results) / done, 4) if done else None}
    base = out["accept_then_send"]["per_s_median"]
    out["ratio_preload"] = round(out["preload"]["per_s_median"] / base, 3) if base else None
    return out


def run(duration: float = 3.0, connections: int = 10, rounds: int = 2, setup_duration: float = 2.0,
        setup_concurrency: int = 4, setup_rounds: int = 2, profile_duration: float = 2.0,
        profile_top: int = 12, generator: str = "auto") -> dict[str, Any]:
    """Measure; see the module docstring. ``generator``: ``auto`` (wrk if installed), ``wrk``, ``python``."""
    if os.geteuid() != 0 or not os.path.exists("/dev/net/tun"):
        raise ValueError("bench apps needs root and /dev/net/tun (it makes network namespaces)")
    if not 0 < duration <= 30 or not 0 < setup_duration <= 30 or not 0 <= profile_duration <= 30:
        raise ValueError("durations must be in (0, 30] seconds (bounded runs)")
    if not 1 <= connections <= 256 or not 1 <= setup_concurrency <= 256:
        raise ValueError("connections and setup_concurrency must be 1-256")
    if not 1 <= rounds <= 5 or not 1 <= setup_rounds <= 5:
        raise ValueError("rounds and setup_rounds must be 1-5")
    if generator not in ("auto", "wrk", "python"):
        raise ValueError("generator must be auto, wrk or python")
    use_wrk = generator == "wrk" or (generator == "auto" and shutil.which("wrk") is not None)
    if use_wrk and shutil.which("wrk") is None:
        raise ValueError("wrk is not installed (apt-get install wrk, or generator=python)")
    results: dict[str, Any] = {"generator": "wrk" if use_wrk else "python", "duration_s": duration,
                               "connections": connections, "app": "uvicorn (h11) + ASGI hello",
                               "build": builds.current()}    # the servers run this build (usertcp_env)
    with tempfile.TemporaryDirectory(prefix="utcp-bench-apps-") as d, \
            netns.namespace("utapc") as client_ns, netns.namespace("utaps") as server_ns:
        netns.connect_veth(client_ns, server_ns, "vapps", VETH_CLIENT, VETH_SERVER)
        results["http"] = _http_runs(client_ns, server_ns, duration, connections, use_wrk, rounds)
        if profile_duration > 0:
            results["profile"] = _profile_run(client_ns, profile_duration, profile_top, connections, use_wrk,
                                              Path(d))
        results["setup"] = _setup_runs(client_ns, setup_duration, setup_concurrency, setup_rounds)
    results["goal_keepalive_0_7_of_kernel"] = (results["http"]["ratio_keepalive"] or 0) >= 0.7
    results["goal_keepalive_0_7_of_kernel_cpu"] = (results["http"]["cpu_ratio_keepalive"] or 0) >= 0.7
    return results


def _main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m usertcp.bench.apps")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="(internal) run one server under test until stdin closes")
    serve.add_argument("--mode", choices=("usertcp", "kernel"), required=True)
    serve.add_argument("--app", choices=("http", "smtp"), required=True)
    serve.add_argument("--preload", action="store_true")
    serve.add_argument("--profile")
    serve.add_argument("--top", type=int, default=12)
    client = sub.add_parser("client", help="(internal) a bounded load generator on kernel sockets")
    client.add_argument("kind", choices=("setup", "http-keepalive", "http-close"))
    client.add_argument("address")
    client.add_argument("port", type=int)
    client.add_argument("seconds", type=float)
    client.add_argument("connections", type=int)
    sub.add_parser("run", help="run the benchmark and print its JSON")
    args = parser.parse_args(argv)
    if args.command == "serve":
        _serve_main(args)
    elif args.command == "client":
        _client_main(args)
    else:
        print(json.dumps(run(), indent=1))


if __name__ == "__main__":
    _main()
