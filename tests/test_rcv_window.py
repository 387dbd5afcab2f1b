"""The receive window after the handshake, as Linux 6.18 chooses it (tcp/window.py, tcp/receive.py).

The figures come from this machine's kernel (tools/kernel_receive_probe.py, "the window after
the handshake"): a receiver with the default 128 KiB buffer that does not read, fed 1448-byte
segments whose skbs the kernel charges 2304 bytes each (scaling_ratio 1448 * 256 / 2304 = 160),
advertised 68608, 71680, 74752, 76800, 75776... with tcpi_rcv_ssthresh 68056, 70952, ... The
probe replays every ACK of three such runs through tcp/window.py and matches them all; here
the same arithmetic is pinned at those points, then the whole stack is checked for the
behaviours around it: never shrinking unless net.ipv4.tcp_shrink_window allows it, a zero
window, receive buffer auto-tuning, the SYN-cookie SYN-ACK's window and SO_RCVBUF's ceiling.
"""

from __future__ import annotations

import errno
import os
import socket
from dataclasses import replace

import pytest

from pair import make_pair, transfer
from peer import ScriptedPeer
from usertcp.api.sockopts import SocketOptions
from usertcp.tcp.autotune import RcvSpace, rcvbuf_for
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import Connection
from usertcp.tcp.info import tcp_info
from usertcp.tcp.window import grow_increment, initial_window, scaling_ratio, select_window, win_from_space
from usertcp.wire.tcp import encode_options

RMEM1, RMEM2 = 131072, 33554432       # the probe's namespace: tcp_rmem 4096 131072 33554432
TS_WS7 = encode_options(mss=1460, wscale=7, sack_permitted=True, ts=(100, 0))


# ------------------------------------------------------------------ the arithmetic, as measured

def test_scaling_ratio_from_truesize() -> None:
    assert scaling_ratio(1448, 2304) == 160          # the kernel's tun skb for a full segment
    assert scaling_ratio(1000, 2304) == 111
    assert scaling_ratio(10, 1 << 20) == 1           # never 0: a u8 of at least 1
    assert win_from_space(RMEM1, 160) == 81920       # tcp_full_space at that ratio


def test_first_acks_of_a_filling_receiver_match_the_kernel() -> None:
    # After the handshake: rcv_wnd 65160, window_clamp 64088 (tcp_init_buffer_space keeps one
    # segment in reserve), rcv_ssthresh 64088. The first segment sets the ratio to 160: the clamp
    # becomes 81920 and rcv_ssthresh the window already offered, 65160.
    ssthresh, rmem, wnd, clamp, nxt, right = 65160, 0, 65160, 81920, 0, 65160
    windows = []
    for _ in range(5):
        rmem += 2304
        nxt += 1448
        space = win_from_space(RMEM1 - rmem, 160)
        room = min(clamp, space) - ssthresh
        if room > 0:
            ssthresh += min(room, grow_increment(1448, 2304, 160, ssthresh, RMEM2, 1448, 1448))
        wnd = select_window(space, 81920, 81920, ssthresh, 10, 1448, wnd, False)
        wnd = max(wnd, (right - nxt + 1023) & -1024)       # tcp_select_window: the edge stays
        right = nxt + wnd
        windows.append((wnd, ssthresh))
    assert windows == [(68608, 68056), (71680, 70952), (74752, 73848), (76800, 76160), (75776, 76160)]


def test_the_unscaled_window_keeps_its_right_edge() -> None:
    # No window scale: the offer is whole segments of the free space, kept while it is within
    # one segment of it; 4 bytes into a 65160 window leave the kernel offering 65156 (the caller,
    # tcp_select_window, keeps the edge when the offer is smaller).
    free = win_from_space(RMEM1 - 832)              # 832: the kernel's truesize of that segment
    offer = select_window(free, 65536, 64088, 64088, 0, 536, 65160, False)
    assert offer == 64088 - 64088 % 536 < 65156


def test_zero_window_below_a_segment_or_a_sixteenth() -> None:
    # Less than half the buffer free: zero once below one segment or 1/16 of the buffer.
    assert select_window(1400, 65536, 65536, 60000, 7, 1448, 5000, False) == 0
    assert select_window(3000, 65536, 65536, 60000, 7, 1448, 5000, False) == 0     # < 65536 / 16
    assert select_window(4224, 65536, 65536, 60000, 7, 1448, 5000, False) == 4224
    # Rounded to the scale unit before the test: 1100 free with a 1024-byte unit is 1024.
    assert select_window(1100, 4096, 4096, 4000, 10, 1000, 2048, False) == 1024


def test_shrinking_rounds_down_to_the_unit() -> None:
    # tcp_shrink_window: the free space rounded down, zero below a unit; the never-shrink path
    # rounds up instead (ALIGN).
    assert select_window(75000, 81920, 81920, 80000, 10, 1448, 76800, True) == 74752
    assert select_window(75000, 81920, 81920, 80000, 10, 1448, 76800, False) == 75776
    assert select_window(900, 81920, 81920, 80000, 10, 500, 76800, True) == 0


def test_grow_needs_a_buffer_that_carries_the_overhead() -> None:
    # A segment whose truesize in window terms exceeds its payload opens rcv_ssthresh only
    # while rcv_ssthresh is small next to tcp_rmem[2] (__tcp_grow_window), by 2 * rcv_mss.
    assert grow_increment(1448, 2304, 160, 65160, RMEM2, 1448, 1448) == 2896
    assert grow_increment(100, 4096, 128, 65160, RMEM2, 1448, 1448) == 2896
    assert grow_increment(100, 4096, 128, 65160, 131072, 1448, 1448) == 0
    assert grow_increment(2000, 2304, 255, 65160, RMEM2, 1448, 1448) == 4000      # at least 2 * len


def test_initial_window_for_a_locked_buffer() -> None:
    # As the kernel's SYN-ACKs (tools/kernel_receive_probe.py): SO_RCVBUF 1000 -> 1152, no scale.
    assert initial_window(2304, True, 0, 1448, True, RMEM2, 4194304)[::2] == (1152, 0)
    assert initial_window(RMEM1, False, 0, 1448, True, RMEM2, 4194304)[::2] == (65160, 10)


def test_rcvbuf_grows_with_what_the_reader_takes() -> None:
    # tcp_rcvbuf_grow: twice the last RTT's reads, plus twice their growth, in buffer terms.
    assert rcvbuf_for(20000, 10000, 0, 128, RMEM2) == (40000 + 2 * 40000) * 2
    assert rcvbuf_for(20000, 10000, 5000, 128, 100000) == 100000
    drs = RcvSpace()
    drs.start(14480, 0, 0)
    assert drs.adjust(50000, 50000, 1000) == -1                 # no receiver RTT yet
    drs.measure_ts(1020, 1000, 1448, 1448)                       # a 20 ms sample
    assert drs.rtt_us == 20000 << 3
    assert drs.adjust(50000, 50000, 10000) == -1                 # less than an RTT since the start
    assert drs.adjust(60000, 60000, 30000) == 14480 and drs.space == 60000


# ------------------------------------------------------------------ the stack

def _filling(config: StackConfig, segments: int) -> tuple[ScriptedPeer, Connection, list[tuple[int, int]]]:
    """A passive connection (window scale 7, timestamps) fed ``segments`` full segments that
    nobody reads: [(ack, right edge)] of the ACKs."""
    peer = ScriptedPeer(config)
    peer.listen()
    peer.send("S", 0, options=TS_WS7)
    sa = peer.expect("S.", 0, 1)
    ecr = sa.ts_val
    peer.send(".", 1, 1, win=502, options=encode_options(ts=(101, ecr)))
    assert peer.listener is not None
    conn = peer.listener.accept()
    assert conn is not None
    seq, edges = 1, []
    for i in range(segments):
        peer.send(".", seq, 1, win=502, payload=b"w" * 1448, options=encode_options(ts=(102 + i, ecr)))
        seq += 1448
        for s in peer.drain():
            ack = (s.seg.ack - peer.peer_isn) % 2**32
            edges.append((ack, ack + (s.seg.window << conn.rcv_wscale)))
    return peer, conn, edges


def test_a_receiver_that_does_not_read_never_moves_the_right_edge_left() -> None:
    # The peer keeps sending past the window: the edge holds, the data up to it fills the
    # buffer, the window reaches zero there and what comes beyond is dropped.
    peer, _, edges = _filling(StackConfig(), 150)
    rights = [r for _, r in edges]
    assert rights == sorted(rights)                                   # RFC 9293 §3.8.6.2.2
    ack, right = edges[-1]
    assert ack == right and peer.stack.counters["TcpExtTCPToZeroWindowAdv"] == 1
    assert peer.stack.counters["UsertcpOutOfWindow"] > 0


def test_tcp_shrink_window_closes_the_window_in_time() -> None:
    cfg = StackConfig()
    assert cfg.apply_sysctl("net.ipv4.tcp_shrink_window", "1") and cfg.shrink_window
    peer, conn, edges = _filling(cfg, 150)
    rights = [r for _, r in edges]
    assert rights != sorted(rights)                                   # the edge moved left
    ack, right = edges[-1]
    assert ack == right                                               # a zero window
    c = peer.stack.counters
    assert c["TcpExtTCPToZeroWindowAdv"] == 1 and c["TcpExtTCPWantZeroWindowAdv"] == 0
    # Data at RCV.NXT into the zero window is dropped with an ACK (6.18: kernel_receive_probe.py
    # "tcp_shrink_window=1"; it drops data past the shrunk edge inside the old one too).
    peer.send(".", ack, 1, win=502, payload=b"x" * 100)
    assert peer.expect(".", 1, ack, win=0) is not None
    held = conn.readable_bytes
    conn.recv(1 << 22, peer.now)
    assert held == ack - 1
    update = peer.expect(".", 1, ack)                                  # tcp_cleanup_rbuf's update
    assert update.window > 0 and c["TcpExtTCPFromZeroWindowAdv"] == 1


def test_receive_buffer_auto_tuning_grows_and_follows_settings() -> None:
    def run(cfg: StackConfig, rcvbuf: int | None = None) -> Connection:
        p = make_pair(cfg_a=cfg, cfg_b=cfg)
        client, server = p.open()
        if rcvbuf is not None:
            opts = SocketOptions(cfg)
            opts.set(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf, conn=server, listener=None)
        transfer(p, client, server, os.urandom(1_000_000))
        return server

    grown = run(StackConfig())
    assert grown.rcvbuf_limit > RMEM1                                   # DRS grew it
    assert grown.rx.window_clamp == win_from_space(grown.rcvbuf_limit, grown.rx.scaling_ratio)
    info = tcp_info(grown)
    assert 0 < info["tcpi_rcv_rtt"] < 100_000                          # the 10 ms link RTT, in us
    assert info["tcpi_rcv_space"] > 10 * 1448 and info["tcpi_rcv_ssthresh"] == grown.rcv_ssthresh
    assert run(StackConfig(moderate_rcvbuf=False)).rcvbuf_limit == RMEM1
    assert run(StackConfig(), rcvbuf=100_000).rcvbuf_limit == 200_000    # SO_RCVBUF locks it


def test_cookie_synack_window_follows_the_initial_window_rule() -> None:
    # tcp_openreq_init_rwin for every request, cookies too (6.18: kernel_receive_probe.py
    # "SYN-cookie SYN-ACKs"): a locked 2304-byte buffer offers 1152 with no scale.
    for rcvbuf, win, ws in ((None, 65160, 7), (2304, 1152, 0)):
        p = ScriptedPeer(StackConfig(syncookies=2, rmem=(4096, RMEM1, 6291456)))
        lst = p.listen()
        if rcvbuf is not None:
            lst.options.update(rcvbuf_limit=rcvbuf, rcvbuf_locked=True)
        p.send("S", 0, options=TS_WS7)
        sa = p.expect("S.", 0, 1)
        assert (sa.window, sa.wscale) == (win, ws)
        assert p.stack.counters["TcpExtSyncookiesSent"] == 1
        p.send(".", 1, 1, options=encode_options(ts=(101, sa.ts_val)))
        conn = lst.accept()
        assert conn is not None and conn.rcv_wscale == ws                # cookie_v4_check agrees


def test_so_rcvbuf_is_capped_by_rmem_max_not_tcp_rmem(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = replace(StackConfig(), rmem_max=212992, wmem_max=100000)
    opts = SocketOptions(cfg)
    for opt, get, ceiling in ((socket.SO_RCVBUF, socket.SO_RCVBUF, 212992),
                              (socket.SO_SNDBUF, socket.SO_SNDBUF, 100000)):
        opts.set(socket.SOL_SOCKET, opt, 1 << 22, conn=None, listener=None)
        assert opts.get(socket.SOL_SOCKET, get, conn=None, listener=None) == 2 * ceiling
        opts.set(socket.SOL_SOCKET, opt, -5, conn=None, listener=None)      # a u32: huge
        assert opts.get(socket.SOL_SOCKET, get, conn=None, listener=None) == 2 * ceiling
    opts.set(socket.SOL_SOCKET, 33, 1 << 22, conn=None, listener=None)       # SO_RCVBUFFORCE
    assert opts.get(socket.SOL_SOCKET, socket.SO_RCVBUF, conn=None, listener=None) == 1 << 23
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(OSError) as err:
        opts.set(socket.SOL_SOCKET, 32, 1 << 22, conn=None, listener=None)   # SO_SNDBUFFORCE
    assert err.value.errno == errno.EPERM
    assert cfg.apply_sysctl("net.core.rmem_max", "4194304") and cfg.rmem_max == 4194304


# ------------------------------------------------------------------ SACK compression

def _out_of_order_burst(config: StackConfig) -> tuple[ScriptedPeer, list[float]]:
    """As tools/kernel_receive_probe.py "SACK compression": a receiver with a locked buffer,
    a 20 ms RTT estimate (from data it sent) and a fully open window gets a hole, then ten
    out-of-order segments at once: the times of the ACKs it sends over the next 50 ms."""
    peer = ScriptedPeer(config)
    lst = peer.listen()
    lst.options.update(rcvbuf_limit=131072, rcvbuf_locked=True)     # SO_RCVBUF 65536
    peer.send("S", 0, options=TS_WS7)
    ecr = peer.expect("S.", 0, 1).ts_val
    peer.send(".", 1, 1, win=502, options=encode_options(ts=(101, ecr)))
    conn = lst.accept()
    assert conn is not None
    ack, seq, tsval = 1, 1, 102

    def send(flags: str, payload: bytes = b"") -> None:
        nonlocal tsval
        tsval += 1
        peer.send(flags, seq, ack, win=502, payload=payload, options=encode_options(ts=(tsval, ecr)))

    for _ in range(3):                       # the receiver sends, the peer ACKs 20 ms later
        conn.send(b"k" * 100, peer.now)
        ecr = peer.expect("P.", ack, 1).ts_val
        peer.advance(0.02)
        ack += 100
        send(".")
    for _ in range(40):                      # in order and read: quick ACKs end, window fully open
        send(".", b"i" * 1448)
        seq += 1448
        conn.recv(1 << 16, peer.now)
        peer.advance(0.001)
    peer.advance(0.5)
    peer.drain()
    seq += 1448                              # the hole
    start = peer.now
    for _ in range(10):
        send(".", b"o" * 1448)
        seq += 1448
    peer.advance(0.05)
    return peer, [s.time - start for s in peer.drain()]


def test_sack_compression_holds_acks_after_three_duplicates() -> None:
    # 6.18 (kernel_receive_probe.py): 4 ACKs at once (the first earned by the window growing,
    # tcp_grow_window's quick ACK, then 3 duplicates), the other six held and one of them sent
    # when the timer fires, min(1 ms, 5 % of the RTT) later; TcpExtTCPAckCompressed +5.
    peer, times = _out_of_order_burst(StackConfig())
    assert times[:4] == [0.0] * 4
    assert len(times) == 5 and 0 < times[4] <= 0.001 + 1e-9
    assert peer.stack.counters["TcpExtTCPAckCompressed"] == 5


def test_sack_compression_off_acks_every_segment() -> None:
    cfg = StackConfig()
    for name, value in (("tcp_comp_sack_nr", "0"), ("tcp_comp_sack_delay_ns", "500000"),
                        ("tcp_comp_sack_slack_ns", "0")):
        assert cfg.apply_sysctl(f"net.ipv4.{name}", value)
    peer, times = _out_of_order_burst(cfg)
    assert times == [0.0] * 10
    assert peer.stack.counters["TcpExtTCPAckCompressed"] == 0
