"""Control messages a receive returns, checked against a recvmsg() line's ``msg_control``.

packetdrill compares each expected ``{cmsg_level=..., cmsg_type=..., cmsg_data=...}`` with
what the kernel returned.  The receive side produces one kind: with TCP_INQ on, Linux
tcp_recvmsg appends a ``TCP_CM_INQ`` message holding tcp_inq_hint() after every read.
"""

from __future__ import annotations

from collections.abc import Callable

from usertcp.api.constants import IPPROTO_TCP, TCP_CM_INQ
from usertcp.api.sockopts import SocketOptions
from usertcp.drill.ast import EllipsisExpr, Expr, List, Struct
from usertcp.drill.profile import Unsupported
from usertcp.tcp.connection import Connection

__all__ = ["check_recv_control", "recv_control"]

Cmsg = tuple[int, int, int]


def recv_control(options: SocketOptions, conn: Connection | None) -> list[Cmsg]:
    """(level, type, value) of the control messages a just-completed read returns."""
    if options.recv_inq and conn is not None:
        return [(IPPROTO_TCP, TCP_CM_INQ, conn.rx.inq_hint())]
    return []


def _expected(control: Expr) -> list[tuple[Expr, Expr, Expr]]:
    if not isinstance(control, List):
        raise Unsupported(f"msg_control form not supported: {control!r}")
    out = []
    for item in control.items:
        if not isinstance(item, Struct):
            raise Unsupported(f"cmsg form not supported: {item!r}")
        level, kind, data = item.get("cmsg_level"), item.get("cmsg_type"), item.get("cmsg_data")
        if level is None or kind is None or data is None:
            raise Unsupported("a cmsg needs cmsg_level, cmsg_type and cmsg_data")
        out.append((level, kind, data))
    return out


def check_recv_control(msg: Struct, actual: list[Cmsg], value_of: Callable[[Expr], int]) -> str | None:
    """A mismatch between the line's ``msg_control`` and ``actual``, or None.

    ``value_of`` evaluates an integer expression (the shim's ``value``)."""
    control = msg.get("msg_control")
    if control is None or isinstance(control, EllipsisExpr):
        return None
    want = _expected(control)
    if len(want) != len(actual):
        return f"recvmsg() control messages: expected {len(want)}, actual {len(actual)} ({actual})"
    for (level, kind, data), (a_level, a_kind, a_value) in zip(want, actual, strict=True):
        expected = (value_of(level), value_of(kind), value_of(data))
        if expected != (a_level, a_kind, a_value):
            got = (a_level, a_kind, a_value)
            return f"recvmsg() cmsg: expected (level, type, data) {expected}, actual {got}"
    return None
