"""NewReno and CUBIC window management (RFC 5681, RFC 6582, RFC 9438)."""

from __future__ import annotations

import math

import pytest

from peer import MASK, ScriptedPeer
from usertcp.tcp.congestion import (
    AVAILABLE,
    INFINITE_SSTHRESH,
    CongestionControl,
    Cubic,
    LinuxCubic,
    NewReno,
    create_congestion_control,
)
from usertcp.wire.tcp import encode_options

MSS = 1000


def run_round(cc: CongestionControl, now: float, rtt: float, *, ack_size: int = MSS) -> float:
    """Ack one full window, spread evenly over one RTT; returns the time at the end."""
    window = cc.cwnd
    n = max(1, window // ack_size)
    for i in range(n):
        cc.on_ack(ack_size, now + rtt * (i + 1) / n, rtt, window - i * ack_size)
    return now + rtt


def test_factory_and_names() -> None:
    assert AVAILABLE == ("reno", "cubic", "dctcp")
    assert isinstance(create_congestion_control("reno", MSS), NewReno)
    assert isinstance(create_congestion_control("newreno", MSS), NewReno)
    assert isinstance(create_congestion_control("cubic", MSS), LinuxCubic)
    assert create_congestion_control("cubic", MSS).name == "cubic"
    assert isinstance(create_congestion_control("cubic-rfc9438", MSS), Cubic)
    assert create_congestion_control("newreno", MSS).name == "reno"
    with pytest.raises(ValueError):
        create_congestion_control("bbr", MSS)


def test_initial_window() -> None:
    cc = NewReno(1460)
    assert cc.cwnd == 14600 and cc.ssthresh == INFINITE_SSTHRESH
    assert NewReno(MSS, initial_window=4 * MSS).cwnd == 4 * MSS
    info = cc.state_info()
    assert info["tcpi_snd_cwnd"] == 10 and info["tcpi_snd_ssthresh"] == 0


@pytest.mark.parametrize("cls", [NewReno, Cubic])
def test_slow_start_doubles_per_rtt(cls: type[CongestionControl]) -> None:
    cc = cls(MSS)
    now = 0.0
    seen = []
    for _ in range(5):
        seen.append(cc.cwnd // MSS)
        now = run_round(cc, now, 0.1)
    assert seen == [10, 20, 40, 80, 160]


def test_slow_start_counts_all_acked_bytes() -> None:
    # Linux tcp_slow_start(): a delayed ACK for two segments grows cwnd by two (no L limit).
    cc = NewReno(MSS)
    cc.on_ack(2 * MSS, 0.0, 0.1, cc.cwnd)
    assert cc.cwnd == 12 * MSS


def test_slow_start_stops_at_ssthresh_and_spills_into_avoidance() -> None:
    cc = NewReno(MSS)
    cc.ssthresh = 11 * MSS
    cc.on_ack(3 * MSS, 0.0, 0.1, cc.cwnd)
    assert cc.cwnd == 11 * MSS  # 1 MSS of slow start, the other 2000 bytes counted for CA
    assert not cc.in_slow_start


def test_reno_linear_growth_one_mss_per_rtt() -> None:
    cc = NewReno(MSS)
    cc.ssthresh = cc.cwnd = 20 * MSS
    now = 0.0
    seen = []
    for _ in range(6):
        seen.append(cc.cwnd // MSS)
        now = run_round(cc, now, 0.1)
    assert seen == [20, 21, 22, 23, 24, 25]


def test_app_limited_does_not_grow() -> None:
    for cc in (NewReno(MSS), Cubic(MSS)):
        before = cc.cwnd
        cc.on_ack(5 * MSS, 1.0, 0.1, 2 * MSS, app_limited=True)
        assert cc.cwnd == before


def test_reno_congestion_event_and_recovery_exit() -> None:
    cc = NewReno(MSS)
    cc.cwnd = 40 * MSS
    cc.on_congestion_event(1.0, 30 * MSS)
    assert cc.ssthresh == 15 * MSS  # max(FlightSize/2, 2*SMSS)
    assert cc.cwnd == 15 * MSS
    cc.cwnd = 18 * MSS  # e.g. inflated during recovery by the caller
    cc.on_recovery_exit()
    assert cc.cwnd == 15 * MSS
    cc.on_congestion_event(2.0, 3 * MSS)
    assert cc.ssthresh == 2 * MSS


def test_reno_rto() -> None:
    cc = NewReno(MSS)
    cc.cwnd = 40 * MSS
    cc.on_rto(1.0, 40 * MSS)
    assert cc.cwnd == MSS and cc.ssthresh == 20 * MSS
    # A second timeout of the same segment keeps ssthresh (RFC 5681 §3.1).
    cc.on_rto(2.0, MSS, first_timeout=False)
    assert cc.cwnd == MSS and cc.ssthresh == 20 * MSS
    info = cc.state_info()
    assert info["tcpi_snd_cwnd"] == 1 and info["tcpi_snd_ssthresh"] == 20


def test_set_mss_keeps_segments() -> None:
    cc = Cubic(1460)
    cc.cwnd = 30 * 1460
    cc.on_congestion_event(0.0, 30 * 1460)
    cc.set_mss(1000)
    assert cc.cwnd == 21 * 1000 and cc.ssthresh == 21 * 1000
    assert cc.w_max == pytest.approx(30 * 1000)
    fresh = NewReno(1460)
    fresh.set_mss(536)
    assert fresh.cwnd == 10 * 536 and fresh.ssthresh == INFINITE_SSTHRESH


# --- CUBIC -----------------------------------------------------------------------------

C, BETA = 0.4, 0.7


def expected_w_cubic(t: float, w_max: float, cwnd_epoch: float) -> float:
    k: float = ((w_max - cwnd_epoch) / C) ** (1 / 3)   # a float: callers have w_max > cwnd_epoch
    return C * (t - k) ** 3 + w_max


def test_cubic_multiplicative_decrease_beta() -> None:
    cc = Cubic(MSS)
    cc.cwnd = 100 * MSS
    cc.on_congestion_event(1.0, 100 * MSS)
    assert cc.ssthresh == 70 * MSS and cc.cwnd == 70 * MSS
    assert cc.w_max == 100 * MSS
    assert cc.cwnd_prior == 100 * MSS


def test_cubic_fast_convergence() -> None:
    cc = Cubic(MSS)
    cc.cwnd = 100 * MSS
    cc.on_congestion_event(1.0, 100 * MSS)
    cc.cwnd = 90 * MSS  # next loss below the previous W_max
    cc.on_congestion_event(2.0, 90 * MSS)
    assert cc.w_max == pytest.approx(90 * MSS * (1 + BETA) / 2)  # RFC 9438 §4.7
    assert cc.ssthresh == 63 * MSS
    slow = Cubic(MSS, fast_convergence=False)
    slow.cwnd = 100 * MSS
    slow.on_congestion_event(1.0, 100 * MSS)
    slow.cwnd = 90 * MSS
    slow.on_congestion_event(2.0, 90 * MSS)
    assert slow.w_max == 90 * MSS
    # A loss above the previous W_max just records the new maximum.
    cc.cwnd = 120 * MSS
    cc.on_congestion_event(3.0, 120 * MSS)
    assert cc.w_max == 120 * MSS


def test_cubic_k_and_epoch_start_on_first_ack() -> None:
    cc = Cubic(MSS)
    cc.cwnd = 100 * MSS
    cc.on_congestion_event(5.0, 100 * MSS)
    assert cc.epoch_start is None
    cc.on_ack(MSS, 7.5, 0.1, 70 * MSS)
    assert cc.epoch_start == 7.5
    assert cc.cwnd_epoch == 70 * MSS
    assert cc.k == pytest.approx(math.cbrt(100 * (1 - BETA) / C))  # ≈ 4.217 s
    assert cc.w_cubic(0.0) == pytest.approx(70.0)
    assert cc.w_cubic(cc.k) == pytest.approx(100.0)


def test_cubic_window_follows_rfc9438_curve() -> None:
    rtt = 0.1
    cc = Cubic(MSS)
    cc.cwnd = 100 * MSS
    cc.on_congestion_event(0.0, 100 * MSS)
    now = 0.0
    t0: float | None = None
    checks = 0
    for _ in range(80):
        now = run_round(cc, now, rtt)
        if t0 is None:
            t0 = cc.epoch_start
        assert t0 is not None
        t = now - t0
        # cwnd = max(W_cubic, W_est) (§4.2, §4.3); W_est grows alpha_cubic segments per
        # RTT until it reaches cwnd_prior = 100, then one segment per RTT like Reno.
        alpha = 3 * (1 - BETA) / (1 + BETA)
        t_prior = (100 - 70) / alpha * rtt
        w_est = 70 + alpha * t / rtt if t < t_prior else 100 + (t - t_prior) / rtt
        expected = max(expected_w_cubic(t, 100.0, 70.0), w_est)
        seg = cc.cwnd / MSS
        # cwnd tracks the target one round behind: within a couple of segments.
        assert abs(seg - expected) <= 2.0, (t, seg, expected)
        if t < 5.0:  # well inside the cubic region the match is much tighter
            assert abs(seg - expected_w_cubic(t, 100.0, 70.0)) <= 0.5
        checks += 1
        # Concave below W_max, convex above it.
        if t < cc.k - 0.5:
            assert seg < 100
        if t > cc.k + 1.0:
            assert seg > 100
    assert checks == 80
    # Spot values of the formula: K = cbrt(75) ≈ 4.217 s, W(8 s) ≈ 121.65 segments.
    assert expected_w_cubic(8.0, 100, 70) == pytest.approx(121.65, abs=0.01)


def test_cubic_target_clamped_to_one_and_a_half_cwnd() -> None:
    cc = Cubic(MSS)
    cc.cwnd = 100 * MSS
    cc.on_congestion_event(0.0, 100 * MSS)
    cc.on_ack(MSS, 0.0, 0.1, 70 * MSS)  # epoch starts at t = 0
    before = cc.cwnd
    # Far in the convex region W_cubic is huge; one window of ACKs grows at most 50 %.
    window = cc.cwnd
    for i in range(window // MSS):
        cc.on_ack(MSS, 60.0 + i * 1e-4, 0.1, window)
    assert cc.cwnd <= 1.5 * before + MSS
    assert cc.cwnd >= 1.3 * before


def test_cubic_reno_friendly_region() -> None:
    # Tiny RTT and small window: the Reno estimate W_est outgrows W_cubic (RFC 9438 §4.3).
    rtt = 0.001
    cc = Cubic(MSS)
    cc.cwnd = 10 * MSS
    cc.on_congestion_event(0.0, 10 * MSS)
    now = 0.0
    for _ in range(100):
        now = run_round(cc, now, rtt)
    # Expected: alpha_cubic = 3*0.3/1.7 segments per RTT until W_est reaches cwnd_prior
    # (10 segments), then 1 segment per RTT.
    alpha = 3 * (1 - BETA) / (1 + BETA)
    rounds_to_prior = (10 - 7) / alpha
    expected = 10 + (100 - rounds_to_prior)
    assert cc.epoch_start is not None and cc.w_cubic(now - cc.epoch_start) < 8
    assert abs(cc.cwnd / MSS - expected) <= 3
    assert cc.cwnd == int(cc.w_est) or abs(cc.cwnd - cc.w_est) < MSS


def test_cubic_rto() -> None:
    cc = Cubic(MSS)
    cc.cwnd = 100 * MSS
    cc.on_rto(0.0, 100 * MSS)
    assert cc.cwnd == MSS and cc.ssthresh == 70 * MSS  # RFC 9438 §4.8
    now = 0.0
    while cc.in_slow_start:
        now += 0.01
        cc.on_ack(MSS, now, 0.1, cc.cwnd)
    assert cc.cwnd == 70 * MSS and cc.epoch_start is None
    now += 0.01
    cc.on_ack(MSS, now, 0.1, cc.cwnd)
    # First CA stage after a timeout: K = 0 and W_max = cwnd at the start of the stage.
    assert cc.k == 0.0
    assert cc.w_max == pytest.approx(70 * MSS)
    assert cc.epoch_start == now
    # Repeated timeout of the same segment: cwnd to 1 MSS, ssthresh untouched.
    cc.on_rto(now + 1, 5 * MSS, first_timeout=False)
    assert cc.cwnd == MSS and cc.ssthresh == 70 * MSS


def test_cubic_recovery_exit_and_info() -> None:
    cc = Cubic(MSS)
    cc.cwnd = 50 * MSS
    cc.on_congestion_event(0.0, 50 * MSS)
    cc.cwnd = 10 * MSS  # PRR may have taken it lower
    cc.on_recovery_exit()
    assert cc.cwnd == 35 * MSS
    info = cc.state_info()
    assert info["tcpi_ca_name"] == "cubic-rfc9438"
    assert info["tcpi_snd_cwnd"] == 35 and info["tcpi_snd_ssthresh"] == 35
    assert info["cubic_w_max"] == 50


def test_ack_that_starts_recovery_does_not_grow_cwnd_first() -> None:
    """Linux tcp_ack runs tcp_fastretrans_alert before tcp_cong_control: the ACK that reveals
    the loss (here: acks 2 segments, SACKs 5 above a 3-segment hole) sets ssthresh from the
    window as it was, not from the window grown by the 2 newly acked segments."""
    peer = ScriptedPeer()
    lst = peer.listen()
    peer.send("S", 0, options=encode_options(mss=1000, sack_permitted=True))
    peer.expect("S.", 0, 1)
    peer.advance(0.05)
    peer.send(".", 1, 1)
    conn = lst.accept()
    assert conn is not None
    mss = conn.mss
    assert conn.cc.cwnd == 10 * mss
    conn.send(b"d" * (10 * mss), peer.now)
    assert len(peer.drain()) >= 1
    peer.advance(0.05)
    peer.send(".", 1, 1 + 2 * mss, options=encode_options(sack_blocks=[
        ((peer.local_isn + 1 + 5 * mss) & MASK, (peer.local_isn + 1 + 10 * mss) & MASK)]))
    assert conn.info()["tcpi_ca_state"] == 3                       # TCP_CA_Recovery
    # CUBIC beta 0.7 of the 10-segment window (the old order grew it by 7 first: 11.9).
    assert conn.cc.ssthresh == 7 * mss
