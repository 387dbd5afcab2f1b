"""The sans-IO surface every link and driver talks to.

A :class:`usertcp.tcp.stack.Stack` satisfies this protocol. Drivers own the clock:
they call ``receive``/``handle_timer`` with the time, then drain
``datagrams_to_send`` and re-arm one timer at ``get_timer()``.
"""

from __future__ import annotations

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
