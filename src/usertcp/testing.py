"""Two hosts on the in-memory network in one call, for tests, examples and experiments.

>>> from usertcp.testing import pair
>>> p = pair()                          # stacks a (10.0.0.1) and b (10.0.0.2), 5 ms each way
>>> client, server = p.open(80)         # a connects to b:80; both ends as sans-IO Connections
>>> client_host, server_host = p.hosts()   # or the socket API (usertcp.socket) on the same stacks

Everything runs in virtual time (:class:`usertcp.net.driver.VirtualTimeDriver`): waits
advance the clock instead of sleeping, and a run is reproducible from its ``seed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from usertcp.net.driver import VirtualTimeDriver
from usertcp.net.memnet import Link, LinkConfig, Network
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import Connection
from usertcp.tcp.stack import Listener, Stack

if TYPE_CHECKING:
    from usertcp.api.sockets import Host

A_ADDR = "10.0.0.1"
B_ADDR = "10.0.0.2"

__all__ = ["A_ADDR", "B_ADDR", "Pair", "pair"]


@dataclass
class Pair:
    """Stacks ``a`` and ``b`` joined by ``link`` on ``net``, driven by ``driver``."""

    net: Network
    a: Stack
    b: Stack
    link: Link
    driver: VirtualTimeDriver
    listener: Listener | None = None
    extra: dict[str, object] = field(default_factory=dict)
    addresses: tuple[str, str] = (A_ADDR, B_ADDR)

    @property
    def now(self) -> float:
        return self.driver.now()

    def open(self, port: int = 80, *, timeout: float = 30.0) -> tuple[Connection, Connection]:
        """Listen on b, connect from a; returns (client, accepted server connection).

        RuntimeError if the handshake does not complete within ``timeout`` virtual seconds.
        """
        self.listener = lst = self.b.listen(port)
        client = self.a.create_connection(self.addresses[1], port)
        self.a.connect(client, self.now)
        self.driver.kick()
        if not self.driver.run_until(lambda: bool(lst.accept_queue), timeout):
            raise RuntimeError("handshake did not complete")
        server = lst.accept()
        if server is None:
            raise RuntimeError("handshake did not complete")
        return client, server

    def hosts(self) -> tuple[Host, Host]:
        """The socket API (:mod:`usertcp.socket`) on stacks a and b: ``(client_host, server_host)``."""
        from usertcp.api.sockets import Host

        return Host(self.a, self.driver), Host(self.b, self.driver)


def pair(config: LinkConfig | None = None, *, seed: int = 1, cfg_a: StackConfig | None = None,
         cfg_b: StackConfig | None = None, addresses: tuple[str, str] = (A_ADDR, B_ADDR),
         reverse: LinkConfig | None = None) -> Pair:
    """Two stacks (``a`` at ``addresses[0]``, ``b`` at ``addresses[1]``) on one link.

    ``config`` is the link (default: 5 ms delay each way, no loss); ``reverse`` a different
    b-to-a direction; ``cfg_a``/``cfg_b`` the stacks' :class:`StackConfig`; ``seed`` the
    network's random impairments.
    """
    net = Network(seed=seed)
    a = Stack([addresses[0]], cfg_a, name="a")
    b = Stack([addresses[1]], cfg_b, name="b")
    ha = net.add_host(a, [addresses[0]])
    hb = net.add_host(b, [addresses[1]])
    link = net.connect(ha, hb, config or LinkConfig(delay=0.005), reverse)
    return Pair(net, a, b, link, VirtualTimeDriver(net), addresses=addresses)
