"""``recvmsg(MSG_ERRQUEUE)`` on usertcp sockets: zerocopy completions and transmit timestamps.

As Linux ``ip_recv_error``/``ipv6_recv_error``: one entry per call, EAGAIN when the queue is
empty (never blocking), ``MSG_ERRQUEUE`` in the returned flags, and the control messages
Python's ``socket.recvmsg`` returns from Linux:

- ``(SOL_SOCKET, SCM_TIMESTAMPING, struct scm_timestamping)`` for a timestamp when the socket
  reports software times (``SOF_TIMESTAMPING_SOFTWARE``): three ``struct timespec``, the first
  the software time (the host driver's clock, seconds), the others zero;
- then, with ``SOF_TIMESTAMPING_OPT_STATS``, ``(SOL_SOCKET, SCM_TIMESTAMPING_OPT_STATS, ...)``:
  the connection's statistics as netlink attributes (decode with
  :func:`usertcp.wire.opt_stats.decode_opt_stats`), which are also the message's data, as in
  Linux ``__sock_recv_timestamp``;
- ``(SOL_IP, IP_RECVERR, ...)`` (``(IPPROTO_IPV6, IPV6_RECVERR, ...)`` on IPv6): ``struct
  sock_extended_err`` followed by the empty offender address, decoded by :func:`parse_extended_err`.

Deviation: Linux also hands back a copy of the timestamped packet as the message's data; usertcp
keeps no copy, so the data is empty and ``MSG_TRUNC`` says that Linux would have had some (ask
for ``SOF_TIMESTAMPING_OPT_TSONLY`` to have neither).
"""

from __future__ import annotations

import errno
import socket as _pysocket
import struct
from typing import TYPE_CHECKING, Final, NamedTuple

from usertcp.api.constants import (
    AF_INET6,
    IP_RECVERR,
    IPPROTO_IP,
    IPPROTO_IPV6,
    IPV6_RECVERR,
    MSG_CTRUNC,
    MSG_ERRQUEUE,
    MSG_TRUNC,
    SO_TIMESTAMPING,
    SOL_SOCKET,
    os_error,
)
from usertcp.tcp.errqueue import SO_EE_ORIGIN_TIMESTAMPING
from usertcp.wire.opt_stats import SCM_TIMESTAMPING_OPT_STATS

if TYPE_CHECKING:
    from usertcp.api.sockets import Socket

__all__ = ["SCM_TIMESTAMPING", "ExtendedErr", "parse_extended_err", "recv_errqueue"]

SCM_TIMESTAMPING: Final = SO_TIMESTAMPING
_EE: Final = struct.Struct("=IBBBBII")            # struct sock_extended_err
_TS3: Final = struct.Struct("=qqqqqq")            # struct scm_timestamping (64-bit timespecs)
_OFFENDER_V4: Final = bytes(16)                   # struct sockaddr_in, AF_UNSPEC: no offender
_OFFENDER_V6: Final = bytes(28)                   # struct sockaddr_in6


class ExtendedErr(NamedTuple):
    """A decoded ``struct sock_extended_err`` (linux/errqueue.h)."""

    ee_errno: int
    ee_origin: int
    ee_type: int
    ee_code: int
    ee_info: int
    ee_data: int


def parse_extended_err(data: bytes) -> ExtendedErr:
    """Decode the data of an IP_RECVERR / IPV6_RECVERR control message."""
    err, origin, kind, code, _pad, info, value = _EE.unpack_from(data)
    return ExtendedErr(err, origin, kind, code, info, value)


def recv_errqueue(sock: Socket, ancbufsize: int,
                  bufsize: int = 0) -> tuple[bytes, list[tuple[int, int, bytes]], int, None]:
    """One error-queue entry as ``socket.recvmsg`` returns it (the caller checked the socket is
    open); EAGAIN when there is none."""
    with sock.host.driver.lock:
        conn = sock.connection
        queue = conn.errqueue if conn is not None else None
        entry = queue.pop() if queue is not None else None
        report_time = (queue is not None and queue.tstamp is not None and queue.tstamp.report_software)
    if entry is None:
        raise os_error(errno.EAGAIN, "the error queue is empty")
    cmsgs: list[tuple[int, int, bytes]] = []
    if entry.origin == SO_EE_ORIGIN_TIMESTAMPING and report_time and entry.tstamp is not None:
        sec = int(entry.tstamp)
        cmsgs.append((SOL_SOCKET, SCM_TIMESTAMPING,
                      _TS3.pack(sec, round((entry.tstamp - sec) * 1e9), 0, 0, 0, 0)))
        if entry.stats:
            cmsgs.append((SOL_SOCKET, SCM_TIMESTAMPING_OPT_STATS, entry.stats))
    v6 = sock.family == AF_INET6
    ee = _EE.pack(entry.errno, entry.origin, entry.type, entry.code, 0, entry.info, entry.data)
    cmsgs.append((IPPROTO_IPV6 if v6 else IPPROTO_IP, IPV6_RECVERR if v6 else IP_RECVERR,
                  ee + (_OFFENDER_V6 if v6 else _OFFENDER_V4)))
    flags = MSG_ERRQUEUE | (MSG_TRUNC if entry.length > bufsize or (entry.length and not entry.stats) else 0)
    out: list[tuple[int, int, bytes]] = []
    room = ancbufsize
    for level, kind, data in cmsgs:     # put_cmsg(): what fits, MSG_CTRUNC for the rest
        need = _pysocket.CMSG_SPACE(len(data))
        if room < _pysocket.CMSG_LEN(len(data)):
            flags |= MSG_CTRUNC
            break
        out.append((level, kind, data))
        room -= need
    data = entry.stats[:bufsize] if entry.stats else b""   # no copy of a packet is kept (see above)
    return data, out, flags, None
