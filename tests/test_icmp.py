"""ICMP and ICMPv6: parsing, echo, and TCP's reaction to errors (Linux tcp_v4_err / tcp_v6_err)."""

from __future__ import annotations

import errno
import ipaddress
import struct
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import ICMP, IP
from scapy.layers.inet6 import ICMPv6EchoReply, IPv6

from pair import A_ADDR, B_ADDR, make_pair, sha, transfer
from peer import LOCAL_IP, MASK, REMOTE_IP, ScriptedPeer
from usertcp.drill.runner import RunOptions, run_file
from usertcp.net.memnet import LinkConfig
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import State
from usertcp.tcp.stack import Stack
from usertcp.wire import icmp
from usertcp.wire.packet import parse_packet
from usertcp.wire.segment import NotTcp

ROUTER_IP = ipaddress.ip_address("192.0.2.254").packed


def unreach(peer: ScriptedPeer, code: int, seq: int, *, icmp_type: int = icmp.ICMP_DEST_UNREACH,
            info: int = 0, src: bytes = ROUTER_IP) -> bytes:
    """An ICMPv4 error quoting the stack's segment with relative sequence number ``seq``."""
    return icmp.build_icmp_error(src=src, dst=LOCAL_IP, icmp_type=icmp_type, code=code, info=info,
                                 quoted_src=LOCAL_IP, quoted_dst=REMOTE_IP, sport=peer.local_port,
                                 dport=peer.peer_port, seq=(peer.local_isn + seq) & MASK)


def established(config: StackConfig | None = None) -> ScriptedPeer:
    peer = ScriptedPeer(config)
    peer.active_open()
    return peer


# ----------------------------------------------------------------------------- wire format


def test_error_round_trip_and_scapy_agrees() -> None:
    raw = icmp.build_icmp_error(src=ROUTER_IP, dst=LOCAL_IP, icmp_type=3, code=4, info=1200,
                                quoted_src=LOCAL_IP, quoted_dst=REMOTE_IP, sport=8080, dport=40000,
                                seq=123456)
    with pytest.raises(NotTcp) as exc:
        parse_packet(raw)
    where = exc.value
    msg = icmp.parse_icmp(where.mv, where.offset, where.end, 4, where.src, where.dst)
    assert (msg.type, msg.code, msg.info & 0xFFFF) == (3, 4, 1200)
    assert (msg.quoted_sport, msg.quoted_dport, msg.quoted_seq) == (8080, 40000, 123456)
    assert msg.quoted_protocol == 6 and msg.quoted_src == LOCAL_IP
    pkt = IP(raw)      # scapy, an independent implementation, recomputes both checksums
    recomputed = IP(raw)
    del recomputed[ICMP].chksum
    del recomputed.chksum
    again = IP(bytes(recomputed))
    assert (again[ICMP].chksum, again.chksum) == (pkt[ICMP].chksum, pkt.chksum)
    assert pkt[ICMP].type == 3 and pkt[ICMP].code == 4 and pkt[ICMP].nexthopmtu == 1200


def test_bad_checksum_and_truncation_are_counted() -> None:
    stack = Stack(["192.168.0.1"])
    raw = bytearray(icmp.build_icmp_error(src=ROUTER_IP, dst=LOCAL_IP, icmp_type=3, code=1, info=0,
                                          quoted_src=LOCAL_IP, quoted_dst=REMOTE_IP, sport=1, dport=2,
                                          seq=3))
    raw[-1] ^= 0xFF
    stack.receive(bytes(raw), 0.0)
    assert stack.counters["IcmpInCsumErrors"] == 1 and stack.counters["IcmpInErrors"] == 1
    short = icmp.build_icmp_error(src=ROUTER_IP, dst=LOCAL_IP, icmp_type=3, code=1, info=0,
                                  quoted_src=LOCAL_IP, quoted_dst=REMOTE_IP, sport=1, dport=2, seq=3)
    # Cut the quote to 4 bytes of TCP (RFC 792 asks for 8), fixing the IP length and checksums.
    body = bytearray(short[20:-4])
    body[2:4] = b"\0\0"
    csum = icmp.finish(int.from_bytes(body, "big"))
    body[2:4] = csum.to_bytes(2, "big")
    ip = bytearray(short[:20])
    ip[2:4] = (20 + len(body)).to_bytes(2, "big")
    ip[10:12] = b"\0\0"
    ip[10:12] = icmp.finish(int.from_bytes(ip, "big")).to_bytes(2, "big")
    stack.receive(bytes(ip + body), 0.0)
    assert stack.counters["IcmpInErrors"] == 2


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80), st.booleans())
def test_random_icmp_never_raises(body: bytes, v6: bool) -> None:
    stack = Stack(["192.168.0.1", "fd00::1"])
    if v6:
        hdr = struct.pack("!IHBB16s16s", 0x60000000, len(body), 58, 64,
                          ipaddress.ip_address("fd00::2").packed, ipaddress.ip_address("fd00::1").packed)
    else:
        tot = 20 + len(body)
        v4 = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, tot, 0, 0, 64, 1, 0, REMOTE_IP, LOCAL_IP))
        v4[10:12] = icmp.finish(int.from_bytes(v4, "big")).to_bytes(2, "big")
        hdr = bytes(v4)
    stack.receive(bytes(hdr) + body, 0.0)
    stack.receive(bytes(hdr) + body, 0.0, checksum_verified=True)
    assert sum(stack.counters.values()) >= 1     # counted somewhere (message, error or drop)


# ----------------------------------------------------------------------------- echo


def test_echo_request_gets_a_reply_v4_and_v6() -> None:
    stack = Stack(["192.168.0.1", "fd00::1"])
    req = bytearray(struct.pack("!BBHHH", 8, 0, 0, 0x1234, 7) + b"ping data")
    req[2:4] = icmp.finish(int.from_bytes(req, "big") << 8).to_bytes(2, "big")   # odd length
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(req), 0, 0, 64, 1, 0, REMOTE_IP,
                               LOCAL_IP))
    ip[10:12] = icmp.finish(int.from_bytes(ip, "big")).to_bytes(2, "big")
    stack.receive(bytes(ip + req), 0.0)
    (reply,) = stack.datagrams_to_send()
    pkt = IP(reply.tobytes())
    assert pkt.src == "192.168.0.1" and pkt.dst == "192.0.2.1"
    assert pkt[ICMP].type == 0 and pkt[ICMP].id == 0x1234 and pkt[ICMP].seq == 7
    assert bytes(pkt[ICMP].payload) == b"ping data"
    check = IP(reply.tobytes())
    del check[ICMP].chksum
    del check.chksum
    assert IP(bytes(check))[ICMP].chksum == pkt[ICMP].chksum and IP(bytes(check)).chksum == pkt.chksum
    assert stack.counters["IcmpInEchos"] == 1 and stack.counters["IcmpOutEchoReps"] == 1

    src6, dst6 = ipaddress.ip_address("fd00::2").packed, ipaddress.ip_address("fd00::1").packed
    body = struct.pack("!BBHHH", 128, 0, 0, 9, 1) + b"v6"
    csum = icmp.finish(int.from_bytes(body, "big") + int.from_bytes(src6, "big")
                       + int.from_bytes(dst6, "big") + 58 + len(body))
    body = body[:2] + csum.to_bytes(2, "big") + body[4:]
    stack.receive(struct.pack("!IHBB16s16s", 0x60000000, len(body), 58, 64, src6, dst6) + body, 0.0)
    (reply6,) = stack.datagrams_to_send()
    p6 = IPv6(reply6.tobytes())
    assert ICMPv6EchoReply in p6 and p6[ICMPv6EchoReply].id == 9 and p6[ICMPv6EchoReply].data == b"v6"
    check6 = IPv6(reply6.tobytes())
    del check6[ICMPv6EchoReply].cksum
    assert IPv6(bytes(check6))[ICMPv6EchoReply].cksum == p6[ICMPv6EchoReply].cksum


# ----------------------------------------------------------------------------- TCP's reaction


def test_unreachable_aborts_a_connect_in_syn_sent() -> None:
    peer = ScriptedPeer()
    conn = peer.connect()
    peer.expect("S", 0)
    peer.inject(unreach(peer, icmp.ICMP_HOST_UNREACH, 0))
    assert conn.state is State.CLOSED and conn.error == errno.EHOSTUNREACH
    assert peer.stack.counters["TcpAttemptFails"] == 1
    peer.expect_nothing()


def test_out_of_window_quote_is_ignored_and_counted() -> None:
    peer = ScriptedPeer()
    conn = peer.connect()
    peer.expect("S", 0)
    peer.inject(unreach(peer, icmp.ICMP_HOST_UNREACH, 5000))
    assert conn.state is State.SYN_SENT and conn.error == 0
    assert peer.stack.counters["TcpExtOutOfWindowIcmps"] == 1


def test_no_connection_counts_an_icmp_error() -> None:
    peer = ScriptedPeer()
    peer.inject(unreach(peer, icmp.ICMP_PORT_UNREACH, 0))
    assert peer.stack.counters["IcmpInErrors"] == 1 and peer.stack.counters["IcmpInDestUnreachs"] == 1


def test_established_soft_error_explains_the_timeout() -> None:
    peer = established(StackConfig(retries2=3))
    conn = peer.conn
    assert conn is not None
    conn.send(b"x" * 100, peer.now)
    peer.expect("P.", 1, 1, payload_len=100)
    peer.inject(unreach(peer, icmp.ICMP_HOST_UNREACH, 1))
    assert conn.state is State.ESTABLISHED and conn.error == 0       # soft: nothing reported yet
    assert conn.soft_error == errno.EHOSTUNREACH
    peer.advance(120)
    assert conn.state is State.CLOSED and conn.error == errno.EHOSTUNREACH   # not ETIMEDOUT


def test_recverr_makes_the_error_hard() -> None:
    peer = established()
    conn = peer.conn
    assert conn is not None
    conn.recverr = True
    conn.send(b"x" * 10, peer.now)
    peer.expect("P.", 1, 1)
    peer.inject(unreach(peer, icmp.ICMP_PORT_UNREACH, 1))
    assert conn.error == errno.ECONNREFUSED and conn.state is State.ESTABLISHED   # Linux: no abort


def test_source_quench_is_ignored() -> None:
    peer = established()
    conn = peer.conn
    assert conn is not None
    conn.send(b"x" * 10, peer.now)
    peer.expect("P.", 1, 1)
    cwnd = conn.cc.cwnd
    peer.inject(unreach(peer, 0, 1, icmp_type=icmp.ICMP_SOURCE_QUENCH))
    assert conn.soft_error == 0 and conn.cc.cwnd == cwnd                    # RFC 6633
    assert peer.stack.counters["IcmpInSrcQuenchs"] == 1


def test_frag_needed_lowers_the_mss_and_resends_at_once() -> None:
    peer = established()
    conn = peer.conn
    assert conn is not None and conn.mss == 1460
    conn.send(b"a" * 4380, peer.now)
    for k in range(3):
        peer.expect(".", 1 + 1460 * k, 1, payload_len=1460)
    cwnd = conn.cc.cwnd // 1460
    peer.inject(unreach(peer, icmp.ICMP_FRAG_NEEDED, 1, info=1000))
    assert conn.mss == 960 and conn.info()["tcpi_pmtu"] == 1000
    sent = peer.drain()
    assert sent and all(len(s.seg.payload) <= 960 for s in sent)
    assert (sent[0].seg.seq - peer.local_isn) & MASK == 1 and sent[0].time == peer.now  # no timer wait
    assert conn.cc.cwnd // conn.mss >= cwnd - 1                          # no congestion response
    peer.send(".", 1, 4381)
    assert conn.snd_una == conn.snd_max
    # A later larger report never raises the path MTU.
    peer.inject(unreach(peer, icmp.ICMP_FRAG_NEEDED, 4381, info=1400))
    assert conn.mss == 960


def test_frag_needed_is_ignored_with_pmtudisc_dont_and_tiny_reports_are_clamped() -> None:
    peer = established()
    conn = peer.conn
    assert conn is not None
    conn.send(b"a" * 1460, peer.now)
    peer.expect(".", 1, 1, payload_len=1460)
    conn.pmtudisc = 0
    peer.inject(unreach(peer, icmp.ICMP_FRAG_NEEDED, 1, info=1000))
    assert conn.mss == 1460
    conn.pmtudisc = 1
    peer.inject(unreach(peer, icmp.ICMP_FRAG_NEEDED, 1, info=68))
    assert conn.mss == 552 - 40                                       # Linux ip_rt_min_pmtu


def test_unreachable_undoes_one_rto_backoff() -> None:
    peer = established()
    conn = peer.conn
    assert conn is not None
    conn.send(b"x" * 100, peer.now)
    peer.expect("P.", 1, 1)
    while conn.rtt.backoff < 3:               # a few timeouts while "the path is down"
        peer.advance(0.1)
    peer.drain()
    backoff, deadline = conn.rtt.backoff, conn.timers.rto_deadline
    peer.inject(unreach(peer, icmp.ICMP_NET_UNREACH, 1))
    assert conn.rtt.backoff == backoff - 1 and conn.timers.rto_deadline < deadline   # RFC 6069 §4
    assert peer.stack.counters["UsertcpRtoReverted"] == 1
    # An error quoting a later sequence number is no evidence about the head: no revert.
    peer.inject(unreach(peer, icmp.ICMP_NET_UNREACH, 50))
    assert conn.rtt.backoff == backoff - 1 and peer.stack.counters["UsertcpRtoReverted"] == 1


@pytest.mark.parametrize(("code", "dropped"), [(0, True), (1, True), (3, False), (13, False)])
def test_request_socket_dropped_only_by_net_or_host_unreachable(code: int, dropped: bool) -> None:
    peer = ScriptedPeer()
    lst = peer.listen()
    peer.send("S", 0)
    peer.expect("S.", 0, 1)
    peer.inject(unreach(peer, code, 0))
    assert bool(lst.embryonic) is not dropped
    assert peer.stack.counters["TcpExtListenDrops"] == int(dropped)
    if not dropped:
        peer.inject(unreach(peer, icmp.ICMP_HOST_UNREACH, 7))   # not the ISN: out of window
        assert lst.embryonic and peer.stack.counters["TcpExtOutOfWindowIcmps"] == 1
        peer.send(".", 1, 1)                                   # the handshake still completes
        assert peer.connection().state is State.ESTABLISHED


def test_ipv6_packet_too_big_and_minimum_mtu() -> None:
    local, remote = "fd3d:a0b:17d6::1", "fd3d:fa7b:d17d::1"
    stack = Stack([local], replace(StackConfig(), isn_secret=bytes(16)))
    lip, rip = ipaddress.ip_address(local).packed, ipaddress.ip_address(remote).packed
    conn = stack.create_connection(remote, 80, local_port=5000)
    stack.connect(conn, 0.0)
    (syn,) = stack.datagrams_to_send()
    isn = parse_packet(syn.tobytes()).seq

    def ptb(mtu: int) -> bytes:
        return icmp.build_icmp_error(src=rip, dst=lip, icmp_type=icmp.ICMPV6_PKT_TOOBIG, code=0, info=mtu,
                                     quoted_src=lip, quoted_dst=rip, sport=5000, dport=80, seq=isn)

    stack.receive(ptb(1000), 0.0)                    # below 1280: ignored (RFC 8201 §4)
    assert conn.pmtu == 0
    stack.receive(ptb(1300), 0.0)
    assert conn.pmtu == 1300 and stack.counters["Icmp6InPktTooBigs"] == 2


# ----------------------------------------------------------------------------- the upstream templates

_CORPUS = next((p for p in (Path(__file__).resolve().parents[1].parent / "shared" / "packetdrill",
                            Path("/work/shared/packetdrill")) if p.is_dir()), None)
_TFO = "gtests/net/tcp/fastopen/server"


@pytest.mark.skipif(_CORPUS is None, reason="packetdrill corpus not found")
@pytest.mark.parametrize(("script", "version", "code", "outcome"), [
    # A request socket is dropped by net/host unreachable (IPv4) or a "fatal" ICMPv6 code only.
    ("icmp-baseline", "ipv4", "net_unreachable", "passed"),
    ("icmp-baseline", "ipv4", "host_unreachable", "passed"),
    ("icmp-baseline", "ipv4", "port_unreachable", "timed out waiting for outbound packet"),
    ("icmp-baseline", "ipv6", "port_unreachable", "passed"),
    ("icmp-baseline", "ipv6", "admin_prohibited", "passed"),
    ("icmp-baseline", "ipv6", "address_unreachable", "timed out waiting for outbound packet"),
    # A fast-open child is closed by any code; the errno it reports follows the code.
    ("icmp-before-accept", "ipv4", "host_unreachable", "passed"),
    ("icmp-before-accept", "ipv4", "packet_filtered", "passed"),
    ("icmp-before-accept", "ipv4", "net_unreachable", "ENETUNREACH"),
    ("icmp-before-accept", "ipv4", "port_unreachable", "ECONNREFUSED"),
    ("icmp-before-accept", "ipv6", "address_unreachable", "passed"),
    ("icmp-before-accept", "ipv6", "not_neighbour", "passed"),
    ("icmp-before-accept", "ipv6", "admin_prohibited", "EACCES"),
    (("icmp-before-accept", "ipv4", None, "bad ICMP code CODE")),
])  # fmt: skip
def test_icmp_templates_follow_linux_per_code(script: str, version: str, code: str | None,
                                              outcome: str) -> None:
    assert _CORPUS is not None
    defines = {"CODE": code} if code else {}
    res = run_file(_CORPUS / _TFO / f"{script}.pkt", RunOptions(ip_version=version, defines=defines))
    if outcome == "passed":
        assert res.status == "passed", res.reason
    else:
        assert res.status != "passed" and outcome in res.reason, res.reason


# ----------------------------------------------------------------------------- end to end


@pytest.mark.parametrize("addresses", [(A_ADDR, B_ADDR), ("fd00::a", "fd00::b")])
def test_path_mtu_discovery_over_a_narrow_link(addresses: tuple[str, str]) -> None:
    """A router in front of a 1300-byte link drops bigger packets and says so: the transfer
    completes, the sender's segments shrink to fit, and the receiver gets every byte."""
    pair = make_pair(LinkConfig(delay=0.005, mtu=1300), addresses=addresses)
    client, server = pair.open()
    data = bytes(range(256)) * 4096
    got = transfer(pair, client, server, data)
    assert sha(got) == sha(data)
    v6 = ":" in addresses[0]
    assert client.pmtu == 1300 and client.mss == 1300 - (60 if v6 else 40) - 12
    too_big = pair.link.directions[0].stats.too_big
    assert too_big >= 1 and pair.a.counters["Icmp6InPktTooBigs" if v6 else "IcmpInDestUnreachs"] == too_big
    assert pair.a.counters["UsertcpPmtuReductions"] == 1


def test_df_bit_follows_the_pmtu_discovery_mode() -> None:
    peer = established()
    conn = peer.conn
    assert conn is not None
    for mode, df in ((1, True), (2, True), (0, False), (3, False)):
        conn.pmtudisc = mode
        conn.send(b"x", peer.now)
        (sent,) = peer.drain()
        assert bool(sent.raw[6] & 0x40) is df, mode
        peer.send(".", 1, conn.snd_nxt)
