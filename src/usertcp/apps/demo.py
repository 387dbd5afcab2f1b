"""``usertcp demo``: two stacks on the in-memory network, talking through the socket API.

The client sends N random bytes and half-closes; the server hashes what it
receives and, at EOF, answers with the SHA-256 digest and closes; the client
compares it with the digest of what it sent. Both ends are non-blocking sockets
driven by :func:`usertcp.socket.select` from this one thread, which works the same
in virtual time (the wait runs the simulation) and in real time (the driver's I/O
thread runs it).
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import random
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from usertcp import socket as us
from usertcp.cli import parse_size
from usertcp.extras import available
from usertcp.net.driver import RealTimeDriver, VirtualTimeDriver
from usertcp.net.memnet import LinkConfig, Network
from usertcp.net.pcap import PcapWriter
from usertcp.tcp.stack import Stack

CLIENT_IP = "10.0.0.1"
SERVER_IP = "10.0.0.2"
PORT = 5001
_CHUNK = 65536


@dataclass
class DemoResult:
    ok: bool
    connections: int           # TcpActiveOpens of the client
    passive_opens: int         # TcpPassiveOpens of the server (the same connections)
    bytes_client_to_server: int
    bytes_server_to_client: int
    retransmissions: int
    srtt_ms: float
    duration_s: float          # virtual seconds (or real seconds with realtime)
    wall_s: float
    realtime: bool
    loss: float
    sha256_sent: str
    sha256_received: str       # what the server computed and sent back
    packets: int
    pcap: str | None


def run(*, size: int = 2_000_000, loss: float = 0.01, seed: int = 1, realtime: bool = False,
        pcap: str | None = None, delay: float = 0.005, bandwidth_bps: float = 100e6,
        timeout: float = 120.0) -> DemoResult:
    """Run the transfer and return what happened. ``timeout`` bounds each wait (driver seconds)."""
    if size < 0:
        raise ValueError("size must be >= 0")
    net = Network(seed=seed)
    cs, ss = Stack([CLIENT_IP], name="client"), Stack([SERVER_IP], name="server")
    hc, hs = net.add_host(cs, [CLIENT_IP], "client"), net.add_host(ss, [SERVER_IP], "server")
    net.connect(hc, hs, LinkConfig(delay=delay, bandwidth_bps=bandwidth_bps, loss=loss))
    writer = PcapWriter(pcap) if pcap else None
    if writer is not None:
        net.attach_pcap(writer)
    data = random.Random(seed).randbytes(size)
    drv: VirtualTimeDriver | RealTimeDriver = RealTimeDriver(net) if realtime else VirtualTimeDriver(net)
    if isinstance(drv, RealTimeDriver):
        drv.start()
    t_wall = time.perf_counter()
    t0 = drv.now()
    try:
        result = _transfer(us.Host(cs, drv, name="client"), us.Host(ss, drv, name="server"), data, timeout)
    finally:
        if isinstance(drv, RealTimeDriver):
            drv.stop()
        if writer is not None:
            writer.close()
    duration = drv.now() - t0
    wall = time.perf_counter() - t_wall
    digest_sent = hashlib.sha256(data).hexdigest()
    mib_c, mib_s = cs.counters, ss.counters
    return DemoResult(
        ok=result["digest"] == digest_sent and result["server_bytes"] == size,
        connections=mib_c["TcpActiveOpens"],
        passive_opens=mib_s["TcpPassiveOpens"],
        bytes_client_to_server=result["server_bytes"],
        bytes_server_to_client=result["client_bytes"],
        retransmissions=mib_c["TcpRetransSegs"] + mib_s["TcpRetransSegs"],
        srtt_ms=result["srtt_us"] / 1000.0,
        duration_s=duration,
        wall_s=wall,
        realtime=realtime,
        loss=loss,
        sha256_sent=digest_sent,
        sha256_received=result["digest"],
        packets=sum(s["sent"] for s in net.link_stats().values()),
        pcap=pcap,
    )


def _transfer(client: us.Host, server: us.Host, data: bytes, timeout: float) -> dict[str, Any]:
    listening: us.Socket | None = us.create_server((SERVER_IP, PORT), host=server)
    assert listening is not None
    listening.setblocking(False)
    cli = client.socket()
    cli.setblocking(False)
    err = cli.connect_ex((SERVER_IP, PORT))
    if err not in (0, errno.EINPROGRESS):
        raise OSError(err, f"connect failed: {os.strerror(err)}")
    conn: us.Socket | None = None
    hasher = hashlib.sha256()
    server_bytes = sent = srtt_us = 0
    reply = bytearray()
    write_closed = False
    while True:
        rlist = [s for s in (cli, listening, conn) if s is not None]
        readable, writable, _ = us.select(rlist, [] if write_closed else [cli], [], timeout)
        if not readable and not writable:
            raise TimeoutError(f"demo stalled: {sent}/{len(data)} bytes sent, {server_bytes} received")
        if listening is not None and listening in readable:
            conn, _ = listening.accept()
            conn.setblocking(False)
            listening.close()      # one connection is all the demo serves
            listening = None
        if cli in writable:
            if sent < len(data):
                sent += cli.send(memoryview(data)[sent:sent + _CHUNK])
            if sent == len(data):
                cli.shutdown(us.SHUT_WR)
                write_closed = True
        if conn is not None and conn in readable:
            chunk = conn.recv(1 << 20)
            if chunk:
                hasher.update(chunk)
                server_bytes += len(chunk)
            else:                  # EOF: answer with the digest and close
                conn.sendall(hasher.hexdigest().encode())
                conn.close()
                conn = None
        if cli in readable:
            chunk = cli.recv(4096)
            if chunk:
                reply += chunk
            elif write_closed:
                srtt_us = int(cli.tcp_info().get("tcpi_rtt", 0))
                break
    cli.close()
    return {"digest": reply.decode(errors="replace"), "server_bytes": server_bytes,
            "client_bytes": len(reply), "srtt_us": srtt_us}


# ----------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bytes", type=parse_size, default=2_000_000, metavar="N",
                        help="bytes the client sends (default 2000000; 5M, 64Ki... allowed)")
    parser.add_argument("--loss", type=float, default=0.01, metavar="P",
                        help="packet loss probability on each link direction (default 0.01)")
    parser.add_argument("--seed", type=int, default=1, metavar="S",
                        help="seed of the network's impairments and of the data (default 1)")
    parser.add_argument("--pcap", metavar="FILE", help="write a capture of the link to FILE")
    parser.add_argument("--realtime", action="store_true",
                        help="run on the real clock (RealTimeDriver) instead of virtual time")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")


def cli(args: argparse.Namespace) -> int:
    if not 0.0 <= args.loss < 1.0:
        print("usertcp demo: --loss must be in [0, 1)", file=sys.stderr)
        return 2
    try:
        res = run(size=args.bytes, loss=args.loss, seed=args.seed, realtime=args.realtime, pcap=args.pcap)
    except OSError as e:
        print(f"usertcp demo: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(asdict(res)))
    else:
        print_summary(res)
    return 0 if res.ok else 1


def summary_rows(res: DemoResult) -> list[tuple[str, str]]:
    """The summary as (label, value) rows."""
    clock = "real" if res.realtime else "virtual"
    rows = [
        ("connections", f"{res.connections} (server accepted {res.passive_opens})"),
        ("client -> server", f"{res.bytes_client_to_server:,} bytes"),
        ("server -> client", f"{res.bytes_server_to_client:,} bytes (the digest)"),
        ("retransmissions", f"{res.retransmissions} (TcpRetransSegs)"),
        ("packets on the link", f"{res.packets:,}"),
        ("RTT (srtt)", f"{res.srtt_ms:.2f} ms"),
        (f"duration ({clock})", f"{res.duration_s:.3f} s"),
        ("wall time", f"{res.wall_s:.3f} s"),
        ("sha256 sent", res.sha256_sent[:32] + "..."),
        ("sha256 at server", res.sha256_received[:32] + "..."),
    ]
    if res.pcap:
        rows.append(("pcap", res.pcap))
    return rows


def print_summary(res: DemoResult) -> None:
    """A table (rich, the [cli] extra) or, without rich, the same rows as plain text."""
    title = f"usertcp demo: {CLIENT_IP} -> {SERVER_IP}:{PORT}, loss {res.loss:.1%}"
    verdict = "OK: checksums match" if res.ok else "FAILED: checksums differ"
    if not available("rich"):
        print(title)
        width = max(len(label) for label, _ in summary_rows(res))
        for label, value in summary_rows(res):
            print(f"  {label:<{width}}  {value}")
        print(verdict)
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for label, value in summary_rows(res):
        table.add_row(label, value)
    console.print(table)
    console.print(f"[green]{verdict}[/green]" if res.ok else f"[red]{verdict}[/red]")
