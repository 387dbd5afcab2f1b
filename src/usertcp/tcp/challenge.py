"""The per-namespace challenge-ACK budget (RFC 5961 §7), as Linux ≥ 6.0 keeps it.

A fixed stack-wide count of challenge ACKs per second is a side channel: an off-path
attacker who exhausts it with its own connection learns from the missing ACK whether some
other connection just sent one (CVE-2016-5696). Linux first randomised the budget (4.7) and
since 6.0 disables the shared limit by default (``tcp_challenge_ack_limit`` = INT_MAX),
leaving the per-socket ``tcp_invalid_ratelimit`` (:class:`OutOfWindowLimit`). Where the limit
is set, each second draws its budget at random from [limit/2, limit*3/2) (Linux
tcp_send_challenge_ack), so the count an attacker sees tells it nothing exact.
"""

from __future__ import annotations

import random

from usertcp.wire.segment import SYN, Segment

INT_MAX = (1 << 31) - 1      # tcp_challenge_ack_limit's default since Linux 6.0: no shared limit


class ChallengeAckBudget:
    """Challenge ACKs the whole stack may still send in the current second."""

    __slots__ = ("_left", "_rng", "_second")

    def __init__(self, secret: bytes) -> None:
        # Keyed by the stack's secret: reproducible for a configuration, unknown outside.
        self._rng = random.Random(secret + b"challenge-ack")
        self._second = -1
        self._left = 0

    def allow(self, now: float, limit: int) -> bool:
        """Take one challenge ACK from the budget; False if this second's is spent."""
        if limit >= INT_MAX:
            return True
        second = int(now)
        if second != self._second:
            self._second = second
            half = (limit + 1) >> 1
            self._left = self._rng.randint(half, limit + half - 1) if limit > 0 else 0
        if self._left <= 0:
            return False
        self._left -= 1
        return True


class OutOfWindowLimit:
    """One socket's out-of-window ACK limit (Linux tcp_oow_rate_limited): at most one such
    ACK (challenge ACKs included) per ``tcp_invalid_ratelimit``."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last = float("-inf")      # when the last out-of-window ACK went

    def allowed(self, now: float, ratelimit: float, seg: Segment | None = None) -> bool:
        """May one go now? Data segments without SYN are exempt ("not likely part of an ACK
        loop") and do not use up the slot that challenge ACKs share."""
        if seg is not None and len(seg.payload) and not seg.flags & SYN:
            return True
        if now - self.last < ratelimit:
            return False
        self.last = now
        return True
