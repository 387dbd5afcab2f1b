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
import hashlib
import json
import random
import time
from dataclasses import asdict, dataclass
from typing import Any

from usertcp import socket as us
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
    connections: int
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
        connections=mib_c["TcpActiveOpens"] + mib_s["TcpPassiveOpens"],
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
    srv = us.create_server((SERVER_IP, PORT), host=server)
    srv.setblocking(False)
    cli = client.socket()
    cli.setblocking(False)
    err = cli.connect_ex((SERVER_IP, PORT))
    if err not in (0, us.errno.EINPROGRESS):
        raise OSError(err, "connect failed")
    conn: us.Socket | None = None
    hasher = hashlib.sha256()
    server_bytes = 0
    reply = bytearray()
    sent = 0
    write_closed = False
    client_done = False
    srtt_us = 0
    while not client_done:
        rlist = [srv if conn is None else conn, cli]
        wlist = [cli] if not write_closed else []
        readable, writable, _ = us.select(rlist, wlist, [], timeout)
        if not readable and not writable:
            raise TimeoutError(f"demo stalled: {sent}/{len(data)} bytes sent, {server_bytes} received")
        if srv in readable:
            conn, _ = srv.accept()
            conn.setblocking(False)
            srv.close()
        if cli in writable:
            if sent < len(data):
                try:
                    sent += cli.send(memoryview(data)[sent:sent + _CHUNK])
                except BlockingIOError:
                    pass          # still connecting
            if sent == len(data):
                cli.shutdown(us.SHUT_WR)
                write_closed = True
        if conn is not None and conn in readable:
            chunk = conn.recv(1 << 20)
            if chunk:
                hasher.update(chunk)
                server_bytes += len(chunk)
            else:     # EOF: answer with the digest and close
                conn.sendall(hasher.hexdigest().encode())
                conn.close()
                conn = srv     # keep select's list non-empty; srv is closed, drop it below
                conn = None
                srv_done = True
                del srv_done
        if cli in readable:
            chunk = cli.recv(4096)
            if chunk:
                reply += chunk
            elif write_closed:
                srtt_us = int(cli.tcp_info().get("tcpi_rtt", 0))
                client_done = True
        # Once the server has answered, only the client is left to watch.
        if conn is None and srv.listener is None and not client_done:
            pass
    cli.close()
    return {"digest": reply.decode(errors="replace"), "server_bytes": server_bytes,
            "client_bytes": len(reply), "srtt_us": srtt_us}
