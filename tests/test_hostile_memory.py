"""Receive memory as Linux accounts and reclaims it (issue 20 points 1 and 3).

- the out-of-order queue is charged its chunks' truesize, the packet buffers they keep alive
  (skb->truesize, tcp_try_rmem_schedule), not their payload;
- a segment that does not fit first collapses the out-of-order queue (tcp_collapse_ofo_queue),
  then prunes it from the highest sequence down, never below the segment itself
  (tcp_prune_ofo_queue), counted as Linux (TcpExtPruneCalled, TcpExtOfoPruned, RcvPruned);
- receive-side hoarders (peers whose data a server never reads) push the stack into memory
  pressure: their offered windows shrink (tcp_adjust_rcv_ssthresh, tcp_clamp_window) and a
  new client is still served.
"""

from __future__ import annotations

from pair import check_echo, hoard, make_pair
from peer import ScriptedPeer
from usertcp.apps.basic import BasicServer
from usertcp.net.memnet import LinkConfig
from usertcp.tcp.buffers import RX_CHUNK_OVERHEAD
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import Connection

LIMIT = 1 << 20


def ofo_peer() -> tuple[ScriptedPeer, Connection]:
    p = ScriptedPeer(StackConfig(mem_limit=LIMIT))
    conn = p.passive_open()
    p.drain()
    return p, conn


def test_out_of_order_chunks_are_charged_their_packet_buffers() -> None:
    p, conn = ofo_peer()
    before = p.stack.mem.used
    for k in range(20):                        # 1-byte segments beyond a hole
        p.send(".", 100 + k, 1, payload=b"x")
    held = conn.ooo.truesize
    # Each keeps its whole packet (20 + 20 + 1 bytes) and the objects around it alive.
    assert held == 20 * (41 + RX_CHUNK_OVERHEAD)
    assert p.stack.mem.used - before == held
    p.send(".", 1, 1, payload=b"y" * 99)          # the hole fills: everything moves on
    assert conn.ooo.truesize == 0 and conn.readable_bytes == 99 + 20


def test_prune_drops_from_the_top_and_never_below_the_new_segment() -> None:
    p, conn = ofo_peer()
    for k in range(5):                         # [1001,2001) [3001,4001) ... [9001,10001)
        p.send(".", 1001 + 2000 * k, 1, payload=bytes(1000))
    p.drain()
    mem = p.stack.mem
    mem.add(LIMIT - mem.used)                  # the rest of the stack holds everything else
    p.send(".", 4001, 1, payload=bytes(1000))  # fits only if something goes
    mib = p.stack.counters
    assert mib["TcpExtPruneCalled"] == 1 and mib["TcpExtOfoPruned"] == 1
    assert mib["SKB_DROP_REASON_TCP_OFO_QUEUE_PRUNE"] == 3     # 9001, 7001, 5001: not 3001
    assert conn.ooo.bytes_queued == 3000 and conn.ooo.highest_seq == (conn.irs + 5001) & 0xFFFFFFFF
    blocks = conn.ooo.sack_blocks()
    assert sorted(blocks) == sorted([((conn.irs + 1001) & 0xFFFFFFFF, (conn.irs + 2001) & 0xFFFFFFFF),
                                     ((conn.irs + 3001) & 0xFFFFFFFF, (conn.irs + 5001) & 0xFFFFFFFF)])


def test_contiguous_small_chunks_are_collapsed_before_anything_is_pruned() -> None:
    p, conn = ofo_peer()
    for k in range(40):                        # 40 contiguous 10-byte chunks at 101..501
        p.send(".", 101 + 10 * k, 1, payload=bytes(10))
    p.send(".", 1001, 1, payload=bytes(4000))  # one large chunk further up
    mib = p.stack.counters
    # On arrival, the first 32 small contiguous chunks were copied into one (tcp_collapse
    # of small segments as they come); the 8 after it wait.
    assert mib["TcpExtTCPRcvCollapsed"] == 32 and len(conn.ooo) == 1 + 8 + 1
    mem = p.stack.mem
    before = conn.ooo.truesize
    mem.add(LIMIT - mem.used)
    p.send(".", 2, 1, payload=bytes(50))       # in order: room only after collapsing
    assert mib["TcpExtTCPRcvCollapsed"] == 32 + 9
    assert len(conn.ooo) == 3 and conn.ooo.truesize < before - 7 * RX_CHUNK_OVERHEAD
    assert mib["TcpExtOfoPruned"] == 0 and conn.readable_bytes == 0   # byte 1 still missing


def test_receive_hoarders_shrink_their_windows_and_a_new_client_is_served() -> None:
    cfg = StackConfig(mem_limit=LIMIT)
    p = make_pair(LinkConfig(delay=0.001, bandwidth_bps=1e9), cfg_b=cfg)
    server = p.b
    server.listen(9)                           # a sink that never reads
    lst = server.listen(7)
    BasicServer("echo", lst, lambda: server.now)
    hoard(p, 9, count=12, rounds=40)
    mib = server.counters
    assert mib["TcpExtTCPMemoryPressures"] >= 1 and mib["TcpExtPruneCalled"] >= 1
    assert mib["TcpExtRcvPruned"] >= 1
    sinks = [c for c in server.connections.values() if c.local_port == 9]
    assert len(sinks) == 12
    # Under pressure the window stops growing past four segments (tcp_adjust_rcv_ssthresh).
    assert sum(c.rcv_ssthresh <= 4 * c.rx.advmss() for c in sinks) >= 6
    check_echo(p, b"PING" * 300)


def test_a_socket_holds_no_more_truesize_than_its_buffer_under_pressure() -> None:
    """Linux tcp_try_rmem_schedule compares sk_rmem_alloc (truesize) with sk_rcvbuf, not the
    payload: 1-byte segments out of order, one every other byte, stop at the buffer's size
    (before: payload counted, 1024 chunks held 300 KB of a 128 KB buffer). Under memory
    pressure tcp_clamp_window does not grow the buffer to make room."""
    p, conn = ofo_peer()
    p.stack.mem.add(LIMIT * 2 // 3 + 1)        # the rest of the stack: pressure, not the limit
    rcvbuf = conn.rcvbuf_limit
    for k in range(2000):
        p.send(".", 3 + 2 * k, 1, payload=b"x")
    one = 41 + RX_CHUNK_OVERHEAD
    assert p.stack.mem.pressure
    assert conn.rcvbuf_limit == rcvbuf and rcvbuf < conn.rx.rmem_alloc() <= rcvbuf + one
    mib = p.stack.counters
    assert mib["TcpExtTCPOFODrop"] > 0 and mib["TcpExtPruneCalled"] > 0
    p.send(".", 1, 1, payload=b"y" * 2)        # the first hole fills: the byte at 3 follows
    assert conn.readable_bytes == 3


def test_tiny_contiguous_segments_out_of_order_are_collapsed_as_they_arrive() -> None:
    """5,000 one-byte segments in a row beyond a hole: runs of small chunks are copied into
    one buffer as they come (Linux tcp_ooo_try_coalesce / tcp_collapse), so they are all held
    at a fraction of a packet buffer each (before: 1,024 chunks, 300 KB of truesize for 1 KB,
    and the other 3,976 segments dropped at the queue's segment limit)."""
    p, conn = ofo_peer()
    for k in range(5000):
        p.send(".", 3 + k, 1, payload=b"z")
    mib = p.stack.counters
    assert conn.ooo.bytes_queued == 5000 and mib["TcpExtTCPOFODrop"] == 0
    assert len(conn.ooo) < 5000 // 100 and conn.ooo.truesize < 5000 * 4
    assert mib["TcpExtTCPRcvCollapsed"] >= 5000 - 32
    p.send(".", 1, 1, payload=b"ab")
    assert conn.recv(1 << 16, p.now) == b"ab" + b"z" * 5000 and conn.ooo.truesize == 0
