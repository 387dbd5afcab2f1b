"""usertcp.aio: asyncio streams and protocols over usertcp, on the loop, with no thread."""

from __future__ import annotations

import asyncio
import io
import os
import socket
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import pytest

from usertcp import aio
from usertcp.net.memnet import LinkConfig, Network
from usertcp.net.pcap import PcapWriter, read_pcap
from usertcp.objects import INSPECT_WAITALL, Ring, Store
from usertcp.tcp.connection import Connection, State
from usertcp.tcp.stack import Stack
from usertcp.wire.segment import Buffer, TxPacket

T = TypeVar("T")
A, B = "10.0.0.1", "10.0.0.2"


def run(coro: Awaitable[T], timeout: float = 20.0) -> T:
    """Run one test coroutine; no thread but the main one may appear."""
    threads = threading.active_count()

    async def main() -> T:
        result = await asyncio.wait_for(coro, timeout)
        assert threading.active_count() == threads, "usertcp.aio started a thread"
        return result
    return asyncio.run(main())


def network(config: LinkConfig | None = None) -> tuple[Network, Stack, Stack]:
    net = Network(seed=3)
    a, b = Stack([A], name="a"), Stack([B], name="b")
    net.connect(net.add_host(a, [A], "a"), net.add_host(b, [B], "b"), config or LinkConfig(delay=0.001))
    return net, a, b


# ----------------------------------------------------------------------------- unmodified apps


async def echo_handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The asyncio docs' echo server, as is."""
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()
    await writer.wait_closed()


async def http_handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A tiny HTTP/1.1 server: one request, a Content-Length response, then close."""
    request_line = await reader.readline()
    headers = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        k, _, v = line.decode().partition(":")
        headers[k.strip().lower()] = v.strip()
    method, path, _version = request_line.decode().split()
    body = f"{method} {path} host={headers.get('host')}\n".encode() * 100
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                 b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body))
    writer.write(body)
    await writer.drain()
    writer.close()
    await writer.wait_closed()


async def http_get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str,
                   path: str) -> tuple[int, dict[str, str], bytes]:
    """A plain HTTP/1.1 client request."""
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    status = int((await reader.readline()).split()[1])
    headers = {}
    while (line := await reader.readline()) != b"\r\n":
        k, _, v = line.decode().partition(":")
        headers[k.strip().lower()] = v.strip()
    body = await reader.readexactly(int(headers["content-length"]))
    writer.close()
    await writer.wait_closed()
    return status, headers, body


def test_echo_server_and_client_over_streams() -> None:
    async def main() -> None:
        net, a, b = network()
        drv = aio.AsyncioDriver(net)
        server = await aio.start_server(echo_handler, B, 7, stack=b)
        payload = os.urandom(300_000)
        reader, writer = await aio.open_connection(B, 7, stack=a)
        writer.write(payload)
        writer.write_eof()                       # half-close: the echo still comes back
        assert await reader.read() == payload
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        assert a.counters["TcpActiveOpens"] == 1 and b.counters["TcpPassiveOpens"] == 1
        drv.close()
    run(main())


def test_echo_survives_loss_with_loop_timers() -> None:
    async def main() -> None:
        net, a, b = network(LinkConfig(delay=0.002, loss=0.03))
        aio.AsyncioDriver(net)
        server = await aio.start_server(echo_handler, B, 7, stack=b)
        payload = os.urandom(400_000)
        reader, writer = await aio.open_connection(B, 7, stack=a)
        writer.write(payload)
        writer.write_eof()
        assert await reader.read() == payload
        assert a.counters["TcpRetransSegs"] > 0 and b.counters["TcpRetransSegs"] > 0
        writer.close()
        server.close()
    run(main())


def test_http11_request_against_tiny_server() -> None:
    async def main() -> None:
        net, a, b = network(LinkConfig(delay=0.002, bandwidth_bps=50e6))
        aio.AsyncioDriver(net)
        async with await aio.start_server(http_handler, B, 80, stack=b):
            results = await asyncio.gather(*[
                http_get(*(await aio.open_connection(B, 80, stack=a)), "example.test", f"/p{i}")
                for i in range(3)])
        for i, (status, headers, body) in enumerate(results):
            assert status == 200
            assert headers["content-type"] == "text/plain"
            assert body == f"GET /p{i} host=example.test\n".encode() * 100
    run(main())


# ----------------------------------------------------------------------------- Protocol/Transport


class Recorder(asyncio.Protocol):
    def __init__(self) -> None:
        self.events: list[str] = []
        self.data = bytearray()
        self.transport: asyncio.Transport | None = None
        self.lost: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()
        self.resumed = asyncio.Event()
        self.got: Callable[[], None] = lambda: None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.events.append("made")

    def data_received(self, data: bytes) -> None:
        if self.events[-1] != "data":
            self.events.append("data")
        self.data += data
        self.got()

    def eof_received(self) -> bool:
        self.events.append("eof")
        return True                       # keep the write side open

    def pause_writing(self) -> None:
        self.events.append("pause")

    def resume_writing(self) -> None:
        self.events.append("resume")
        self.resumed.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.events.append("lost")
        self.lost.set_result(exc)


async def _pair(net: Network, a: Stack, b: Stack, port: int = 9
                ) -> tuple[aio.Server, Recorder, Recorder, Callable[[], Awaitable[Recorder]]]:
    accepted: asyncio.Queue[Recorder] = asyncio.Queue()

    def factory() -> Recorder:
        p = Recorder()
        accepted.put_nowait(p)
        return p
    server = await aio.create_server(factory, B, port, stack=b)
    _, client = await aio.create_connection(Recorder, B, port, stack=a)
    assert isinstance(client, Recorder)
    srv = await asyncio.wait_for(accepted.get(), 5)
    return server, client, srv, accepted.get


def test_flow_control_pauses_and_resumes_writing_and_extra_info() -> None:
    async def main() -> None:
        net, a, b = network(LinkConfig(delay=0.001, bandwidth_bps=100e6))
        drv = aio.AsyncioDriver(net)
        server, client, srv, _ = await _pair(net, a, b)
        t = client.transport
        assert isinstance(t, aio.UsertcpTransport)
        assert t.get_extra_info("peername") == (B, 9)
        assert t.get_extra_info("sockname")[0] == A
        conn = t.get_extra_info("connection")
        assert isinstance(conn, Connection) and conn.state is State.ESTABLISHED
        sock = t.get_extra_info("socket")
        assert sock.getpeername() == (B, 9) and sock.conn is conn and sock.family == socket.AF_INET
        assert t.get_extra_info("tcp_info")["tcpi_state"] == int(State.ESTABLISHED)
        assert t.get_extra_info("nonexistent", 42) == 42
        assert t.can_write_eof()
        t.set_write_buffer_limits(high=8192)
        assert t.get_write_buffer_limits() == (2048, 8192)
        with pytest.raises(ValueError):
            t.set_write_buffer_limits(high=1, low=2)
        payload = os.urandom(1_500_000)          # far beyond TCP's send buffer
        t.write(payload)
        assert client.events == ["made", "pause"]
        assert t.get_write_buffer_size() > 8192
        await asyncio.wait_for(client.resumed.wait(), 10)
        assert t.get_write_buffer_size() <= 2048
        done = asyncio.Event()
        srv.got = lambda: done.set() if len(srv.data) >= len(payload) else None
        await asyncio.wait_for(done.wait(), 10)
        assert bytes(srv.data) == payload
        t.close()
        assert t.is_closing()
        assert await asyncio.wait_for(client.lost, 5) is None
        await drv.wait_for(lambda: srv.events[-1] == "eof", 5)
        assert srv.events == ["made", "data", "eof"]      # eof_received returned True: kept open
        assert srv.transport is not None
        srv.transport.write(b"bye")                       # half-closed: this side may still send
        srv.transport.close()
        assert await asyncio.wait_for(srv.lost, 5) is None
        server.close()
        await server.wait_closed()
        drv.close()
    run(main())


def test_pause_reading_closes_the_tcp_window() -> None:
    async def main() -> None:
        net, a, b = network()
        aio.AsyncioDriver(net)
        server, client, srv, _ = await _pair(net, a, b)
        assert srv.transport is not None and client.transport is not None
        srv.transport.pause_reading()
        assert not srv.transport.is_reading()
        client.transport.write(b"x" * 2_000_000)
        sconn = srv.transport.get_extra_info("connection")
        await asyncio.sleep(0.3)
        assert not srv.data                               # nothing delivered while paused
        assert 0 < sconn.readable_bytes <= sconn.rcvbuf_limit
        assert client.transport.get_write_buffer_size() > 0   # the sender is held back
        srv.transport.resume_reading()
        done = asyncio.Event()
        srv.got = lambda: done.set() if len(srv.data) >= 2_000_000 else None
        await asyncio.wait_for(done.wait(), 10)
        client.transport.abort()
        exc = await asyncio.wait_for(srv.lost, 5)
        assert isinstance(exc, ConnectionResetError)      # abort sends a reset
        server.close()
    run(main())


def test_connection_refused_and_write_after_eof() -> None:
    async def main() -> None:
        net, a, b = network()
        aio.AsyncioDriver(net)
        with pytest.raises(ConnectionRefusedError):
            await aio.open_connection(B, 1234, stack=a)
        server, client, srv, _ = await _pair(net, a, b)
        assert client.transport is not None
        client.transport.write_eof()
        with pytest.raises(RuntimeError):
            client.transport.write(b"late")
        await asyncio.sleep(0.05)
        assert srv.events[-1] == "eof"
        server.close()
        server.abort_clients()
    run(main())


def test_no_driver_is_an_error() -> None:
    async def main() -> None:
        with pytest.raises(RuntimeError, match="no asyncio driver"):
            await aio.open_connection(B, 1, stack=Stack([A]))
    run(main())


# ----------------------------------------------------------------------------- preload, objects


def test_preload_is_reachable_from_start_server() -> None:
    async def main() -> None:
        net, a, b = network()
        aio.AsyncioDriver(net)
        server = await aio.start_server(echo_handler, B, 25, stack=b, preload=b"220 ready\r\n")
        reader, writer = await aio.open_connection(B, 25, stack=a)
        assert await reader.readline() == b"220 ready\r\n"   # sent by the stack, not the handler
        assert server.preload(b"") == 0                     # cleared for later connections
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"ping"
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
    run(main())


def greeter(greeting: bytes, parts: int) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter],
                                                      Awaitable[None]]:
    """A server that writes ``greeting`` itself (in ``parts`` writes), then echoes one line."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        step = -(-len(greeting) // parts)
        for i in range(0, len(greeting), step):
            writer.write(greeting[i:i + step])
            await asyncio.sleep(0.01)       # separate writes, separate transport calls
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()
        await writer.wait_closed()
    return handle


@pytest.mark.parametrize("parts", [1, 3])
def test_preload_app_sends_it_sends_the_greeting_once(parts: int) -> None:
    """An unmodified server writes the greeting the listener already sent: with app_sends_it the
    peer gets the stream the application wrote (greeting once), the greeting before any write."""
    async def main() -> tuple[bytes, dict[str, int]]:
        net, a, b = network()
        aio.AsyncioDriver(net)
        greeting = b"220 mail.test ESMTP\r\n"
        server = await aio.start_server(greeter(greeting + b"250-more\r\n", parts), B, 25, stack=b,
                                        preload=greeting, app_sends_preload=True)
        reader, writer = await aio.open_connection(B, 25, stack=a)
        first = await reader.readline()
        assert first == greeting
        writer.write(b"EHLO x\r\n")
        rest = await reader.read()
        writer.close()
        server.close()
        await server.wait_closed()
        return first + rest, server.preload_repeats
    stream, repeats = run(main())
    assert stream == b"220 mail.test ESMTP\r\n250-more\r\nEHLO x\r\n"
    assert repeats == {"matched": 1, "mismatched": 0}


async def _write_and_read_to_eof(a: Stack, server: aio.Server) -> bytes:
    """A client from ``a`` to ``server`` (B:25) writes a line, "x", and reads to EOF; then the
    server closes."""
    reader, writer = await aio.open_connection(B, 25, stack=a)
    writer.write(b"x\r\n")
    stream = await reader.read()
    writer.close()
    server.close()
    await server.wait_closed()
    return stream


def test_preload_app_sends_it_never_drops_different_bytes() -> None:
    """Bytes that are not the preload are sent as written, and the mismatch is reported."""
    async def main() -> tuple[bytes, dict[str, int], list[str]]:
        net, a, b = network()
        aio.AsyncioDriver(net)
        reported: list[str] = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: reported.append(ctx["message"]))
        server = await aio.start_server(greeter(b"220 other name\r\n", 1), B, 25, stack=b,
                                        preload=b"220 mail.test\r\n", app_sends_preload=True)
        stream = await _write_and_read_to_eof(a, server)
        return stream, server.preload_repeats, reported
    stream, repeats, reported = run(main())
    assert stream == b"220 mail.test\r\n220 other name\r\nx\r\n"
    assert repeats == {"matched": 0, "mismatched": 1}
    assert len(reported) == 1 and "differ from the listener's preload" in reported[0]


def test_preload_without_app_sends_it_sends_every_written_byte() -> None:
    async def main() -> bytes:
        net, a, b = network()
        aio.AsyncioDriver(net)
        greeting = b"220 mail.test\r\n"
        server = await aio.start_server(greeter(greeting, 1), B, 25, stack=b, preload=greeting)
        stream = await _write_and_read_to_eof(a, server)
        return stream
    assert run(main()) == b"220 mail.test\r\n" * 2 + b"x\r\n"


def test_objects_ring_collects_a_transport_connection() -> None:
    async def main() -> None:
        net, a, b = network()
        drv = aio.AsyncioDriver(net)
        server, client, srv, _ = await _pair(net, a, b)
        assert srv.transport is not None and client.transport is not None
        store = Store(1 << 20, driver=drv)
        ring = Ring(store)
        ring.prep_collect(srv.transport.get_extra_info("socket"), 1)
        ring.submit()
        (cqe,) = ring.reap()
        assert cqe.res > 0
        ring.prep_inspect(cqe.res, 0, 11, 2, flags=INSPECT_WAITALL)
        ring.submit()
        client.transport.write(b"hello")
        client.transport.write(b" world")
        assert await drv.wait_for(lambda: ring.cq_ready > 0, 5)
        (got,) = ring.reap()
        assert got.data == b"hello world"
        assert not srv.data                      # the collector owns the receive side
        store.close()
        server.close()
        server.abort_clients()
    run(main())


# ----------------------------------------------------------------------------- TUN-style driver


class FakeTun:
    """A TUN look-alike over one end of an AF_UNIX datagram socketpair (one packet each)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        sock.setblocking(False)

    def fileno(self) -> int:
        return self.sock.fileno()

    def read_segments(self, max_packets: int = 64) -> list[tuple[memoryview, bool, int]]:
        out: list[tuple[memoryview, bool, int]] = []
        while len(out) < max_packets:
            try:
                out.append((memoryview(self.sock.recv(65536)), False, 0))
            except BlockingIOError:
                break
        return out

    def write_packets(self, packets: Sequence[Buffer | TxPacket]) -> tuple[int, int, list[Exception]]:
        nbytes = 0
        for packet in packets:
            nbytes += self.sock.send(packet.tobytes() if isinstance(packet, TxPacket) else bytes(packet))
        return len(packets), nbytes, []


def test_tun_driver_runs_a_stack_from_add_reader() -> None:
    async def main() -> None:
        s1, s2 = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        s1.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 21)
        s2.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 21)
        a, b = Stack([A], name="a"), Stack([B], name="b")
        capture = io.BytesIO()
        pcap = PcapWriter(capture)
        da = aio.AsyncioTunDriver(a, FakeTun(s1), pcap=pcap)  # type: ignore[arg-type]
        db = aio.AsyncioTunDriver(b, FakeTun(s2))  # type: ignore[arg-type]
        try:
            server = await aio.start_server(echo_handler, B, 7, stack=b)
            reader, writer = await aio.open_connection(B, 7, stack=a)
            writer.write(b"over the fd " * 1000)
            writer.write_eof()
            assert await reader.read() == b"over the fd " * 1000
            writer.close()
            await writer.wait_closed()
            server.close()
            assert da.stats["rx_packets"] > 0 and db.stats["tx_packets"] > 0
            capture.seek(0)
            assert len(read_pcap(capture)) == da.stats["rx_packets"] + da.stats["tx_packets"]
        finally:
            da.close()
            db.close()
            s1.close()
            s2.close()
    run(main())
