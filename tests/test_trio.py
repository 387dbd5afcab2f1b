"""trio over usertcp: open_tcp_stream and serve_tcp with the custom socket factory.

trio waits in its own I/O loop on the sockets' readiness eventfds, which the real-time
driver's watcher keeps in step, so these run on the in-memory network in real time
(sub-millisecond links).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest
import trio

from usertcp import socket as us
from usertcp.net.driver import RealTimeDriver
from usertcp.net.memnet import LinkConfig, Network
from usertcp.tcp.stack import Stack
from usertcp.triosocket import TrioSocket, UsertcpSocketFactory

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
