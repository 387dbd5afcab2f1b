"""The module-level calls of the socket API: ``socket``, ``create_connection``,
``create_server``, ``getaddrinfo``, ``gethostbyname`` (as :mod:`socket`'s), and ``splice``
(as :func:`os.splice`, with a usertcp socket at one end: :mod:`usertcp.api.splice`)."""

from __future__ import annotations

import ipaddress
import socket as _pysocket
from typing import Any, Final, cast

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
from usertcp.api.host import Host, get_default_host, host_or_default
from usertcp.api.sockets import Socket
from usertcp.api.splice import SPLICE_F_MORE, SPLICE_F_MOVE, SPLICE_F_NONBLOCK, splice

__all__ = ["SPLICE_F_MORE", "SPLICE_F_MOVE", "SPLICE_F_NONBLOCK", "create_connection", "create_server",
           "getaddrinfo", "getfqdn", "gethostbyname", "gethostname", "htonl", "htons", "inet_aton",
           "inet_ntoa", "inet_ntop", "inet_pton", "ntohl", "ntohs", "socket", "splice"]

# Pure conversions need no stack: the standard library's, so code using them keeps working
# when its ``socket`` module is usertcp's.
htonl, htons, ntohl, ntohs = _pysocket.htonl, _pysocket.htons, _pysocket.ntohl, _pysocket.ntohs
inet_aton, inet_ntoa = _pysocket.inet_aton, _pysocket.inet_ntoa
inet_pton, inet_ntop = _pysocket.inet_pton, _pysocket.inet_ntop



def socket(family: int = AF_INET, type: int = SOCK_STREAM, proto: int = 0, *,
           host: Host | None = None) -> Socket:
    """A new socket on ``host`` (or the default host: :func:`set_default_host`, :func:`use_host`)."""
    return Socket(family, type, proto, host=host)


# CPython's own sentinel, so a stdlib module that captured ``socket._GLOBAL_DEFAULT_TIMEOUT``
# as a default argument (http.client, smtplib, ftplib) means "the default" here too.
_GLOBAL_DEFAULT_TIMEOUT: Final[object] = _pysocket._GLOBAL_DEFAULT_TIMEOUT  # type: ignore[attr-defined]


def create_connection(address: tuple[Any, ...], timeout: float | object | None = _GLOBAL_DEFAULT_TIMEOUT,
                      source_address: tuple[Any, ...] | None = None, *, all_errors: bool = False,
                      host: Host | None = None) -> Socket:
    """Connect to ``(host, port)`` and return the socket, as :func:`socket.create_connection`:
    each address the name resolves to (the host's table, or a literal) is tried in turn."""
    name, port = address[0], address[1]
    where = host_or_default(host)
    errors: list[OSError] = []
    for packed in where.resolve(name):
        ip = str(ipaddress.ip_address(packed))
        sock = Socket(AF_INET6 if len(packed) == 16 else AF_INET, SOCK_STREAM, host=where)
        try:
            if timeout is not _GLOBAL_DEFAULT_TIMEOUT:
                sock.settimeout(cast("float | None", timeout))
            if source_address is not None:
                sock.bind(source_address)
            sock.connect((ip, port))
        except OSError as e:
            sock.close()
            errors.append(e)
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    if all_errors:
        raise ExceptionGroup("create_connection failed", errors)
    raise errors[-1]


def _family_of(address: Any) -> AddressFamily:
    if isinstance(address, tuple) and address and isinstance(address[0], str) and ":" in address[0]:
        return AF_INET6
    return AF_INET


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
    elif port is not None and (not isinstance(port, int) or isinstance(port, bool)):
        raise OSError("Int or String expected")      # CPython's message for a bad port type
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


def gethostname() -> str:
    """The default host's name (there is no kernel hostname to ask)."""
    return host_or_default(None).name


def getfqdn(name: str = "") -> str:
    """``name``, or the default host's name: usertcp has no reverse DNS to ask."""
    return name or gethostname()
