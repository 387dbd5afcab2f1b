"""asyncio on usertcp.

Two ways in:

* **An event loop** (:class:`UsertcpEventLoop`): unmodified asyncio code (``asyncio.open_connection``,
  ``loop.create_server``, uvicorn, aiohttp, httpx, aiosmtpd, ...) runs with its TCP on usertcp, over
  an in-memory network in virtual time or a TUN device in real time. Select it in one line with
  :func:`run` (like ``asyncio.run``), :func:`loop_factory` (for ``asyncio.Runner(loop_factory=...)``)
  or :class:`EventLoopPolicy`.
* **The stack-level API** on any loop: create an :class:`AsyncioDriver` (memnet) or
  :class:`AsyncioTunDriver` (TUN) in the running loop, then :func:`open_connection`,
  :func:`start_server`, :func:`create_connection`, :func:`create_server` with ``stack=``.

Transports (:class:`UsertcpTransport`) behave as asyncio's: TCP_NODELAY on, ``Protocol`` and
``BufferedProtocol``, write-buffer limits with ``pause_writing``/``resume_writing``,
``write_eof``, ``abort``, ``start_tls``; ``get_extra_info("socket")`` is a
:class:`TransportSocket` with ``setsockopt``/``getsockopt``. usertcp's own options (listener
preload, Fast Open, TCP-MD5, payload objects) are set on a usertcp socket passed as ``sock=``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from usertcp.aio.loop import HostsTable, UsertcpEventLoop, use_stack
from usertcp.aio.server import Server
from usertcp.aio.stackapi import create_connection, create_server, open_connection, start_server
from usertcp.aio.transport import TransportSocket, UsertcpTransport
from usertcp.net.aio_driver import AsyncioDriver, AsyncioTunDriver, LoopDriver, driver_for
from usertcp.net.memnet import Network
from usertcp.net.tun import PacketSink, TunDevice
from usertcp.tcp.stack import Stack

__all__ = [
    "AsyncioDriver", "AsyncioTunDriver", "EventLoopPolicy", "HostsTable", "LoopDriver", "Server",
    "TransportSocket", "UsertcpEventLoop", "UsertcpTransport", "create_connection", "create_server",
    "driver_for", "loop_factory", "open_connection", "run", "start_server", "use_stack",
]

_T = TypeVar("_T")


def loop_factory(network: Network | None = None, *, stack: Stack | None = None,
                 device: TunDevice | None = None, pcap: PacketSink | None = None,
                 hosts: HostsTable | Mapping[str, str | list[str]] | None = None,
                 virtual_time: bool | None = None, start_time: float = 0.0) -> Callable[[], UsertcpEventLoop]:
    """A zero-argument factory for ``asyncio.Runner(loop_factory=...)`` (arguments as the loop's)."""
    return functools.partial(UsertcpEventLoop, network, stack=stack, device=device, pcap=pcap, hosts=hosts,
                             virtual_time=virtual_time, start_time=start_time)


def run(main: Coroutine[Any, Any, _T], network: Network | None = None, *, debug: bool | None = None,
        stack: Stack | None = None, device: TunDevice | None = None, pcap: PacketSink | None = None,
        hosts: HostsTable | Mapping[str, str | list[str]] | None = None, virtual_time: bool | None = None,
        start_time: float = 0.0) -> _T:
    """``asyncio.run(main)`` on a :class:`UsertcpEventLoop` built from the arguments."""
    factory = loop_factory(network, stack=stack, device=device, pcap=pcap, hosts=hosts,
                           virtual_time=virtual_time, start_time=start_time)
    with asyncio.Runner(debug=debug, loop_factory=factory) as runner:
        return runner.run(main)


class EventLoopPolicy(asyncio.DefaultEventLoopPolicy):
    """An event-loop policy whose new loops are :class:`UsertcpEventLoop` (for frameworks that
    create their loop through the policy: ``asyncio.set_event_loop_policy(EventLoopPolicy(...))``)."""

    def __init__(self, network: Network | None = None, **config: Any) -> None:
        super().__init__()
        self._factory = loop_factory(network, **config)

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return self._factory()
