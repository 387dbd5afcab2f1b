"""The drill shim's shared vocabulary: the socket record, the errors a call raises, and what the
shim needs from the runner.

Every system call of the shim (:mod:`usertcp.drill.syscalls` and the families it dispatches to)
is a generator: it ``yield``\\ s a wake-up deadline (or None) while it would block and returns
the call's result; errors raise :class:`SysError` (the errno), a mismatch of an expected output
value raises :class:`Mismatch`.
"""

from __future__ import annotations

import errno
from collections.abc import Generator
from dataclasses import dataclass
from typing import Protocol

from usertcp.api.sockopts import SocketOptions
from usertcp.drill.profile import Environment
from usertcp.tcp.connection import Connection
from usertcp.tcp.stack import Listener, Stack

__all__ = ["SS_CONNECTED", "SS_CONNECTING", "SS_UNCONNECTED", "Host", "Mismatch", "Sock", "SysError",
           "SyscallGen"]

SyscallGen = Generator[float | None, None, int]

# Linux sock->state of a stream socket (include/uapi/linux/net.h socket_state).
SS_UNCONNECTED, SS_CONNECTING, SS_CONNECTED = 1, 2, 3


class SysError(Exception):
    def __init__(self, err: int, detail: str = "") -> None:
        super().__init__(errno.errorcode.get(err, str(err)) + (f": {detail}" if detail else ""))
        self.errno = err


class Mismatch(Exception):
    """An output value of the call differs from what the script expects."""


class Host(Protocol):
    """What the shim needs from the runner."""

    @property
    def stack(self) -> Stack: ...

    local_ip: str
    remote_ip: str
    mapped: bool       # --ip_version=ipv4-mapped-ipv6: sockets are AF_INET6, the wire IPv4
    bind_port: int
    connect_port: int
    md5_key: bytes | None
    tol_us: int        # the script's timing tolerance (times reported by calls are checked too)
    tol_pct: float
    env: Environment   # the script's commands (its scratch files)

    def now(self) -> float: ...
    def flush(self) -> None: ...
    def on_listen(self, sock: Sock) -> None: ...
    def on_connect(self, sock: Sock) -> None: ...
    def on_accept(self, sock: Sock) -> None: ...


@dataclass(eq=False)
class Sock:
    fd: int
    family: int
    options: SocketOptions  # the socket options, with the socket API's semantics (one home)
    nonblocking: bool = False
    bound: tuple[str, int] | None = None
    listener: Listener | None = None
    conn: Connection | None = None
    deferred_connect: bool = False  # TCP_FASTOPEN_CONNECT: connect() returned, SYN not sent
    sock_state: int = SS_UNCONNECTED  # Linux sock->state (SS_*)
