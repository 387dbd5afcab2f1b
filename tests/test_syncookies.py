"""SYN cookies (RFC 4987 §3.6; Linux net/ipv4/syncookies.c) and SYN-flood resistance.

- the cookie itself: encode/check, the minute counter and MAX_SYNCOOKIE_AGE, the MSS table,
  the timestamp-carried options (cookie_init_timestamp / cookie_timestamp_decode);
- the handshake against a scripted peer: a cookie SYN-ACK keeps no state, the 3rd ACK
  rebuilds the connection with the encoded MSS / window scale / SACK, bad or stale cookies
  are reset, the preload still goes out, TFO with a valid cookie bypasses the full queue;
- a flood: 100 000 spoofed SYNs injected with ``stack.receive`` while legitimate clients
  connect over the in-memory network; every legitimate connection completes and the
  stack's memory stays bounded (table sizes and tracemalloc).
"""

from __future__ import annotations

import ipaddress
import json
import random
import tracemalloc
from collections.abc import Iterator
from dataclasses import replace

import pytest

from pair import A_ADDR, B_ADDR, Pair, make_pair
from peer import ISN_SECRET, TS_SECRET, ScriptedPeer
from usertcp.net.memnet import LinkConfig
from usertcp.tcp import syncookies as sc
from usertcp.tcp.config import TFO_CLIENT_ENABLE, TFO_SERVER_ENABLE, StackConfig
from usertcp.tcp.connection import Connection, State
from usertcp.tcp.cookies import tfo_cookie
from usertcp.tcp.fastopen import CookieEntry, FastOpen, tfo_connect
from usertcp.tcp.invariants import check_invariants
from usertcp.tcp.stack import Listener
from usertcp.wire.packet import build_packet
from usertcp.wire.segment import SYN
from usertcp.wire.tcp import encode_options

SECRET = bytes(range(16))
C_IP, S_IP = bytes([192, 0, 2, 1]), bytes([192, 168, 0, 1])
A_IP, B_IP = ipaddress.ip_address(A_ADDR).packed, ipaddress.ip_address(B_ADDR).packed
FULL = encode_options(mss=1400, wscale=7, sack_permitted=True, ts=(1000, 0))


# --------------------------------------------------------------------------- the cookie

def test_cookie_round_trip_age_and_tuple() -> None:
    for idx in range(4):
        ck = sc.make_cookie(SECRET, C_IP, S_IP, 40000, 80, 12345, idx, 10.0)
        assert sc.check_cookie(SECRET, ck, C_IP, S_IP, 40000, 80, 12345, 10.0) == idx
        assert sc.check_cookie(SECRET, ck, C_IP, S_IP, 40000, 80, 12345, 100.0) == idx   # next count
        assert sc.check_cookie(SECRET, ck, C_IP, S_IP, 40000, 80, 12345, 130.0) == -1    # 2 counts old
    ck = sc.make_cookie(SECRET, C_IP, S_IP, 40000, 80, 12345, 3, 10.0)
    # Another port, address or secret gives a value the table rejects (almost surely); the
    # client ISN is added, not hashed (as in Linux), so only a shift beyond the index fails.
    for args in ((C_IP, S_IP, 40001, 80, 12345), (C_IP, S_IP, 40000, 80, 12345 + 1000),
                 (bytes([192, 0, 2, 9]), S_IP, 40000, 80, 12345)):
        assert not 0 <= sc.check_cookie(SECRET, ck, *args, 10.0) < 4
    assert not 0 <= sc.check_cookie(bytes(16), ck, C_IP, S_IP, 40000, 80, 12345, 10.0) < 4


def test_forged_cookies_are_rejected() -> None:
    rng = random.Random(4987)
    ok = sum(0 <= sc.check_cookie(SECRET, rng.getrandbits(32), C_IP, S_IP, 40000, 80, 7, 5.0) < 4
             for _ in range(20_000))
    # A random guess passes with probability 2 ages * 4 / 2**32.
    assert ok == 0


def test_mss_table_and_timestamp_options() -> None:
    assert [sc.MSS_TABLE_V4[sc.mss_index(m, False)] for m in (100, 536, 1299, 1300, 1459, 1460, 9000)] == \
        [536, 536, 536, 1300, 1440, 1460, 1460]
    assert sc.MSS_TABLE_V6[sc.mss_index(1440, True)] == 1440
    for now_ms in (0, 63, 64, 1000, 123_456_789, 0xFFFFFFFF):
        for ws, sack in ((-1, False), (0, True), (7, True), (14, False)):
            ts = sc.cookie_ts_encode(now_ms, ws, sack)
            assert sc.cookie_ts_decode(ts & sc.TSMASK) == (ws, sack)
            if now_ms >= 64:
                assert now_ms - 64 < ts <= now_ms      # never ahead of the clock


# --------------------------------------------------------------------------- handshake

def cookie_peer() -> ScriptedPeer:
    p = ScriptedPeer(StackConfig(syncookies=2))
    p.listen()
    return p


def test_cookie_handshake_keeps_no_state_and_restores_options() -> None:
    p = cookie_peer()
    assert p.listener is not None
    p.listener.set_preload(b"220 hello\r\n", 0.0)
    p.send("S", 0, options=FULL)
    sa = p.expect("S.", 0, 1)
    assert p.stack.connections == {} and not p.listener.embryonic
    assert (sa.mss, sa.wscale, sa.sack_permitted, sa.ts_ecr) == (1460, p.stack.config.rcv_wscale, True, 1000)
    assert sc.cookie_ts_decode((sa.ts_val - p.stack.ts_offset(p.stack.create_connection(
        "192.0.2.1", 40000, local_port=1))) & sc.TSMASK) == (7, True)
    assert p.stack.counters["TcpExtSyncookiesSent"] == 1
    p.advance(0.2)
    p.expect_nothing()                       # a cookie SYN-ACK is never retransmitted
    p.send(".", 1, 1, options=encode_options(ts=(1200, sa.ts_val)), payload=b"GET /")
    conn = p.listener.accept()
    assert conn is not None and conn.state is State.ESTABLISHED
    assert conn.peer_mss == 1300 and conn.mss == 1300 - 12          # msstab entry <= 1400
    assert (conn.ws_ok, conn.snd_wscale, conn.sack_ok, conn.ts_ok) == (True, 7, True, True)
    assert conn.recv(100, p.now) == b"GET /"
    out = p.expect("P.", 1, 6, payload_len=11)                       # the preload, after the 3rd ACK
    assert bytes(out.payload) == b"220 hello\r\n"
    assert p.stack.counters["TcpExtSyncookiesRecv"] == 1
    check_invariants(p.stack)


def test_cookie_without_timestamps_offers_no_wscale_or_sack() -> None:
    p = cookie_peer()
    p.send("S", 0, options=encode_options(mss=1460, wscale=7, sack_permitted=True))
    sa = p.expect("S.", 0, 1)
    assert sa.wscale == -1 and not sa.sack_permitted and sa.ts_val == -1 and sa.mss == 1460
    p.send(".", 1, 1)
    conn = p.listener.accept() if p.listener else None
    assert conn is not None
    assert (conn.ws_ok, conn.sack_ok, conn.ts_ok, conn.peer_mss) == (False, False, False, 1460)


@pytest.mark.parametrize("case", ["bad-cookie", "stale", "no-overflow", "wrong-seq"])
def test_invalid_cookie_acks_are_reset(case: str) -> None:
    p = cookie_peer() if case != "no-overflow" else ScriptedPeer(StackConfig(syncookies=1))
    if case == "no-overflow":
        p.listen()
        p.send(".", 1, 12345)                 # no overflow happened: plain RFC 9293 reset
        p.expect("R", 12345)
        assert p.stack.counters["TcpExtSyncookiesFailed"] == 0
        return
    p.send("S", 0, options=FULL)
    sa = p.expect("S.", 0, 1)
    opts = encode_options(ts=(1200, sa.ts_val))
    if case == "stale":
        p.advance(100.0)
        p.send("S", 0, options=FULL, sport=40999)   # a later overflow keeps cookies "recent"
        p.drain()
        p.advance(50.0)                       # ...but this cookie is two counts old
    ack, seq = 1, 1
    if case == "bad-cookie":
        ack = 1 + 5000      # (the index is added in: Linux too takes ack+1 as index+1)
    if case == "wrong-seq":
        seq = 1449
    p.send(".", seq, ack, options=opts)
    p.expect("R", ack)
    assert p.stack.counters["TcpExtSyncookiesFailed"] == 1 and not p.stack.connections


def test_accept_queue_full_drops_the_cookie_ack() -> None:
    p = ScriptedPeer(StackConfig(syncookies=2))
    lst = p.stack.listen(p.local_port, backlog=1)
    p.send("S", 0, options=FULL)
    sa = p.expect("S.", 0, 1)
    p.send(".", 1, 1, options=encode_options(ts=(1200, sa.ts_val)))
    assert len(lst.accept_queue) == 1
    p.peer_port += 1
    p.send("S", 0, options=FULL)             # the accept queue is full: the SYN is dropped
    p.expect_nothing()
    assert p.stack.counters["TcpExtListenOverflows"] == 1


def test_syncookies_off_drops_on_overflow() -> None:
    p = ScriptedPeer(StackConfig(syncookies=0, max_syn_backlog=2))
    p.listen()
    for i in range(4):
        p.peer_port = 41000 + i
        p.send("S", 0, options=FULL)
    assert len(p.drain()) == 2
    c = p.stack.counters
    assert c["UsertcpSynQueueDrops"] == 2 and c["TcpExtTCPReqQFullDrop"] == 2 and c["TcpExtListenDrops"] == 2


# --------------------------------------------------------------------------- TFO under a full queue

def tfo_pair(cookies: int) -> tuple[Pair, Listener]:
    cfg_b = StackConfig(fastopen=TFO_SERVER_ENABLE | TFO_CLIENT_ENABLE, syncookies=cookies,
                        max_syn_backlog=1, isn_secret=ISN_SECRET, ts_secret=TS_SECRET)
    pair = make_pair(LinkConfig(delay=0.005), cfg_b=cfg_b)
    lst = pair.b.listen(80)
    lst.fastopen_qlen = 16
    lst.set_preload(b"PRE", 0.0)
    if cookies == 1:
        # One spoofed SYN fills the one-entry SYN queue (its SYN-ACKs go nowhere).
        pkt = build_packet(src=bytes([198, 51, 100, 1]), dst=B_IP, sport=1000, dport=80, seq=1, ack=0,
                           flags=SYN, window=1000, options=encode_options(mss=1460))
        pair.b.receive(pkt.tobytes(), pair.now)
        assert len(lst.embryonic) == sc.syn_queue_limit(pair.b, lst) == 1
    return pair, lst


def tfo_round(pair: Pair, lst: Listener, data: bytes) -> tuple[Connection, Connection]:
    c = pair.a.create_connection(B_ADDR, 80)
    n = tfo_connect(c, data, pair.now)                # what the SYN carries (Linux fo->copied)
    pair.driver.kick()
    if n < len(data):                                 # the rest is written once connected
        assert pair.driver.run_until(lambda: c.state is State.ESTABLISHED, 10)
        c.send(data[n:], pair.now)
        pair.driver.kick()
    assert pair.driver.run_until(lambda: bool(lst.accept_queue), 10)
    s = lst.accept()
    assert s is not None
    got = bytearray()

    def done() -> bool:
        got.extend(s.recv(1 << 16, pair.now))
        return len(got) >= len(data) and c.readable_bytes >= 3
    assert pair.driver.run_until(done, 10)
    assert bytes(got) == data and c.recv(10, pair.now) == b"PRE"
    return c, s


@pytest.mark.parametrize("cookies", [1, 2])
def test_tfo_and_preload_under_a_full_syn_queue(cookies: int) -> None:
    pair, lst = tfo_pair(cookies)
    mib = pair.b.counters
    # First contact, a TFO cookie request: under the flood it gets a SYN cookie and no TFO
    # (as in Linux); the SYN's data follows the handshake and the preload still arrives.
    c, _ = tfo_round(pair, lst, b"first request")
    assert mib["TcpExtSyncookiesRecv"] == 1 and mib["TcpExtTCPFastOpenPassive"] == 0
    assert not c.syn_data_acked
    # A client holding a valid TFO cookie (from an earlier, uncongested exchange)...
    hooks = pair.a.hooks
    assert isinstance(hooks, FastOpen)
    hooks.client.cache.entries[B_IP] = CookieEntry(cookie=tfo_cookie(pair.b.config.fastopen_key, A_IP, B_IP))
    c, _ = tfo_round(pair, lst, b"data in the SYN")
    # ...proves its address: the SYN bypasses the full queue, its data is taken at SYN time
    # (RFC 7413), and the preload follows.
    assert mib["UsertcpSynCookieTfoBypass"] == 1 and mib["TcpExtTCPFastOpenPassive"] == 1
    assert c.syn_data_acked and mib["TcpExtSyncookiesRecv"] == 1
    check_invariants(pair.b)


# --------------------------------------------------------------------------- the flood

FLOOD = 100_000
LEGIT = 200


def spoofed_syns(rng: random.Random, n: int, dst: bytes) -> Iterator[bytes]:
    """Cheap spoofed SYNs: random source address, port and ISN, Linux's option set."""
    opts = encode_options(mss=1460, sack_permitted=True, ts=(rng.getrandbits(32), 0), wscale=7)
    for _ in range(n):
        src = rng.getrandbits(32) | 0x01000000
        yield build_packet(src=src.to_bytes(4, "big"), dst=dst, sport=rng.randrange(1024, 65536), dport=80,
                           seq=rng.getrandbits(32), ack=0, flags=SYN, window=64240, options=opts).tobytes()


def test_syn_flood_legitimate_clients_complete_and_memory_is_bounded() -> None:
    rng = random.Random(4987)
    cfg = StackConfig(isn_secret=ISN_SECRET, ts_secret=TS_SECRET)
    pair = make_pair(LinkConfig(delay=0.005), cfg_a=replace(cfg, isn_secret=TS_SECRET), cfg_b=cfg)
    b, drv = pair.b, pair.driver
    lst = b.listen(80, backlog=128)
    lst.set_preload(b"220 ready\r\n", 0.0)
    bound = sc.syn_queue_limit(b, lst)
    dst = ipaddress.ip_address(B_ADDR).packed
    server_conns: list[Connection] = []
    clients: list[Connection] = []
    got: dict[int, bytearray] = {}
    max_emb = max_conns = 0
    per_tick = 500            # 100 000 SYNs over 2 s of virtual time: 50 000 SYN/s
    mem_start = mem_end = 0
    syns = spoofed_syns(rng, FLOOD, dst)
    tick = 0

    def serve() -> None:
        while (s := lst.accept()) is not None:
            server_conns.append(s)
        for s in server_conns:
            if s.readable_bytes and s.state in (State.ESTABLISHED, State.CLOSE_WAIT):
                s.send(s.recv(1 << 16, drv.now()), drv.now())        # echo
            if s.fin_received and not s.closed_by_app:
                s.close(drv.now())

    sent = 0
    while sent < FLOOD:
        if tick == 100:
            tracemalloc.start()
        for pkt in (next(syns) for _ in range(per_tick)):
            b.receive(pkt, drv.now())
        sent += per_tick
        if tick % 2 == 0 and len(clients) < LEGIT:
            for _ in range(5):            # legitimate clients connect in the middle of it
                c = pair.a.create_connection(B_ADDR, 80)
                pair.a.connect(c, drv.now())
                c.send(f"hello {len(clients)}\n".encode(), drv.now())
                got[id(c)] = bytearray()
                clients.append(c)
        serve()
        max_emb = max(max_emb, len(lst.embryonic))
        max_conns = max(max_conns, len(b.connections))
        drv.kick()            # the cookie SYN-ACKs leave (to addresses with no route)
        drv.run_for(0.004)
        if tick == 101:       # one batch in: what tracing itself allocates once is behind us
            mem_start = tracemalloc.get_traced_memory()[0]
        if tick == 105:
            mem_end, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
        tick += 1
    # Let the clients finish: read the preload and the echo, close.
    expect = {id(c): b"220 ready\r\n" + f"hello {i}\n".encode() for i, c in enumerate(clients)}

    def finished() -> bool:
        serve()
        for c in clients:
            if c.readable_bytes:
                got[id(c)] += c.recv(1 << 16, drv.now())
            if len(got[id(c)]) >= len(expect[id(c)]) and not c.write_shutdown:
                c.shutdown(False, True, drv.now())
        return all(c.fin_received and c.state in (State.TIME_WAIT, State.CLOSED) for c in clients)

    for _ in range(3000):
        if finished():
            break
        drv.kick()
        drv.run_for(0.02)
    assert finished(), "legitimate clients did not finish"
    completed = sum(bytes(got[id(c)]) == expect[id(c)] and not c.error for c in clients)
    mib = b.counters
    figures = {"figure": "syn_flood", "syns_absorbed": FLOOD, "syncookies_sent": mib["TcpExtSyncookiesSent"],
               "syncookies_recv": mib["TcpExtSyncookiesRecv"], "legit_clients": len(clients),
               "legit_completed": completed, "max_syn_queue": max_emb, "syn_queue_bound": bound,
               "max_connections": max_conns,
               "tracemalloc_growth_bytes_per_2000_syns": mem_end - mem_start, "tracemalloc_peak": peak}
    print(json.dumps(figures))
    assert completed == len(clients) == LEGIT
    assert max_emb <= bound
    assert max_conns <= bound + LEGIT
    assert mib["TcpExtSyncookiesSent"] >= FLOOD - bound
    # Once the SYN queue is full (and the clients have connected, ticks 0-80), absorbing
    # 2 000 more SYNs retains (almost) nothing: a cookie is stateless (< 16 bytes a SYN).
    assert mem_end - mem_start < 32 * 1024, figures
    assert peak - mem_start < 1024 * 1024, figures
    check_invariants(b)
