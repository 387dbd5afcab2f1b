"""Per-stack counters, named after Linux's nstat/SNMP names where one exists."""

from __future__ import annotations

from collections import defaultdict


class Counters(defaultdict[str, int]):
    """A dict of counter name -> value; missing names read as 0."""

    def __init__(self) -> None:
        super().__init__(int)

    def snapshot(self) -> dict[str, int]:
        return {k: v for k, v in sorted(self.items()) if v}

    def fast_path_ratio(self) -> float:
        """Header-prediction hits over all established-state segments received."""
        fast = self["TcpExtTCPHPHits"] + self["TcpExtTCPHPAcks"]
        slow = self["UsertcpSlowPathSegs"]
        return fast / (fast + slow) if fast + slow else 0.0
