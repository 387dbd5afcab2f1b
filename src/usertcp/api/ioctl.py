"""The TCP ioctls with Linux semantics (net/ipv4/tcp.c tcp_ioctl): one home for the socket API
and the packetdrill shim.

- ``SIOCINQ`` (= ``FIONREAD``): bytes the application can read (tcp_inq: none before the
  handshake completes, a received FIN is not a byte).
- ``SIOCOUTQ``: bytes not yet acknowledged (``write_seq - snd_una``: a queued FIN counts one,
  as Linux's tcp_send_fin advances write_seq), ``SIOCOUTQNSD``: bytes not yet sent
  (``write_seq - snd_nxt``); both 0 during the handshake.
- A listening socket answers ``EINVAL`` to all three.
"""

from __future__ import annotations

import errno
from typing import Final

from usertcp.api.constants import os_error
from usertcp.tcp.connection import Connection, State

__all__ = ["SIOCINQ", "SIOCOUTQ", "SIOCOUTQNSD", "TCP_IOCTLS", "tcp_ioctl"]

SIOCINQ: Final = 0x541B        # = FIONREAD (asm-generic/ioctls.h)
SIOCOUTQ: Final = 0x5411       # = TIOCOUTQ
SIOCOUTQNSD: Final = 0x894B    # linux/sockios.h
TCP_IOCTLS: Final = frozenset((SIOCINQ, SIOCOUTQ, SIOCOUTQNSD))


def _write_seq(conn: Connection) -> int:
    """Linux tp->write_seq as an offset from our ISN: the SYN, the data, a queued FIN."""
    return conn.snd_buf.end + 1 + (1 if conn.fin_queued else 0)


def tcp_ioctl(conn: Connection | None, request: int, *, listening: bool = False) -> int:
    """The answer of ``request`` for a TCP socket (``conn`` None: never connected)."""
    if request not in TCP_IOCTLS:
        raise os_error(errno.ENOTTY)
    if listening:
        raise os_error(errno.EINVAL)
    if conn is None:
        return 0
    if request == SIOCINQ:
        return conn.rx.inq()
    if conn.state is State.SYN_SENT or conn.state is State.SYN_RECEIVED:
        return 0
    una = conn.snd_una if request == SIOCOUTQ else conn.snd_nxt
    return max(_write_seq(conn) - una, 0)
