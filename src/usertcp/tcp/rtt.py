"""Round-trip time estimation and retransmission timeout (RFC 6298, Linux flavour).

Why not plain RFC 6298: packetdrill scripts written against Linux expect Linux's RTO,
which differs from the RFC in three ways that we reproduce (net/ipv4/tcp_input.c,
tcp_rtt_estimator() and tcp_set_rto()):

* The variance term has a floor of ``rto_min`` instead of the clock granularity G:
  ``RTO = SRTT + max(4*RTTVAR_max, rto_min)`` where RTTVAR_max is the largest
  ``4*RTTVAR`` seen in the current round trip, decaying by 1/4 towards it once per
  round trip (Linux ``rttvar_us`` / ``mdev_max_us``).  Callers that do not track
  rounds get a per-sample decay (``round_done=True``, the default).
* When a sample is *below* SRTT - RTTVAR the deviation is given weight 1/32 instead
  of 1/4 (Linux's Eifel-like damping), so that a falling RTT does not inflate RTO.
* The result is rounded up to the timer granularity (a jiffy, 1 ms at HZ=1000) and
  clamped to [rto_min, rto_max] (RFC 6298 §2.4 allows the 1 s floor to be lowered).

Everything is in seconds (floats); :meth:`RttEstimator.as_info` converts to µs.
"""

from __future__ import annotations

import math
from typing import Final

__all__ = ["RttEstimator"]

_MIN_SAMPLE: Final = 1e-6  # Linux treats a 0 µs sample as 1 µs.


class RttEstimator:
    """SRTT/RTTVAR state for one connection; time is passed in, never read."""

    __slots__ = (
        "_rttvar_max",
        "_rttvar_round",
        "backoff",
        "granularity",
        "latest_rtt",
        "min_rtt",
        "rto_initial",
        "rto_max",
        "rto_min",
        "rttvar",
        "srtt",
    )

    def __init__(
        self,
        *,
        rto_initial: float = 1.0,
        rto_min: float = 0.2,
        rto_max: float = 120.0,
        granularity: float = 0.001,
    ) -> None:
        self.rto_initial = rto_initial
        self.rto_min = rto_min
        self.rto_max = rto_max
        self.granularity = granularity
        self.srtt: float | None = None
        self.rttvar: float = 0.0  # RFC 6298 RTTVAR (Linux mdev_us / 4)
        self.min_rtt: float | None = None
        self.latest_rtt: float | None = None
        self.backoff: int = 0
        # Linux rttvar_us: the 4*RTTVAR term actually used in RTO (>= rto_min).
        self._rttvar_max: float = 0.0
        # Linux mdev_max_us: largest 4*RTTVAR seen in the current round trip.
        self._rttvar_round: float = 0.0

    def on_sample(self, rtt: float, *, round_done: bool = True) -> None:
        """Feed one RTT measurement (Karn-valid: the caller filters retransmits, RFC 6298 §3).

        ``round_done`` tells whether this ACK moved snd_una past the snd_nxt recorded at
        the previous round boundary (Linux ``tp->rtt_seq``); only then does the RTO's
        variance term decay.  It does not touch ``backoff`` (the caller resets it, §5.7).
        """
        rtt = max(rtt, _MIN_SAMPLE)
        self.latest_rtt = rtt
        if self.min_rtt is None or rtt < self.min_rtt:
            self.min_rtt = rtt
        if self.srtt is None:
            # RFC 6298 §2.2: SRTT <- R, RTTVAR <- R/2.
            self.srtt = rtt
            self.rttvar = rtt / 2
            self._rttvar_max = max(4 * self.rttvar, self.rto_min)
            self._rttvar_round = self._rttvar_max
            return
        # RFC 6298 §2.3, deviation measured against the *old* SRTT (alpha 1/8, beta 1/4).
        err = rtt - self.srtt
        self.srtt += err / 8
        dev = abs(err) - self.rttvar
        if err < 0 and dev > 0:
            dev /= 8  # Linux: RTT falling below SRTT-RTTVAR gets gain 1/32, not 1/4.
        self.rttvar += dev / 4
        four_var = 4 * self.rttvar
        if four_var > self._rttvar_round:
            self._rttvar_round = four_var
            self._rttvar_max = max(self._rttvar_max, four_var)
        if round_done:
            if self._rttvar_round < self._rttvar_max:
                self._rttvar_max -= (self._rttvar_max - self._rttvar_round) / 4
            self._rttvar_round = self.rto_min

    @property
    def rto(self) -> float:
        """Base RTO without backoff: ceil_G(SRTT + max(4*RTTVAR_max, rto_min)) in [rto_min, rto_max]."""
        if self.srtt is None:
            return self.rto_initial
        raw = self.srtt + max(self._rttvar_max, self.rto_min, self.granularity)
        if self.granularity > 0:
            # Round up to whole ticks (usecs_to_jiffies); epsilon absorbs float noise.
            raw = math.ceil(raw / self.granularity - 1e-9) * self.granularity
        return min(max(raw, self.rto_min), self.rto_max)

    @property
    def timeout(self) -> float:
        """Timer value to arm now: RTO doubled per backoff (RFC 6298 §5.5), capped at rto_max."""
        return min(self.rto * (1 << self.backoff), self.rto_max)

    def on_timeout(self) -> None:
        """The retransmission timer expired: back off (RFC 6298 §5.5)."""
        self.backoff += 1

    def undo_backoff(self) -> None:
        """Undo one doubling (RFC 6069 §4: the path was down, not congested)."""
        if self.backoff:
            self.backoff -= 1

    def reset_backoff(self) -> None:
        self.backoff = 0

    def as_info(self) -> dict[str, int]:
        """tcp_info-style fields in microseconds (struct tcp_info: tcpi_rtt, tcpi_rttvar, ...)."""

        def us(x: float | None) -> int:
            return 0 if x is None else round(x * 1_000_000)

        return {
            "tcpi_rtt": us(self.srtt),
            "tcpi_rttvar": us(self.rttvar) if self.srtt is not None else us(self.rto_initial / 4),
            "tcpi_rto": us(self.timeout),
            "tcpi_backoff": self.backoff,
            "tcpi_min_rtt": us(self.min_rtt) if self.min_rtt is not None else 0xFFFFFFFF,
        }
