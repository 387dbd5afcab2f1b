"""Receive memory under pressure, as Linux tcp_prune_queue (net/ipv4/tcp_input.c).

When a segment does not fit (the stack's account is past its limit, tcp_mem; or the
socket's out-of-order queue holds its buffer), Linux does not simply drop it: it first
shrinks what the socket may be offered (tcp_clamp_window when the socket is over its
buffer, tcp_adjust_rcv_ssthresh under memory pressure: the window stops growing past two or
four segments, so the peer stops sending what would be dropped), then collapses its queues
(tcp_collapse_ofo_queue: contiguous out-of-order chunks into one buffer), then prunes the
out-of-order queue from its highest sequence down, a slice of the buffer at a time, until
the segment fits (tcp_prune_ofo_queue: never below where the segment itself lands). Only if
that fails is the segment dropped (TcpExtRcvPruned). Counted as Linux: TcpExtPruneCalled,
TcpExtTCPRcvCollapsed, TcpExtOfoPruned, SKB_DROP_REASON_TCP_OFO_QUEUE_PRUNE per chunk.

The receive queue itself is collapsed as it fills (RecvBuffer, tcp/buffers.py), not here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from usertcp.tcp.buffers import truesize
from usertcp.tcp.seq import SEQ_MASK

if TYPE_CHECKING:
    from usertcp.tcp.connection import Connection

__all__ = ["adjust_rcv_ssthresh", "clamp_window", "prune_queue"]


def clamp_window(conn: Connection) -> None:
    """Linux tcp_clamp_window: the socket holds more than its buffer; quick ACKs end, the
    buffer may grow to what is held, else the window offered stops at two segments
    (rcv_ssthresh): Receive.clamp_window, the one home of the receive window."""
    conn.rx.clamp_window()


def adjust_rcv_ssthresh(conn: Connection) -> None:
    """Linux tcp_adjust_rcv_ssthresh, under memory pressure: the window offered stops growing
    past four segments (also what __tcp_select_window does under pressure when less than
    half the buffer is free)."""
    conn.rx.set_rcv_ssthresh(min(conn.rcv_ssthresh, 4 * conn.rx.advmss()))


def _fits(conn: Connection, cost: int, in_order: bool) -> bool:
    """Room in the socket's buffer (an in-order segment is forced into an empty receive
    queue) and in the stack's account (receive.py's checks)."""
    held = conn.rx.rmem_alloc()
    return (held <= conn.rcvbuf_limit or (in_order and not len(conn.rcv_buf))) \
        and conn.stack.mem.recv_allowed(cost, held, conn.config.rmem[0])


def prune_queue(conn: Connection, payload: memoryview, seg_off: int) -> bool:
    """Linux tcp_prune_queue and tcp_try_rmem_schedule's loop for a segment of ``payload`` at
    ``seg_off`` that does not fit: True if it fits after clamping, collapsing and pruning."""
    mib = conn.mib
    mem = conn.stack.mem
    mib["TcpExtPruneCalled"] += 1
    if conn.rx.rmem_alloc() > conn.rcvbuf_limit:
        clamp_window(conn)
    elif mem.under_pressure():
        adjust_rcv_ssthresh(conn)
    cost = truesize(payload)
    in_order = seg_off == conn.rcv_nxt
    if not conn.ooo.empty:
        collapsed = conn.ooo.collapse()
        if collapsed:
            mib["TcpExtTCPRcvCollapsed"] += collapsed
        if _fits(conn, cost, in_order):
            return True
        if _prune_ofo(conn, seg_off, cost, in_order) and _fits(conn, cost, in_order):
            return True
    mib["TcpExtRcvPruned"] += 1
    return False


def _prune_ofo(conn: Connection, seg_off: int, cost: int, in_order: bool) -> bool:
    """Linux tcp_prune_ofo_queue: drop out-of-order chunks from the highest sequence down,
    ``sk_rcvbuf / 8`` of truesize at a time, until the segment fits and memory is not under
    pressure; never a chunk below the segment's own sequence. True if anything was dropped."""
    ooo = conn.ooo
    mib = conn.mib
    seq = (conn.irs + seg_off) & SEQ_MASK
    rcv_nxt = (conn.irs + conn.rcv_nxt) & SEQ_MASK
    slice_ = conn.rcvbuf_limit >> 3
    goal = slice_
    pruned = 0
    while True:
        freed = ooo.drop_last(seq, rcv_nxt)
        if freed < 0:
            break
        pruned += 1
        goal -= freed
        if goal <= 0 or ooo.empty:
            if _fits(conn, cost, in_order) and not conn.stack.mem.under_pressure():
                break
            goal = slice_
    if pruned:
        mib["TcpExtOfoPruned"] += 1
        mib["SKB_DROP_REASON_TCP_OFO_QUEUE_PRUNE"] += pruned
    return pruned > 0
