"""``usertcp bench hostile``: availability and per-ACK cost under hostile peers (issue 20).

Method: (1) SACK cost: a server stack sends a flight of N pieces to a peer that announced
MSS 48 (the CVE-2019-11477/11478 setting) over a TSO link, with as much again waiting in the
send buffer. The same flight is fed K ACKs of one kind, each reporting four more MSS
delivered: ordinary cumulative ACKs; the ACKs of an honest receiver that lost the first
piece (one SACK block growing); or attack ACKs (four crafted blocks: new single pieces that
cut records, the same large blocks again, or both). Only ``Stack.receive`` is timed, in
thread CPU time, including what each ACK clocks out; cost per ACK and attack over the
honest kinds, per N.
(2) Availability: one server stack (echo, and a bulk source for the SACK attacker) with a
bounded input queue (drop-tail, a NIC ring); legitimate clients on another stack, four at a
time, each connect, send 1 KiB, read its echo and close, for a fixed span. Time is the
server's own CPU time (thread time per turn, or an idle tick): the server has a core of its
own and the clients' and attackers' work costs it nothing. Attacks, at a fixed packet rate
per server-second: a SYN flood from random spoofed sources; zero-window hoarding (clients
that write and never read until the stack's account is nearly full); a SACK storm against a
bulk download with MSS 48. Completed connections per second and latency per attack, beside
the same run without attack.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import random
import re
import shutil
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from usertcp.apps.basic import BasicServer
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import Connection
from usertcp.tcp.stack import Stack
from usertcp.wire.packet import build_packet, parse_packet
from usertcp.wire.segment import ACK, SYN
from usertcp.wire.tcp import encode_options

SERVER = "10.20.0.1"
ATTACKER = "10.20.0.66"
CLIENT = "10.20.0.2"
PORT = 7
MASK = 0xFFFFFFFF
TSO_MAX = 65535 - 60 - 60 - 40      # as the offload links (memnet OFFLOAD_GSO_MAX_SIZE)


class RawPeer:
    """A hand-driven remote end: builds packets to a stack, reads what the stack sends."""

    __slots__ = ("ip", "isn", "local_isn", "port", "rcv_nxt", "server_ip", "server_port", "stack")

    def __init__(self, stack: Stack, ip: str, port: int, server: str, server_port: int,
                 isn: int = 1_000_000) -> None:
        self.stack = stack
        self.ip = ipaddress.ip_address(ip).packed
        self.server_ip = ipaddress.ip_address(server).packed
        self.port = port
        self.server_port = server_port
        self.isn = isn
        self.local_isn = 0
        self.rcv_nxt = 0

    def packet(self, flags: int, seq: int, ack: int, *, win: int = 65535, options: bytes = b"",
               payload: bytes = b"") -> bytes:
        """Raw IP bytes; ``seq`` relative to this peer's ISN, ``ack`` an absolute number."""
        pkt = build_packet(src=self.ip, dst=self.server_ip, sport=self.port, dport=self.server_port,
                           seq=(self.isn + seq) & MASK, ack=ack & MASK, flags=flags, window=win,
                           options=options, payload=[payload] if payload else [])
        return pkt.tobytes()

    def handshake(self, now: float, options: bytes) -> Connection:
        """SYN with ``options``, the stack's SYN-ACK, the final ACK; the accepted connection."""
        st = self.stack
        st.receive(self.packet(SYN, 0, 0, options=options), now)
        for out in st.datagrams_to_send():
            seg = parse_packet(out.tobytes())
            if seg.flags & SYN and seg.dport == self.port:
                self.local_isn = seg.seq
        st.receive(self.packet(ACK, 1, self.local_isn + 1), now)
        st.datagrams_to_send()
        key = (self.server_ip, self.server_port, self.ip, self.port)
        return st.connections[key]


# ------------------------------------------------------------------------ (1) SACK cost


def _loaded_sender(pieces: int) -> tuple[Stack, RawPeer, Connection, float]:
    """A connection with ``pieces`` MSS-48 pieces in flight in a few TSO records."""
    sndbuf = max(pieces * 48 * 2, 1 << 16)
    st = Stack([SERVER], StackConfig(wmem=(4096, sndbuf, sndbuf), isn_secret=b"i" * 16,
                                     ts_secret=b"t" * 16), name="sender")
    st.gso_max_size = TSO_MAX
    st.listen(PORT)
    peer = RawPeer(st, ATTACKER, 40000, SERVER, PORT)
    now = 1.0
    conn = peer.handshake(now, encode_options(mss=48, sack_permitted=True, wscale=7))
    data = bytes(sndbuf)
    for _ in range(1000):                       # slow start to a window of ``pieces``
        if conn.cc.cwnd >= pieces * conn.mss and conn.snd_una == conn.snd_max:
            break
        if conn.cc.cwnd < pieces * conn.mss:
            conn.send(data[:conn.send_space], now)
        st.datagrams_to_send()
        now += 0.01
        st.receive(peer.packet(ACK, 1, conn.iss + conn.snd_max, win=65535), now)
        st.datagrams_to_send()
    else:
        raise RuntimeError("the warm-up did not open the window")
    conn.send(data[:pieces * conn.mss], now)
    st.datagrams_to_send()
    conn.send(data[:conn.send_space], now)     # more waits: every ACK that frees room clocks it out
    st.datagrams_to_send()
    return st, peer, conn, now + 0.001


def _sack_blocks(pattern: str, conn: Connection, una: int, i: int, pieces: int) -> list[tuple[int, int]]:
    """The four blocks of attack ACK number ``i`` (absolute sequence numbers)."""
    mss = conn.mss
    base = conn.iss + una
    if pattern == "split":
        # One MSS out of every two, four new ones per ACK: each cuts a record twice.
        first = 1 + 8 * i
        return [(base + (first + 2 * k) * mss, base + (first + 2 * k + 1) * mss) for k in range(4)]
    if pattern == "span":
        # The same large blocks again and again: the whole flight but the first MSS, in four.
        q = max((pieces - 1) // 4, 1)
        return [(base + (1 + k * q) * mss, base + (1 + (k + 1) * q) * mss) for k in range(4)]
    # "mixed": two new single pieces (splits) and two blocks over everything SACKed so far.
    first = 1 + 4 * i
    far = base + (first + 3) * mss
    return [(base + first * mss, base + (first + 1) * mss),
            (base + (first + 2) * mss, base + (first + 3) * mss),
            (base + mss, far), (base + mss, far)]


def _prepared_acks(pieces: int, acks: int, pattern: str) -> tuple[Stack, list[bytes], float]:
    """A freshly loaded sender and ``acks`` ACKs of one kind for it."""
    st, peer, conn, now = _loaded_sender(pieces)
    una = conn.snd_una
    packets = []
    for i in range(acks):
        if pattern == "ordinary":
            packets.append(peer.packet(ACK, 1, conn.iss + una + 4 * (i + 1) * conn.mss))
        elif pattern == "recovery":
            top = conn.iss + una + (1 + 4 * (i + 1)) * conn.mss
            block = ((conn.iss + una + conn.mss) & MASK, top & MASK)
            packets.append(peer.packet(ACK, 1, conn.iss + una, options=encode_options(sack_blocks=[block])))
        else:
            blocks = [(a & MASK, b & MASK) for a, b in _sack_blocks(pattern, conn, una, i, pieces)]
            packets.append(peer.packet(ACK, 1, conn.iss + una, options=encode_options(sack_blocks=blocks)))
    return st, packets, now


def _feed(st: Stack, packets: list[bytes], now: float) -> float:
    """Hand every ACK to the stack; seconds of thread CPU spent in ``Stack.receive``."""
    spent = 0.0
    for pkt in packets:
        t0 = time.thread_time()
        st.receive(pkt, now)
        spent += time.thread_time() - t0
        st.datagrams_to_send()
        now += 1e-5
    return spent


def _time_acks(pieces: int, acks: int, pattern: str) -> float:
    """Mean seconds per ACK: ``acks`` ACKs of one kind fed to a freshly loaded sender."""
    st, packets, now = _prepared_acks(pieces, acks, pattern)
    return _feed(st, packets, now) / max(acks, 1)


# The instructions of feeding the ACKs only: the child calls libc qsort on two elements, whose
# one comparison runs the feed, and callgrind collects only inside qsort (--toggle-collect;
# glibc's qsort tail-calls __qsort_r, hence the pattern).
_COLLECTED = re.compile(rb"Collected\s*:\s*(\d+)")


def _instructions_per_ack(pieces: int, acks: int, pattern: str) -> float:
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", "--collect-atstart=no",
           "--toggle-collect=*qsort*", sys.executable, "-m", "usertcp.bench.hostile",
           "--callgrind-child", pattern, str(pieces), str(acks)]
    res = subprocess.run(cmd, capture_output=True, check=True, timeout=1800,
                         env={**os.environ, "PYTHONHASHSEED": "0"})
    m = _COLLECTED.search(res.stderr)
    if m is None:
        raise RuntimeError("callgrind printed no instruction count")
    return int(m.group(1)) / max(acks, 1)


def _callgrind_child(pattern: str, pieces: int, acks: int) -> None:
    st, packets, now = _prepared_acks(pieces, acks, pattern)
    libc = ctypes.CDLL(None)
    compare = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)

    def feed(_a: int | None, _b: int | None) -> int:
        _feed(st, packets, now)
        return 0

    pair = (ctypes.c_int * 2)(0, 1)
    libc.qsort(pair, 2, ctypes.sizeof(ctypes.c_int), compare(feed))


PATTERNS = ("ordinary", "recovery", "split", "span", "mixed")
ATTACKS = ("split", "span", "mixed")


def sack_cost(queue_lengths: tuple[int, ...] = (100, 1000, 10000), acks: int = 200,
              repeat: int = 3, instructions: bool = False) -> dict[str, Any]:
    """Per queue length: microseconds per ordinary ACK and per attack ACK of each pattern;
    with ``instructions``, callgrind instruction counts per ACK too (stable ratios)."""
    if instructions and shutil.which("valgrind") is None:
        raise RuntimeError("instructions=True needs valgrind (apt-get install valgrind)")
    out: dict[str, Any] = {}
    worst: dict[str, float] = {}
    for n in queue_lengths:
        k = max(min(acks, n // 10), 4)
        row: dict[str, float] = {}
        for pattern in PATTERNS:
            row[f"{pattern}_us"] = round(min(_time_acks(n, k, pattern) for _ in range(repeat)) * 1e6, 2)
            if instructions:
                row[f"{pattern}_instr"] = round(_instructions_per_ack(n, k, pattern))
        for unit in ("us", "instr") if instructions else ("us",):
            for pattern in ATTACKS:
                for base in ("ordinary", "recovery"):
                    den = row[f"{base}_{unit}"]
                    key = f"{pattern}_{unit}_over_{base}" if unit == "instr" else f"{pattern}_over_{base}"
                    row[key] = round(row[f"{pattern}_{unit}"] / den, 2) if den else 0.0
                    wkey = f"worst_{unit}_over_{base}" if unit == "instr" else f"worst_over_{base}"
                    worst[wkey] = max(worst.get(wkey, 0.0), row[key])
        row["acks"] = k
        out[str(n)] = row
    out.update(worst)
    return out


def _flag(value: object) -> bool:
    """A boolean option, also as ``usertcp bench -o key=False`` passes it (a string)."""
    return str(value).lower() not in ("0", "false", "no", "off", "")


def run(span: float = 2.0, clients: int = 4, acks: int = 200, repeat: int = 3,
        queue_lengths: str = "100,1000,10000", rate: float = 2000.0, hoarders: int = 48,
        mem_limit: int = 8 << 20, storm_pieces: int = 4000, instructions: bool = False,
        availability_run: bool = True, **_: Any) -> dict[str, Any]:
    """Both parts; ``instructions`` adds callgrind counts per ACK, whose ratios decide the
    goal (CPU time on a shared machine is noisy); ``availability_run=False`` skips part (2)."""
    method = __doc__.split("\n\n")[1].replace("\n", " ") if __doc__ else ""
    lengths = tuple(int(x) for x in str(queue_lengths).split(",") if x)
    instructions = _flag(instructions)
    out: dict[str, Any] = {"method": method}
    cost = out["sack_cost"] = sack_cost(lengths, acks, repeat, instructions)
    if _flag(availability_run):
        out["availability"] = availability(span, clients, rate, hoarders, mem_limit, storm_pieces)
        out["availability"]["attack_packets_per_server_s"] = rate
        out["availability"]["hoarders"] = hoarders
        out["availability"]["mem_limit"] = mem_limit
    out["goal"] = "attack ACK <= 3x an ordinary ACK at every queue length"
    unit = "worst_instr" if instructions else "worst"
    out["goal_measured_in"] = "callgrind instructions" if instructions else "thread CPU time"
    out["goal_met_vs_ordinary"] = cost[f"{unit}_over_ordinary"] <= 3.0
    out["goal_met_vs_honest_recovery"] = cost[f"{unit}_over_recovery"] <= 3.0
    return out



# ---------------------------------------------------------------- (2) availability

HOARDER = "10.20.0.77"
ECHO_PORT = 7
SOURCE_PORT = 9
FIFO_LIMIT = 4096            # the server's input queue (a NIC ring): drop-tail beyond it
BATCH = 64                   # packets the server takes from its queue per loop turn
IDLE_TICK = 1e-4             # seconds that pass in a turn where the server had nothing to do
REQUEST = bytes(range(256)) * 4


class _World:
    """Server, legitimate client stack, hoarder stack and raw attacker on wall-clock time."""

    def __init__(self, mem_limit: int) -> None:
        isn, ts = b"i" * 16, b"t" * 16
        self.server = Stack([SERVER], StackConfig(mem_limit=mem_limit, isn_secret=isn, ts_secret=ts),
                            name="server")
        self.client = Stack([CLIENT], StackConfig(isn_secret=isn, ts_secret=ts), name="client")
        self.hoarder = Stack([HOARDER], StackConfig(isn_secret=isn, ts_secret=ts), name="hoarder")
        self.server.gso_max_size = TSO_MAX     # an offloading link, as over TUN: TSO records
        self.clock = 0.0           # the server's own CPU seconds (plus idle ticks): see turn()
        self.fifo: deque[bytes] = deque()
        self.fifo_drops = 0
        self.routes = {ipaddress.ip_address(CLIENT).packed: self.client,
                       ipaddress.ip_address(HOARDER).packed: self.hoarder}
        self.echo = BasicServer("echo", self.server.listen(ECHO_PORT), lambda: self.server.now)
        BasicServer("source", self.server.listen(SOURCE_PORT), lambda: self.server.now,
                    source_bytes=1 << 40)

    def now(self) -> float:
        return self.clock

    def to_server(self, pkt: bytes) -> None:
        if len(self.fifo) >= FIFO_LIMIT:
            self.fifo_drops += 1
            return
        self.fifo.append(pkt)

    def turn(self, attacker_rx: Callable[[bytes], None] | None = None) -> None:
        """Move every queued packet one hop and fire due timers. The clock advances by the
        CPU time the server spent (thread time), or an idle tick: the server has a core of its
        own, the clients' and attackers' work costs it nothing."""
        now = self.clock
        for st in (self.client, self.hoarder):
            for out in st.datagrams_to_send():
                self.to_server(out.tobytes())
            t = st.get_timer()
            if t is not None and t <= now:
                st.handle_timer(now)
        cpu = time.thread_time()
        server = self.server
        for _ in range(min(BATCH, len(self.fifo))):
            server.receive(self.fifo.popleft(), now)
        t = server.get_timer()
        if t is not None and t <= now:
            server.handle_timer(now)
        sent = server.datagrams_to_send()
        self.clock += max(time.thread_time() - cpu, IDLE_TICK)
        for out in sent:
            raw = out.tobytes()
            peer = self.routes.get(raw[16:20])
            if peer is not None:
                peer.receive(raw, now)
            elif attacker_rx is not None:
                attacker_rx(raw)


class _Legit:
    """Back-to-back legitimate clients: connect, send REQUEST, read its echo, close."""

    def __init__(self, world: _World, concurrency: int) -> None:
        self.world = world
        self.active: list[tuple[Connection, float, bytearray, bool]] = []
        self.latencies: list[float] = []
        self.failed = 0
        self.concurrency = concurrency

    def turn(self) -> None:
        w = self.world
        now = w.now()
        keep = []
        for conn, start, got, sent in self.active:
            if not sent and conn.send_space >= len(REQUEST):
                conn.send(REQUEST, now)
                sent = True
            if conn.readable_bytes:
                got.extend(conn.recv(1 << 16, now))
            if len(got) >= len(REQUEST):
                self.latencies.append(now - start)
                conn.close(now)
            elif conn.error or now - start > 5.0:
                self.failed += 1
                conn.abort(now)
            else:
                keep.append((conn, start, got, sent))
        self.active = keep
        while len(self.active) < self.concurrency:
            conn = w.client.create_connection(SERVER, ECHO_PORT)
            w.client.connect(conn, now)
            self.active.append((conn, now, bytearray(), False))


def _syn_flood(world: _World, rate: float) -> Callable[[float], None]:
    rng = random.Random(7)
    server_ip = ipaddress.ip_address(SERVER).packed
    sent = [0]

    def inject(elapsed: float) -> None:
        due = int(elapsed * rate)
        while sent[0] < due:
            sent[0] += 1
            src = bytes((198, 18, rng.randrange(256), rng.randrange(1, 255)))
            pkt = build_packet(src=src, dst=server_ip, sport=rng.randrange(1024, 65536), dport=ECHO_PORT,
                               seq=rng.getrandbits(32), ack=0, flags=SYN, window=65535,
                               options=encode_options(mss=1460, sack_permitted=True, wscale=7))
            world.to_server(pkt.tobytes())
    return inject


def _hoard(world: _World, hoarders: int) -> Callable[[float], None]:
    conns = []
    for _ in range(hoarders):
        c = world.hoarder.create_connection(SERVER, ECHO_PORT)
        world.hoarder.connect(c, world.now())
        conns.append(c)
    blob = memoryview(bytes(1 << 20))

    def push(_elapsed: float) -> None:
        for c in conns:                 # write, never read: the echo piles up at the server
            if c.send_space:
                c.send(blob[:c.send_space], world.now())
    return push


class _SackStorm:
    """A download with MSS 48: the attacker ACKs until the server's window exceeds ``pieces``
    MSS, then never again, and storms SACK blocks that cut the flight in flight
    (CVE-2019-11477/11478's pattern)."""

    def __init__(self, world: _World, rate: float, pieces: int = 4000) -> None:
        self.world = world
        self.rate = rate
        self.pieces = pieces
        self.peer = RawPeer(world.server, ATTACKER, 41000, SERVER, SOURCE_PORT)
        self.isn = -1
        self.high = self.una = 1
        self.sent = self.i = 0
        self.storming = False
        world.server.receive(self.peer.packet(SYN, 0, 0, options=encode_options(
            mss=48, sack_permitted=True, wscale=7)), world.now())

    def rx(self, raw: bytes) -> None:
        seg = parse_packet(raw)
        if seg.flags & SYN:
            self.isn = seg.seq
            self.world.to_server(self.peer.packet(ACK, 1, seg.seq + 1))
            return
        if self.isn < 0 or not seg.payload:
            return
        self.high = max(self.high, ((seg.seq - self.isn) & MASK) + len(seg.payload))
        if self.storming:
            return
        if self.high >= 2 * self.pieces * 48:
            # Slow start has opened cwnd past ``pieces``: never acknowledge again, so what
            # the server sends from here on stays in flight.
            self.storming = True
        else:
            self.una = self.high
            self.world.to_server(self.peer.packet(ACK, 1, self.isn + self.una))

    def inject(self, elapsed: float) -> None:
        if not self.storming:
            return
        due = int(elapsed * self.rate)
        base = self.isn + self.una
        span = max((self.high - self.una) // (48 * 8), 1)
        while self.sent < due:
            self.sent += 1
            self.i = (self.i + 1) % span
            first = 1 + 8 * self.i          # four single pieces out of every other MSS
            blocks = [((base + (first + 2 * k) * 48) & MASK, (base + (first + 2 * k + 1) * 48) & MASK)
                      for k in range(4)]
            self.world.to_server(self.peer.packet(ACK, 1, base, options=encode_options(sack_blocks=blocks)))


def _scenario(name: str, span: float, clients: int, rate: float, hoarders: int,
              mem_limit: int, storm_pieces: int = 4000) -> dict[str, Any]:
    world = _World(mem_limit)
    attack: Callable[[float], None] | None = None
    rx: Callable[[bytes], None] | None = None
    storm: _SackStorm | None = None
    if name == "syn_flood":
        attack = _syn_flood(world, rate)
    elif name == "zero_window_hoarding":
        attack = _hoard(world, hoarders)
    elif name == "sack_storm":
        storm = _SackStorm(world, rate, storm_pieces)
        attack, rx = storm.inject, storm.rx
    # Let the attack take hold before the legitimate clients start: the hoarders until the
    # server's account is nearly full, the SACK storm until its flight is out.
    ready = False
    while world.now() < 5.0:
        if attack is not None:
            attack(world.now())
        world.turn(rx)
        if name == "zero_window_hoarding":
            ready = world.server.mem.used >= mem_limit * 0.95
        elif storm is not None:
            ready = storm.storming
        else:
            ready = True
        if ready and world.now() >= 0.2:
            break
    legit = _Legit(world, clients)
    t_start = world.now()
    wall0 = time.monotonic()
    while world.now() - t_start < span:        # ends: every turn advances the clock
        if attack is not None:
            attack(world.now())
        legit.turn()
        world.turn(rx)
    lat = sorted(legit.latencies)
    mib = world.server.counters
    out: dict[str, Any] = {
        "completed": len(lat),
        "failed_or_timed_out": legit.failed,
        "per_s": round(len(lat) / span, 1),
        "latency_ms_p50": round(lat[len(lat) // 2] * 1e3, 2) if lat else None,
        "latency_ms_p99": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3, 2) if lat else None,
        "server_fifo_drops": world.fifo_drops,
        "server_mem_used": world.server.mem.used,
        "server_s": round(world.now() - t_start, 3),
        "wall_s": round(time.monotonic() - wall0, 2),
        "unfinished": len(legit.active),
        "attack_took_hold": ready,
    }
    for key in ("TcpExtTCPMemoryPressures", "TcpExtSyncookiesSent", "TcpExtTCPWqueueTooBig",
                "TcpExtListenDrops"):
        if mib[key]:
            out[key] = mib[key]
    return out


def availability(span: float = 2.0, clients: int = 4, rate: float = 2000.0, hoarders: int = 48,
                 mem_limit: int = 8 << 20, storm_pieces: int = 4000) -> dict[str, Any]:
    """Legitimate echo clients served in ``span`` wall-clock seconds, per attack."""
    out: dict[str, Any] = {}
    for name in ("no_attack", "syn_flood", "zero_window_hoarding", "sack_storm"):
        out[name] = _scenario(name, span, clients, rate, hoarders, mem_limit, storm_pieces)
    base = out["no_attack"]["completed"] or 1
    for name in ("syn_flood", "zero_window_hoarding", "sack_storm"):
        out[name]["completed_vs_no_attack"] = round(out[name]["completed"] / base, 3)
    return out

if __name__ == "__main__":
    import json

    if len(sys.argv) == 5 and sys.argv[1] == "--callgrind-child":
        _callgrind_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        print(json.dumps(run(), indent=2))
