"""An in-memory network of sans-IO endpoints joined by impaired point-to-point links.

The network only decides *when* and *whether* a packet arrives; a driver
(:mod:`usertcp.net.driver`) owns the clock and the event queue and calls
:meth:`LinkDirection.arrive` when a delivery is due. Every random decision comes
from the network's own ``random.Random(seed)``, so a run is reproducible from its
seed (as long as the endpoints themselves are deterministic).

Per packet, a link direction applies, in this order: queue admission (tail drop
beyond ``queue_limit`` when ``bandwidth_bps`` is set; with ``ecn_threshold``, an
AQM-like step marker that, from that queue length on, sets CE on ECN-capable packets
and drops the others, RFC 3168 §5; with ``ecn_ramp``, the same with a probability that
rises linearly with the queue between two lengths, as RED's and the L4S DualQ's ramps
do), serialisation behind the packets already queued,
propagation ``delay``, then loss, duplication, corruption, reordering and jitter. Lost
packets still used the bandwidth: they were lost on the wire, not in the queue.

With ``backpressure`` the queue is the sending host's own interface queue, as a Linux
qdisc is: a full queue refuses the packet to the sending stack when the stack emits it
(``Stack.tx_refuse``), so TCP sees local congestion and retries later (Linux: the qdisc
answers NET_XMIT_DROP), instead of the packet vanishing in a tail drop.

With ``offload`` a link direction behaves as loopback or a virtio link with TSO/GRO: the
stacks on it emit TCP super-packets of up to 64 KiB (``TxPacket.gso_size``, checksum left
partial) and the link carries them whole, so the receiver takes one large segment, and the
checksum is trusted as loopback trusts CHECKSUM_PARTIAL. Segments that arrive together (due
at the same time on one direction: a poll batch) are coalesced as GRO does, into packets of
MSS-multiples up to 64 KiB (``wire/gro.py``; ``LinkStats.gro_merged`` counts them). Without
``offload`` (the default, what fidelity tests use) a super-packet a stack still emits is cut
into MSS segments with complete checksums before it enters the link (Linux software GSO).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields, replace
from ipaddress import IPv4Address, IPv6Address, ip_address
from typing import TYPE_CHECKING, Any, Literal

from usertcp.net.endpoint import Endpoint
from usertcp.wire import icmp
from usertcp.wire.gro import coalesce
from usertcp.wire.packet import build_packet, parse_packet
from usertcp.wire.segment import CWR, FIN, PSH, Buffer, TxPacket

if TYPE_CHECKING:
    from usertcp.net.pcap import PcapWriter

Address = str | IPv4Address | IPv6Address
TapWhere = Literal["send", "deliver"]
# (packet bytes, time, direction it travels on)
Tap = Callable[[bytes, float, "LinkDirection"], None]
# What a driver installs to be told about a future delivery.
Scheduler = Callable[[float, "LinkDirection", bytes], None]

# Largest TSO/GSO packet a stack on an offload link may emit: an IPv4 total length (or an
# IPv6 payload length) must fit 16 bits, with room for IP and TCP headers and options.
OFFLOAD_GSO_MAX_SIZE = 65535 - 60 - 60 - 40
# The frame size of the wire behind an offload link: GRO joins packets up to this size (wire
# segments); larger ones are TSO packets the link carries whole, as loopback and virtio do.
GRO_WIRE_MTU = 1500


@dataclass(frozen=True)
class LinkConfig:
    """The behaviour of one link direction. Probabilities are per packet."""

    delay: float = 0.001                 # one-way propagation, seconds
    bandwidth_bps: float | None = None   # None: infinitely fast, no queue
    queue_limit: int = 1000              # packets waiting or being serialised
    loss: float = 0.0
    reorder: float = 0.0                 # chance of an extra ``reorder_delay``
    reorder_delay: float | None = None   # None: 2 * delay
    duplicate: float = 0.0
    corrupt: float = 0.0                 # flip one checksummed bit
    jitter: float = 0.0                  # uniform extra delay in [0, jitter); keeps FIFO order
    mtu: int | None = None               # next-hop MTU: larger packets are dropped with an ICMP
                                         # "fragmentation needed" / "packet too big" to the sender
    mtu_icmp: bool = True                # False: an ICMP black hole (RFC 2923 §2.1), silent drops
    # AQM (needs bandwidth_bps): at this many queued packets, CE-mark ECT packets instead of
    # dropping them, and drop non-ECT ones (RFC 3168 §5); None: plain tail drop only.
    ecn_threshold: int | None = None
    # AQM ramp (needs bandwidth_bps): (min, max) queued packets; the CE-mark (or non-ECT drop)
    # probability is 0 at min, rises linearly, and is 1 from max on (RFC 9332 §A.1's ramp).
    ecn_ramp: tuple[int, int] | None = None
    backpressure: bool = False           # a full queue refuses a stack's packet synchronously
    # TSO/GSO and GRO as on loopback or virtio: super-packets (up to 64 KiB) travel whole, and
    # their checksums are trusted on delivery. Off: MSS-sized packets only (fidelity tests).
    offload: bool = False

    def __post_init__(self) -> None:
        for name in ("loss", "reorder", "duplicate", "corrupt"):
            p = getattr(self, name)
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name}={p} is not a probability")
        if self.delay < 0 or self.jitter < 0 or (self.reorder_delay is not None and self.reorder_delay < 0):
            raise ValueError("delays must be >= 0")
        if self.bandwidth_bps is not None and self.bandwidth_bps <= 0:
            raise ValueError("bandwidth_bps must be > 0 or None")
        if self.queue_limit < 1:
            raise ValueError("queue_limit must be >= 1")
        if self.mtu is not None and self.mtu < 68:
            raise ValueError("mtu must be >= 68 (RFC 791)")
        if self.ecn_threshold is not None and self.ecn_threshold < 1:
            raise ValueError("ecn_threshold must be >= 1 or None")
        if self.ecn_ramp is not None:
            lo, hi = self.ecn_ramp
            if not 0 <= lo < hi:
                raise ValueError("ecn_ramp must be (min, max) queue lengths with 0 <= min < max")
            if self.ecn_threshold is not None:
                raise ValueError("ecn_threshold (a step) and ecn_ramp are alternatives")
        if self.offload and self.mtu is not None:
            raise ValueError("an offload link carries 64 KiB packets: it has no smaller mtu")

    def with_(self, **changes: Any) -> LinkConfig:
        """A copy with some fields changed (``cfg.with_(loss=0.05)``)."""
        return replace(self, **changes)


@dataclass(slots=True)
class LinkStats:
    """Counters of one link direction. ``bytes`` counts what was offered to the link."""

    sent: int = 0
    delivered: int = 0
    lost: int = 0
    queue_drops: int = 0
    aqm_drops: int = 0                   # non-ECT packets the ECN step or ramp dropped
    ce_marked: int = 0                   # ECT packets the ECN step or ramp marked CE
    reordered: int = 0
    duplicated: int = 0
    corrupted: int = 0
    too_big: int = 0
    bytes: int = 0
    bytes_delivered: int = 0
    gro_merged: int = 0                  # packets GRO joined to the one before (offload links)

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class Host:
    """One endpoint attached to the network, with its addresses and routes.

    ``timer_at``/``timer_gen`` belong to the driver: the armed deadline and a
    generation number that makes older heap entries for this host stale.
    """

    __slots__ = ("network", "endpoint", "name", "addresses", "packed", "routes",
                 "timer_at", "timer_gen", "timer_spin", "reserving")

    def __init__(self, network: Network, endpoint: Endpoint, addresses: tuple[IPv4Address | IPv6Address, ...],
                 name: str) -> None:
        self.network = network
        self.endpoint = endpoint
        self.name = name
        self.addresses = addresses
        self.packed = frozenset(a.packed for a in addresses)
        self.routes: dict[bytes, LinkDirection] = {}   # packed destination -> direction
        self.timer_at: float | None = None
        self.timer_gen = 0
        self.timer_spin = 0
        self.reserving = False           # its endpoint asks for queue slots (backpressure)

    def __repr__(self) -> str:
        return f"Host({self.name!r}, {[str(a) for a in self.addresses]})"


class LinkDirection:
    """One direction of a link: a transmit queue, a wire and its impairments."""

    __slots__ = ("network", "src", "dst", "name", "stats", "config", "_impaired", "_reorder_delay",
                 "_busy_until", "_queue", "_last_arrival", "_reserved", "trusted_csum", "gro")

    def __init__(self, network: Network, src: Host, dst: Host, config: LinkConfig) -> None:
        self.network = network
        self.src = src
        self.dst = dst
        self.name = f"{src.name}->{dst.name}"
        self.stats = LinkStats()
        self._busy_until = 0.0           # when the transmitter finishes the last queued packet
        self._queue: deque[float] = deque()  # finish times of packets not yet fully serialised
        self._last_arrival = float("-inf")   # arrivals of in-order packets never go backwards
        self._reserved = 0               # slots promised to packets the sender has not handed over
        self.config = config
        self._impaired = False
        self._reorder_delay = 0.0
        self.trusted_csum = False        # deliveries skip checksum verification (offload)
        self.gro = False                 # deliveries due together are coalesced (offload)
        self.set_config(config)

    def set_config(self, config: LinkConfig) -> None:
        """Change the behaviour from now on; packets already in flight keep their fate."""
        self.config = config
        # One flag so an unimpaired link skips every random draw on the hot path.
        self._impaired = bool(config.loss or config.reorder or config.duplicate or config.corrupt
                              or config.jitter)
        self._reorder_delay = 2 * config.delay if config.reorder_delay is None else config.reorder_delay
        if config.backpressure:
            self.network._enable_backpressure(self.src)
        # A corrupting link must leave the checksum to catch its flips.
        self.trusted_csum = config.offload and not config.corrupt
        # GRO (Linux coalesces only checksum-verified segments): the driver hands the packets
        # due at the same time to arrive_batch().
        self.gro = self.trusted_csum
        if config.offload:
            _enable_offload(self.src.endpoint)

    def _admit(self, now: float) -> bool:
        """Backpressure: reserve a queue slot for a packet the sender is emitting now, or
        refuse it. The slot is used when the driver hands the packet over (``transmit``), at
        this time or later, when the queue can only have drained further."""
        if self.config.bandwidth_bps is None:
            return True
        q = self._queue
        while q and q[0] <= now:
            q.popleft()
        if len(q) + self._reserved >= self.config.queue_limit:
            return False
        self._reserved += 1
        return True

    @property
    def queue_length(self) -> int:
        return len(self._queue)

    def _ramp_marks(self, qlen: int, ramp: tuple[int, int]) -> bool:
        """The ramp AQM's decision for a packet meeting ``qlen`` queued ones."""
        lo, hi = ramp
        if qlen <= lo:
            return False
        return qlen >= hi or self.network.rng.random() < (qlen - lo) / (hi - lo)

    def send(self, data: bytes, now: float) -> None:
        """Offer one packet to this direction at time ``now``."""
        st = self.stats
        st.sent += 1
        st.bytes += len(data)
        net = self.network
        if net._send_taps:
            net._run_taps(net._send_taps, data, now, self)
        cfg = self.config
        if cfg.mtu is not None and len(data) > cfg.mtu:
            self._too_big(data, now, cfg.mtu)
            return
        bw = cfg.bandwidth_bps
        if bw is None:
            t = now + cfg.delay
        else:
            q = self._queue
            while q and q[0] <= now:
                q.popleft()
            if len(q) >= cfg.queue_limit:
                st.queue_drops += 1
                return
            thr = cfg.ecn_threshold
            if (thr is not None and len(q) >= thr) or (cfg.ecn_ramp is not None
                                                        and self._ramp_marks(len(q), cfg.ecn_ramp)):
                marked = ce_mark(data)
                if marked is None:
                    st.aqm_drops += 1
                    return
                if marked is not data:
                    st.ce_marked += 1
                    data = marked
            busy = self._busy_until
            finish = (busy if busy > now else now) + len(data) * 8 / bw
            self._busy_until = finish
            q.append(finish)
            t = finish + cfg.delay
        schedule = net._schedule
        if schedule is None:
            raise RuntimeError("no driver is attached to this network")
        if not self._impaired:
            if t < self._last_arrival:
                t = self._last_arrival
            self._last_arrival = t
            schedule(t, self, data)
            return

        rng = net.rng
        if cfg.loss and rng.random() < cfg.loss:
            st.lost += 1
            return
        copies = 1
        if cfg.duplicate and rng.random() < cfg.duplicate:
            st.duplicated += 1
            copies = 2
        if cfg.jitter:
            t += rng.random() * cfg.jitter
        reordered = bool(cfg.reorder) and rng.random() < cfg.reorder
        if reordered:
            # Held back without moving _last_arrival, so later packets overtake it.
            st.reordered += 1
            t += self._reorder_delay
        else:
            if t < self._last_arrival:
                t = self._last_arrival
            self._last_arrival = t
        for _ in range(copies):
            pkt = data
            if cfg.corrupt and rng.random() < cfg.corrupt:
                st.corrupted += 1
                pkt = _flip_bit(data, rng)
            schedule(t, self, pkt)

    def _too_big(self, data: bytes, now: float, mtu: int) -> None:
        """Act as the router in front of a smaller link (RFC 1191 §4, RFC 8201 §4): drop the
        packet and tell its source, unless it is an IPv4 packet the router may fragment."""
        self.stats.too_big += 1
        if not self.config.mtu_icmp:
            return
        v6 = data[0] >> 4 == 6
        if not v6 and not data[6] & 0x40:
            return      # DF clear: a real router would fragment; we model only the drop
        src = data[8:24] if v6 else data[12:16]
        back = self.dst.routes.get(src)
        if back is None:
            return
        reply = icmp.error_for_packet(data, mtu=mtu)
        if reply is not None:
            back.send(reply, now)

    def arrive(self, data: bytes, now: float) -> Host:
        """Account a delivery that is due now (called by the driver); returns the receiver."""
        st = self.stats
        st.delivered += 1
        st.bytes_delivered += len(data)
        net = self.network
        if net._deliver_taps:
            net._run_taps(net._deliver_taps, data, now, self)
        return self.dst

    def arrive_batch(self, batch: list[bytes], now: float) -> list[bytes]:
        """Account deliveries due together (one poll batch) and return what GRO hands the
        receiver: runs of MSS-sized segments of one flow joined into MSS-multiples
        (``wire/gro.py``); TSO packets pass whole. Deliver taps see the result, as tcpdump
        on a Linux receiver sees packets after GRO."""
        if len(batch) == 1:
            self.arrive(batch[0], now)
            return batch
        out = coalesce(batch, GRO_WIRE_MTU)
        st = self.stats
        st.delivered += len(batch)
        st.bytes_delivered += sum(map(len, batch))
        st.gro_merged += len(batch) - len(out)
        net = self.network
        if net._deliver_taps:
            for data in out:
                net._run_taps(net._deliver_taps, data, now, self)
        return out

    def __repr__(self) -> str:
        return f"LinkDirection({self.name})"


def _enable_offload(endpoint: object) -> None:
    """Tell a stack on an offload link that it may emit TSO super-packets with partial
    checksums (what a driver does for a TUN device with offloads, ``apps.serve``). Links
    without offload segment whatever it emits (``software_gso``)."""
    if hasattr(endpoint, "gso_max_size") and hasattr(endpoint, "tx_csum_offload"):
        setattr(endpoint, "gso_max_size", OFFLOAD_GSO_MAX_SIZE)   # noqa: B010 (duck-typed Stack)
        setattr(endpoint, "tx_csum_offload", True)                # noqa: B010


def software_gso(packet: TxPacket) -> list[bytes]:
    """Linux software GSO (tcp_gso_segment) for a link without offloads: a TSO packet becomes
    ``gso_size`` segments and a partial checksum is completed. Each segment repeats the
    headers with its own sequence number; FIN and PSH stay on the last one, CWR on the first
    only (RFC 3168 §6.1.2), as the kernel does. Options (timestamps) are copied unchanged."""
    data = packet.tobytes()
    seg = parse_packet(data, verify_checksum=False)
    payload = seg.payload
    size = packet.gso_size if packet.gso_size > 0 else max(len(payload), 1)
    v4 = seg.ip_version == 4
    df = not v4 or bool(data[6] & 0x40)
    out: list[bytes] = []
    total = len(payload)
    off = 0
    while True:
        end = min(off + size, total)
        last = end >= total
        flags = seg.flags
        if not last:
            flags &= ~(FIN | PSH)
        if off:
            flags &= ~CWR
        out.append(build_packet(
            src=seg.src, dst=seg.dst, sport=seg.sport, dport=seg.dport,
            seq=(seg.seq + off) & 0xFFFFFFFF, ack=seg.ack, flags=flags, window=seg.window,
            urg_ptr=seg.urg_ptr, options=bytes(seg.raw_options), payload=(payload[off:end],),
            tos=seg.tos, ttl=seg.ttl, flow_label=seg.flow_label, df=df).tobytes())
        off = end
        if last:
            return out


def ce_mark(data: bytes) -> bytes | None:
    """``data`` with the ECN field set to CE (RFC 3168 §5), or None if it is not ECN-capable.

    A packet already marked CE is returned as is. IPv4's header checksum is recomputed; the
    IPv6 traffic class is not covered by any checksum.
    """
    if len(data) >= 20 and data[0] >> 4 == 4:
        ecn = data[1] & 3
        if ecn == 0:
            return None
        if ecn == 3:
            return data
        ihl = (data[0] & 15) * 4
        buf = bytearray(data)
        buf[1] |= 3
        buf[10:12] = b"\0\0"
        total = sum(int.from_bytes(buf[i:i + 2], "big") for i in range(0, ihl, 2))
        while total > 0xFFFF:
            total = (total & 0xFFFF) + (total >> 16)
        buf[10:12] = (0xFFFF - total).to_bytes(2, "big")
        return bytes(buf)
    if len(data) >= 40 and data[0] >> 4 == 6:
        ecn = (data[1] >> 4) & 3          # traffic class bits 0-1 sit at bits 4-5 of byte 1
        if ecn == 0:
            return None
        if ecn == 3:
            return data
        buf = bytearray(data)
        buf[1] |= 0x30
        return bytes(buf)
    return None


def _flip_bit(data: bytes, rng: random.Random) -> bytes:
    """A copy of ``data`` with one bit flipped where a checksum covers it.

    IPv4: the header checksum covers the header and TCP's the rest. IPv6 has no
    header checksum, so bytes 0..7 (version, traffic class, flow label, length,
    next header, hop limit) are skipped: a flip there (e.g. an ECN bit) would pass
    unnoticed. Addresses and the upper layer are covered by the TCP pseudo-header.
    """
    start = 8 if len(data) > 8 and data[0] >> 4 == 6 else 0
    if len(data) <= start:
        return data
    bit = rng.randrange(start * 8, len(data) * 8)
    buf = bytearray(data)
    buf[bit >> 3] ^= 0x80 >> (bit & 7)
    return bytes(buf)


class Link:
    """A bidirectional link between two hosts: ``ab`` (a to b) and ``ba`` (b to a)."""

    __slots__ = ("a", "b", "ab", "ba")

    def __init__(self, ab: LinkDirection, ba: LinkDirection) -> None:
        self.a = ab.src
        self.b = ab.dst
        self.ab = ab
        self.ba = ba

    def set_config(self, config_ab: LinkConfig, config_ba: LinkConfig | None = None) -> None:
        """Reconfigure both directions (``config_ba`` defaults to ``config_ab``)."""
        self.ab.set_config(config_ab)
        self.ba.set_config(config_ab if config_ba is None else config_ba)

    def direction(self, src: Host) -> LinkDirection:
        """The direction that carries packets sent by ``src``."""
        if src is self.a:
            return self.ab
        if src is self.b:
            return self.ba
        raise ValueError(f"{src!r} is not on this link")

    @property
    def directions(self) -> tuple[LinkDirection, LinkDirection]:
        return (self.ab, self.ba)

    def __repr__(self) -> str:
        return f"Link({self.a.name}<->{self.b.name})"


@dataclass(eq=False)   # identity, so remove() takes out exactly this tap
class _TapEntry:
    callback: Tap
    directions: frozenset[int] | None   # id()s of the directions it watches; None: all


class Network:
    """Hosts and links, plus the seeded random source for every impairment."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.hosts: list[Host] = []
        self.links: list[Link] = []
        # Packets a host sent that no link carries, and ones too short to route.
        self.stats: dict[str, int] = {"no_route": 0, "malformed": 0}
        self._owner: dict[bytes, Host] = {}
        self._send_taps: list[_TapEntry] = []
        self._deliver_taps: list[_TapEntry] = []
        self._schedule: Scheduler | None = None
        self.driver: object | None = None

    # -- topology -----------------------------------------------------------------

    def add_host(self, endpoint: Endpoint, addresses: Iterable[Address], name: str | None = None) -> Host:
        addrs = tuple(ip_address(a) if isinstance(a, str) else a for a in addresses)
        for a in addrs:
            if a.packed in self._owner:
                raise ValueError(f"address {a} already belongs to {self._owner[a.packed]!r}")
        host = Host(self, endpoint, addrs, name or f"h{len(self.hosts)}")
        for a in addrs:
            self._owner[a.packed] = host
        self.hosts.append(host)
        return host

    def connect(self, host_a: Host, host_b: Host, config_ab: LinkConfig | None = None,
                config_ba: LinkConfig | None = None) -> Link:
        """Join two hosts; each direction gets its own config (``config_ba`` defaults to ``config_ab``)."""
        if host_a is host_b:
            raise ValueError("cannot link a host to itself")
        cfg_ab = LinkConfig() if config_ab is None else config_ab
        ab = LinkDirection(self, host_a, host_b, cfg_ab)
        ba = LinkDirection(self, host_b, host_a, cfg_ab if config_ba is None else config_ba)
        for p in host_b.packed:
            host_a.routes[p] = ab
        for p in host_a.packed:
            host_b.routes[p] = ba
        link = Link(ab, ba)
        self.links.append(link)
        return link

    def host_of(self, address: Address) -> Host | None:
        a = ip_address(address) if isinstance(address, str) else address
        return self._owner.get(a.packed)

    def attach_driver(self, driver: object, schedule: Scheduler) -> None:
        if self._schedule is not None:
            raise RuntimeError("a driver is already attached to this network")
        self.driver = driver
        self._schedule = schedule

    # -- forwarding ---------------------------------------------------------------

    def transmit(self, host: Host, packet: TxPacket | Buffer, now: float) -> None:
        """Send one packet from ``host``: this is where it becomes bytes."""
        head = packet.header if isinstance(packet, TxPacket) else packet
        n = len(head)
        if n >= 20 and head[0] >> 4 == 4:
            dst = bytes(head[16:20])
        elif n >= 40 and head[0] >> 4 == 6:
            dst = bytes(head[24:40])
        else:
            self.stats["malformed"] += 1
            return
        d = host.routes.get(dst)
        if d is None:
            self.stats["no_route"] += 1
            return
        if host.reserving and d._reserved:
            d._reserved -= 1             # the slot _admit promised it
        if not isinstance(packet, TxPacket):
            d.send(bytes(packet), now)
        elif d.config.offload or not (packet.gso_size or packet.csum_partial):
            d.send(packet.tobytes(), now)
        else:
            for seg in software_gso(packet):
                d.send(seg, now)

    def _enable_backpressure(self, host: Host) -> None:
        """Install the queue-admission hook on ``host``'s endpoint if it has one (a Stack's
        ``tx_refuse``); an endpoint without it, or with another hook, keeps tail drops."""
        ep = host.endpoint
        if host.reserving or getattr(ep, "tx_refuse", False) is not None:
            return
        host.reserving = True
        routes = host.routes

        def refuse(pkt: TxPacket) -> bool:
            h = pkt.header
            d = routes.get(h[16:20] if h[0] >> 4 == 4 else h[24:40])
            if d is None or not d.config.backpressure:
                return False
            now = getattr(self.driver, "now", None)
            return not d._admit(now() if now is not None else 0.0)

        setattr(ep, "tx_refuse", refuse)   # noqa: B010 (the Endpoint protocol does not declare it)

    # -- taps ---------------------------------------------------------------------

    def add_tap(self, callback: Tap, *, link: Link | LinkDirection | None = None,
                where: TapWhere = "send") -> Callable[[], None]:
        """Call ``callback(packet_bytes, time, direction)`` for each packet.

        ``where="send"``: every packet a host puts on a link, at send time, before
        queue drops and impairments (like tcpdump on the sender). ``"deliver"``:
        what the receiver gets (after loss/corruption), at arrival time.
        Returns a function that removes the tap.
        """
        if link is None:
            dirs = None
        elif isinstance(link, Link):
            dirs = frozenset((id(link.ab), id(link.ba)))
        else:
            dirs = frozenset((id(link),))
        if where not in ("send", "deliver"):
            raise ValueError(f"where={where!r}")
        entry = _TapEntry(callback, dirs)
        taps = self._send_taps if where == "send" else self._deliver_taps
        taps.append(entry)

        def remove() -> None:
            if entry in taps:
                taps.remove(entry)
        return remove

    def attach_pcap(self, writer: PcapWriter, link: Link | LinkDirection | None = None, *,
                    where: TapWhere = "send") -> Callable[[], None]:
        """Capture every link (or one link or direction) into ``writer``."""
        def tap(data: bytes, now: float, _d: LinkDirection) -> None:
            writer.write(data, now)
        return self.add_tap(tap, link=link, where=where)

    @staticmethod
    def _run_taps(taps: list[_TapEntry], data: bytes, now: float, d: LinkDirection) -> None:
        key = id(d)
        for e in taps:
            if e.directions is None or key in e.directions:
                e.callback(data, now, d)

    def link_stats(self) -> dict[str, dict[str, int]]:
        """Every direction's counters by name (``"h0->h1"``)."""
        return {d.name: d.stats.as_dict() for link in self.links for d in link.directions}
