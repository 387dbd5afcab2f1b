"""Send-buffer accounting in skb truesize (Linux sk_wmem_queued, sk_stream_memory_free,
__sk_stream_is_writeable, tcp_sndbuf_expand)."""

from __future__ import annotations

from pair import Pair, make_pair, transfer
from usertcp.net.memnet import LinkConfig
from usertcp.tcp.buffers import SKB_TRUESIZE_OVERHEAD as O
from usertcp.tcp.buffers import SendBuffer
from usertcp.tcp.connection import Connection


def test_wmem_queued_counts_every_skb_and_splits() -> None:
    b = SendBuffer()
    b.append(bytes(25000), new_skb=True)
    assert b.wmem_queued == 25000 + O and b.tail_room(25000) == 0
    # A 10-segment burst leaves the first 10000 bytes: tso_fragment splits the skb, and the
    # unsent remainder (the new write-queue tail) takes more bytes.
    b.mark_sent(10000, 10000)
    assert b.skb_starts() == [0, 10000] and b.wmem_queued == 25000 + 2 * O
    assert b.tail_is_send_head() and b.tail_room(25000) == 10000
    b.append(bytes(10000))
    assert b.skb_starts() == [0, 10000] and b.wmem_queued == 35000 + 2 * O
    b.mark_sent(35000, 10000)  # bursts of at most 10000 bytes per skb
    assert b.skb_starts() == [0, 10000, 20000, 30000]
    assert b.tail_room(25000) == 0  # everything sent: a write opens a new skb
    b.release(22000)  # frees two skbs, trims the third
    assert b.skb_starts() == [20000, 30000] and b.wmem_queued == 13000 + 2 * O
    b.append(bytes(100))
    assert b.skb_starts() == [20000, 30000, 35000]
    b.release(35100)
    assert b.skb_count == 0 and b.wmem_queued == 0


def test_room_is_the_linux_copy_loop() -> None:
    b = SendBuffer()
    # tcp_sendmsg_locked opens skbs while sk_wmem_queued < sk_sndbuf: two of 25000 for 42000.
    assert b.room(25000, 42000) == 50000
    b.append(bytes(1000), new_skb=True)
    # The unsent tail takes 24000 more without a check, then one more skb fits below 42000.
    assert b.room(25000, 42000) == 24000 + 25000
    assert b.room(25000, 1000) == 24000


def _established(cfg_delay: float = 0.01) -> tuple[Pair, Connection, Connection]:
    pair = make_pair(LinkConfig(delay=cfg_delay), seed=5)
    c, s = pair.open()
    return pair, c, s


def test_sndbuf_autotuning_follows_cwnd() -> None:
    pair, c, s = _established()
    # tcp_init_buffer_space(): 2 * 10 segments * (roundup_pow_of_two(1460 + 320 + 320) + 256).
    assert c.sndbuf_limit == 2 * 10 * (4096 + 256) and not c.sndbuf_locked
    data = bytes(2_000_000)
    assert transfer(pair, c, s, data) == data
    # The writer ran short of buffer, so ACKs grew sk_sndbuf with the congestion window.
    assert c.sndbuf_limit > 2 * 10 * (4096 + 256)


def test_locked_sndbuf_and_writer_wake_rule() -> None:
    pair, c, s = _established()
    c.sndbuf_limit, c.sndbuf_locked = 20000, True
    n = c.send(bytes(100_000), pair.now)
    assert 0 < n < 100_000 and not c.memory_free and c.sock_nospace and not c.writable
    woke = c.sk_wakeups
    # The peer acknowledges bit by bit: the writer is woken only once free space is at
    # least half of what is queued (sk_stream_write_space), and then it can write.
    for _ in range(5000):
        if c.sk_wakeups != woke:
            break
        assert c.sock_nospace and not c.writable
        pair.driver.kick()
        pair.driver.run_for(0.0005)
        s.recv(1 << 20, pair.now)
    assert c.sk_wakeups != woke and not c.sock_nospace and c.writable
    assert c.send(bytes(1000), pair.now) == 1000
    assert c.sndbuf_limit == 20000  # locked: no autotuning
