"""A hostile SACK peer (issue 20 point 2; CVE-2019-11477/11478/11479, CVE-2019-5599).

A receiver that announces a tiny MSS and then SACKs every other MSS of a large flight makes
the sender cut its retransmission queue into pieces. Linux bounds that: the peer's MSS is
floored at tcp_min_snd_mss (48) before the options come off (__tcp_mtu_to_mss), and
tcp_fragment refuses to split a queued skb once half of sk_wmem_queued exceeds sk_sndbuf
plus two 64 KiB skbs (TcpExtTCPWqueueTooBig), except the first and last ones.
"""

from __future__ import annotations

from peer import MASK, ScriptedPeer
from usertcp.net.memnet import OFFLOAD_GSO_MAX_SIZE
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import Connection
from usertcp.tcp.invariants import check_connection
from usertcp.tcp.rtx_queue import FRAGMENT_ALLOWANCE
from usertcp.wire.tcp import encode_options

SNDBUF = 256 << 10


def open_with_mss(mss: int, *, ts: bool,
                  config: StackConfig | None = None) -> tuple[ScriptedPeer, Connection]:
    p = ScriptedPeer(config)
    p.listen()
    p.send("S", 0, win=65535, options=encode_options(mss=mss, sack_permitted=True, wscale=7,
                                                     ts=(1, 0) if ts else None))
    p.expect("S.", 0, 1)
    p.send(".", 1, 1, win=65535, options=encode_options(ts=(2, 1)) if ts else b"")
    assert p.listener is not None
    conn = p.listener.accept()
    assert conn is not None
    return p, conn


def test_peer_mss_is_floored_at_tcp_min_snd_mss_before_the_options() -> None:
    # Linux __tcp_mtu_to_mss: max(mss_clamp, tcp_min_snd_mss), then tcp_mtu_to_mss takes
    # the timestamp option off: 48 - 12 = 36 payload bytes per segment.
    assert open_with_mss(1, ts=False)[1].mss == 48
    p, conn = open_with_mss(1, ts=True)
    assert conn.mss == 36
    conn.send(b"x" * 200, p.now)
    assert {len(s.seg.payload) for s in p.drain()} == {36, 200 - 5 * 36}
    # The sysctl raises the floor (Linux allows 48..65535).
    cfg = StackConfig()
    assert cfg.apply_sysctl("net.ipv4.tcp_min_snd_mss", "500")
    assert open_with_mss(100, ts=False, config=cfg)[1].mss == 500


def sack_every_other_mss(p: ScriptedPeer, conn: Connection, acks: int) -> None:
    """``acks`` ACKs for SND.UNA, each with four blocks SACKing one MSS out of every two."""
    mss = conn.mss
    una = conn.snd_una
    base = conn.iss + una
    piece = 1
    for _ in range(acks):
        blocks = []
        for _ in range(4):
            left = (base + piece * mss) & MASK
            blocks.append((left, (left + mss) & MASK))
            piece += 2
        p.send(".", 1, una, win=65535, options=encode_options(sack_blocks=blocks))


def test_sack_storm_cannot_cut_the_queue_without_bound() -> None:
    p, conn = open_with_mss(48, ts=False, config=StackConfig(wmem=(4096, SNDBUF, SNDBUF)))
    p.stack.gso_max_size = OFFLOAD_GSO_MAX_SIZE   # TSO: one record per burst, as Linux skbs
    data = bytes(range(256)) * (SNDBUF // 256)
    while conn.cc.cwnd < SNDBUF:             # slow start until the buffer fits in the window
        conn.send(data[:conn.send_space], p.now)
        p.drain()
        p.send(".", 1, conn.snd_max, win=65535)
        p.advance(0.01)
    queued = conn.send(data, p.now)
    p.drain()
    pieces = (conn.snd_max - conn.snd_una) // conn.mss
    assert pieces > 3000 and len(conn.recovery.rtx) <= 20, "the buffer is in flight in a few records"
    sack_every_other_mss(p, conn, pieces // 8)
    rec = conn.recovery
    # Without the limit every SACKed piece costs two records (about ``pieces``); with it the
    # queue stops where sk_wmem_queued / 2 passes sk_sndbuf plus the allowance.
    limit_skbs = (2 * (conn.sndbuf_limit + FRAGMENT_ALLOWANCE) - queued) // 1280
    assert len(rec.rtx) < limit_skbs + 40 < pieces // 2
    assert conn.stack.counters["TcpExtTCPWqueueTooBig"] > 0
    check_connection(conn)
    # The connection is intact: a cumulative ACK of everything completes it.
    p.send(".", 1, conn.snd_max, win=65535)
    assert conn.snd_una == conn.snd_max and not rec.rtx and rec.sacked_bytes == 0
    check_connection(conn)


def test_sacked_ranges_are_merged_so_repeated_blocks_cost_a_lookup() -> None:
    """Linux collapses SACKed skbs (tcp_shift_skb_data): after single pieces and then one
    block over them all, the SACKed range is one record, whatever came before."""
    p, conn = open_with_mss(48, ts=False, config=StackConfig(wmem=(4096, SNDBUF, SNDBUF)))
    p.stack.gso_max_size = OFFLOAD_GSO_MAX_SIZE
    conn.send(bytes(4800), p.now)
    p.drain()
    una = conn.snd_una
    assert conn.snd_max - una >= 8 * conn.mss
    sack_every_other_mss(p, conn, 1)                  # pieces 1, 3, 5 and 7 SACKed
    rec = conn.recovery
    assert len([r for r in rec.rtx if r.sacked]) == 4
    mss = conn.mss
    left = (conn.iss + una + mss) & MASK
    right = (conn.iss + una + 8 * mss) & MASK
    for _ in range(3):                                 # one block over pieces 1..7, repeated
        p.send(".", 1, una, win=65535, options=encode_options(sack_blocks=[(left, right)]))
    sacked = [r for r in rec.rtx if r.sacked]
    assert len(sacked) == 1 and (sacked[0].start, sacked[0].end) == (una + mss, una + 8 * mss)
    assert rec.sacked_bytes == 7 * mss
    check_connection(conn)
