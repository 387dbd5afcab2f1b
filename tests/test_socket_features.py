"""The headline features reached through the socket API: TFO, MSG_PRELOAD, TCP_MD5SIG."""

from __future__ import annotations

import errno

import pytest

from pair import Pair, make_pair
from usertcp import MSG_FASTOPEN, MSG_PRELOAD
from usertcp import socket as usocket
from usertcp.tcp.config import StackConfig
from usertcp.tcp.md5sig import build_tcp_md5sig
from usertcp.wire.packet import parse_packet
from usertcp.wire.segment import Segment


def _hosts(cfg_a: StackConfig | None = None, cfg_b: StackConfig | None = None
           ) -> tuple[Pair, usocket.Host, usocket.Host]:
    pair = make_pair(seed=2, cfg_a=cfg_a, cfg_b=cfg_b)
    return pair, usocket.Host(pair.a, pair.driver), usocket.Host(pair.b, pair.driver)


def _syns(pair: Pair) -> list[Segment]:
    seen: list[Segment] = []
    pair.net.add_tap(lambda data, now, d: seen.append(parse_packet(data)))
    return seen


def test_fastopen_sendto_puts_data_in_the_syn_second_time() -> None:
    pair, ch, sh = _hosts(StackConfig(fastopen=0x1), StackConfig(fastopen=0x2))
    seen = _syns(pair)
    srv = sh.socket()
    srv.setsockopt(usocket.IPPROTO_TCP, usocket.TCP_FASTOPEN, 16)
    srv.bind(("10.0.0.2", 80))
    srv.listen()
    srv.setblocking(False)
    for attempt in range(2):
        c = ch.socket()
        c.setblocking(False)
        if attempt == 0:
            # No cookie yet: the SYN asks for one and takes no data (EINPROGRESS, as Linux).
            with pytest.raises(BlockingIOError):
                c.sendto(b"GET / HTTP/1.0\r\n\r\n", MSG_FASTOPEN, ("10.0.0.2", 80))
            pair.driver.run_for(0.05)
            assert c.send(b"GET / HTTP/1.0\r\n\r\n") == 18
        else:
            assert c.sendto(b"GET / HTTP/1.0\r\n\r\n", MSG_FASTOPEN, ("10.0.0.2", 80)) == 18
        pair.driver.run_for(0.05)
        s, _ = srv.accept()
        assert s.recv(100) == b"GET / HTTP/1.0\r\n\r\n"
        syn = [p for p in seen if p.flags == 0x02][-1]
        if attempt == 0:
            assert syn.fastopen == b"" and len(syn.payload) == 0      # cookie request
        else:
            assert syn.fastopen and bytes(syn.payload) == b"GET / HTTP/1.0\r\n\r\n"
            assert s.tcp_info()["tcpi_options"] & 32                  # TCPI_OPT_SYN_DATA
        c.close()
        s.close()


def test_fastopen_connect_defers_syn_to_first_write() -> None:
    pair, ch, sh = _hosts(StackConfig(fastopen=0x1), StackConfig(fastopen=0x2))
    seen = _syns(pair)
    srv = sh.socket()
    srv.setsockopt(usocket.IPPROTO_TCP, usocket.TCP_FASTOPEN, 16)
    srv.bind(("10.0.0.2", 80))
    srv.listen()
    srv.setblocking(False)
    first = ch.socket()
    first.setblocking(False)
    with pytest.raises(BlockingIOError):
        first.sendto(b"x", MSG_FASTOPEN, ("10.0.0.2", 80))   # learn the cookie (a request)
    pair.driver.run_for(0.05)
    srv.accept()[0].close()
    c = ch.socket()
    c.setsockopt(usocket.IPPROTO_TCP, usocket.TCP_FASTOPEN_CONNECT, 1)
    c.setblocking(False)
    before = len(seen)
    assert c.connect_ex(("10.0.0.2", 80)) == 0              # returns at once, no SYN yet
    assert len([p for p in seen[before:] if p.flags & 0x02]) == 0
    c.send(b"hello")
    pair.driver.run_for(0.05)
    syn = next(p for p in seen[before:] if p.flags == 0x02)
    assert bytes(syn.payload) == b"hello"


def test_preload_through_socket_api_and_einval() -> None:
    pair, ch, sh = _hosts()
    srv = sh.socket()
    srv.bind(("10.0.0.2", 25))
    with pytest.raises(OSError) as e:
        srv.send(b"220 hi\r\n", MSG_PRELOAD)             # not listening yet
    assert e.value.errno == errno.EINVAL
    srv.listen()
    assert srv.send(b"220 hi\r\n", MSG_PRELOAD) == 8
    c = ch.socket()
    c.setblocking(False)
    c.connect_ex(("10.0.0.2", 25))
    pair.driver.run_for(0.05)
    assert c.recv(100) == b"220 hi\r\n"


def test_md5sig_setsockopt_with_linux_struct_bytes() -> None:
    pair, ch, sh = _hosts()
    srv = sh.socket()
    srv.setsockopt(usocket.IPPROTO_TCP, usocket.TCP_MD5SIG, build_tcp_md5sig("10.0.0.1", b"secret"))
    srv.bind(("10.0.0.2", 179))
    srv.listen()
    srv.setblocking(False)
    good = ch.socket()
    good.setsockopt(usocket.IPPROTO_TCP, usocket.TCP_MD5SIG, build_tcp_md5sig("10.0.0.2", b"secret"))
    good.setblocking(False)
    good.connect_ex(("10.0.0.2", 179))
    pair.driver.run_for(0.05)
    s, _ = srv.accept()
    good.send(b"OPEN")
    pair.driver.run_for(0.05)
    assert s.recv(10) == b"OPEN"
    assert s.connection is not None and s.connection.md5_key == b"secret"
    bad = ch.socket()
    bad.add_md5_key("10.0.0.2", b"wrong")
    bad.setblocking(False)
    bad.connect_ex(("10.0.0.2", 179))
    pair.driver.run_for(3.0)
    assert pair.b.counters["TcpExtTCPMD5Failure"] > 0
    with pytest.raises(BlockingIOError):
        srv.accept()
    unsigned = ch.socket()
    unsigned.setblocking(False)
    unsigned.connect_ex(("10.0.0.2", 179))
    pair.driver.run_for(3.0)
    assert pair.b.counters["TcpExtTCPMD5NotFound"] > 0
