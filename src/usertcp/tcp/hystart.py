"""Slow-start exit by delay: Linux CUBIC's HyStart and RFC 9406 HyStart++.

:class:`CubicParams` holds the tcp_cubic module parameters (``/sys/module/tcp_cubic/
parameters/*``), per stack. :class:`LinuxHystart` is the hybrid slow start of
net/ipv4/tcp_cubic.c (``bictcp_hystart_reset``, ``hystart_update``): an ACK train
stretching past half the minimum delay, or a round whose smallest RTT sample exceeds the
minimum by an eighth (clamped to 4..16 ms), ends slow start by setting ssthresh to cwnd.
:class:`HystartPlusPlus` is RFC 9406 for the RFC 9438 controller: on a delay increase it
enters Conservative Slow Start (CSS), which grows at a quarter of the rate for at most
``CSS_ROUNDS`` rounds, and goes back to slow start when the delay falls again.

Times are seconds as the caller gives them; Linux works in µs (tcp_mstamp), so the Linux
model converts at its boundary. Sequence positions are the connection's offsets (no wrap).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "HYSTART_ACK_TRAIN",
    "HYSTART_DELAY",
    "CubicParams",
    "HystartPlusPlus",
    "LinuxHystart",
]

# tcp_cubic.c: the two detection methods (hystart_detect bits).
HYSTART_ACK_TRAIN = 0x1
HYSTART_DELAY = 0x2
HYSTART_MIN_SAMPLES = 8          # RTT samples per round before the delay check
HYSTART_DELAY_MIN_US = 4000      # HYSTART_DELAY_THRESH clamp, µs
HYSTART_DELAY_MAX_US = 16000
_USEC_PER_MSEC = 1000


@dataclass(slots=True)
class CubicParams:
    """tcp_cubic's module parameters with Linux's defaults (module_param in tcp_cubic.c)."""

    fast_convergence: bool = True
    beta: int = 717                  # /1024: cwnd multiplier on a loss
    initial_ssthresh: int = 0        # packets; used only with hystart off (cubictcp_init)
    bic_scale: int = 41              # 0444 in Linux: read-only once loaded
    tcp_friendliness: bool = True
    hystart: bool = True
    hystart_detect: int = HYSTART_ACK_TRAIN | HYSTART_DELAY
    hystart_low_window: int = 16     # packets: no HyStart below this cwnd
    hystart_ack_delta_us: int = 2000

    def set(self, name: str, value: str) -> bool:
        """Write one parameter as ``echo VALUE > /sys/module/tcp_cubic/parameters/NAME`` does.
        False for an unknown name; PermissionError for a read-only one; ValueError for a value
        that is not an int (Linux param_set_int: EINVAL)."""
        if name == "bic_scale":
            raise PermissionError("bic_scale is read-only (mode 0444)")
        if name not in _WRITABLE:
            return False
        number = int(value.strip(), 0)
        if name in ("fast_convergence", "tcp_friendliness", "hystart"):
            setattr(self, name, number != 0)
        else:
            setattr(self, name, number)
        return True

    def get(self, name: str) -> int:
        """The parameter's value as ``cat`` shows it."""
        if name not in _WRITABLE and name != "bic_scale":
            raise KeyError(name)
        return int(getattr(self, name))


_WRITABLE = frozenset({"fast_convergence", "beta", "initial_ssthresh", "tcp_friendliness", "hystart",
                       "hystart_detect", "hystart_low_window", "hystart_ack_delta_us"})


class LinuxHystart:
    """The HyStart state of struct bictcp (found, round_start, end_seq, last_ack, curr_rtt,
    sample_cnt) and hystart_update(). ``update`` returns True when slow start must end (the
    caller sets ssthresh = cwnd, as Linux does)."""

    __slots__ = ("curr_rtt_us", "end_seq", "found", "last_ack_us", "round_start_us", "sample_cnt")

    def __init__(self) -> None:
        self.found = False
        self.round_start_us = 0
        self.last_ack_us = 0
        self.end_seq = -1           # before any round: the first update starts one
        self.curr_rtt_us = 0
        self.sample_cnt = 0

    def reset(self, now_us: int, snd_nxt: int) -> None:
        """bictcp_hystart_reset(): a new round ends when snd_una passes today's snd_nxt."""
        self.round_start_us = self.last_ack_us = now_us
        self.end_seq = snd_nxt
        self.curr_rtt_us = 0xFFFFFFFF
        self.sample_cnt = 0

    def restart(self, now_us: int, snd_nxt: int) -> None:
        """bictcp_reset() then bictcp_hystart_reset() (cubictcp_init, cubictcp_state on Loss)."""
        self.found = False
        self.reset(now_us, snd_nxt)

    def update(self, params: CubicParams, delay_us: int, delay_min_us: int, now_us: int,
               snd_una: int, snd_nxt: int, ack_delay_us: int, paced: bool) -> bool:
        """hystart_update(): ``ack_delay_us`` is hystart_ack_delay() (the TSO/GRO cushion),
        ``paced`` whether sk_pacing_status is not SK_PACING_NONE (fq or internal pacing)."""
        if snd_una > self.end_seq:
            self.reset(now_us, snd_nxt)
        detect = params.hystart_detect
        if detect & HYSTART_ACK_TRAIN and now_us - self.last_ack_us <= params.hystart_ack_delta_us:
            # ACK-train detection: ACKs still arrive closely spaced this long after the round
            # began, so the pipe is full. Pacing may have spread the train by RTT/2.
            self.last_ack_us = now_us
            threshold = delay_min_us + ack_delay_us
            if not paced:
                threshold >>= 1
            if now_us - self.round_start_us > threshold:
                self.found = True
        if detect & HYSTART_DELAY:
            # Delay detection: the smallest RTT of this round's first samples against the
            # connection's minimum plus an eighth, clamped to [4 ms, 16 ms].
            self.curr_rtt_us = min(self.curr_rtt_us, delay_us)
            if self.sample_cnt < HYSTART_MIN_SAMPLES:
                self.sample_cnt += 1
            else:
                thresh = min(max(delay_min_us >> 3, HYSTART_DELAY_MIN_US), HYSTART_DELAY_MAX_US)
                if self.curr_rtt_us > delay_min_us + thresh:
                    self.found = True
        return self.found


def hystart_ack_delay_us(pacing_rate: int, gso_max_size: int) -> int:
    """hystart_ack_delay(): time to send four GSO packets at the pacing rate, at most 1 ms
    (0 with no rate)."""
    if pacing_rate <= 0:
        return 0
    return min(_USEC_PER_MSEC, gso_max_size * 4 * 1_000_000 // pacing_rate)


# RFC 9406 §4.3 constants.
MIN_RTT_THRESH = 0.004
MAX_RTT_THRESH = 0.016
MIN_RTT_DIVISOR = 8
N_RTT_SAMPLE = 8
CSS_GROWTH_DIVISOR = 4
CSS_ROUNDS = 5
L_PACED = 8                      # segments per ACK when paced; infinity otherwise
INF = float("inf")


class HystartPlusPlus:
    """RFC 9406 HyStart++ (§4.2) for the initial slow start only (§4.2: "An implementation
    SHOULD use HyStart++ only for the initial slow start"). The caller reports RTT samples
    with :meth:`on_rtt` and asks :meth:`growth` how many bytes an ACK may add to cwnd; a
    return of ``None`` from growth means slow start is over (ssthresh = cwnd)."""

    __slots__ = ("css_baseline", "css_rounds", "current_min", "done", "in_css", "last_min",
                 "samples", "window_end")

    def __init__(self) -> None:
        self.last_min = INF        # lastRoundMinRTT
        self.current_min = INF     # currentRoundMinRTT
        self.samples = 0           # rttSampleCount
        self.window_end = -1       # the round ends when this offset is acked
        self.in_css = False
        self.css_baseline = INF    # cssBaselineMinRtt
        self.css_rounds = 0
        self.done = False          # HyStart++ finished (CA reached, or a loss ended it)

    def on_rtt(self, rtt: float, snd_una: int, snd_nxt: int) -> None:
        """§4.2: round bookkeeping and the delay checks, one RTT sample per ACK."""
        if self.done:
            return
        if snd_una > self.window_end:
            # A new round: the previous round's minimum becomes the reference.
            self.last_min = self.current_min
            self.current_min = INF
            self.samples = 0
            self.window_end = snd_nxt
            if self.in_css:
                self.css_rounds += 1
        self.current_min = min(self.current_min, rtt)
        self.samples += 1
        if self.samples < N_RTT_SAMPLE or self.current_min == INF:
            return
        if not self.in_css:
            if self.last_min == INF:
                return
            thresh = max(MIN_RTT_THRESH, min(self.last_min / MIN_RTT_DIVISOR, MAX_RTT_THRESH))
            if self.current_min >= self.last_min + thresh:
                self.in_css = True
                self.css_baseline = self.current_min
                self.css_rounds = 0
        elif self.current_min < self.css_baseline:
            # §4.2: the delay increase was spurious; back to standard slow start.
            self.in_css = False
            self.css_baseline = INF

    def growth(self, acked: int, mss: int, paced: bool) -> int | None:
        """Bytes this ACK adds in slow start (§4.2 "cwnd = cwnd + min(N, L * SMSS)", divided
        by CSS_GROWTH_DIVISOR in CSS), or None once CSS has lasted CSS_ROUNDS rounds: the
        caller then sets ssthresh = cwnd and continues in congestion avoidance."""
        if self.done:
            return acked
        if self.in_css and self.css_rounds >= CSS_ROUNDS:
            self.done = True
            self.in_css = False
            return None
        grow = min(acked, L_PACED * mss) if paced else acked
        return grow // CSS_GROWTH_DIVISOR if self.in_css else grow

    def on_congestion(self) -> None:
        """§4.2: a loss or ECN mark during slow start or CSS ends HyStart++."""
        self.done = True
        self.in_css = False
