"""RttEstimator: RFC 6298 smoothing with Linux's RTO floor, damping and rounding."""

from __future__ import annotations

import pytest

from usertcp.tcp.rtt import RttEstimator


def test_initial_rto_before_samples() -> None:
    r = RttEstimator()
    assert r.srtt is None and r.min_rtt is None and r.latest_rtt is None
    assert r.rto == 1.0  # RFC 6298 §2.1
    assert r.timeout == 1.0
    info = r.as_info()
    assert info["tcpi_rto"] == 1_000_000
    assert info["tcpi_rtt"] == 0
    assert info["tcpi_rttvar"] == 250_000  # Linux: mdev_us starts at TCP_TIMEOUT_INIT
    assert info["tcpi_min_rtt"] == 0xFFFFFFFF


def test_first_sample_rfc6298_2_2() -> None:
    r = RttEstimator()
    r.on_sample(0.5)
    assert r.srtt == 0.5
    assert r.rttvar == 0.25
    assert r.rto == pytest.approx(1.5)  # SRTT + 4*RTTVAR = 3R when 4*RTTVAR > rto_min


def test_rto_min_floor_on_variance_term() -> None:
    # Linux: RTO = SRTT + max(4*RTTVAR, rto_min) -> a 100 ms path gives 300 ms, a 10 ms
    # path 210 ms (plain RFC 6298 with a 200 ms clamp would give 200 ms).
    r = RttEstimator()
    r.on_sample(0.1)
    assert r.rto == pytest.approx(0.3)
    r2 = RttEstimator()
    r2.on_sample(0.010)
    assert r2.rto == pytest.approx(0.210)
    for _ in range(50):
        r2.on_sample(0.010)
    assert r2.rto == pytest.approx(0.210)


def test_subsequent_samples_rfc6298_2_3() -> None:
    r = RttEstimator(rto_min=0.0, granularity=0.0)
    r.on_sample(1.0)
    r.on_sample(2.0)  # err = +1 -> RTTVAR = 3/4*0.5 + 1/4*1, SRTT = 7/8*1 + 1/8*2
    assert r.srtt == pytest.approx(1.125)
    assert r.rttvar == pytest.approx(0.625)
    assert r.rto == pytest.approx(1.125 + 4 * 0.625)
    assert r.latest_rtt == 2.0 and r.min_rtt == 1.0


def test_falling_rtt_is_damped_like_linux() -> None:
    r = RttEstimator(rto_min=0.0, granularity=0.0)
    r.on_sample(1.0)  # srtt 1, rttvar 0.5
    r.on_sample(0.2)  # err = -0.8, |err| - rttvar = 0.3 -> gain 1/32 instead of 1/4
    assert r.srtt == pytest.approx(0.9)
    assert r.rttvar == pytest.approx(0.5 + 0.3 / 32)
    # A small decrease (inside the deviation) still decays RTTVAR with gain 1/4.
    r2 = RttEstimator(rto_min=0.0, granularity=0.0)
    r2.on_sample(1.0)
    r2.on_sample(0.9)
    assert r2.rttvar == pytest.approx(0.5 + (0.1 - 0.5) / 4)


def test_variance_term_decays_once_per_round() -> None:
    r = RttEstimator(rto_min=0.0, granularity=0.0)
    r.on_sample(1.0)  # 4*var = 2.0, which is also the first round's maximum
    for _ in range(5):
        r.on_sample(1.0, round_done=False)
    # RTTVAR itself decays, but the RTO term holds the round's maximum (Linux rttvar_us).
    assert r.rttvar == pytest.approx(0.5 * 0.75**5)
    assert r.rto == pytest.approx(1.0 + 2.0)
    r.on_sample(1.0, round_done=True)  # closes the first round: its max was 2.0, no decay
    assert r.rto == pytest.approx(3.0)
    r.on_sample(1.0, round_done=True)  # this round's max is 4*RTTVAR: decay 1/4 towards it
    four_var = 4 * 0.5 * 0.75**7
    assert r.rttvar == pytest.approx(four_var / 4)
    assert r.rto == pytest.approx(1.0 + 2.0 - (2.0 - four_var) / 4)


def test_rto_rounded_up_to_granularity_and_clamped() -> None:
    r = RttEstimator(rto_min=0.0, granularity=0.001)
    r.on_sample(0.0001234)  # SRTT + max(G, 4*RTTVAR) = 0.00112 -> two 1 ms ticks
    assert r.rto == pytest.approx(0.002)
    r = RttEstimator(rto_min=0.0, granularity=0.001)
    r.on_sample(0.1003)  # 3R = 0.3009 -> 0.301
    assert r.rto == pytest.approx(0.301)
    big = RttEstimator()
    big.on_sample(100.0)
    assert big.rto == 120.0


def test_backoff_doubles_and_caps() -> None:
    r = RttEstimator()
    r.on_sample(0.1)
    timeouts = []
    for _ in range(12):
        timeouts.append(r.timeout)
        r.on_timeout()
    assert timeouts[:4] == pytest.approx([0.3, 0.6, 1.2, 2.4])
    assert max(timeouts) == 120.0
    assert r.backoff == 12
    assert r.as_info()["tcpi_backoff"] == 12
    assert r.as_info()["tcpi_rto"] == 120_000_000
    r.on_sample(0.1)  # a sample does not reset the backoff: the caller does (§5.7)
    assert r.backoff == 12
    r.reset_backoff()
    assert r.timeout == pytest.approx(0.3)


def test_as_info_microseconds() -> None:
    r = RttEstimator()
    r.on_sample(0.040)
    r.on_sample(0.020)
    info = r.as_info()
    assert r.srtt is not None and info["tcpi_rtt"] == round(r.srtt * 1e6)
    assert info["tcpi_rttvar"] == round(r.rttvar * 1e6)
    assert info["tcpi_min_rtt"] == 20_000
    assert info["tcpi_rto"] == round(r.rto * 1e6)
