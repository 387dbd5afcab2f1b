"""One connection as a script sees it: the script<->live maps of sequence numbers and TS vals."""

from __future__ import annotations

from dataclasses import dataclass, field

from usertcp.tcp.connection import Connection

__all__ = ["Flow"]


@dataclass(eq=False)
class Flow:
    """One connection as the script sees it (packetdrill's struct socket)."""

    local_ip: bytes
    local_port: int
    remote_ip: bytes
    remote_port: int
    script_local_isn: int = 0
    live_local_isn: int | None = None
    remote_isn: int | None = None  # the peer's ISN: non-SYN remote sequence numbers are relative to it
    ts_map: dict[int, int] = field(default_factory=dict)  # script TS val -> live TS val
    first_ts: tuple[int, int] | None = None  # (script, live) baseline
    conn: Connection | None = None

    @property
    def key(self) -> tuple[int, bytes, int]:
        return (self.local_port, self.remote_ip, self.remote_port)

    def local_offset(self, syn: bool) -> int:
        """live = script + offset, for our (local) sequence space.

        packetdrill's local_seq_script_to_live_offset: only SYN segments map the script's own
        ISN (the seq of its ``> S``/``> S.`` line) onto the live one; every other segment's
        numbers are relative to the live ISN, whatever ISN the script wrote.
        """
        script = self.script_local_isn if syn else 0
        if self.live_local_isn is None:
            if self.conn is not None:
                return (self.conn.iss - script) & 0xFFFFFFFF
            return 0
        return (self.live_local_isn - script) & 0xFFFFFFFF

    def remote_offset(self, syn: bool) -> int:
        """live = script + offset, for the peer's sequence space (literal in SYN segments)."""
        return 0 if syn or self.remote_isn is None else self.remote_isn

    def script_ts(self, live_val: int) -> int:
        """A live TS val in script space (relative to the first outbound TS val pair)."""
        if self.first_ts is None:
            return live_val
        return (self.first_ts[0] + live_val - self.first_ts[1]) & 0xFFFFFFFF
