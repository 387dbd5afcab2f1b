"""Per-stack counters, named after Linux's nstat/SNMP names where one exists.

Two stores behind one mapping. The counters that (nearly) every segment bumps live in a
:class:`HotCounters` block: native integer attributes, so the compiled packet path adds to a
machine word instead of hashing a name into a dict twice (Linux likewise keeps its SNMP MIBs
in per-CPU arrays indexed by a constant, ``TCP_INC_STATS(net, TCP_MIB_INSEGS)``). Every other
counter is a name in a ``defaultdict``. :class:`Counters` shows both under the Linux names, so
``nstat``, ``ss`` and the stats file see one table; a hot name that is also counted in the
dict (code that predates the block) reads as the sum.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import ItemsView, Iterator, KeysView, ValuesView
from typing import Final

# The hot counters' Linux names, in HotCounters.values() order.
HOT_NAMES: Final = (
    "TcpInSegs", "TcpOutSegs", "TcpExtTCPHPHits", "TcpExtTCPHPAcks", "TcpExtTCPPureAcks",
    "TcpExtDelayedACKs", "UsertcpSlowPathSegs",
    # Received packets by ECN codepoint (Linux ip_rcv_core / ip6_rcv_core IPSTATS_MIB_*ECT*PKTS).
    "IpExtInNoECTPkts", "IpExtInECT1Pkts", "IpExtInECT0Pkts", "IpExtInCEPkts",
    "Ip6InNoECTPkts", "Ip6InECT1Pkts", "Ip6InECT0Pkts", "Ip6InCEPkts",
    # Packets ACKs delivered, and of those the ones reported CE-marked (tcp_newly_delivered).
    "TcpExtTCPDelivered", "TcpExtTCPDeliveredCE",
)
_HOT_INDEX: Final = {name: i for i, name in enumerate(HOT_NAMES)}


class HotCounters:
    """The per-segment counters as native integers (see the module docstring)."""

    __slots__ = ("delayed_acks", "delivered", "delivered_ce", "hp_acks", "hp_hits", "in_ce4", "in_ce6",
                 "in_ect0_4", "in_ect0_6", "in_ect1_4", "in_ect1_6", "in_noect4", "in_noect6", "in_segs",
                 "out_segs", "pure_acks", "slow_path_segs")

    def __init__(self) -> None:
        self.in_segs = 0             # TcpInSegs (set again in reset())
        self.out_segs = 0            # TcpOutSegs
        self.hp_hits = 0             # TcpExtTCPHPHits: predicted data segments
        self.hp_acks = 0             # TcpExtTCPHPAcks: predicted segments that advanced SND.UNA
        self.pure_acks = 0           # TcpExtTCPPureAcks
        self.delayed_acks = 0        # TcpExtDelayedACKs: delayed-ACK timer expiries that sent one
        self.slow_path_segs = 0      # UsertcpSlowPathSegs
        self.in_noect4 = self.in_ect1_4 = self.in_ect0_4 = self.in_ce4 = 0
        self.in_noect6 = self.in_ect1_6 = self.in_ect0_6 = self.in_ce6 = 0
        self.delivered = 0           # TcpExtTCPDelivered
        self.delivered_ce = 0        # TcpExtTCPDeliveredCE

    def count_ecn_in(self, v4: bool, ecn: int) -> None:
        """One received IPv4 (``v4``) or IPv6 packet with ECN codepoint ``ecn`` (0..3)."""
        if v4:
            if ecn == 0:
                self.in_noect4 += 1
            elif ecn == 2:
                self.in_ect0_4 += 1
            elif ecn == 1:
                self.in_ect1_4 += 1
            else:
                self.in_ce4 += 1
        elif ecn == 0:
            self.in_noect6 += 1
        elif ecn == 2:
            self.in_ect0_6 += 1
        elif ecn == 1:
            self.in_ect1_6 += 1
        else:
            self.in_ce6 += 1

    def values(self) -> tuple[int, ...]:
        """The values in HOT_NAMES order."""
        return (self.in_segs, self.out_segs, self.hp_hits, self.hp_acks, self.pure_acks,
                self.delayed_acks, self.slow_path_segs,
                self.in_noect4, self.in_ect1_4, self.in_ect0_4, self.in_ce4,
                self.in_noect6, self.in_ect1_6, self.in_ect0_6, self.in_ce6,
                self.delivered, self.delivered_ce)

    def get(self, name: str) -> int:
        return self.values()[_HOT_INDEX[name]]

    def set(self, name: str, value: int) -> None:
        """Set one hot counter by its Linux name (a KeyError for any other name)."""
        i = _HOT_INDEX[name]
        if i == 0:
            self.in_segs = value
        elif i == 1:
            self.out_segs = value
        elif i == 2:
            self.hp_hits = value
        elif i == 3:
            self.hp_acks = value
        elif i == 4:
            self.pure_acks = value
        elif i == 5:
            self.delayed_acks = value
        elif i == 6:
            self.slow_path_segs = value
        elif i < 15:
            self._set_ecn(i - 7, value)
        elif i == 15:
            self.delivered = value
        else:
            self.delivered_ce = value

    def _set_ecn(self, i: int, value: int) -> None:
        if i == 0:
            self.in_noect4 = value
        elif i == 1:
            self.in_ect1_4 = value
        elif i == 2:
            self.in_ect0_4 = value
        elif i == 3:
            self.in_ce4 = value
        elif i == 4:
            self.in_noect6 = value
        elif i == 5:
            self.in_ect1_6 = value
        elif i == 6:
            self.in_ect0_6 = value
        else:
            self.in_ce6 = value

    def reset(self) -> None:
        self.in_segs = self.out_segs = self.hp_hits = self.hp_acks = self.pure_acks = 0
        self.delayed_acks = self.slow_path_segs = 0
        self.in_noect4 = self.in_ect1_4 = self.in_ect0_4 = self.in_ce4 = 0
        self.in_noect6 = self.in_ect1_6 = self.in_ect0_6 = self.in_ce6 = 0
        self.delivered = self.delivered_ce = 0


class Counters:
    """Counter name -> value; missing names read as 0.

    A class around a ``defaultdict`` rather than a subclass of it (mypyc compiles no
    subclasses of builtins). The packet path increments ``hot`` (per-segment counters) and
    ``table`` (everything else) directly; everything else uses the mapping methods here,
    which show both under their Linux names.
    """

    __slots__ = ("hot", "table")

    def __init__(self) -> None:
        self.table: defaultdict[str, int] = defaultdict(int)
        self.hot = HotCounters()

    def _merged(self) -> dict[str, int]:
        """Every counter by name: the dict's, then the hot ones that are not zero."""
        out = dict(self.table)
        for name, value in zip(HOT_NAMES, self.hot.values(), strict=True):
            if value:
                out[name] = out.get(name, 0) + value
        return out

    def __getitem__(self, name: str) -> int:
        if name in _HOT_INDEX:
            return self.table.get(name, 0) + self.hot.get(name)
        return self.table[name]

    def __setitem__(self, name: str, value: int) -> None:
        if name in _HOT_INDEX:
            self.table.pop(name, None)
            self.hot.set(name, value)
        else:
            self.table[name] = value

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str) and name in _HOT_INDEX and self.hot.get(name):
            return True
        return name in self.table

    def __iter__(self) -> Iterator[str]:
        return iter(self._merged())

    def __len__(self) -> int:
        return len(self._merged())

    def get(self, name: str, default: int = 0) -> int:
        if name in _HOT_INDEX and (self.hot.get(name) or name in self.table):
            return self[name]
        return self.table.get(name, default)

    def items(self) -> ItemsView[str, int]:
        return self._merged().items()

    def keys(self) -> KeysView[str]:
        return self._merged().keys()

    def values(self) -> ValuesView[int]:
        return self._merged().values()

    def clear(self) -> None:
        self.table.clear()
        self.hot.reset()

    def snapshot(self) -> dict[str, int]:
        return {k: v for k, v in sorted(self._merged().items()) if v}

    def fast_path_ratio(self) -> float:
        """Header-prediction hits over all established-state segments received."""
        fast = self["TcpExtTCPHPHits"] + self["TcpExtTCPHPAcks"]
        slow = self["UsertcpSlowPathSegs"]
        return fast / (fast + slow) if fast + slow else 0.0
