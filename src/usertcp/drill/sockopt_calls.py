"""The option calls of the drill shim: ``setsockopt``, ``getsockopt``, ``fcntl``, ``ioctl``.

The option values live in :class:`usertcp.api.sockopts.SocketOptions` (SO_SNDBUF / SO_RCVBUF
doubled, options of a listener inherited by its children); this module decodes the script's
arguments and checks the values a call reports.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING, Any

from usertcp.api.ioctl import TCP_IOCTLS, tcp_ioctl
from usertcp.api.sockopts import Effect
from usertcp.drill.ast import Expr
from usertcp.drill.defaults import SYMBOLS
from usertcp.drill.profile import Unsupported
from usertcp.drill.sysargs import ellipsis, option_names, option_value, value
from usertcp.drill.sysbase import Mismatch, SyscallGen, SysError

if TYPE_CHECKING:
    from usertcp.drill.syscalls import Syscalls

__all__ = ["SUPPORTED_SOCKOPTS", "OptionCalls"]

S = SYMBOLS

# (level, optname) pairs the shim implements for setsockopt / getsockopt.
SUPPORTED_SOCKOPTS: frozenset[tuple[str, str]] = frozenset(
    [("SOL_SOCKET", n) for n in ("SO_REUSEADDR", "SO_REUSEPORT", "SO_KEEPALIVE", "SO_SNDBUF", "SO_RCVBUF",
                                 "SO_OOBINLINE", "SO_LINGER", "SO_ERROR", "SO_TYPE", "SO_ACCEPTCONN",
                                 "SO_ZEROCOPY", "SO_TIMESTAMPING", "SO_MARK", "SO_SNDBUFFORCE",
                                 "SO_RCVBUFFORCE")]
    + [(lvl, n) for lvl in ("SOL_TCP", "IPPROTO_TCP") for n in (
        "TCP_NODELAY", "TCP_CORK", "TCP_MAXSEG", "TCP_USER_TIMEOUT", "TCP_KEEPIDLE", "TCP_KEEPINTVL",
        "TCP_KEEPCNT", "TCP_FASTOPEN", "TCP_FASTOPEN_KEY", "TCP_FASTOPEN_CONNECT", "TCP_FASTOPEN_NO_COOKIE",
        "TCP_MD5SIG", "TCP_MD5SIG_EXT", "TCP_NOTSENT_LOWAT", "TCP_INQ", "TCP_SYNCNT")]
    + [(lvl, n) for lvl in ("SOL_IP", "IPPROTO_IP") for n in ("IP_TOS", "IP_MTU_DISCOVER", "IP_FREEBIND")]
)  # fmt: skip

# Options the shim sets but does not read back.
_SET_ONLY = ("TCP_FASTOPEN_KEY", "TCP_MD5SIG", "TCP_MD5SIG_EXT", "SO_LINGER")


class OptionCalls:
    """setsockopt/getsockopt/fcntl/ioctl of one shim."""

    def __init__(self, sys: Syscalls) -> None:
        self.sys = sys

    def sys_setsockopt(self, args: list[Expr]) -> SyscallGen:
        sys = self.sys
        sock = sys.sock(args[0])
        level, name = option_names(args[1], args[2])
        if (level, name) not in SUPPORTED_SOCKOPTS:
            raise Unsupported(f"setsockopt({level}, {name}) not emulated")
        arg = args[3]
        length = value(args[4]) if not ellipsis(args[4]) else 4
        conn = sock.conn
        if name in ("TCP_MD5SIG", "TCP_MD5SIG_EXT") and ellipsis(arg):
            # Our extension: the script's --md5_key for the remote address.
            if sys.host.md5_key is None:
                raise Unsupported("setsockopt(TCP_MD5SIG, ...) needs --md5_key")
            raw: Any = None
        else:
            raw = option_value(name, arg, length)
        try:
            if raw is None:
                sock.options.set_md5_key(sys.host.remote_ip, sys.host.md5_key or b"", None,
                                         conn=conn, listener=sock.listener)
                effect = Effect.NONE
            else:
                effect = sock.options.set(S[level], S[name], raw, conn=conn, listener=sock.listener)
        except OSError as exc:
            raise SysError(exc.errno or errno.EINVAL) from exc
        if effect is Effect.PUSH and conn is not None and conn.is_synchronized:
            conn.output(sys.host.now())   # Linux tcp_push_pending_frames
            sys.host.flush()
        return 0
        yield  # pragma: no cover

    def sys_getsockopt(self, args: list[Expr]) -> SyscallGen:
        sock = self.sys.sock(args[0])
        level, name = option_names(args[1], args[2])
        if (level, name) not in SUPPORTED_SOCKOPTS or name in _SET_ONLY:
            raise Unsupported(f"getsockopt({level}, {name}) not emulated")
        try:
            actual = sock.options.get(S[level], S[name], conn=sock.conn, listener=sock.listener)
        except OSError as exc:
            raise SysError(exc.errno or errno.EINVAL) from exc
        want = args[3]
        if not ellipsis(want):
            expected = value(want)
            if (expected - actual) % (1 << 32):      # an int: [0xffffffff] reads as -1
                raise Mismatch(f"getsockopt({name}) value: expected {expected}, actual {actual}")
        return 0
        yield  # pragma: no cover

    def sys_fcntl(self, args: list[Expr]) -> SyscallGen:
        sock = self.sys.sock(args[0])
        cmd = value(args[1])
        if cmd == S["F_GETFL"]:
            return S["O_RDWR"] | (S["O_NONBLOCK"] if sock.nonblocking else 0)
        if cmd == S["F_SETFL"]:
            sock.nonblocking = bool(value(args[2]) & S["O_NONBLOCK"])
            return 0
        if cmd in (S["F_GETFD"], S["F_SETFD"]):
            return 0
        raise Unsupported(f"fcntl command {cmd} not emulated")
        yield  # pragma: no cover

    def sys_ioctl(self, args: list[Expr]) -> SyscallGen:
        sock = self.sys.sock(args[0])
        req = value(args[1])
        conn = sock.conn
        if req == S["SIOCATMARK"]:
            # tcp_ioctl: the read head is at the urgent mark (tcp/urgent.py).
            actual = int(conn is not None and conn.rx.urgent.at_mark(conn))
        elif req not in TCP_IOCTLS:
            raise Unsupported(f"ioctl request {req:#x} not emulated")
        else:
            try:
                actual = tcp_ioctl(conn, req, listening=sock.listener is not None)
            except OSError as exc:
                raise SysError(exc.errno or errno.EINVAL) from exc
        if not ellipsis(args[2]):
            expected = value(args[2])
            if expected != actual:
                raise Mismatch(f"ioctl value: expected {expected}, actual {actual}")
        return 0
        yield  # pragma: no cover
