"""``usertcp serve``: run a usertcp server on a TUN device, the kernel being the peer.

It creates TUN device ``--tun`` in the *current* network namespace (run it under
``ip netns exec NS``), gives the kernel side ``--peer-address`` (CIDR), runs the stack
at ``--address`` and serves ``--app`` on ``--port`` until SIGINT/SIGTERM; the device
goes away with its fds. Once listening it prints ``ready ADDR:PORT`` (one line per
``--address``; IPv6 as ``[ADDR]:PORT``) and flushes stdout.

Apps: ``echo``, ``discard``, ``source`` (``--bytes N`` of :func:`usertcp.apps.basic.pattern`
per connection) run inside the driver loop (usertcp.apps.basic); ``smtp``
(usertcp.apps.smtp, greeting preloaded with MSG_PRELOAD) and ``cache``
(usertcp.apps.cache, memcached text protocol) run on their own thread over the same
driver. ``--preload TEXT`` (``\\r\\n`` escapes allowed) sets the listener's preload for
any app (for ``smtp`` it replaces the greeting and is made a greeting line:
:func:`usertcp.apps.smtp.greeting_line`; an empty TEXT makes ``smtp`` send its greeting
after accept instead, the baseline of ``usertcp bench preload``).

SIGINT/SIGTERM close every connection as Linux does when a process exits: listeners
first (connections not yet accepted are reset), then each connection is closed, which
sends a FIN, or a RST when it still holds data the app has not read; serve waits (up
to ``CLOSE_WAIT_S``) for the FINs to be acknowledged, then exits. A second signal
exits at once.

Outputs: ``--report FILE`` gets one JSON line per closed connection (bytes and SHA-256
each way, basic apps), written as each connection ends; ``--stats-file FILE`` is
rewritten atomically (temporary file + rename) every ``--stats-interval`` seconds while
serving and once more at exit, in the format of :mod:`usertcp.obs.stats` that
``usertcp ss``/``usertcp nstat --stats-file`` read: one snapshot per queue under
``stacks`` (counters, sockets, plus driver/device/impairment stats), the summed
``counters``, and ``per_queue`` (the same snapshots; forked queues report at exit
only); ``--profile FILE`` writes the cProfile top entries of queue 0's driver
loop as JSON; ``--pcap FILE`` records what usertcp sees and sends (``FILE.qN`` for
queues N > 0).

Multi-queue (``--queues N``): the device is opened with IFF_MULTI_QUEUE and every queue
gets its own Stack + TunDriver + app (usertcp.net.tun describes why: the kernel keeps a
flow on the queue it was last written on, and SYNs land by flow hash, so every stack
listens on the same port). ``--queue-mode thread`` runs queues 1..N-1 on threads of
this process (they share one GIL: no more CPU, only isolation); ``process`` forks one
child per extra queue after all queue fds are open, each child keeping only its own fd
(fds survive fork, so nothing needs passing over a socket), which does use more cores.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import cProfile
import ipaddress
import json
import os
import pstats
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from usertcp.apps.basic import APPS as BASIC_APPS
from usertcp.apps.basic import BasicServer, ConnReport
from usertcp.apps.smtp import greeting_line
from usertcp.cli import parse_size
from usertcp.extras import require
from usertcp.net.endpoint import Endpoint
from usertcp.net.impair import ImpairConfig, ImpairedEndpoint, parse_impair
from usertcp.net.pcap import PcapWriter
from usertcp.net.tun import TunDevice, TunDriver
from usertcp.obs.stats import FORMAT as STATS_FORMAT
from usertcp.obs.stats import VERSION as STATS_VERSION
from usertcp.obs.stats import stats_snapshot, write_json_atomically
from usertcp.tcp.config import TFO_SERVER_ENABLE, StackConfig
from usertcp.tcp.connection import State
from usertcp.tcp.md5sig import Md5Keys
from usertcp.tcp.stack import Listener, Stack

APPS = (*BASIC_APPS, "smtp", "cache")
# After SIGINT/SIGTERM: how long serve lets its FINs be acknowledged before it exits.
CLOSE_WAIT_S = 2.0
# Connections whose close needs nothing more from serve: our FIN is acknowledged (or reset).
_CLOSED_ENOUGH = (State.FIN_WAIT_2, State.TIME_WAIT, State.CLOSED)
DEFAULT_PORTS = {"echo": 7, "discard": 9, "source": 19, "smtp": 25, "cache": 11211}
# Largest GSO payload we hand the kernel: one IP packet stays below 64 KiB with headers.
GSO_MAX = 65535 - 60 - 60 - 40


class AppUnavailable(RuntimeError):
    pass


@dataclass
class ServeOptions:
    tun: str
    addresses: list[str]
    peer_addresses: list[str]
    app: str
    port: int
    source_bytes: int = 0
    tx_digest: bool = True
    preload: bytes | None = None
    fastopen: bool = False
    fastopen_no_cookie: bool = False
    md5_keys: list[tuple[str, bytes]] = field(default_factory=list)
    pcap: str | None = None
    offload: bool | None = None
    mtu: int = 1500
    rcvbuf: int = 4 << 20
    sndbuf: int = 4 << 20
    mem_limit: int = 256 << 20       # StackConfig.mem_limit (Linux tcp_mem)
    impair: ImpairConfig | None = None
    report: str | None = None
    stats_file: str | None = None
    stats_interval: float = 1.0
    profile: str | None = None
    profile_top: int = 25
    queues: int = 1
    queue_mode: str = "thread"
    quiet: bool = False


# ----------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (__doc__ or "").split("\n\n")[0].replace("``", "")
    parser.add_argument("--tun", required=True, metavar="NAME", help="TUN device to create")
    parser.add_argument("--address", action="append", required=True, metavar="ADDR",
                        help="usertcp's address (IPv4 or IPv6; repeatable)")
    parser.add_argument("--peer-address", action="append", required=True, metavar="ADDR/PREFIX",
                        help="the kernel's address on the device (repeatable, e.g. one v4 and one v6)")
    parser.add_argument("--app", required=True, choices=APPS, help="what to serve")
    parser.add_argument("--port", type=int, help="listening port (default per app: echo 7, discard 9, "
                        "source 19, smtp 25, cache 11211)")
    parser.add_argument("--bytes", type=parse_size, default=1 << 20, metavar="N",
                        help="source: bytes sent on each connection (default 1 MiB)")
    parser.add_argument("--tx-digest", action=argparse.BooleanOptionalAction, default=True,
                        help="basic apps: SHA-256 of what is sent, in --report (default on; "
                             "usertcp bench tun turns it off, as its kernel sender hashes nothing)")
    parser.add_argument("--preload", metavar="TEXT",
                        help="listener preload (MSG_PRELOAD): bytes the stack sends on every connection "
                             "before the app reads (\\r\\n escapes allowed, sent as given); with --app smtp "
                             "it is the greeting line: CRLF added when missing, '220 ' when it has no "
                             "reply code; with --app smtp an empty TEXT means no preload: the greeting "
                             "is sent after accept")
    parser.add_argument("--fastopen", action="store_true", help="TCP Fast Open server (cookies)")
    parser.add_argument("--fastopen-no-cookie", action="store_true",
                        help="with --fastopen: accept SYN data without a cookie (TCP_FASTOPEN_NO_COOKIE)")
    parser.add_argument("--md5-key", action="append", default=[], metavar="PEER=KEY",
                        help="TCP-MD5 key for a peer address (repeatable)")
    parser.add_argument("--pcap", metavar="FILE", help="record usertcp's packets (raw IP pcap)")
    parser.add_argument("--offload", action=argparse.BooleanOptionalAction, default=None,
                        help="virtio-net offloads (checksum, TSO/GSO); default: use them if available")
    parser.add_argument("--mtu", type=int, default=1500)
    parser.add_argument("--rcvbuf", type=parse_size, default=4 << 20, help="per-connection receive buffer")
    parser.add_argument("--sndbuf", type=parse_size, default=4 << 20, help="per-connection send buffer")
    parser.add_argument("--mem-limit", type=parse_size, default=256 << 20, metavar="N",
                        help="bytes in all buffers of a queue's stack (Linux tcp_mem): memory pressure "
                             "above 2/3, each socket keeps its tcp_rmem[0]/tcp_wmem[0] past N; 0: none")
    parser.add_argument("--impair", metavar="SPEC",
                        help="loss/reorder on usertcp's side of the link: loss=P,reorder=P,delay=S,seed=N,"
                             "dir=both|in|out (see usertcp.net.impair)")
    parser.add_argument("--report", metavar="FILE", help="JSON line per closed connection")
    parser.add_argument("--stats-file", metavar="FILE",
                        help="stats file (counters, sockets, driver stats) for 'usertcp ss/nstat "
                             "--stats-file', rewritten atomically while serving and at exit")
    parser.add_argument("--stats-interval", type=float, default=1.0, metavar="SECONDS",
                        help="how often --stats-file is rewritten (default 1)")
    parser.add_argument("--profile", metavar="FILE", help="cProfile queue 0's loop; top entries as JSON")
    parser.add_argument("--queues", type=int, default=1, help="multi-queue TUN: one stack per queue")
    parser.add_argument("--queue-mode", choices=("thread", "process"), default="thread")
    parser.add_argument("--quiet", action="store_true", help="no summary on stderr at exit")


def options_from_args(args: argparse.Namespace) -> ServeOptions:
    addresses = [str(ipaddress.ip_address(a)) for a in args.address]
    peers = [str(ipaddress.ip_interface(p)) for p in args.peer_address]
    keys: list[tuple[str, bytes]] = []
    for item in args.md5_key:
        peer, sep, key = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--md5-key needs PEER=KEY, got {item!r}")
        keys.append((str(ipaddress.ip_address(peer)), key.encode()))
    if args.queues < 1:
        raise ValueError("--queues must be >= 1")
    if args.bytes < 0:
        raise ValueError("--bytes must be >= 0")
    if not args.stats_interval > 0:
        raise ValueError("--stats-interval must be > 0")
    preload = None
    if args.preload is not None:
        preload = codecs.decode(args.preload, "unicode_escape").encode("latin-1")
        if args.app == "smtp" and preload:
            preload = greeting_line(preload)
    return ServeOptions(
        tun=args.tun, addresses=addresses, peer_addresses=peers, app=args.app,
        port=args.port or DEFAULT_PORTS[args.app], source_bytes=args.bytes, tx_digest=args.tx_digest,
        preload=preload,
        fastopen=args.fastopen or args.fastopen_no_cookie, fastopen_no_cookie=args.fastopen_no_cookie,
        md5_keys=keys, pcap=args.pcap, offload=args.offload, mtu=args.mtu, rcvbuf=args.rcvbuf,
        sndbuf=args.sndbuf, mem_limit=args.mem_limit,
        impair=parse_impair(args.impair) if args.impair else None, report=args.report,
        stats_file=args.stats_file, stats_interval=args.stats_interval, profile=args.profile,
        queues=args.queues, queue_mode=args.queue_mode,
        quiet=args.quiet)


def cli(args: argparse.Namespace) -> int:
    # Before any device exists: without the [tun] extra, one line naming it (usertcp.cli prints it).
    require("pyroute2", "usertcp serve")
    try:
        opts = options_from_args(args)
    except ValueError as e:
        print(f"usertcp serve: {e}", file=sys.stderr)
        return 2
    try:
        return serve(opts)
    except AppUnavailable as e:
        print(f"usertcp serve: {e}", file=sys.stderr)
        return 2


# ----------------------------------------------------------------------------- one queue


def _fmt_endpoint(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


class QueueServer:
    """One queue: Stack + (impairment) + TunDriver + the app."""

    def __init__(self, opts: ServeOptions, device: TunDevice, index: int) -> None:
        self.opts = opts
        self.device = device
        self.index = index
        cfg = StackConfig(mtu=opts.mtu, mem_limit=opts.mem_limit)
        if opts.fastopen:
            cfg.fastopen |= TFO_SERVER_ENABLE
        self.stack = Stack(opts.addresses, cfg, name=f"serve-q{index}")
        if device.offload:
            self.stack.gso_max_size = GSO_MAX
            self.stack.tx_csum_offload = True
        self.impaired: ImpairedEndpoint | None = None
        endpoint: Endpoint = self.stack
        if opts.impair is not None and opts.impair.active:
            clock = time.monotonic
            self.impaired = ImpairedEndpoint(self.stack, opts.impair, clock)
            endpoint = self.impaired
        self.pcap: PcapWriter | None = None
        if opts.pcap:
            # With offloads both directions carry partial checksums: finish them for the reader.
            self.pcap = PcapWriter(opts.pcap if index == 0 else f"{opts.pcap}.q{index}",
                                   complete_checksums=device.offload)
        self.driver = TunDriver(endpoint, device, pcap=self.pcap)
        self.listener: Listener | None = None
        self.basic: BasicServer | None = None
        self.app_obj: Any = None
        self.app_thread: threading.Thread | None = None
        self._report_lock = threading.Lock()

    # -- app ---------------------------------------------------------------------------------------

    def start_app(self) -> None:
        opts = self.opts
        drv = self.driver
        if opts.app in BASIC_APPS:
            with drv.lock:
                lst = self.stack.listen(opts.port, backlog=1024)
                self._configure_listener(lst)
                # The time of the event being processed, not a fresh clock read: a later ``now``
                # from a callback, then the rest of the step at the step's ``now``, would make
                # TSval go backwards and Linux would drop segments (PAWS, TcpExtPAWSEstab).
                stack = self.stack
                self.basic = BasicServer(opts.app, lst, lambda: stack.now, source_bytes=opts.source_bytes,
                                         on_report=self._write_report, tx_digest=opts.tx_digest)
        elif opts.app == "smtp":
            try:
                from usertcp.api.sockets import Host
                from usertcp.apps.smtp import SmtpServer
            except ImportError as e:
                raise AppUnavailable(f"app smtp not available yet ({e})") from None
            host = Host(self.stack, drv, name=self.stack.name)
            # ``--preload ''``: no preload, the classic accept-then-send greeting (a baseline).
            srv = SmtpServer(host, ("0.0.0.0", opts.port), preload=opts.preload != b"")
            slst = srv.sock.listener
            assert slst is not None
            with drv.lock:
                self._configure_listener(slst)
            self.app_obj = srv
            self.app_thread = threading.Thread(target=srv.serve, name=f"smtp-q{self.index}", daemon=True)
        elif opts.app == "cache":
            try:
                from usertcp.apps.cache import serve_cache
            except ImportError as e:
                raise AppUnavailable(f"app cache not available yet ({e})") from None
            srv_c = serve_cache(self.stack, opts.port, driver=drv, start=False)
            assert srv_c.listener is not None
            with drv.lock:
                self._configure_listener(srv_c.listener)
            self.app_obj = srv_c
        else:  # pragma: no cover - argparse limits the choices
            raise AppUnavailable(f"unknown app {opts.app}")

    def _configure_listener(self, lst: Listener) -> None:
        opts = self.opts
        self.listener = lst
        lst.options.setdefault("rcvbuf_limit", opts.rcvbuf)
        lst.options.setdefault("sndbuf_limit", opts.sndbuf)
        if opts.md5_keys:
            keys = Md5Keys()
            for peer, key in opts.md5_keys:
                keys.add(peer, key)
            lst.md5_keys = keys
        if opts.fastopen:
            lst.fastopen_qlen = 128
            lst.fastopen_no_cookie = opts.fastopen_no_cookie
        if opts.preload:
            lst.set_preload(opts.preload, self.driver.now())

    def start_app_threads(self) -> None:
        """Threads of the socket-API apps (after the driver runs)."""
        if self.app_thread is not None:
            self.app_thread.start()
        elif self.app_obj is not None and hasattr(self.app_obj, "start"):
            self.app_obj.start()

    def _write_report(self, r: ConnReport) -> None:
        if not self.opts.report:
            return
        line = json.dumps({"queue": self.index, **r.to_dict()}) + "\n"
        with self._report_lock:
            # One write on an O_APPEND fd: lines of several processes never interleave.
            fd = os.open(self.opts.report, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)

    # -- shutdown ------------------------------------------------------------------------------

    def stop_app(self) -> None:
        obj = self.app_obj
        if obj is not None and hasattr(obj, "stop"):
            with contextlib.suppress(Exception):
                obj.stop()
        if self.app_thread is not None and self.app_thread.is_alive():
            self.app_thread.join(2)
        if self.basic is not None:
            with self.driver.lock:
                self.basic.close()        # reports the connections still open

    def close_connections(self) -> None:
        """What Linux does to a process's sockets at exit: listeners close (resetting the
        connections nobody accepted, inet_csk_listen_stop), then every connection closes:
        a FIN, or a RST when the app left data unread (RFC 2525 §2.17, Connection.close)."""
        stack = self.stack
        with self.driver.lock:
            now = self.driver.now()
            for lst in list(stack.listeners.values()):
                lst.close(now)
            for conn in list(stack.connections.values()):
                conn.close(now)
        self.driver.kick()

    def connections_closed(self) -> bool:
        """Every connection's close is done as far as this end is concerned (FIN acked or reset)."""
        return all(c.state in _CLOSED_ENOUGH for c in list(self.stack.connections.values()))

    def snapshot(self) -> dict[str, Any]:
        """This queue for the stats file: the stack's snapshot (usertcp.obs.stats) and :meth:`stats`."""
        with self.driver.lock:
            return {**stats_snapshot(self.stack, now=self.driver.now()), **self.stats()}

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "queue": self.index,
            "counters": self.stack.counters.snapshot(),
            "driver": dict(self.driver.stats),
            "device": dict(self.device.stats),
            "offload": self.device.offload,
        }
        if self.impaired is not None:
            out["impair"] = self.impaired.snapshot()
        if self.basic is not None:
            out["app"] = dict(self.basic.stats)
        if self.app_obj is not None and isinstance(getattr(self.app_obj, "stats", None), dict):
            out["app"] = dict(self.app_obj.stats)
        return out

    def close(self) -> None:
        self.driver.close()
        if self.pcap is not None:
            self.pcap.close()
        self.device.close()


def _run_profiled(q: QueueServer, path: str, top: int) -> None:
    prof = cProfile.Profile()
    prof.enable()
    try:
        q.driver.run_forever()
    finally:
        prof.disable()
        write_profile(prof, path, top)


def write_profile(prof: cProfile.Profile, path: str, top: int) -> None:
    """The ``top`` functions by own time, as JSON: where the loop spends its CPU."""
    st = pstats.Stats(prof)
    raw: dict[Any, Any] = st.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw.values()) or 1.0
    rows = sorted(raw.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    entries = [{"function": f"{os.path.basename(fn)}:{line}({name})", "calls": v[1],
                "tottime_s": round(v[2], 4), "cumtime_s": round(v[3], 4),
                "share": round(v[2] / total, 4)} for (fn, line, name), v in rows]
    with open(path, "w") as f:
        json.dump({"total_s": round(total, 4), "top": entries}, f)


# ----------------------------------------------------------------------------- the server


def _sum_counters(stats: list[dict[str, Any]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for s in stats:
        for k, v in s.get("counters", {}).items():
            total[k] = total.get(k, 0) + v
    return dict(sorted(total.items()))


def _stats_document(opts: ServeOptions, offload: bool, per_queue: list[dict[str, Any]]) -> dict[str, Any]:
    """The stats file: usertcp.obs.stats's several-stacks form plus serve's summary keys."""
    return {"format": STATS_FORMAT, "version": STATS_VERSION, "stacks": per_queue, "app": opts.app,
            "queues": opts.queues, "queue_mode": opts.queue_mode, "offload": offload,
            "counters": _sum_counters(per_queue), "per_queue": per_queue}


class _Shutdown:
    """SIGINT/SIGTERM: close every connection on a helper thread while the loops still run
    (a signal handler must not block), then stop queue 0's loop; a second signal stops now."""

    def __init__(self, queues: list[QueueServer]) -> None:
        self.queues = queues
        self.requested = threading.Event()
        self._thread: threading.Thread | None = None

    def on_signal(self, signum: int, frame: object) -> None:
        if self.requested.is_set() or not self.queues:
            self._stop_loop()
            return
        self.requested.set()
        self._thread = threading.Thread(target=self._close_all, name="serve-shutdown", daemon=True)
        self._thread.start()

    def _close_all(self) -> None:
        try:
            for q in self.queues:
                q.stop_app()
            for q in self.queues:
                q.close_connections()
            for q in self.queues:
                q.driver.wait_until(q.connections_closed, CLOSE_WAIT_S)
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        # Queue 0's loop runs on the main thread: stop() only sets a flag and wakes it.
        if self.queues:
            self.queues[0].driver.stop()


class _StatsWriter:
    """Rewrites the stats file every ``interval`` seconds on a thread (each queue's snapshot is
    taken under its driver's lock), until :meth:`stop`."""

    def __init__(self, opts: ServeOptions, offload: bool, queues: list[QueueServer]) -> None:
        self.opts = opts
        self.offload = offload
        self.queues = queues
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="serve-stats", daemon=True)

    def start(self) -> None:
        self.write()
        self._thread.start()

    def write(self, extra: list[dict[str, Any]] | None = None) -> None:
        path = self.opts.stats_file
        if path:
            per_queue = [q.snapshot() for q in self.queues] + (extra or [])
            write_json_atomically(path, _stats_document(self.opts, self.offload, per_queue))

    def _run(self) -> None:
        while not self._stop.wait(self.opts.stats_interval):
            try:
                self.write()
            except OSError as e:       # a full disk must not take the server down
                print(f"usertcp serve: stats file: {e}", file=sys.stderr)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)


def serve(opts: ServeOptions) -> int:
    if opts.app not in APPS:
        raise AppUnavailable(f"unknown app {opts.app!r}")
    queues: list[QueueServer] = []
    children: list[tuple[int, int]] = []      # (pid, read end of its pipe)
    shutdown = _Shutdown(queues)
    old = {s: signal.signal(s, shutdown.on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    first = TunDevice.open(opts.tun, offload=opts.offload, multi_queue=opts.queues > 1)
    devices = [first]
    stats_writer: _StatsWriter | None = None
    try:
        for peer in opts.peer_addresses:
            first.configure(peer_address=peer, mtu=opts.mtu)
        devices += [first.open_queue() for _ in range(opts.queues - 1)]
        if opts.queues > 1 and opts.queue_mode == "process":
            _fork_queues(opts, devices, children)
            devices = [first]
        for i, dev in enumerate(devices):
            q = QueueServer(opts, dev, i)
            queues.append(q)
            q.start_app()
        for q in queues[1:]:
            q.driver.start()
            q.start_app_threads()
        if opts.stats_file:
            stats_writer = _StatsWriter(opts, first.offload, queues)
            stats_writer.start()
        for addr in opts.addresses:
            print(f"ready {_fmt_endpoint(addr, opts.port)}", flush=True)
        main_q = queues[0]
        main_q.start_app_threads()
        if not shutdown.requested.is_set():
            if opts.profile:
                _run_profiled(main_q, opts.profile, opts.profile_top)
            else:
                main_q.driver.run_forever()
        if stats_writer is not None:
            stats_writer.stop()
        for q in queues:
            q.stop_app()
        child_stats = _stop_children(children)
        per_queue = [q.snapshot() for q in queues] + child_stats
        summary = _stats_document(opts, first.offload, per_queue)
        if opts.stats_file:
            write_json_atomically(opts.stats_file, summary)
        if not opts.quiet:
            c = summary["counters"]
            print(f"usertcp serve: stopped; {c.get('TcpPassiveOpens', 0)} connections, "
                  f"{c.get('TcpInSegs', 0)} segments in, {c.get('TcpOutSegs', 0)} out, "
                  f"{c.get('TcpRetransSegs', 0)} retransmitted", file=sys.stderr)
        return 0
    finally:
        if stats_writer is not None:
            stats_writer.stop()
        for pid, r in children:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
                os.waitpid(pid, 0)
            with contextlib.suppress(OSError):
                os.close(r)
        for q in queues:
            with contextlib.suppress(Exception):
                q.close()
        for d in devices:
            d.close()
        for s, h in old.items():
            signal.signal(s, h)


def _fork_queues(opts: ServeOptions, devices: list[TunDevice], children: list[tuple[int, int]]) -> None:
    """``--queue-mode process``: one child per queue 1..N-1, each keeping only its own fd."""
    for i in range(1, opts.queues):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:           # child: only queue i
            os.close(r)
            for j, d in enumerate(devices):
                if j != i:
                    d.close()
            os._exit(_child_main(opts, devices[i], i, w))
        os.close(w)
        devices[i].close()     # the child's now
        children.append((pid, r))
    for _, r in children:      # each child says "R" once it listens
        if os.read(r, 1) != b"R":
            raise RuntimeError("a queue process failed to start")


def _stop_children(children: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """SIGTERM each queue process (it closes its connections the same way) and collect its stats."""
    for pid, _ in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    stats: list[dict[str, Any]] = []
    for pid, r in children:
        with os.fdopen(r, "rb") as pipe:
            data = pipe.read()
        os.waitpid(pid, 0)
        with contextlib.suppress(ValueError):
            stats.append(json.loads(data))
    children.clear()
    return stats


def _child_main(opts: ServeOptions, device: TunDevice, index: int, pipe_w: int) -> int:
    """A forked queue process: serve queue ``index`` until SIGTERM, send stats back."""
    code = 0
    q: QueueServer | None = None
    try:
        q = QueueServer(opts, device, index)
        shutdown = _Shutdown([q])
        signal.signal(signal.SIGTERM, shutdown.on_signal)
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # the parent handles ^C and tells us
        q.start_app()
        os.write(pipe_w, b"R")
        q.start_app_threads()
        q.driver.run_forever()
        q.stop_app()
        os.write(pipe_w, json.dumps(q.snapshot()).encode())
    except BaseException as e:  # report and leave: never return into the parent's code
        print(f"usertcp serve: queue {index}: {e!r}", file=sys.stderr)
        code = 1
    finally:
        with contextlib.suppress(OSError):
            os.close(pipe_w)
        if q is not None:
            with contextlib.suppress(Exception):
                q.close()
    return code


def main(argv: list[str] | None = None) -> int:
    """``python -m usertcp.apps.serve``: the same as ``usertcp serve`` (before it is registered)."""
    parser = argparse.ArgumentParser(prog="usertcp serve")
    add_arguments(parser)
    return cli(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
