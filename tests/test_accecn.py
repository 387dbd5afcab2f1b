"""Accurate ECN (RFC 9768) as Linux 6.18: negotiation in every tcp_ecn pairing, the
handshake's ACE encodings, the ACE counter and the AccECN option on the in-memory network,
the option's layout, and the counter arithmetic (wraps, large ACKs) under hypothesis."""

from __future__ import annotations

import ipaddress
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pair import make_pair, transfer
from usertcp.drill.ast import PacketEvent
from usertcp.drill.lexer import ScriptSyntaxError
from usertcp.drill.parser import parse_script
from usertcp.drill.render import flag_bits, fmt_opts
from usertcp.net.memnet import LinkConfig
from usertcp.tcp.accecn import (
    ACE_FAIL_RECV,
    OPT_COUNTER_SEEN,
    OPT_FAIL_RECV,
    OPT_FAIL_SEEN,
    AccEcn,
    ace_delta,
    ace_flags,
    ace_of,
    fit_option,
    option_init_state,
    reflector_flags,
    safe_delta,
    syn_requests_accecn,
    update_bytes,
)
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import Connection
from usertcp.tcp.info import TCPI_OPT_ECN, tcp_info
from usertcp.tcp.invariants import check_invariants
from usertcp.tcp.recovery import ECN_OK
from usertcp.wire.accecn import OPT_ACCECN0, OPT_ACCECN1, encode_with_accecn, parse_accecn
from usertcp.wire.packet import parse_packet
from usertcp.wire.segment import (
    ACK,
    AE,
    CWR,
    ECE,
    ECN_CE,
    ECN_ECT0,
    ECN_ECT1,
    ECN_NOT_ECT,
    FIN,
    PSH,
    SYN,
    Segment,
)
from usertcp.wire.tcp import options_from

Seen = list[tuple[int, int, int, bool, bytes]]


def _open(cfg_a: StackConfig, cfg_b: StackConfig, link: LinkConfig | None = None,
          size: int = 50_000) -> tuple[Connection, Connection, Seen]:
    """Open a -> b, send ``size`` bytes each way; (payload length, IP-ECN, flags, from a,
    options) of every packet."""
    pair = make_pair(link, cfg_a=cfg_a, cfg_b=cfg_b) if link else make_pair(cfg_a=cfg_a, cfg_b=cfg_b)
    seen: Seen = []
    a_addr = ipaddress.ip_address(pair.addresses[0]).packed

    def tap(data: bytes, _t: float, _d: object) -> None:
        seg = parse_packet(data)
        seen.append((len(seg.payload), seg.ecn, seg.flags, seg.src == a_addr, bytes(seg.raw_options)))
    pair.net.add_tap(tap)
    c, s = pair.open()
    data = random.Random(3).randbytes(size)
    assert transfer(pair, c, s, data, close=False) == data
    assert transfer(pair, s, c, data[:5000], close=False) == data[:5000]
    check_invariants(pair.a)
    check_invariants(pair.b)
    return c, s, seen


def _mode(c: Connection) -> str:
    if c.accecn is not None:
        return "accecn"
    return "rfc3168" if c.ecn_flags & ECN_OK else "none"


def _expected(client: int, server: int) -> str:
    """Linux tcp_ecn_send_syn / tcp_ecn_create_request: only tcp_ecn=3 asks for AccECN,
    1 and 4 ask for RFC 3168 ECN; a listener accepts AccECN with 3..5, ECN with any but 0."""
    if client == 3:
        return "accecn" if server >= 3 else "rfc3168" if server else "none"
    if client in (1, 4):
        return "rfc3168" if server else "none"
    return "none"


@pytest.mark.parametrize("client", range(6))
@pytest.mark.parametrize("server", range(6))
def test_negotiation_for_every_tcp_ecn_pairing(client: int, server: int) -> None:
    c, s, seen = _open(StackConfig(ecn=client), StackConfig(ecn=server), size=3000)
    want = _expected(client, server)
    assert (_mode(c), _mode(s)) == (want, want)
    syn, synack = seen[0], seen[1]
    assert syn[2] & SYN and not syn[2] & ACK and synack[2] & SYN and synack[2] & ACK
    assert ace_of(syn[2]) == {3: 7, 1: 3, 4: 3}.get(client, 0)
    data = [p for p in seen[2:] if p[0]]
    if want == "accecn":
        # RFC 9768 Table 2: the SYN arrived Not-ECT, so the SYN-ACK's ACE is 010; the client's
        # last handshake ACK reflects the Not-ECT SYN-ACK the same way.
        assert ace_of(synack[2]) == 0b010
        assert seen[2][3] and seen[2][0] == 0 and ace_of(seen[2][2]) == 0b010
        # Afterwards every packet is ECT(0) and carries r.cep + 5 (no CE here: 5).
        assert all(p[1] == ECN_ECT0 and ace_of(p[2]) == 5 for p in seen[3:])
        # Linux 6.18 tcp_get_info sets TCPI_OPT_ECN for any ECN mode (tcp_ecn_mode_any), AccECN
        # included: this machine's kernel shows it (tests/test_accecn_kernel.py).
        assert tcp_info(c)["tcpi_options"] & TCPI_OPT_ECN and tcp_info(s)["tcpi_options"] & TCPI_OPT_ECN
    else:
        assert all(not p[2] & AE for p in seen[1:])
        assert all(p[1] == (ECN_ECT0 if want == "rfc3168" else ECN_NOT_ECT) for p in data)


def test_synack_reports_the_ip_ecn_field_of_the_syn() -> None:
    """A DCTCP client's SYN is ECT(0) (tcp_ecn_send_syn INET_ECN_xmit): the SYN-ACK's ACE is
    100 (RFC 9768 Table 2)."""
    c, s, seen = _open(StackConfig(ecn=3, congestion_control="dctcp"), StackConfig(ecn=5), size=2000)
    assert seen[0][1] == ECN_ECT0
    assert ace_of(seen[1][2]) == 0b100 and _mode(c) == _mode(s) == "accecn"


def test_accecn_option_in_the_synack_and_on_data() -> None:
    """tcp_ecn_option=2: the SYN-ACK carries the option with the initial counts (EE1B = EE0B = 1,
    ECEB = 0: tcp_synack_options), the client's first ACK and then every segment carries it
    once the peer has shown it sees one (saw_accecn_opt); the SYN never does."""
    c, s, seen = _open(StackConfig(ecn=3), StackConfig(ecn=3), size=20_000)
    assert options_from(seen[0][4]).accecn is None
    opt = options_from(seen[1][4]).accecn
    assert opt is not None and parse_accecn(opt) == (1, (1, 0, 1))
    assert all(options_from(p[4]).accecn is not None for p in seen[2:])
    assert c.accecn is not None and s.accecn is not None
    assert tcp_info(s)["tcpi_accecn_opt_seen"] == tcp_info(c)["tcpi_accecn_opt_seen"] == OPT_COUNTER_SEEN


def test_option_minimum_mode_sends_it_on_changes_only() -> None:
    """tcp_ecn_option=1 with no beacon: the option goes with the handshake's ACK and on the
    ACKs a change demands (RFC 9768 §3.2.3.3), not on every segment."""
    cfg = StackConfig(ecn=3, ecn_option=1, ecn_option_beacon=0)
    _c, _s, seen = _open(cfg, cfg, size=20_000)
    with_opt = [p for p in seen[2:] if options_from(p[4]).accecn is not None]
    assert 0 < len(with_opt) < len(seen[2:]) / 2
    _c, _s, seen0 = _open(StackConfig(ecn=3, ecn_option=0), StackConfig(ecn=3, ecn_option=0), size=2000)
    assert all(options_from(p[4]).accecn is None for p in seen0)


def test_option_beacon_in_minimum_mode() -> None:
    """tcp_accecn_option_beacon_check: in mode 1, with nothing changed, the option goes again
    once tcp_ecn_option_beacon of them would fit in one smoothed RTT since the last one
    (``(now - last) * beacon >= srtt``); beacon 0 never; mode 2 always; mode 0 never."""
    good = memoryview(bytes((OPT_ACCECN1, 11, 0, 0, 1, 0, 0, 0, 0, 0, 1)))
    for mode, beacon, want in ((1, 3, (False, True, True)), (1, 0, (False, False, False)),
                               (2, 3, (True, True, True)), (0, 3, (False, False, False))):
        acc = AccEcn(option_mode=mode, beacon=beacon, fallback=True)
        acc.note_syn_sent(ECN_NOT_ECT)
        assert acc.synack_outcome(SYN | ACK | CWR, ECN_NOT_ECT, good) == 2
        while acc.opt_demand:                  # the two options the SYN-ACK's option asks for
            acc.option_fields(3, 0.0)
        srtt = 0.030
        assert tuple(acc.option_wanted(t, srtt) for t in (0.009, 0.011, 5.0)) == want, (mode, beacon)


def test_ce_marks_are_counted_exactly_and_feed_dctcp() -> None:
    """A step-marking queue: the receiver's r.cep equals the marks the link made and the
    sender's s.cep (no wrap of the 3-bit field is lost), the CE bytes match on both sides,
    and DCTCP's alpha is driven by the exact count, with no loss."""
    link = LinkConfig(delay=0.002, bandwidth_bps=20e6, queue_limit=80, ecn_threshold=8)
    cfg = StackConfig(ecn=3, congestion_control="dctcp")
    pair = make_pair(link, cfg_a=cfg, cfg_b=cfg)
    c, s = pair.open()
    data = random.Random(5).randbytes(400_000)
    assert transfer(pair, c, s, data, close=False) == data
    pair.driver.run_for(1.0)               # the last ACKs arrive
    ci, si = tcp_info(c), tcp_info(s)
    marked = pair.link.ab.stats.ce_marked
    assert marked > 10
    assert si["tcpi_received_ce"] == marked == ci["tcpi_delivered_ce"]
    assert pair.a.counters.get("TcpExtTCPDeliveredCE") == marked       # tcp_newly_delivered's ecn_count
    assert si["tcpi_received_ce_bytes"] == ci["tcpi_delivered_ce_bytes"] > 0
    assert si["tcpi_received_e0_bytes"] == ci["tcpi_delivered_e0_bytes"] > 0
    assert si["tcpi_received_ce_bytes"] + si["tcpi_received_e0_bytes"] == len(data)
    assert int(c.cc.state_info()["dctcp_alpha"]) < 1024
    assert dict(pair.a.counters).get("TcpRetransSegs", 0) == 0
    check_invariants(pair.a)


# ----------------------------------------------------------------------------- handshake units


def _acc(*, fallback: bool = True) -> AccEcn:
    return AccEcn(option_mode=2, beacon=3, fallback=fallback)


@pytest.mark.parametrize(("ace", "outcome"), [(0, 0), (7, 0), (1, 1), (5, 1), (2, 2), (3, 2), (4, 2), (6, 2)])
def test_synack_outcomes_of_table_2(ace: int, outcome: int) -> None:
    """RFC 9768 Table 2 / tcp_ecn_rcv_synack: 000 and 111 mean no ECN, 001 and 101 classic
    ECN, anything else AccECN."""
    assert _acc().synack_outcome(SYN | ACK | ace_flags(ace), ECN_NOT_ECT, None) == outcome


def test_handshake_encodings_and_syn_requests() -> None:
    assert [reflector_flags(e) for e in range(4)] == [CWR, CWR | ECE, AE, AE | CWR]
    assert [syn_requests_accecn(ace_flags(a)) for a in range(8)] == [False, True, True, False] + [True] * 4
    acc = _acc()
    assert acc.syn_flags(SYN, False) == AE | CWR | ECE
    assert acc.syn_flags(SYN, True) == 0                 # tcp_ecn_clear_syn (tcp_ecn_fallback=1)
    assert _acc(fallback=False).syn_flags(SYN, True) == AE | CWR | ECE
    acc.accept_syn(ECN_CE)
    assert acc.syn_flags(SYN | ACK, False) == AE | CWR


def test_ce_marked_synack_is_counted_when_the_feedback_is_plausible() -> None:
    acc = _acc()
    acc.note_syn_sent(ECN_NOT_ECT)
    assert acc.synack_outcome(SYN | ACK | CWR, ECN_CE, None) == 2      # ACE 010: SYN arrived Not-ECT
    assert acc.received_ce == 1 and acc.ace(ACK) == ace_flags(6)
    bad = _acc()
    bad.note_syn_sent(ECN_NOT_ECT)
    bad.synack_outcome(SYN | ACK | AE, ECN_CE, None)       # 100: "ECT(0) arrived" for a Not-ECT SYN
    assert bad.fail_mode & ACE_FAIL_RECV and bad.received_ce == 0


def test_third_ack_zero_ace_stops_ect_and_ce_on_the_synack_counts_once() -> None:
    """tcp_accecn_third_ack (RFC 9768 Table 4): ACE 000 is a broken path (no more ECT);
    110 says the SYN-ACK was CE-marked: one CE delivered."""
    acc = _acc()
    acc.accept_syn(ECN_NOT_ECT)
    acc.note_syn_sent(ECN_ECT0)
    acc.third_ack(ACK, True, ECN_ECT0, 0, None)
    assert acc.fail_mode & ACE_FAIL_RECV and not acc.sends_ect
    ok = _acc()
    ok.note_syn_sent(ECN_ECT0)
    ok.third_ack(ACK | AE | CWR, True, ECN_ECT0, 0, None)
    assert ok.sends_ect and ok.delivered_ce == 1


def test_zeroed_option_disables_option_processing() -> None:
    """tcp_accecn_option_init: an option whose EE1B (or EE0B) is zero was cleared by a
    middlebox (the counters start at 1): option processing stops (OPT_FAIL_RECV)."""
    zero = memoryview(bytes((OPT_ACCECN1, 11)) + bytes(9))
    good = memoryview(bytes((OPT_ACCECN1, 11, 0, 0, 1, 0, 0, 0, 0, 0, 1)))
    assert option_init_state(zero) == OPT_FAIL_SEEN and option_init_state(good) == OPT_COUNTER_SEEN
    acc = _acc()
    assert acc.synack_outcome(SYN | ACK | CWR, ECN_NOT_ECT, zero) == 2
    assert acc.fail_mode & OPT_FAIL_RECV


# ----------------------------------------------------------------------------- the option layout


@pytest.mark.parametrize("nfields", [0, 1, 2, 3])
@pytest.mark.parametrize("sack", [False, True])
def test_option_layout_round_trips_and_folds_into_the_sack_padding(nfields: int, sack: bool) -> None:
    """tcp_options_write: kind 174, fields EE1B, ECEB, EE0B; the odd bytes of a 0- or 1-field
    option take the place of the NOPs before SACK. Parsing gives the same counters back."""
    blocks = [(1000, 2000)] if sack else []
    out = encode_with_accecn(ts=(1, 2), accecn=(nfields, 0x010203, 0x040506, 0x070809), sack_blocks=blocks)
    assert len(out) % 4 == 0
    seg = options_from(out)
    assert seg.ts_val == 1 and seg.sack_blocks == tuple(blocks)
    assert seg.accecn is not None
    assert parse_accecn(seg.accecn) == (1, (0x010203, 0x040506, 0x070809)[:nfields])
    order0 = memoryview(bytes((OPT_ACCECN0, 11, 0, 0, 9, 0, 0, 8, 0, 0, 7)))
    assert parse_accecn(order0) == (0, (9, 8, 7))


def test_sack_takes_precedence_down_to_two_blocks() -> None:
    """Linux tcp_options_fit_accecn: with three SACK blocks (and TS) an option of the fields
    needed fits by dropping one block, never below two."""
    assert fit_option(2, 40 - 12 - 28, 3, 2) == (2, 8 - 8, 2)     # one block gives way
    assert fit_option(3, 40 - 12 - 28, 3, 2) == (-1, 0, 3)        # not below two blocks
    assert fit_option(0, 40 - 12 - 28, 3, 2) == (0, 0, 3)         # kind+length in the NOPs
    assert fit_option(1, 40 - 12 - 20, 2, 2) == (2, 8, 2)         # 8 bytes left: two fields


# ----------------------------------------------------------------------------- arithmetic


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 200), st.integers(0, 200))
def test_ace_delta_and_safe_delta(delivered_ce: int, real: int, pkts: int) -> None:
    """The ACE field is r.cep + 5 mod 8: the delta read back is the real increase mod 8, and
    safe_delta (every possible wrap) is the largest count <= the packets delivered with that
    residue, so it never undercounts an increase the packets allow."""
    ace = (delivered_ce + real + 5) & 7
    d = ace_delta(ace, delivered_ce)
    assert d == real % 8
    safe = safe_delta(pkts, d)
    assert safe % 8 == d % 8 or safe < 0
    assert safe <= pkts
    if real <= pkts:
        assert safe >= real


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(-(2**23) + 1, 2**23 - 1), st.integers(0, 1))
def test_24_bit_byte_counters_follow_the_32_bit_count(count: int, change: int, offset: int) -> None:
    """tcp_update_ecn_bytes: a 24-bit field that moved by less than 2^23 either way updates
    the 32-bit counter by exactly that much (wraps of the field included)."""
    wire = (count + change + offset) & 0xFFFFFF
    new, delta = update_bytes(count, wire, offset)
    assert delta == change and new == (count + change) & 0xFFFFFFFF


def _opt(e1b: int, ceb: int, e0b: int) -> memoryview:
    return memoryview(bytes((OPT_ACCECN1, 11)) + (e1b + 1).to_bytes(3, "big") + ceb.to_bytes(3, "big")
                      + (e0b + 1).to_bytes(3, "big"))


@settings(max_examples=200, deadline=None)
@given(st.booleans(), st.integers(8, 80), st.integers(500, 1448))
def test_large_ack_with_option_bytes_is_not_a_false_overflow(all_ce: bool, pkts: int, mss: int) -> None:
    """A large ACK (more than 7 packets) whose ACE did not change: without the option every
    possible wrap is assumed (a false overflow if none was CE); with the option's byte
    counters showing which codepoint the bytes went to, the count is exact (RFC 9768
    Appendix A.2, __tcp_accecn_process)."""
    ce = pkts if all_ce else 0
    acc = _acc()
    acc.saw_opt = OPT_COUNTER_SEEN
    assert acc.process_ack(5, _opt(0, 0, mss), 1, mss, True, False, True, mss, 10**6) == 0   # ECT(0) moved
    got = acc.process_ack((ce + 5) & 7, _opt(0, ce * mss, (1 + pkts - ce) * mss), pkts, pkts * mss,
                          True, False, True, mss, 10**6)
    assert got == ce
    blind = _acc()
    got_blind = blind.process_ack((ce + 5) & 7, None, pkts, pkts * mss, True, False, True, mss, 0)
    assert got_blind == safe_delta(pkts, ce % 8) >= 8


def test_reordered_ack_without_progress_is_ignored() -> None:
    acc = _acc()
    assert acc.process_ack(6, None, 0, 0, False, False, True, 1000, 0) == 0
    assert acc.process_ack(6, None, 1, 1000, True, False, True, 1000, 0) == 1


def test_receiver_counters_and_change_triggered_acks() -> None:
    acc = _acc()
    acc.accept_syn(ECN_NOT_ECT)
    assert acc.received(ECN_ECT0, 1000, 1, False)        # codepoint changed: ACK at once
    assert not acc.received(ECN_ECT0, 1000, 1, False)
    assert acc.received(ECN_CE, 500, 1, False)
    assert acc.received(ECN_ECT1, 100, 1, False)
    assert acc.received_bytes == [100, 2000, 500] and acc.received_ce == 1
    assert acc.minlen == 3 and acc.opt_demand == 2
    seg = Segment()
    seg.payload = memoryview(bytes(3000))
    seg.gso_size = 1000
    seg.tos = ECN_CE
    seg.ts_val = -1
    acc.on_segment(seg)
    assert acc.received_ce == 4                           # a GRO packet counts its segments
    assert ECN_ECT1 == 1


# ----------------------------------------------------------------------------- drill syntax


@pytest.mark.parametrize(("flags", "bits"), [
    ("P5.", PSH | ACK | AE | ECE), (".5", ACK | AE | ECE), ("P.5", PSH | ACK | AE | ECE),
    ("F5.", FIN | ACK | AE | ECE), ("SEWA", SYN | ECE | CWR | AE), ("0.", ACK), ("SW.", SYN | CWR | ACK),
])
def test_drill_flag_forms(flags: str, bits: int) -> None:
    """packetdrill's AccECN notation: an ACE digit 0..7 for AE/CWR/ECE, before or after the
    ACK dot, or the letters E (ECE), W (CWR) and A (AE)."""
    script = parse_script(f"+0 < {flags} 1:1(0) ack 1 win 100\n")
    ev = script.events[0]
    assert isinstance(ev, PacketEvent) and flag_bits(ev.flags) == bits and not ev.unsupported


def test_drill_accecn_option_in_both_orders() -> None:
    script = parse_script("+0 < . 1:1(0) ack 1 win 100 <ECN e1b 1 ceb 1000 e0b 7,nop,ECN e0b 5 ceb 4>\n")
    ev = script.events[0]
    assert isinstance(ev, PacketEvent) and ev.options is not None
    first, _nop, second = ev.options
    assert (first.kind, first.values, second.kind, second.values) == (174, (1, 1000, 7), 172, (5, 4))
    raw = bytes((174, 11, 0, 0, 1, 0, 3, 0xE8, 0, 0, 7))
    assert fmt_opts([(174, raw[2:])]) == "ECN e1b 1 ceb 1000 e0b 7"
    with pytest.raises(ScriptSyntaxError):
        parse_script("+0 < . 1:1(0) ack 1 win 100 <ECN ceb 1 e0b 2>\n")


def test_tcpi_delivered_counts_every_packet_once() -> None:
    """Linux tp->delivered: the SYN and every data packet, once, whether an ACK covers a whole
    send-queue entry or trims its head (tcp_tso_acked): after a lossless transfer it is the
    packets sent, each at most one MSS (a larger one counts tcp_skb_pcount packets)."""
    link = LinkConfig(delay=0.002, bandwidth_bps=20e6, queue_limit=200)
    c, _s, seen = _open(StackConfig(), StackConfig(), link, size=300_000)
    mss = c.mss
    sent = sum(-(-p[0] // mss) for p in seen if p[3] and p[0])
    assert sent >= 300_000 // mss
    assert tcp_info(c)["tcpi_delivered"] == sent + 1
    # The stack-wide TcpExtTCPDelivered (tcp_newly_delivered) counts the same, the SYN included
    # on the active side: what the client's stack delivered, the server's (5000 bytes back) apart.
    assert _s.stack is not c.stack
    assert c.stack.counters.get("TcpExtTCPDelivered") == sent + 1
    assert c.stack.counters.get("TcpExtTCPDeliveredCE") == 0


def test_rfc3168_delivered_ce_counts_packets_acked_with_ece() -> None:
    """Linux tcp_count_delivered: with RFC 3168 ECN, tcpi_delivered_ce counts the packets
    delivered by ACKs that carry ECE; without ECN it stays 0."""
    link = LinkConfig(delay=0.002, bandwidth_bps=20e6, queue_limit=80, ecn_threshold=8)
    c, _s, seen = _open(StackConfig(ecn=1), StackConfig(ecn=1), link, size=200_000)
    ece_acks = [p for p in seen if not p[3] and p[2] & ECE and not p[2] & SYN]
    assert ece_acks and tcp_info(c)["tcpi_delivered_ce"] >= len(ece_acks)
    assert c.stack.counters.get("TcpExtTCPDeliveredCE") == tcp_info(c)["tcpi_delivered_ce"]
    c0, _s0, _ = _open(StackConfig(ecn=0), StackConfig(ecn=0), link, size=50_000)
    assert tcp_info(c0)["tcpi_delivered_ce"] == 0


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 10_000), st.sampled_from([0, 1, 2]), st.integers(3, 30))
def test_ce_counts_survive_wraps_on_a_marking_link(seed: int, option: int, ramp_top: int) -> None:
    """End to end on the in-memory network, a ramp-marking queue (many marks: the 3-bit ACE
    field wraps again and again): the sender's s.cep equals the receiver's r.cep equals the
    marks the link made, with or without the option; with it, the CE bytes agree too."""
    link = LinkConfig(delay=0.002, bandwidth_bps=50e6, queue_limit=100, ecn_ramp=(1, ramp_top))
    cfg = StackConfig(ecn=3, ecn_option=option)
    pair = make_pair(link, seed=seed, cfg_a=cfg, cfg_b=cfg)
    c, s = pair.open()
    data = random.Random(seed).randbytes(150_000)
    assert transfer(pair, c, s, data, close=False) == data
    pair.driver.run_for(1.0)
    ci, si = tcp_info(c), tcp_info(s)
    assert si["tcpi_received_ce"] == pair.link.ab.stats.ce_marked == ci["tcpi_delivered_ce"]
    if option:
        assert si["tcpi_received_ce_bytes"] == ci["tcpi_delivered_ce_bytes"]
    check_invariants(pair.a)
