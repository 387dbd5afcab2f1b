"""Property tests of the TCP core: arbitrary input never breaks it, and RFC 5961 holds.

(a) Random segment sequences (random flags, seq/ack near and far from the expected
    values, windows, options, payloads; random bytes; bit-flipped valid packets) are
    fed to a stack with an established connection and a listener. Nothing may raise,
    and after every step: SND.UNA <= SND.NXT <= SND.MAX <= end of data + FIN, RCV.NXT
    never decreases, the state is a State, a live TCB is never CLOSED, a RST is never
    answered with a RST (RFC 9293 §3.10.7), everything emitted parses with valid
    checksums, and what recv() returns is a prefix of the peer's byte stream.
(b) RFC 5961 blind in-window attacks against a transfer between two stacks: in-window
    RSTs that are not exact, SYNs, and data with in-window seq but unacceptable ACK
    values, with the right 4-tuple. The transfer completes byte-identical, no
    connection fails, and challenge ACKs respect the configured limits.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pair import Transfers, make_pair
from peer import ISN_SECRET, PEER_ISN, TS_SECRET, ScriptedPeer
from usertcp.net.memnet import LinkConfig
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import SENDING, SYNCHRONIZED, Connection, State
from usertcp.wire.packet import build_packet
from usertcp.wire.segment import ACK, FIN, PSH, RST, SYN, URG
from usertcp.wire.tcp import encode_options

MASK = 0xFFFFFFFF
STREAM_LEN = 1 << 16          # divides 2**32, so a wrapped sequence number maps to the same byte
STREAM = random.Random(5961).randbytes(STREAM_LEN)


def stream_bytes(off: int, n: int) -> bytes:
    """The peer's bytes at receive offset ``off`` (offset 1 is the first data byte)."""
    start = (off - 1) % STREAM_LEN
    out = STREAM[start:start + n]
    while len(out) < n:
        out += STREAM[:n - len(out)]
    return out


# --------------------------------------------------------------------------- (a) fuzzing

COMMON_FLAGS = [ACK, ACK | PSH, ACK | FIN, ACK | FIN | PSH, SYN, SYN | ACK, RST, RST | ACK, FIN, 0,
                ACK | URG, SYN | FIN, RST | SYN]
flags_st = st.one_of(st.sampled_from(COMMON_FLAGS), st.integers(0, 0xFF))
# Mostly what a real peer would send (exactly the expected value), else near or far off.
delta_st = st.one_of(st.just(0), st.just(0), st.integers(-3, 3), st.integers(-2000, 2000),
                     st.integers(-70_000, 70_000), st.integers(0, MASK))
options_st = st.one_of(
    st.just(b""),
    st.builds(lambda v, e: encode_options(ts=(v, e)), st.integers(0, MASK), st.integers(0, MASK)),
    st.builds(lambda m, w, s: encode_options(mss=m, wscale=w, sack_permitted=s),
              st.integers(0, 0xFFFF), st.integers(-1, 20), st.booleans()),
    st.builds(lambda blocks: encode_options(sack_blocks=blocks),
              st.lists(st.tuples(st.integers(0, MASK), st.integers(0, MASK)), min_size=1, max_size=4)),
    st.binary(max_size=40).map(lambda b: b + b"\x00" * (-len(b) % 4)),   # arbitrary option bytes
)

seg_st = st.fixed_dictionaries({
    "kind": st.just("seg"),
    "flags": flags_st,
    "seq": delta_st,              # relative to our RCV.NXT
    "ack": delta_st,              # relative to our SND.NXT
    "ack_base": st.sampled_from(["nxt", "una"]),
    "win": st.integers(0, 0xFFFF),
    "options": options_st,
    "plen": st.one_of(st.just(0), st.integers(1, 1500)),
    "port": st.sampled_from(["conn", "conn", "conn", "listener", "other"]),
    "flip": st.one_of(st.none(), st.none(), st.none(), st.integers(0, 10_000)),
    "flip_trusted": st.booleans(),
})
# A well-behaved peer segment: the next in-order bytes, acknowledging everything we sent.
good_st = st.fixed_dictionaries({
    "kind": st.just("good"),
    "plen": st.one_of(st.just(0), st.integers(1, 1400)),
    "fin": st.integers(0, 30).map(lambda x: x == 0),
    "ack_all": st.booleans(),
})
event_st = st.one_of(
    seg_st, good_st, seg_st, good_st,
    st.fixed_dictionaries({"kind": st.just("raw"), "data": st.binary(max_size=120)}),
    st.fixed_dictionaries({"kind": st.just("advance"),
                           "dt": st.sampled_from([0.001, 0.05, 0.25, 1.0, 3.0, 30.0])}),
    st.fixed_dictionaries({"kind": st.just("send"), "n": st.integers(1, 5000)}),
    st.fixed_dictionaries({"kind": st.just("app"),
                           "op": st.sampled_from(["recv"] * 6 + ["shutdown", "close"])}),
)

HANDSHAKE_OPTIONS = {
    "plain": encode_options(mss=1460),
    "full": encode_options(mss=1460, wscale=7, sack_permitted=True, ts=(1000, 0)),
}


class Checker:
    """Holds the invariants that must hold after every step."""

    def __init__(self, peer: ScriptedPeer, conn: Connection) -> None:
        self.peer = peer
        self.conn = conn
        # SO_OOBINLINE: urgent bytes stay in the stream, so recv() returns exactly the stream
        # (without it an urgent byte is out of band, as in Linux: tcp/urgent.py).
        conn.rx.urgent.set_inline(True)
        self.delivered = bytearray()
        self.rcv_nxt: dict[int, tuple[Connection, int]] = {}
        self.readable = True

    def read(self) -> None:
        if self.readable and not self.conn.closed_by_app:
            self.delivered += self.conn.recv(1 << 20, self.peer.now)

    def check(self) -> None:
        stack = self.peer.stack
        conns = list(stack.connections.values())
        if self.conn not in conns:
            conns.append(self.conn)
        for c in conns:
            assert isinstance(c.state, State)
            assert c.snd_una <= c.snd_nxt <= c.snd_max, (c, c.snd_una, c.snd_nxt, c.snd_max)
            assert c.snd_max <= c.snd_buf.end + 2, (c, c.snd_max, c.snd_buf.end)
            prev = self.rcv_nxt.get(id(c))
            if prev is not None and prev[0] is c:
                assert c.rcv_nxt >= prev[1], (c, prev[1], c.rcv_nxt)
            self.rcv_nxt[id(c)] = (c, c.rcv_nxt)
        for key, c in stack.connections.items():
            assert c.state is not State.CLOSED, c
            assert c.key == key
        if self.conn.state is State.CLOSED:
            assert stack.connections.get(self.conn.key) is not self.conn
        self.read()
        n = len(self.delivered)
        assert bytes(self.delivered) == stream_bytes(1, n), f"recv() diverged from the stream ({n} bytes)"


def build_event_packet(peer: ScriptedPeer, conn: Connection, ev: dict[str, Any]) -> bytes:
    flags = ev["flags"]
    seq_off = conn.rcv_nxt + ev["seq"]
    base = conn.snd_nxt if ev["ack_base"] == "nxt" else conn.snd_una
    ack_off = base + ev["ack"]
    plen = ev["plen"]
    payload = stream_bytes(seq_off + (1 if flags & SYN else 0), plen) if plen else b""
    sport, dport = peer.peer_port, peer.local_port
    if ev["port"] == "listener":
        sport = 50_000 + (ev["seq"] & 0x3FF)
    elif ev["port"] == "other":
        dport = 9000 + (ev["ack"] & 0xFF)
    options = ev["options"]
    if len(options) > 40:
        options = b""
    pkt = build_packet(src=conn.remote_ip, dst=conn.local_ip, sport=sport, dport=dport,
                       seq=(PEER_ISN + seq_off) & MASK, ack=(peer.local_isn + ack_off) & MASK,
                       flags=flags, window=ev["win"], options=options, payload=[payload] if payload else [])
    return pkt.tobytes()


def beyond_window(conn: Connection, ev: dict[str, Any]) -> bool:
    """True if the (unflipped) event segment lies wholly outside the receive window."""
    if ev["port"] != "conn" or conn.state not in SYNCHRONIZED or ev["flags"] & SYN:
        return False
    d = (ev["seq"] + (1 << 31)) % (1 << 32) - (1 << 31)      # how the stack reads it: seq_diff
    wnd = max(conn.rcv_adv - conn.rcv_nxt, 0)
    seg_len = ev["plen"] + (1 if ev["flags"] & FIN else 0)
    if wnd == 0:
        return d != 0 or seg_len > 0
    return d >= wnd or d + max(seg_len, 1) <= 0


def flip(data: bytes, where: int, trusted: bool) -> bytes:
    b = bytearray(data)
    if trusted:
        # Only bits that do not move data: TCP flags, window, checksum, urgent pointer
        # (bytes 13..19 of the TCP header after a 20-byte IPv4 header).
        # Not the SYN bit either: data in a SYN starts one sequence number later.
        pos = 20 + 13 + (where // 8) % 7
    else:
        pos = (where // 8) % len(b)
    bit = where % 8
    if trusted and pos == 33 and bit == 1:
        bit = 2
    b[pos] ^= 1 << bit
    return bytes(b)


def run_events(events: list[dict[str, Any]], handshake: str) -> None:
    peer = ScriptedPeer(StackConfig(time_wait=5.0, fin_timeout=10.0, rto_initial=1.0))
    lst = peer.listen()
    peer.send("S", 0, options=HANDSHAKE_OPTIONS[handshake])
    syn_ack = peer.expect("S.", 0, 1)
    peer_ts = 1001                      # the peer's timestamp clock: 1 ms ticks
    ack_opts = encode_options(ts=(peer_ts, syn_ack.ts_val)) if syn_ack.ts_val >= 0 else b""
    peer.send(".", 1, 1, options=ack_opts)
    conn = lst.accept()
    assert conn is not None and conn.state is State.ESTABLISHED
    checker = Checker(peer, conn)
    checker.check()
    for ev in events:
        kind = ev["kind"]
        if kind == "seg":
            data = build_event_packet(peer, conn, ev)
            is_rst = bool(ev["flags"] & RST)
            beyond = beyond_window(conn, ev)
            rcv_nxt, ooo, state = conn.rcv_nxt, conn.ooo.bytes_queued, conn.state
            if ev["flip"] is not None:
                data = flip(data, ev["flip"], ev["flip_trusted"])
                is_rst = bool(data[33] & RST)
                beyond = False
                peer.inject(data, checksum_verified=ev["flip_trusted"])
            else:
                peer.inject(data)
            out = peer.drain()
            if is_rst:
                # RFC 9293 §3.10.7: a segment carrying RST is never answered with a RST.
                assert not any(s.seg.flags & RST for s in out), [peer.describe(s) for s in out]
            if beyond:
                # RFC 9293 §3.10.7.4 first: an unacceptable segment is dropped (at most an
                # ACK goes back); RFC 5961 §3.2: an out-of-window RST is dropped silently.
                assert (conn.rcv_nxt, conn.ooo.bytes_queued, conn.state) == (rcv_nxt, ooo, state), ev
                if is_rst:
                    assert not out, [peer.describe(s) for s in out]
        elif kind == "good":
            opts = encode_options(ts=(peer_ts + int(peer.now * 1000), conn.ts_recent)) if conn.ts_ok else b""
            flags = "P." if ev["plen"] else "."
            if ev["fin"]:
                flags = "F" + flags
            ack = conn.snd_nxt if ev["ack_all"] else conn.snd_una
            peer.send(flags, conn.rcv_nxt, ack, options=opts, payload=stream_bytes(conn.rcv_nxt, ev["plen"]))
            peer.drain()
        elif kind == "raw":
            peer.inject(ev["data"])
            peer.drain()
        elif kind == "advance":
            peer.advance(ev["dt"])
            peer.drain()
        elif kind == "send":
            if conn.state in SENDING and not conn.write_shutdown and not conn.error:
                conn.send(stream_bytes(1, ev["n"]), peer.now)
            peer.drain()
        else:
            op = ev["op"]
            if op == "recv":
                checker.read()
            elif op == "shutdown":
                conn.shutdown(False, True, peer.now)
            else:
                checker.read()
                checker.readable = False
                conn.close(peer.now)
            peer.drain()
        checker.check()
    event(f"final state {conn.state.name}")
    event("data delivered" if checker.delivered else "no data delivered")
    event("sent data acked" if conn.snd_una > 1 else "no data acked")


@settings(max_examples=400, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(events=st.lists(event_st, min_size=10, max_size=60),
       handshake=st.sampled_from(sorted(HANDSHAKE_OPTIONS)))
def test_random_segments_keep_invariants(events: list[dict[str, Any]], handshake: str) -> None:
    run_events(events, handshake)


# --------------------------------------------------------------------------- (b) RFC 5961

def spoof(target: Connection, *, seq: int, ack: int, flags: int, payload: bytes = b"") -> bytes:
    """A segment for ``target`` from its peer's address and port (an off-path attacker)."""
    return build_packet(src=target.remote_ip, dst=target.local_ip, sport=target.remote_port,
                        dport=target.local_port, seq=seq & MASK, ack=ack & MASK, flags=flags,
                        window=65535, payload=[payload] if payload else []).tobytes()


def attack_segment(c: Connection, rng: random.Random) -> tuple[str, bytes]:
    """One blind guess that RFC 5961 says must not harm ``c``."""
    rcv_nxt = (c.irs + c.rcv_nxt) & MASK
    wnd = max(c.rcv_adv - c.rcv_nxt, 2)
    bad_ack = rng.choice([
        (c.iss + c.snd_max + rng.randint(1, 1 << 30)),                    # acks data never sent
        (c.iss + c.snd_una - c.max_snd_wnd - rng.randint(1, 1 << 30)),   # older than MAX.SND.WND
    ])
    kind = rng.choice(["rst", "syn", "data", "ack"])
    if kind == "rst":
        # In window but not RCV.NXT: RFC 5961 §3.2 -> challenge ACK, no reset.
        seq = rcv_nxt + rng.randint(1, wnd - 1)
        return kind, spoof(c, seq=seq, ack=rng.getrandbits(32), flags=rng.choice([RST, RST | ACK]))
    if kind == "syn":
        # Any sequence number: RFC 5961 §4.2 -> challenge ACK, no reset.
        return kind, spoof(c, seq=rng.getrandbits(32), ack=rng.getrandbits(32),
                           flags=rng.choice([SYN, SYN | ACK]))
    seq = rcv_nxt + rng.randint(0, wnd - 1)
    if kind == "data":
        # In-window data with an unacceptable ACK: RFC 5961 §5.2 -> discarded.
        junk = rng.randbytes(rng.randint(1, 1000))
        return kind, spoof(c, seq=seq, ack=bad_ack, flags=ACK | PSH, payload=junk)
    return kind, spoof(c, seq=seq, ack=bad_ack, flags=ACK)


def attacked_transfer(seed: int, per_tick: int, limit: int, invalid_ratelimit: float) -> None:
    cfg = StackConfig(challenge_ack_limit=limit, invalid_ratelimit=invalid_ratelimit,
                      isn_secret=ISN_SECRET, ts_secret=TS_SECRET)
    # 1 Mbit/s: 256 KB take about two seconds of virtual time, so the attack spans
    # several one-second rate-limit windows.
    pair = make_pair(LinkConfig(delay=0.005, bandwidth_bps=1e6), seed=seed, cfg_a=cfg,
                     cfg_b=replace(cfg, isn_secret=TS_SECRET, ts_secret=ISN_SECRET))
    client, server = pair.open()
    drv = pair.driver
    rng = random.Random(seed)
    up = rng.randbytes(256 * 1024)
    down = rng.randbytes(128 * 1024)
    targets = [(pair.a, client), (pair.b, server)]
    buckets: dict[tuple[int, int], int] = {}
    injected: dict[str, int] = {}
    transfers = Transfers([(client, server, up), (server, client, down)])
    got = transfers.got
    deadline = drv.now() + 120.0

    while not transfers.done:
        now = drv.now()
        assert now < deadline, f"transfer stalled: {transfers.progress()}"
        transfers.step(now)
        for i, (stack, conn) in enumerate(targets):
            if conn.state in (State.CLOSED, State.TIME_WAIT):
                continue   # a SYN may legitimately reopen a TIME-WAIT pair (RFC 9293 §3.10.7.4, RFC 6191)
            before = stack.counters["TcpExtTCPChallengeACK"]
            for _ in range(per_tick):
                kind, pkt = attack_segment(conn, rng)
                injected[kind] = injected.get(kind, 0) + 1
                stack.receive(pkt, now)
                assert conn.error == 0 and conn.state is not State.CLOSED, (kind, conn)
            buckets[(i, int(now))] = buckets.get((i, int(now)), 0) + \
                stack.counters["TcpExtTCPChallengeACK"] - before
        drv.kick()
        drv.run_for(0.01)

    assert bytes(got[id(server)]) == up and bytes(got[id(client)]) == down
    assert client.error == 0 and server.error == 0
    assert set(injected) == {"rst", "syn", "data", "ack"}
    seconds = {sec for _, sec in buckets}
    assert len(seconds) >= 3, "the attack should span several rate-limit windows"
    for stack, _ in targets:
        c = stack.counters
        if invalid_ratelimit == 0:
            assert c["TcpExtTCPChallengeACK"] > 0          # the attacks were challenged
        # (With the per-socket limit, plain out-of-window ACKs may use up its budget.)
        # ...and a limit engaged: the per-socket one, or the stack's budget (which Linux
        # leaves uncounted in TCPACKSkippedChallenge, tcp_send_challenge_ack).
        assert c["TcpExtTCPACKSkippedChallenge"] + c["UsertcpChallengeACKBudgetSpent"] > 0
        assert c["TcpEstabResets"] == 0
    # RFC 5961 §7 (stack-wide challenge_ack_limit per second, randomised) and Linux's per-socket
    # tcp_invalid_ratelimit (one out-of-window ACK per interval).
    # The stack's budget is drawn per second from [limit/2, limit*3/2) (tcp/challenge.py).
    per_second = limit + (limit + 1) // 2 - 1
    if invalid_ratelimit > 0:
        per_second = min(per_second, int(1 / invalid_ratelimit) + (1 if (1 / invalid_ratelimit) % 1 else 0))
    worst = max(buckets.values())
    assert worst <= per_second, (worst, per_second, buckets)


@settings(max_examples=6, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**16), per_tick=st.integers(3, 20), limit=st.sampled_from([4, 10]))
def test_blind_injection_stack_limit(seed: int, per_tick: int, limit: int) -> None:
    # Per-socket limiting off: only the stack-wide per-second challenge ACK budget applies.
    attacked_transfer(seed, per_tick, limit, invalid_ratelimit=0.0)


def test_blind_injection_per_socket_limit() -> None:
    # Defaults (challenge_ack_limit=1000, invalid_ratelimit=0.5 s): the per-socket limit
    # caps a connection at two challenge ACKs in any one-second window.
    attacked_transfer(7, 8, 1000, invalid_ratelimit=0.5)
