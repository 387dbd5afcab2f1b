"""``splice(2)`` between a usertcp socket and a real pipe, as Linux moves bytes.

Linux needs one end of a splice to be a pipe (``do_splice``); the other end here is a usertcp
:class:`~usertcp.api.sockets.Socket` (with neither a usertcp socket, :func:`os.splice` runs):

* socket -> pipe is ``tcp_splice_read``: it moves what has been received, at most ``count``
  bytes and what the pipe has room for, and returns that; 0 at EOF; it waits for data unless
  the socket is non-blocking or ``SPLICE_F_NONBLOCK`` is given (then EAGAIN), and returns the
  socket's error (ENOTCONN on a socket that never connected). Received bytes leave the socket
  only once the pipe took them (a peek, the write, then the read of what was written).
* pipe -> socket is ``splice_to_socket``: it sends what the pipe holds, at most ``count`` bytes,
  as a ``send`` of them would (``SPLICE_F_MORE`` is ``MSG_MORE``); 0 when the pipe is empty and
  has no writer; EAGAIN when it is empty, or the socket has no send room, and the call may not
  wait; EPIPE on a socket that is not connected, the pipe's bytes left in it. Only what the
  socket takes is read from the pipe.

Misuse gets Linux's errnos: EINVAL for unknown flags, for two sockets, for a non-pipe
descriptor, or for an offset with a pipe end (ESPIPE in Linux; offsets are refused here as
Python's ``os.splice`` has them only for files); EBADF for a pipe end of the wrong direction.
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import stat
import struct
import termios
from typing import Final

from usertcp.api.constants import MSG_DONTWAIT, MSG_MORE, MSG_PEEK, os_error
from usertcp.api.sockets import Socket

__all__ = ["SPLICE_F_MORE", "SPLICE_F_MOVE", "SPLICE_F_NONBLOCK", "splice"]

SPLICE_F_MOVE: Final = 0x01
SPLICE_F_NONBLOCK: Final = 0x02
SPLICE_F_MORE: Final = 0x04
_SPLICE_F_ALL: Final = 0x0F           # with SPLICE_F_GIFT (vmsplice only)
_F_GETPIPE_SZ: Final = 1032


def splice(src: Socket | int, dst: Socket | int, count: int, flags: int = 0) -> int:
    """Move up to ``count`` bytes from ``src`` to ``dst`` (one a usertcp socket, the other a
    pipe descriptor); the number moved. See the module docstring."""
    if flags & ~_SPLICE_F_ALL or count < 0:
        raise os_error(errno.EINVAL)
    if not isinstance(src, Socket) and not isinstance(dst, Socket):
        return os.splice(src, dst, count, flags=flags)
    if isinstance(src, Socket) and isinstance(dst, Socket):
        raise os_error(errno.EINVAL, "splice() needs a pipe at one end")
    if isinstance(src, Socket):
        assert isinstance(dst, int)
        _check_pipe(dst, write=True)
        return _socket_to_pipe(src, dst, count, flags) if count else 0
    assert isinstance(src, int) and isinstance(dst, Socket)
    _check_pipe(src, write=False)
    return _pipe_to_socket(src, dst, count, flags) if count else 0


def _check_pipe(fd: int, *, write: bool) -> None:
    """EBADF for a closed descriptor or one open the wrong way, EINVAL for a non-pipe."""
    if not isinstance(fd, int):
        raise TypeError(f"a pipe descriptor must be an int, not {type(fd).__name__}")
    mode = os.fstat(fd).st_mode           # EBADF as the OSError it raises
    if not stat.S_ISFIFO(mode):
        raise os_error(errno.EINVAL, "splice() needs a pipe at one end")
    access = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    if access == (os.O_RDONLY if write else os.O_WRONLY):
        raise os_error(errno.EBADF)


def _pipe_room(fd: int) -> int:
    """Free bytes in the pipe: its size (F_GETPIPE_SZ) less what it holds (FIONREAD)."""
    queued = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    return max(fcntl.fcntl(fd, _F_GETPIPE_SZ) - queued, 0)


def _nonblocking(sock: Socket, fd: int, flags: int) -> bool:
    return bool(flags & SPLICE_F_NONBLOCK) or sock.gettimeout() == 0.0 or not os.get_blocking(fd)


def _socket_to_pipe(sock: Socket, fd: int, count: int, flags: int) -> int:
    """tcp_splice_read into a real pipe."""
    nonblocking = _nonblocking(sock, fd, flags)
    room = _pipe_room(fd)
    if room == 0 and nonblocking:
        raise os_error(errno.EAGAIN)       # splice_file_to_pipe: wait_for_space, non-blocking
    # Waits for data (or EOF, or the socket's error) as a blocking recv does.
    data = sock.recv(min(count, room or select.PIPE_BUF), MSG_PEEK | (MSG_DONTWAIT if nonblocking else 0))
    if not data:
        return 0
    written = os.write(fd, data)           # fits the room measured: does not block
    moved = sock.recv(written)             # the peeked bytes are there: no wait
    assert len(moved) == written
    return written


def _pipe_to_socket(fd: int, sock: Socket, count: int, flags: int) -> int:
    """splice_to_socket from a real pipe: only what the socket takes leaves the pipe."""
    nonblocking = _nonblocking(sock, fd, flags)
    more = MSG_MORE if flags & SPLICE_F_MORE else 0
    # tcp_sendmsg's checks before any byte leaves the pipe: EPIPE unconnected, the socket's
    # error, a wait for the handshake (EAGAIN when it may not wait).
    sock.send(b"", MSG_DONTWAIT if nonblocking else 0)
    conn = sock.connection
    if nonblocking:
        room = conn.send_space if conn is not None else 0
        if room <= 0:
            raise os_error(errno.EAGAIN)       # sk_stream_wait_memory, non-blocking
        count = min(count, room)
        blocking = os.get_blocking(fd)
        os.set_blocking(fd, False)
        try:
            data = os.read(fd, count)      # BlockingIOError (EAGAIN): empty, writers left
        finally:
            os.set_blocking(fd, blocking)
    else:
        data = os.read(fd, count)          # waits for data, or b"" once no writer is left
    if not data:
        return 0
    sock.sendall(data, more)               # within the room measured when non-blocking
    return len(data)
