"""Applications on the object ring: the forwarding proxy and the memcached-protocol cache."""

from __future__ import annotations

import os
import struct
import types
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from pair import Pair, make_pair
from usertcp.apps.cache import CacheServer, serve_cache
from usertcp.apps.proxy import Forwarder, parse_http_header, pump
from usertcp.net.driver import RealTimeDriver
from usertcp.net.memnet import LinkConfig, Network
from usertcp.objects import Ring, Store
from usertcp.tcp.connection import Connection
from usertcp.tcp.stack import Stack

if TYPE_CHECKING:
    from socket import AddressFamily, SocketKind

    from usertcp.socket import Host


def _four(pair: Pair) -> tuple[Connection, Connection, Connection, Connection]:
    """client(a) -> proxy(b):80, proxy(b) -> upstream(a):81."""
    client, down = pair.open(80)
    lst = pair.a.listen(81)
    up = pair.b.create_connection("10.0.0.1", 81)
    pair.b.connect(up, pair.now)
    pair.driver.kick()
    assert pair.driver.run_until(lambda: bool(lst.accept_queue), 5)
    upstream = lst.accept()
    assert upstream is not None
    return client, down, up, upstream


def _run(pair: Pair, cond: Callable[[], bool], step: Callable[[], object], timeout: float = 60.0) -> None:
    assert pair.driver.run_until(lambda: step() is None and cond(), timeout)


def test_length_prefixed_proxy_forwards_bodies_as_objects() -> None:
    pair = make_pair(LinkConfig(delay=0.001))
    client, down, up, upstream = _four(pair)
    store = Store(4 << 20, driver=pair.driver, compact_ratio=0)
    ring = Ring(store)
    fwd = Forwarder(store, ring, down, up, "length")
    bodies = [os.urandom(n) for n in (0, 1, 1000, 70_000, 300_000, 5)]
    wire = b"".join(struct.pack(">I", len(b)) + b for b in bodies)
    sent = 0
    got = bytearray()

    def step() -> None:
        nonlocal sent
        if sent < len(wire) and client.send_space > 0:
            sent += client.send(wire[sent:sent + 65536], pair.now)
            if sent == len(wire):
                client.shutdown(False, True, pair.now)
        fwd.poll()
        if upstream.readable_bytes:
            got.extend(upstream.recv(1 << 22, pair.now))
        pair.driver.kick()

    _run(pair, lambda: len(got) == len(wire) and fwd.done, step)
    assert bytes(got) == wire
    assert fwd.messages == len(bodies) and fwd.body_bytes == sum(map(len, bodies))
    assert fwd.eof and not fwd.error
    # The proxy read only the 4-byte headers; SEND_LAST released every body.
    assert store.stats["captured_bytes"] == sum(map(len, bodies))
    assert store.is_empty()


def test_http_proxy_both_directions_with_content_length() -> None:
    pair = make_pair(LinkConfig(delay=0.001))
    client, down, up, upstream = _four(pair)
    store = Store(4 << 20, driver=pair.driver)
    ring = Ring(store)
    via = lambda h: h[:-2] + b"Via: 1.1 usertcp\r\n\r\n"  # noqa: E731 - the header is ours to rewrite
    req = Forwarder(store, ring, down, up, "http", rewrite=via)
    resp = Forwarder(store, ring, up, down, "http")
    body = os.urandom(200_000)
    request = (b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
    request2 = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    response = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
    at_up = bytearray()
    at_client = bytearray()
    sent = 0
    wire = request + request2
    answered = False

    def step() -> None:
        nonlocal sent, answered
        if sent < len(wire) and client.send_space > 0:
            sent += client.send(wire[sent:sent + 65536], pair.now)
        pump(ring, [req, resp])
        if upstream.readable_bytes:
            at_up.extend(upstream.recv(1 << 22, pair.now))
        if not answered and at_up.endswith(request2[:-2] + b"Via: 1.1 usertcp\r\n\r\n"):
            upstream.send(response, pair.now)
            answered = True
        if client.readable_bytes:
            at_client.extend(client.recv(1 << 20, pair.now))
        pair.driver.kick()

    _run(pair, lambda: bytes(at_client) == response, step)
    head, _, rest = bytes(at_up).partition(b"\r\n\r\n")
    assert head.endswith(b"Via: 1.1 usertcp") and rest.startswith(body)
    assert req.messages == 2 and resp.messages == 1
    store.close()
    assert store.is_empty()


def test_http_header_parser() -> None:
    assert parse_http_header(b"GET / HTTP/1.1\r\nHost: a\r\n") is None
    assert parse_http_header(b"PUT / HTTP/1.1\r\ncontent-length: 7\r\n\r\nbody...") == (37, 7)


# ---------------------------------------------------------------------- cache

def _usertcp_socket_module(host: Host) -> types.SimpleNamespace:
    """What pymemcache's Client uses of the socket module, backed by usertcp sockets:
    the client library's own protocol code then talks to the cache over our stack."""
    us = pytest.importorskip("usertcp.socket")
    import socket as pysocket

    def getaddrinfo(h: str, port: int, *_: object
                    ) -> list[tuple[AddressFamily, SocketKind, int, str, tuple[str, int]]]:
        return [(us.AF_INET, us.SOCK_STREAM, us.IPPROTO_TCP, "", (h, port))]

    return types.SimpleNamespace(
        socket=lambda family=us.AF_INET, type=us.SOCK_STREAM, proto=0: us.socket(family, type, proto,
                                                                               host=host),
        getaddrinfo=getaddrinfo, AF_UNSPEC=pysocket.AF_UNSPEC, AF_INET=us.AF_INET, AF_UNIX=-1,
        SOCK_STREAM=us.SOCK_STREAM, IPPROTO_TCP=us.IPPROTO_TCP, TCP_NODELAY=us.TCP_NODELAY,
        error=OSError, timeout=TimeoutError)


def test_cache_with_pymemcache_over_usertcp_sockets() -> None:
    pymemcache = pytest.importorskip("pymemcache")
    us = pytest.importorskip("usertcp.socket")
    net = Network(seed=7)
    a, b = Stack(["10.0.0.1"], name="client"), Stack(["10.0.0.2"], name="cache")
    net.connect(net.add_host(a, ["10.0.0.1"]), net.add_host(b, ["10.0.0.2"]), LinkConfig(delay=0.0002))
    drv = RealTimeDriver(net)
    with drv:
        server = serve_cache(us.Host(b, drv), 11211, budget=1 << 20)
        try:
            mc = pymemcache.Client(("10.0.0.2", 11211), socket_module=_usertcp_socket_module(us.Host(a, drv)),
                                   connect_timeout=5, timeout=5)
            big = os.urandom(600_000)
            assert mc.set("k1", b"v1") is True
            assert mc.get("k1") == b"v1"
            assert mc.set("big", big) is True
            assert mc.get("big") == big
            assert mc.set("k1", b"replaced", noreply=True) is True
            assert mc.get_many(["k1", "missing", "big"]) == {"k1": b"replaced", "big": big}
            assert mc.get("missing") is None
            assert mc.set("empty", b"") is True
            assert mc.get("empty") == b""
            assert mc.delete("k1", noreply=False) is True
            assert mc.delete("k1", noreply=False) is False
            assert mc.get("k1") is None
            with pytest.raises(pymemcache.exceptions.MemcacheServerError):
                mc.set("huge", os.urandom(600_000), noreply=False)   # over the store's budget
            with pytest.raises(pymemcache.exceptions.MemcacheServerError):
                mc.set("huge", os.urandom(2 << 20), noreply=False)   # over the value limit
            assert mc.get("big") == big                      # still served after the failure
            assert server.stats["get_hits"] >= 5
            mc.quit()
            # Values live in the store as objects, captured by reference.
            with drv.lock:
                st = server.store
                # "empty" needs no object; the charge is the packets the value pins.
                assert st.objects == 1 and st.used == st.pinned_bytes()
                assert len(big) < st.used < len(big) * 1.06
                (obj,) = st._objects.values()
                assert len(obj.views) > 100 and all(isinstance(v.obj, bytes) for v in obj.views)
        finally:
            server.close()
        with drv.lock:
            assert server.store.is_empty()


def test_cache_protocol_on_connections_in_virtual_time() -> None:
    pair = make_pair(LinkConfig(delay=0.001))
    client, conn = pair.open(11211)
    store = Store(1 << 20, driver=pair.driver)
    cache = CacheServer(store)
    cache.attach(conn)
    got = bytearray()

    def talk(req: bytes, until: bytes) -> bytes:
        got.clear()
        client.send(req, pair.now)

        def step() -> bool:
            cache.poll()
            if client.readable_bytes:
                got.extend(client.recv(1 << 20, pair.now))
            pair.driver.kick()
            return got.endswith(until)

        assert pair.driver.run_until(step, 10), bytes(got)
        return bytes(got)

    # Pipelined: noreply set, replies in command order, a command split across segments.
    assert talk(b"set a 5 0 3 noreply\r\nabc\r\nset b 0 0 2\r\nxy\r\nget a b c\r\n", b"END\r\n") == \
        b"STORED\r\nVALUE a 5 3\r\nabc\r\nVALUE b 0 2\r\nxy\r\nEND\r\n"
    assert talk(b"bogus\r\n", b"\r\n") == b"ERROR\r\n"
    assert talk(b"delete a\r\ndelete a\r\n", b"NOT_FOUND\r\n") == b"DELETED\r\nNOT_FOUND\r\n"
    assert talk(b"set c 0 0 2\r\nxyz\r\n", b"\r\n") == b"CLIENT_ERROR bad data chunk\r\n"
    cache.close()
    assert store.is_empty()


def test_cache_client_that_never_reads_cannot_queue_replies_without_bound() -> None:
    """A client pipelining ``get``s and never reading (issue 20 point 1, the apps' own
    backlogs): the cache stops reading its commands once MAX_REPLIES_IN_FLIGHT replies wait
    (memcached stops reading a connection whose writes block), counts it, and reads on as
    the client drains; every reply arrives, in order."""
    from usertcp.apps.cache import MAX_REPLIES_IN_FLIGHT

    pair = make_pair(LinkConfig(delay=0.001))
    client, conn = pair.open(11211)
    store = Store(8 << 20, driver=pair.driver)
    cache = CacheServer(store)
    cache.attach(conn)
    value = bytes(range(256)) * 64                       # 16 KiB: the client's window fills
    client.send(b"set v 0 0 %d\r\n" % len(value) + value + b"\r\n", pair.now)
    n = 400
    client.send(b"get v\r\n" * n, pair.now)
    peak = 0

    def step() -> bool:
        nonlocal peak
        cache.poll()
        peak = max(peak, max((cl.replies for cl in cache._clients), default=0))
        pair.driver.kick()
        return False

    pair.driver.run_until(step, 2.0)                     # nobody reads for two seconds
    assert cache.stats["reply_backlog_full"] > 0
    assert 0 < peak <= MAX_REPLIES_IN_FLIGHT             # before: every request read, 400 queued
    got = bytearray()
    reply = b"VALUE v 0 %d\r\n" % len(value) + value + b"\r\nEND\r\n"

    def drain() -> bool:
        cache.poll()
        if client.readable_bytes:
            got.extend(client.recv(1 << 20, pair.now))
        pair.driver.kick()
        return len(got) >= len(b"STORED\r\n") + n * len(reply)

    assert pair.driver.run_until(drain, 60), len(got)
    assert bytes(got) == b"STORED\r\n" + reply * n
    cache.close()
    assert store.is_empty()


def test_proxy_to_a_destination_that_never_reads_holds_a_bounded_backlog() -> None:
    """Issue 20 point 1, the apps' own backlogs: the destination stops reading, so the
    forwarder's sends stop completing; it reads the next message only while fewer than
    MAX_SENDS_IN_FLIGHT wait (counted in ``held``), instead of capturing the source's
    messages until the shared store is full. When the destination reads, all arrive."""
    from usertcp.apps.proxy import MAX_SENDS_IN_FLIGHT

    pair = make_pair(LinkConfig(delay=0.001))
    client, down, up, upstream = _four(pair)
    store = Store(64 << 20, driver=pair.driver, compact_ratio=0)
    ring = Ring(store)
    fwd = Forwarder(store, ring, down, up, "length")
    body = bytes(range(256)) * 64                      # 16 KiB messages
    wire = (struct.pack(">I", len(body)) + body) * 300
    sent = 0
    peak = 0

    def push() -> bool:
        nonlocal sent, peak
        if sent < len(wire) and client.send_space > 0:
            sent += client.send(wire[sent:sent + 65536], pair.now)
        fwd.poll()
        peak = max(peak, fwd._sends)
        pair.driver.kick()
        return False

    pair.driver.run_until(push, 2.0)                                # upstream reads nothing
    assert fwd.held > 0 and peak <= MAX_SENDS_IN_FLIGHT             # before: every message read
    assert fwd.messages < 300 // 2
    got = bytearray()

    def step() -> None:
        push()
        if upstream.readable_bytes:
            got.extend(upstream.recv(1 << 22, pair.now))

    _run(pair, lambda: len(got) == len(wire), step)
    assert bytes(got) == wire and fwd.messages == 300 and not fwd.error
