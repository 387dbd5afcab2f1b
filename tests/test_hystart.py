"""HyStart: Linux CUBIC's hybrid slow start (tcp_cubic.c) and RFC 9406 HyStart++, with the
tcp_cubic module parameters as a drill script sets them."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from usertcp.drill.profile import CommandError, Environment, Unsupported, linux_config
from usertcp.tcp.config import StackConfig
from usertcp.tcp.congestion import INFINITE_SSTHRESH, Cubic, LinuxCubic, create_congestion_control
from usertcp.tcp.hystart import (
    CSS_GROWTH_DIVISOR,
    CSS_ROUNDS,
    HYSTART_ACK_TRAIN,
    HYSTART_DELAY,
    N_RTT_SAMPLE,
    CubicParams,
    HystartPlusPlus,
    hystart_ack_delay_us,
)

MSS = 1000


def _linux_cubic(detect: int, cwnd_pkts: int = 20) -> LinuxCubic:
    cc = LinuxCubic(MSS, cwnd_pkts * MSS, params=CubicParams(hystart_detect=detect))
    return cc


def _ack(cc: LinuxCubic | Cubic, rtt: float, una: int, nxt: int, now: float, *, paced: bool = False) -> None:
    """One ACK of two packets: the RTT sample first, then the window (Linux's order)."""
    cc.pkts_acked(rtt, una, nxt, now, 0, 0, paced)
    cc.on_ack(2 * MSS, now, rtt, nxt - una)


def test_delay_detection_exits_after_the_minimum_samples() -> None:
    # Minimum 200 ms; a round whose RTTs are all >= 240 ms exceeds 200 + 16 ms (the clamp):
    # the ninth sample of the round ends slow start with ssthresh = cwnd before that ACK.
    cc = _linux_cubic(HYSTART_DELAY, cwnd_pkts=10)
    _ack(cc, 0.200, 10_001, 10_001, 0.4)          # below hystart_low_window: only delay_min
    assert cc.delay_min == 200_000 and cc.cwnd == 12 * MSS
    cc.cwnd = 20 * MSS
    now, una = 0.64, 10_001
    for i in range(8):
        una += 2 * MSS
        _ack(cc, 0.240 + i / 1000, una, 30_001, now + i / 1000)
        assert cc.ssthresh == INFINITE_SSTHRESH
    assert cc.cwnd == 36 * MSS
    _ack(cc, 0.248, una + 2 * MSS, 30_001, now + 0.008)
    assert cc.ssthresh == 36 * MSS and cc.cwnd == 36 * MSS
    assert cc.hystart.found


def test_delay_detection_takes_a_lower_minimum_into_account() -> None:
    # A sample that lowers delay_min lowers curr_rtt too (b344579ca847): no spurious exit.
    cc = _linux_cubic(HYSTART_DELAY)
    cc.pkts_acked(0.200, 10_001, 28_001, 0.4, 0, 0, False)
    una = 10_001
    for i in range(8):
        una += 2 * MSS
        _ack(cc, 0.200 + i / 1000, una, 30_001, 0.6 + i / 1000)
    _ack(cc, 0.029, una + 2 * MSS, 30_001, 0.609)
    assert cc.delay_min == 29_000
    assert cc.ssthresh == INFINITE_SSTHRESH and not cc.hystart.found


def test_ack_train_detection_when_acks_keep_coming_past_half_the_delay() -> None:
    # ACKs 1 ms apart (within hystart_ack_delta_us) for more than delay_min/2 = 10 ms.
    cc = _linux_cubic(HYSTART_ACK_TRAIN)
    cc.pkts_acked(0.020, 1, 20_001, 0.0, 0, 0, False)        # delay_min 20 ms, round starts
    found_at = None
    for i in range(1, 30):
        cc.pkts_acked(0.020, 1 + i, 20_001, i / 1000, 0, 0, False)
        if cc.hystart.found:
            found_at = i
            break
    assert found_at == 11              # 11 ms > 10 ms
    assert cc.ssthresh == cc.cwnd


def test_ack_train_threshold_is_not_halved_when_paced_and_widens_by_the_tso_cushion() -> None:
    assert hystart_ack_delay_us(0, 65536) == 0
    assert hystart_ack_delay_us(10**12, 65536) == 0              # tiny at a high rate
    assert hystart_ack_delay_us(1_000_000, 65536) == 1000        # capped at 1 ms
    cc = _linux_cubic(HYSTART_ACK_TRAIN)
    cc.pkts_acked(0.020, 1, 20_001, 0.0, 0, 0, True)
    for i in range(1, 21):
        cc.pkts_acked(0.020, 1 + i, 20_001, i / 1000, 0, 0, True)
    assert not cc.hystart.found        # 20 ms is not > 20 ms
    cc.pkts_acked(0.020, 30, 20_001, 0.021, 0, 0, True)
    assert cc.hystart.found


def test_no_hystart_below_the_low_window_or_when_turned_off() -> None:
    cc = LinuxCubic(MSS, 15 * MSS, params=CubicParams())
    for i in range(40):
        cc.pkts_acked(0.5, 2 + i, 10**6, i / 10000, 0, 0, False)
    assert not cc.hystart.found
    off = LinuxCubic(MSS, 20 * MSS, params=CubicParams(hystart=False, initial_ssthresh=30))
    assert off.ssthresh == 30 * MSS                       # cubictcp_init with hystart off
    for i in range(40):
        off.pkts_acked(0.5 + i, 2 + i, 10**6, i / 10000, 0, 0, False)
    assert not off.hystart.found
    assert LinuxCubic(MSS, params=CubicParams(initial_ssthresh=30)).ssthresh == INFINITE_SSTHRESH


def test_beta_fast_convergence_and_friendliness_parameters() -> None:
    cc = LinuxCubic(MSS, 100 * MSS, params=CubicParams(beta=512, fast_convergence=False))
    cc.last_max_cwnd = 200
    cc.on_congestion_event(0.0, 100 * MSS)
    assert cc.ssthresh == 50 * MSS and cc.last_max_cwnd == 100       # no fast convergence
    fc = LinuxCubic(MSS, 100 * MSS)
    fc.last_max_cwnd = 200
    fc.on_congestion_event(0.0, 100 * MSS)
    assert fc.ssthresh == 70 * MSS and fc.last_max_cwnd == 100 * (1024 + 717) // 2048


def test_module_parameters_from_a_drill_command(tmp_path: Path) -> None:
    env = Environment(linux_config(), lambda: None, tmp_path)
    env.run("echo 1 > /sys/module/tcp_cubic/parameters/hystart_detect")
    env.run("echo 0 > /sys/module/tcp_cubic/parameters/fast_convergence")
    assert env.config.cubic.hystart_detect == 1 and not env.config.cubic.fast_convergence
    cc = create_congestion_control("cubic", MSS, config=env.config)
    assert isinstance(cc, LinuxCubic) and cc.params is env.config.cubic     # read live, as Linux
    with pytest.raises(CommandError):
        env.run("echo 50 > /sys/module/tcp_cubic/parameters/bic_scale")    # 0444
    with pytest.raises(CommandError):
        env.run("echo x > /sys/module/tcp_cubic/parameters/beta")
    with pytest.raises(Unsupported):
        env.run("echo 1 > /sys/module/tcp_cubic/parameters/no_such_param")
    with pytest.raises(Unsupported):
        env.run("echo 1 > /sys/module/tcp_bbr/parameters/anything")
    env.run("echo 3 > /sys/module/tcp_dctcp/parameters/dctcp_shift_g")
    assert env.config.dctcp_shift_g == 3


def test_stack_config_module_parameter_api() -> None:
    cfg = StackConfig()
    assert cfg.apply_module_param("tcp_cubic", "hystart_low_window", "32")
    assert cfg.cubic.get("hystart_low_window") == 32
    assert cfg.cubic.get("bic_scale") == 41
    assert not cfg.apply_module_param("tcp_cubic", "nope", "1")
    with pytest.raises(KeyError):
        cfg.cubic.get("nope")


# -- RFC 9406 HyStart++ ---------------------------------------------------------------------


def _round(hs: HystartPlusPlus, rtt: float, start: int, n: int = N_RTT_SAMPLE) -> int:
    """One round of ``n`` samples at ``rtt``; the round ends at ``start + n``."""
    for i in range(n):
        hs.on_rtt(rtt, start + i + 1, start + 2 * n)
    return start + 2 * n


@settings(max_examples=30, deadline=None)
@given(base=st.floats(0.001, 1.0), jitter=st.lists(st.floats(0.0, 0.99), min_size=40, max_size=40))
def test_hystartpp_stays_in_slow_start_while_delay_holds(base: float, jitter: list[float]) -> None:
    # Samples within [base, base + thresh): never currentRoundMinRTT >= last + RttThresh.
    hs = HystartPlusPlus()
    thresh = max(0.004, min(base / 8, 0.016))
    pos = 0
    for j in jitter:
        pos = _round(hs, base + j * thresh, pos)
        assert not hs.in_css
        assert hs.growth(3 * 1460, 1460, False) == 3 * 1460


@settings(max_examples=30, deadline=None)
@given(base=st.floats(0.001, 1.0), acked=st.integers(1, 100_000))
def test_hystartpp_enters_css_on_a_delay_rise_and_grows_a_quarter(base: float, acked: int) -> None:
    hs = HystartPlusPlus()
    thresh = max(0.004, min(base / 8, 0.016))
    pos = _round(hs, base, 0)
    pos = _round(hs, base + thresh * 1.01, pos)
    assert hs.in_css and hs.css_baseline == pytest.approx(base + thresh * 1.01)
    assert hs.growth(acked, 1460, False) == acked // CSS_GROWTH_DIVISOR
    assert hs.growth(acked, 1460, True) == min(acked, 8 * 1460) // CSS_GROWTH_DIVISOR


def test_hystartpp_spurious_css_goes_back_to_slow_start() -> None:
    hs = HystartPlusPlus()
    pos = _round(hs, 0.100, 0)
    pos = _round(hs, 0.120, pos)
    assert hs.in_css
    _round(hs, 0.105, pos)                     # below the CSS baseline (120 ms)
    assert not hs.in_css and hs.growth(1000, 1000, False) == 1000


def test_hystartpp_css_ends_slow_start_after_css_rounds() -> None:
    hs = HystartPlusPlus()
    pos = _round(hs, 0.100, 0)
    pos = _round(hs, 0.120, pos)
    for _ in range(CSS_ROUNDS):
        assert hs.growth(1000, 1000, False) == 250
        pos = _round(hs, 0.125, pos)
    assert hs.growth(1000, 1000, False) is None and hs.done
    assert hs.growth(1000, 1000, False) == 1000           # over: plain behaviour


def test_rfc9438_cubic_uses_hystartpp_and_a_loss_ends_it() -> None:
    cc = Cubic(MSS, 40 * MSS)
    assert cc.hystart is not None
    una = 1
    for rtt in (0.100, 0.130):
        for _ in range(N_RTT_SAMPLE):
            una += 2 * MSS
            _ack(cc, rtt, una, una + 60 * MSS, 1.0)
        una += 100 * MSS                  # past the round's end
    assert cc.hystart.in_css
    before = cc.cwnd
    _ack(cc, 0.130, una + 2 * MSS, una + 80 * MSS, 1.1)
    assert cc.cwnd == before + 2 * MSS // CSS_GROWTH_DIVISOR
    assert cc.ssthresh == INFINITE_SSTHRESH
    cc.on_congestion_event(1.2, cc.cwnd)
    assert cc.hystart.done
    plain = create_congestion_control("cubic-rfc9438", MSS, config=StackConfig(hystart_pp=False))
    assert isinstance(plain, Cubic) and plain.hystart is None
