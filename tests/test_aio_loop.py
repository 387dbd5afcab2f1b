"""UsertcpEventLoop: plain asyncio calls on usertcp, virtual time, names, TLS, sock_* and options."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import socket
import ssl
import sys
import time
from pathlib import Path

import pytest

from tls_certs import Pki, make_pki
from usertcp import aio
from usertcp import socket as usocket
from usertcp.net.memnet import LinkConfig, Network
from usertcp.net.pcap import PcapWriter
from usertcp.tcp.config import StackConfig
from usertcp.tcp.stack import Stack

A, B = "10.0.0.1", "10.0.0.2"


def world(seed: int = 7, link: LinkConfig | None = None, *,
          server_fastopen: int | None = None) -> tuple[Network, Stack, Stack]:
    """Two stacks with fixed secrets (a reproducible run), client first (the loop's default);
    ``server_fastopen`` the server's tcp_fastopen mask if not the default."""
    net = Network(seed=seed)
    cfg = StackConfig(isn_secret=b"i" * 16, ts_secret=b"t" * 16)
    server_cfg = cfg if server_fastopen is None else \
        StackConfig(isn_secret=b"i" * 16, ts_secret=b"t" * 16, fastopen=server_fastopen)
    a, b = Stack([A], cfg, name="client"), Stack([B], server_cfg, name="server")
    net.connect(net.add_host(a, [A], "client"), net.add_host(b, [B], "server"),
                link or LinkConfig(delay=0.005))
    return net, a, b


def _fastopen_listener(loop: aio.UsertcpEventLoop, stack: Stack, port: int) -> usocket.Socket:
    """A loop socket listening at B:``port`` with a Fast Open queue (TCP_FASTOPEN 16)."""
    lsock = loop.socket(stack=stack)
    lsock.bind((B, port))
    lsock.setsockopt(socket.IPPROTO_TCP, socket.TCP_FASTOPEN, 16)
    lsock.listen(8)
    return lsock


def _fastopen_client(loop: aio.UsertcpEventLoop, stack: Stack) -> usocket.Socket:
    """A loop socket with TCP_FASTOPEN_CONNECT: its connect is deferred to the first write."""
    csock = loop.socket(stack=stack)
    csock.setsockopt(socket.IPPROTO_TCP, usocket.TCP_FASTOPEN_CONNECT, 1)
    return csock


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()
    await writer.wait_closed()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_plain_asyncio_streams_run_on_usertcp() -> None:
    net, a, b = world()

    async def main() -> tuple[bytes, tuple[str, int], float]:
        server = await asyncio.start_server(echo, B, 7)
        reader, writer = await asyncio.open_connection(B, 7)
        writer.write(b"hello" * 10_000)
        writer.write_eof()
        got = await reader.read()
        peer = writer.get_extra_info("peername")
        writer.close()
        server.close()
        await server.wait_closed()
        return got, peer, asyncio.get_running_loop().time()

    got, peer, now = aio.run(main(), net)
    assert got == b"hello" * 10_000
    assert peer == (B, 7)
    assert now > 0.01                       # at least two round trips of virtual time passed
    assert a.counters.get("TcpActiveOpens") == 1 and b.counters.get("TcpPassiveOpens") == 1


def test_virtual_time_jumps_over_sleeps_and_timeouts() -> None:
    net, _a, _b = world()

    async def main() -> tuple[float, bool]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.sleep(60)
        timed_out = False
        try:
            # Nobody listens on 10.0.0.9: no answer at all, so the app's own timeout fires.
            await asyncio.wait_for(asyncio.open_connection("10.0.0.9", 80), 30)
        except TimeoutError:
            timed_out = True
        return loop.time() - start, timed_out

    wall = time.monotonic()
    elapsed, timed_out = aio.run(main(), net)
    assert timed_out
    assert elapsed == pytest.approx(90.0)
    assert time.monotonic() - wall < 30      # generous: 90 virtual seconds never run in real time


def _transcript(seed: int, pcap_path: Path) -> bytes:
    net, _a, _b = world(seed, LinkConfig(delay=0.01, loss=0.1, jitter=0.004, reorder=0.05))
    with pcap_path.open("wb") as f:
        net.attach_pcap(PcapWriter(f))

        async def main() -> bytes:
            server = await asyncio.start_server(echo, B, 7)
            reader, writer = await asyncio.open_connection(B, 7)
            for i in range(20):
                writer.write(b"%d:" % i + bytes(range(256)) * 20)
                await asyncio.sleep(0.05)
            writer.write_eof()
            data = await reader.read()
            writer.close()
            server.close()
            await server.wait_closed()
            return data
        data = aio.run(main(), net)
    return data


def test_same_seed_same_bytes_on_the_wire(tmp_path: Path) -> None:
    d1 = _transcript(11, tmp_path / "1.pcap")
    d2 = _transcript(11, tmp_path / "2.pcap")
    d3 = _transcript(12, tmp_path / "3.pcap")
    assert d1 == d2 == d3 and len(d1) > 100_000
    p1, p2, p3 = ((tmp_path / f"{i}.pcap").read_bytes() for i in (1, 2, 3))
    assert p1 == p2                       # same seed: identical to the byte, timestamps included
    assert p1 != p3                       # another seed: other losses, other packets


def test_names_hosts_table_and_errors() -> None:
    net, _a, _b = world()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        info = await loop.getaddrinfo("Server.Test", "80")
        assert info == [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (B, 80))]
        assert (await loop.getaddrinfo("fd00::2", 25))[0][4] == ("fd00::2", 25, 0, 0)
        with pytest.raises(socket.gaierror):
            await loop.getaddrinfo("nowhere.test", 80)
        with pytest.raises(socket.gaierror):
            await asyncio.open_connection("nowhere.test", 80)
        assert await loop.getnameinfo((B, 80)) == ("server.test", "80")
        assert await loop.getnameinfo((A, 80)) == (A, "80")
        with pytest.raises(NotImplementedError, match="UDP"):
            await loop.create_datagram_endpoint(asyncio.DatagramProtocol, remote_addr=(B, 53))
        server = await asyncio.start_server(echo, "server.test", 8080)
        reader, writer = await asyncio.open_connection("server.test", 8080)
        writer.write(b"by name")
        assert await reader.readexactly(7) == b"by name"
        writer.close()
        server.close()
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection(B, 9)

    aio.run(main(), net, hosts={"server.test": B})


def test_tls_client_and_server_tls13(pki: Pki) -> None:
    net, _a, _b = world()

    async def main() -> tuple[str | None, bytes, str | None]:
        server = await asyncio.start_server(echo, B, 443, ssl=pki.server_context())
        reader, writer = await asyncio.open_connection("server.test", 443, ssl=pki.client_context())
        writer.write(b"secret " * 1000)
        writer.write_eof() if writer.can_write_eof() else None
        got = await reader.readexactly(7000)
        obj = writer.get_extra_info("ssl_object")
        version = obj.version() if obj is not None else None
        writer.close()
        # A client that checks the name: the certificate is not for "other.test".
        with pytest.raises(ssl.SSLCertVerificationError):
            await asyncio.open_connection(B, 443, ssl=pki.client_context(), server_hostname="other.test")
        server.close()
        cipher = obj.cipher()[1] if obj is not None else None
        return version, got, cipher

    version, got, proto = aio.run(main(), net, hosts={"server.test": B})
    assert version == "TLSv1.3" and proto == "TLSv1.3"
    assert got == b"secret " * 1000


def test_start_tls_after_a_preloaded_banner(pki: Pki) -> None:
    """SMTP STARTTLS over a listener whose banner the stack sends (MSG_PRELOAD)."""
    net, _a, b = world()

    async def smtp(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert await reader.readline() == b"STARTTLS\r\n"
        writer.write(b"220 go ahead\r\n")
        await writer.drain()
        await writer.start_tls(pki.server_context())
        line = await reader.readline()
        writer.write(b"250 " + line)
        await writer.drain()
        writer.close()

    async def main() -> tuple[bytes, bytes, bool]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, aio.UsertcpEventLoop)
        lsock = loop.socket(stack=b)
        lsock.bind((B, 25))
        lsock.listen(16)
        lsock.send(b"220 mail.test ESMTP\r\n", usocket.MSG_PRELOAD)
        server = await asyncio.start_server(smtp, sock=lsock)
        reader, writer = await asyncio.open_connection(B, 25)
        banner = await reader.readline()
        writer.write(b"STARTTLS\r\n")
        assert await reader.readline() == b"220 go ahead\r\n"
        await writer.start_tls(pki.client_context(), server_hostname="server.test")
        writer.write(b"EHLO me\r\n")
        reply = await reader.readline()
        tls = writer.get_extra_info("ssl_object") is not None
        writer.close()
        server.close()
        return banner, reply, tls

    banner, reply, tls = aio.run(main(), net)
    assert banner == b"220 mail.test ESMTP\r\n"
    assert reply == b"250 EHLO me\r\n" and tls


def test_sock_calls_and_connect_accepted_socket(tmp_path: Path) -> None:
    net, a, b = world()
    payload = bytes(range(256)) * 4000
    path = tmp_path / "file.bin"
    path.write_bytes(payload)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, aio.UsertcpEventLoop)
        lsock = loop.socket(stack=b)
        lsock.bind((B, 5000))
        lsock.listen(4)
        csock = loop.socket(stack=a)
        accepted = asyncio.ensure_future(loop.sock_accept(lsock))
        await loop.sock_connect(csock, (B, 5000))
        child, peer = await accepted
        assert peer == csock.getsockname()
        with path.open("rb") as f:
            sent = await loop.sock_sendfile(csock, f, 1000, 500_000)
            assert sent == 500_000 and f.tell() == 501_000
        got = bytearray()
        buf = bytearray(70_000)
        while len(got) < sent:
            n = await loop.sock_recv_into(child, buf)
            got += buf[:n]
        assert bytes(got) == payload[1000:501_000]
        await loop.sock_sendall(child, b"pong")
        assert await loop.sock_recv(csock, 4) == b"pong"
        # The accepted socket becomes a transport, as with asyncio's connect_accepted_socket.
        received: asyncio.Future[bytes] = loop.create_future()

        class Keep(asyncio.Protocol):
            def data_received(self, data: bytes) -> None:
                received.set_result(data)

        transport, _ = await loop.connect_accepted_socket(Keep, child)
        await loop.sock_sendall(csock, b"late")
        assert await received == b"late"
        transport.close()
        assert await loop.sock_recv(csock, 10) == b""          # its FIN
        csock.close()
        lsock.close()

    aio.run(main(), net)


def test_fast_open_through_sock_connect_and_sock() -> None:
    """TCP_FASTOPEN_CONNECT on a loop socket, as on a kernel socket under asyncio: sock_connect
    returns at once once a cookie is cached, and the transport's first write rides in the SYN."""
    net, a, b = world(server_fastopen=0x3)
    syns: list[int] = []        # payload bytes of each SYN the client sent
    net.add_tap(lambda data, _now, _d: syns.append(len(data) - 20 - (data[32] >> 4) * 4)
                if data[12:16] == bytes(map(int, A.split("."))) and data[33] & 0x12 == 0x02 else None)

    async def main() -> list[tuple[float, float, bytes]]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, aio.UsertcpEventLoop)
        server = await asyncio.start_server(echo, sock=_fastopen_listener(loop, b, 80))
        out = []
        for i in range(2):
            csock = _fastopen_client(loop, a)
            t0 = loop.time()
            await loop.sock_connect(csock, (B, 80))
            waited = loop.time() - t0
            reader, writer = await asyncio.open_connection(sock=csock)
            writer.write(b"request %d" % i)
            writer.write_eof()
            first = await reader.read(1)
            replied = loop.time() - t0
            out.append((waited, replied, first + await reader.read()))
            writer.close()
        server.close()
        # close() once the first write left in the SYN: the FIN waits for the handshake.
        got: asyncio.Future[bytes] = loop.create_future()

        async def sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            got.set_result(await reader.read())
            writer.close()

        server2 = await asyncio.start_server(sink, sock=_fastopen_listener(loop, b, 81))
        csock = _fastopen_client(loop, a)
        await loop.sock_connect(csock, (B, 81))
        _reader, writer = await asyncio.open_connection(sock=csock)
        writer.write(b"last words")
        await asyncio.sleep(0)               # the write went out (in the SYN); the handshake is on
        assert writer.transport.get_write_buffer_size() == 0
        writer.close()
        out.append((0.0, 0.0, await asyncio.wait_for(got, 10)))
        server2.close()
        return out

    runs = aio.run(main(), net)
    (first_wait, first_reply, first), (second_wait, second_reply, second), (_, _, last) = runs
    assert first == b"request 0" and second == b"request 1" and last == b"last words"
    assert first_wait == pytest.approx(0.01) and second_wait == 0      # no cookie yet, then deferred
    # The reply: two round trips without Fast Open; one with it (the server's transport sends
    # in SYN-RECEIVED, before the 3rd ACK, as Linux lets a Fast Open child do).
    assert first_reply == pytest.approx(0.02) and second_reply == pytest.approx(0.01)
    assert syns == [0, len(b"request 1"), len(b"last words")]           # later SYNs carried the data
    assert a.counters.get("TcpExtTCPFastOpenActive") == 2 and b.counters.get("TcpExtTCPFastOpenPassive") == 2


def test_tls_over_fast_open_puts_the_client_hello_in_the_syn(pki: Pki) -> None:
    """ssl= on a deferred Fast Open socket: the ClientHello rides in the SYN, so TLS 1.3 is up
    one round trip after connect() instead of two."""
    net, a, b = world(server_fastopen=0x3)

    async def main() -> list[tuple[float, bytes, str | None]]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, aio.UsertcpEventLoop)
        server = await asyncio.start_server(echo, sock=_fastopen_listener(loop, b, 443),
                                            ssl=pki.server_context())
        out = []
        for i in range(2):                # the first connection fetches the cookie
            csock = _fastopen_client(loop, a)
            t0 = loop.time()
            await loop.sock_connect(csock, (B, 443))
            reader, writer = await asyncio.open_connection(sock=csock, ssl=pki.client_context(),
                                                           server_hostname="server.test")
            up = loop.time() - t0
            writer.write(b"over tls %d" % i)
            got = await reader.readexactly(10)
            obj = writer.get_extra_info("ssl_object")
            out.append((up, got, obj.version() if obj is not None else None))
            writer.close()
        server.close()
        return out

    (first_up, first, v1), (second_up, second, v2) = aio.run(main(), net)
    assert (first, second, v1, v2) == (b"over tls 0", b"over tls 1", "TLSv1.3", "TLSv1.3")
    assert first_up == pytest.approx(0.02) and second_up == pytest.approx(0.01)
    assert a.counters.get("TcpExtTCPFastOpenActive") == 1


def test_transport_options_and_buffered_protocol() -> None:
    net, _a, _b = world()

    class Sink(asyncio.BufferedProtocol):
        def __init__(self) -> None:
            self.buf = bytearray(4096)
            self.data = bytearray()
            self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.transport: asyncio.BaseTransport

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport

        def get_buffer(self, sizehint: int) -> bytearray:
            return self.buf

        def buffer_updated(self, nbytes: int) -> None:
            self.data += self.buf[:nbytes]

        def eof_received(self) -> None:
            self.done.set_result(None)

    class Pauser(asyncio.Protocol):
        def __init__(self) -> None:
            self.events: list[str] = []

        def pause_writing(self) -> None:
            self.events.append("pause")

        def resume_writing(self) -> None:
            self.events.append("resume")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, aio.UsertcpEventLoop)        # keep_alive= is 3.13 asyncio, ours on 3.11
        sinks: list[Sink] = []

        def make_sink() -> Sink:
            sinks.append(Sink())
            return sinks[-1]

        server = await loop.create_server(make_sink, B, 80, keep_alive=True)
        transport, proto = await loop.create_connection(Pauser, B, 80)
        assert isinstance(proto, Pauser)
        sock = transport.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1     # asyncio's default
        assert sock.fileno() == -1 and sock.getpeername() == (B, 80)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        with pytest.raises(RuntimeError):
            sock.recv(10)
        transport.set_write_buffer_limits(high=16_384)
        transport.write(bytes(3_000_000))
        assert proto.events == ["pause"] and transport.get_write_buffer_size() > 16_384
        transport.write_eof()
        while not sinks:
            await asyncio.sleep(0.001)
        accepted = sinks[0].transport.get_extra_info("socket")
        assert accepted.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1     # keep_alive=True
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        await sinks[0].done
        assert len(sinks[0].data) == 3_000_000
        assert proto.events == ["pause", "resume"]
        transport.close()
        server.close()
        await server.wait_closed()

    aio.run(main(), net)


def test_runner_loop_factory_policy_and_subprocess() -> None:
    net, _a, _b = world()

    async def main() -> bytes:
        assert isinstance(asyncio.get_running_loop(), aio.UsertcpEventLoop)
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "print('child')",
                                                    stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate()
        return out

    with asyncio.Runner(loop_factory=aio.loop_factory(net)) as runner:
        assert runner.run(main()) == b"child\n"
    old = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(aio.EventLoopPolicy(world()[0]))
    try:
        loop = asyncio.new_event_loop()
        assert isinstance(loop, aio.UsertcpEventLoop) and loop.virtual_time
        loop.close()
    finally:
        asyncio.set_event_loop_policy(old)


def test_signals_and_timers_from_the_standard_loop() -> None:
    """add_signal_handler is the standard loop's (its self-pipe wakes a virtual-time select too)."""
    net, _a, _b = world()

    async def main() -> tuple[str, float, list[float]]:
        loop = asyncio.get_running_loop()
        got: asyncio.Future[str] = loop.create_future()
        loop.add_signal_handler(signal.SIGUSR1, got.set_result, "usr1")
        fired: list[float] = []
        t0 = loop.time()
        loop.call_later(2.5, lambda: fired.append(loop.time() - t0))
        loop.call_later(5, os.kill, os.getpid(), signal.SIGUSR1)
        try:
            result = await asyncio.wait_for(got, 30)
        finally:
            loop.remove_signal_handler(signal.SIGUSR1)
        return result, loop.time() - t0, fired

    result, elapsed, fired = aio.run(main(), net)
    assert result == "usr1"
    assert elapsed == pytest.approx(5.0) and fired == [pytest.approx(2.5)]


def test_kernel_socket_stands_in_and_bad_sockets_are_refused() -> None:
    """A library that makes a kernel socket and sock_connect()s it (aiohappyeyeballs) gets usertcp."""
    net, a, _b = world()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await asyncio.start_server(echo, B, 7)
        ksock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ksock.setblocking(False)
        await loop.sock_connect(ksock, (B, 7))
        reader = asyncio.StreamReader()
        transport, _ = await loop.create_connection(lambda: asyncio.StreamReaderProtocol(reader), sock=ksock)
        assert transport.get_extra_info("stack") is a
        transport.write(b"via usertcp")
        assert await reader.readexactly(11) == b"via usertcp"
        assert ksock.fileno() == -1                    # the unused kernel socket was closed
        transport.close()
        other = socket.socket()
        with pytest.raises(ValueError, match="not a usertcp socket"):
            await loop.create_connection(asyncio.Protocol, sock=other)
        other.close()
        server.close()

    aio.run(main(), net)


def test_stack_selection_by_address_and_context() -> None:
    net, a, b = world()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, aio.UsertcpEventLoop)
        assert loop.stack_for(B) is b and loop.stack_for(None) is a
        with aio.use_stack(b):
            assert loop.stack_for() is b
            server = await asyncio.start_server(echo, None, 7)     # any address of stack b
        assert server.sockets[0].getsockname() == ("0.0.0.0", 7)
        _reader, writer = await asyncio.open_connection(B, 7, local_addr=(A, 4000))
        assert writer.get_extra_info("sockname") == (A, 4000)
        writer.close()
        server.close()

    aio.run(main(), net)


def test_sendfile_on_a_transport() -> None:
    net, _a, _b = world()

    async def main() -> bytes:
        loop = asyncio.get_running_loop()
        server = await asyncio.start_server(echo, B, 7)
        reader, writer = await asyncio.open_connection(B, 7)
        await loop.sendfile(writer.transport, io.BytesIO(b"x" * 100_000))
        writer.write_eof()
        data = await reader.read()
        writer.close()
        server.close()
        return data

    assert aio.run(main(), net) == b"x" * 100_000


def test_memnet_in_real_time() -> None:
    net, _a, _b = world()

    async def main() -> tuple[bool, bytes, tuple[str, int]]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, aio.UsertcpEventLoop)
        server = await asyncio.start_server(echo, B, 7)
        reader, writer = await asyncio.open_connection(B, 7)
        writer.write(b"real time")
        data = await reader.readexactly(9)
        writer.close()
        name = server.sockets[0].getsockname()
        server.close()
        return loop.virtual_time, data, name

    virtual, data, name = aio.run(main(), net, virtual_time=False)
    assert not virtual and data == b"real time" and name == (B, 7)
