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
  server application; the client, the network and the measuring taps excluded).

The server application is event-driven (listener and connection callbacks only
flag work; it runs after each simulation event, like an epoll loop), and the
client sends ``EHLO`` as soon as the banner arrives, then waits for the reply.
Everything is measured from the packets on the link (taps) and the stacks' own
callbacks; nothing is computed from the configured delay except the RTT unit.
"""

from __future__ import annotations

import itertools
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from usertcp.net.driver import VirtualTimeDriver
from usertcp.net.memnet import LinkConfig, LinkDirection, Network
from usertcp.tcp import fastopen
from usertcp.tcp.config import TFO_CLIENT_ENABLE, TFO_SERVER_ENABLE, StackConfig
from usertcp.tcp.connection import Connection
from usertcp.tcp.stack import Listener, Stack
from usertcp.wire.packet import parse_packet
from usertcp.wire.segment import ACK, SYN, Buffer, TxPacket

SCENARIOS = ("accept_send", "preload", "preload_tfo")
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

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kw: Any) -> Any:
            t0 = time.thread_time_ns()
            try:
                return fn(*args, **kw)
            finally:
                self.ns += time.thread_time_ns() - t0
        return timed


class _TimedEndpoint:
    """The server stack as the network sees it, with its receive and timer calls timed.

    Injected into the network in place of the stack (rather than replacing the
    stack's methods), so the stack's class stays untouched, compiled or not.
    """

    def __init__(self, stack: Stack, meter: _CpuMeter) -> None:
        self.stack = stack
        self.meter = meter

    def receive(self, packet: Buffer, now: float, *, checksum_verified: bool = False) -> None:
        t0 = time.thread_time_ns()
        try:
            self.stack.receive(packet, now, checksum_verified=checksum_verified)
        finally:
            self.meter.ns += time.thread_time_ns() - t0

    def datagrams_to_send(self) -> list[TxPacket]:
        return self.stack.datagrams_to_send()

    def get_timer(self) -> float | None:
        return self.stack.get_timer()

    def handle_timer(self, now: float) -> None:
        t0 = time.thread_time_ns()
        try:
            self.stack.handle_timer(now)
        finally:
            self.meter.ns += time.thread_time_ns() - t0


def _scenario(name: str, *, conns: int, rtt: float, seed: int) -> dict[str, float]:
    tfo = name == "preload_tfo"
    bits = TFO_CLIENT_ENABLE | (TFO_SERVER_ENABLE if tfo else 0)
    net = Network(seed=seed)
    client = Stack([CLIENT], StackConfig(fastopen=bits), name="client")
    server = Stack([SERVER], StackConfig(fastopen=bits), name="server")
    cpu = _CpuMeter()
    link = net.connect(net.add_host(client, [CLIENT]), net.add_host(_TimedEndpoint(server, cpu), [SERVER]),
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
        lst.set_preload(BANNER, 0.0)                       # send(MSG_PRELOAD) on the listener
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
    cpu.ns = 0
    segs0 = server.counters["TcpOutSegs"]
    for _ in range(conns):
        one(True)
    done = [r for r in recs.values() if r.syn_sent >= 0]
    if len(done) != conns or any(r.banner_arrival < 0 or r.data_arrival < 0 for r in done):
        raise RuntimeError(f"{name}: incomplete measurements")
    return {
        "banner_rtts": round(statistics.mean((r.banner_arrival - r.syn_sent) / rtt for r in done), 3),
        "server_first_data_rtts": round(
            statistics.mean((r.data_arrival - r.syn_arrival) / rtt for r in done), 3),
        "wakeups_per_conn": statistics.mean(len(r.wakes) for r in done),
        "wakeups_before_banner": statistics.mean(
            sum(1 for w in r.wakes if w < r.banner_sent_order) for r in done),
        "server_segs_out_per_conn": (server.counters["TcpOutSegs"] - segs0) / conns,
        "server_cpu_us_per_conn": round(cpu.ns / 1000 / conns, 1),
        "conns_per_s": round(conns / (cpu.ns / 1e9)) if cpu.ns else 0.0,
        "tfo_passive": float(server.counters["TcpExtTCPFastOpenPassive"]),
    }


def run(*, conns: int = 100, rtt: float = 0.010, seed: int = 1) -> dict[str, Any]:
    """Run the three scenarios; ``rtt`` is the round trip of the link (seconds)."""
    out: dict[str, Any] = {"rtt_s": rtt, "conns": conns}
    for name in SCENARIOS:
        out[name] = _scenario(name, conns=conns, rtt=rtt, seed=seed)
    out["conns_per_s"] = {name: out[name]["conns_per_s"] for name in SCENARIOS}
    return out


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
