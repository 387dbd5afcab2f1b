"""Test helpers: two stacks on the in-memory network, driven in virtual time."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from usertcp import socket as us
from usertcp.net.driver import VirtualTimeDriver
from usertcp.net.memnet import LinkConfig
from usertcp.tcp.connection import Connection
from usertcp.testing import A_ADDR, B_ADDR, Pair, pair
from usertcp.wire.segment import Buffer, TxPacket

__all__ = ["A_ADDR", "B_ADDR", "Pair", "RecordingEndpoint", "SocketPair", "Transfers", "check_echo", "hoard",
           "make_pair", "sha", "socket_pair", "transfer"]


class RecordingEndpoint:
    """A minimal Endpoint: records what it receives (``got``), sends what is in ``out``."""

    def __init__(self, packets: list[bytes] | None = None) -> None:
        self.got: list[bytes] = []
        self.out: list[TxPacket] = [TxPacket(p) for p in packets or []]

    def receive(self, packet: Buffer, now: float, *, checksum_verified: bool = False) -> None:
        self.got.append(bytes(packet))

    def datagrams_to_send(self) -> list[TxPacket]:
        out, self.out = self.out, []
        return out

    def get_timer(self) -> float | None:
        return None

    def handle_timer(self, now: float) -> None:
        pass


# The public helper (usertcp.testing) is the one implementation; tests keep their names for it.
make_pair = pair


@dataclass
class SocketPair:
    """A connected pair through the socket API: ``client`` on host a, ``server`` accepted on b."""

    driver: VirtualTimeDriver
    host: us.Host           # the client's host (a)
    listener: us.Socket
    client: us.Socket
    server: us.Socket


def socket_pair(seed: int, port: int = 8080) -> SocketPair:
    """Stacks a and b on a 10 ms link (``seed`` for the network), b listening on ``port``,
    a connected to it and the connection accepted: both ends as usertcp sockets."""
    p = pair(LinkConfig(delay=0.01), seed=seed)
    ha, hb = us.Host(p.a, p.driver, name="a"), us.Host(p.b, p.driver, name="b")
    lst = hb.socket()
    lst.bind((B_ADDR, port))
    lst.listen()
    cli = ha.socket()
    cli.connect((B_ADDR, port))
    srv, _ = lst.accept()
    return SocketPair(p.driver, ha, lst, cli, srv)


def transfer(pair: Pair, sender: Connection, receiver: Connection, data: bytes, *,
             chunk: int = 65536, timeout: float = 600.0, close: bool = True) -> bytes:
    """Send ``data`` from sender to receiver through the sans-IO API; return what arrived."""
    drv = pair.driver
    progress = {"sent": 0}
    got = bytearray()
    view = memoryview(data)

    def ready() -> bool:
        return (sender.send_space > 0 and progress["sent"] < len(data)) or receiver.readable_bytes > 0 \
            or (receiver.fin_received and close)

    deadline = drv.now() + timeout
    while len(got) < len(data) or (close and not receiver.fin_received):
        progressed = False
        while progress["sent"] < len(data) and sender.send_space > 0:
            sent = progress["sent"]
            n = sender.send(view[sent:sent + chunk].tobytes(), drv.now())
            if not n:
                break
            progress["sent"] = sent + n
            progressed = True
        if close and progress["sent"] == len(data) and not sender.write_shutdown:
            sender.shutdown(False, True, drv.now())
            progressed = True
        if receiver.readable_bytes:
            got += receiver.recv(1 << 22, drv.now())
            progressed = True
        if progressed:
            drv.kick()
        if len(got) >= len(data) and (not close or receiver.fin_received):
            break
        if receiver.error or sender.error:
            raise AssertionError(f"connection failed: sender {sender.error} receiver {receiver.error}")
        ok = drv.run_until(ready, max(deadline - drv.now(), 0))
        if not ok and drv.now() >= deadline:
            raise AssertionError(f"transfer stalled at {len(got)}/{len(data)} bytes, t={drv.now():.1f}")
    return bytes(got)


class Transfers:
    """Several sans-IO transfers driven step by step: ``plan`` is (sender, receiver, data) each;
    every ``step`` feeds senders (half-closing when done) and drains receivers."""

    def __init__(self, plan: list[tuple[Connection, Connection, bytes]]) -> None:
        self.plan = plan
        self.sent = {id(s): 0 for s, _, _ in plan}
        self.got = {id(r): bytearray() for _, r, _ in plan}

    @property
    def done(self) -> bool:
        return all(len(self.got[id(r)]) == len(d) and r.fin_received for _, r, d in self.plan)

    def progress(self) -> list[int]:
        return [len(self.got[id(r)]) for _, r, _ in self.plan]

    def step(self, now: float) -> None:
        sent, got = self.sent, self.got
        for s, r, d in self.plan:
            while sent[id(s)] < len(d) and s.send_space > 0:
                n = s.send(d[sent[id(s)]:sent[id(s)] + 65536], now)
                if not n:
                    break
                sent[id(s)] += n
            if sent[id(s)] == len(d) and not s.write_shutdown:
                s.shutdown(False, True, now)
            if r.readable_bytes:
                got[id(r)] += r.recv(1 << 22, now)


def hoard(p: Pair, port: int, count: int, rounds: int) -> list[Connection]:
    """``count`` connections from a to b:``port``, each pushing 256 KiB blocks whenever it has
    send space, ``rounds`` times 50 ms (whatever b does with the data)."""
    drv = p.driver
    hoarders: list[Connection] = []
    blob = bytes(256 << 10)
    for _ in range(count):
        c = p.a.create_connection(B_ADDR, port)
        p.a.connect(c, drv.now())
        hoarders.append(c)
    drv.kick()
    drv.run_for(0.05)
    for _ in range(rounds):
        for c in hoarders:
            if c.send_space:
                c.send(blob[:c.send_space], drv.now())
        drv.kick()
        drv.run_for(0.05)
    return hoarders


def check_echo(p: Pair, request: bytes, port: int = 7) -> None:
    """A new client of b's echo service at ``port`` gets ``request`` back (within 30 s)."""
    drv = p.driver
    legit = p.a.create_connection(B_ADDR, port)
    p.a.connect(legit, drv.now())
    drv.kick()
    assert drv.run_until(lambda: legit.send_space > 0, 5.0)
    assert legit.send(request, drv.now()) == len(request)
    drv.kick()
    got = bytearray()

    def echoed() -> bool:
        if legit.readable_bytes:
            got.extend(legit.recv(1 << 16, drv.now()))
        return len(got) >= len(request)

    assert drv.run_until(echoed, 30.0), (len(got), p.b.mem.used)
    assert bytes(got) == request


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
