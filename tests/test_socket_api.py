"""The BSD-socket API (usertcp.socket) on the in-memory network, mostly in virtual time."""

from __future__ import annotations

import errno
import hashlib
import os
import struct
import threading
from dataclasses import dataclass
from typing import Any

import pytest

from usertcp import socket as us
from usertcp.net.driver import RealTimeDriver, VirtualTimeDriver
from usertcp.net.memnet import LinkConfig, Network
from usertcp.tcp.connection import State
from usertcp.tcp.stack import Stack

pytestmark = pytest.mark.timeout(60)

V4 = ("10.0.0.1", "10.0.0.2")
V6 = ("fd00::1", "fd00::2")


@dataclass
class World:
    net: Network
    drv: VirtualTimeDriver
    a: us.Host      # client side
    b: us.Host      # server side
    server_ip: str


def make_world(*, v6: bool = False, loss: float = 0.0, seed: int = 1) -> World:
    ca, cb = V6 if v6 else V4
    net = Network(seed=seed)
    sa, sb = Stack([ca], name="a"), Stack([cb], name="b")
    ha, hb = net.add_host(sa, [ca]), net.add_host(sb, [cb])
    net.connect(ha, hb, LinkConfig(delay=0.005, bandwidth_bps=100e6, loss=loss))
    drv = VirtualTimeDriver(net)
    return World(net, drv, us.Host(sa, drv), us.Host(sb, drv), cb)


@pytest.fixture
def w() -> World:
    return make_world()


def connected_pair(w: World, port: int = 80, **opts: Any) -> tuple[us.Socket, us.Socket, us.Socket]:
    """(listening server, client, accepted server-side socket), all blocking."""
    srv = us.create_server((w.server_ip, port), host=w.b)
    c = w.a.socket(us.AF_INET6 if ":" in w.server_ip else us.AF_INET)
    c.connect((w.server_ip, port))
    s, _ = srv.accept()
    return srv, c, s


# ---------------------------------------------------------------- basics


def test_connect_accept_send_recv(w: World) -> None:
    srv, c, s = connected_pair(w)
    assert c.getpeername() == ("10.0.0.2", 80)
    assert s.getpeername() == c.getsockname()
    assert s.getsockname() == ("10.0.0.2", 80)
    assert c.send(b"hello") == 5
    assert s.recv(100) == b"hello"
    s.sendall(b"world")
    assert c.recv(100) == b"world"
    assert c.getsockopt(us.SOL_SOCKET, us.SO_ERROR) == 0
    assert c.tcp_info()["tcpi_state"] == State.ESTABLISHED
    assert "ESTABLISHED" in repr(c)
    for x in (c, s, srv):
        x.close()


def test_module_default_host_and_context(w: World) -> None:
    with pytest.raises(ValueError, match="no usertcp Host"):
        us.socket()
    with us.use_host(w.a):
        assert us.socket().host is w.a
    us.set_default_host(w.b)
    try:
        assert us.socket().host is w.b
        with us.use_host(w.a):
            assert us.socket().host is w.a
        assert us.socket().host is w.b
    finally:
        us.set_default_host(None)


def test_sendall_1mb_then_half_close_eof(w: World) -> None:
    srv, c, s = connected_pair(w)
    # Single-threaded virtual time: the whole megabyte must fit in the send buffer for a
    # blocking sendall to return before the server reads (Linux doubles the value, and caps
    # what it is given at net.core.wmem_max: raised here as an administrator would).
    assert w.a.stack.config.apply_sysctl("net.core.wmem_max", str(1 << 20))
    c.setsockopt(us.SOL_SOCKET, us.SO_SNDBUF, 1 << 20)
    data = os.urandom(1 << 20)
    c.sendall(data)
    c.shutdown(us.SHUT_WR)
    got = bytearray()
    while chunk := s.recv(65536):
        got += chunk
    assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
    assert s.recv(10) == b""          # EOF is sticky
    # Half-close: the server can still talk back.
    s.sendall(b"digest:" + hashlib.sha256(got).digest())
    s.close()
    reply = bytearray()
    while chunk := c.recv(100):
        reply += chunk
    assert reply == b"digest:" + hashlib.sha256(data).digest()
    c.close()
    srv.close()


def test_nonblocking_select_transfer_with_loss() -> None:
    w = make_world(loss=0.02, seed=7)
    srv = us.create_server(("10.0.0.2", 9), host=w.b)
    srv.setblocking(False)
    with pytest.raises(BlockingIOError) as ei:
        srv.accept()
    assert ei.value.errno == errno.EAGAIN
    c = w.a.socket()
    c.setblocking(False)
    assert c.connect_ex(("10.0.0.2", 9)) == errno.EINPROGRESS
    assert c.connect_ex(("10.0.0.2", 9)) == errno.EALREADY
    r, wr, _ = us.select([srv], [c], [])
    assert wr == [c] or r == [srv]
    us.select([srv], [], [])
    s, _ = srv.accept()
    s.setblocking(False)
    # Linux: the first connect() after a completed non-blocking connect returns 0, then EISCONN.
    us.select([], [c], [])
    assert c.connect_ex(("10.0.0.2", 9)) == 0
    assert c.connect_ex(("10.0.0.2", 9)) == errno.EISCONN
    with pytest.raises(BlockingIOError):
        s.recv(10)
    data = os.urandom(600_000)
    off, got = 0, bytearray()
    while len(got) < len(data):
        r, wr, _ = us.select([s], [c] if off < len(data) else [], [], 30)
        assert r or wr, "stalled"
        if wr:
            off += c.send(data[off:off + 100_000])
        if r:
            got += s.recv(1 << 20)
    assert got == data
    assert w.a.stack.counters["TcpRetransSegs"] > 0
    with pytest.raises(BlockingIOError):     # the buffer fills when nobody reads
        while True:
            c.send(bytes(65536))


def test_timeouts_are_virtual_seconds(w: World) -> None:
    srv, _, s = connected_pair(w)
    t0 = w.drv.now()
    s.settimeout(2.5)
    assert s.gettimeout() == 2.5 and s.getblocking()
    with pytest.raises(TimeoutError):
        s.recv(10)
    assert w.drv.now() == pytest.approx(t0 + 2.5)
    srv.settimeout(1.0)
    with pytest.raises(TimeoutError):
        srv.accept()
    with pytest.raises(BlockingIOError):
        s.recv(10, us.MSG_DONTWAIT)
    with pytest.raises(ValueError):
        s.settimeout(-1)
    s.setblocking(False)
    assert s.gettimeout() == 0.0 and not s.getblocking()


def test_blocking_forever_in_virtual_time_is_an_error(w: World) -> None:
    _, _, s = connected_pair(w)
    with pytest.raises(OSError) as ei:
        s.recv(10)      # nobody will ever send: no event left in the simulation
    assert ei.value.errno == errno.EDEADLK


def test_peek_and_waitall(w: World) -> None:
    _, c, s = connected_pair(w)
    c.sendall(b"abcdef")
    assert s.recv(3, us.MSG_PEEK) == b"abc"
    buf = bytearray(4)
    assert s.recv_into(buf, 2, us.MSG_PEEK) == 2 and buf[:2] == b"ab"
    assert s.recv(4) == b"abcd"
    c.sendall(b"gh")
    assert s.recv(4, us.MSG_WAITALL) == b"efgh"
    c.sendall(b"xyz")
    assert s.recvfrom(10) == (b"xyz", None)
    assert s.recv(0) == b""


# ---------------------------------------------------------------- errors


def test_connection_refused_blocking_and_nonblocking(w: World) -> None:
    c = w.a.socket()
    with pytest.raises(ConnectionRefusedError):
        c.connect(("10.0.0.2", 81))
    # The socket may connect again after a failure (Linux).
    assert c.connect_ex(("10.0.0.2", 81)) == errno.ECONNREFUSED
    n = w.a.socket()
    n.setblocking(False)
    assert n.connect_ex(("10.0.0.2", 81)) == errno.EINPROGRESS
    _, wr, _ = us.select([], [n], [], 5)
    assert wr == [n]
    assert n.getsockopt(us.SOL_SOCKET, us.SO_ERROR) == errno.ECONNREFUSED
    assert n.getsockopt(us.SOL_SOCKET, us.SO_ERROR) == 0       # reported once
    assert n.connect_ex(("10.0.0.2", 81)) == errno.ECONNABORTED


def test_connect_timeout_etimedout() -> None:
    w = make_world(loss=1.0)
    c = w.a.socket()
    with pytest.raises(TimeoutError) as ei:
        c.connect(("10.0.0.2", 80))
    assert ei.value.errno == errno.ETIMEDOUT     # SYN retries exhausted, not a socket timeout
    assert w.drv.now() > 60


def test_reset_by_linger_zero_reported_once(w: World) -> None:
    _, c, s = connected_pair(w)
    s.setsockopt(us.SOL_SOCKET, us.SO_LINGER, struct.pack("ii", 1, 0))
    assert s.getsockopt(us.SOL_SOCKET, us.SO_LINGER, 8) == struct.pack("ii", 1, 0)
    s.close()
    with pytest.raises(ConnectionResetError):
        c.recv(10)
    assert c.recv(10) == b""
    with pytest.raises(BrokenPipeError):
        c.send(b"x")
    with pytest.raises(OSError) as ei:
        c.shutdown(us.SHUT_WR)
    assert ei.value.errno == errno.ENOTCONN
    assert w.a.stack.counters["TcpEstabResets"] == 1


def test_epipe_after_shutdown_wr(w: World) -> None:
    _, c, _ = connected_pair(w)
    c.shutdown(us.SHUT_WR)
    with pytest.raises(BrokenPipeError):
        c.send(b"late")
    with pytest.raises(BrokenPipeError):
        c.sendall(b"late")


def test_eaddrinuse_and_reuseaddr(w: World) -> None:
    a = w.b.socket()
    a.bind(("", 8080))
    b = w.b.socket()
    with pytest.raises(OSError) as ei:
        b.bind(("10.0.0.2", 8080))
    assert ei.value.errno == errno.EADDRINUSE
    a.listen()
    b.setsockopt(us.SOL_SOCKET, us.SO_REUSEADDR, 1)
    with pytest.raises(OSError) as ei:
        b.bind(("", 8080))       # SO_REUSEADDR never shares with a listener
    assert ei.value.errno == errno.EADDRINUSE
    c = w.a.socket()
    c.connect(("10.0.0.2", 8080))
    _child, _ = a.accept()
    a.close()
    # The accepted connection still holds the port: a plain rebind fails, SO_REUSEADDR works.
    with pytest.raises(OSError, match="in use"):
        w.b.socket().bind(("", 8080))
    b.bind(("", 8080))
    b.listen()
    with pytest.raises(OSError) as ei:
        w.b.socket().bind(("10.9.9.9", 1))
    assert ei.value.errno == errno.EADDRNOTAVAIL
    with pytest.raises(OSError) as ei:
        b.bind(("", 1))
    assert ei.value.errno == errno.EINVAL


def test_state_errors(w: World) -> None:
    _, c, s = connected_pair(w)
    with pytest.raises(OSError) as ei:
        c.listen()
    assert ei.value.errno == errno.EINVAL
    with pytest.raises(OSError) as ei:
        c.connect(("10.0.0.2", 80))
    assert ei.value.errno == errno.EISCONN
    fresh = w.a.socket()
    assert fresh.getsockname() == ("0.0.0.0", 0)
    with pytest.raises(OSError) as ei:
        fresh.recv(1)
    assert ei.value.errno == errno.ENOTCONN
    with pytest.raises(BrokenPipeError):       # Linux: send on an unconnected TCP socket
        fresh.send(b"x")
    with pytest.raises(OSError) as ei:
        fresh.getpeername()
    assert ei.value.errno == errno.ENOTCONN
    with pytest.raises(OSError) as ei:
        fresh.shutdown(us.SHUT_RD)
    assert ei.value.errno == errno.ENOTCONN
    with pytest.raises(OSError) as ei:
        s.accept()
    assert ei.value.errno == errno.EINVAL
    c.close()
    c.close()       # idempotent
    for op in (lambda: c.recv(1), lambda: c.send(b"x"), c.getsockname,
               lambda: c.setsockopt(us.IPPROTO_TCP, us.TCP_NODELAY, 1)):
        with pytest.raises(OSError) as ei:
            op()
        assert ei.value.errno == errno.EBADF
    assert "[closed]" in repr(c)


def test_bad_arguments(w: World) -> None:
    with pytest.raises(OSError) as ei:
        w.a.socket(us.AF_INET, us.SOCK_DGRAM)
    assert ei.value.errno == errno.ESOCKTNOSUPPORT
    with pytest.raises(OSError) as ei:
        w.a.socket(1)
    assert ei.value.errno == errno.EAFNOSUPPORT
    s = w.a.socket()
    with pytest.raises(TypeError):
        s.connect("10.0.0.2:80")      # type: ignore[arg-type]
    with pytest.raises(ValueError):
        s.connect(("10.0.0.2", 70000))
    with pytest.raises(us.gaierror):
        s.connect(("example.com", 80))
    with pytest.raises(OSError) as ei:
        s.connect(("fd00::2", 80))
    assert ei.value.errno == errno.EAFNOSUPPORT
    with pytest.raises(TypeError):
        s.send("text")
    with pytest.raises(OSError) as ei:
        s.setsockopt(us.IPPROTO_TCP, 999, 1)
    assert ei.value.errno == errno.ENOPROTOOPT
    with pytest.raises(OSError) as ei:
        s.setsockopt(us.IPPROTO_TCP, us.TCP_MAXSEG, 10)
    assert ei.value.errno == errno.EINVAL
    with pytest.raises(FileNotFoundError):      # Linux: ENOENT for an unknown controller
        s.setsockopt(us.IPPROTO_TCP, us.TCP_CONGESTION, b"nope")
    with pytest.raises(OSError) as ei:
        s.send(b"x", us.MSG_OOB)
    assert ei.value.errno == errno.EOPNOTSUPP
    fd = s.fileno()                # an eventfd mirroring readiness: a real, distinct descriptor
    assert fd >= 0 and fd != w.a.socket().fileno()
    s.close()
    assert s.fileno() == -1        # as CPython once closed


# ---------------------------------------------------------------- MSG_PRELOAD / MSG_FASTOPEN


def test_msg_preload_needs_a_listener(w: World) -> None:
    srv, c, _ = connected_pair(w)
    before = (c.connection.send_queue_bytes, w.a.stack.counters["TcpOutSegs"])  # type: ignore[union-attr]
    with pytest.raises(OSError) as ei:
        c.send(b"preloaded", us.MSG_PRELOAD)
    assert ei.value.errno == errno.EINVAL
    assert (c.connection.send_queue_bytes, w.a.stack.counters["TcpOutSegs"]) == before  # type: ignore[union-attr]
    with pytest.raises(OSError) as ei:
        w.a.socket().send(b"x", us.MSG_PRELOAD)
    assert ei.value.errno == errno.EINVAL
    # On a listener successive writes append (the patch fills the write queue's tail);
    # setsockopt(TCP_PRELOAD) replaces or, empty, clears it; getsockopt reads it back.
    lst = srv.listener
    assert lst is not None
    assert srv.send(bytearray(b"HEL"), us.MSG_PRELOAD) == 3
    assert srv.send(b"LO", us.MSG_PRELOAD) == 2
    assert srv.send(b"", us.MSG_PRELOAD) == 0
    assert lst.preload == b"HELLO" == srv.getsockopt(us.IPPROTO_TCP, us.TCP_PRELOAD)
    srv.setsockopt(us.IPPROTO_TCP, us.TCP_PRELOAD, b"BYE")
    assert lst.preload == b"BYE"
    srv.setsockopt(us.IPPROTO_TCP, us.TCP_PRELOAD, b"")
    assert lst.preload == b""
    with pytest.raises(OSError) as ei:
        c.setsockopt(us.IPPROTO_TCP, us.TCP_PRELOAD, b"x")
    assert ei.value.errno == errno.EINVAL
    srv.send(b"x" * 65536, us.MSG_PRELOAD)
    with pytest.raises(OSError) as ei:
        srv.send(b"y", us.MSG_PRELOAD)              # PRELOAD_MAX is on the total
    assert ei.value.errno == errno.EMSGSIZE and lst.preload == b"x" * 65536


def test_sendto_fastopen_without_cookie_then_with(w: World) -> None:
    srv = us.create_server(("10.0.0.2", 80), host=w.b)
    c = w.a.socket()
    c.setblocking(False)
    # Linux tcp_send_syn_data: no cookie cached, so the SYN asks for one and carries no data;
    # the non-blocking call reports EINPROGRESS and took nothing.
    with pytest.raises(BlockingIOError) as ei:
        c.sendto(b"GET / HTTP/1.0\r\n\r\n", us.MSG_FASTOPEN, ("10.0.0.2", 80))
    assert ei.value.errno == errno.EINPROGRESS
    conn = c.connection
    assert conn is not None and conn.state is State.SYN_SENT and conn.send_queue_bytes == 0
    # A second MSG_FASTOPEN while connecting: EALREADY (__inet_stream_connect).
    with pytest.raises(OSError) as again:
        c.sendto(b"x", us.MSG_FASTOPEN, ("10.0.0.2", 80))
    assert again.value.errno == errno.EALREADY
    srv.settimeout(5)
    s, _ = srv.accept()
    c.setblocking(True)
    assert c.send(b"GET / HTTP/1.0\r\n\r\n") == 18
    assert s.recv(100) == b"GET / HTTP/1.0\r\n\r\n"
    # Blocking form: a refused fast-open connect is reported.
    with pytest.raises(ConnectionRefusedError):
        w.a.socket().sendto(b"x", us.MSG_FASTOPEN, ("10.0.0.2", 81))


# ---------------------------------------------------------------- options


def test_sndbuf_rcvbuf_doubled(w: World) -> None:
    s = w.a.socket()
    s.setsockopt(us.SOL_SOCKET, us.SO_SNDBUF, 10000)
    assert s.getsockopt(us.SOL_SOCKET, us.SO_SNDBUF) == 20000
    s.setsockopt(us.SOL_SOCKET, us.SO_SNDBUF, 1)
    assert s.getsockopt(us.SOL_SOCKET, us.SO_SNDBUF) == 4608     # SOCK_MIN_SNDBUF
    s.setsockopt(us.SOL_SOCKET, us.SO_RCVBUF, struct.pack("i", 50000))
    assert s.getsockopt(us.SOL_SOCKET, us.SO_RCVBUF) == 100000
    assert s.getsockopt(us.SOL_SOCKET, us.SO_RCVBUF, 4) == struct.pack("i", 100000)
    s.setsockopt(us.SOL_SOCKET, us.SO_SNDBUF, 30000)
    w.b.socket()
    srv = us.create_server(("10.0.0.2", 80), host=w.b)
    s.connect(("10.0.0.2", 80))
    conn = s.connection
    assert conn is not None and conn.sndbuf_limit == 60000 and conn.sndbuf_locked
    # rcvbuf_limit is sk_rcvbuf (its default is tcp_rmem[1]): the doubled value, as the shim sets it.
    assert conn.rcvbuf_limit == 100000
    srv.close()


def test_options_before_connect_and_getsockopt(w: World) -> None:
    us.create_server(("10.0.0.2", 80), host=w.b)
    s = w.a.socket()
    s.setsockopt(us.IPPROTO_TCP, us.TCP_NODELAY, 1)
    s.setsockopt(us.IPPROTO_TCP, us.TCP_USER_TIMEOUT, 1500)
    s.setsockopt(us.IPPROTO_TCP, us.TCP_CONGESTION, b"reno")
    s.setsockopt(us.IPPROTO_TCP, us.TCP_MAXSEG, 1000)
    assert s.getsockopt(us.IPPROTO_TCP, us.TCP_CONGESTION) == b"reno"
    assert s.getsockopt(us.IPPROTO_TCP, us.TCP_CONGESTION, 16) == b"reno".ljust(16, b"\0")
    s.connect(("10.0.0.2", 80))
    conn = s.connection
    assert conn is not None
    assert conn.nodelay and conn.user_timeout == 1.5 and conn.cc.name == "reno"
    assert s.getsockopt(us.IPPROTO_TCP, us.TCP_USER_TIMEOUT) == 1500
    assert s.getsockopt(us.IPPROTO_TCP, us.TCP_MAXSEG) <= 1000
    assert s.getsockopt(us.IPPROTO_TCP, us.TCP_INFO)["tcpi_ca_name"] == "reno"
    s.setsockopt(us.IPPROTO_TCP, us.TCP_CONGESTION, "cubic")    # nothing in flight yet: allowed
    assert conn.cc.name == "cubic"
    s.setsockopt(us.SOL_SOCKET, us.SO_KEEPALIVE, 1)
    s.setsockopt(us.IPPROTO_TCP, us.TCP_KEEPIDLE, 10)
    s.setsockopt(us.IPPROTO_TCP, us.TCP_KEEPINTVL, 2)
    s.setsockopt(us.IPPROTO_TCP, us.TCP_KEEPCNT, 3)
    assert (conn.keepalive, conn.keepalive_time, conn.keepalive_intvl, conn.keepalive_probes) == \
        (True, 10.0, 2.0, 3)
    assert s.getsockopt(us.SOL_SOCKET, us.SO_KEEPALIVE) == 1
    assert s.getsockopt(us.SOL_SOCKET, us.SO_TYPE) == us.SOCK_STREAM


def test_keepalive_set_on_idle_connection_detects_dead_peer() -> None:
    w = make_world()
    _, c, _ = connected_pair(w)
    c.setsockopt(us.SOL_SOCKET, us.SO_KEEPALIVE, 1)
    c.setsockopt(us.IPPROTO_TCP, us.TCP_KEEPIDLE, 5)
    c.setsockopt(us.IPPROTO_TCP, us.TCP_KEEPINTVL, 1)
    c.setsockopt(us.IPPROTO_TCP, us.TCP_KEEPCNT, 2)
    w.net.links[0].set_config(LinkConfig(loss=1.0))       # the peer vanishes
    c.settimeout(60)
    with pytest.raises(TimeoutError) as ei:
        c.recv(10)
    assert ei.value.errno == errno.ETIMEDOUT
    assert 5 < w.drv.now() < 20


def test_options_set_before_listen_are_inherited(w: World) -> None:
    srv = w.b.socket()
    srv.setsockopt(us.IPPROTO_TCP, us.TCP_NODELAY, 1)
    srv.setsockopt(us.SOL_SOCKET, us.SO_KEEPALIVE, 1)
    srv.setsockopt(us.IPPROTO_TCP, us.TCP_KEEPIDLE, 77)
    srv.setsockopt(us.SOL_SOCKET, us.SO_SNDBUF, 40000)
    srv.setsockopt(us.IPPROTO_TCP, us.TCP_CONGESTION, b"reno")
    srv.bind(("", 80))
    srv.listen(5)
    lst = srv.listener
    assert lst is not None and lst.options["nodelay"] is True and lst.options["keepalive_time"] == 77.0
    assert srv.getsockopt(us.SOL_SOCKET, us.SO_ACCEPTCONN) == 1
    c = w.a.socket()
    c.connect(("10.0.0.2", 80))
    child, peer = srv.accept()
    assert peer == c.getsockname()
    conn = child.connection
    assert conn is not None
    assert conn.nodelay and conn.keepalive and conn.keepalive_time == 77.0
    assert conn.sndbuf_limit == 80000 and conn.sndbuf_locked and conn.cc.name == "reno"
    assert child.getsockopt(us.IPPROTO_TCP, us.TCP_NODELAY) == 1
    assert child.getsockopt(us.SOL_SOCKET, us.SO_SNDBUF) == 80000
    assert child.getsockopt(us.IPPROTO_TCP, us.TCP_CONGESTION) == b"reno"
    assert c.connection is not None and not c.connection.nodelay


# ---------------------------------------------------------------- IPv6


def test_ipv6_echo() -> None:
    w = make_world(v6=True)
    srv = us.create_server(("::", 443), host=w.b)
    assert srv.family == us.AF_INET6
    assert srv.getsockname() == ("::", 443, 0, 0)
    c = us.create_connection(("fd00::2", 443), timeout=5, host=w.a)
    assert c.family == us.AF_INET6
    s, peer = srv.accept()
    assert peer == c.getsockname() and peer[0] == "fd00::1" and len(peer) == 4
    assert c.getpeername() == ("fd00::2", 443, 0, 0)
    c.sendall(b"ping6")
    assert s.recv(10) == b"ping6"
    s.sendall(b"pong6")
    assert c.recv(10) == b"pong6"
    with pytest.raises(OSError) as ei:
        c.connect(("10.0.0.2", 1, 0, 0))
    assert ei.value.errno in (errno.EAFNOSUPPORT, errno.EISCONN)


# ---------------------------------------------------------------- real time


def test_realtime_echo_100kb() -> None:
    net = Network(seed=3)
    sa, sb = Stack(["10.0.0.1"], name="a"), Stack(["10.0.0.2"], name="b")
    ha, hb = net.add_host(sa, ["10.0.0.1"]), net.add_host(sb, ["10.0.0.2"])
    net.connect(ha, hb, LinkConfig(delay=0.001))
    data = os.urandom(100_000)
    with RealTimeDriver(net) as drv:
        a, b = us.Host(sa, drv), us.Host(sb, drv)
        srv = us.create_server(("10.0.0.2", 7), host=b)
        srv.settimeout(10)
        errors: list[BaseException] = []

        def echo() -> None:
            try:
                s, _ = srv.accept()
                with s:
                    s.settimeout(10)
                    while chunk := s.recv(65536):
                        s.sendall(chunk)
            except BaseException as e:    # report in the main thread
                errors.append(e)

        t = threading.Thread(target=echo)
        t.start()
        c = us.create_connection(("10.0.0.2", 7), timeout=10, host=a)
        got = bytearray()

        def reader() -> None:
            while chunk := c.recv(65536):
                got.extend(chunk)

        r = threading.Thread(target=reader)
        r.start()
        c.sendall(data)
        c.shutdown(us.SHUT_WR)
        r.join(20)
        t.join(20)
        c.close()
        srv.close()
    assert not errors
    assert bytes(got) == data
