"""A scripted peer, packetdrill style: one Stack under test and a hand-driven remote.

The stack under test owns ``LOCAL`` (192.168.0.1); the scripted peer is ``REMOTE``
(192.0.2.1). Sequence numbers in :meth:`ScriptedPeer.send` and
:meth:`ScriptedPeer.expect` are relative, as in packetdrill:

* in what the peer sends, ``seq`` is relative to the peer's ISN (``peer_isn``) and
  ``ack`` to the stack's ISN (``local_isn``, learned from the first SYN the stack sends);
* in what the stack sends, ``seq`` is relative to ``local_isn`` and ``ack`` to ``peer_isn``.

Before the stack has sent a SYN, ``local_isn`` is 0, so values are absolute on that side
(useful for resets to an unknown port). Flags are strings: ``S`` SYN, ``F`` FIN, ``R`` RST,
``P`` PSH, ``U`` URG, ``E`` ECE, ``W`` CWR and ``.`` ACK (``"S."`` is a SYN-ACK, ``"R."``
RST|ACK).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, replace

from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import Connection, State
from usertcp.tcp.stack import Listener, Stack
from usertcp.wire.packet import build_packet, parse_packet
from usertcp.wire.segment import ACK, CWR, ECE, FIN, PSH, RST, SYN, URG, Segment
from usertcp.wire.tcp import encode_options

LOCAL = "192.168.0.1"
REMOTE = "192.0.2.1"
LOCAL_IP = ipaddress.ip_address(LOCAL).packed
REMOTE_IP = ipaddress.ip_address(REMOTE).packed
MASK = 0xFFFFFFFF
PEER_ISN = 3_000_000_000          # close to a wrap, so modular arithmetic matters
SYN_OPTIONS = encode_options(mss=1460)
ISN_SECRET = bytes(range(16))
TS_SECRET = bytes(range(16, 32))

_FLAG_CHARS = {"S": SYN, "F": FIN, "R": RST, "P": PSH, "U": URG, "E": ECE, "W": CWR, ".": ACK}


def parse_flags(text: str) -> int:
    bits = 0
    for ch in text:
        if ch not in _FLAG_CHARS:
            raise ValueError(f"unknown flag {ch!r} in {text!r}")
        bits |= _FLAG_CHARS[ch]
    return bits


def format_flags(bits: int) -> str:
    return "".join(ch for ch, b in _FLAG_CHARS.items() if bits & b)


@dataclass
class Sent:
    """One segment the stack sent, with the virtual time it left."""

    time: float
    seg: Segment
    raw: bytes


class ScriptedPeer:
    def __init__(self, config: StackConfig | None = None, *, local_port: int = 8080,
                 peer_port: int = 40000, peer_isn: int = PEER_ISN) -> None:
        # Fixed secrets: the ISNs and timestamp offsets, hence every run, are reproducible.
        config = replace(config or StackConfig(), isn_secret=ISN_SECRET, ts_secret=TS_SECRET)
        self.stack = Stack([LOCAL], config, name="under-test")
        self.now = 0.0
        self.local_port = local_port
        self.peer_port = peer_port
        self.peer_isn = peer_isn
        self.local_isn = 0
        self.queue: list[Sent] = []
        self.conn: Connection | None = None
        self.listener: Listener | None = None

    # ------------------------------------------------------------ injecting

    def send(self, flags: str = "S", seq: int = 0, ack: int | None = None, *, win: int = 65535,
             options: bytes | None = None, payload: bytes = b"", sport: int | None = None,
             dport: int | None = None, tos: int = 0) -> None:
        """Inject one segment from the peer (relative seq/ack, see the module docstring);
        ``tos`` is the IP TOS byte, ECN field included."""
        bits = parse_flags(flags)
        if options is None:
            options = SYN_OPTIONS if bits & SYN else b""
        wire_ack = 0 if ack is None else (self.local_isn + ack) & MASK
        pkt = build_packet(src=REMOTE_IP, dst=LOCAL_IP, sport=self.peer_port if sport is None else sport,
                           dport=self.local_port if dport is None else dport,
                           seq=(self.peer_isn + seq) & MASK, ack=wire_ack, flags=bits, window=win,
                           options=options, payload=[payload] if payload else [], tos=tos)
        self.inject(pkt.tobytes())

    def inject(self, data: bytes, *, checksum_verified: bool = False) -> None:
        """Hand raw IP bytes to the stack at the current time and collect its output."""
        self.stack.receive(data, self.now, checksum_verified=checksum_verified)
        self.collect()

    def collect(self) -> None:
        for pkt in self.stack.datagrams_to_send():
            raw = pkt.tobytes()
            # Everything the stack emits must itself be a valid packet (checksums included).
            self.queue.append(Sent(self.now, parse_packet(raw), raw))

    def advance(self, dt: float) -> None:
        """Move virtual time forward by ``dt``, firing every timer that falls due, in order."""
        self.collect()                     # what the application calls produced, at the old time
        target = self.now + dt
        for _ in range(100_000):
            t = self.stack.get_timer()
            if t is None or t > target:
                break
            self.now = max(self.now, t)
            self.stack.handle_timer(self.now)
            self.collect()
        else:
            raise AssertionError(f"timer keeps firing at {self.now}")
        self.now = target

    # ------------------------------------------------------------ checking

    def describe(self, s: Sent) -> str:
        seg = s.seg
        return (f"t={s.time:.3f} [{format_flags(seg.flags)}] seq={(seg.seq - self.local_isn) & MASK} "
                f"ack={(seg.ack - self.peer_isn) & MASK} win={seg.window} len={len(seg.payload)} "
                f"{seg.sport}->{seg.dport}")

    def expect(self, flags: str, seq: int | None = None, ack: int | None = None, *,
               payload_len: int | None = None, win: int | None = None) -> Segment:
        """Pop the next segment the stack sent and check it; the actual segment is shown on failure.

        A SYN from the stack sets ``local_isn`` (so ``seq`` is then 0).
        """
        self.collect()
        assert self.queue, f"expected [{flags}] seq={seq} ack={ack}, but the stack sent nothing"
        s = self.queue.pop(0)
        seg = s.seg
        if seg.flags & SYN:
            self.local_isn = seg.seq
        want = parse_flags(flags)
        got = seg.flags & (SYN | FIN | RST | ACK | URG)
        problems = []
        if got != want & ~PSH:
            problems.append("flags")
        if "P" in flags and not seg.flags & PSH:
            problems.append("PSH")
        if seq is not None and (seg.seq - self.local_isn) & MASK != seq & MASK:
            problems.append("seq")
        if ack is not None and (not seg.flags & ACK or (seg.ack - self.peer_isn) & MASK != ack & MASK):
            problems.append("ack")
        if payload_len is not None and len(seg.payload) != payload_len:
            problems.append("payload_len")
        if win is not None and seg.window != win:
            problems.append("win")
        assert not problems, (f"wrong {', '.join(problems)}: expected [{flags}] seq={seq} ack={ack} "
                              f"len={payload_len}; got {self.describe(s)}")
        return seg

    def expect_nothing(self) -> None:
        self.collect()
        assert not self.queue, "expected silence, got:\n" + "\n".join(self.describe(s) for s in self.queue)

    def drain(self) -> list[Sent]:
        self.collect()
        out, self.queue = self.queue, []
        return out

    # ------------------------------------------------------------ shortcuts

    def listen(self) -> Listener:
        self.listener = self.stack.listen(self.local_port)
        return self.listener

    def connect(self) -> Connection:
        """Active open from the stack under test; returns the connection in SYN-SENT."""
        conn = self.stack.create_connection(REMOTE, self.peer_port, local_port=self.local_port)
        self.stack.connect(conn, self.now)
        self.collect()
        self.conn = conn
        return conn

    def connection(self) -> Connection:
        """The stack's connection for the peer's 4-tuple (e.g. an embryonic passive one)."""
        return self.stack.connections[(LOCAL_IP, self.local_port, REMOTE_IP, self.peer_port)]

    def passive_open(self) -> Connection:
        """LISTEN -> SYN-RECEIVED -> ESTABLISHED; returns the accepted connection."""
        lst = self.listener or self.listen()
        self.send("S", 0, win=65535)
        self.expect("S.", 0, 1)
        self.send(".", 1, 1)
        conn = lst.accept()
        assert conn is not None and conn.state is State.ESTABLISHED
        self.conn = conn
        return conn

    def active_open(self) -> Connection:
        """CLOSED -> SYN-SENT -> ESTABLISHED; returns the connection."""
        conn = self.connect()
        self.expect("S", 0)
        self.send("S.", 0, 1)
        self.expect(".", 1, 1)
        assert conn.state is State.ESTABLISHED
        return conn
