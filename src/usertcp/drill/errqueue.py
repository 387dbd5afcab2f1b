"""The drill shim's side of the error queue: MSG_ZEROCOPY sends and ``recvmsg(MSG_ERRQUEUE)``.

A send with MSG_ZEROCOPY on a socket with SO_ZEROCOPY takes a zerocopy id for the bytes it
queues (:class:`SendNotes`, around the whole call as Linux ``tcp_sendmsg_locked`` holds one
``ubuf_info`` for it); without SO_ZEROCOPY the flag is ignored, as Linux does for TCP (checked
on this machine's kernel: the data is sent, nothing is queued). The write marks its last byte
for transmit timestamps itself (``Connection.send(..., tstamp=...)``: ``tcp_tx_timestamp``).

``recvmsg(fd, msg, MSG_ERRQUEUE)`` pops one entry (EAGAIN when there is none) and checks the
script's ``msg_control`` against the control messages Linux's ``ip_recv_error`` builds: an
``SCM_TIMESTAMPING`` message (software time in ``ts[0]``, compared with the script's
``scm_sec``/``scm_nsec`` within the timing tolerance, as packetdrill does) when the socket
reports software timestamps, then the family's ``IP_RECVERR``/``IPV6_RECVERR`` message with the
``struct sock_extended_err`` fields. The call returns the bytes copied (none with an empty
iovec; MSG_TRUNC when the entry held more).
"""

from __future__ import annotations

import errno

from usertcp.drill import timing
from usertcp.drill.ast import EllipsisExpr, Expr, List, Struct
from usertcp.drill.defaults import SYMBOLS
from usertcp.drill.sysargs import value
from usertcp.drill.sysbase import Host, Mismatch, Sock, SysError
from usertcp.tcp.errqueue import SO_EE_ORIGIN_TIMESTAMPING, ExtendedError
from usertcp.tcp.zerocopy import ZerocopySend

__all__ = ["SendNotes", "recv_errqueue"]

S = SYMBOLS


class SendNotes:
    """The zerocopy range one send call takes (the timestamp mark is the core's, in the write)."""

    __slots__ = ("flags", "send")

    def __init__(self, sock: Sock, flags: int) -> None:
        self.flags = flags
        self.send: ZerocopySend | None = None
        self.attach(sock)

    def attach(self, sock: Sock) -> None:
        """Take the range once the socket has a connection: at the call's start, or when a
        sendto(MSG_FASTOPEN) creates it (tcp_sendmsg_locked allocates the uarg before
        tcp_sendmsg_fastopen, and tcp_send_syn_data puts the SYN's data under it)."""
        conn = sock.conn
        if self.send is None and conn is not None and self.flags & S["MSG_ZEROCOPY"] \
                and sock.options.zerocopy:
            self.send = ZerocopySend(conn)

    def finish(self, sock: Sock) -> None:
        """The call ends (returned or failed): account for the bytes it queued."""
        if self.send is not None and sock.conn is not None:
            self.send.finish(sock.conn)


def recv_errqueue(host: Host, sock: Sock, msg: Struct) -> int:
    """recvmsg(MSG_ERRQUEUE): pop and check one entry; raises SysError / Mismatch."""

    conn = sock.conn
    queue = conn.errqueue if conn is not None else None
    entry = queue.pop() if queue is not None else None
    if entry is None:
        raise SysError(errno.EAGAIN)
    named = msg.named()
    iov_len = 0
    iov = named.get("msg_iov")
    if iov is not None and isinstance(iov.value, List):
        for item in iov.value.items:
            if isinstance(item, Struct) and item.positional():
                iov_len += value(item.positional()[-1])
    flags = S["MSG_ERRQUEUE"] | (S["MSG_TRUNC"] if entry.length > iov_len else 0)
    want_flags = named.get("msg_flags")
    if want_flags is not None and not isinstance(want_flags.value, EllipsisExpr):
        want = value(want_flags.value)
        if want != flags:
            raise Mismatch(f"recvmsg() msg_flags: expected {want:#x}, actual {flags:#x}")
    control = named.get("msg_control")
    if control is not None and isinstance(control.value, List):
        tstamps = queue.tstamp if queue is not None else None
        report_time = entry.origin == SO_EE_ORIGIN_TIMESTAMPING and tstamps is not None \
            and tstamps.report_software
        _check_control(host, sock, control.value, entry, report_time)
    return min(entry.length, iov_len)


def _check_control(host: Host, sock: Sock, want: List, entry: ExtendedError, report_time: bool) -> None:

    v6 = sock.family == S["AF_INET6"]
    actual: list[tuple[int, int, dict[str, int] | float]] = []
    if report_time and entry.tstamp is not None:
        actual.append((S["SOL_SOCKET"], S["SCM_TIMESTAMPING"], entry.tstamp))
    actual.append((S["SOL_IPV6"] if v6 else S["SOL_IP"], S["IPV6_RECVERR"] if v6 else S["IP_RECVERR"],
                   {"ee_errno": entry.errno, "ee_origin": entry.origin, "ee_type": entry.type,
                    "ee_code": entry.code, "ee_info": entry.info, "ee_data": entry.data}))
    if len(want.items) != len(actual):
        raise Mismatch(f"recvmsg() control messages: expected {len(want.items)}, actual {len(actual)} "
                       f"({entry!r})")
    for i, (item, (level, kind, data)) in enumerate(zip(want.items, actual, strict=True)):
        if not isinstance(item, Struct):
            raise Mismatch(f"recvmsg() control message {i}: expected a cmsg struct")
        fields = item.named()
        for name, got in (("cmsg_level", level), ("cmsg_type", kind)):
            if name in fields and value(fields[name].value) != got:
                raise Mismatch(f"recvmsg() cmsg {i} {name}: expected {value(fields[name].value)}, "
                               f"actual {got}")
        body = fields["cmsg_data"].value if "cmsg_data" in fields else None
        if not isinstance(body, Struct):
            continue
        expected = {name: f.value for name, f in body.named().items()}
        if isinstance(data, float):
            _check_time(host, i, expected, data)
            continue
        for name, expr in expected.items():
            if isinstance(expr, EllipsisExpr):
                continue
            if name not in data:
                raise Mismatch(f"recvmsg() cmsg {i}: no field {name} in {entry!r}")
            if value(expr) != data[name]:
                raise Mismatch(f"recvmsg() cmsg {i} {name}: expected {value(expr)}, actual {data[name]}")


def _check_time(host: Host, i: int, fields: dict[str, Expr], actual: float) -> None:
    """packetdrill checks an SCM_TIMESTAMPING time like an event time: script time, tolerance."""

    expected = value(fields["scm_sec"]) + value(fields["scm_nsec"]) / 1e9 \
        if "scm_sec" in fields and "scm_nsec" in fields else None
    if expected is None:
        return
    allowed = timing.tolerance(0.0, host.tol_us, host.tol_pct)
    if abs(actual - expected) > allowed + 1e-9:
        raise Mismatch(f"recvmsg() cmsg {i} SCM_TIMESTAMPING: expected {expected:.6f} s, "
                       f"actual {actual:.6f} s (tolerance {allowed * 1e6:.0f} us)")
