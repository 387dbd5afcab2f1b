"""Receive-side details as Linux has them (issue 15 point 2), in packetdrill form: the ioctls
(tcp_ioctl), TCP_INQ's control message (tcp_inq_hint), ts_recent updates
(tcp_replace_ts_recent), rcv_mss measurement (tcp_measure_rcv_mss)."""

from __future__ import annotations

import pytest

from drill_snippets import passive_open
from peer import ScriptedPeer
from usertcp.drill.parser import parse_script
from usertcp.drill.runner import RunOptions, ScriptResult, run_script
from usertcp.tcp.config import StackConfig

HANDSHAKE = passive_open()


def run(text: str, ip_version: str = "ipv4") -> ScriptResult:
    return run_script(parse_script(text, path="<test>"), RunOptions(ip_version=ip_version))


def assert_passed(res: ScriptResult) -> None:
    assert res.status == "passed", f"line {res.line}: {res.reason}\n" + "\n".join(res.details)


def test_ioctls_count_a_queued_fin_and_refuse_a_listener() -> None:
    assert_passed(run(HANDSHAKE + """\
   +0 ioctl(3, SIOCINQ, [0]) = -1 EINVAL (Invalid argument)
   +0 ioctl(3, SIOCOUTQ, [0]) = -1 EINVAL (Invalid argument)
   +0 write(4, ..., 1000) = 1000
   +0 > P. 1:1001(1000) ack 1
   +0 ioctl(4, SIOCOUTQ, [1000]) = 0
   +0 ioctl(4, SIOCOUTQNSD, [0]) = 0
   +0 shutdown(4, SHUT_WR) = 0
   +0 > F. 1001:1001(0) ack 1
// tcp_send_fin advances write_seq: the FIN is one byte of SIOCOUTQ until acknowledged
   +0 ioctl(4, SIOCOUTQ, [1001]) = 0
 +.01 < . 1:1(0) ack 1002 win 257
   +0 ioctl(4, SIOCOUTQ, [0]) = 0
// data then FIN: SIOCINQ counts the bytes only, TCP_CM_INQ counts the FIN as one
   +0 < P. 1:101(100) ack 1002 win 257
   +0 > . 1002:1002(0) ack 101
   +0 < F. 101:101(0) ack 1002 win 257
   +0 > . 1002:1002(0) ack 102
   +0 ioctl(4, SIOCINQ, [100]) = 0
   +0 setsockopt(4, SOL_TCP, TCP_INQ, [1], 4) = 0
   +0 recvmsg(4, {msg_name(...)=..., msg_iov(1)=[{..., 40}], msg_flags=0,
                  msg_control=[{cmsg_level=SOL_TCP, cmsg_type=TCP_CM_INQ, cmsg_data=61}]}, 0) = 40
   +0 ioctl(4, SIOCINQ, [60]) = 0
   +0 recvmsg(4, {msg_name(...)=..., msg_iov(1)=[{..., 100}], msg_flags=0,
                  msg_control=[{cmsg_level=SOL_TCP, cmsg_type=TCP_CM_INQ, cmsg_data=1}]}, 0) = 60
   +0 ioctl(4, SIOCINQ, [0]) = 0
"""))


def test_inq_cmsg_mismatch_fails() -> None:
    res = run(HANDSHAKE + """\
   +0 setsockopt(4, SOL_TCP, TCP_INQ, [1], 4) = 0
   +0 < P. 1:101(100) ack 1 win 257
   +0 recvmsg(4, {msg_name(...)=..., msg_iov(1)=[{..., 40}], msg_flags=0,
                  msg_control=[{cmsg_level=SOL_TCP, cmsg_type=TCP_CM_INQ, cmsg_data=59}]}, 0) = 40
""")
    assert res.status == "failed" and "cmsg" in res.reason and "(6, 36, 60)" in res.reason


def test_rcv_mss_follows_the_segments_received() -> None:
    # tcp_initialize_rcv_mss starts at 536 at most; data sets the real size (tcp_measure_rcv_mss);
    # shorter segments set it only when two in a row agree and carry no PSH (TCP_REMNANT).
    assert_passed(run(HANDSHAKE + """\
   +0 %{ assert tcpi_rcv_mss == 536, tcpi_rcv_mss }%
   +0 < . 1:1001(1000) ack 1 win 257
   +0 %{ assert tcpi_rcv_mss == 1000, tcpi_rcv_mss }%
   +0 < . 1001:1701(700) ack 1 win 257
   +0 < . 1701:2401(700) ack 1 win 257
   +0 %{ assert tcpi_rcv_mss == 700, tcpi_rcv_mss }%
   +0 < P. 2401:2501(100) ack 1 win 257
   +0 < P. 2501:2601(100) ack 1 win 257
   +0 %{ assert tcpi_rcv_mss == 700, tcpi_rcv_mss }%
"""))


def test_lone_fin_ack_is_immediate_before_any_data() -> None:
    # Linux tcp_fin schedules the ACK (interactive mode); with no data received the delayed-ACK
    # engine has no ATO yet and the ACK goes at once (tools/kernel_receive_probe.py: ~2 ms).
    assert_passed(run(HANDSHAKE + """\
 +.01 < F. 1:1(0) ack 1 win 257
   +0 > . 1:1(0) ack 2
"""))


def test_lone_fin_ack_is_delayed_after_data() -> None:
    # After a request and its reply the ATO is TCP_ATO_MIN: the FIN's ACK waits ~40 ms
    # (the kernel probe: 41.4 ms); a close() in between carries it on our own FIN.
    assert_passed(run(HANDSHAKE + """\
 +.01 < P. 1:9(8) ack 1 win 257
   +0 > . 1:1(0) ack 9
   +0 read(4, ..., 100) = 8
 +.01 write(4, ..., 8) = 8
   +0 > P. 1:9(8) ack 9
 +.02 < . 9:9(0) ack 9 win 257
 +.01 < F. 9:9(0) ack 9 win 257
 +.04 > . 9:9(0) ack 10
"""))
    assert_passed(run(HANDSHAKE + """\
 +.01 < P. 1:9(8) ack 1 win 257
   +0 > . 1:1(0) ack 9
   +0 read(4, ..., 100) = 8
 +.05 < F. 9:9(0) ack 1 win 257
 +.01 close(4) = 0
   +0 > F. 1:1(0) ack 10
"""))


def test_fin_with_more_than_a_frame_is_acked_at_once() -> None:
    # __tcp_ack_snd_check: more than one full frame unacknowledged beats interactive mode.
    assert_passed(run(HANDSHAKE + """\
 +.01 < P. 1:9(8) ack 1 win 257
   +0 > . 1:1(0) ack 9
 +.05 < F. 9:2009(2000) ack 1 win 257
   +0 > . 1:1(0) ack 2010
"""))


def test_ack_of_unsent_data_gets_a_challenge_ack_and_keeps_ts_recent() -> None:
    # Linux >= 6.18.38 (upstream 42726ec644cb) answers SEG.ACK > SND.NXT with a challenge ACK
    # and drops the segment before tcp_replace_ts_recent: the ACK's TS ecr is the old TS val
    # (the kernel selftest tcp_ts_recent_invalid_ack.pkt; tools/kernel_receive_probe.py).
    assert_passed(run("""\
    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
   +0 setsockopt(3, SOL_SOCKET, SO_REUSEADDR, [1], 4) = 0
   +0 bind(3, ..., ...) = 0
   +0 listen(3, 1) = 0
  +.1 < S 0:0(0) win 20000 <mss 1000,sackOK,TS val 100 ecr 0>
   +0 > S. 0:0(0) ack 1 <mss 1460,sackOK,TS val 100 ecr 100>
  +.1 < . 1:1(0) ack 1 win 20000 <nop,nop,TS val 200 ecr 100>
   +0 accept(3, ..., ...) = 4
   +0 < F. 1:1(0) ack 9999 win 20000 <nop,nop,TS val 200000 ecr 100>
   +0 > . 1:1(0) ack 1 <nop,nop,TS val 200 ecr 200>
   +0 < . 1:1001(1000) ack 1 win 20000 <nop,nop,TS val 201 ecr 100>
   +0 > . 1:1(0) ack 1001 <nop,nop,TS val 200 ecr 201>
"""))


# SYN-ACK window and scale as this machine's kernel chose them (tools/kernel_receive_probe.py,
# tcp_rmem 4096 540000 15728640 as defaults.sh sets it): half the buffer, in whole segments
# (1448 bytes: advmss less the timestamp option), at most 64 KB; SO_RCVBUF locks the buffer,
# which clamps the window and the scale to it. SO_RCVBUF is capped by net.core.rmem_max, which
# is 4194304 on that machine (Linux's default, 212992, caps 1 MiB: 425984 of buffer, scale 2).
@pytest.mark.parametrize(("rcvbuf", "win", "wscale"), [
    (None, 65535, 8), (1000, 1152, 0), (10000, 8688, 0), (65536, 65160, 1), (100000, 65535, 1),
    (1 << 20, 65535, 5),
])  # fmt: skip
def test_synack_window_and_scale_follow_the_receive_buffer(rcvbuf: int | None, win: int, wscale: int) -> None:
    opt = f"   +0 setsockopt(3, SOL_SOCKET, SO_RCVBUF, [{rcvbuf}], 4) = 0\n" if rcvbuf else ""
    assert_passed(run(f"""\
`sysctl -q net.core.rmem_max=4194304`
    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
   +0 setsockopt(3, SOL_SOCKET, SO_REUSEADDR, [1], 4) = 0
{opt}   +0 bind(3, ..., ...) = 0
   +0 listen(3, 1) = 0
   +0 < S 0:0(0) win 502 <mss 1460,sackOK,TS val 100 ecr 0,nop,wscale 7>
   +0 > S. 0:0(0) ack 1 win {win} <mss 1460,sackOK,TS val 0 ecr 100,nop,wscale {wscale}>
"""))


def test_default_linux_buffer_gives_the_classic_64240_window() -> None:
    # Linux's own tcp_rmem default (131072): 65536 of window space, 44 segments of 1460.
    script = HANDSHAKE.replace("<mss 1460,nop,nop,sackOK,nop,wscale 8>",
                               "win 64240 <mss 1460,nop,nop,sackOK,nop,wscale 7>")
    assert_passed(run('`sysctl -q net.ipv4.tcp_rmem="4096 131072 6291456"`\n' + script))


def test_tcp_syncnt_limits_syn_retries() -> None:
    # TCP_SYNCNT (icsk_syn_retries): 1 retry, so the connect fails after 1 s + 2 s; out of 1..127
    # it is EINVAL; getsockopt reports the sysctl when unset (defaults.sh: 5).
    assert_passed(run("""\
    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
   +0 getsockopt(3, IPPROTO_TCP, TCP_SYNCNT, [5], [4]) = 0
   +0 setsockopt(3, IPPROTO_TCP, TCP_SYNCNT, [0], 4) = -1 EINVAL (Invalid argument)
   +0 setsockopt(3, IPPROTO_TCP, TCP_SYNCNT, [128], 4) = -1 EINVAL (Invalid argument)
   +0 setsockopt(3, IPPROTO_TCP, TCP_SYNCNT, [1], 4) = 0
   +0 getsockopt(3, IPPROTO_TCP, TCP_SYNCNT, [1], [4]) = 0
   +0...3 connect(3, ..., ...) = -1 ETIMEDOUT (Connection timed out)
   +0 > S 0:0(0) <mss 1460,sackOK,TS val 100 ecr 0,nop,wscale 8>
   +1 > S 0:0(0) <mss 1460,sackOK,TS val 1100 ecr 0,nop,wscale 8>
"""))


def test_out_of_order_duplicates_are_dsacked() -> None:
    # Linux tcp_data_queue_ofo: a segment already held is reported in a D-SACK block
    # (tcp_dsack_set), a partial overlap with its duplicate part; the SACK block follows.
    assert_passed(run(HANDSHAKE + """\
 +.01 < . 1001:2001(1000) ack 1 win 257
   +0 > . 1:1(0) ack 1 <nop,nop,sack 1001:2001>
   +0 < . 1001:2001(1000) ack 1 win 257
   +0 > . 1:1(0) ack 1 <nop,nop,sack 1001:2001 1001:2001>
   +0 < . 1501:2501(1000) ack 1 win 257
   +0 > . 1:1(0) ack 1 <nop,nop,sack 1501:2001 1001:2501>
"""))


def test_sack_blocks_fit_the_option_space() -> None:
    # With timestamps 40 - 12 bytes leave room for 3 blocks (Linux tcp_established_options):
    # the most recent first (RFC 2018 §4); a D-SACK takes the first of the three. Out-of-order
    # segments do not update ts_recent (tcp_replace_ts_recent: only at or before rcv_wup).
    assert_passed(run("""\
    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
   +0 bind(3, ..., ...) = 0
   +0 listen(3, 1) = 0
   +0 < S 0:0(0) win 32792 <mss 1000,sackOK,TS val 100 ecr 0,nop,wscale 7>
   +0 > S. 0:0(0) ack 1 <mss 1460,sackOK,TS val 0 ecr 100,nop,wscale 8>
 +.01 < . 1:1(0) ack 1 win 257 <nop,nop,TS val 110 ecr 0>
   +0 accept(3, ..., ...) = 4
   +0 < . 1001:2001(1000) ack 1 win 257 <nop,nop,TS val 120 ecr 0>
   +0 > . 1:1(0) ack 1 <nop,nop,TS val 10 ecr 110,nop,nop,sack 1001:2001>
   +0 < . 3001:4001(1000) ack 1 win 257 <nop,nop,TS val 121 ecr 0>
   +0 > . 1:1(0) ack 1 <nop,nop,TS val 10 ecr 110,nop,nop,sack 3001:4001 1001:2001>
   +0 < . 5001:6001(1000) ack 1 win 257 <nop,nop,TS val 122 ecr 0>
   +0 > . 1:1(0) ack 1 <nop,nop,TS val 10 ecr 110,nop,nop,sack 5001:6001 3001:4001 1001:2001>
   +0 < . 7001:8001(1000) ack 1 win 257 <nop,nop,TS val 123 ecr 0>
   +0 > . 1:1(0) ack 1 <nop,nop,TS val 10 ecr 110,nop,nop,sack 7001:8001 5001:6001 3001:4001>
   +0 < . 1001:2001(1000) ack 1 win 257 <nop,nop,TS val 124 ecr 0>
   +0 > . 1:1(0) ack 1 <nop,nop,TS val 10 ecr 110,nop,nop,sack 1001:2001 1001:2001 7001:8001>
"""))


def test_in_order_data_beyond_the_window_is_taken_whole() -> None:
    # Linux 6.18 (tools/kernel_receive_probe.py): 2000 bytes sent into a 1152-byte window are
    # all acknowledged (tcp_data_queue takes an in-order segment whole while the buffer allows),
    # and the ACK closes the window (tcp_space is below a segment: __tcp_select_window offers 0);
    # data that starts beyond the window, or arrives at a zero window, is dropped with an ACK;
    # a bare FIN at a zero window is not accepted either (6.18 has no bare-FIN exception).
    assert_passed(run("""\
    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
   +0 setsockopt(3, SOL_SOCKET, SO_RCVBUF, [1000], 4) = 0
   +0 bind(3, ..., ...) = 0
   +0 listen(3, 1) = 0
   +0 < S 0:0(0) win 502 <mss 1000,sackOK,nop,nop,nop,wscale 7>
   +0 > S. 0:0(0) ack 1 win 1152 <mss 1460,nop,nop,sackOK,nop,wscale 0>
   +0 < . 1:1(0) ack 1 win 502
   +0 accept(3, ..., ...) = 4
   +0 < . 1:2001(2000) ack 1 win 502
   +0 > . 1:1(0) ack 2001 win 0
   +0 < . 7001:7101(100) ack 1 win 502
   +0 > . 1:1(0) ack 2001 win 0
   +0 < . 2001:2101(100) ack 1 win 502
   +0 > . 1:1(0) ack 2001 win 0
   +0 < F. 2001:2001(0) ack 1 win 502
   +0 > . 1:1(0) ack 2001 win 0
   +0 read(4, ..., 3000) = 2000
"""))


def test_delayed_ack_timer_inflates_the_ato() -> None:
    # Linux tcp_delack_timer_handler: an ACK that waited for the timer doubles the ATO (up to
    # the RTO); tcp_send_delayed_ack bounds the next wait by max(srtt, TCP_DELACK_MIN).
    peer = ScriptedPeer(StackConfig())
    conn = peer.passive_open()
    conn.rx.quickack = 0                      # past the quick-ACK start
    peer.send("P.", 1, 1, payload=b"x" * 100)
    peer.expect_nothing()
    assert conn.rx.ato == pytest.approx(0.04)
    peer.advance(0.04)
    peer.expect(".", 1, 101)
    assert conn.rx.ato == pytest.approx(0.08)
    assert conn.rx.delack_timeout() == pytest.approx(0.04)   # srtt ~0: the 40 ms floor bounds it


def _acks_for_bulk(read_in_callback: bool) -> tuple[int, int]:
    """(data segments the receiver took, segments it sent) for 2 MB over an MSS link, the
    application reading inside on_readable or after each event."""
    from pair import make_pair
    from usertcp.net.memnet import LinkConfig
    from usertcp.tcp.connection import Connection

    p = make_pair(LinkConfig(delay=0.0001), seed=1)
    b, drv = p.b, p.driver
    c, s = p.open(9, timeout=5)
    total, sent, got = 2_000_000, 0, [0]

    def read(conn: Connection) -> None:
        got[0] += len(conn.recv(1 << 22, drv.now()))

    if read_in_callback:
        s.on_readable = read
    segs_in, segs_out = b.counters["TcpInSegs"], b.counters["TcpOutSegs"]

    def step() -> bool:
        nonlocal sent
        while sent < total and c.send_space > 0:
            sent += c.send(bytes(min(65536, total - sent)), drv.now())
        drv.kick()
        if not read_in_callback and s.readable_bytes:
            read(s)
            drv.kick()
        return got[0] >= total

    assert drv.run_until(step, 100)
    return b.counters["TcpInSegs"] - segs_in, b.counters["TcpOutSegs"] - segs_out


def test_a_read_inside_on_readable_sends_no_second_ack() -> None:
    # Linux tcp_cleanup_rbuf may send the ACK of two full frames from the reader; the
    # scheduled ACK is then gone (tcp_event_ack_sent clears ICSK_ACK_NOW), so an
    # application that reads inside the data callback costs no extra ACK per segment.
    after = _acks_for_bulk(read_in_callback=False)
    inside = _acks_for_bulk(read_in_callback=True)
    assert after[0] == inside[0] > 1000
    assert inside[1] == after[1] < 0.7 * inside[0], (after, inside)
