"""Zero-window hoarders cannot lock everyone out (issue 20 point 1; Linux tcp_mem).

Clients connect to an echo server, send and never read: their windows close, the server's
send buffers and the echo backlog fill, and the stack-wide account reaches its limit. Linux
still guarantees every socket ``tcp_wmem[0]`` to send and ``tcp_rmem[0]`` to receive
(__sk_mem_raise_allocated) and enters memory pressure (TcpExtTCPMemoryPressures), so a new
client is still served.
"""

from __future__ import annotations

from pair import A_ADDR, B_ADDR, check_echo, hoard, make_pair
from usertcp.apps.basic import BasicServer
from usertcp.net.memnet import LinkConfig
from usertcp.tcp.config import StackConfig
from usertcp.tcp.memory import MemAccount

LIMIT = 1 << 20


def test_account_thresholds_and_minimum_guarantees() -> None:
    mib: dict[str, int] = {"TcpExtTCPMemoryPressures": 0}
    m = MemAccount(900, mib)
    m.add(600)
    assert not m.under_pressure()                       # 600 <= 2/3 of 900
    m.add(1)
    assert m.under_pressure() and mib["TcpExtTCPMemoryPressures"] == 1
    m.used = 460
    assert m.under_pressure()                           # leaves only below half
    m.used = 449
    assert not m.under_pressure()
    m.used = 900
    assert m.room() == 0 and m.send_room(1000, 4096) == 3096 and m.send_room(5000, 4096) == 0
    assert not m.recv_allowed(10, 5000, 4096) and m.recv_allowed(10, 100, 4096)
    assert MemAccount(0).recv_allowed(1 << 30, 1 << 30, 0) and not MemAccount(0).under_pressure()


def test_hoarders_do_not_starve_a_new_client() -> None:
    cfg = StackConfig(mem_limit=LIMIT)
    p = make_pair(LinkConfig(delay=0.001, bandwidth_bps=1e9), cfg_b=cfg)
    server = p.b
    lst = server.listen(7)
    BasicServer("echo", lst, lambda: server.now)
    hoard(p, 7, count=8, rounds=60)                     # each pushes 256 KiB, reads nothing
    assert server.mem.used >= LIMIT - (64 << 10), server.mem.used
    assert server.counters["TcpExtTCPMemoryPressures"] >= 1
    # A legitimate client: a small request must still come back.
    check_echo(p, b"GET /status" * 100)
    assert A_ADDR != B_ADDR


def test_echo_backlog_is_bounded_server_wide_and_counted() -> None:
    p = make_pair(LinkConfig(delay=0.001, bandwidth_bps=1e9))
    lst = p.b.listen(7)
    app = BasicServer("echo", lst, lambda: p.b.now, backlog_limit=256 << 10)
    drv = p.driver
    hoarders = [p.a.create_connection(B_ADDR, 7) for _ in range(6)]
    for c in hoarders:
        p.a.connect(c, drv.now())
    drv.kick()
    drv.run_for(0.05)
    blob = bytes(512 << 10)
    peak = 0
    for _ in range(40):
        for c in hoarders:
            if c.send_space:
                c.send(blob[:c.send_space], drv.now())
        drv.kick()
        drv.run_for(0.05)
        peak = max(peak, app.stats["echo_backlog"])
    # The server-wide cap, plus each connection's guaranteed minimum beyond it.
    assert peak <= (256 << 10) + 6 * (64 << 10) and app.stats["echo_backlog_full"] > 0
    for c in hoarders:                                  # the hoarders leave: all is freed
        c.abort(drv.now())
    drv.kick()
    drv.run_for(1.0)
    assert app.stats["echo_backlog"] == 0


def test_a_refused_write_shrinks_the_send_buffer_and_waits_for_space() -> None:
    """Linux tcp_stream_alloc_skb, when the stack is past tcp_mem and the socket past its
    tcp_wmem[0]: memory pressure, sk_stream_moderate_sndbuf (the send buffer shrinks to half
    of what is queued) and SOCK_NOSPACE, so the writer is woken when ACKs make room."""
    from peer import ScriptedPeer
    from usertcp.tcp.memory import SOCK_MIN_SNDBUF

    p = ScriptedPeer(StackConfig(mem_limit=LIMIT))
    conn = p.passive_open()
    p.drain()
    mem = p.stack.mem
    mem.add(LIMIT - mem.used)                   # the other sockets hold everything
    before = conn.sndbuf_limit
    wmem_min = conn.config.wmem[0]
    queued = conn.send(bytes(64 << 10), p.now)
    assert 0 < queued <= wmem_min                # only its guaranteed minimum
    assert conn.send(b"more", p.now) == 0
    assert p.stack.counters["UsertcpSendMemLimited"] >= 1 and mem.pressure
    assert conn.sndbuf_limit == max(conn.snd_buf.wmem_queued >> 1, SOCK_MIN_SNDBUF) < before
    assert conn.sock_nospace
