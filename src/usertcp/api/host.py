"""Hosts (a stack plus the driver that runs it), the default host, timeouts and name lookup.

A :class:`Host` is the factory for sockets of one stack. Names resolve through the host's
own table (:meth:`Host.add_name`, like ``/etc/hosts``) or as IP literals; there is no DNS,
and a name neither knows raises :class:`socket.gaierror` as the C library does.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import ipaddress
import socket as _pysocket
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

from usertcp.api.constants import AF_INET, AF_INET6, SOCK_STREAM, gaierror, os_error
from usertcp.tcp.stack import EPHEMERAL_PORTS, Stack

if TYPE_CHECKING:
    from usertcp.api.readiness import ReadinessMirror
    from usertcp.api.socket_core import SocketCore
    from usertcp.api.sockets import Socket

__all__ = [
    "Host",
    "SocketDriver",
    "check_timeout",
    "get_default_host",
    "getdefaulttimeout",
    "host_or_default",
    "set_default_host",
    "setdefaulttimeout",
    "use_host",
]

# ----------------------------------------------------------------------------- hosts


class SocketDriver(Protocol):
    """:class:`usertcp.net.endpoint.Driver` with ``lock`` read-only.

    A read-only member is covariant, so RealTimeDriver (whose lock is an RLock) fits;
    with the plain attribute of ``Driver`` mypy rejects it.
    """

    @property
    def lock(self) -> AbstractContextManager[object]: ...

    def now(self) -> float: ...

    def kick(self) -> None: ...

    def wait_until(self, predicate: Callable[[], bool], timeout: float | None) -> bool: ...


class Host:
    """A stack plus the driver that runs it: the factory for sockets of that stack.

    Also keeps the table of bound-but-not-yet-listening ports, which the stack itself
    doesn't know about, so ``bind()`` can report EADDRINUSE like Linux.
    """

    def __init__(self, stack: Stack, driver: SocketDriver, *, name: str | None = None) -> None:
        self.stack = stack
        self.driver = driver
        self.name = name or stack.name or "host"
        self._bound: dict[int, list[SocketCore]] = {}
        self._next_port = EPHEMERAL_PORTS[0]
        self._names: dict[str, list[bytes]] = {}
        self._readiness: ReadinessMirror | None = None

    @property
    def readiness(self) -> ReadinessMirror:
        """The eventfds mirroring this host's sockets' readiness (created on first use)."""
        if self._readiness is None:
            from usertcp.api.readiness import ReadinessMirror  # it builds on this module
            self._readiness = ReadinessMirror(self.driver)
        return self._readiness

    # -- names -------------------------------------------------------------------

    def add_name(self, name: str, *addresses: str) -> None:
        """Resolve ``name`` to ``addresses`` on this host (its ``/etc/hosts``); first one first."""
        if not addresses:
            raise ValueError("add_name() needs at least one address")
        packed = [ipaddress.ip_address(a).packed for a in addresses]
        self._names.setdefault(name.lower(), []).extend(packed)

    def resolve(self, name: str, family: int = 0) -> list[bytes]:
        """The packed addresses of ``name`` (an IP literal or a name of the table), of ``family``
        (0: both); :class:`socket.gaierror` as getaddrinfo(3) when there is none."""
        try:
            found = [ipaddress.ip_address(name).packed]
        except ValueError:
            found = self._names.get(name.lower().rstrip("."), [])
            if not found:
                raise gaierror(_pysocket.EAI_NONAME, "Name or service not known") from None
        if family == AF_INET:
            found = [a for a in found if len(a) == 4]
        elif family == AF_INET6:
            found = [a for a in found if len(a) == 16]
        if not found:
            raise gaierror(_pysocket.EAI_ADDRFAMILY, "Address family for hostname not supported")
        return found

    def __repr__(self) -> str:
        addrs = ", ".join(Stack.fmt_addr(a) for a in self.stack.addresses)
        return f"<usertcp.Host {self.name!r} [{addrs}]>"

    def socket(self, family: int = AF_INET, type: int = SOCK_STREAM, proto: int = 0) -> Socket:
        from usertcp.api.sockets import Socket  # the socket module builds on this one
        return Socket(family, type, proto, host=self)

    def now(self) -> float:
        return self.driver.now()

    # -- port table --------------------------------------------------------------

    def _ports_in_use(self) -> set[int]:
        used = {p for p, socks in self._bound.items() if socks}
        used.update(port for _, port in self.stack.listeners)
        used.update(key[1] for key in self.stack.connections)
        return used

    def pick_port(self) -> int:
        lo, hi = EPHEMERAL_PORTS
        span = hi - lo + 1
        used = self._ports_in_use()
        for _ in range(span):
            port = self._next_port
            self._next_port = lo + (port - lo + 1) % span
            if port not in used:
                return port
        raise os_error(errno.EADDRINUSE, "no free ephemeral port")

    def check_bind(self, sock: SocketCore, ip: bytes | None, port: int) -> None:
        """Linux inet_csk_bind_conflict, simplified: overlapping addresses on one port
        conflict unless both sides set SO_REUSEADDR and neither listens."""
        def overlaps(other: bytes | None) -> bool:
            return ip is None or other is None or other == ip

        for other in self._bound.get(port, ()):
            if other is sock or not overlaps(other.bound_ip):
                continue
            if not (sock.options.reuseaddr and other.options.reuseaddr and other.listener is None):
                raise os_error(errno.EADDRINUSE, "address already in use")
        for lip, lport in self.stack.listeners:
            if lport == port and overlaps(lip or None):
                raise os_error(errno.EADDRINUSE, "address already in use")
        if not sock.options.reuseaddr:
            # Connections still using the port (accepted children, TIME_WAIT) block a
            # rebind until SO_REUSEADDR is set: the classic server-restart case.
            for lip, lport, _, _ in self.stack.connections:
                if lport == port and overlaps(lip):
                    raise os_error(errno.EADDRINUSE, "address already in use")

    def register_port(self, sock: SocketCore, port: int) -> None:
        self._bound.setdefault(port, []).append(sock)

    def release_port(self, sock: SocketCore, port: int) -> None:
        socks = self._bound.get(port)
        if socks and sock in socks:
            socks.remove(sock)
            if not socks:
                del self._bound[port]


_default_host: Host | None = None
_context_host: contextvars.ContextVar[Host | None] = contextvars.ContextVar("usertcp_host", default=None)
_default_timeout: float | None = None


def set_default_host(host: Host | None) -> None:
    """The host module-level :func:`socket` uses when given none (process-wide)."""
    global _default_host
    _default_host = host


def get_default_host() -> Host | None:
    return _context_host.get() or _default_host


@contextlib.contextmanager
def use_host(host: Host) -> Iterator[Host]:
    """Make ``host`` the default for this thread/task within the ``with`` block (nests)."""
    token = _context_host.set(host)
    try:
        yield host
    finally:
        _context_host.reset(token)


def host_or_default(host: Host | None) -> Host:
    h = host or get_default_host()
    if h is None:
        raise ValueError("no usertcp Host: pass host=, or call set_default_host() / use_host()")
    return h


def getdefaulttimeout() -> float | None:
    return _default_timeout


def setdefaulttimeout(value: float | None) -> None:
    global _default_timeout
    _default_timeout = check_timeout(value)


def check_timeout(value: float | None) -> float | None:
    if value is None:
        return None
    t = float(value)
    if t < 0 or t != t:
        raise ValueError("Timeout value out of range")
    return t

