"""DCTCP (RFC 8257) as Linux tcp_dctcp.c: alpha, the reductions, ECN negotiation for a
controller that needs it, the receiver's CE-state echo, and a bottleneck run against CUBIC
on the in-memory network with step and ramp marking (issue 16)."""

from __future__ import annotations

import ipaddress
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pair import make_pair, sha, transfer
from peer import ScriptedPeer
from usertcp.net.memnet import LinkConfig, LinkStats
from usertcp.tcp.config import StackConfig
from usertcp.tcp.congestion import (
    DCTCP_MAX_ALPHA,
    Dctcp,
    congestion_needs_ecn,
    create_congestion_control,
)
from usertcp.tcp.connection import Connection
from usertcp.tcp.invariants import check_invariants
from usertcp.tcp.recovery import ECN_DEMAND_CWR, ECN_OK
from usertcp.tcp.stack import Stack
from usertcp.wire.packet import parse_packet
from usertcp.wire.segment import CWR, ECE, ECN_CE, ECN_ECT0, ECN_NOT_ECT, SYN

MSS = 1000

# ----------------------------------------------------------------------------- the controller


def _window(d: Dctcp, delivered: int, next_seq: int, total: int, marked: int) -> int:
    """Feed one observation window: an ECE-marked ACK for ``marked`` packets, then one
    without ECE for the rest, the latter reaching ``next_seq``. Returns the new total."""
    if marked:
        delivered += marked
        d.on_ack_event(delivered, True, next_seq - 1, next_seq)
    delivered += total - marked
    d.on_ack_event(delivered, False, next_seq, next_seq + 100)
    return delivered


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 6), st.lists(st.tuples(st.integers(1, 200), st.floats(0, 1)), max_size=60))
def test_alpha_tracks_the_moving_average_of_the_marked_fraction(
        shift_g: int, windows: list[tuple[int, float]]) -> None:
    """RFC 8257 §3.3: alpha <- (1 - g) * alpha + g * F once per window of data, g = 1/2**shift_g.
    Linux keeps alpha as an integer scaled by 1024; it stays within a few units of the real
    average (each step floors once, and the floors decay with the same gain)."""
    d = Dctcp(MSS, shift_g=shift_g)
    real = 1.0
    d.on_ack_event(0, False, 0, 100)         # the first ACK closes the empty first window
    real *= 1 - 2 ** -shift_g
    delivered, next_seq = 0, 100
    for total, frac in windows:
        marked = round(total * frac)
        delivered = _window(d, delivered, next_seq, total, marked)
        next_seq += 100
        g = 2 ** -shift_g
        real = (1 - g) * real + g * marked / total
        assert 0 <= d.alpha <= DCTCP_MAX_ALPHA
        assert abs(d.alpha - real * DCTCP_MAX_ALPHA) <= 2 ** shift_g + 1, (d.alpha, real)


def test_alpha_decays_to_zero_and_saturates() -> None:
    d = Dctcp(MSS)
    delivered, seq = 0, 100
    for _ in range(200):                     # no marks: min_not_zero takes the last units away
        delivered = _window(d, delivered, seq, 10, 0)
        seq += 100
    assert d.alpha == 0
    for _ in range(200):                     # every packet marked
        delivered = _window(d, delivered, seq, 10, 10)
        seq += 100
    assert d.alpha >= DCTCP_MAX_ALPHA - 16
    info = d.state_info()
    assert info["tcpi_ca_name"] == "dctcp" and info["dctcp_alpha"] == d.alpha


def test_window_closes_only_when_snd_una_passes_next_seq() -> None:
    d = Dctcp(MSS, alpha_on_init=0)
    d.on_ack_event(0, False, 0, 1000)        # opens the window [.., 1000)
    d.on_ack_event(5, True, 500, 1000)       # marked, inside the window: no update yet
    assert d.alpha == 0
    d.on_ack_event(10, False, 1000, 2000)    # the window is acked: F = 5 / 10
    assert d.alpha == (5 << 6) // 10         # g = 1/16: alpha = 1024 * F / 16


def test_reductions() -> None:
    d = Dctcp(MSS, alpha_on_init=512)
    d.cwnd = 100 * MSS
    d.on_ecn_echo(0.0, d.cwnd)               # dctcp_ssthresh: cwnd * (1 - alpha / 2)
    assert d.ssthresh == d.cwnd == 75 * MSS
    d.on_congestion_event(0.0, d.cwnd)       # a loss halves (dctcp_react_to_loss)
    assert d.ssthresh == d.cwnd == 37 * MSS + MSS // 2
    d.on_rto(0.0, d.cwnd)
    assert d.cwnd == MSS and d.ssthresh == (37 * MSS + MSS // 2) // 2
    d2 = Dctcp(MSS)                          # alpha starts at 1: the first echo halves
    d2.cwnd = 4 * MSS
    d2.on_ecn_echo(0.0, d2.cwnd)
    assert d2.cwnd == 2 * MSS
    d2.on_ecn_echo(0.0, d2.cwnd)             # never under two segments
    assert d2.cwnd == 2 * MSS


def test_registry_and_module_parameters() -> None:
    assert congestion_needs_ecn("dctcp") and congestion_needs_ecn("DCTCP")
    assert not congestion_needs_ecn("cubic") and not congestion_needs_ecn("nope")
    cfg = StackConfig()
    for name, value in (("net.ipv4.tcp_congestion_control", "dctcp"), ("dctcp_shift_g", "3"),
                        ("dctcp_alpha_on_init", "100")):
        assert cfg.apply_sysctl(name, value)
    cc = create_congestion_control(cfg.congestion_control, MSS, config=cfg)
    assert isinstance(cc, Dctcp) and cc.shift_g == 3 and cc.alpha == 100
    with pytest.raises(ValueError):
        Dctcp(MSS, shift_g=11)
    with pytest.raises(ValueError):
        Dctcp(MSS, alpha_on_init=2000)


# ----------------------------------------------------------------------------- negotiation


def _open_and_tap(cfg_a: StackConfig, cfg_b: StackConfig) -> tuple[
        Connection, Connection, list[tuple[int, int, int, bool]], Stack]:
    """Open a connection a -> b and move data both ways; (payload length, ECN field, flags,
    sent by a) of every packet."""
    pair = make_pair(cfg_a=cfg_a, cfg_b=cfg_b)
    seen: list[tuple[int, int, int, bool]] = []
    a_addr = ipaddress.ip_address(pair.addresses[0]).packed

    def tap(data: bytes, _t: float, _d: object) -> None:
        seg = parse_packet(data)
        seen.append((len(seg.payload), seg.ecn, seg.flags, seg.src == a_addr))
    pair.net.add_tap(tap)
    c, s = pair.open()
    data = random.Random(1).randbytes(100_000)
    assert transfer(pair, c, s, data, close=False) == data
    assert transfer(pair, s, c, data[:3000], close=False) == data[:3000]
    return c, s, seen, pair.a


def test_dctcp_asks_for_ecn_whatever_tcp_ecn_says_and_marks_every_packet() -> None:
    """Linux tcp_ecn_send_syn / tcp_ecn_create_request with tcp_ca_needs_ecn: a DCTCP client
    sets ECN up (its SYN ECT) with tcp_ecn=0, a DCTCP server accepts it with tcp_ecn=0, and
    then every packet either sends is ECT(0), pure ACKs and the server's data included."""
    dctcp = StackConfig(ecn=0, congestion_control="dctcp")
    c, s, seen, _ = _open_and_tap(dctcp, dctcp)
    assert c.ecn_flags & ECN_OK and s.ecn_flags & ECN_OK
    syn = [e for n, e, f, _a in seen if f & SYN and not f & 0x10]
    synack = [(e, f) for n, e, f, _a in seen if f & SYN and f & 0x10]
    assert syn == [ECN_ECT0]
    assert synack and all(e == ECN_NOT_ECT and f & ECE and not f & CWR for e, f in synack)
    rest = [(n, e) for n, e, f, _a in seen if not f & SYN]
    assert rest and {e for _n, e in rest} == {ECN_ECT0}
    assert any(n == 0 for n, _e in rest)         # pure ACKs among them


def test_dctcp_client_against_a_classic_server() -> None:
    """An ECT SYN is refused by a listener with RFC 3168 ECN only (Linux treats it as a sign
    of a broken path), so DCTCP falls back to Reno without ECT, as dctcp_init does."""
    c, s, seen, _ = _open_and_tap(StackConfig(ecn=0, congestion_control="dctcp"), StackConfig(ecn=2))
    assert not c.ecn_flags & ECN_OK and not s.ecn_flags & ECN_OK
    assert {e for _n, e, f, _a in seen if not f & SYN} == {ECN_NOT_ECT}
    c2, s2, seen2, _ = _open_and_tap(StackConfig(ecn=1), StackConfig(ecn=0, congestion_control="dctcp"))
    # A classic client's (not ECT) SYN meets a DCTCP listener: ECN is set up; the client's
    # data is ECT (RFC 3168), its pure ACKs are not; all of the DCTCP server's packets are.
    assert c2.ecn_flags & ECN_OK and s2.ecn_flags & ECN_OK
    client_acks = {e for n, e, f, a in seen2 if a and not n and not f & SYN}
    server_all = {e for n, e, f, a in seen2 if not a and not f & SYN}
    assert client_acks == {ECN_NOT_ECT} and server_all == {ECN_ECT0}


# ----------------------------------------------------------------------------- the receiver


def test_receiver_echoes_the_ce_state() -> None:
    """RFC 8257 §3.2 / Linux dctcp_ece_ack_update: ECE follows the CE state of the packets an
    ACK covers; on a change, the delayed ACK goes out first with the old state, then the
    packet that changed it is ACKed at once. No CWR is needed to stop the echo."""
    p = ScriptedPeer(StackConfig(ecn=0, congestion_control="dctcp"))
    p.listen()
    p.send("SEW", 0)
    sa = p.expect("S.", 0, 1)
    assert sa.flags & ECE and sa.ecn == ECN_NOT_ECT
    p.send(".", 1, 1)
    assert p.listener is not None
    conn = p.listener.accept()
    assert conn is not None and conn.ecn_flags & ECN_OK
    p.conn = conn
    conn.rx.quickack = 0                          # past the initial quick-ACK phase
    seq = 1
    p.send(".", seq, 1, payload=b"a" * 100, tos=ECN_ECT0)
    seq += 100
    p.expect_nothing()                            # delayed
    p.send(".", seq, 1, payload=b"b" * 100, tos=ECN_CE)
    first = p.expect(".", 1, seq)                 # the delayed ACK, with the old state
    assert not first.flags & ECE
    seq += 100
    second = p.expect(".", 1, seq)                # the CE packet, at once, with ECE
    assert second.flags & ECE and conn.ecn_flags & ECN_DEMAND_CWR
    p.send(".", seq, 1, payload=b"c" * 100, tos=ECN_CE)   # same state: delayed, ECE kept
    seq += 100
    p.advance(0.05)
    assert p.expect(".", 1, seq).flags & ECE
    p.send(".", seq, 1, payload=b"d" * 100, tos=ECN_ECT0)  # back to not-CE: ACK at once
    seq += 100
    back = p.expect(".", 1, seq)
    assert not back.flags & ECE and not conn.ecn_flags & ECN_DEMAND_CWR
    check_invariants(p.stack)


# ----------------------------------------------------------------------------- a bottleneck


def _bottleneck(cc: str, aqm: dict[str, object], data: bytes) -> tuple[LinkStats, list[int], dict[str, int],
                                                                       float]:
    """One bulk transfer through a 20 Mbit/s, 80-packet queue; the queue length each packet
    met, the sender's counters and the goodput as a fraction of the link rate."""
    link = LinkConfig(delay=0.002, bandwidth_bps=20e6, queue_limit=80, **aqm)  # type: ignore[arg-type]
    cfg = StackConfig(ecn=1 if cc == "dctcp" else 0, congestion_control=cc)
    pair = make_pair(link, seed=4, cfg_a=cfg, cfg_b=cfg)
    queue: list[int] = []
    ab = pair.link.ab
    pair.net.add_tap(lambda _data, _t, _d: queue.append(ab.queue_length), link=ab)
    c, s = pair.open()
    t0 = pair.now
    got = transfer(pair, c, s, data, timeout=60)
    assert sha(got) == sha(data)
    check_invariants(pair.a)
    goodput = len(data) * 8 / (pair.now - t0) / 20e6
    return ab.stats, queue, dict(pair.a.counters), goodput


@pytest.mark.parametrize("aqm", [{"ecn_threshold": 20}, {"ecn_ramp": (10, 30)}], ids=["step", "ramp"])
def test_dctcp_holds_the_queue_near_the_marking_point_where_cubic_fills_it(aqm: dict[str, object]) -> None:
    """RFC 8257 §1: with marking at K packets, DCTCP keeps the queue near K with the link
    busy; CUBIC behind a tail-drop queue fills it until it drops. Virtual time: the figures
    are deterministic."""
    data = random.Random(7).randbytes(3_000_000)
    d_stats, d_queue, d_counters, d_goodput = _bottleneck("dctcp", aqm, data)
    c_stats, c_queue, c_counters, c_goodput = _bottleneck("cubic", {}, data)
    assert d_stats.ce_marked > 0 and d_stats.queue_drops == 0 and d_stats.aqm_drops == 0
    assert d_counters.get("TcpRetransSegs", 0) == 0
    assert c_stats.queue_drops > 0 and c_counters.get("TcpRetransSegs", 0) > 0
    d_mean, c_mean = sum(d_queue) / len(d_queue), sum(c_queue) / len(c_queue)
    print(f"dctcp queue mean {d_mean:.1f} max {max(d_queue)} goodput {d_goodput:.2f}; "
          f"cubic queue mean {c_mean:.1f} max {max(c_queue)} goodput {c_goodput:.2f}")
    assert max(d_queue) < 60 < max(c_queue)
    assert d_mean < c_mean / 2
    assert d_goodput > 0.8, d_goodput


@pytest.mark.slow
def test_dctcp_window_grows_back_to_the_marking_point_on_a_long_fat_path() -> None:
    """100 Mbit/s, 10 ms (83 packets in flight), marking from 20 queued: after slow start's
    first reduction DCTCP's window grows back in congestion avoidance until the queue reaches
    the marking point again, and keeps being trimmed there. That growth needs TSO deferral
    for cwnd room to count as cwnd-limited (tcp_tso_should_defer sets *is_cwnd_limited):
    without it the window stalled a few packets short of the marking point (25 marks, 2
    reductions in 10 MB)."""
    from usertcp.bench import dctcp as bench
    run = bench.bottleneck("dctcp_step", size=10_000_000, mbit=100.0, rtt_ms=10.0, queue_limit=200)
    assert int(run.summary["ce_marked"]) > 100, run.summary
    assert int(run.summary["ecn_cwnd_reductions"]) >= 5, run.summary
    assert run.summary["queue_drops"] == 0


def test_bench_dctcp_reports_every_scenario_and_plots(tmp_path: Path) -> None:
    """``usertcp bench dctcp``: the scenarios side by side, each on the feedback it names,
    and the plot when asked."""
    from usertcp.bench import dctcp as bench
    out = bench.run(size=1_000_000, plot=str(tmp_path / "q.png"))
    assert set(bench.SCENARIOS) <= set(out)
    step, taildrop = out["dctcp_step"], out["cubic_taildrop"]
    assert step["queue_drops"] == 0 and step["ce_marked"] > 0 and 0 <= step["alpha_end"] <= 1024
    assert taildrop["queue_delay_mean_ms"] > step["queue_delay_mean_ms"]
    assert 0 < out["dctcp_step_vs_cubic_taildrop_delay_ratio"] < 1
    assert [out[name]["feedback"] for name in bench.SCENARIOS] == [
        "rfc3168", "rfc3168", "accecn", "rfc3168", "none"]
    acc = out["dctcp_accecn_step"]
    assert acc["queue_drops"] == 0 and acc["ce_marked"] > 0 and acc["ecn_cwnd_reductions"] > 0
    assert (tmp_path / "q.png").stat().st_size > 1000
