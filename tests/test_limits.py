"""Resource bounds: past each limit, a counted drop or a clear error, never unbounded growth.

- reassembly queue: many tiny out-of-order segments -> TcpExtTCPOFODrop beyond
  ``reassembly_max_segments``, the queue (and its memory) bounded, the stream intact;
- SYN queue: bounded per listener (tests/test_syncookies.py floods it with 100 000 SYNs);
- accept queue: SYNs dropped while it is full (TcpExtListenOverflows);
- TIME-WAIT: past ``max_time_wait`` -> TcpExtTCPTimeWaitOverflow, the count bounded;
- send buffer: ``send`` takes at most ``sndbuf_limit`` (partial, then 0), and the socket
  API reports EAGAIN on a non-blocking socket;
- payload object store budget: -ENOBUFS, covered by tests/test_objects.py
  (test_budget_is_exact_and_failures_change_nothing, test_capture_over_budget_fails_and_the_bytes_stay).

"""

from __future__ import annotations

import errno
import json

import pytest

from pair import B_ADDR, make_pair, transfer
from peer import ScriptedPeer
from test_core_properties import stream_bytes
from usertcp import socket as us
from usertcp.net.driver import VirtualTimeDriver
from usertcp.net.memnet import LinkConfig, Network
from usertcp.tcp.buffers import SKB_TRUESIZE_OVERHEAD
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import State
from usertcp.tcp.invariants import check_invariants
from usertcp.tcp.stack import Stack
from usertcp.tcp.tso import size_goal
from usertcp.wire.tcp import encode_options


def established(cfg: StackConfig | None = None, *, backlog: int = 128) -> ScriptedPeer:
    p = ScriptedPeer(cfg or StackConfig())
    p.listener = p.stack.listen(p.local_port, backlog=backlog)
    p.send("S", 0, options=encode_options(mss=1460, sack_permitted=True))
    p.expect("S.", 0, 1)
    p.send(".", 1, 1)
    p.conn = p.listener.accept()
    assert p.conn is not None
    return p


def test_many_tiny_out_of_order_segments_are_bounded() -> None:
    p = established()
    conn = p.conn
    assert conn is not None
    limit = p.stack.config.reassembly_max_segments
    n = 2 * limit + 100
    for k in range(n):
        off = 2 + 2 * k                       # one byte, one byte gap: nothing coalesces
        p.send(".", off, 1, payload=stream_bytes(off, 1))
        p.drain()
    # Each queued 1-byte segment keeps its whole packet buffer alive (views, no copies):
    # what the queue pins is bounded by the count limit times a packet.
    held = sum(len(memoryview(v.obj)) for v in conn.ooo._data)
    mib = p.stack.counters
    assert len(conn.ooo) == limit and conn.ooo.bytes_queued == limit
    assert mib["TcpExtTCPOFODrop"] == n - limit and mib["TcpExtTCPOFOQueue"] == limit
    assert held <= limit * 60, held
    check_invariants(p.stack)
    # Fill the holes in one segment: the queued bytes join, the stream stays intact.
    p.send(".", 1, 1, payload=stream_bytes(1, 2 * limit + 1))
    assert conn.rcv_nxt == 2 * limit + 2 and conn.ooo.empty
    assert conn.recv(1 << 20, p.now) == stream_bytes(1, 2 * limit + 1)
    print(json.dumps({"figure": "ooo_bound", "tiny_segments": n, "queued": limit, "ofo_drops": n - limit,
                      "pinned_packet_bytes": held}))


def test_full_accept_queue_drops_syns() -> None:
    p = ScriptedPeer()
    lst = p.stack.listen(p.local_port, backlog=2)
    for i in range(4):
        p.peer_port = 42000 + i
        p.send("S", 0)
        if i < 2:
            p.expect("S.", 0, 1)
            p.send(".", 1, 1)
        else:
            p.expect_nothing()
    assert len(lst.accept_queue) == 2
    assert p.stack.counters["TcpExtListenOverflows"] == 2


def test_accept_queue_never_exceeds_backlog() -> None:
    p = ScriptedPeer()
    lst = p.stack.listen(p.local_port, backlog=2)
    isns = {}
    for i in range(5):                     # five SYNs while the accept queue is empty
        p.peer_port = 43000 + i
        p.send("S", 0)
        isns[p.peer_port] = p.expect("S.", 0, 1).seq
    for port, isn in isns.items():
        p.peer_port, p.local_isn = port, isn
        p.send(".", 1, 1)
    assert len(lst.accept_queue) <= lst.backlog


def test_time_wait_over_max_is_counted() -> None:
    cfg = StackConfig(max_time_wait=5)
    pair = make_pair(LinkConfig(delay=0.005), cfg_a=cfg)
    lst = pair.b.listen(80)
    n = 12
    for i in range(n):
        c = pair.a.create_connection(B_ADDR, 80)
        pair.a.connect(c, pair.now)
        pair.driver.kick()
        assert pair.driver.run_until(lambda: bool(lst.accept_queue), 5)
        s = lst.accept()
        assert s is not None
        assert transfer(pair, c, s, bytes([i]) * 1000) == bytes([i]) * 1000
        c.close(pair.now)                  # the active closer ends in TIME-WAIT
        s.close(pair.now)
        pair.driver.kick()
        assert pair.driver.run_until(lambda: c.state in (State.TIME_WAIT, State.CLOSED), 5)  # noqa: B023
        assert pair.a.time_wait_count <= cfg.max_time_wait
        check_invariants(pair.a)
    mib = pair.a.counters
    assert pair.a.time_wait_count == cfg.max_time_wait
    assert mib["TcpExtTCPTimeWaitOverflow"] == n - cfg.max_time_wait


def test_send_buffer_limit_partial_then_eagain() -> None:
    p = established()
    conn = p.conn
    assert conn is not None
    limit = conn.sndbuf_limit
    big = bytes(limit * 3)
    n = conn.send(big, p.now)
    assert 0 < n < len(big)                         # partial: what fits
    assert conn.send(big, p.now) == 0               # full: nothing (EAGAIN at the socket layer)
    assert conn.send_queue_bytes == n
    # Linux sk_wmem_queued (bytes plus skb overhead) reached sk_sndbuf; the last skb opened
    # below it may overshoot by at most one skb.
    assert limit <= conn.snd_buf.wmem_queued < limit + size_goal(conn) + SKB_TRUESIZE_OVERHEAD
    # Through the socket API: a non-blocking send on a full buffer raises EAGAIN.
    net = Network(seed=3)
    sa, sb = Stack(["10.0.0.1"], name="a"), Stack([B_ADDR], name="b")
    net.connect(net.add_host(sa, ["10.0.0.1"]), net.add_host(sb, [B_ADDR]), LinkConfig(delay=0.005))
    drv = VirtualTimeDriver(net)
    ha, hb = us.Host(sa, drv), us.Host(sb, drv)
    srv = us.create_server((B_ADDR, 80), host=hb)
    c = ha.socket()
    c.connect((B_ADDR, 80))
    s, _ = srv.accept()
    c.setblocking(False)
    total = 0
    with pytest.raises(BlockingIOError) as ei:
        for _ in range(10_000):            # the peer never reads: the buffers fill up
            total += c.send(bytes(65536))
    assert ei.value.errno == errno.EAGAIN and total > 0
    conn_a = next(iter(sa.connections.values()))
    assert not conn_a.memory_free
    assert conn_a.snd_buf.wmem_queued < conn_a.sndbuf_limit + size_goal(conn_a) + SKB_TRUESIZE_OVERHEAD
    s.close()
    c.close()
    srv.close()


def test_orphans_over_max_are_reset_and_counted() -> None:
    # Linux tcp_too_many_orphans -> tcp_out_of_memory resets the orphan (TcpExtTCPAbortOnMemory).
    p = ScriptedPeer(StackConfig(max_orphans=3))
    p.listener = p.stack.listen(p.local_port)
    conns = []
    resets = 0
    for i in range(6):
        p.peer_port = 44000 + i
        p.send("S", 0)
        p.expect("S.", 0, 1)
        p.send(".", 1, 1, win=0)            # a zero window: the data below can never leave
        c = p.listener.accept()
        assert c is not None
        c.send(b"x" * 1000, p.now)
        c.close(p.now)                     # orphaned with unsent data
        p.collect()
        resets += sum(1 for s in p.drain() if s.seg.flags & 0x04)
        conns.append(c)
    orphans = [c for c in conns if c.state not in (State.CLOSED, State.TIME_WAIT)]
    assert len(orphans) <= 3
    assert p.stack.counters["TcpExtTCPAbortOnMemory"] == 3
    assert resets == 3                      # each one beyond the bound was reset on the wire


def test_stack_memory_limit_drops_counts_and_recovers() -> None:
    """A stack-wide limit on buffered bytes (Linux tcp_mem): past it inbound data is dropped and
    counted (TcpExtTCPRcvQDrop) and send() takes nothing; no byte is lost, and closing everything
    gives all memory back."""
    from pair import make_pair
    from usertcp.net.memnet import LinkConfig
    limit = 200_000
    pair = make_pair(LinkConfig(delay=0.002), seed=17, cfg_b=StackConfig(mem_limit=limit))
    lst = pair.b.listen(80)
    clients = []
    for _ in range(3):
        c = pair.a.create_connection("10.0.0.2", 80)
        pair.a.connect(c, pair.now)
        clients.append(c)
    pair.driver.kick()
    pair.driver.run_until(lambda: len(lst.accept_queue) == 3, 5)
    servers = [lst.accept() for _ in range(3)]
    data = [bytes([i]) * 150_000 for i in range(3)]
    sent = [0, 0, 0]

    def feed() -> None:                           # the clients write what their buffers take
        for i, (c, d) in enumerate(zip(clients, data, strict=True)):
            if sent[i] < len(d):
                sent[i] += c.send(d[sent[i]:], pair.now)

    for _ in range(60):
        feed()
        pair.driver.kick()
        pair.driver.run_for(0.05)                 # nobody reads: 450 KB would not fit
    mem = pair.b.mem
    assert mem.peak <= limit
    assert pair.b.counters["TcpExtTCPRcvQDrop"] > 0
    assert servers[0] is not None and servers[0].send(b"x" * (limit + 1), pair.now) < limit + 1
    got = [bytearray() for _ in range(3)]
    for _ in range(200):                          # now the application reads: the peers retransmit
        for s, g in zip(servers, got, strict=True):
            assert s is not None
            g += s.recv(1 << 20, pair.now)
        feed()
        pair.driver.kick()
        pair.driver.run_for(0.05)
        if all(len(g) == len(d) for g, d in zip(got, data, strict=True)):
            break
    assert [bytes(g) for g in got] == data
    for s in servers:
        assert s is not None
        s.abort(pair.now)
    assert mem.used == 0
