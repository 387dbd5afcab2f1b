"""Record what one stack receives in a two-stack run, and replay it into fresh stacks.

Used by the header-prediction differential test and the ``fastpath`` benchmark: a
stack is deterministic given its configuration (secrets included), its inputs and
their times, so replaying the same inbound trace into a stack with the fast path
on and one with it off must give byte-identical output if the fast path only
changes cost.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
from dataclasses import dataclass, field
from time import perf_counter

from usertcp.net.driver import VirtualTimeDriver
from usertcp.net.memnet import LinkConfig, Network
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import Connection
from usertcp.tcp.md5sig import Md5Keys
from usertcp.tcp.stack import Stack

CLIENT = "10.9.0.1"
SERVER = "10.9.0.2"
PORT = 7000


@dataclass
class Event:
    """One input to the stack under test: a packet, or an application call."""

    time: float
    kind: str                  # "pkt" | "read" | "send"
    data: bytes = b""


@dataclass
class Trace:
    events: list[Event]
    config: StackConfig
    md5_key: bytes | None = None
    listen: bool = True        # the stack under test is the server (passive open)
    meta: dict[str, float] = field(default_factory=dict)


def fixed_config(**changes: object) -> StackConfig:
    """A configuration with fixed secrets, so two stacks built from it behave identically."""
    cfg = StackConfig(isn_secret=b"i" * 16, ts_secret=b"t" * 16)
    return dataclasses.replace(cfg, **changes)  # type: ignore[arg-type]


def _two_stacks(cfg: StackConfig, loss: float, seed: int, active: bool
                ) -> tuple[Stack, Stack, VirtualTimeDriver, list[Event]]:
    """Client and server stacks on one link; the packets delivered to the stack under test
    (the server, or the client when ``active``) are recorded."""
    net = Network(seed=seed)
    other = fixed_config(header_prediction=cfg.header_prediction, sack=cfg.sack)
    client_stack = Stack([CLIENT], cfg if active else other, name="client")
    server_stack = Stack([SERVER], other if active else cfg, name="server")
    hc = net.add_host(client_stack, [CLIENT])
    hs = net.add_host(server_stack, [SERVER])
    link = net.connect(hc, hs, LinkConfig(delay=0.002, bandwidth_bps=500e6, loss=loss))
    events: list[Event] = []

    def tap(data: bytes, now: float, _d: object) -> None:
        events.append(Event(now, "pkt", bytes(data)))

    net.add_tap(tap, link=link.direction(hs if active else hc), where="deliver")
    return client_stack, server_stack, VirtualTimeDriver(net), events


def _open(client_stack: Stack, server_stack: Stack, drv: VirtualTimeDriver,
          md5_key: bytes | None) -> tuple[Connection, Connection]:
    """The recorded connection's handshake, both ends keyed for TCP-MD5 when ``md5_key``."""
    lst = server_stack.listen(PORT)
    client = client_stack.create_connection(SERVER, PORT)
    if md5_key is not None:
        lst.md5_keys = Md5Keys()
        lst.md5_keys.add(CLIENT, md5_key)
        client.md5_keys = Md5Keys()
        client.md5_keys.add(SERVER, md5_key)
    client_stack.connect(client, 0.0)
    drv.kick()
    drv.run_until(lambda: bool(lst.accept_queue), 10)
    server = lst.accept()
    assert server is not None, "handshake failed while recording"
    return client, server


def record(*, size: int = 2_000_000, upload: int = 0, loss: float = 0.0, seed: int = 1,
           md5_key: bytes | None = None, config: StackConfig | None = None,
           read_every: float = 0.0, active: bool = False) -> Trace:
    """Run a client->server transfer (and ``upload`` bytes server->client) and record one side.

    The server is the stack under test (the client with ``active``: the active-open
    side): every packet delivered to it and every application call made on it is
    recorded with its virtual time.
    """
    cfg = config or fixed_config()
    client_stack, server_stack, drv, events = _two_stacks(cfg, loss, seed, active)
    client, server = _open(client_stack, server_stack, drv, md5_key)
    rng = random.Random(seed)
    payload = rng.randbytes(size)
    up = rng.randbytes(upload)
    state = {"sent": 0, "up_sent": 0}
    got = 0
    def waiting() -> bool:
        return server.readable_bytes > 0 or client.readable_bytes > 0 \
            or (client.send_space > 0 and state["sent"] < size) \
            or (state["up_sent"] < len(up) and server.send_space > 0)

    while got < size or state["up_sent"] < len(up):
        while state["sent"] < size and client.send_space:
            sent = state["sent"]
            chunk = payload[sent:sent + 65536][: client.send_space]
            if active:
                events.append(Event(drv.now(), "send", chunk))
            state["sent"] = sent + client.send(chunk, drv.now())
        if state["up_sent"] < len(up) and server.send_space:
            up_sent = state["up_sent"]
            chunk = up[up_sent:up_sent + 65536][: server.send_space]
            if not active:
                events.append(Event(drv.now(), "send", chunk))
            state["up_sent"] = up_sent + server.send(chunk, drv.now())
        if server.readable_bytes:
            if not active:
                events.append(Event(drv.now(), "read"))
            got += len(server.recv(1 << 22, drv.now()))
        if client.readable_bytes and active:
            events.append(Event(drv.now(), "read"))
        client.recv(1 << 22, drv.now())
        drv.kick()
        if not drv.run_until(waiting, 30):
            break
        if read_every:
            drv.run_for(read_every)
    drv.run_for(1.0)
    return Trace(events, cfg, md5_key, not active, {"virtual_s": drv.now(), "bytes": float(size)})


def record_rr(*, transactions: int = 500, request: int = 64, response: int = 64, seed: int = 1,
              md5_key: bytes | None = None, config: StackConfig | None = None, active: bool = False,
              loss: float = 0.0) -> Trace:
    """Request/response (netperf TCP_RR): the client sends ``request`` bytes, the server
    answers ``response`` bytes, ``transactions`` times, one at a time. Each request's
    segment acknowledges the previous response and vice versa: in-order data whose ACK
    advances. Records the server side (the client with ``active``)."""
    cfg = config or fixed_config()
    client_stack, server_stack, drv, events = _two_stacks(cfg, loss, seed, active)
    client, server = _open(client_stack, server_stack, drv, md5_key)
    rng = random.Random(seed)
    for _ in range(transactions):
        req = rng.randbytes(request)
        if active:
            events.append(Event(drv.now(), "send", req))
        client.send(req, drv.now())
        drv.kick()
        got = b""
        while len(got) < request:
            if not drv.run_until(lambda: server.readable_bytes > 0, 30):
                raise RuntimeError("request/response stalled while recording")
            if not active:
                events.append(Event(drv.now(), "read"))
            got += server.recv(1 << 16, drv.now())
        resp = rng.randbytes(response)
        if not active:
            events.append(Event(drv.now(), "send", resp))
        server.send(resp, drv.now())
        drv.kick()
        got = b""
        while len(got) < response:
            if not drv.run_until(lambda: client.readable_bytes > 0, 30):
                raise RuntimeError("request/response stalled while recording")
            if active:
                events.append(Event(drv.now(), "read"))
            got += client.recv(1 << 16, drv.now())
    drv.run_for(1.0)
    return Trace(events, cfg, md5_key, not active,
                 {"virtual_s": drv.now(), "transactions": float(transactions)})


@dataclass
class Replay:
    stack: Stack
    conn: Connection | None
    outputs: list[tuple[float, bytes]]
    delivered: bytearray
    receive_seconds: float = 0.0     # time spent inside Stack.receive (with what it sent)
    packets: int = 0


def replay(trace: Trace, *, header_prediction: bool, md5_fast_path: bool = True,
           events: list[Event] | None = None, keep_output: bool = True) -> Replay:
    """Feed the trace's events into a fresh server stack, running its timers in between."""
    cfg = dataclasses.replace(trace.config, header_prediction=header_prediction, md5_fast_path=md5_fast_path)
    outputs: list[tuple[float, bytes]] = []
    delivered = bytearray()
    conn: Connection | None = None
    if trace.listen:
        stack = Stack([SERVER], cfg, name="replay")
        lst = stack.listen(PORT)
        if trace.md5_key is not None:
            lst.md5_keys = Md5Keys()
            lst.md5_keys.add(CLIENT, trace.md5_key)
    else:
        # The active side: the same 4-tuple, ISN and TS offset as recorded (fixed secrets).
        stack = Stack([CLIENT], cfg, name="replay")
        lst = stack.listen(PORT + 1)     # never used: keeps the loop below uniform
        conn = stack.create_connection(SERVER, PORT)
        if trace.md5_key is not None:
            keys = Md5Keys()
            keys.add(SERVER, trace.md5_key)
            conn.inherit({}, keys)       # the public way in: the key list and its key for the peer
        stack.connect(conn, 0.0)
        for p in stack.datagrams_to_send():
            if keep_output:
                outputs.append((0.0, p.tobytes()))
    receive_seconds = 0.0
    packets = 0
    for ev in events if events is not None else trace.events:
        t = ev.time
        deadline = stack.get_timer()
        while deadline is not None and deadline <= t:
            stack.handle_timer(deadline)
            for p in stack.datagrams_to_send():
                if keep_output:
                    outputs.append((deadline, p.tobytes()))
            deadline = stack.get_timer()
        if conn is None and lst.accept_queue:
            conn = lst.accept()
        if ev.kind == "pkt":
            t0 = perf_counter()
            stack.receive(ev.data, t)
            receive_seconds += perf_counter() - t0
            packets += 1
        elif conn is not None and ev.kind == "read":
            delivered += conn.recv(1 << 22, t)
        elif conn is not None and ev.kind == "send":
            with contextlib.suppress(OSError):   # the trace may hold a send the replay refuses
                conn.send(ev.data, t)
        for p in stack.datagrams_to_send():
            if keep_output:
                outputs.append((t, p.tobytes()))
        if conn is None and lst.accept_queue:
            conn = lst.accept()
    if conn is not None:
        delivered += conn.recv(1 << 30, stack.now)
    return Replay(stack, conn, outputs, delivered, receive_seconds, packets)


def connection_state(conn: Connection | None) -> tuple[object, ...]:
    """The observable TCB fields the fast path must leave exactly as the slow path would."""
    if conn is None:
        return ()
    return (conn.state, conn.snd_una, conn.snd_nxt, conn.snd_max, conn.snd_wnd, conn.snd_wl1, conn.snd_wl2,
            conn.rcv_nxt, conn.rcv_adv, conn.ts_recent, conn.cc.cwnd, conn.cc.ssthresh, conn.rtt.srtt,
            conn.rtt.rttvar, conn.recovery.ca_state, conn.recovery.dupacks, conn.bytes_received,
            conn.bytes_acked,
            len(conn.rcv_buf), len(conn.snd_buf), conn.error)
