"""Loss and reordering for a real link, applied on usertcp's side of it.

Why here: the usual tool, a netem qdisc on the TUN device, is not available on every
kernel (``CONFIG_NET_SCH_NETEM`` is unset on the CI machine), and netem shapes only the
kernel's *egress*, i.e. one direction. :class:`ImpairedEndpoint` sits between a driver
(e.g. :class:`usertcp.net.tun.TunDriver`) and the stack's sans-IO :class:`Endpoint`
surface, so it impairs both directions with nothing from the kernel:

* inbound (kernel -> usertcp): a packet read from the device is dropped, or held back
  and handed to the stack ``delay`` seconds later (packets read meanwhile overtake it);
* outbound (usertcp -> kernel): a packet the stack queued is dropped, or held back and
  written ``delay`` seconds later;
* either way, an ECN-capable packet that is delivered gets CE set with probability ``ce``
  (what an ECN-marking AQM on the path would do, RFC 3168 §5; from its own random source,
  so it does not change the drop pattern).

Each direction has its own ``random.Random`` seeded from ``seed``, so the pattern of
drops of one direction depends only on the index of the packet in that direction.
A GSO super-packet (offloads on) is one packet here: dropping it drops all its
segments at once, a burst, as a lost TSO frame would on a real NIC queue.

The driver's pcap sees inbound packets *before* impairment and outbound packets
*after* it (dropped outbound packets never appear; held ones appear when written).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass

from usertcp.net.endpoint import Endpoint
from usertcp.net.memnet import ce_mark
from usertcp.wire.segment import Buffer, TxPacket

__all__ = ["ImpairConfig", "ImpairedEndpoint", "parse_impair"]


@dataclass(frozen=True)
class ImpairConfig:
    loss: float = 0.0          # probability a packet is dropped
    reorder: float = 0.0       # probability a (not dropped) packet is held back by ``delay``
    delay: float = 0.002       # how long a reordered packet is held (seconds)
    ce: float = 0.0            # probability a delivered ECT packet is marked CE
    seed: int = 1
    inbound: bool = True       # impair kernel -> usertcp
    outbound: bool = True      # impair usertcp -> kernel

    def __post_init__(self) -> None:
        for name in ("loss", "reorder"):
            v = getattr(self, name)
            if not 0.0 <= v < 1.0:
                raise ValueError(f"impair {name} must be in [0, 1), got {v}")
        if not 0.0 <= self.ce <= 1.0:
            raise ValueError(f"impair ce must be in [0, 1], got {self.ce}")
        if self.loss + self.reorder >= 1.0:
            raise ValueError("impair loss + reorder must be < 1")
        if self.delay < 0:
            raise ValueError("impair delay must be >= 0")

    @property
    def active(self) -> bool:
        return (self.loss > 0 or self.reorder > 0 or self.ce > 0) and (self.inbound or self.outbound)


def parse_impair(text: str) -> ImpairConfig:
    """``loss=0.01,reorder=0.01,delay=0.002,ce=0.01,seed=1,dir=both|in|out`` (every key optional)."""
    kw: dict[str, float | int | bool] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"impair: expected KEY=VALUE, got {item!r}")
        if key in ("loss", "reorder", "delay", "ce"):
            kw[key] = float(value)
        elif key == "seed":
            kw[key] = int(value)
        elif key == "dir":
            if value not in ("both", "in", "out"):
                raise ValueError("impair dir is both, in or out")
            kw["inbound"] = value in ("both", "in")
            kw["outbound"] = value in ("both", "out")
        else:
            raise ValueError(f"impair: unknown key {key!r} (loss, reorder, delay, ce, seed, dir)")
    return ImpairConfig(**kw)  # type: ignore[arg-type]


class ImpairedEndpoint:
    """An :class:`Endpoint` that impairs the packets between a driver and ``inner``."""

    def __init__(self, inner: Endpoint, config: ImpairConfig, clock: Callable[[], float]) -> None:
        self.inner = inner
        self.config = config
        self.clock = clock
        self._rng_in = random.Random(f"{config.seed}-in")
        self._rng_out = random.Random(f"{config.seed}-out")
        self._rng_ce = random.Random(f"{config.seed}-ce")
        self._seq = 0
        # (release time, tie-breaker, packet[, checksum_verified])
        self._held_in: list[tuple[float, int, Buffer, bool]] = []
        self._held_out: list[tuple[float, int, TxPacket]] = []
        self._ready_out: list[TxPacket] = []
        self.stats = {"in_packets": 0, "in_dropped": 0, "in_reordered": 0, "in_ce_marked": 0,
                      "out_packets": 0, "out_dropped": 0, "out_reordered": 0, "out_ce_marked": 0}

    def snapshot(self) -> dict[str, object]:
        return {"config": asdict(self.config), **self.stats}

    # -- Endpoint ------------------------------------------------------------------------------

    def receive(self, packet: Buffer, now: float, *, checksum_verified: bool = False) -> None:
        cfg = self.config
        self.stats["in_packets"] += 1
        if cfg.inbound:
            r = self._rng_in.random()
            if r < cfg.loss:
                self.stats["in_dropped"] += 1
                return
            if r < cfg.loss + cfg.reorder:
                self.stats["in_reordered"] += 1
                self._seq += 1
                heapq.heappush(self._held_in, (now + cfg.delay, self._seq, packet, checksum_verified))
                return
            packet = self._mark_in(packet)
        self.inner.receive(packet, now, checksum_verified=checksum_verified)
        if self._held_in and self._held_in[0][0] <= now:
            self._release_in(now)

    def datagrams_to_send(self) -> list[TxPacket]:
        produced = self.inner.datagrams_to_send()
        cfg = self.config
        now = self.clock()
        out, self._ready_out = self._ready_out, []
        if self._held_out and self._held_out[0][0] <= now:
            out.extend(self._due_out(now))
        if not cfg.outbound:
            self.stats["out_packets"] += len(produced)
            out.extend(produced)
            return out
        rng = self._rng_out.random
        for pkt in produced:
            self.stats["out_packets"] += 1
            r = rng()
            if r < cfg.loss:
                self.stats["out_dropped"] += 1
            elif r < cfg.loss + cfg.reorder:
                self.stats["out_reordered"] += 1
                self._seq += 1
                heapq.heappush(self._held_out, (now + cfg.delay, self._seq, pkt))
            else:
                out.append(self._mark_out(pkt))
        return out

    def get_timer(self) -> float | None:
        t = self.inner.get_timer()
        for held in (self._held_in, self._held_out):
            if held and (t is None or held[0][0] < t):
                t = held[0][0]
        return t

    def handle_timer(self, now: float) -> None:
        if self._held_in and self._held_in[0][0] <= now:
            self._release_in(now)
        if self._held_out and self._held_out[0][0] <= now:
            self._ready_out.extend(self._due_out(now))
        t = self.inner.get_timer()
        if t is not None and t <= now:
            self.inner.handle_timer(now)

    # -- helpers -------------------------------------------------------------------------------

    def _release_in(self, now: float) -> None:
        held = self._held_in
        while held and held[0][0] <= now:
            _, _, pkt, verified = heapq.heappop(held)
            self.inner.receive(self._mark_in(pkt), now, checksum_verified=verified)

    def _due_out(self, now: float) -> list[TxPacket]:
        held = self._held_out
        due: list[TxPacket] = []
        while held and held[0][0] <= now:
            due.append(self._mark_out(heapq.heappop(held)[2]))
        return due

    def _mark_in(self, packet: Buffer) -> Buffer:
        if not self.config.ce or self._rng_ce.random() >= self.config.ce:
            return packet
        marked = ce_mark(bytes(packet))
        if marked is None:
            return packet
        self.stats["in_ce_marked"] += 1
        return marked

    def _mark_out(self, pkt: TxPacket) -> TxPacket:
        if not self.config.ce or self._rng_ce.random() >= self.config.ce:
            return pkt
        header = ce_mark(bytes(pkt.header))   # ECN sits in the IP header: the payload is kept
        if header is None:
            return pkt
        self.stats["out_ce_marked"] += 1
        return TxPacket(header, pkt.payload, pkt.gso_size, pkt.csum_partial)

    def __getattr__(self, name: str) -> object:
        # Anything else (counters, listeners...) is the inner endpoint's.
        return getattr(self.inner, name)
