"""Fuzzing the stack's packet input: seed traces from real captures, mutation, replay.

A *seed trace* is the packets a server stack received during a pair transfer, read back
from the pcap that transfer wrote (``record_scenario`` -> ``seed_trace``). Replaying it to
a fresh server stack with the same secrets and the same server application reproduces the
run exactly: the ISNs and timestamps depend only on the secrets and the (recorded) times,
so the client's acknowledgement numbers stay right. Times are quantised to the pcap's
nanosecond grid during the recording too, so a replay from the file is bit-exact.

``run_trace`` feeds a (mutated) trace, firing the stack's timers in between and after the
end, and runs ``check_invariants`` after every event; ``mutate`` applies libFuzzer-style
byte mutations plus TCP-aware ones (fields near the live sequence space, options, crafted
RST/SYN/data, duplication, reordering, drops, splices, time shifts) and fixes checksums
most of the time so that mutated packets reach the state machine.

Only ``InvariantViolation`` and the exceptions a malformed packet must never cause count as
findings; the server application's own OSErrors (EPIPE after a reset ...) are normal.
"""

from __future__ import annotations

import math
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from usertcp.net.driver import VirtualTimeDriver
from usertcp.net.memnet import LinkConfig, Network
from usertcp.net.pcap import PcapWriter, read_pcap
from usertcp.tcp.config import TFO_CLIENT_ENABLE, TFO_SERVER_ENABLE, StackConfig
from usertcp.tcp.connection import Connection, State
from usertcp.tcp.fastopen import tfo_connect
from usertcp.tcp.invariants import check_invariants
from usertcp.tcp.stack import Listener, Stack
from usertcp.wire.checksum import internet_checksum, pseudo_header_sum
from usertcp.wire.packet import parse_packet
from usertcp.wire.segment import ACK, FIN, PSH, RST, SYN, Buffer, TxPacket
from usertcp.wire.tcp import encode_options

CLIENT = "10.9.0.1"
SERVER = "10.9.0.2"
SERVER_IP = bytes([10, 9, 0, 2])
PORT = 80
PRELOAD = b"220 usertcp fuzz target ready\r\n"
SECRETS = (bytes(range(100, 116)), bytes(range(200, 216)))
MASK = 0xFFFFFFFF
TAIL = 300.0          # virtual seconds of timers run after the last packet


def server_config() -> StackConfig:
    """The stack under test: TFO server, a tiny SYN queue (cookies), short TIME-WAIT."""
    return StackConfig(isn_secret=SECRETS[0], ts_secret=SECRETS[1],
                       fastopen=TFO_CLIENT_ENABLE | TFO_SERVER_ENABLE,
                       max_syn_backlog=2, time_wait=5.0, fin_timeout=10.0, max_time_wait=4,
                       reassembly_max_segments=64)


def q_recv(now: float) -> float:
    """The time as the pcap stores it (PcapWriter ticks, read_pcap's formula)."""
    sec, frac = divmod(round(now * 1_000_000_000), 1_000_000_000)
    return sec + frac / 1e9


def q_timer(deadline: float) -> float:
    """A timer time on the nanosecond grid, never before ``deadline``."""
    sec, frac = divmod(math.ceil(deadline * 1_000_000_000), 1_000_000_000)
    t = sec + frac / 1e9
    while t < deadline:
        frac += 1
        t = sec + frac / 1e9
    return t


class ServerApp:
    """The server application, a pure function of the stack's state: run after every event.

    Accepts everything, reads everything, echoes up to 32 KiB per connection (so the server
    sends and processes ACKs/SACKs), and closes once the peer's FIN arrived.
    """

    def __init__(self, stack: Stack, listener: Listener) -> None:
        self.stack = stack
        self.listener = listener
        self.conns: list[Connection] = []
        self.received = 0
        self.echoed: dict[int, int] = {}

    def step(self, now: float) -> None:
        while True:
            c = self.listener.accept()
            if c is None:
                break
            self.conns.append(c)
        live = []
        for c in self.conns:
            if c.state is State.CLOSED:
                continue
            live.append(c)
            try:
                if c.readable_bytes:
                    data = c.recv(1 << 20, now)
                    self.received += len(data)
                    done = self.echoed.get(id(c), 0)
                    if done < 32768 and c.state in (State.ESTABLISHED, State.CLOSE_WAIT):
                        self.echoed[id(c)] = done + c.send(data[:32768 - done], now)
                if c.fin_received and not c.closed_by_app:
                    c.close(now)
            except OSError:
                pass
        self.conns = live


class _Recorder:
    """Wraps the server in the recording: quantised times and the app after each event."""

    def __init__(self, stack: Stack, app: ServerApp) -> None:
        self.stack = stack
        self.app = app

    def receive(self, packet: Buffer, now: float, *, checksum_verified: bool = False) -> None:
        t = q_recv(now)
        self.stack.receive(packet, t, checksum_verified=checksum_verified)
        self.app.step(t)

    def handle_timer(self, now: float) -> None:
        t = q_timer(now)
        self.stack.handle_timer(t)
        self.app.step(t)

    def datagrams_to_send(self) -> list[TxPacket]:
        return self.stack.datagrams_to_send()

    def get_timer(self) -> float | None:
        return self.stack.get_timer()


def new_server() -> tuple[Stack, ServerApp]:
    stack = Stack([SERVER], server_config(), name="server")
    lst = stack.listen(PORT, backlog=16)
    lst.fastopen_qlen = 8
    lst.set_preload(PRELOAD, 0.0)
    return stack, ServerApp(stack, lst)


@dataclass
class Scenario:
    name: str
    client: StackConfig
    link: LinkConfig
    conns: int = 1               # concurrent connections
    size: int = 24_000           # bytes each uploads
    tfo: bool = False            # two rounds: get a TFO cookie, then send data in the SYN
    abort: bool = False          # the client resets instead of closing


SCENARIOS = [
    Scenario("lossy-full", StackConfig(), LinkConfig(delay=0.01, loss=0.04, reorder=0.08, bandwidth_bps=8e6),
             size=80_000),
    Scenario("plain", StackConfig(timestamps=False, sack=False, window_scaling=False),
             LinkConfig(delay=0.01, loss=0.05, reorder=0.05, bandwidth_bps=8e6), size=60_000),
    Scenario("tfo", StackConfig(fastopen=TFO_CLIENT_ENABLE), LinkConfig(delay=0.01, loss=0.02), size=3000,
             tfo=True),
    Scenario("flood-cookies", StackConfig(), LinkConfig(delay=0.01, reorder=0.1), conns=6, size=6000),
    Scenario("abort", StackConfig(), LinkConfig(delay=0.01, duplicate=0.05), size=8000, abort=True),
]


def _opened(c: Connection) -> bool:
    return c.state is not State.SYN_SENT


def _writable(c: Connection) -> bool:
    return c.send_space > 0 or c.state is not State.ESTABLISHED


def record_scenario(sc: Scenario, pcap_path: Path, seed: int = 1) -> int:
    """Run ``sc`` between a client and the fuzz server, capturing both directions; returns
    how many bytes the server application received (a sanity figure for the seed)."""
    net = Network(seed=seed)
    client = Stack([CLIENT], replace(sc.client, isn_secret=bytes(16), ts_secret=bytes(16)), name="client")
    server, app = new_server()
    hc = net.add_host(client, [CLIENT])
    hs = net.add_host(_Recorder(server, app), [SERVER])
    link = net.connect(hc, hs, sc.link)
    drv = VirtualTimeDriver(net)
    rng = random.Random(seed)
    with PcapWriter(pcap_path) as writer:
        net.attach_pcap(writer, link, where="deliver")
        rounds = 2 if sc.tfo else 1
        for _ in range(rounds):
            conns = []
            for _ in range(sc.conns):
                c = client.create_connection(SERVER, PORT)
                data = rng.randbytes(sc.size)
                if sc.tfo:
                    # The SYN carries what it may (none on the first round: a cookie request);
                    # the rest is written once connected, as after Linux's sendto(MSG_FASTOPEN).
                    data = data[tfo_connect(c, data[:1000], drv.now()):]
                else:
                    client.connect(c, drv.now())
                conns.append((c, data))
            drv.kick()
            for c, _ in conns:
                drv.run_until(partial(_opened, c), 60)
            for c, data in conns:
                sent = 0
                while sent < len(data) and c.state is State.ESTABLISHED:
                    n = c.send(data[sent:], drv.now())
                    sent += n
                    drv.kick()
                    drv.run_until(partial(_writable, c), 60)
                if sc.abort:
                    drv.run_for(0.5)
                    c.abort(drv.now())
                elif c.state is State.ESTABLISHED:
                    c.shutdown(False, True, drv.now())
            drv.kick()

            def finished(conns: list[tuple[Connection, bytes]] = conns) -> bool:
                for c, _ in conns:
                    if c.readable_bytes:
                        c.recv(1 << 20, drv.now())
                    if c.state not in (State.CLOSED, State.TIME_WAIT) and not c.fin_received:
                        return False
                return True
            drv.run_until(finished, 120)
            for c, _ in conns:
                if not c.closed_by_app:
                    c.close(drv.now())
            drv.run_for(1.0)
        drv.run_for(20.0)
    return app.received


Trace = list[tuple[float, bytes]]


def seed_trace(pcap_path: Path) -> Trace:
    """What the server received, from a capture: packets addressed to it, in time order."""
    return [(t, pkt) for t, pkt in read_pcap(pcap_path) if len(pkt) >= 20 and pkt[16:20] == SERVER_IP]


# ------------------------------------------------------------------------------ replay

@dataclass
class RunStats:
    packets: int = 0
    timers: int = 0
    checks: int = 0
    emitted: int = 0
    received: int = 0
    conns: int = 0
    counters: dict[str, int] = field(default_factory=dict)


def run_trace(trace: Trace, *, check: bool = True, tail: float = TAIL,
              on_event: Callable[[Stack], None] | None = None) -> RunStats:
    """Feed ``trace`` to a fresh server; every event is followed by the app and the checks.

    Raises whatever escapes the stack (a finding) or an InvariantViolation.
    """
    stack, app = new_server()
    stats = RunStats()

    def after(now: float) -> None:
        app.step(now)
        for pkt in stack.datagrams_to_send():
            raw = pkt.tobytes()
            parse_packet(raw)          # everything emitted must parse, checksums included
            stats.emitted += 1
        if check:
            check_invariants(stack)
            stats.checks += 1
        if on_event is not None:
            on_event(stack)

    def timers_until(limit: float, inclusive: bool) -> None:
        for _ in range(100_000):
            d = stack.get_timer()
            if d is None or d > limit or (d == limit and not inclusive):
                return
            t = q_timer(d)
            stack.handle_timer(t)
            stats.timers += 1
            after(t)
        raise AssertionError(f"the stack's timer keeps firing before {limit}")

    last = 0.0
    for t, pkt in trace:
        t = max(t, last)               # a mutated time never runs the clock backwards
        timers_until(t, False)
        stack.receive(pkt, t)
        stats.packets += 1
        after(t)
        last = t
    timers_until(last + tail, True)
    stats.received = app.received
    stats.conns = len(stack.connections)
    stats.counters = dict(stack.counters)
    return stats


# ---------------------------------------------------------------------------- mutation

def fix_checksums(pkt: bytearray) -> None:
    """Recompute the IPv4 header and TCP checksums (lengths taken from the packet itself)."""
    if len(pkt) < 20 or pkt[0] >> 4 != 4:
        return
    ihl = (pkt[0] & 0xF) * 4
    if ihl < 20 or len(pkt) < ihl:
        return
    pkt[10:12] = b"\0\0"
    pkt[10:12] = struct.pack("!H", internet_checksum([bytes(pkt[:ihl])]))
    tot = min(struct.unpack_from("!H", pkt, 2)[0], len(pkt))
    if tot < ihl + 20 or pkt[9] != 6:
        return
    seg = pkt[ihl:tot]
    seg[16:18] = b"\0\0"
    pseudo = pseudo_header_sum(bytes(pkt[12:16]), bytes(pkt[16:20]), 6, len(seg))
    csum = internet_checksum([bytes(seg)], pseudo)
    pkt[ihl + 16:ihl + 18] = struct.pack("!H", csum)


_INTERESTING = (0, 1, 2, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, MASK)


def _tcp_off(pkt: bytearray) -> int:
    return (pkt[0] & 0xF) * 4 if len(pkt) >= 20 else 20


def _set32(pkt: bytearray, off: int, v: int) -> None:
    if off + 4 <= len(pkt):
        struct.pack_into("!I", pkt, off, v & MASK)


def _get32(pkt: bytearray, off: int) -> int:
    return struct.unpack_from("!I", pkt, off)[0] if off + 4 <= len(pkt) else 0


def _rebuild_tcp(pkt: bytearray, *, options: bytes | None = None, payload: bytes | None = None,
                 flags: int | None = None) -> bytearray:
    """Replace the options/payload/flags of an IPv4 TCP packet, fixing lengths."""
    ihl = _tcp_off(pkt)
    if len(pkt) < ihl + 20:
        return pkt
    doff = (pkt[ihl + 12] >> 4) * 4
    doff = max(20, min(doff, len(pkt) - ihl))
    hdr = bytearray(pkt[ihl:ihl + 20])
    opts = bytes(pkt[ihl + 20:ihl + doff]) if options is None else options
    opts += b"\0" * (-len(opts) % 4)
    opts = opts[:40]
    data = bytes(pkt[ihl + doff:]) if payload is None else payload
    hdr[12] = ((20 + len(opts)) // 4) << 4 | (hdr[12] & 0xF)
    if flags is not None:
        hdr[13] = flags & 0xFF
    out = bytearray(pkt[:ihl]) + hdr + opts + data
    struct.pack_into("!H", out, 2, min(len(out), 0xFFFF))
    return out


def _random_options(rng: random.Random, pkt: bytearray) -> bytes:
    ihl = _tcp_off(pkt)
    seq, ack = _get32(pkt, ihl + 4), _get32(pkt, ihl + 8)
    pick = rng.randrange(7)
    if pick == 0:
        return b""
    if pick == 1:
        return encode_options(ts=(rng.getrandbits(32), rng.getrandbits(32)))
    if pick == 2:
        return encode_options(mss=rng.choice([0, 1, 88, 536, 1460, 0xFFFF]), wscale=rng.randint(-1, 20),
                              sack_permitted=rng.random() < 0.5, ts=(rng.getrandbits(32), 0))
    if pick == 3:
        # SACK blocks near the acknowledged point: the sender's scoreboard at work.
        blocks = []
        for _ in range(rng.randint(1, 3)):
            left = (ack + rng.randint(-3000, 60000)) & MASK
            blocks.append((left, (left + rng.randint(-10, 20000)) & MASK))
        ts = (rng.getrandbits(32), rng.getrandbits(32)) if rng.random() < 0.5 else None
        return encode_options(sack_blocks=blocks, ts=ts)
    if pick == 4:
        return encode_options(fastopen=rng.randbytes(rng.choice([0, 4, 8, 16])))
    if pick == 5:
        return encode_options(md5=True)
    del seq
    return rng.randbytes(rng.randrange(0, 41))


def mutate_packet(rng: random.Random, pkt: bytes) -> bytes:
    """One packet-level mutation; checksums are fixed in 85 % of the cases."""
    b = bytearray(pkt)
    ihl = _tcp_off(b)
    t = ihl
    op = rng.randrange(14)
    if op == 0 and b:                                   # bit flips
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
    elif op == 1 and b:                                 # interesting byte/word values
        i = rng.randrange(len(b))
        v = rng.choice(_INTERESTING)
        width = rng.choice([1, 2, 4])
        for k in range(width):
            if i + k < len(b):
                b[i + k] = (v >> (8 * (width - 1 - k))) & 0xFF
    elif op == 2:                                       # seq near its value
        _set32(b, t + 4, _get32(b, t + 4) + rng.choice([1, -1, 2, 100, -100, 1448, -1448, 65535,
                                                         rng.randint(-70000, 70000), rng.getrandbits(32)]))
    elif op == 3:                                       # ack near its value
        _set32(b, t + 8, _get32(b, t + 8) + rng.choice([1, -1, 1448, -1448, 30000, -30000,
                                                         rng.randint(-70000, 70000), rng.getrandbits(32)]))
    elif op == 4 and len(b) > t + 13:                   # flags
        b[t + 13] = rng.choice([SYN, SYN | ACK, RST, RST | ACK, FIN | ACK, FIN, ACK | PSH, 0,
                                rng.getrandbits(8), b[t + 13] ^ (1 << rng.randrange(8))])
    elif op == 5 and len(b) > t + 16:                   # window
        struct.pack_into("!H", b, t + 14, rng.choice([0, 1, 0xFFFF, rng.getrandbits(16)]))
    elif op == 6:                                       # options
        b = _rebuild_tcp(b, options=_random_options(rng, b))
    elif op == 7:                                       # payload
        ihl2 = _tcp_off(b)
        doff = (b[ihl2 + 12] >> 4) * 4 if len(b) > ihl2 + 12 else 20
        cur = bytes(b[ihl2 + doff:])
        choice = rng.randrange(4)
        if choice == 0:
            new = b""
        elif choice == 1:
            new = cur[:rng.randint(0, len(cur))]
        elif choice == 2:
            new = rng.randbytes(rng.choice([1, 2, 100, 1400]))
        else:
            new = cur + rng.randbytes(rng.randint(1, 64))
        b = _rebuild_tcp(b, payload=new)
    elif op == 8 and len(b) > 1:                        # truncate
        b = b[:rng.randrange(len(b))]
    elif op == 9:                                       # grow
        b += rng.randbytes(rng.randint(1, 32))
    elif op == 10 and len(b) > 3:                       # IP header fields
        field = rng.choice([0, 2, 6, 8, 9])
        if field == 0:
            b[0] = rng.choice([0x45, 0x46, 0x4F, 0x44, 0x65, rng.getrandbits(8)])
        elif field == 2:
            struct.pack_into("!H", b, 2, rng.choice([0, 20, 40, len(b) - 1, len(b) + 1, 0xFFFF]))
        elif field == 6 and len(b) > 7:
            b[6] = rng.choice([0x20, 0x40, 0x00, 0x3F])     # MF / DF / offsets
        elif field == 9 and len(b) > 9:
            b[9] = rng.choice([17, 1, 6, 0])
        elif len(b) > 8:
            b[8] = 0                                    # TTL
    elif op == 11 and len(b) > t + 13:                  # data offset
        b[t + 12] = rng.randrange(16) << 4 | (b[t + 12] & 0xF)
    elif op == 12:                                      # urgent pointer + URG
        if len(b) > t + 20:
            b[t + 13] |= 0x20
            struct.pack_into("!H", b, t + 18, rng.getrandbits(16))
    else:                                               # ports
        if len(b) > t + 4:
            struct.pack_into("!H", b, t + rng.choice([0, 2]), rng.choice([PORT, 1, 0, rng.getrandbits(16)]))
    if rng.random() < 0.85:
        fix_checksums(b)
    return bytes(b)


def crafted(rng: random.Random, template: bytes) -> bytes:
    """A new segment on a template's 4-tuple: RST/SYN/data/ACK at guessed numbers."""
    b = bytearray(template)
    t = _tcp_off(b)
    if len(b) < t + 20:
        return template
    kind = rng.randrange(4)
    flags = [RST | rng.choice([0, ACK]), SYN | rng.choice([0, ACK]), ACK | PSH, ACK][kind]
    payload = rng.randbytes(rng.randint(1, 1400)) if kind == 2 else b""
    b = _rebuild_tcp(b, flags=flags, payload=payload, options=b"" if rng.random() < 0.5 else None)
    _set32(b, t + 4, _get32(b, t + 4) + rng.randint(-5000, 70000))
    if rng.random() < 0.5:
        _set32(b, t + 8, _get32(b, t + 8) + rng.choice([rng.randint(-70000, 70000), rng.getrandbits(32)]))
    fix_checksums(b)
    return bytes(b)


def mutate(rng: random.Random, trace: Trace, corpus: list[Trace]) -> Trace:
    """A mutated copy of ``trace``: 1..8 stacked mutations (packets, order, time, splices)."""
    out = list(trace)
    for _ in range(rng.choice([1, 1, 2, 3, 4, 8])):
        if not out:
            break
        i = rng.randrange(len(out))
        t, pkt = out[i]
        op = rng.randrange(10)
        if op <= 3:
            out[i] = (t, mutate_packet(rng, pkt))
        elif op == 4:
            out.insert(i, (t, crafted(rng, pkt)))
        elif op == 5:                                   # duplicate, maybe later
            out.insert(min(i + rng.randint(0, 5), len(out)), (t, pkt))
        elif op == 6 and i + 1 < len(out):              # reorder
            j = min(i + rng.randint(1, 6), len(out) - 1)
            out[i], out[j] = out[j], out[i]
        elif op == 7:                                   # drop
            del out[i]
        elif op == 8:                                   # time shift (timers fire elsewhere)
            out[i] = (max(t + rng.choice([-0.5, -0.01, 0.01, 0.2, 1.0, 5.0, 60.0]), 0.0), pkt)
        else:                                           # splice a packet from another seed
            other = rng.choice(corpus)
            if other:
                out.insert(i, (t, rng.choice(other)[1]))
    return out


@dataclass
class FuzzResult:
    executions: int = 0
    packets: int = 0
    checks: int = 0
    findings: list[tuple[str, Trace]] = field(default_factory=list)


def fuzz(corpus: list[Trace], *, executions: int, seed: int, stop_on_finding: bool = False) -> FuzzResult:
    """``executions`` mutated replays; exceptions and invariant violations are findings."""
    rng = random.Random(seed)
    res = FuzzResult()
    for _ in range(executions):
        trace = mutate(rng, rng.choice(corpus), corpus)
        res.executions += 1
        try:
            st = run_trace(trace)
        except Exception as exc:                        # a finding: keep its reproducer
            res.findings.append((f"{type(exc).__name__}: {exc}", trace))
            if stop_on_finding:
                break
            continue
        res.packets += st.packets
        res.checks += st.checks
    return res


def write_trace(path: Path, trace: Trace) -> None:
    """A trace (e.g. a crash reproducer) as a pcap: seed files and reproducers are one format."""
    with PcapWriter(path) as w:
        for t, pkt in trace:
            w.write(pkt, t)


def parse_lenient(data: bytes) -> Trace:
    """The records of a (possibly mutated) pcap: stop at the first broken record (atheris)."""
    if len(data) < 24:
        return []
    out: Trace = []
    off = 24
    while off + 16 <= len(data) and len(out) < 2000:
        sec, frac, incl, _ = struct.unpack_from("<IIII", data, off)
        off += 16
        if incl > 65535 or off + incl > len(data):
            break
        out.append((sec + (frac % 1_000_000_000) / 1e9, data[off:off + incl]))
        off += incl
    out.sort(key=lambda r: r[0])
    return out
