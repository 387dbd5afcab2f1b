"""The transmit path as Linux builds it (issue 14 points 1-3 and 8): skbs with PSH/EOR marks,
one packet per skb, cwnd growth only when cwnd-limited, Linux CUBIC, and the chrono fields of
tcp_info."""

from __future__ import annotations

from peer import ScriptedPeer
from usertcp.tcp.buffers import SKB_EOR, SKB_PSH, SendBuffer
from usertcp.tcp.config import StackConfig
from usertcp.tcp.congestion import LinuxCubic
from usertcp.tcp.connection import Connection
from usertcp.tcp.info import CHRONO_BUSY, CHRONO_RWND_LIMITED, Chrono
from usertcp.wire.segment import PSH
from usertcp.wire.tcp import encode_options

MSS = 1000


def _open(gso_max_size: int = 0, window: int = 65535) -> tuple[ScriptedPeer, Connection]:
    """A passive connection whose peer offers MSS 1000 and no options beyond it."""
    peer = ScriptedPeer(StackConfig(timestamps=False, sack=False, window_scaling=False))
    peer.stack.gso_max_size = gso_max_size
    peer.listen()
    peer.send("S", 0, win=window, options=encode_options(mss=MSS))
    peer.expect("S.", 0, 1)
    peer.advance(0.01)
    peer.send(".", 1, 1, win=window)
    assert peer.listener is not None
    conn = peer.listener.accept()
    assert conn is not None
    peer.conn = conn
    return peer, conn


def test_split_hands_psh_and_eor_to_the_tail() -> None:
    b = SendBuffer()
    b.append(bytes(3000), new_skb=True)
    b.mark_push()
    b.mark_eor()
    assert b.skb_flags(0) == SKB_PSH | SKB_EOR and b.skb_end(0) == 3000
    # tso_fragment: the head piece loses PSH (and EOR), the tail keeps them.
    b.mark_sent(1000, 1000)
    assert b.skb_starts() == [0, 1000]
    assert b.skb_flags(0) == 0 and b.skb_flags(1000) == SKB_PSH | SKB_EOR
    # EOR: no later byte joins the last skb, even unsent.
    assert b.tail_room(64000) == 0
    b.append(bytes(10))
    assert b.skb_starts() == [0, 1000, 3000] and b.skb_flags(3000) == 0


def test_a_new_write_clears_the_pending_push_of_the_tail() -> None:
    b = SendBuffer()
    b.append(bytes(100), new_skb=True)
    b.mark_push()
    b.clear_push()
    b.append(bytes(100))
    assert b.skb_starts() == [0] and b.skb_flags(0) == 0


def test_msg_eor_keeps_writes_in_separate_packets() -> None:
    peer, conn = _open()
    peer.drain()
    conn.nodelay = True
    conn.send(b"a" * 300, peer.now, eor=True)
    conn.send(b"b" * 300, peer.now)
    # Two skbs: two packets, each with PSH (the end of a write), never one 600-byte segment.
    first = peer.expect("P.", 1, 1, payload_len=300)
    second = peer.expect("P.", 301, 1, payload_len=300)
    assert first.flags & PSH and second.flags & PSH


def test_without_eor_a_small_write_joins_the_unsent_tail() -> None:
    peer, conn = _open()
    conn.cork = True
    conn.send(b"a" * 300, peer.now)
    conn.send(b"b" * 300, peer.now)
    assert conn.snd_buf.skb_starts() == [0]
    conn.cork = False
    conn.options_changed(peer.now)
    peer.expect("P.", 1, 1, payload_len=600)


def test_tso_packets_carry_psh_and_whole_segments() -> None:
    peer, conn = _open(gso_max_size=65536)
    peer.drain()
    conn.send(b"x" * 10500, peer.now)
    sent = peer.drain()
    sizes = [len(s.seg.payload) for s in sent]
    assert sum(sizes) == 10000              # cwnd 10: the last 500 bytes wait
    # Half the cwnd at most per packet (tcp_cwnd_test); a multi-segment GSO packet has PSH
    # (Linux 6.18, tools/kernel_psh_probe.py); every packet is whole segments.
    assert all(n % MSS == 0 and n <= 5 * MSS for n in sizes)
    assert all(s.seg.flags & PSH for s in sent if len(s.seg.payload) > MSS)


def test_cwnd_grows_only_while_cwnd_limited() -> None:
    cc = LinuxCubic(MSS)
    # A flight of 10 filled the window: slow start continues through the whole flight.
    cc.validate(0, 10 * MSS, 10 * MSS, True)
    for i in range(5):
        cc.on_ack(2 * MSS, 0.1 + i * 0.005, 0.1, 8 * MSS, app_limited=not cc.is_cwnd_limited())
    assert cc.cwnd == 20 * MSS
    # A later flight of 3 that did not fill cwnd (20): slow start stops at 2 * 3.
    cc.validate(10 * MSS, 13 * MSS, 3 * MSS, False)
    assert not cc.is_cwnd_limited()
    cwnd = cc.cwnd
    cc.on_ack(MSS, 0.3, 0.1, 2 * MSS, app_limited=not cc.is_cwnd_limited())
    assert cc.cwnd == cwnd


def test_linux_cubic_after_rto_grows_five_percent_per_rtt() -> None:
    cc = LinuxCubic(MSS)
    cc.on_rto(1.0, 10 * MSS)
    # cubictcp_recalc_ssthresh: 10 * 717 / 1024 = 7; TCP_CA_Loss resets the CUBIC state.
    assert cc.ssthresh == 7 * MSS and cc.cwnd == MSS and cc.last_max_cwnd == 0
    now = 1.1
    while cc.cwnd < 7 * MSS:
        cc.on_ack(MSS, now, 0.1, cc.cwnd)
        now += 0.002
    # Congestion avoidance with no known Wmax: cnt starts at 20 (5 % per RTT), and the
    # TCP-friendly estimate (one packet per 13 ACKed at cwnd 7) takes over: cwnd 7 holds for
    # 14 ACKs, as in the corpus' cubic/cubic-rto-ss-ca-cwnd-bump.pkt (acks 8001 to 22001).
    grown = []
    for _ in range(16):
        cc.on_ack(MSS, now, 0.1, cc.cwnd)
        grown.append(cc.cwnd // MSS)
        now += 0.005
    assert grown.count(7) == 14 and grown[-1] == 8


def test_chrono_busy_and_window_limited_time() -> None:
    ch = Chrono()
    ch.start(CHRONO_BUSY, 1.0)
    ch.start(CHRONO_RWND_LIMITED, 1.1)
    ch.stop(CHRONO_RWND_LIMITED, 1.4, False)
    ch.stop(CHRONO_BUSY, 1.5, True)
    info = ch.info(2.0)
    assert info == {"tcpi_busy_time": 500_000, "tcpi_rwnd_limited": 300_000, "tcpi_sndbuf_limited": 0}


def test_tcp_info_rwnd_limited_from_a_zero_window() -> None:
    peer, conn = _open(window=0)
    conn.send(b"x" * 100, peer.now)
    peer.advance(0.25)
    assert 249_000 <= conn.info(peer.now)["tcpi_rwnd_limited"] <= 251_000
    assert conn.info(peer.now)["tcpi_last_data_recv"] >= 250


def test_msg_eor_through_the_socket_api() -> None:
    from usertcp import socket as us
    from usertcp.net.driver import VirtualTimeDriver
    from usertcp.net.memnet import LinkConfig, Network
    from usertcp.tcp.stack import Stack

    net = Network(seed=3)
    sa, sb = Stack(["10.0.0.1"], name="a"), Stack(["10.0.0.2"], name="b")
    ha, hb = net.add_host(sa, ["10.0.0.1"]), net.add_host(sb, ["10.0.0.2"])
    net.connect(ha, hb, LinkConfig(delay=0.005))
    drv = VirtualTimeDriver(net)
    srv = us.create_server(("10.0.0.2", 80), host=us.Host(sb, drv))
    c = us.Host(sa, drv).socket(us.AF_INET)
    c.connect(("10.0.0.2", 80))
    s, _ = srv.accept()
    c.setsockopt(us.IPPROTO_TCP, us.TCP_CORK, 1)        # hold both writes in the send queue
    assert c.send(b"a" * 100, us.MSG_EOR) == 100
    assert c.send(b"b" * 100) == 100
    conn = sa.connections[next(iter(sa.connections))]
    assert conn.snd_buf.skb_starts() == [0, 100]        # MSG_EOR: the second write opened an skb
    c.setsockopt(us.IPPROTO_TCP, us.TCP_CORK, 0)
    got = b""
    while len(got) < 200:
        got += s.recv(1000)
    assert got == b"a" * 100 + b"b" * 100
    for x in (c, s, srv):
        x.close()


def test_tcp_info_bytes_and_pacing_in_linux_units() -> None:
    peer, conn = _open()
    conn.nodelay = True
    conn.send(b"x" * 2500, peer.now)
    peer.advance(0.01)
    peer.send(".", 1, 2501)
    info = conn.info(peer.now)
    assert info["tcpi_bytes_sent"] == 2500 and info["tcpi_bytes_retrans"] == 0
    # tcp_update_pacing_rate: 200 % of cwnd / srtt in slow start, in bytes per second.
    srtt = conn.rtt.srtt
    assert srtt is not None and info["tcpi_pacing_rate"] == int(2.0 * conn.cc.cwnd / srtt)
    assert info["tcpi_max_pacing_rate"] == (1 << 64) - 1
    assert info["tcpi_last_data_sent"] == 10


def test_tcp_info_delivered_counts_every_segment_of_partly_acked_tso_packets() -> None:
    """tcpi_delivered counts segments (tcp_count_delivered): an ACK that covers part of a
    multi-segment packet delivers its whole segments acked (tcp_tso_acked's pcount), so ACKs
    that cut 2-segment packets in half still count every segment, plus the SYN."""
    peer, conn = _open(gso_max_size=65536)
    peer.drain()
    conn.nodelay = True
    conn.send(b"x" * 8 * MSS, peer.now)
    assert [len(s.seg.payload) for s in peer.drain()] == [2 * MSS] * 4   # tcp_tso_autosize
    peer.advance(0.01)
    for acked in (1, 3, 5, 7, 8):         # each ACK ends in the middle of a packet
        peer.send(".", 1, 1 + acked * MSS)
    info = conn.info(peer.now)
    assert info["tcpi_bytes_acked"] == 8 * MSS + 1 and not conn.recovery.rtx
    assert info["tcpi_delivered"] == 8 + 1


def test_an_unused_window_shrinks_halfway_after_an_rto_with_slow_start_after_idle() -> None:
    """RFC 2861 §3 as Linux tcp_cwnd_validate -> tcp_cwnd_application_limited: a window not
    used for an RTO (no cwnd-limited flight, no ACK that could grow it) shrinks to the mean of
    itself and what was used (at least the initial window), ssthresh keeping 3/4 of it."""
    def limited_cc() -> LinuxCubic:
        cc = LinuxCubic(MSS)
        cc.cwnd, cc.ssthresh = 40 * MSS, 20 * MSS
        return cc

    def send(cc: LinuxCubic, now: float, *, check: bool = True, may_shrink: bool = True) -> None:
        cc.validate(0, 5 * MSS, 5 * MSS, False)              # 5 packets out of 40: app-limited
        cc.validate_use(now, 5 * MSS, 0.2, app_limited_check=check, may_shrink=may_shrink,
                        init_window=10 * MSS)

    cc = limited_cc()
    send(cc, 0.0)
    send(cc, 0.1)                                            # less than an RTO: nothing yet
    assert cc.cwnd == 40 * MSS
    send(cc, 0.3)
    assert (cc.cwnd, cc.ssthresh) == ((40 + 10) // 2 * MSS, 30 * MSS)
    cc = limited_cc()
    send(cc, 0.0)
    cc.note_cong_avoid(0.25)                                 # an ACK that could grow it
    send(cc, 0.3)
    assert cc.cwnd == 40 * MSS
    for kwargs in ({"check": False}, {"may_shrink": False}):  # sysctl off; not Open / NOSPACE
        cc = limited_cc()
        send(cc, 0.0)
        send(cc, 0.3, **kwargs)
        assert cc.cwnd == 40 * MSS
