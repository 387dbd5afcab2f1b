"""Soak: 1 000 concurrent connections over a lossy, reordering in-memory link.

Each client connection uploads its own pseudo-random bytes; the server checks them,
answers with its own bytes for that connection and closes; the client checks the answer
and closes. At the end every byte was delivered exactly (bytes lost = 0), every
connection is closed on both sides (TIME-WAIT left to expire), and the invariant checker
holds throughout. ``USERTCP_SOAK_CONNS`` / ``USERTCP_SOAK_BYTES`` scale it (CI default:
1 000 connections, 16 KiB each way). The event-driven application (``on_readable`` /
``on_writable`` marking connections dirty) keeps a tick's cost proportional to what
happened in it, not to the number of connections.

The TUN variant against the kernel (a few hundred connections, ``usertcp serve``) is left
to the TUN tooling.
"""

from __future__ import annotations

import hashlib
import json
import os
import random

from pair import B_ADDR, make_pair
from peer import ISN_SECRET, TS_SECRET
from usertcp.net.memnet import LinkConfig
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import Connection, State
from usertcp.tcp.invariants import check_invariants
from usertcp.tcp.stack import Listener

CONNS = int(os.environ.get("USERTCP_SOAK_CONNS", "1000"))
SIZE = int(os.environ.get("USERTCP_SOAK_BYTES", "16384"))
LIVE = frozenset({State.ESTABLISHED, State.FIN_WAIT_1, State.FIN_WAIT_2, State.CLOSE_WAIT})
BLOB = random.Random(1122).randbytes(1 << 20)


def payload(i: int, direction: int, size: int) -> bytes:
    start = (i * 7919 + direction * 524_287) % (len(BLOB) - size)
    return BLOB[start:start + size]


def test_soak_concurrent_connections_lossy_reordering() -> None:
    link = LinkConfig(delay=0.01, loss=0.01, reorder=0.03, duplicate=0.002, jitter=0.002)
    cfg_a = StackConfig(isn_secret=ISN_SECRET, ts_secret=TS_SECRET, time_wait=5.0)
    cfg_b = StackConfig(isn_secret=TS_SECRET, ts_secret=ISN_SECRET, time_wait=5.0)
    pair = make_pair(link, seed=1000, cfg_a=cfg_a, cfg_b=cfg_b)
    a, b, drv = pair.a, pair.b, pair.driver
    lst = b.listen(80, backlog=CONNS)
    dirty: dict[Connection, None] = {}        # an ordered set: the run is deterministic
    at_barrier: list[int] = []                 # clients open when the last upload completed
    uploaded: set[int] = set()                 # server conns whose upload is complete
    index: dict[int, int] = {}                 # id(server conn) -> client index, from its request
    up_sent = [0] * CONNS
    down_sent: dict[int, int] = {}
    up_got: dict[int, bytearray] = {}
    down_got = [bytearray() for _ in range(CONNS)]
    clients: list[Connection] = []
    servers: list[Connection] = []

    def mark(c: Connection) -> None:
        dirty[c] = None

    def on_accept(listener: Listener) -> None:
        while (s := lst.accept()) is not None:
            s.on_readable = s.on_writable = mark
            servers.append(s)
            up_got[id(s)] = bytearray()
            dirty[s] = None

    lst.on_accept_ready = on_accept
    client_of = {}
    for i in range(CONNS):
        c = a.create_connection(B_ADDR, 80)
        c.on_readable = c.on_writable = mark
        client_of[id(c)] = i
        clients.append(c)

    def client_step(c: Connection, now: float) -> None:
        i = client_of[id(c)]
        if c.state in (State.ESTABLISHED, State.CLOSE_WAIT) and up_sent[i] < SIZE:
            # The first 4 bytes name the connection, so the server knows what to expect.
            data = i.to_bytes(4, "big") + payload(i, 0, SIZE - 4)
            up_sent[i] += c.send(data[up_sent[i]:], now)
            if up_sent[i] == SIZE:
                c.shutdown(False, True, now)
        if c.readable_bytes:
            down_got[i] += c.recv(1 << 20, now)
        if c.fin_received and not c.closed_by_app:
            c.close(now)

    def server_step(s: Connection, now: float) -> None:
        buf = up_got[id(s)]
        if s.readable_bytes:
            buf += s.recv(1 << 20, now)
        if len(buf) >= 4 and id(s) not in index:
            index[id(s)] = int.from_bytes(buf[:4], "big")
        i = index.get(id(s))
        if i is not None and s.fin_received and id(s) not in uploaded:
            uploaded.add(id(s))
            if len(uploaded) == CONNS:     # the barrier: all uploads are in, all answer now
                dirty.update(dict.fromkeys(servers))
                at_barrier.append(sum(c.state in LIVE for c in clients))
        if i is not None and len(uploaded) == CONNS and s.state is State.CLOSE_WAIT:
            done = down_sent.get(id(s), 0)
            if done < SIZE:
                down_sent[id(s)] = done + s.send(payload(i, 1, SIZE)[done:], now)
            if down_sent[id(s)] == SIZE and not s.closed_by_app:
                s.close(now)

    # Connections open over the first second (a burst of 1 000 SYNs would only exercise
    # the SYN queue, which tests/test_syncookies.py does); the server holds every answer
    # until all uploads are in, so all of them are open at the same time.
    started = 0
    connecting: dict[Connection, None] = {}
    ticks = 0
    deadline = 600.0
    while True:
        now = drv.now()
        while started < CONNS and started < (now + 0.001) * CONNS:
            a.connect(clients[started], now)
            connecting[clients[started]] = None
            started += 1
        if connecting:                     # no callback marks the end of the handshake
            for c in [c for c in connecting if c.state is not State.SYN_SENT]:
                del connecting[c]
                dirty[c] = None
        while dirty:
            c = next(iter(dirty))
            del dirty[c]
            if c.stack is a:
                client_step(c, now)
            else:
                server_step(c, now)
        if ticks % 200 == 0:
            check_invariants(a)
            check_invariants(b)
        if started == CONNS and all(c.state in (State.CLOSED, State.TIME_WAIT) for c in clients) \
                and all(s.state is State.CLOSED for s in servers):
            break
        assert now < deadline, f"soak stalled at t={now:.0f}: " + \
            f"{sum(c.state is State.CLOSED or c.state is State.TIME_WAIT for c in clients)} clients done"
        drv.kick()
        drv.run_for(0.005)
        ticks += 1
    # TIME-WAIT expires too: both tables end empty.
    drv.run_for(10.0)
    assert not a.connections and not b.connections and a.time_wait_count == 0
    check_invariants(a)
    check_invariants(b)
    lost = 0
    for i, c in enumerate(clients):
        assert c.error == 0, (i, c.error)
        lost += abs(SIZE - len(down_got[i]))
        assert hashlib.sha256(down_got[i]).digest() == hashlib.sha256(payload(i, 1, SIZE)).digest(), i
    for s in servers:
        i = index[id(s)]
        want = i.to_bytes(4, "big") + payload(i, 0, SIZE - 4)
        lost += abs(SIZE - len(up_got[id(s)]))
        assert bytes(up_got[id(s)]) == want, i
    assert len(servers) == CONNS and lost == 0
    assert at_barrier == [CONNS]          # the server answers only once every upload is in
    stats = pair.link.ab.stats
    print(json.dumps({"figure": "soak", "connections": CONNS, "bytes_each_way": SIZE,
                      "bytes_delivered": 2 * CONNS * SIZE, "bytes_lost": lost,
                      "concurrent_open": at_barrier[0], "virtual_seconds": round(drv.now(), 1),
                      "link_lost": stats.lost + pair.link.ba.stats.lost,
                      "link_reordered": stats.reordered + pair.link.ba.stats.reordered,
                      "retransmits": a.counters["TcpRetransSegs"] + b.counters["TcpRetransSegs"]}))

