"""Structure-aware fuzzing: inputs are programs that drive whole connections.

A byte-level mutator mostly produces packets that die at the checksum or the length checks.
Here the input bytes are read as a program (``ByteSource``, a pure-Python counterpart of
atheris' FuzzedDataProvider) of peer actions against a server stack that runs the echo and
source applications: open a connection, send a segment whose every field is chosen from the
input but built by ``build_packet`` (so checksums and lengths are always right), with
sequence and acknowledgement numbers near the live ones, options (MSS, window scale, SACK
permitted, timestamps, SACK blocks over the data in flight), payloads; flip a few header
bytes and fix the checksums again; let time pass (timers fire). ``check_invariants`` runs
after every step. A program reaches the handshake, data transfer, SACK recovery, RST/SYN
handling, window probing and closing, which is where the hostile-peer bugs are.

``run_program`` is the target; fuzz/fuzz_struct.py hands it to atheris, and tests/
test_fuzz_struct.py runs it on a fixed budget of deterministic inputs in CI.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from usertcp.apps.basic import BasicServer
from usertcp.tcp.config import StackConfig
from usertcp.tcp.invariants import check_invariants
from usertcp.tcp.stack import Stack
from usertcp.wire.checksum import internet_checksum, pseudo_header_sum
from usertcp.wire.packet import build_packet, parse_packet
from usertcp.wire.segment import ACK, CWR, ECE, FIN, PSH, RST, SYN, URG
from usertcp.wire.tcp import encode_options

SERVER = bytes([10, 7, 0, 1])
CLIENT = bytes([10, 7, 0, 2])
ECHO, SOURCE = 7, 19
MASK = 0xFFFFFFFF
FLAG_CHOICES = (ACK, ACK, ACK | PSH, ACK | PSH, SYN, ACK | FIN, RST, RST | ACK, SYN | ACK, FIN,
                SYN | FIN, 0, ACK | URG, ACK | ECE | CWR, SYN | ECE | CWR, SYN | RST)
SECRETS = (bytes(range(16)), bytes(range(16, 32)))


class ByteSource:
    """Reads choices from the input; once it is used up every read returns 0."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    @property
    def left(self) -> int:
        return len(self.data) - self.pos

    def byte(self) -> int:
        if self.pos >= len(self.data):
            return 0
        b = self.data[self.pos]
        self.pos += 1
        return b

    def uint(self, nbytes: int) -> int:
        v = 0
        for _ in range(nbytes):
            v = (v << 8) | self.byte()
        return v

    def below(self, n: int) -> int:
        return self.uint(2) % n if n > 1 else 0

    def signed(self, span: int) -> int:
        """Mostly 0 (the exact live value), else within +-span, else anything."""
        kind = self.byte() % 8
        if kind < 4:
            return 0
        if kind < 7:
            return self.below(2 * span + 1) - span
        return self.uint(4)


@dataclass
class Flow:
    """The peer's view of one connection: its own sequence space and what it learned."""

    port: int
    dport: int
    isn: int
    nxt: int = 0                 # next sequence offset the peer sends (0: SYN not yet sent)
    server_isn: int = -1
    server_high: int = 0         # highest server offset seen
    acked: int = 0
    ts: int = 1


@dataclass
class Outcome:
    packets: int = 0
    steps: int = 0
    checks: int = 0
    counters: dict[str, int] = field(default_factory=dict)


def _options(src: ByteSource, f: Flow, syn: bool) -> bytes:
    bits = src.byte()
    ts = (f.ts, 0) if bits & 1 else None
    f.ts += 1 + src.below(1000)
    try:
        if syn:
            return encode_options(mss=src.below(1461) if bits & 2 else -1,
                                  wscale=src.below(16) if bits & 4 else -1,
                                  sack_permitted=bool(bits & 8), ts=ts)
        blocks = []
        if bits & 16 and f.server_isn >= 0:
            for _ in range(1 + src.below(4 if ts is None else 3)):
                lo = f.acked + src.below(max(f.server_high - f.acked, 1) + 1)
                hi = lo + 1 + src.below(max(f.server_high - lo, 1) + 1)
                blocks.append(((f.server_isn + lo + src.signed(4)) & MASK, (f.server_isn + hi) & MASK))
        return encode_options(ts=ts, sack_blocks=blocks)
    except ValueError:
        return b""


def _segment(src: ByteSource, f: Flow) -> bytes:
    flags = FLAG_CHOICES[src.below(len(FLAG_CHOICES))]
    if src.byte() % 16 == 0:
        flags = src.byte()
    syn = bool(flags & SYN)
    plen = 0 if src.byte() % 3 == 0 else src.below(1500)
    ack_off = f.acked + src.below(max(f.server_high - f.acked, 0) + 1)
    seq = (f.isn + f.nxt + src.signed(70000)) & MASK
    ack = (f.server_isn + ack_off + src.signed(70000)) & MASK if f.server_isn >= 0 else src.uint(4)
    pkt = build_packet(src=CLIENT, dst=SERVER, sport=f.port, dport=f.dport, seq=seq, ack=ack,
                       flags=flags, window=src.uint(2), options=_options(src, f, syn),
                       payload=[bytes([0x41 + f.port % 26]) * plen] if plen else [],
                       tos=src.byte() & 3).tobytes()
    if flags & ACK and f.server_isn >= 0 and ack_off > f.acked and src.byte() % 2:
        f.acked = ack_off
    f.nxt += plen + (1 if syn else 0) + (1 if flags & FIN else 0)
    if src.byte() % 8 == 0:
        pkt = _flip(src, pkt)
    return pkt


def _flip(src: ByteSource, pkt: bytes) -> bytes:
    """Change a few TCP header bytes (not the checksum), then fix the checksum again."""
    raw = bytearray(pkt)
    ihl = (raw[0] & 15) * 4
    for _ in range(1 + src.below(3)):
        pos = ihl + src.below(20)
        if pos in (ihl + 16, ihl + 17):
            continue
        raw[pos] = src.byte()
    raw[ihl + 16:ihl + 18] = b"\0\0"
    seg = bytes(raw[ihl:])
    total = pseudo_header_sum(bytes(raw[12:16]), bytes(raw[16:20]), 6, len(seg))
    raw[ihl + 16:ihl + 18] = internet_checksum([seg], total).to_bytes(2, "big")
    return bytes(raw)


def _learn(flows: dict[int, Flow], out: bytes) -> None:
    """What the peer learns from a segment the server sent: its ISN and how far it sent."""
    try:
        seg = parse_packet(out)
    except Exception:
        return
    f = flows.get(seg.dport)
    if f is None:
        return
    if seg.flags & SYN:
        f.server_isn = seg.seq
    if f.server_isn >= 0:
        off = (seg.seq - f.server_isn) & MASK
        if off < 1 << 30:
            f.server_high = max(f.server_high, off + len(seg.payload) + (1 if seg.flags & (SYN | FIN) else 0))


def run_program(data: bytes, *, max_steps: int = 400) -> Outcome:
    """Interpret ``data`` as a program of peer actions; raises on any bug (an exception out of
    the stack, or a broken invariant)."""
    src = ByteSource(data)
    cfg = StackConfig(isn_secret=SECRETS[0], ts_secret=SECRETS[1], mem_limit=4 << 20,
                      syncookies=src.byte() % 3, sack=bool(src.byte() % 4), timestamps=bool(src.byte() % 4))
    stack = Stack([SERVER], cfg, name="fuzz-server")
    BasicServer("echo", stack.listen(ECHO), lambda: stack.now)
    BasicServer("source", stack.listen(SOURCE), lambda: stack.now, source_bytes=20000)
    rng = random.Random(src.uint(2))
    flows: dict[int, Flow] = {}
    now = 0.0
    out = Outcome()
    while src.left > 0 and out.steps < max_steps:
        out.steps += 1
        op = src.byte() % 8
        if op == 0 or not flows:
            port = 40000 + len(flows)
            f = flows[port] = Flow(port, ECHO if src.byte() % 2 else SOURCE, rng.getrandbits(32))
            syn = build_packet(src=CLIENT, dst=SERVER, sport=port, dport=f.dport, seq=f.isn, ack=0,
                               flags=SYN, window=65535, options=_options(src, f, True))
            f.nxt = 1
            stack.receive(syn.tobytes(), now)
        elif op <= 5:
            f = list(flows.values())[src.below(len(flows))]
            stack.receive(_segment(src, f), now)
        else:
            now += [0.001, 0.05, 0.3, 2.0][src.byte() % 4]
            t = stack.get_timer()
            while t is not None and t <= now:
                stack.handle_timer(t)
                t = stack.get_timer()
        out.packets += 1
        for pkt in stack.datagrams_to_send():
            _learn(flows, pkt.tobytes())
        check_invariants(stack)
        out.checks += 1
    out.counters = stack.counters.snapshot()
    return out


def random_program(rng: random.Random) -> bytes:
    return rng.randbytes(rng.randrange(64, 2048))
