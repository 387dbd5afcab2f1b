"""Socket addresses: Python's ``(host, port[, flowinfo, scope_id])`` tuples to packed IPs and back,
with the checks and errors CPython and Linux give (TypeError/ValueError for a malformed tuple,
``gaierror`` for an unknown name, EAFNOSUPPORT for the wrong family)."""

from __future__ import annotations

import errno
import ipaddress
from collections.abc import Callable
from typing import Any

from usertcp.api.constants import AF_INET6, AddressFamily, os_error

__all__ = ["format_address", "parse_address"]


def parse_address(family: AddressFamily, address: object, what: str,
                  resolve: Callable[[str], list[bytes]]) -> tuple[bytes | None, int]:
    """(host, port[, flowinfo, scope_id]) -> (packed ip or None for "any", port).

    ``resolve`` turns a host string into packed addresses (a name table or a literal) and
    raises ``gaierror`` for a name it does not know, as getaddrinfo(3).
    """
    v6 = family == AF_INET6
    if not isinstance(address, tuple) or not (len(address) == 2 or (v6 and 2 <= len(address) <= 4)):
        shape = "(host, port[, flowinfo, scope_id])" if v6 else "(host, port)"
        raise TypeError(f"{what}(): {family.name} address must be a tuple {shape}, not {address!r}")
    host_s, port = address[0], address[1]
    if not isinstance(host_s, str):
        raise TypeError(f"{what}(): host must be str, not {type(host_s).__name__}")
    if not isinstance(port, int) or isinstance(port, bool):
        raise TypeError(f"{what}(): port must be int, not {type(port).__name__}")
    if not 0 <= port <= 65535:
        raise ValueError(f"{what}(): port must be 0-65535")
    if v6 and len(address) >= 3 and not (isinstance(address[2], int) and 0 <= address[2] < 1 << 20):
        raise ValueError(f"{what}(): flowinfo must be 0-1048575")
    if host_s in ("", "0.0.0.0" if not v6 else "::"):
        return None, port
    found = resolve(host_s)
    if not v6:
        found = [f for f in found if len(f) == 4] or found    # a literal keeps its family
    ip = ipaddress.ip_address(found[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if not v6:
            raise os_error(errno.EAFNOSUPPORT, f"{host_s} is an IPv6 address on an AF_INET socket")
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped.packed, port
        if ip.is_unspecified:
            return None, port
        return ip.packed, port
    if v6:
        raise os_error(errno.EAFNOSUPPORT, f"{host_s} is an IPv4 address on an AF_INET6 socket "
                                           f"(use ::ffff:{host_s})")
    return ip.packed, port


def format_address(family: AddressFamily, ip: bytes | None, port: int) -> tuple[Any, ...]:
    """The address tuple ``getsockname``/``getpeername``/``accept`` return for ``family``."""
    if family == AF_INET6:
        if ip is None:
            text = "::"
        elif len(ip) == 4:
            text = f"::ffff:{ipaddress.IPv4Address(ip)}"   # a v4 peer of a dual-stack socket
        else:
            text = str(ipaddress.IPv6Address(ip))
        return (text, port, 0, 0)
    if ip is None:
        return ("0.0.0.0", port)
    # A wildcard listener of the stack also takes IPv6 SYNs: show what arrived.
    return (str(ipaddress.ip_address(ip)), port)
