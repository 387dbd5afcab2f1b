"""The stack-wide buffer account and its pressure mode (Linux tcp_mem, sk_mem_schedule).

Linux charges every socket's buffers to one protocol-wide count and compares it with three
thresholds (net.ipv4.tcp_mem low, pressure, high). Above *pressure* TCP enters memory
pressure (tcp_enter_memory_pressure, TcpExtTCPMemoryPressures): send buffers stop growing
(tcp_should_expand_sndbuf) and receive queues are pruned (tcp_prune_queue); it leaves below
*low*. Above *high* allocations fail, except that every socket is guaranteed its minimum,
``tcp_wmem[0]`` queued for sending and ``tcp_rmem[0]`` received (__sk_mem_raise_allocated):
so a few peers that hoard memory by never reading cannot lock every other connection out.

``limit`` is the high threshold; Linux's defaults put the others at 1/2 and 2/3 of it
(tcp_init_mem: mem[0] = 3/4 of mem[1], mem[2] = 2 * mem[0]).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Final

# Linux SOCK_MIN_SNDBUF on x86-64, 2 * (2048 + sizeof(struct sk_buff)): the least a send buffer
# shrinks to (sk_stream_moderate_sndbuf).
SOCK_MIN_SNDBUF: Final = 4608


class MemAccount:
    """Bytes held in every connection's send and receive buffers of one stack (Linux tcp_mem)."""

    __slots__ = ("limit", "mib", "peak", "pressure", "used")

    def __init__(self, limit: int, mib: MutableMapping[str, int] | None = None) -> None:
        self.limit = limit          # the high threshold; 0: unlimited
        self.used = 0
        self.peak = 0
        self.pressure = False       # Linux tcp_memory_pressure
        self.mib = mib              # the stack's counters, for TcpExtTCPMemoryPressures

    def room(self) -> int:
        return max(self.limit - self.used, 0) if self.limit else 1 << 62

    def add(self, n: int) -> None:
        self.used += n
        if self.used > self.peak:
            self.peak = self.used

    def under_pressure(self) -> bool:
        """Enter pressure above 2/3 of the limit (tcp_enter_memory_pressure), leave it below
        half (sk_leave_memory_pressure); evaluated where TCP asks, as Linux does on charging."""
        if not self.limit:
            return False
        if self.pressure:
            if self.used < self.limit // 2:
                self.pressure = False
        elif self.used > self.limit * 2 // 3:
            self.pressure = True
            if self.mib is not None:
                self.mib["TcpExtTCPMemoryPressures"] += 1
        return self.pressure

    def send_room(self, queued: int, wmem_min: int) -> int:
        """Bytes one socket may still queue for sending: what the stack has left, but at least
        up to its ``tcp_wmem[0]`` minimum (__sk_mem_raise_allocated's guarantee)."""
        if self.limit and self.used > self.limit * 2 // 3:
            self.under_pressure()
        return max(self.room(), wmem_min - queued)

    def recv_allowed(self, n: int, held: int, rmem_min: int) -> bool:
        """May a socket holding ``held`` received bytes take ``n`` more? Within the limit, or
        while it holds less than its ``tcp_rmem[0]`` minimum (Linux sk_rmem_schedule)."""
        if not self.limit:
            return True
        if self.used + n > self.limit * 2 // 3:
            self.under_pressure()
        return self.used + n <= self.limit or held < rmem_min
