"""MSG_ZEROCOPY frags: each page of each iovec element is a frag, MAX_SKB_FRAGS (17) per skb
(Linux skb_zerocopy_iter_stream / __zerocopy_sg_from_iter); an skb out of frags is marked PSH
and closed (tcp_sendmsg_locked on -EMSGSIZE), and tcp_grow_skb() cannot pull into it (skb_shift)."""

from __future__ import annotations

import pytest

from peer import ScriptedPeer
from usertcp.tcp.buffers import MAX_SKB_FRAGS, PAGE_SIZE, SendBuffer
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import Connection
from usertcp.tcp.zerocopy import frag_fit, regions_after
from usertcp.wire.segment import PSH
from usertcp.wire.tcp import encode_options


def _open() -> tuple[ScriptedPeer, Connection]:
    """A passive connection on a TSO link, MSS 1000, the handshake 10 ms long."""
    peer = ScriptedPeer(StackConfig(timestamps=False, sack=False, window_scaling=False))
    peer.stack.gso_max_size = 65536
    lst = peer.listen()
    peer.send("S", 0, win=65535, options=encode_options(mss=1000))
    peer.expect("S.", 0, 1)
    peer.advance(0.01)
    peer.send(".", 1, 1, win=65535)
    conn = lst.accept()
    assert conn is not None
    peer.conn = conn
    return peer, conn


def test_frag_fit_counts_pages_per_region() -> None:
    # One frag per page a region touches; regions never share a frag.
    assert frag_fit(list(range(1, 21)), 0, 20, MAX_SKB_FRAGS) == (17, 17)
    assert frag_fit([10000], 0, 10000, MAX_SKB_FRAGS) == (10000, 3)
    assert frag_fit([10000, 20001], 0, 20001, 4) == (10000 + PAGE_SIZE, 4)
    # Resumed mid-page: the first frag is what is left of that page.
    assert frag_fit([10000], 5000, 5000, 1) == (2 * PAGE_SIZE - 5000, 1)
    assert regions_after((3, 4, 5), 5) == (2, 5)


def test_an_skb_out_of_frags_is_pushed_and_closed() -> None:
    b = SendBuffer()
    b.append(bytes(17), new_skb=True, frags=17)
    assert b.tail_frags_full() and b.tail_room(64000) == 0
    b.append(bytes(1), frags=1)            # opens a new skb
    assert b.skb_starts() == [0, 17] and not b.tail_frags_full()
    assert b.collapse_end(0) == 17         # tcp_grow_skb stops at the full skb


def test_a_zerocopy_iovec_of_one_byte_buffers_leaves_in_17_byte_packets() -> None:
    peer, conn = _open()
    peer.drain()
    # 18 one-byte buffers: 17 frags fill the first skb (PSH), the last byte opens another
    # (PSH, end of the write), held by Nagle behind the first small segment.
    assert conn.send(bytes(18), peer.now, pinned=True, regions=(1,) * 18) == 18
    peer.expect("P.", 1, 1, payload_len=17)
    peer.expect_nothing()
    peer.send(".", 1, 18, win=65535)
    peer.expect("P.", 18, 1, payload_len=1)
    peer.send(".", 1, 19, win=65535)
    # The same bytes copied (no zerocopy): one skb, one packet.
    assert conn.send(bytes(18), peer.now) == 18
    peer.expect("P.", 19, 1, payload_len=18)
    peer.send(".", 1, 37, win=65535)
    # 64 one-byte buffers: skbs of 17, 17, 17 and 13 bytes, every one with PSH. The three
    # full ones leave at once (not the tail: no Nagle, tcp_write_xmit), the tail waits for
    # the ACK of the small segments before it (Minshall's Nagle).
    assert conn.send(bytes(64), peer.now, pinned=True, regions=(1,) * 64) == 64
    sent = peer.drain()
    assert [len(s.seg.payload) for s in sent] == [17, 17, 17] and all(s.seg.flags & PSH for s in sent)
    peer.send(".", 1, 88, win=65535)
    peer.expect("P.", 88, 1, payload_len=13)


def test_a_large_zerocopy_buffer_is_not_limited_by_frags() -> None:
    peer, conn = _open()
    peer.drain()
    # One 10000-byte buffer: 3 pages, one skb; it leaves as Linux sends any 10 segments.
    assert conn.send(bytes(10000), peer.now, pinned=True) == 10000
    assert sum(len(s.seg.payload) for s in peer.drain()) == 10000


def test_regions_must_cover_the_write() -> None:
    peer, conn = _open()
    with pytest.raises(ValueError):
        conn.send(bytes(10), peer.now, pinned=True, regions=(4, 4))
    with pytest.raises(ValueError):
        conn.send(bytes(10), peer.now, pinned=True, regions=(10, 0))
    assert conn.send_queue_bytes == 0
