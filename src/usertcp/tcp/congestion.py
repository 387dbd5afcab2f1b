"""Congestion control: NewReno (RFC 5681 / RFC 6582), CUBIC (RFC 9438) and DCTCP (RFC 8257),
byte-counted.

All windows are in bytes; CUBIC's window function is defined in segments, so it is
evaluated in segments and converted with the current MSS.  Time only comes from the
``now`` argument (seconds).  Loss recovery itself (which segments to retransmit,
pipe/PRR during recovery) belongs to the caller: these classes only decide cwnd and
ssthresh at the points the caller reports.
"""

from __future__ import annotations

import math
from typing import ClassVar, Final

from usertcp.tcp.config import StackConfig
from usertcp.tcp.hystart import CubicParams, HystartPlusPlus, LinuxHystart, hystart_ack_delay_us

__all__ = [
    "AVAILABLE",
    "INFINITE_SSTHRESH",
    "CongestionControl",
    "Cubic",
    "Dctcp",
    "LinuxCubic",
    "NewReno",
    "congestion_needs_ecn",
    "create_congestion_control",
]

# "Arbitrarily high" initial ssthresh (RFC 5681 §3.1); Linux TCP_INFINITE_SSTHRESH role.
INFINITE_SSTHRESH: Final = 1 << 62


class CongestionControl:
    """Base class: slow start and the shared bookkeeping; subclasses do avoidance and decrease."""

    name: ClassVar[str] = "base"
    # Linux TCP_CONG_NEEDS_ECN (tcp_ca_needs_ecn): the controller asks for ECN whatever
    # tcp_ecn says, and every packet of an ECN connection is ECT (tcp_ecn_send).
    needs_ecn: ClassVar[bool] = False

    __slots__ = ("_ca_acked", "cwnd", "cwnd_limited", "cwnd_stamp", "cwnd_usage_seq", "cwnd_used", "max_out",
                 "mss", "ssthresh")

    def __init__(self, mss: int, initial_window: int | None = None) -> None:
        if mss <= 0:
            raise ValueError("mss must be positive")
        self.mss = mss
        # RFC 6928 IW10; Linux uses TCP_INIT_CWND = 10 segments regardless of MSS.
        self.cwnd: int = 10 * mss if initial_window is None else initial_window
        self.ssthresh: int = INFINITE_SSTHRESH
        self._ca_acked = 0  # bytes acked in congestion avoidance not yet turned into cwnd
        # Linux tcp_cwnd_validate() state: was the last flight cwnd-limited, the most bytes
        # outstanding in it (max_packets_out), and where that flight ends (cwnd_usage_seq).
        self.cwnd_limited = False
        self.max_out = 0
        self.cwnd_usage_seq = 0
        # RFC 2861 cwnd validation (Linux tcp_cwnd_application_limited): the most bytes out
        # while the window was not used (snd_cwnd_used), and when cwnd last grew or was used
        # (snd_cwnd_stamp; negative: not yet, tcp_init_transfer sets it at the first use).
        self.cwnd_used = 0
        self.cwnd_stamp = -1.0

    # -- helpers -----------------------------------------------------------------------

    @property
    def in_slow_start(self) -> bool:
        # RFC 5681 §3.1: slow start while cwnd < ssthresh.
        return self.cwnd < self.ssthresh

    def validate(self, snd_una: int, snd_nxt: int, out: int, limited: bool) -> None:
        """Linux tcp_cwnd_validate(), after a transmission: remember whether this flight
        was cwnd-limited, else the most bytes it had outstanding (``out``, packets_out)."""
        if snd_una >= self.cwnd_usage_seq or limited or (not self.cwnd_limited and out > self.max_out):
            self.cwnd_limited = limited
            self.max_out = out
            self.cwnd_usage_seq = snd_nxt

    def is_cwnd_limited(self) -> bool:
        """Linux tcp_is_cwnd_limited(): grow cwnd only when the sender used it, and in slow
        start while cwnd is below twice the largest flight (RFC 7661's intent)."""
        if self.cwnd_limited:
            return True
        if self.in_slow_start:
            return self.cwnd < 2 * self.max_out
        return False

    def note_cong_avoid(self, now: float) -> None:
        """Linux tcp_cong_avoid(): an ACK that may raise cwnd stamps it (snd_cwnd_stamp),
        whether or not the window was used."""
        self.cwnd_stamp = now

    def validate_use(self, now: float, out: int, rto: float, *, app_limited_check: bool,
                     may_shrink: bool, init_window: int) -> None:
        """The rest of Linux tcp_cwnd_validate() after a transmission: a used window is fresh;
        else remember the most bytes out, and with tcp_slow_start_after_idle, once the window
        went unused for an RTO, shrink it halfway to what was used (RFC 2861 §3,
        tcp_cwnd_application_limited): only in the Open state and when the application is not
        held by its send buffer (``may_shrink``), never below the initial window."""
        if self.cwnd_stamp < 0:
            self.cwnd_stamp = now
        if self.is_cwnd_limited():
            self.cwnd_used = 0
            self.cwnd_stamp = now
            return
        if out > self.cwnd_used:
            self.cwnd_used = out
        if not app_limited_check or now - self.cwnd_stamp < rto:
            return
        if may_shrink:
            mss = self.mss
            cwnd = self.cwnd // mss
            used = max(-(-self.cwnd_used // mss), init_window // mss)
            if used < cwnd:
                self.ssthresh = max(self.ssthresh, ((cwnd >> 1) + (cwnd >> 2)) * mss)  # tcp_current_ssthresh
                self.cwnd = ((cwnd + used) >> 1) * mss
            self.cwnd_used = 0
        self.cwnd_stamp = now

    def restart_after_idle(self, idle: float, rto: float, reducing: bool, now: float = -1.0) -> None:
        """Linux tcp_cwnd_restart() (RFC 2861/7661): after ``idle`` seconds without sending
        data, halve cwnd once per RTO idle, down to the initial window at most."""
        self.cwnd_used = 0
        if now >= 0:
            self.cwnd_stamp = now
        mss = self.mss
        restart = min(10 * mss, self.cwnd)          # tcp_init_cwnd(): TCP_INIT_CWND
        if not reducing:                             # tcp_current_ssthresh()
            segs = self.cwnd // mss
            self.ssthresh = max(self.ssthresh, ((segs >> 1) + (segs >> 2)) * mss)
        cwnd = self.cwnd
        idle -= rto
        while idle > 0 and cwnd > restart:
            cwnd = (cwnd // mss >> 1) * mss
            idle -= rto
        self.cwnd = max(cwnd, restart)
        self._ca_acked = 0

    def on_tx_start(self, idle: float, now: float) -> None:
        """Sending restarts with nothing in flight after ``idle`` s (CA_EVENT_TX_START)."""

    def set_initial_window(self, packets: int) -> None:
        """tcp_init_transfer(): the route's initcwnd (tcp_init_cwnd), in packets."""
        if packets > 0:
            self.cwnd = packets * self.mss

    def add_packets(self, packets: int) -> None:
        """cwnd +/- whole packets: an MTU probe counts as two (tcp_mtu_probe takes one back
        when it is sent, tcp_fastretrans_alert returns it when the probe failed)."""
        self.cwnd = max(self.cwnd + packets * self.mss, self.mss)

    def mtu_probe_rescale(self, old_mtu: int, probe_mtu: int) -> None:
        """tcp_mtup_probe_success(): the window keeps its bytes in the larger packets
        (cwnd * old MTU / probe MTU, in packets); ssthresh becomes tcp_current_ssthresh()."""
        pkts = max(self.cwnd // self.mss * old_mtu // max(probe_mtu, 1), 1)
        self.cwnd = pkts * self.mss
        self._ca_acked = 0
        if self.ssthresh < INFINITE_SSTHRESH:
            self.ssthresh = max(self.ssthresh, ((pkts >> 1) + (pkts >> 2)) * self.mss)

    def pkts_acked(self, rtt: float, snd_una: int, snd_nxt: int, now: float, pacing_rate: int,
                   gso_max_size: int, paced: bool) -> None:
        """An ACK that cumulatively acked data gave an RTT sample (Linux ca_ops->pkts_acked,
        called from tcp_clean_rtx_queue before cong_avoid): ``rtt`` is the sample of the most
        recently sent packet it acked (ca_rtt_us), ``snd_una``/``snd_nxt`` after the ACK,
        ``pacing_rate`` sk_pacing_rate in bytes/s, ``paced`` whether packets are paced (fq
        or TCP's internal pacing: sk_pacing_status)."""

    def _loss_ssthresh(self, in_flight: int) -> int:
        # RFC 5681 §3.1 eq. (4): max(FlightSize / 2, 2*SMSS).
        return max(in_flight // 2, 2 * self.mss)

    def _slow_start(self, acked: int) -> int:
        """Grow by the bytes acked, up to ssthresh; return what is left for avoidance.

        RFC 5681 §3.1 caps growth at SMSS per ACK (or L*SMSS with RFC 3465); Linux's
        tcp_slow_start() grows by every acked segment, which we follow (no L limit).
        """
        room = self.ssthresh - self.cwnd
        grow = min(acked, room)
        self.cwnd += grow
        return acked - grow

    def _reno_avoid(self, acked: int) -> None:
        # RFC 5681 §3.1 byte counting (RFC 3465 §2.1): one SMSS per cwnd bytes acked,
        # the same as Linux tcp_cong_avoid_ai() with w = cwnd.
        self._ca_acked += acked
        if self._ca_acked >= self.cwnd:
            inc = self._ca_acked // self.cwnd
            self._ca_acked -= inc * self.cwnd
            self.cwnd += inc * self.mss

    def _rescale(self, num: int, den: int) -> None:
        """Hook for subclasses: rescale private windows by num/den on an MSS change."""

    # -- interface used by the connection ----------------------------------------------

    def set_mss(self, mss: int) -> None:
        """Change the MSS keeping the windows constant in *segments* (Linux counts segments)."""
        if mss <= 0:
            raise ValueError("mss must be positive")
        if mss == self.mss:
            return
        old = self.mss
        self.cwnd = max(self.cwnd * mss // old, mss)
        if self.ssthresh < INFINITE_SSTHRESH:
            self.ssthresh = max(self.ssthresh * mss // old, 2 * mss)
        self._ca_acked = self._ca_acked * mss // old
        self._rescale(mss, old)
        self.mss = mss

    def on_ack(
        self, acked: int, now: float, rtt: float | None, in_flight: int, *, app_limited: bool = False
    ) -> None:
        """An ACK advanced snd_una by ``acked`` bytes outside loss recovery.

        ``app_limited`` (the sender did not fill cwnd) freezes cwnd: RFC 7661 / RFC 9438
        §5.8, Linux tcp_is_cwnd_limited().
        """
        if acked <= 0 or app_limited:
            return
        if self.in_slow_start:
            acked = self._slow_start(acked)
            if acked <= 0:
                return
        self._avoid(acked, now, rtt)

    def _avoid(self, acked: int, now: float, rtt: float | None) -> None:
        raise NotImplementedError

    def on_congestion_event(self, now: float, in_flight: int) -> None:
        """Loss detected by dupacks/SACK: entering fast recovery."""
        raise NotImplementedError

    def on_ecn_echo(self, now: float, in_flight: int) -> None:
        """An ECN echo starts a reduction (Linux tcp_enter_cwr calls the same ssthresh() as a
        loss does): RFC 3168 §6.1.2 treats it as a loss for the window."""
        self.on_congestion_event(now, in_flight)

    def on_loss_in_cwr(self, now: float, in_flight: int) -> None:
        """A loss found while an ECN reduction is under way: Linux keeps that reduction
        (tcp_enter_recovery skips tcp_init_cwnd_reduction in CWR); only DCTCP reacts."""

    def on_delivered_ce(self, count: int) -> None:
        """Accurate ECN (RFC 9768) reported ``count`` more CE-marked packets delivered (Linux
        tcp_count_delivered_ce from tcp_accecn_process); called before ``on_ack_event``."""

    def on_ack_event(self, delivered: int, ece: bool, snd_una: int, snd_nxt: int) -> None:
        """Every ACK that advanced or SACKed data (Linux in_ack_event): ``delivered`` is the
        connection's running count of delivered packets (tp->delivered), ``ece`` whether the
        ACK echoed congestion. Only controllers that measure the marking fraction use it."""

    def on_recovery_exit(self) -> None:
        """Recovery ended by a full ACK: deflate to ssthresh (RFC 6582 §3.2 step 5)."""
        # Option (2) of the RFC, which is what Linux's tcp_end_cwnd_reduction() does.
        if self.ssthresh < INFINITE_SSTHRESH:
            self.cwnd = self.ssthresh
        self._ca_acked = 0

    def on_rto(self, now: float, in_flight: int, *, first_timeout: bool = True) -> None:
        """Retransmission timer expired.

        ssthresh is only recomputed for the first timeout of a segment (RFC 5681 §3.1:
        "has not yet been resent by way of the retransmission timer"); cwnd becomes the
        loss window, 1 SMSS, in every case.
        """
        raise NotImplementedError

    def state_info(self) -> dict[str, int | str]:
        """tcp_info-like fields: windows in segments, as Linux reports them."""
        initial_ss = self.ssthresh >= INFINITE_SSTHRESH
        return {
            "tcpi_ca_name": self.name,
            "tcpi_snd_cwnd": self.cwnd // self.mss,
            # Linux reports 0 while still in the initial slow start.
            "tcpi_snd_ssthresh": 0 if initial_ss else self.ssthresh // self.mss,
            "cwnd_bytes": self.cwnd,
            "ssthresh_bytes": self.ssthresh,
        }


class NewReno(CongestionControl):
    """Reno/NewReno window management (RFC 5681 §3, RFC 6582); Linux's "reno"."""

    name: ClassVar[str] = "reno"

    __slots__ = ()

    def _avoid(self, acked: int, now: float, rtt: float | None) -> None:
        self._reno_avoid(acked)

    def on_congestion_event(self, now: float, in_flight: int) -> None:
        # RFC 5681 §3.2 step 2 / RFC 6675 §5: ssthresh = max(FlightSize/2, 2*SMSS); the
        # caller's recovery (pipe / PRR) governs sending, cwnd is set to the target.
        self.ssthresh = self._loss_ssthresh(in_flight)
        self.cwnd = self.ssthresh
        self._ca_acked = 0

    def on_rto(self, now: float, in_flight: int, *, first_timeout: bool = True) -> None:
        if first_timeout:
            self.ssthresh = self._loss_ssthresh(in_flight)
        self.cwnd = self.mss  # loss window, RFC 5681 §3.1
        self._ca_acked = 0


class Cubic(CongestionControl):
    """CUBIC (RFC 9438), with fast convergence (§4.7) and the Reno-friendly region (§4.3).

    Internal windows (w_max, cwnd_epoch, w_est, cwnd_prior) are floats in bytes; the
    cubic function itself is evaluated in segments as the RFC defines it.
    """

    name: ClassVar[str] = "cubic-rfc9438"

    C: ClassVar[float] = 0.4  # RFC 9438 §5.1
    BETA: ClassVar[float] = 0.7  # RFC 9438 §4.6
    # RFC 9438 §4.3: alpha_cubic = 3 * (1 - beta) / (1 + beta).
    ALPHA: ClassVar[float] = 3 * (1 - 0.7) / (1 + 0.7)

    __slots__ = (
        "_after_rto",
        "_frac",
        "_paced",
        "cwnd_epoch",
        "cwnd_prior",
        "epoch_start",
        "fast_convergence",
        "hystart",
        "k",
        "w_est",
        "w_max",
    )

    def __init__(self, mss: int, initial_window: int | None = None, *, fast_convergence: bool = True,
                 hystart: bool = True) -> None:
        super().__init__(mss, initial_window)
        self.fast_convergence = fast_convergence
        # RFC 9438 §4.10: slow start MAY use HyStart++ (RFC 9406); only the initial one does.
        self.hystart: HystartPlusPlus | None = HystartPlusPlus() if hystart else None
        self._paced = False
        self.w_max: float = 0.0  # bytes; 0 = no congestion event yet
        self.cwnd_prior: float = 0.0  # cwnd just before the last reduction (§4.3)
        self.epoch_start: float | None = None  # t_epoch (§4.2); None until first CA ACK
        self.cwnd_epoch: float = 0.0
        self.k: float = 0.0  # seconds
        self.w_est: float = 0.0  # bytes
        self._after_rto = False
        self._frac = 0.0  # sub-byte remainder of cwnd growth

    def _rescale(self, num: int, den: int) -> None:
        f = num / den
        self.w_max *= f
        self.cwnd_prior *= f
        self.cwnd_epoch *= f
        self.w_est *= f

    def pkts_acked(self, rtt: float, snd_una: int, snd_nxt: int, now: float, pacing_rate: int,
                   gso_max_size: int, paced: bool) -> None:
        # RFC 9406 §4.2: one RTT sample per ACK feeds the round's minimum.
        self._paced = paced
        if self.hystart is not None and self.in_slow_start:
            self.hystart.on_rtt(rtt, snd_una, snd_nxt)

    def on_ack(
        self, acked: int, now: float, rtt: float | None, in_flight: int, *, app_limited: bool = False
    ) -> None:
        hs = self.hystart
        if hs is None or hs.done or not self.in_slow_start or acked <= 0 or app_limited:
            super().on_ack(acked, now, rtt, in_flight, app_limited=app_limited)
            return
        grow = hs.growth(acked, self.mss, self._paced)
        if grow is None:
            # RFC 9406 §4.2: CSS_ROUNDS rounds of CSS: ssthresh = cwnd, on to avoidance.
            self.ssthresh = self.cwnd
            self._avoid(acked, now, rtt)
            return
        self.cwnd += min(grow, self.ssthresh - self.cwnd)

    def w_cubic(self, t: float) -> float:
        """RFC 9438 §4.2 eq. (1), in segments: C*(t-K)^3 + W_max, t seconds since t_epoch."""
        return self.C * (t - self.k) ** 3 + self.w_max / self.mss

    def _start_epoch(self, now: float) -> None:
        # §4.2: the first ACK of a congestion-avoidance stage starts the epoch.
        self.epoch_start = now
        self.cwnd_epoch = float(self.cwnd)
        self.w_est = float(self.cwnd)  # §4.3: W_est = cwnd_epoch at the epoch start
        self._frac = 0.0
        if self._after_rto or self.w_max <= self.cwnd_epoch:
            # §4.8: first CA stage after a timeout uses K = 0, W_max = cwnd_epoch; the same
            # when no reduction preceded this stage (e.g. slow start ended at ssthresh).
            self.k = 0.0
            self.w_max = self.cwnd_epoch
            self._after_rto = False
        else:
            # §4.2 eq. (2): K = cbrt((W_max - cwnd_epoch) / C), in segments.
            self.k = math.cbrt((self.w_max - self.cwnd_epoch) / self.mss / self.C)

    def _avoid(self, acked: int, now: float, rtt: float | None) -> None:
        if self.epoch_start is None:
            self._start_epoch(now)
        assert self.epoch_start is not None
        t = now - self.epoch_start
        mss = self.mss
        cwnd = float(self.cwnd)

        # §4.3 Reno-friendly estimate: W_est += alpha * segments_acked / cwnd (segments);
        # alpha becomes 1 once W_est reaches cwnd_prior.
        alpha = 1.0 if self.w_est >= self.cwnd_prior else self.ALPHA
        self.w_est += alpha * acked * mss / cwnd

        if self.w_cubic(t) * mss < self.w_est:
            # Reno-friendly region: cwnd = W_est.
            new = max(self.w_est, cwnd)
            self._frac = 0.0
        else:
            # §4.4/§4.5 concave and convex regions: aim at W_cubic(t + RTT) clamped to
            # [cwnd, 1.5*cwnd]; grow by (target - cwnd)/cwnd per segment acked.
            rtt_s = rtt if rtt is not None else 0.0
            target = min(max(self.w_cubic(t + rtt_s) * mss, cwnd), 1.5 * cwnd)
            new = cwnd + self._frac + (target - cwnd) * acked / cwnd
        whole = math.floor(new)
        self._frac = new - whole
        self.cwnd = max(int(whole), self.cwnd)

    def _reduce(self, in_flight: int) -> None:
        if self.hystart is not None:
            self.hystart.on_congestion()       # RFC 9406 §4.2: a loss ends HyStart++
        cwnd = float(self.cwnd)
        # §4.7 fast convergence: if this W_max is below the previous one, release bandwidth.
        if self.fast_convergence and cwnd < self.w_max:
            self.w_max = cwnd * (1 + self.BETA) / 2
        else:
            self.w_max = cwnd
        self.cwnd_prior = cwnd
        # §4.6: ssthresh = flight_size * beta, at least 2 SMSS.
        self.ssthresh = max(int(in_flight * self.BETA + 1e-6), 2 * self.mss)
        self.epoch_start = None
        self._ca_acked = 0
        self._frac = 0.0

    def on_congestion_event(self, now: float, in_flight: int) -> None:
        self._reduce(in_flight)
        self.cwnd = self.ssthresh  # §4.6: cwnd = max(ssthresh, 2)
        self._after_rto = False

    def on_rto(self, now: float, in_flight: int, *, first_timeout: bool = True) -> None:
        # §4.8: follow Reno for cwnd (loss window) but set ssthresh with beta_cubic.
        if first_timeout:
            self._reduce(in_flight)
        self.epoch_start = None
        self._after_rto = True
        self.cwnd = self.mss

    def state_info(self) -> dict[str, int | str]:
        info = super().state_info()
        info["cubic_w_max"] = int(self.w_max) // self.mss
        info["cubic_k_ms"] = round(self.k * 1000)
        return info


# Linux tcp_cubic.c constants: BICTCP_BETA_SCALE, HZ 1000 (beta and bic_scale are
# module parameters: CubicParams).
_BETA_SCALE: Final = 1024
_HZ: Final = 1000


def _icbrt(a: int) -> int:
    """Integer cube root (Linux cubic_root() approximates it within 0.2 %)."""
    x = round(a ** (1 / 3)) if a else 0
    while x ** 3 > a:
        x -= 1
    while (x + 1) ** 3 <= a:
        x += 1
    return x


class LinuxCubic(CongestionControl):
    """CUBIC as Linux's tcp_cubic.c computes it, in packets and jiffies (HZ=1000):
    bictcp_update() sets ``cnt`` (ACKed packets per cwnd increment) from the cubic curve
    and the TCP-friendly estimate, tcp_cong_avoid_ai() applies it; ssthresh is
    cwnd * 717/1024 (cubictcp_recalc_ssthresh); an RTO resets the state
    (cubictcp_state on TCP_CA_Loss), so growth restarts at 5 % per RTT."""

    name: ClassVar[str] = "cubic"

    __slots__ = ("ack_cnt", "acked_rem", "beta_scale", "bic_k", "cnt", "cube_factor", "cube_rtt_scale",
                 "cwnd_cnt", "delay_min", "epoch_start", "hystart", "last_cwnd", "last_max_cwnd",
                 "last_time", "origin", "params", "tcp_cwnd")

    def __init__(self, mss: int, initial_window: int | None = None, *,
                 params: CubicParams | None = None) -> None:
        super().__init__(mss, initial_window)
        self.params = params if params is not None else CubicParams()
        p = self.params
        # cubictcp_register(): the scales are fixed when the module loads.
        self.beta_scale = 8 * (_BETA_SCALE + p.beta) // 3 // max(_BETA_SCALE - p.beta, 1)
        self.cube_rtt_scale = p.bic_scale * 10
        self.cube_factor = (1 << 40) // self.cube_rtt_scale
        self.cwnd_cnt = 0          # tp->snd_cwnd_cnt
        self.acked_rem = 0         # bytes acked short of a whole packet
        self.hystart = LinuxHystart()
        self._reset()
        if not p.hystart and p.initial_ssthresh:
            self.ssthresh = p.initial_ssthresh * mss        # cubictcp_init()

    def _reset(self) -> None:
        """bictcp_reset()."""
        self.cnt = 0
        self.last_max_cwnd = 0
        self.last_cwnd = 0
        self.last_time = 0
        self.origin = 0            # bic_origin_point
        self.bic_k = 0             # in 1/1024 s
        self.delay_min = 0         # µs
        self.epoch_start = -1      # jiffies; -1: no epoch (Linux 0)
        self.ack_cnt = 0
        self.tcp_cwnd = 0

    def pkts_acked(self, rtt: float, snd_una: int, snd_nxt: int, now: float, pacing_rate: int,
                   gso_max_size: int, paced: bool) -> None:
        """cubictcp_acked(): track the minimum delay and run HyStart in slow start."""
        jiffies = int(now * _HZ)
        if self.epoch_start >= 0 and jiffies - self.epoch_start < _HZ:
            return                 # discard delay samples right after a reduction
        delay = max(int(rtt * 1e6), 1)
        if self.delay_min == 0 or self.delay_min > delay:
            self.delay_min = delay
        p = self.params
        mss = self.mss
        if (not self.hystart.found and self.in_slow_start and p.hystart
                and self.cwnd // mss >= p.hystart_low_window):
            found = self.hystart.update(p, delay, self.delay_min, int(now * 1e6), snd_una, snd_nxt,
                                        hystart_ack_delay_us(pacing_rate, gso_max_size), paced)
            if found:
                self.ssthresh = self.cwnd // mss * mss      # tp->snd_ssthresh = tcp_snd_cwnd(tp)

    def on_ack(
        self, acked: int, now: float, rtt: float | None, in_flight: int, *, app_limited: bool = False
    ) -> None:
        jiffies = int(now * _HZ)
        if acked <= 0 or app_limited:
            return
        mss = self.mss
        acked += self.acked_rem
        pkts, self.acked_rem = divmod(acked, mss)
        if not pkts:
            return
        cwnd = self.cwnd // mss
        if self.in_slow_start:
            # tcp_slow_start(): up to ssthresh, the rest goes to avoidance.
            ss = max(self.ssthresh // mss, 1)
            grown = min(cwnd + pkts, ss)
            pkts -= grown - cwnd
            cwnd = grown
            self.cwnd = cwnd * mss
            if pkts <= 0:
                return
        self._update(cwnd, pkts, jiffies)
        # tcp_cong_avoid_ai(tp, ca->cnt, acked)
        w = self.cnt
        if self.cwnd_cnt >= w:
            self.cwnd_cnt = 0
            cwnd += 1
        self.cwnd_cnt += pkts
        if self.cwnd_cnt >= w:
            delta = self.cwnd_cnt // w
            self.cwnd_cnt -= delta * w
            cwnd += delta
        self.cwnd = cwnd * mss

    def _update(self, cwnd: int, acked: int, jiffies: int) -> None:
        """bictcp_update(): how many ACKed packets per cwnd increment (``cnt``)."""
        self.ack_cnt += acked
        if self.last_cwnd == cwnd and jiffies - self.last_time <= _HZ // 32:
            return
        if not (self.epoch_start >= 0 and jiffies == self.last_time):
            self.last_cwnd = cwnd
            self.last_time = jiffies
            if self.epoch_start < 0:
                self.epoch_start = jiffies
                self.ack_cnt = acked
                self.tcp_cwnd = cwnd
                if self.last_max_cwnd <= cwnd:
                    self.bic_k = 0
                    self.origin = cwnd
                else:
                    self.bic_k = _icbrt(self.cube_factor * (self.last_max_cwnd - cwnd))
                    self.origin = self.last_max_cwnd
            t = jiffies - self.epoch_start + -(-self.delay_min // (1_000_000 // _HZ))
            t = (t << 10) // _HZ
            offs = abs(t - self.bic_k)
            delta = (self.cube_rtt_scale * offs * offs * offs) >> 40
            target = self.origin - delta if t < self.bic_k else self.origin + delta
            self.cnt = cwnd // (target - cwnd) if target > cwnd else 100 * cwnd
            if self.last_max_cwnd == 0 and self.cnt > 20:
                self.cnt = 20      # unknown bandwidth: 5 % per RTT at first
        if self.params.tcp_friendliness:
            # TCP friendliness: follow Reno's window when it is ahead.
            delta = max((cwnd * self.beta_scale) >> 3, 1)
            while self.ack_cnt > delta:
                self.ack_cnt -= delta
                self.tcp_cwnd += 1
            if self.tcp_cwnd > cwnd:
                max_cnt = cwnd // (self.tcp_cwnd - cwnd)
                if self.cnt > max_cnt:
                    self.cnt = max_cnt
        self.cnt = max(self.cnt, 2)

    def _recalc_ssthresh(self) -> None:
        """cubictcp_recalc_ssthresh(): Wmax with fast convergence, ssthresh = cwnd * beta."""
        cwnd = self.cwnd // self.mss
        beta = self.params.beta
        self.epoch_start = -1
        if cwnd < self.last_max_cwnd and self.params.fast_convergence:
            self.last_max_cwnd = cwnd * (_BETA_SCALE + beta) // (2 * _BETA_SCALE)
        else:
            self.last_max_cwnd = cwnd
        self.ssthresh = max(cwnd * beta // _BETA_SCALE, 2) * self.mss

    def on_congestion_event(self, now: float, in_flight: int) -> None:
        self._recalc_ssthresh()
        self.cwnd = self.ssthresh
        self.cwnd_cnt = 0

    def on_rto(self, now: float, in_flight: int, *, first_timeout: bool = True) -> None:
        # tcp_enter_loss(): ssthresh first, then TCP_CA_Loss resets CUBIC (cubictcp_state).
        if first_timeout:
            self._recalc_ssthresh()
        self._reset()
        # The round restarts now; it ends at the first ACK past what is outstanding (Linux
        # records snd_nxt, which the caller does not pass here: any later ACK ends it).
        self.hystart.restart(int(now * 1e6), -1)
        self.cwnd = self.mss
        self.cwnd_cnt = 0

    def on_tx_start(self, idle: float, now: float) -> None:
        """CA_EVENT_TX_START after ``idle`` seconds without data in flight: shift the epoch
        so that growth keeps to the curve (cubictcp_cwnd_event)."""
        if self.epoch_start >= 0 and idle > 0:
            jiffies = int(now * _HZ)
            self.epoch_start = min(self.epoch_start + int(idle * _HZ), jiffies)

    def restart_after_idle(self, idle: float, rto: float, reducing: bool, now: float = -1.0) -> None:
        super().restart_after_idle(idle, rto, reducing, now)
        self.cwnd_cnt = 0

    def state_info(self) -> dict[str, int | str]:
        info = super().state_info()
        info["cubic_w_max"] = self.last_max_cwnd
        info["cubic_k_ms"] = self.bic_k * 1000 // 1024
        return info


DCTCP_MAX_ALPHA: Final = 1024       # Linux tcp_dctcp.c: alpha is a fraction scaled by 1024


class Dctcp(NewReno):
    """DCTCP (RFC 8257), as Linux net/ipv4/tcp_dctcp.c.

    The sender estimates alpha, the fraction of its packets that met congestion marks, once
    per window of data, as a moving average with gain 1/2**shift_g (RFC 8257 §3.3, Linux
    dctcp_update_alpha), and an ECN echo reduces cwnd by alpha/2 instead of by half
    (dctcp_ssthresh). A loss still halves it (dctcp_react_to_loss); growth is Reno's. The
    receiver's side (ECE that follows the CE state of each packet, with an immediate ACK
    when it changes) lives with the receive path. Without ECN negotiated the connection
    behaves as Reno with no ECT (dctcp_init's fallback to dctcp_reno), which needs nothing
    here: no echo ever arrives.
    """

    name: ClassVar[str] = "dctcp"
    needs_ecn: ClassVar[bool] = True

    __slots__ = ("alpha", "delivered_ce", "last_delivered", "loss_cwnd", "next_seq",
                 "old_delivered", "old_delivered_ce", "shift_g")

    def __init__(self, mss: int, initial_window: int | None = None, *, shift_g: int = 4,
                 alpha_on_init: int = DCTCP_MAX_ALPHA) -> None:
        super().__init__(mss, initial_window)
        if not 0 <= shift_g <= 10:
            raise ValueError("dctcp_shift_g must be 0..10")        # Linux module_param range
        if not 0 <= alpha_on_init <= DCTCP_MAX_ALPHA:
            raise ValueError(f"dctcp_alpha_on_init must be 0..{DCTCP_MAX_ALPHA}")
        self.shift_g = shift_g
        self.alpha = alpha_on_init        # starts high: the first echo halves, as Linux
        self.next_seq = 0                 # end of the observation window (ca->next_seq)
        self.last_delivered = 0           # tp->delivered as last reported
        self.delivered_ce = 0             # tp->delivered_ce: delivered on ECE-marked ACKs
        self.old_delivered = 0
        self.old_delivered_ce = 0
        self.loss_cwnd = 0

    def on_delivered_ce(self, count: int) -> None:
        self.delivered_ce += count        # AccECN: the exact count (tp->delivered_ce)

    def on_ack_event(self, delivered: int, ece: bool, snd_una: int, snd_nxt: int) -> None:
        # Linux tcp_count_delivered: packets delivered by an ACK with ECE count as CE.
        if ece and delivered > self.last_delivered:
            self.delivered_ce += delivered - self.last_delivered
        self.last_delivered = delivered
        if snd_una < self.next_seq:
            return
        # dctcp_update_alpha: one observation window (about an RTT) has been acked.
        total = delivered - self.old_delivered
        marked = self.delivered_ce - self.old_delivered_ce
        alpha = self.alpha
        decay = alpha >> self.shift_g
        alpha -= decay if decay else alpha        # min_not_zero(alpha, alpha >> g)
        if marked:
            alpha = min(alpha + (marked << (10 - self.shift_g)) // max(1, total), DCTCP_MAX_ALPHA)
        self.alpha = alpha
        self.next_seq = snd_nxt                   # dctcp_reset
        self.old_delivered = delivered
        self.old_delivered_ce = self.delivered_ce

    def on_ecn_echo(self, now: float, in_flight: int) -> None:
        # dctcp_ssthresh: cwnd * (1 - alpha/2), at least two segments.
        self.loss_cwnd = self.cwnd
        self.ssthresh = max(self.cwnd - ((self.cwnd * self.alpha) >> 11), 2 * self.mss)
        self.cwnd = self.ssthresh
        self._ca_acked = 0

    def on_congestion_event(self, now: float, in_flight: int) -> None:
        # dctcp_state(TCP_CA_Recovery) -> dctcp_react_to_loss: a loss halves cwnd.
        self.loss_cwnd = self.cwnd
        self.ssthresh = max(self.cwnd >> 1, 2 * self.mss)
        self.cwnd = self.ssthresh
        self._ca_acked = 0

    def on_loss_in_cwr(self, now: float, in_flight: int) -> None:
        # Linux calls dctcp_state on the CWR -> Recovery change too: the loss response wins.
        self.on_congestion_event(now, in_flight)

    def on_rto(self, now: float, in_flight: int, *, first_timeout: bool = True) -> None:
        # tcp_enter_loss: CA_EVENT_LOSS -> dctcp_react_to_loss, then the loss window.
        if first_timeout:
            self.loss_cwnd = self.cwnd
            self.ssthresh = max(self.cwnd >> 1, 2 * self.mss)
        self.cwnd = self.mss
        self._ca_acked = 0

    def state_info(self) -> dict[str, int | str]:
        # Linux dctcp_get_info (struct tcp_dctcp_info, INET_DIAG_DCTCPINFO).
        info = super().state_info()
        info["dctcp_enabled"] = 1
        info["dctcp_alpha"] = self.alpha
        info["dctcp_ab_ecn"] = (self.delivered_ce - self.old_delivered_ce) * self.mss
        info["dctcp_ab_tot"] = (self.last_delivered - self.old_delivered) * self.mss
        return info


AVAILABLE: Final = ("reno", "cubic", "dctcp")
# "cubic" is Linux's integer CUBIC; "cubic-rfc9438" the RFC's real-valued one.
_ALIASES: dict[str, type[CongestionControl]] = {
    "reno": NewReno, "newreno": NewReno, "cubic": LinuxCubic, "cubic-rfc9438": Cubic, "dctcp": Dctcp}


def create_congestion_control(name: str, mss: int, initial_window: int | None = None, *,
                              config: StackConfig | None = None) -> CongestionControl:
    """Instantiate a controller by its Linux name (``tcp_congestion_control`` / TCP_CONGESTION);
    ``config`` carries the controllers' module parameters (DCTCP's shift_g, alpha_on_init)."""
    cls = _ALIASES.get(name.lower())
    if cls is None:
        raise ValueError(f"unknown congestion control {name!r}; available: {', '.join(AVAILABLE)}")
    if cls is Dctcp and config is not None:
        return Dctcp(mss, initial_window, shift_g=config.dctcp_shift_g,
                     alpha_on_init=config.dctcp_alpha_on_init)
    if cls is LinuxCubic and config is not None:
        # Shared, as Linux's module parameters: a later write is seen by every connection.
        return LinuxCubic(mss, initial_window, params=config.cubic)
    if cls is Cubic and config is not None:
        return Cubic(mss, initial_window, hystart=config.hystart_pp)
    return cls(mss, initial_window)


def congestion_needs_ecn(name: str) -> bool:
    """Does the controller of this name need ECN (Linux TCP_CONG_NEEDS_ECN)? False if unknown."""
    cls = _ALIASES.get(name.lower())
    return cls is not None and cls.needs_ecn
