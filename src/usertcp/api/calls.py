"""The module-level calls of the socket API: ``socket``, ``create_connection``,
``create_server``, ``getaddrinfo``, ``gethostbyname`` (as :mod:`socket`'s)."""

from __future__ import annotations

import ipaddress
import socket as _pysocket
from typing import Any, Final

from usertcp.api.constants import (
    AF_INET,
    AF_INET6,
    IPPROTO_TCP,
    SO_REUSEADDR,
    SOCK_STREAM,
    SOL_SOCKET,
    AddressFamily,
    SocketKind,
    gaierror,
)
from usertcp.api.host import Host, get_default_host
from usertcp.api.sockets import Socket

__all__ = ["create_connection", "create_server", "getaddrinfo", "gethostbyname", "socket"]



def socket(family: int = AF_INET, type: int = SOCK_STREAM, proto: int = 0, *,
           host: Host | None = None) -> Socket:
    """A new socket on ``host`` (or the default host: :func:`set_default_host`, :func:`use_host`)."""
    return Socket(family, type, proto, host=host)


class _DefaultTimeout:
    """Sentinel: "use getdefaulttimeout()", as socket._GLOBAL_DEFAULT_TIMEOUT."""


_GLOBAL_DEFAULT_TIMEOUT: Final = _DefaultTimeout()


def _family_of(address: Any) -> AddressFamily:
    if isinstance(address, tuple) and address and isinstance(address[0], str) and ":" in address[0]:
        return AF_INET6
    return AF_INET


def create_connection(address: tuple[Any, ...],
                      timeout: float | _DefaultTimeout | None = _GLOBAL_DEFAULT_TIMEOUT,
                      source_address: tuple[Any, ...] | None = None, *, host: Host | None = None) -> Socket:
    """Connect to ``(ip, port)`` and return the socket (the family follows the address)."""
    sock = Socket(_family_of(address), SOCK_STREAM, host=host)
    try:
        if not isinstance(timeout, _DefaultTimeout):
            sock.settimeout(timeout)
        if source_address is not None:
            sock.bind(source_address)
        sock.connect(address)
    except BaseException:
        sock.close()
        raise
    return sock


def create_server(address: tuple[Any, ...], *, family: int | None = None, backlog: int | None = 128,
                  reuse_port: bool = False, dualstack_ipv6: bool = False,
                  host: Host | None = None) -> Socket:
    """A listening socket with SO_REUSEADDR set (as Python does on POSIX).

    An AF_INET6 socket bound to ``::`` also accepts IPv4 (the stack is dual-stack),
    so ``dualstack_ipv6`` is accepted and changes nothing.
    """
    if reuse_port:
        raise ValueError("SO_REUSEPORT is not supported by usertcp")
    fam = _family_of(address) if family is None else family
    if dualstack_ipv6 and fam != AF_INET6:
        raise ValueError("dualstack_ipv6 requires AF_INET6 family")
    sock = Socket(fam, SOCK_STREAM, host=host)
    try:
        sock.setsockopt(SOL_SOCKET, SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128 if backlog is None else backlog)
    except BaseException:
        sock.close()
        raise
    return sock


def getaddrinfo(host: str | bytes | None, port: str | int | None, family: int = 0, type: int = 0,
                proto: int = 0, flags: int = 0) -> list[tuple[AddressFamily, SocketKind, int, str,
                                                              tuple[Any, ...]]]:
    """:func:`socket.getaddrinfo` over the default host's name table and IP literals (TCP only)."""
    if isinstance(host, bytes):
        host = host.decode("idna")
    if isinstance(port, str):
        if not port.isdigit():
            raise gaierror(_pysocket.EAI_SERVICE, "Servname not supported for ai_socktype")
        port = int(port)
    port = port or 0
    if type not in (0, SOCK_STREAM) or proto not in (0, IPPROTO_TCP):
        raise gaierror(_pysocket.EAI_SOCKTYPE, "ai_socktype not supported (usertcp: TCP only)")
    if host is None:
        wildcard = bool(flags & _pysocket.AI_PASSIVE)
        addrs = [bytes(4) if wildcard else bytes([127, 0, 0, 1])]
    else:
        table = get_default_host()
        if table is None:
            addrs = [ipaddress.ip_address(host).packed] if _is_literal(host) else []
            if not addrs:
                raise gaierror(_pysocket.EAI_NONAME, "Name or service not known")
        else:
            addrs = table.resolve(host, family)
    out: list[tuple[AddressFamily, SocketKind, int, str, tuple[Any, ...]]] = []
    for packed in addrs:
        ip = ipaddress.ip_address(packed)
        fam = AF_INET6 if ip.version == 6 else AF_INET
        if family in (0, fam):
            addr: tuple[Any, ...] = (str(ip), port, 0, 0) if fam == AF_INET6 else (str(ip), port)
            out.append((fam, SocketKind.SOCK_STREAM, IPPROTO_TCP, "", addr))
    if not out:
        raise gaierror(_pysocket.EAI_ADDRFAMILY, "Address family for hostname not supported")
    return out


def gethostbyname(name: str) -> str:
    """The first IPv4 address of ``name`` (the default host's table, or a literal)."""
    return str(getaddrinfo(name, None, AF_INET)[0][4][0])


def _is_literal(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
