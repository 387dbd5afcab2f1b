"""Decoding the arguments of a script's system call: integers and symbols, socket addresses,
buffers and iovecs, socket option values, and the expected contents of a read."""

from __future__ import annotations

import struct
from typing import Any

from usertcp.drill.ast import BinOr, Call, EllipsisExpr, Expr, Int, List, String, Struct, Symbol
from usertcp.drill.defaults import SYMBOLS, UNSUPPORTED_SYMBOLS
from usertcp.drill.profile import Unsupported
from usertcp.drill.sysbase import Mismatch

__all__ = ["buffer", "check_contents", "ellipsis", "iov", "is_null", "is_unspec", "option_names",
           "option_value", "sockaddr", "user_buffer", "value"]

S = SYMBOLS


def value(expr: Expr) -> int:
    """An integer argument: literals, symbols, ``A|B``, ``[n]``, ``htons(n)``."""
    if isinstance(expr, Int):
        return expr.value
    if isinstance(expr, Symbol):
        if expr.name in UNSUPPORTED_SYMBOLS:
            raise Unsupported(f"{expr.name}: {UNSUPPORTED_SYMBOLS[expr.name]}")
        if expr.name not in SYMBOLS:
            raise Unsupported(f"unknown symbol {expr.name}")
        return SYMBOLS[expr.name]
    if isinstance(expr, BinOr):
        return value(expr.left) | value(expr.right)
    if isinstance(expr, List) and len(expr.items) == 1:
        return value(expr.items[0])
    if isinstance(expr, Call) and expr.name in ("htons", "ntohs", "htonl", "ntohl") and len(expr.args) == 1:
        return value(expr.args[0])
    raise Unsupported(f"cannot evaluate {expr!r} as an integer")


def ellipsis(expr: Expr) -> bool:
    return isinstance(expr, EllipsisExpr)


def sockaddr(expr: Expr, default_ip: str, default_port: int) -> tuple[int | None, str, int]:
    """(family or None for ``...``, ip, port) of a sockaddr argument."""
    if ellipsis(expr):
        return None, default_ip, default_port
    if not isinstance(expr, Struct):
        raise Unsupported(f"sockaddr form not supported: {expr!r}")
    fields = expr.named()
    fam = value(fields["sa_family"].value) if "sa_family" in fields else None
    port = default_port
    ip = default_ip
    for name in ("sin_port", "sin6_port"):
        if name in fields:
            port = value(fields[name].value)
    for name in ("sin_addr", "sin6_addr"):
        if name in fields:
            v = fields[name].value
            if isinstance(v, Call) and v.args and isinstance(v.args[-1], String):
                ip = v.args[-1].value.decode()
            elif isinstance(v, String):
                ip = v.value.decode()
            else:
                raise Unsupported(f"address form not supported: {v!r}")
    return fam, ip, port


def buffer(expr: Expr, length: int) -> bytes:
    """Data to send: ``...`` is zeros (packetdrill callocs), a string is sent as is."""
    if isinstance(expr, String):
        data = expr.value
        if len(data) < length:
            data += bytes(length - len(data))
        return data[:length]
    return bytes(length)


def user_buffer(expr: Expr, length: int) -> bytes | None:
    """Data a send reads from user memory; None when the kernel's copy faults (EFAULT): a
    NULL pointer with a non-zero length (the syscall_bad_arg/ scripts)."""
    if length and is_null(expr):
        return None
    return buffer(expr, length)


def is_null(expr: Expr) -> bool:
    return (isinstance(expr, Symbol) and expr.name == "NULL") or (isinstance(expr, Int) and expr.value == 0)


def is_unspec(expr: Expr) -> bool:
    """An address of family AF_UNSPEC: the bare constant, or a struct with sa_family=AF_UNSPEC."""
    if isinstance(expr, Symbol | Int):
        return value(expr) == S["AF_UNSPEC"]
    return isinstance(expr, Struct) and "sa_family" in expr.named() \
        and value(expr.named()["sa_family"].value) == S["AF_UNSPEC"]


def iov(expr: Expr) -> list[tuple[Expr, int]]:
    if not isinstance(expr, List):
        raise Unsupported(f"iovec form not supported: {expr!r}")
    out = []
    for item in expr.items:
        if not isinstance(item, Struct):
            raise Unsupported(f"iovec form not supported: {item!r}")
        pos = item.positional()
        named = item.named()
        base = named["iov_base"].value if "iov_base" in named else (pos[0] if pos else EllipsisExpr())
        ln = named["iov_len"].value if "iov_len" in named else pos[-1]
        out.append((base, value(ln)))
    return out


def option_value(name: str, arg: Expr, length: int) -> Any:
    """A setsockopt argument as the option module takes it: an int, or the struct's bytes."""
    if name == "SO_LINGER":
        if not isinstance(arg, Struct):
            raise Unsupported("SO_LINGER needs {onoff=..., linger=...}")
        fields = (arg.get("onoff") or Int(0, "0"), arg.get("linger") or Int(0, "0"))
        return struct.pack("ii", *(value(v) for v in fields))
    if name == "TCP_FASTOPEN_KEY":
        key = arg.value if isinstance(arg, String) else b""
        return key[:length] + bytes(max(0, length - len(key)))   # the optlen counts
    if name in ("TCP_MD5SIG", "TCP_MD5SIG_EXT"):
        if not isinstance(arg, String):
            raise Unsupported("TCP_MD5SIG value must be ... or struct tcp_md5sig bytes")
        return arg.value
    return value(arg)


def option_names(level: Expr, name: Expr) -> tuple[str, str]:
    if not isinstance(level, Symbol) or not isinstance(name, Symbol):
        raise Unsupported("socket option level and name must be symbolic")
    return level.name, name.name


def check_contents(want: Expr, data: bytes) -> None:
    """Our extension: a string buffer argument of read()/recv() is the data expected."""
    if isinstance(want, String):
        expected = want.value
        if want.ellipsis:
            ok = data.startswith(expected)
        else:
            ok = data == expected
        if not ok:
            raise Mismatch(
                f"data read: expected {expected!r}{'...' if want.ellipsis else ''}, actual {data!r}"
            )
