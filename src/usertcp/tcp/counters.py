"""Per-stack counters, named after Linux's nstat/SNMP names where one exists."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import ItemsView, Iterator, KeysView, ValuesView


class Counters:
    """Counter name -> value; missing names read as 0.

    A class around a ``defaultdict`` rather than a subclass of it (mypyc compiles no
    subclasses of builtins). The packet path increments ``table`` directly, a plain
    C-level dict operation; everything else uses the mapping methods here.
    """

    __slots__ = ("table",)

    def __init__(self) -> None:
        self.table: defaultdict[str, int] = defaultdict(int)

    def __getitem__(self, name: str) -> int:
        return self.table[name]

    def __setitem__(self, name: str, value: int) -> None:
        self.table[name] = value

    def __contains__(self, name: object) -> bool:
        return name in self.table

    def __iter__(self) -> Iterator[str]:
        return iter(self.table)

    def __len__(self) -> int:
        return len(self.table)

    def get(self, name: str, default: int = 0) -> int:
        return self.table.get(name, default)

    def items(self) -> ItemsView[str, int]:
        return self.table.items()

    def keys(self) -> KeysView[str]:
        return self.table.keys()

    def values(self) -> ValuesView[int]:
        return self.table.values()

    def clear(self) -> None:
        self.table.clear()

    def snapshot(self) -> dict[str, int]:
        return {k: v for k, v in sorted(self.table.items()) if v}

    def fast_path_ratio(self) -> float:
        """Header-prediction hits over all established-state segments received."""
        t = self.table
        fast = t["TcpExtTCPHPHits"] + t["TcpExtTCPHPAcks"]
        slow = t["UsertcpSlowPathSegs"]
        return fast / (fast + slow) if fast + slow else 0.0
