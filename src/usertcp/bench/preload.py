"""Server-first protocols: accept-then-send vs. MSG_PRELOAD vs. MSG_PRELOAD + TCP Fast Open.

The thread's latency table, reproduced on the in-memory network (virtual time):

- ``banner_rtts``: at the client, from sending the SYN to receiving the first
  banner byte, in round trips;
- ``server_first_data_rtts``: at the server, from the SYN's arrival to the
  arrival of the client's first data byte (its EHLO, sent when the banner came);
- ``wakeups_per_conn``: how often the server application ran for a connection
  (accept, read), and ``wakeups_before_banner``: how many of those came before the
  banner left (the preload needs none);
- ``conns_per_s``: connections one server stack completes per second of its own
  CPU time (thread CPU time of the server stack's receive/timer calls and of the
  server application; the client, the network and the measuring taps excluded);
  ``server_cpu_us_per_conn`` and ``server_wall_us_per_conn`` are that CPU time and
  the wall-clock time of the same calls, per connection;
- ``banner_ms`` for the ``*_synack_lost`` scenarios: Fast Open with the first SYN-ACK
  lost on the link, once as the patches do it (the retransmitted SYN-ACK carries no
  data; the banner is resent after the 3rd ACK) and once with the usertcp option
  ``preload_synack_rtx_data`` (every SYN-ACK carries it).

``tun`` (root and /dev/net/tun; "auto" runs it when possible) adds the design's
latency table measured over a TUN device with this machine's kernel as the SMTP
client in a network namespace and ``usertcp serve --app smtp`` as the server:
``syn_to_first_client_data_us`` from the server's packet capture (``--pcap``; the
kernel client sends EHLO as soon as the banner arrives), for accept-then-send and
preload, each without and with Fast Open (the client uses sendto(MSG_FASTOPEN) with
a cookie fetched by a first, unmeasured connection), all in one run.

The server application is event-driven (listener and connection callbacks only
flag work; it runs after each simulation event, like an epoll loop), and the
client sends ``EHLO`` as soon as the banner arrives, then waits for the reply.
Everything is measured from the packets on the link (taps) and the stacks' own
callbacks; nothing is computed from the configured delay except the RTT unit.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from usertcp.net import netns
from usertcp.net.driver import VirtualTimeDriver
from usertcp.net.memnet import LinkConfig, LinkDirection, Network
from usertcp.net.pcap import read_pcap
from usertcp.tcp import fastopen
from usertcp.tcp.config import TFO_CLIENT_ENABLE, TFO_SERVER_ENABLE, StackConfig
from usertcp.tcp.connection import Connection
from usertcp.tcp.stack import Listener, Stack
from usertcp.wire.packet import parse_packet
from usertcp.wire.segment import ACK, SYN, DropPacket, NotTcp, Segment

SCENARIOS = ("accept_send", "preload", "preload_tfo", "preload_tfo_synack_lost",
             "preload_tfo_synack_lost_rtx_data")
CLIENT, SERVER, PORT = "10.0.0.1", "10.0.0.2", 25
BANNER = b"220 mx.bench.test ESMTP usertcp\r\n"


@dataclass
class _Rec:
    syn_sent: float = -1.0
    syn_arrival: float = -1.0
    banner_sent_order: int = -1
    banner_arrival: float = -1.0
    data_arrival: float = -1.0
    wakes: list[int] = field(default_factory=list)   # event order of each server wake-up


class _CpuMeter:
    """Accumulates thread CPU time spent inside wrapped calls."""

    def __init__(self) -> None:
        self.ns = 0
        self.wall_ns = 0                                   # wall-clock time of the same calls

    def add(self, t0: int, w0: int) -> None:
        """Count the time since ``t0`` (thread CPU) and ``w0`` (wall clock), in ns."""
        self.ns += time.thread_time_ns() - t0
        self.wall_ns += time.perf_counter_ns() - w0

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kw: Any) -> Any:
            t0, w0 = time.thread_time_ns(), time.perf_counter_ns()
            try:
                return fn(*args, **kw)
            finally:
                self.add(t0, w0)
        return timed


class _ServerEndpoint:
    """The server stack as the network sees it (an injected collaborator, the stack itself
    is untouched): it meters the thread CPU and wall-clock time of every receive and timer
    call, and with ``lose_first_synack`` drops each connection's first SYN-ACK on the wire
    (the stack sent it and believes it sent; the network loses it)."""

    def __init__(self, stack: Stack, cpu: _CpuMeter, *, lose_first_synack: bool) -> None:
        self.stack = stack
        self.cpu = cpu
        self.lose_first_synack = lose_first_synack
        self.lost: set[int] = set()                        # client ports whose SYN-ACK was lost

    def receive(self, packet: Any, now: float, *, checksum_verified: bool = False) -> None:
        t0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        self.stack.receive(packet, now, checksum_verified=checksum_verified)
        self.cpu.add(t0, w0)

    def datagrams_to_send(self) -> list[Any]:
        packets = self.stack.datagrams_to_send()
        if not self.lose_first_synack:
            return packets
        out = []
        for pkt in packets:
            seg = parse_packet(pkt.tobytes(), verify_checksum=False)
            if seg.flags & SYN and seg.flags & ACK and seg.dport not in self.lost:
                self.lost.add(seg.dport)
                continue
            out.append(pkt)
        return out

    def get_timer(self) -> float | None:
        return self.stack.get_timer()

    def handle_timer(self, now: float) -> None:
        t0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        self.stack.handle_timer(now)
        self.cpu.add(t0, w0)


def _scenario(name: str, *, conns: int, rtt: float, seed: int) -> dict[str, float]:
    tfo = name.startswith("preload_tfo")
    synack_lost = name.startswith("preload_tfo_synack_lost")
    bits = TFO_CLIENT_ENABLE | (TFO_SERVER_ENABLE if tfo else 0)
    net = Network(seed=seed)
    client = Stack([CLIENT], StackConfig(fastopen=bits), name="client")
    server = Stack([SERVER], StackConfig(fastopen=bits, preload_synack_rtx_data=name.endswith("_rtx_data")),
                   name="server")
    cpu = _CpuMeter()
    endpoint = _ServerEndpoint(server, cpu, lose_first_synack=synack_lost)
    link = net.connect(net.add_host(client, [CLIENT]), net.add_host(endpoint, [SERVER]),
                       LinkConfig(delay=rtt / 2))
    drv = VirtualTimeDriver(net)
    order = itertools.count()
    recs: dict[int, _Rec] = {}

    def rec(port: int) -> _Rec:
        r = recs.get(port)
        if r is None:
            r = recs[port] = _Rec()
        return r

    def up(data: bytes, now: float, _d: LinkDirection) -> None:      # client -> server, arrivals
        seg = parse_packet(data, verify_checksum=False)
        r = rec(seg.sport)
        if seg.flags & SYN and not seg.flags & ACK:
            if r.syn_arrival < 0:
                r.syn_arrival = now
        elif len(seg.payload) and r.data_arrival < 0:
            r.data_arrival = now

    def down_sent(data: bytes, now: float, _d: LinkDirection) -> None:
        seg = parse_packet(data, verify_checksum=False)
        r = rec(seg.dport)
        if len(seg.payload) and r.banner_sent_order < 0:
            r.banner_sent_order = next(order)

    def down_arrived(data: bytes, now: float, _d: LinkDirection) -> None:
        seg = parse_packet(data, verify_checksum=False)
        r = rec(seg.dport)
        if len(seg.payload) and r.banner_arrival < 0:
            r.banner_arrival = now

    net.add_tap(up, link=link.ab, where="deliver")
    net.add_tap(down_sent, link=link.ba, where="send")
    net.add_tap(down_arrived, link=link.ba, where="deliver")

    lst = server.listen(PORT, backlog=1024)
    if name != "accept_send":
        lst.append_preload(BANNER, 0.0)                    # send(MSG_PRELOAD) on the listener
    if tfo:
        lst.fastopen_qlen = 1024                           # setsockopt(TCP_FASTOPEN)
    accept_ready = [False]
    readable: set[Connection] = set()

    def on_accept(_l: Listener) -> None:
        accept_ready[0] = True

    def on_readable(c: Connection) -> None:
        readable.add(c)

    lst.on_accept_ready = on_accept

    def server_app(now: float) -> None:
        """One epoll-style round of the server application."""
        if accept_ready[0]:
            accept_ready[0] = False
            while (c := lst.accept()) is not None:
                rec(c.remote_port).wakes.append(next(order))
                c.on_readable = on_readable
                if name == "accept_send":
                    c.send(BANNER, now)
                if c.readable_bytes:
                    readable.add(c)
        while readable:
            c = readable.pop()
            if not c.readable_bytes:
                continue                                   # a close or reset: no work
            rec(c.remote_port).wakes.append(next(order))
            if b"\n" in c.recv(65536, now):
                c.send(b"221 2.0.0 Bye\r\n", now)
                c.close(now)

    timed_app = cpu.wrap(server_app)

    def one(measure: bool) -> None:
        conn = client.create_connection(SERVER, PORT)
        r = rec(conn.local_port)
        r.syn_sent = drv.now()
        if tfo:
            fastopen.tfo_connect(conn, b"", drv.now())    # sendto(MSG_FASTOPEN) with no data
        else:
            client.connect(conn, drv.now())
        sent_ehlo = False
        got = b""
        while b"221" not in got:
            def wake() -> bool:
                return accept_ready[0] or bool(readable) or conn.readable_bytes > 0
            if not drv.run_until(wake, 30.0):
                raise RuntimeError(f"{name}: connection stalled at t={drv.now():.3f}")
            timed_app(drv.now())
            if conn.readable_bytes:
                got += conn.recv(65536, drv.now())
                if not sent_ehlo and got.startswith(BANNER[:1]):
                    conn.send(b"EHLO client.bench.test\r\n", drv.now())
                    sent_ehlo = True
            drv.kick()
        conn.close(drv.now())
        drv.run_for(rtt * 2)                               # let the FINs go before the next one
        timed_app(drv.now())
        if not measure:
            recs.pop(conn.local_port, None)

    if tfo:
        one(False)                                         # first contact: fetch the cookie
        endpoint.lost.clear()                              # it lost its SYN-ACK too: not measured
    cpu.ns = 0
    cpu.wall_ns = 0
    segs0 = server.counters["TcpOutSegs"]
    for _ in range(conns):
        one(True)
    done = [r for r in recs.values() if r.syn_sent >= 0]
    if len(done) != conns or any(r.banner_arrival < 0 or r.data_arrival < 0 for r in done):
        raise RuntimeError(f"{name}: incomplete measurements")
    return {
        "banner_rtts": round(statistics.mean((r.banner_arrival - r.syn_sent) / rtt for r in done), 3),
        "banner_ms": round(statistics.mean((r.banner_arrival - r.syn_sent) * 1e3 for r in done), 3),
        "server_first_data_rtts": round(
            statistics.mean((r.data_arrival - r.syn_arrival) / rtt for r in done), 3),
        "wakeups_per_conn": statistics.mean(len(r.wakes) for r in done),
        "wakeups_before_banner": statistics.mean(
            sum(1 for w in r.wakes if w < r.banner_sent_order) for r in done),
        "server_segs_out_per_conn": (server.counters["TcpOutSegs"] - segs0) / conns,
        "server_cpu_us_per_conn": round(cpu.ns / 1000 / conns, 1),
        "server_wall_us_per_conn": round(cpu.wall_ns / 1000 / conns, 1),
        "conns_per_s": round(conns / (cpu.ns / 1e9)) if cpu.ns else 0.0,
        "tfo_passive": float(server.counters["TcpExtTCPFastOpenPassive"]),
    }


def run(*, conns: int = 100, rtt: float = 0.010, seed: int = 1, tun: bool | str = "auto",
        tun_conns: int = 30) -> dict[str, Any]:
    """Run the in-memory scenarios (``rtt``: the link's round trip, seconds), then the
    TUN table with ``tun_conns`` measured kernel connections per scenario."""
    out: dict[str, Any] = {"rtt_s": rtt, "conns": conns}
    for name in SCENARIOS:
        out[name] = _scenario(name, conns=conns, rtt=rtt, seed=seed)
    out["conns_per_s"] = {name: out[name]["conns_per_s"] for name in SCENARIOS}
    out["synack_lost_banner_ms"] = {
        "rtx_synack_without_data": out["preload_tfo_synack_lost"]["banner_ms"],
        "rtx_synack_with_data": out["preload_tfo_synack_lost_rtx_data"]["banner_ms"]}
    can_tun = os.geteuid() == 0 and os.path.exists("/dev/net/tun")
    if tun is True or (tun == "auto" and can_tun):
        if not can_tun:
            raise ValueError("tun=True needs root and /dev/net/tun (it makes a network namespace)")
        out["tun"] = tun_table(tun_conns)
    else:
        out["tun"] = {"skipped": "needs root and /dev/net/tun" if tun == "auto" else "tun=False"}
    return out


# ------------------------------------------------------------------ over TUN

TUN_SCENARIOS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("accept_send", ("--preload", ""), False),
    ("accept_send_tfo", ("--fastopen", "--preload", ""), True),
    ("preload", (), False),
    ("preload_tfo", ("--fastopen",), True),
)
SMTP_PORT = 25
REF_PORT = 2525


def _kernel_smtp_client(addr: str, port: int, conns: int, tfo: bool) -> list[tuple[float, float]]:
    """The kernel's SMTP client: EHLO as soon as the banner arrives, then QUIT. Per
    connection (client clock, us): SYN sent -> banner read, SYN sent -> EHLO written."""
    out: list[tuple[float, float]] = []
    for _ in range(conns):
        s = socket.socket()
        s.settimeout(10)
        try:
            t0 = time.perf_counter()
            if tfo:
                with contextlib.suppress(BlockingIOError):   # EINPROGRESS: the SYN is out
                    s.sendto(b"", socket.MSG_FASTOPEN, (addr, port))
            else:
                s.connect((addr, port))
            _read_until(s, b"\r\n", "its banner")
            t_banner = time.perf_counter()
            s.sendall(b"EHLO client.bench.test\r\n")
            t_data = time.perf_counter()
            _read_until(s, b"250 ", "its EHLO reply")
            s.sendall(b"QUIT\r\n")
            while s.recv(4096):
                pass
        finally:
            s.close()
        out.append(((t_banner - t0) * 1e6, (t_data - t0) * 1e6))
    return out


def _read_until(s: socket.socket, marker: bytes, what: str) -> None:
    buf = b""
    while marker not in buf:
        chunk = s.recv(4096)
        if not chunk:
            raise RuntimeError(f"server closed before {what}")
        buf += chunk


# The reference server of the kernel-only rows: accept, then send the banner, in a process
# of its own (``fork``: a child process per connection sends it, as Exim does).
_REF_SERVER = r"""
import os, signal, socket, sys
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
port, fork = int(sys.argv[1]), sys.argv[2] == "fork"
lst = socket.socket()
lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
lst.bind(("127.0.0.1", port))
lst.listen(64)
print("ready", flush=True)
def session(c):
    c.sendall(b"220 mx.bench.test ESMTP kernel\r\n")
    buf = b""
    while True:
        d = c.recv(4096)
        if not d:
            break
        buf += d
        if b"EHLO" in buf and b"\r\n" in buf:
            c.sendall(b"250 mx.bench.test\r\n")
            buf = b""
        elif b"QUIT" in buf:
            c.sendall(b"221 bye\r\n")
            break
    c.close()
while True:
    c, _ = lst.accept()
    if fork:
        if os.fork() == 0:
            lst.close()
            session(c)
            os._exit(0)
        c.close()
    else:
        session(c)
"""


class _Capture:
    """``tcpdump`` on ``dev`` in namespace ``ns``: the kernel's own timestamps."""

    def __init__(self, ns: str, dev: str, path: str) -> None:
        self._err = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(["ip", "netns", "exec", ns, "tcpdump", "-i", dev, "-w", path, "-U",
                                      "-n", "-s", "256", "--immediate-mode",
                                      "--time-stamp-precision=nano", "tcp"],
                                     stdout=subprocess.DEVNULL, stderr=self._err)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:   # "listening on ..." once the capture is open
            self._err.seek(0)
            if "listening on" in self._err.read() or self.proc.poll() is not None:
                break
            time.sleep(0.02)

    def stop(self) -> None:
        time.sleep(0.2)                      # let the last packets reach the file
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._err.close()


def _segments(pcap: str) -> list[tuple[float, Segment]]:
    """TCP segments of a capture (raw IP from usertcp and TUN, Ethernet from loopback)."""
    out: list[tuple[float, Segment]] = []
    for ts, data in read_pcap(pcap):
        if data and data[0] >> 4 not in (4, 6) and len(data) > 14:
            data = data[14:]                              # DLT_EN10MB on lo
        try:
            out.append((ts, parse_packet(data, verify_checksum=False)))
        except (DropPacket, NotTcp):
            continue
    return out


_EVENTS = ("syn", "synack", "ack", "banner", "data")


def _handshakes(segs: list[tuple[float, Segment]], server_port: int) -> list[dict[str, float]]:
    """Per connection, in SYN order, the first time of: client SYN, server SYN-ACK, the
    client's 3rd ACK, the server's first data byte (the banner), the client's first data."""
    conns: dict[int, dict[str, float]] = {}
    for ts, seg in segs:
        if seg.dport == server_port:                      # client -> server
            t = conns.setdefault(seg.sport, {}) if seg.flags & SYN else conns.get(seg.sport)
            if t is None:
                continue
            if seg.flags & SYN:
                t.setdefault("syn", ts)
                if len(seg.payload):
                    t.setdefault("data", ts)
            elif len(seg.payload):
                t.setdefault("data", ts)
            elif "synack" in t:
                t.setdefault("ack", ts)
        elif seg.sport == server_port and seg.dport in conns:
            t = conns[seg.dport]
            if seg.flags & SYN:
                t.setdefault("synack", ts)
            if len(seg.payload):
                t.setdefault("banner", ts)
    return sorted((t for t in conns.values() if all(e in t for e in _EVENTS)), key=lambda t: t["syn"])


def _stages(hs: list[dict[str, float]]) -> dict[str, float]:
    """Median microseconds of each step between two captured events, over connections."""
    def med(a: str, b: str) -> float:
        return round(statistics.median((t[b] - t[a]) * 1e6 for t in hs), 1)
    return {"syn_to_first_client_data": med("syn", "data"), "syn_to_synack": med("syn", "synack"),
            "synack_to_ack": med("synack", "ack"), "syn_to_banner": med("syn", "banner"),
            "ack_to_banner": med("ack", "banner"), "banner_to_client_data": med("banner", "data")}


def _tun_hops(ours: list[tuple[float, Segment]], kernel: list[tuple[float, Segment]],
              server_ip: bytes) -> dict[str, float]:
    """Median one-way time through the TUN device, matching each packet in usertcp's
    capture with the kernel's (same clock): kernel -> usertcp (the kernel hands it to the
    device until usertcp's loop reads it) and usertcp -> kernel (write until the kernel sees it)."""
    def key(seg: Segment) -> tuple[int, int, int, int, int, int]:
        return seg.sport, seg.dport, seg.seq, seg.ack, seg.flags, len(seg.payload)
    k_times: dict[tuple[int, ...], float] = {}
    for ts, seg in kernel:
        k_times.setdefault(key(seg), ts)
    inbound, outbound = [], []
    for ts, seg in ours:
        kt = k_times.get(key(seg))
        if kt is None:
            continue
        if seg.dst == server_ip:
            inbound.append((ts - kt) * 1e6)
        else:
            outbound.append((kt - ts) * 1e6)
    return {"kernel_to_usertcp_us": round(statistics.median(inbound), 1) if inbound else -1.0,
            "usertcp_to_kernel_us": round(statistics.median(outbound), 1) if outbound else -1.0,
            "matched_packets": len(inbound) + len(outbound)}


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 1), "min": round(min(values), 1),
            "max": round(max(values), 1), "n": len(values)}


def _kernel_reference(d: str, conns: int, fork: bool) -> dict[str, Any]:
    """The design's setting on this machine: kernel server and client on loopback, the
    server an accept-then-send process (``fork``: a child process per connection)."""
    name = "kernel_accept_fork_send" if fork else "kernel_accept_send"
    pcap = os.path.join(d, f"{name}.pcap")
    with netns.namespace("utcpk") as ns:
        srv = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", _REF_SERVER, str(REF_PORT),
                                "fork" if fork else "plain"], stdout=subprocess.PIPE, text=True)
        cap = None
        try:
            assert srv.stdout is not None
            if srv.stdout.readline().strip() != "ready":
                raise RuntimeError("the reference server did not start")
            cap = _Capture(ns, "lo", pcap)
            client = netns.call_in_namespace(ns, _kernel_smtp_client, "127.0.0.1", REF_PORT, conns + 1, False)
        finally:
            if cap is not None:
                cap.stop()
            srv.kill()
            srv.wait(5)
            if srv.stdout is not None:
                srv.stdout.close()
    hs = _handshakes(_segments(pcap), REF_PORT)[1:]
    return {"syn_to_first_client_data_us": _summary([(t["data"] - t["syn"]) * 1e6 for t in hs]),
            "client_syn_to_banner_us": _summary([b for b, _ in client[1:]]),
            "stages_median_us": _stages(hs)}


def _tun_scenario(d: str, name: str, args: tuple[str, ...], tfo: bool, conns: int) -> dict[str, Any]:
    """One ``usertcp serve --app smtp`` in a fresh namespace, the kernel as its client; both
    sides of the TUN device are captured (usertcp's ``--pcap`` and tcpdump)."""
    from usertcp.bench.tun import DEV, US, ServeProcess  # the serve-subprocess helper of bench tun

    pcap, kpcap, stats = (os.path.join(d, f"{name}{ext}") for ext in (".pcap", ".kernel.pcap", ".json"))
    with netns.namespace("utcpl") as ns:
        srv = ServeProcess(ns, "--app", "smtp", "--pcap", pcap, "--stats-file", stats, *args)
        cap = None
        try:
            cap = _Capture(ns, DEV, kpcap)
            client = netns.call_in_namespace(ns, _kernel_smtp_client, US, SMTP_PORT, conns + 1, tfo)
        finally:
            if cap is not None:
                cap.stop()
            rc = srv.stop()
    if rc != 0:
        raise RuntimeError(f"usertcp serve failed ({rc}): {srv.stderr}")
    ours, kernel = _segments(pcap), _segments(kpcap)
    hs = _handshakes(ours, SMTP_PORT)[1:]
    khs = _handshakes(kernel, SMTP_PORT)[1:]
    counters = json.loads(Path(stats).read_text())["counters"]
    return {
        "syn_to_first_client_data_us": _summary([(t["data"] - t["syn"]) * 1e6 for t in hs]),
        "kernel_side_syn_to_first_client_data_us": _summary([(t["data"] - t["syn"]) * 1e6 for t in khs]),
        "client_syn_to_banner_us": _summary([b for b, _ in client[1:]]),
        "client_syn_to_ehlo_us": _summary([e for _, e in client[1:]]),
        "stages_median_us": _stages(hs),
        "tun_hops": _tun_hops(ours, kernel, socket.inet_aton(US)),
        "tfo_passive": counters.get("TcpExtTCPFastOpenPassive", 0),
        "server_segs_out_per_conn": round(counters.get("TcpOutSegs", 0) / (conns + 1), 2),
    }


def tun_table(conns: int = 30) -> dict[str, Any]:
    """The design's table over TUN (one usertcp serve per scenario, this kernel as client),
    with where the time goes, and the kernel-only reference rows on loopback."""
    out: dict[str, Any] = {
        "method": "usertcp serve --app smtp on a TUN device in a network namespace, this machine's kernel "
                  "as client in it; one unmeasured first connection per scenario (Fast Open: fetches the "
                  "cookie). Times from usertcp's capture (--pcap: taken when its loop reads a batch or "
                  "writes a packet) and, for the TUN hops, tcpdump's on the device (the kernel's side). "
                  "stages: medians between captured events (syn, synack, the client's 3rd ack, the "
                  "server's first data = banner, the client's first data). Reference rows: kernel "
                  "server and client on loopback, tcpdump on lo",
        "kernel": os.uname().release, "load_avg_1m_before": round(os.getloadavg()[0], 2)}
    with tempfile.TemporaryDirectory(prefix="utcp-preload-") as d:
        for name, args, tfo in TUN_SCENARIOS:
            out[name] = _tun_scenario(d, name, args, tfo, conns)
        for fork in (False, True):
            ref = _kernel_reference(d, conns, fork)
            out["kernel_accept_fork_send" if fork else "kernel_accept_send"] = ref
    names = [n for n, _, _ in TUN_SCENARIOS] + ["kernel_accept_send", "kernel_accept_fork_send"]
    out["median_syn_to_first_client_data_us"] = {n: out[n]["syn_to_first_client_data_us"]["median"]
                                                 for n in names}
    out["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    return out


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
