"""The cache app against a real memcached, byte for byte, for the commands the app implements.

memcached (Debian's package, from the Makefile's ``system-deps``) runs on 127.0.0.1 on a
free port for the module; the cache app runs on the in-memory network in virtual time.
Every script goes to both, each on a fresh connection and in the same order (so both hold
the same keys), and what comes back (bytes, then how the connection ended: still open, FIN
or reset) must be equal.
"""

from __future__ import annotations

import errno
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest

from usertcp.apps.cache import CacheServer, serve_cache
from usertcp.testing import Pair, pair

MEMCACHED = shutil.which("memcached")
pytestmark = pytest.mark.skipif(MEMCACHED is None, reason="memcached not installed (make system-deps)")

LONG = b"k" * 251
SCRIPTS: list[tuple[str, bytes]] = [
    ("set and get", b"set a 5 0 3\r\nabc\r\nget a\r\n"),
    ("pipelined, noreply", b"set b 0 0 2 noreply\r\nxy\r\nget a b c\r\ndelete b\r\ndelete b\r\n"),
    ("bare newlines", b"set n 1 0 2\nhi\r\nget n\nget n a\n"),
    ("quit", b"quit\r\n"),
    ("commands after quit", b"quit\r\nget a\r\n"),
    ("key of 250 bytes", b"set " + b"k" * 250 + b" 0 0 2\r\nhi\r\nget " + b"k" * 250 + b"\r\n"),
    ("get of an over-long key", b"get " + LONG + b"\r\nget a\r\n"),
    ("set of an over-long key", b"set " + LONG + b" 0 0 2\r\nhi\r\nget a\r\n"),
    ("delete of an over-long key", b"delete " + LONG + b"\r\n"),
    ("bad data chunk", b"set c 0 0 2\r\nhiX\r\nget c a\r\n"),
    ("bad data chunk, two extra", b"set c 0 0 2\r\nhiXY\r\nget c\r\n"),
    ("data chunk with a bare newline", b"set c 0 0 2\r\nhi\nget a\r\n"),
    ("bad number", b"set d x 0 2\r\nhi\r\nget d\r\n"),
    ("negative length", b"set d 0 0 -1\r\nget d\r\n"),
    ("short set", b"set d 0 0\r\nget d\r\n"),
    ("empty line and unknown command", b"\r\nbogus\r\nget\r\n"),
    ("delete forms", b"delete zz 0\r\ndelete zz 5\r\ndelete zz noreply\r\nget zz\r\n"),
    ("empty value", b"set e 0 0 0\r\n\r\nget e\r\n"),
]
# Answers that name the server itself: compared by form, not bytes.
VERSION_RE = re.compile(rb"^VERSION [!-~]+\r\n$")
STAT_RE = re.compile(rb"STAT ([a-z_]+) ([!-~]+)\r\n")


@pytest.fixture(scope="module")
def memcached() -> Iterator[tuple[str, int]]:
    assert MEMCACHED is not None
    with socket.socket() as s:            # a free port (the window before memcached binds is tiny)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([MEMCACHED, "-u", "nobody", "-l", "127.0.0.1", "-p", str(port), "-U", "0",
                             "-t", "1", "-m", "64"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"memcached did not start: {proc.stderr and proc.stderr.read()!r}"
                                       ) from None
                time.sleep(0.05)
        yield "127.0.0.1", port
    finally:
        proc.terminate()
        proc.wait(10)


def ask_memcached(addr: tuple[str, int], request: bytes, expect: int) -> tuple[bytes, str]:
    """Send ``request`` on a new connection; read until ``expect`` bytes and a quiet 0.2 s."""
    with socket.create_connection(addr, timeout=5) as s:
        s.sendall(request)
        got = b""
        end = "open"
        s.settimeout(2.0)
        while True:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            except ConnectionResetError:
                end = "reset"
                break
            if not chunk:
                end = "fin"
                break
            got += chunk
            if len(got) >= expect:
                s.settimeout(0.2)         # anything more must come right away
        return got, end


class UsertcpCache:
    """The cache app on stack b of an in-memory pair; scripts come from sans-IO connections on a."""

    def __init__(self) -> None:
        self.pair: Pair = pair()
        self.server: CacheServer = serve_cache(self.pair.b, 11211, driver=self.pair.driver, start=False)

    def ask(self, request: bytes) -> tuple[bytes, str]:
        p = self.pair
        client = p.a.create_connection(p.addresses[1], 11211)
        p.a.connect(client, p.now)
        p.driver.kick()
        got = bytearray()
        sent = False

        def step() -> bool:
            nonlocal sent
            self.server.poll()
            if not sent and client.send_space:
                client.send(request, p.now)
                sent = True
            if client.readable_bytes:
                got.extend(client.recv(1 << 20, p.now))
            p.driver.kick()
            return client.fin_received or bool(client.error)

        # The cache's completions are not network events: poll every virtual millisecond
        # for 2 virtual seconds (a quiet server leaves the connection open).
        for _ in range(2000):
            if step():
                break
            p.driver.run_for(0.001)
        if client.error == errno.ECONNRESET:
            return bytes(got), "reset"
        end = "fin" if client.fin_received else "open"
        client.abort(p.now)
        p.driver.kick()
        p.driver.run_for(0.05)
        self.server.poll()
        return bytes(got), end


@pytest.fixture(scope="module")
def cache() -> Iterator[UsertcpCache]:
    c = UsertcpCache()
    yield c
    c.server.close()


def test_scripts_answered_as_memcached_does(memcached: tuple[str, int], cache: UsertcpCache) -> None:
    differences = []
    for name, request in SCRIPTS:
        ours = cache.ask(request)
        theirs = ask_memcached(memcached, request, len(ours[0]))
        if ours != theirs:
            differences.append(f"{name}: usertcp {ours!r} memcached {theirs!r}")
    assert not differences, "\n".join(differences)


def test_version_and_stats_have_memcacheds_form(memcached: tuple[str, int], cache: UsertcpCache) -> None:
    ours, end = cache.ask(b"version\r\n")
    theirs, _ = ask_memcached(memcached, b"version\r\n", 1)
    assert VERSION_RE.match(theirs) and VERSION_RE.match(ours), (ours, theirs)
    assert end == "open"
    ours, _ = cache.ask(b"stats\r\n")
    theirs, _ = ask_memcached(memcached, b"stats\r\n", 100)
    for reply in (ours, theirs):
        assert reply.endswith(b"END\r\n") and not STAT_RE.sub(b"", reply[:-5]), reply
    our_names = dict(STAT_RE.findall(ours))
    their_names = dict(STAT_RE.findall(theirs))
    assert set(our_names) <= set(their_names), set(our_names) - set(their_names)
    assert {b"pid", b"uptime", b"version", b"curr_items", b"get_hits", b"cmd_get"} <= set(our_names)
