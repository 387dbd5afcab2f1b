"""Files, pipes, ``sendfile`` and ``splice`` in the drill shim.

``open()`` reads a file of the script's scratch file system (what its commands made: ``dd`` and
``rm`` in :class:`usertcp.drill.profile.Environment`), else the real file read-only. A pipe is
a byte FIFO with Linux's default capacity (16 pages). ``sendfile(out, in, [offset], count)``
sends file bytes into a TCP socket as a ``write`` of them would (Linux ``do_sendfile`` ->
``splice`` into the socket: ``tcp_sendmsg_locked`` with the pages), advancing the offset it
is given or the file position. ``splice(sock, NULL, pipe, NULL, len, flags)`` moves received
bytes into a pipe (Linux ``tcp_splice_read`` over ``tcp_read_sock``): it returns what it moved,
0 at EOF, EAGAIN on a non-blocking socket or with SPLICE_F_NONBLOCK, and otherwise waits for
data. Like Linux it stops at the urgent mark (``__tcp_read_sock``): at the mark it moves nothing
and returns 0 (the core keeps the mark, :mod:`usertcp.tcp.urgent`).
"""

from __future__ import annotations

import errno
from collections import deque
from typing import TYPE_CHECKING, Final

from usertcp.drill.ast import Expr, List, String
from usertcp.drill.defaults import SYMBOLS
from usertcp.drill.profile import Unsupported
from usertcp.drill.sysargs import value
from usertcp.drill.sysbase import SyscallGen, SysError

if TYPE_CHECKING:
    from usertcp.drill.syscalls import Syscalls

__all__ = ["FileCalls", "OpenFile", "Pipe", "PipeEnd"]

S = SYMBOLS
PIPE_CAPACITY: Final = 16 * 4096      # PIPE_DEF_BUFFERS pages
SPLICE_F_NONBLOCK: Final = 0x02


class OpenFile:
    """A regular file opened read-only: its bytes and position."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0


class Pipe:
    __slots__ = ("buf", "size")

    def __init__(self) -> None:
        self.buf: deque[bytes] = deque()
        self.size = 0


class PipeEnd:
    __slots__ = ("pipe", "writer")

    def __init__(self, pipe: Pipe, writer: bool) -> None:
        self.pipe = pipe
        self.writer = writer


class FileCalls:
    """open/pipe/sendfile/splice of one shim; the objects live in ``Syscalls.files``."""

    def __init__(self, sys: Syscalls) -> None:
        self.sys = sys

    def sys_open(self, args: list[Expr]) -> SyscallGen:
        path_expr = args[0]
        if not isinstance(path_expr, String):
            raise Unsupported("open() needs a path string")
        flags = value(args[1])
        if flags & 3 != S["O_RDONLY"]:
            raise Unsupported("open() for writing is not emulated")
        path = path_expr.value.decode()
        data = self.sys.host.env.files.get(path)
        if data is None:
            try:
                with open(path, "rb") as f:
                    data = f.read(1 << 24)
            except OSError as exc:
                raise SysError(exc.errno or errno.ENOENT) from None
        return self.sys.new_file(OpenFile(data))
        yield  # pragma: no cover

    def sys_pipe(self, args: list[Expr]) -> SyscallGen:
        # packetdrill syscall_pipe: the script's two numbers name the live descriptors.
        want = args[0]
        if not isinstance(want, List) or len(want.items) != 2:
            raise Unsupported("pipe() needs a [read_fd, write_fd] list")
        names = [value(x) for x in want.items]
        pipe = Pipe()
        for writer, name in zip((False, True), names, strict=True):
            self.sys.new_file(PipeEnd(pipe, writer), name)
        return 0
        yield  # pragma: no cover

    sys_pipe2 = sys_pipe

    def sys_sendfile(self, args: list[Expr]) -> SyscallGen:
        out_fd = self.sys.live_fd(args[0])
        sock = self.sys.fds.get(out_fd)
        src = self.sys.files.get(self.sys.live_fd(args[1]))
        if sock is None and out_fd not in self.sys.files:
            raise SysError(errno.EBADF)
        if not isinstance(src, OpenFile):
            raise SysError(errno.EBADF if src is None else errno.EINVAL)
        if sock is None:
            raise SysError(errno.EINVAL)       # the shim writes files nowhere
        offset_expr = args[2]
        use_pos = not isinstance(offset_expr, List)      # NULL: the file position moves
        start = src.pos if use_pos else value(offset_expr)
        count = value(args[3])
        if start < 0 or count < 0:
            raise SysError(errno.EINVAL)
        data = src.data[start:start + count]
        if not data:
            return 0
        n = yield from self.sys.send_bytes(sock, data, 0)
        if use_pos:
            src.pos = start + n
        return n

    def sys_splice(self, args: list[Expr]) -> SyscallGen:
        fd_in, fd_out = self.sys.live_fd(args[0]), self.sys.live_fd(args[2])
        sock = self.sys.fds.get(fd_in)
        out = self.sys.files.get(fd_out)
        if sock is None or not isinstance(out, PipeEnd):
            raise Unsupported("splice() is emulated from a TCP socket into a pipe only")
        if not out.writer:
            raise SysError(errno.EBADF)
        length, flags = value(args[4]), value(args[5])
        nonblocking = sock.nonblocking or bool(flags & SPLICE_F_NONBLOCK)
        while True:
            conn = sock.conn
            if conn is None:
                raise SysError(errno.ENOTCONN)
            room = PIPE_CAPACITY - out.pipe.size
            # __tcp_read_sock stops at the urgent mark (tcp/urgent.py).
            take = conn.rx.urgent.read_sock_limit(conn, min(length, room, conn.readable_bytes))
            if take > 0:
                data = conn.recv(take, self.sys.host.now())
                self.sys.host.flush()
                out.pipe.buf.append(data)
                out.pipe.size += len(data)
                return len(data)
            if conn.readable_bytes:
                # tcp_splice_read: data queued but none may move (no room in the pipe, or the
                # urgent mark at the read head): 0, "we do not want to loop".
                return 0
            if conn.error:
                from usertcp.api.sockopts import take_error
                raise SysError(take_error(conn))
            if conn.fin_received or conn.read_shutdown:
                return 0
            if nonblocking:
                raise SysError(errno.EAGAIN)
            yield None
