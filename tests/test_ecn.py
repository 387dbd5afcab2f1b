"""Explicit Congestion Notification (RFC 3168) as Linux does it, selected by net.ipv4.tcp_ecn.

Negotiation (tcp_ecn_send_syn / tcp_ecn_create_request / tcp_ecn_make_synack /
tcp_ecn_rcv_synack), the data path (tcp_ecn_send: ECT(0) on new data only, CWR once after a
reduction, ECE until CWR; __tcp_ecn_check_ce), the sender's once-per-window reduction in
the CWR state (tcp_enter_cwr), SYN cookies keeping ECN, the wire/link layers carrying and
setting the ECN field, and an end-to-end transfer through a CE-marking queue.
"""

from __future__ import annotations

import random

import pytest

from pair import RecordingEndpoint, make_pair, sha, transfer
from peer import ScriptedPeer
from usertcp.drill.profile import linux_config
from usertcp.net.impair import ImpairConfig, ImpairedEndpoint, parse_impair
from usertcp.net.memnet import LinkConfig, ce_mark
from usertcp.tcp import syncookies as sc
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import Connection
from usertcp.tcp.info import TCPI_OPT_ECN, TCPI_OPT_ECN_SEEN
from usertcp.tcp.invariants import check_invariants
from usertcp.tcp.recovery import CA_CWR, CA_OPEN, ECN_DEMAND_CWR, ECN_OK, ECN_QUEUE_CWR
from usertcp.wire.packet import build_packet, parse_packet
from usertcp.wire.segment import ACK, CWR, ECE, ECN_CE, ECN_ECT0, ECN_ECT1, ECN_NOT_ECT, SYN, TxPacket
from usertcp.wire.tcp import encode_options

MSS = 1460
CE = ECN_CE
ECT0 = ECN_ECT0


def ecn_peer(ecn: int = 2, *, ecn_fallback: bool = True, header_prediction: bool = True) -> ScriptedPeer:
    """A peer whose stack has tcp_ecn=``ecn``; the two switches default as in StackConfig."""
    return ScriptedPeer(StackConfig(ecn=ecn, ecn_fallback=ecn_fallback, header_prediction=header_prediction))


def passive_ecn(p: ScriptedPeer) -> Connection:
    """LISTEN -> ESTABLISHED with an ECN-setup SYN; the SYN-ACK must set ECN up."""
    p.listen()
    p.send("SEW", 0)
    sa = p.expect("S.", 0, 1)
    assert sa.flags & (ECE | CWR) == ECE and sa.ecn == ECN_NOT_ECT
    p.send(".", 1, 1)
    assert p.listener is not None
    conn = p.listener.accept()
    assert conn is not None and conn.ecn_flags & ECN_OK
    p.conn = conn
    return conn


# ----------------------------------------------------------------------------- negotiation


@pytest.mark.parametrize("server", [0, 1, 2])
@pytest.mark.parametrize("client", [0, 1, 2])
def test_negotiation_matrix(client: int, server: int) -> None:
    """Only tcp_ecn=1 requests; any non-zero tcp_ecn accepts (RFC 3168 §6.1.1, ip-sysctl.rst)."""
    pair = make_pair(cfg_a=StackConfig(ecn=client), cfg_b=StackConfig(ecn=server))
    seen: list[tuple[int, int]] = []
    pair.net.add_tap(lambda data, _t, _d: seen.append(
        (parse_packet(data).flags, parse_packet(data).ecn)))
    c, s = pair.open()
    syn, synack = seen[0], seen[1]
    assert syn[0] & SYN and not syn[0] & ACK and synack[0] & SYN and synack[0] & ACK
    requested = client == 1
    negotiated = requested and server != 0
    assert (syn[0] & (ECE | CWR) == ECE | CWR) is requested
    assert not syn[0] & (ECE | CWR) or requested
    assert synack[0] & (ECE | CWR) == (ECE if negotiated else 0)
    assert syn[1] == synack[1] == ECN_NOT_ECT          # handshake segments are never ECT
    for conn in (c, s):
        assert bool(conn.ecn_flags & ECN_OK) is negotiated
        assert bool(conn.info()["tcpi_options"] & TCPI_OPT_ECN) is negotiated


def test_synack_with_ece_and_cwr_is_not_ecn_setup() -> None:
    """RFC 3168 §6.1.1: ECE|CWR in a SYN-ACK is no RFC 3168 setup. Linux 6.18's
    tcp_ecn_rcv_synack takes it (and CWR alone, ACE 010) as an AccECN answer even for an
    RFC 3168 client, as this machine's kernel does (tools/kernel_accecn_probe.py)."""
    for flags, ok, accecn in (("S.E", True, False), ("S.EW", False, True), ("S.", False, False),
                              ("S.W", False, True)):
        p = ecn_peer(1)
        conn = p.connect()
        syn = p.expect("S", 0)
        assert syn.flags & (ECE | CWR) == ECE | CWR
        p.send(flags, 0, 1)
        p.expect(".", 1, 1)
        assert bool(conn.ecn_flags & ECN_OK) is ok, flags
        assert (conn.accecn is not None) is accecn, flags


@pytest.mark.parametrize("flags,tos,ok", [
    ("SEW", 0, True),
    ("SE", 0, False),              # ECE alone is no ECN-setup SYN
    ("SW", 0, False),
    ("SEW", ECT0, False),          # an ECT-marked SYN: Linux refuses (tcp_ecn_create_request)
    ("SEW", CE, False),
])
def test_passive_setup_rules(flags: str, tos: int, ok: bool) -> None:
    p = ecn_peer(2)
    p.listen()
    p.send(flags, 0, tos=tos)
    sa = p.expect("S.", 0, 1)
    assert sa.flags & (ECE | CWR) == (ECE if ok else 0)
    assert bool(p.connection().ecn_flags & ECN_OK) is ok


@pytest.mark.parametrize("fallback", [True, False])
def test_retransmitted_syn_drops_ecn_setup(fallback: bool) -> None:
    """Linux tcp_ecn_clear_syn (tcp_ecn_fallback=1): a SYN retransmission goes without ECE|CWR."""
    p = ecn_peer(1, ecn_fallback=fallback)
    p.connect()
    assert p.expect("S", 0).flags & (ECE | CWR) == ECE | CWR
    p.advance(1.0)
    again = p.expect("S", 0)
    assert again.flags & (ECE | CWR) == (0 if fallback else ECE | CWR)
    # The peer may still set ECN up with its SYN-ACK (the flags of our first SYN got through).
    p.send("S.E", 0, 1)
    p.expect(".", 1, 1)
    assert p.conn is not None and p.conn.ecn_flags & ECN_OK


def test_sysctl_mapping_and_defaults() -> None:
    assert StackConfig().ecn == 2                      # Linux's default: accept only
    assert linux_config().ecn == 0                     # packetdrill's defaults.sh: tcp_ecn=0
    cfg = StackConfig()
    assert cfg.apply_sysctl("net.ipv4.tcp_ecn", "1") and cfg.ecn == 1
    assert cfg.apply_sysctl("net.ipv4.tcp_ecn_fallback", "0") and not cfg.ecn_fallback
    assert cfg.apply_sysctl("net.ipv4.tcp_ecn", "3") and cfg.ecn == 3    # AccECN (tcp/accecn.py)
    with pytest.raises(ValueError):
        cfg.apply_sysctl("net.ipv4.tcp_ecn", "9")


def test_syncookie_keeps_ecn() -> None:
    """Linux cookie_init_timestamp / cookie_ecn_ok: the ECN bit rides in the TSval."""
    p = ScriptedPeer(StackConfig(syncookies=2))
    p.listen()
    p.send("SEW", 0, options=encode_options(mss=1460, sack_permitted=True, ts=(1000, 0)))
    sa = p.expect("S.", 0, 1)
    assert sa.flags & (ECE | CWR) == ECE and not p.stack.connections
    off = p.stack.ts_offset(p.stack.create_connection("192.0.2.1", 40000, local_port=1))
    assert sc.cookie_ts_ecn((sa.ts_val - off) & sc.TSMASK)
    p.send(".", 1, 1, options=encode_options(ts=(1100, sa.ts_val)))
    assert p.listener is not None
    conn = p.listener.accept()
    assert conn is not None and conn.ecn_flags & ECN_OK
    # Without timestamps there is no room for the bit: no ECN (tcp_conn_request).
    q = ScriptedPeer(StackConfig(syncookies=2))
    q.listen()
    q.send("SEW", 0)
    assert not q.expect("S.", 0, 1).flags & ECE


# ----------------------------------------------------------------------------- data path


def test_ect_only_on_new_data_when_negotiated() -> None:
    for client, marked in ((1, True), (0, False)):
        pair = make_pair(cfg_a=StackConfig(ecn=client), cfg_b=StackConfig(ecn=2))
        seen: list[tuple[int, int, int]] = []     # (payload length, ECN field, flags)

        def tap(data: bytes, _t: float, _d: object, seen: list[tuple[int, int, int]] = seen) -> None:
            seg = parse_packet(data)
            seen.append((len(seg.payload), seg.ecn, seg.flags))
        pair.net.add_tap(tap)
        c, s = pair.open()
        data = random.Random(2).randbytes(200_000)
        assert transfer(pair, c, s, data) == data
        assert transfer(pair, s, c, data[:5000], close=False) == data[:5000]
        with_data = [e for n, e, f in seen if n and not f & SYN]
        empty = [e for n, e, f in seen if not n]
        assert with_data and empty
        assert set(with_data) == ({ECT0} if marked else {ECN_NOT_ECT})
        assert set(empty) == {ECN_NOT_ECT}             # pure ACKs, SYNs and FINs: never ECT


def test_retransmission_is_not_ect() -> None:
    """RFC 3168 §6.1.5 / Linux tcp_ecn_send: only segments at or past snd_nxt are ECT."""
    p = ecn_peer(2)
    conn = passive_ecn(p)
    conn.send(b"x" * 1000, p.now)
    first = p.expect(".", 1, 1, payload_len=1000)
    assert first.ecn == ECT0
    p.advance(1.5)                                     # RTO
    again = p.expect(".", 1, 1, payload_len=1000)
    assert again.ecn == ECN_NOT_ECT and not again.flags & CWR
    assert p.stack.counters["TcpRetransSegs"] >= 1


@pytest.mark.parametrize("fast_path", [True, False])
def test_ce_echo_until_cwr(fast_path: bool) -> None:
    """Receiver: CE -> immediate ACK with ECE, ECE on every ACK until CWR; CWR with data
    is ACKed at once (Linux __tcp_ecn_check_ce, tcp_ecn_accept_cwr)."""
    p = ecn_peer(2, header_prediction=fast_path)
    conn = passive_ecn(p)
    conn.rx.quickack = 0                                  # past the initial quick-ACK phase
    conn.rx.pingpong = False
    seq = 1
    p.send(".", seq, 1, payload=b"a" * 100, tos=ECT0)
    seq += 100
    p.expect_nothing()                                 # an ordinary segment: delayed ACK
    p.send(".", seq, 1, payload=b"b" * 100, tos=CE)
    seq += 100
    ack = p.expect(".", 1, seq)
    assert ack.flags & ECE and not ack.flags & CWR and ack.ecn == ECN_NOT_ECT
    assert conn.ecn_flags & ECN_DEMAND_CWR
    assert p.stack.counters["IpExtInCEPkts"] == 1 and p.stack.counters["IpExtInECT0Pkts"] >= 1
    p.send(".", seq, 1, payload=b"c" * 100, tos=ECT0)  # not CE, but ECE stays on
    seq += 100
    p.advance(0.05)
    assert p.expect(".", 1, seq).flags & ECE
    # Our data carries ECE too while the echo lasts.
    conn.send(b"r" * 10, p.now)
    reply = p.expect(".", 1, seq, payload_len=10)
    assert reply.flags & ECE and reply.ecn == ECT0
    p.send(".W", seq, 11, payload=b"d" * 100, tos=ECT0)   # the sender reduced
    seq += 100
    ack = p.expect(".", 11, seq)                       # at once, without ECE
    assert not ack.flags & ECE and not conn.ecn_flags & ECN_DEMAND_CWR
    assert conn.info()["tcpi_options"] & TCPI_OPT_ECN_SEEN
    check_invariants(p.stack)


def test_not_ect_data_after_ect_is_acked_quickly() -> None:
    """Linux __tcp_ecn_check_ce: non-ECT data after ECT was seen is likely a retransmission."""
    p = ecn_peer(2)
    conn = passive_ecn(p)
    conn.rx.quickack = 0
    p.send(".", 1, 1, payload=b"a" * 100, tos=ECT0)
    p.expect_nothing()
    p.send(".", 101, 1, payload=b"b" * 100, tos=0)
    assert not p.expect(".", 1, 201).flags & ECE


def test_no_ecn_flags_without_negotiation() -> None:
    """A CE mark on a connection without ECN changes nothing (no ECE, no CWR state)."""
    p = ecn_peer(0)
    p.passive_open()
    conn = p.conn
    assert conn is not None and not conn.ecn_flags
    conn.rx.quickack = 0
    p.send(".", 1, 1, payload=b"a" * 100, tos=CE)
    p.expect_nothing()                                 # delayed as usual
    p.advance(0.05)
    assert not p.expect(".", 1, 101).flags & ECE
    assert not conn.ecn_flags


def _sender_in_flight(p: ScriptedPeer, segments: int) -> Connection:
    conn = passive_ecn(p)
    conn.send(b"z" * (segments * MSS), p.now)
    for i in range(segments):
        seg = p.expect(".", 1 + i * MSS, 1, payload_len=MSS)
        assert seg.ecn == ECT0 and not seg.flags & CWR
    return conn


def test_ece_reduces_cwnd_once_per_window_and_sends_cwr() -> None:
    """Sender: ECE -> CWR state, ssthresh cut once, PRR-paced cwnd, CWR on the next new data
    segment only; further ECEs in the window do nothing; one after it reduces again."""
    p = ecn_peer(2)
    conn = _sender_in_flight(p, 10)
    cwnd0 = conn.cc.cwnd
    p.send(".E", 1, 1 + 2 * MSS)                        # two segments acked, with ECE
    assert conn.recovery.ca_state == CA_CWR
    assert p.stack.counters["UsertcpECNCwndReductions"] == 1
    ssthresh = conn.cc.ssthresh
    assert ssthresh == int(cwnd0 * 0.7)                 # CUBIC beta (RFC 9438 §4.6)
    assert conn.cc.cwnd < cwnd0
    assert conn.recovery.recover == 1 + 10 * MSS                 # the window: what was sent at the ECE
    conn.send(b"y" * (4 * MSS), p.now)
    out = p.drain()
    assert out, "PRR lets new data out"
    assert out[0].seg.flags & CWR and out[0].seg.ecn == ECT0
    assert not any(s.seg.flags & CWR for s in out[1:])
    assert not conn.ecn_flags & ECN_QUEUE_CWR
    # More ECEs for the same window: no second reduction.
    p.send(".E", 1, 1 + 4 * MSS)
    p.send(".E", 1, 1 + 6 * MSS)
    assert p.stack.counters["UsertcpECNCwndReductions"] == 1 and conn.cc.ssthresh == ssthresh
    assert conn.cc.cwnd <= ssthresh + 2 * MSS
    p.drain()
    # Everything of the window acked (past recover): the reduction ends at ssthresh.
    p.send(".", 1, 1 + 10 * MSS + MSS)
    assert conn.recovery.ca_state == CA_OPEN
    check_invariants(p.stack)
    # A new echo after the window is a new congestion signal.
    p.send(".E", 1, 1 + 12 * MSS)
    assert conn.recovery.ca_state == CA_CWR and p.stack.counters["UsertcpECNCwndReductions"] == 2
    assert conn.cc.ssthresh < ssthresh
    check_invariants(p.stack)


def test_ece_ignored_without_negotiation() -> None:
    p = ecn_peer(0)
    conn = p.passive_open()
    conn.send(b"z" * (4 * MSS), p.now)
    p.drain()
    p.send(".E", 1, 1 + 2 * MSS)
    assert conn.recovery.ca_state == CA_OPEN and "UsertcpECNCwndReductions" not in p.stack.counters


def test_loss_in_cwr_does_not_reduce_again() -> None:
    """Linux tcp_enter_recovery: an ECN reduction under way is this window's reduction; the
    fast retransmit still happens (NewReno here: the scripted peer offers no SACK)."""
    p = ecn_peer(2)
    conn = _sender_in_flight(p, 10)
    p.send(".E", 1, 1 + MSS)
    assert conn.recovery.ca_state == CA_CWR
    ssthresh = conn.cc.ssthresh
    p.drain()
    for _ in range(3):
        p.send(".", 1, 1 + MSS)                          # three duplicate ACKs
    assert p.stack.counters["TcpExtTCPRenoRecovery"] == 1
    assert conn.cc.ssthresh == ssthresh and p.stack.counters["UsertcpECNCwndReductions"] == 1
    rtx = [s for s in p.drain() if (s.seg.seq - p.local_isn) & 0xFFFFFFFF == 1 + MSS]
    assert rtx and rtx[0].seg.ecn == ECN_NOT_ECT
    check_invariants(p.stack)


# ----------------------------------------------------------------------------- wire and links


def test_wire_carries_the_ecn_field_both_families() -> None:
    for src, dst in ((bytes(4), bytes([10, 0, 0, 1])), (bytes(16), bytes(15) + b"\x01")):
        for ecn in (ECN_NOT_ECT, ECN_ECT1, ECN_ECT0, ECN_CE):
            raw = build_packet(src=src, dst=dst, sport=1, dport=2, seq=3, ack=4, flags=ACK, window=5,
                               tos=0xB8 | ecn, payload=[b"data"]).tobytes()
            seg = parse_packet(raw)
            assert seg.ecn == ecn and seg.tos == 0xB8 | ecn


def test_ce_mark_helper() -> None:
    for src, dst in ((bytes(4), bytes([10, 0, 0, 1])), (bytes(16), bytes(15) + b"\x01")):
        def pkt(ecn: int, src: bytes = src, dst: bytes = dst) -> bytes:
            return build_packet(src=src, dst=dst, sport=1, dport=2, seq=3, ack=4, flags=ACK, window=5,
                                tos=0x20 | ecn, payload=[b"x"]).tobytes()
        assert ce_mark(pkt(ECN_NOT_ECT)) is None
        ce = pkt(ECN_CE)
        assert ce_mark(ce) is ce
        for ecn in (ECN_ECT0, ECN_ECT1):
            marked = ce_mark(pkt(ecn))
            assert marked is not None
            seg = parse_packet(marked)                  # IPv4 header checksum still valid
            assert seg.ecn == ECN_CE and seg.tos == 0x20 | ECN_CE and bytes(seg.payload) == b"x"


def test_link_aqm_marks_ect_and_drops_not_ect() -> None:
    cfg = LinkConfig(delay=0.001, bandwidth_bps=1e6, queue_limit=50, ecn_threshold=2)
    pair = make_pair(cfg)
    got: list[int] = []
    pair.net.add_tap(lambda data, _t, _d: got.append(parse_packet(data).ecn), link=pair.link.ab,
                     where="deliver")
    for ecn in (ECT0, ECT0, ECT0, ECN_NOT_ECT, ECN_NOT_ECT, CE):
        pkt = build_packet(src=bytes([10, 0, 0, 1]), dst=bytes([10, 0, 0, 2]), sport=1, dport=2, seq=0,
                           ack=0, flags=ACK, window=0, tos=ecn, payload=[bytes(1000)])
        pair.net.transmit(pair.net.hosts[0], pkt, 0.0)
    pair.driver.run_for(1.0)
    st = pair.link.ab.stats
    assert (st.ce_marked, st.aqm_drops, st.queue_drops) == (1, 2, 0)
    assert got == [ECT0, ECT0, CE, CE]
    with pytest.raises(ValueError):
        LinkConfig(ecn_threshold=0)


def _ramp_marks_by_queue_length(seed: int, burst: int) -> tuple[list[bool], list[int]]:
    """A burst of ECT(0) packets sent at once over a (4, 12) ramp on a -> b only: whether the
    packet that met i queued ones arrived CE, and the ECN fields of a burst sent b -> a."""
    ramp = LinkConfig(delay=0.001, bandwidth_bps=1e6, queue_limit=100, ecn_ramp=(4, 12))
    plain = LinkConfig(delay=0.001, bandwidth_bps=1e6, queue_limit=100)
    pair = make_pair(ramp, seed=seed)
    pair.link.set_config(ramp, plain)
    got: list[bool] = []
    back: list[int] = []

    def on_ab(data: bytes, _t: float, _d: object) -> None:
        seg = parse_packet(data)
        if seg.sport == 1:                 # the burst, not the hosts' resets of these strays
            got.append(seg.ecn == CE)

    def on_ba(data: bytes, _t: float, _d: object) -> None:
        seg = parse_packet(data)
        if seg.sport == 1:
            back.append(seg.ecn)
    pair.net.add_tap(on_ab, link=pair.link.ab, where="deliver")
    pair.net.add_tap(on_ba, link=pair.link.ba, where="deliver")
    a, b = pair.net.hosts[0], pair.net.hosts[1]
    for src, dst in ((a, bytes([10, 0, 0, 2])), (b, bytes([10, 0, 0, 1]))):
        for i in range(burst):
            pkt = build_packet(src=bytes([10, 0, 0, 1 if src is a else 2]), dst=dst, sport=1, dport=2,
                               seq=i, ack=0, flags=ACK, window=0, tos=ECT0, payload=[bytes(1000)])
            pair.net.transmit(src, pkt, 0.0)
    pair.driver.run_for(2.0)
    return got, back


def test_link_ramp_marks_by_queue_length_per_direction() -> None:
    """The ramp AQM (``ecn_ramp=(min, max)``): a packet meeting at most ``min`` queued ones is
    never marked, one meeting ``max`` or more always, in between with probability
    (q - min) / (max - min); the other direction, configured without it, marks nothing."""
    burst, trials = 16, 300
    hits = [0] * burst
    for seed in range(trials):
        got, back = _ramp_marks_by_queue_length(seed, burst)
        assert len(got) == burst and back == [ECT0] * burst
        for i, marked in enumerate(got):
            hits[i] += marked
    for q in range(burst):
        frac = hits[q] / trials
        want = 0.0 if q <= 4 else 1.0 if q >= 12 else (q - 4) / 8
        assert abs(frac - want) < 0.1, (q, frac, want)


def test_impaired_endpoint_ce_marks() -> None:
    assert parse_impair("ce=0.5").ce == 0.5
    with pytest.raises(ValueError):
        ImpairConfig(ce=1.5)

    sink = RecordingEndpoint()
    ep = ImpairedEndpoint(sink, ImpairConfig(ce=1.0), lambda: 0.0)

    def pkt(ecn: int) -> TxPacket:
        return build_packet(src=bytes([10, 0, 0, 1]), dst=bytes([10, 0, 0, 2]), sport=1, dport=2, seq=0,
                            ack=0, flags=ACK, window=0, tos=ecn, payload=[b"p"])
    ep.receive(pkt(ECT0).tobytes(), 0.0)
    ep.receive(pkt(ECN_NOT_ECT).tobytes(), 0.0)
    assert [parse_packet(g).ecn for g in sink.got] == [CE, ECN_NOT_ECT]
    sink.out = [pkt(ECT0), pkt(ECN_NOT_ECT)]
    assert [parse_packet(t.tobytes()).ecn for t in ep.datagrams_to_send()] == [CE, ECN_NOT_ECT]
    assert ep.stats["in_ce_marked"] == ep.stats["out_ce_marked"] == 1


# ----------------------------------------------------------------------------- end to end


@pytest.mark.parametrize("addresses", [("10.0.0.1", "10.0.0.2"), ("fd00::1", "fd00::2")])
def test_transfer_through_ce_marking_queue(addresses: tuple[str, str]) -> None:
    """With ECN on both ends and an AQM that marks instead of dropping, a bulk transfer
    sees congestion only as CE marks: no loss, no retransmission, counted cwnd reductions.
    The same path without ECN drops at the threshold and has to retransmit."""
    data = random.Random(5).randbytes(2_000_000)
    link = LinkConfig(delay=0.01, bandwidth_bps=20e6, queue_limit=200, ecn_threshold=20)
    results = {}
    for client_ecn in (1, 0):
        pair = make_pair(link, seed=3, addresses=addresses,
                         cfg_a=StackConfig(ecn=client_ecn), cfg_b=StackConfig(ecn=2))
        lst = pair.b.listen(80)
        c = pair.a.create_connection(addresses[1], 80)
        pair.a.connect(c, pair.now)
        pair.driver.kick()
        assert pair.driver.run_until(lambda: bool(lst.accept_queue), 5)  # noqa: B023 - called in this pass
        s = lst.accept()
        assert s is not None
        got = transfer(pair, c, s, data, timeout=120)
        assert sha(got) == sha(data)
        check_invariants(pair.a)
        check_invariants(pair.b)
        results[client_ecn] = (pair.a.counters, pair.b.counters, pair.link.ab.stats)
    a, b, st = results[1]
    ce_name = "IpExtInCEPkts" if ":" not in addresses[0] else "Ip6InCEPkts"
    assert st.ce_marked > 0 and st.aqm_drops == 0 and st.queue_drops == 0 and st.lost == 0
    assert a["TcpRetransSegs"] == 0
    assert a["UsertcpECNCwndReductions"] > 0
    assert b[ce_name] == st.ce_marked == b["UsertcpECNCeDataSegs"]
    a0, _b0, st0 = results[0]
    assert st0.ce_marked == 0 and st0.aqm_drops > 0
    assert a0["TcpRetransSegs"] > 0 and a0["UsertcpECNCwndReductions"] == 0


def test_tun_super_segment_with_cwr_asks_for_gso_ecn() -> None:
    """Linux SKB_GSO_TCP_ECN via VIRTIO_NET_HDR_GSO_ECN: the kernel keeps CWR on the first
    segment only when it cuts our TSO super-segment."""
    from usertcp.net.tun import VIRTIO_NET_HDR_GSO_ECN, VIRTIO_NET_HDR_GSO_TCPV4, vnet_header_for

    v4 = VIRTIO_NET_HDR_GSO_TCPV4
    for flags, want in ((ACK, v4), (ACK | CWR, v4 | VIRTIO_NET_HDR_GSO_ECN)):
        pkt = build_packet(src=bytes([10, 0, 0, 1]), dst=bytes([10, 0, 0, 2]), sport=1, dport=2, seq=0, ack=0,
                           flags=flags, window=0, tos=ECT0, payload=[bytes(4000)], csum_partial=True,
                           gso_size=1000)
        assert vnet_header_for(pkt)[1] == want
