"""Linux numbers of the socket API (families, types, levels, options, flags), in one place.

Linux values throughout, so code written against Linux reads the same on any platform;
both :mod:`usertcp.api.sockets` and the packetdrill shim use them.
"""

from __future__ import annotations

import os
import socket as _pysocket
from enum import IntEnum
from typing import Final

import usertcp

__all__ = [
    "AF_INET",
    "AF_INET6",
    "IPPROTO_IP",
    "IPPROTO_IPV6",
    "IPPROTO_TCP",
    "IPV6_MTU",
    "IPV6_MTU_DISCOVER",
    "IPV6_RECVERR",
    "IP_FREEBIND",
    "IP_MTU",
    "IP_MTU_DISCOVER",
    "IP_PMTUDISC_DO",
    "IP_PMTUDISC_DONT",
    "IP_PMTUDISC_PROBE",
    "IP_PMTUDISC_WANT",
    "IP_RECVERR",
    "IP_TOS",
    "MSG_CTRUNC",
    "MSG_DONTWAIT",
    "MSG_EOR",
    "MSG_ERRQUEUE",
    "MSG_FASTOPEN",
    "MSG_MORE",
    "MSG_NOSIGNAL",
    "MSG_OOB",
    "MSG_PEEK",
    "MSG_PRELOAD",
    "MSG_TRUNC",
    "MSG_WAITALL",
    "MSG_ZEROCOPY",
    "SHUT_RD",
    "SHUT_RDWR",
    "SHUT_WR",
    "SOCK_CLOEXEC",
    "SOCK_DGRAM",
    "SOCK_NONBLOCK",
    "SOCK_RAW",
    "SOCK_STREAM",
    "SOL_SOCKET",
    "SO_ACCEPTCONN",
    "SO_ERROR",
    "SO_KEEPALIVE",
    "SO_LINGER",
    "SO_MARK",
    "SO_OOBINLINE",
    "SO_RCVBUF",
    "SO_RCVBUFFORCE",
    "SO_REUSEADDR",
    "SO_REUSEPORT",
    "SO_SNDBUF",
    "SO_SNDBUFFORCE",
    "SO_TIMESTAMP",
    "SO_TIMESTAMPING",
    "SO_TIMESTAMPNS",
    "SO_TYPE",
    "SO_ZEROCOPY",
    "TCP_CM_INQ",
    "TCP_CONGESTION",
    "TCP_CORK",
    "TCP_FASTOPEN",
    "TCP_FASTOPEN_CONNECT",
    "TCP_FASTOPEN_KEY",
    "TCP_FASTOPEN_NO_COOKIE",
    "TCP_INFO",
    "TCP_INQ",
    "TCP_KEEPCNT",
    "TCP_KEEPIDLE",
    "TCP_KEEPINTVL",
    "TCP_MAXSEG",
    "TCP_MD5SIG",
    "TCP_MD5SIG_EXT",
    "TCP_NODELAY",
    "TCP_NOTSENT_LOWAT",
    "TCP_PRELOAD",
    "TCP_SYNCNT",
    "TCP_USER_TIMEOUT",
    "AddressFamily",
    "SocketKind",
    "error",
    "gaierror",
    "has_ipv6",
    "herror",
    "os_error",
    "timeout",
]


class AddressFamily(IntEnum):
    AF_INET = 2
    AF_INET6 = 10


class SocketKind(IntEnum):
    SOCK_STREAM = 1
    SOCK_DGRAM = 2
    SOCK_RAW = 3


# Linux numbers throughout, so code written against Linux reads the same on any platform.
AF_INET: Final = AddressFamily.AF_INET
AF_INET6: Final = AddressFamily.AF_INET6
SOCK_STREAM: Final = SocketKind.SOCK_STREAM
SOCK_DGRAM: Final = SocketKind.SOCK_DGRAM
SOCK_RAW: Final = SocketKind.SOCK_RAW
SOCK_NONBLOCK: Final = 0o4000
SOCK_CLOEXEC: Final = 0o2000000
IPPROTO_IP: Final = 0
IPPROTO_TCP: Final = 6
IPPROTO_IPV6: Final = 41
SOL_SOCKET: Final = 1

SO_REUSEADDR: Final = 2
SO_TYPE: Final = 3
SO_ERROR: Final = 4
SO_SNDBUF: Final = 7
SO_RCVBUF: Final = 8
SO_KEEPALIVE: Final = 9
SO_LINGER: Final = 13
SO_REUSEPORT: Final = 15
SO_SNDBUFFORCE: Final = 32
SO_RCVBUFFORCE: Final = 33
SO_ACCEPTCONN: Final = 30
SO_OOBINLINE: Final = 10       # the urgent byte stays in the stream (tcp/urgent.py)
SO_MARK: Final = 36            # the routing mark (fwmark): stored, no policy routing here
SO_TIMESTAMP: Final = 29       # receive timestamps (struct timeval) on recvmsg; also SCM_TIMESTAMP
SO_TIMESTAMPNS: Final = 35     # receive timestamps (struct timespec); also SCM_TIMESTAMPNS
SO_TIMESTAMPING: Final = 37    # transmit timestamps on the error queue (usertcp.tcp.timestamping)
SO_ZEROCOPY: Final = 60        # allow MSG_ZEROCOPY (usertcp.tcp.zerocopy)

TCP_NODELAY: Final = 1
TCP_MAXSEG: Final = 2
TCP_CORK: Final = 3
TCP_KEEPIDLE: Final = 4
TCP_KEEPINTVL: Final = 5
TCP_KEEPCNT: Final = 6
TCP_INFO: Final = 11
TCP_CONGESTION: Final = 13
TCP_USER_TIMEOUT: Final = 18
TCP_SYNCNT: Final = 7
TCP_MD5SIG: Final = 14
TCP_FASTOPEN: Final = 23
TCP_NOTSENT_LOWAT: Final = 25
TCP_FASTOPEN_CONNECT: Final = 30
TCP_FASTOPEN_KEY: Final = 33
TCP_FASTOPEN_NO_COOKIE: Final = 34
TCP_MD5SIG_EXT: Final = 32
TCP_INQ: Final = 36
TCP_PRELOAD: Final = usertcp.TCP_PRELOAD   # usertcp only: replace/clear/read a listener's preload
TCP_CM_INQ: Final = TCP_INQ      # the cmsg type TCP_INQ adds to recvmsg
# IP-level options TCP honours (Linux values): path-MTU discovery mode, hard ICMP errors, MTU.
IP_TOS: Final = 1
IP_FREEBIND: Final = 15
IP_MTU_DISCOVER: Final = 10
IP_RECVERR: Final = 11
IP_MTU: Final = 14
IPV6_MTU_DISCOVER: Final = 23
IPV6_MTU: Final = 24
IPV6_RECVERR: Final = 25
IP_PMTUDISC_DONT: Final = 0
IP_PMTUDISC_WANT: Final = 1
IP_PMTUDISC_DO: Final = 2
IP_PMTUDISC_PROBE: Final = 3

MSG_OOB: Final = 0x1
MSG_PEEK: Final = 0x2
MSG_CTRUNC: Final = 0x8
MSG_TRUNC: Final = 0x20
MSG_DONTWAIT: Final = 0x40
MSG_EOR: Final = 0x80
MSG_WAITALL: Final = 0x100
MSG_ERRQUEUE: Final = 0x2000
MSG_NOSIGNAL: Final = 0x4000
MSG_MORE: Final = 0x8000
MSG_ZEROCOPY: Final = 0x4000000
MSG_FASTOPEN: Final = usertcp.MSG_FASTOPEN
MSG_PRELOAD: Final = usertcp.MSG_PRELOAD

SHUT_RD: Final = 0
SHUT_WR: Final = 1
SHUT_RDWR: Final = 2

has_ipv6: Final = True
error = OSError
timeout = TimeoutError
gaierror = _pysocket.gaierror
herror = _pysocket.herror


def os_error(code: int, detail: str | None = None) -> OSError:
    """``OSError(code, ...)``: instantiates the matching subclass (BrokenPipeError, ...)."""
    return OSError(code, detail or os.strerror(code))
