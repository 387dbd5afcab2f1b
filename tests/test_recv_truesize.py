"""Receive memory charged as truesize, small segments collapsed (issue 20 point 3).

Linux charges sk_rmem_alloc and the protocol's memory with skb->truesize, not the payload
(tcp_try_rmem_schedule): a peer sending 1-byte segments makes every byte cost a whole
packet buffer. RecvBuffer charges each chunk the packet buffer it keeps alive plus the
objects around it, and collapses runs of small chunks into one buffer (tcp_collapse).
"""

from __future__ import annotations

from peer import ScriptedPeer
from usertcp.tcp.buffers import COLLAPSE_AFTER, RX_CHUNK_OVERHEAD, RecvBuffer, truesize
from usertcp.tcp.memory import MemAccount


def packet_view(header: int, payload: bytes) -> memoryview:
    return memoryview(bytes(header) + payload)[header:]


def test_a_chunk_costs_its_whole_packet_buffer() -> None:
    mib: dict[str, int] = {"TcpExtTCPRcvCollapsed": 0}
    acct = MemAccount(0, mib)
    rb = RecvBuffer(acct)
    v = packet_view(40, b"x")
    assert truesize(v) == 41 + RX_CHUNK_OVERHEAD
    rb.append(v)
    assert len(rb) == 1 and acct.used == 41 + RX_CHUNK_OVERHEAD
    assert rb.read(1) == b"x" and acct.used == 0


def test_small_segments_collapse_and_reads_free_exactly_what_was_charged() -> None:
    mib: dict[str, int] = {"TcpExtTCPRcvCollapsed": 0}
    acct = MemAccount(0, mib)
    rb = RecvBuffer(acct)
    data = bytes(range(256)) * 2
    for i in range(len(data)):
        rb.append(packet_view(52, data[i:i + 1]))
    assert mib["TcpExtTCPRcvCollapsed"] >= COLLAPSE_AFTER * (len(data) // COLLAPSE_AFTER)
    # Collapsed: far less than a packet buffer per byte is still charged.
    assert acct.used == rb.charged < len(data) * 20
    assert rb.peek(10, 5) == data[10:15]
    assert rb.read(100) == data[:100]
    buf = bytearray(50)
    assert rb.read_into(memoryview(buf)) == 50 and bytes(buf) == data[100:150]
    rb.discard(12)
    assert rb.read(1 << 20) == data[162:] and acct.used == 0 and rb.charged == 0


def test_detach_gives_everything_back() -> None:
    acct = MemAccount(0)
    rb = RecvBuffer(acct)
    rb.append(packet_view(40, b"abc"))
    rb.append(packet_view(40, b"def" * 100))
    rb.detach_account()
    assert acct.used == 0 and rb.acct is None


def test_tiny_segments_from_a_peer_are_charged_by_truesize() -> None:
    """In a stack: 200 one-byte segments nobody reads cost the stack their packets, not 200
    bytes (before: 200), and collapse keeps that bounded."""
    p = ScriptedPeer()
    conn = p.passive_open()
    for i in range(200):
        p.send(".", 1 + i, 1, payload=b"z")
    assert conn.readable_bytes == 200
    used = p.stack.mem.used
    assert used > 200 * 2                      # more than the payload: packets are kept
    assert used < 200 * (41 + RX_CHUNK_OVERHEAD)   # collapsed runs gave most of it back
    assert p.stack.counters["TcpExtTCPRcvCollapsed"] > 0
    assert conn.recv(1000, p.now) == b"z" * 200 and p.stack.mem.used == 0


def test_out_of_order_queue_is_charged_and_pruned_for_in_order_data() -> None:
    """Linux charges out-of-order skbs like the rest (tcp_data_queue_ofo ->
    tcp_try_rmem_schedule) and, short of memory, prunes that queue (tcp_prune_ofo_queue)
    so that in-order data still gets in."""
    from usertcp.tcp.config import StackConfig

    p = ScriptedPeer(StackConfig(mem_limit=40 << 10))   # reached inside the 64 KiB window
    conn = p.passive_open()
    for i in range(50):                               # out of order, beyond a 5000-byte hole
        p.send(".", 5001 + i * 1000, 1, payload=b"o" * 1000)
    held = conn.ooo.bytes_queued
    assert held > 0 and p.stack.mem.used >= held      # charged (before: 0)
    mib = p.stack.counters                            # ...up to the stack's limit, as Linux
    assert mib["TcpExtTCPOFODrop"] > 0 and mib["SKB_DROP_REASON_PROTO_MEM"] == mib["TcpExtTCPOFODrop"]
    assert mib["SKB_DROP_REASON_TCP_INVALID_SEQUENCE"] == 0   # all inside the window
    p.send(".", 1, 1, payload=b"i" * 500)             # in order: the queue is pruned for it
    assert p.stack.counters["TcpExtOfoPruned"] == 1 and conn.ooo.bytes_queued == 0
    assert conn.readable_bytes == 500
    conn.abort(p.now)


def test_a_long_run_of_tiny_segments_costs_a_few_bytes_per_byte() -> None:
    """A collapsed run that is itself still small joins the next run, so a stream of 1-byte
    segments ends in chunks of hundreds of bytes (before: one 32-byte chunk per run, each
    with a whole buffer's overhead: 9.5 bytes charged per byte received)."""
    p = ScriptedPeer()
    conn = p.passive_open()
    for i in range(5000):
        p.send(".", 1 + i, 1, payload=b"t")
    assert conn.readable_bytes == 5000
    assert conn.rcv_buf.charged == p.stack.mem.used < 4 * 5000
    assert conn.recv(1 << 16, p.now) == b"t" * 5000 and p.stack.mem.used == 0
