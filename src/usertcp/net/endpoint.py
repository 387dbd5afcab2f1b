"""The sans-IO surface every link and driver talks to.

A :class:`usertcp.tcp.stack.Stack` satisfies this protocol. Drivers own the clock:
they call ``receive``/``handle_timer`` with the time, then drain
``datagrams_to_send`` and re-arm one timer at ``get_timer()``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol

from usertcp.wire.segment import Buffer, TxPacket


class Endpoint(Protocol):
    def receive(self, packet: Buffer, now: float, *, checksum_verified: bool = False) -> None:
        """Take one inbound IP packet (IPv4 or IPv6) at time ``now`` (seconds)."""

    def datagrams_to_send(self) -> list[TxPacket]:
        """Drain and return the packets the endpoint wants to send now."""

    def get_timer(self) -> float | None:
        """The absolute time of the next timer the endpoint needs, or None."""

    def handle_timer(self, now: float) -> None:
        """Run every timer due at or before ``now``."""


class Driver(Protocol):
    """What the socket API needs from whatever runs the endpoints (virtual or real time).

    Application calls mutate a stack under ``lock`` and then ``kick()`` so the driver
    sends what became ready and re-arms timers. Blocking calls use ``wait_until``:
    a virtual-time driver runs the simulation until the predicate holds; a real-time
    driver sleeps on a condition that its I/O thread notifies.
    """

    @property
    def lock(self) -> AbstractContextManager[object]:
        """Held while application code calls into the endpoints (a no-op in virtual time)."""

    def now(self) -> float:
        """The driver's current time in seconds."""

    def kick(self) -> None:
        """Flush every endpoint's pending output and re-arm timers, at ``now()``."""

    def wait_until(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """Block until ``predicate()`` is true (True) or ``timeout`` seconds pass (False)."""
