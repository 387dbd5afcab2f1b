"""A short, deterministic in-memory transfer for ``ss``, ``nstat``, ``trace`` and the docs.

Two stacks (client 10.0.0.1, server 10.0.0.2) on one impaired link, in virtual time,
driven through the sans-IO core directly (no socket API): the client sends ``size``
bytes, the server reads them. ``stop_at`` < 1 stops when that fraction has arrived,
leaving the connection open mid-transfer (queues, cwnd and retransmissions to look at).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from usertcp.net.driver import VirtualTimeDriver
from usertcp.net.memnet import LinkConfig, Network
from usertcp.tcp.connection import Connection, State
from usertcp.tcp.stack import Stack

CLIENT_IP = "10.0.0.1"
SERVER_IP = "10.0.0.2"
PORT = 5001


@dataclass
class Transfer:
    network: Network
    driver: VirtualTimeDriver
    client: Stack
    server: Stack
    client_conn: Connection
    server_conn: Connection | None
    sent: int = 0
    received: int = 0
    done: bool = False
    # When the exchange ended: both FINs acknowledged (the TIME_WAIT that follows is not part
    # of it), or the time the run stopped.
    finished_at: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def stacks(self) -> tuple[Stack, Stack]:
        return (self.client, self.server)


def run_transfer(*, size: int = 1_000_000, loss: float = 0.02, seed: int = 1, stop_at: float = 1.0,
                 delay: float = 0.005, bandwidth_bps: float | None = 20e6, close: bool = True,
                 setup: Callable[[Network, Stack, Stack], None] | None = None,
                 timeout: float = 300.0) -> Transfer:
    """Run the transfer (virtual time); ``setup(network, client, server)`` runs before the SYN
    (attach tracers, samplers, pcap there). With ``close`` and ``stop_at >= 1`` both ends
    close and the run continues until the connections are gone or time runs out."""
    net = Network(seed=seed)
    client, server = Stack([CLIENT_IP], name="client"), Stack([SERVER_IP], name="server")
    hc, hs = net.add_host(client, [CLIENT_IP], "client"), net.add_host(server, [SERVER_IP], "server")
    net.connect(hc, hs, LinkConfig(delay=delay, bandwidth_bps=bandwidth_bps, loss=loss))
    drv = VirtualTimeDriver(net)
    if setup is not None:
        setup(net, client, server)
    listener = server.listen(PORT)
    conn = client.create_connection(SERVER_IP, PORT)
    client.connect(conn, drv.now())
    data = random.Random(seed).randbytes(size)
    tr = Transfer(net, drv, client, server, conn, None)
    if not drv.run_until(lambda: bool(listener.accept_queue) or conn.state is State.CLOSED, timeout):
        raise RuntimeError("handshake did not complete")
    tr.server_conn = sc = listener.accept()
    if sc is None or conn.state is not State.ESTABLISHED:
        raise RuntimeError("handshake failed")
    target = size if stop_at >= 1 else int(size * stop_at)
    deadline = drv.now() + timeout
    view = memoryview(data)
    while tr.received < target and drv.now() < deadline:
        if tr.sent < size and conn.send_space:
            tr.sent += conn.send(view[tr.sent:tr.sent + 65536], drv.now())
        while sc.readable_bytes:
            tr.received += len(sc.recv(1 << 20, drv.now()))
        if tr.received >= target:
            break
        drv.run_until(lambda: (tr.sent < size and conn.send_space > 0) or sc.readable_bytes > 0,
                      deadline - drv.now())
    tr.done = tr.received >= size
    if close and tr.done:
        conn.close(drv.now())
        drv.run_until(lambda: sc.fin_received, 10.0)
        sc.close(drv.now())
        drv.run_until(lambda: _fins_acked(conn, sc), 120.0)
        tr.finished_at = drv.now()
        drv.run_until(lambda: not client.connections and not server.connections, 120.0)
    else:
        drv.kick()
        tr.finished_at = drv.now()
    return tr


def _fins_acked(client: Connection, server: Connection) -> bool:
    """Both directions closed and acknowledged: what is left is the client's TIME_WAIT."""
    return client.state in (State.TIME_WAIT, State.CLOSED) and server.state is State.CLOSED
