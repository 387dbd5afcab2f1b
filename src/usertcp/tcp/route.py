"""Route metrics a connection takes from its route, as ``ip route ... advmss N mtu [lock] N
initcwnd N`` sets them (Linux RTAX_ADVMSS, RTAX_MTU, RTAX_INITCWND).

The table is per stack (it lives in :class:`usertcp.tcp.config.StackConfig`) and keyed by
destination address. A connection caches its route (Linux sk_dst_cache); a change bumps the
table's generation, which makes every cached route obsolete: a connection looks its route up
again at its next transmission (__sk_dst_check in ip_queue_xmit), and its MSS follows at the
next write or push (tcp_current_mss), not before.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

__all__ = ["RouteMetrics", "RouteTable", "parse_route_metrics"]


@dataclass(frozen=True, slots=True)
class RouteMetrics:
    """The metrics of one route; 0 means unset (the link's MTU, the derived advmss, IW10)."""

    mtu: int = 0
    mtu_locked: bool = False      # "mtu lock": PMTU discovery may not lower it (RTAX_LOCK)
    advmss: int = 0
    initcwnd: int = 0


class RouteTable:
    """Routes by destination address (16 or 4 bytes), with a generation for cache checks."""

    __slots__ = ("generation", "routes")

    def __init__(self) -> None:
        self.routes: dict[bytes, RouteMetrics] = {}
        self.generation = 0

    def lookup(self, dst: bytes) -> RouteMetrics | None:
        return self.routes.get(dst)

    def set(self, dst: str | bytes, metrics: RouteMetrics) -> None:
        """Add or change the route to ``dst`` (``ip route replace``); cached routes go stale."""
        key = dst if isinstance(dst, bytes) else ipaddress.ip_address(dst).packed
        self.routes[key] = metrics
        self.generation += 1

    def delete(self, dst: str | bytes) -> bool:
        key = dst if isinstance(dst, bytes) else ipaddress.ip_address(dst).packed
        found = self.routes.pop(key, None) is not None
        self.generation += 1
        return found


_METRIC_WORDS = ("mtu", "advmss", "initcwnd")


def parse_route_metrics(words: list[str]) -> RouteMetrics:
    """The metrics of an ``ip route`` command line after its destination: ``via ADDR``,
    ``dev NAME`` and the metrics we model; ValueError for anything else (as ip would refuse
    an unknown word, we refuse a metric we do not model)."""
    values = {"mtu": 0, "advmss": 0, "initcwnd": 0}
    locked = False
    i = 0
    while i < len(words):
        word = words[i]
        if word in ("via", "dev", "proto", "scope", "src") and i + 1 < len(words):
            i += 2
            continue
        if word in _METRIC_WORDS and i + 1 < len(words):
            value = words[i + 1]
            if value == "lock" and i + 2 < len(words):
                if word != "mtu":
                    raise ValueError(f"lock on {word} is not modelled")
                locked = True
                value = words[i + 2]
                i += 1
            number = int(value)
            if number < 0 or (word == "mtu" and number and number < 68):
                raise ValueError(f"bad {word} {value}")
            values[word] = number
            i += 2
            continue
        raise ValueError(f"route word not modelled: {word!r}")
    return RouteMetrics(mtu=values["mtu"], mtu_locked=locked, advmss=values["advmss"],
                        initcwnd=values["initcwnd"])
