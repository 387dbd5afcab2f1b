"""trio over usertcp: open_tcp_stream and serve_tcp with the custom socket factory.

trio waits in its own I/O loop on the sockets' readiness eventfds: in real time the driver's
watcher keeps them in step; in virtual time trio runs with usertcp's VirtualClock, which moves
the simulation whenever trio is idle.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest
import trio

from usertcp import socket as us
from usertcp.net.driver import RealTimeDriver, VirtualTimeDriver
from usertcp.net.memnet import LinkConfig, Network
from usertcp.tcp.stack import Stack
from usertcp.triosocket import TrioSocket, UsertcpSocketFactory, VirtualClock

A, B = "10.0.0.1", "10.0.0.2"


@pytest.fixture
def hosts() -> Iterator[tuple[us.Host, us.Host]]:
    net = Network(seed=5)
    sa, sb = Stack([A], name="a"), Stack([B], name="b")
    net.connect(net.add_host(sa, [A]), net.add_host(sb, [B]), LinkConfig(delay=0.0002))
    drv = RealTimeDriver(net)
    with drv:
        yield us.Host(sa, drv, name="a"), us.Host(sb, drv, name="b")


def test_open_tcp_stream_and_serve_tcp(hosts: tuple[us.Host, us.Host]) -> None:
    client_host, server_host = hosts
    served: list[bytes] = []

    async def echo_upper(stream: trio.SocketStream) -> None:
        async with stream:
            while data := await stream.receive_some(65536):
                served.append(data)
                await stream.send_all(data.upper())
            await stream.send_eof()

    async def main() -> None:
        with trio.fail_after(10):
            stream = await trio.open_tcp_stream(B, 7007)
            assert isinstance(stream.socket, TrioSocket)
            big = bytes(range(256)) * 2000                      # 512 kB: flow control waits
            async with trio.open_nursery() as nursery:
                async def sender() -> None:
                    await stream.send_all(big.replace(b"\n", b"x"))
                    await stream.send_eof()
                nursery.start_soon(sender)
                got = bytearray()
                while data := await stream.receive_some(65536):
                    got += data
            assert bytes(got) == big.replace(b"\n", b"x").upper()
            await stream.aclose()

    async def server_then_client() -> None:
        trio.socket.set_custom_socket_factory(UsertcpSocketFactory(server_host))
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(functools.partial(trio.serve_tcp, echo_upper, 7007, host=B))
            sock = listeners[0].socket
            assert isinstance(sock, TrioSocket) and sock.getsockname() == (B, 7007)
            # The factory is per run (a RunVar): the listener exists (its accepted sockets are
            # its own), so from now on new sockets are A's, the client's.
            trio.socket.set_custom_socket_factory(UsertcpSocketFactory(client_host))
            await main()
            nursery.cancel_scope.cancel()

    trio.run(server_then_client)
    assert b"".join(served)


def test_connect_refused_raises_like_trio(hosts: tuple[us.Host, us.Host]) -> None:
    client_host, _server_host = hosts

    async def main() -> None:
        trio.socket.set_custom_socket_factory(UsertcpSocketFactory(client_host))
        with trio.fail_after(10), pytest.raises(OSError):
            await trio.open_tcp_stream(B, 9)              # nothing listens: RST

    trio.run(main)


def _virtual_hosts(loss: float = 0.0) -> tuple[VirtualTimeDriver, us.Host, us.Host]:
    net = Network(seed=11)
    sa, sb = Stack([A], name="a"), Stack([B], name="b")
    net.connect(net.add_host(sa, [A]), net.add_host(sb, [B]), LinkConfig(delay=0.02, loss=loss))
    drv = VirtualTimeDriver(net)
    return drv, us.Host(sa, drv, name="a"), us.Host(sb, drv, name="b")


def _virtual_echo_run(loss: float) -> tuple[bytes, float, list[float]]:
    drv, client_host, server_host = _virtual_hosts(loss)
    marks: list[float] = []

    async def echo(stream: trio.SocketStream) -> None:
        async with stream:
            while data := await stream.receive_some(65536):
                await stream.send_all(data)

    async def main() -> bytes:
        trio.socket.set_custom_socket_factory(UsertcpSocketFactory(server_host))
        async with trio.open_nursery() as nursery:
            await nursery.start(functools.partial(trio.serve_tcp, echo, 7, host=B))
            trio.socket.set_custom_socket_factory(UsertcpSocketFactory(client_host))
            marks.append(trio.current_time())
            await trio.sleep(60)                       # a minute of virtual time, at once
            marks.append(trio.current_time())
            with trio.fail_after(120):
                stream = await trio.open_tcp_stream(B, 7)
                payload = bytes(range(256)) * 400       # 100 kB through a lossy link
                got = bytearray()

                async def reader() -> None:
                    while len(got) < len(payload):
                        got.extend(await stream.receive_some(65536))

                async with trio.open_nursery() as inner:
                    inner.start_soon(reader)
                    await stream.send_all(payload)
                await stream.aclose()
            marks.append(trio.current_time())
            nursery.cancel_scope.cancel()
        return bytes(got)

    data = trio.run(main, clock=VirtualClock(drv))
    return data, drv.now(), marks


def test_trio_in_virtual_time_on_a_lossy_link() -> None:
    data, end, marks = _virtual_echo_run(loss=0.02)
    assert data == bytes(range(256)) * 400
    assert marks[1] - marks[0] == pytest.approx(60)    # trio.sleep(60): virtual seconds
    assert marks[2] > marks[1]                         # the transfer took virtual time too
    assert end == marks[2]                             # and nothing ran the clock past the end
    # Same seed, same run: the virtual clock ends at the same instant.
    data2, end2, marks2 = _virtual_echo_run(loss=0.02)
    assert (data2, end2, marks2) == (data, end, marks)
