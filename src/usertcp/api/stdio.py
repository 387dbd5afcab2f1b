"""What the standard library asks of a socket beyond send/recv: files, messages, sendfile.

Each function takes a :class:`usertcp.api.sockets.Socket` and does what CPython's ``socket``
method of the same name does, built only on the socket's public calls:

- :func:`makefile` wraps the socket in ``socket.SocketIO`` and the ``io`` buffers exactly as
  CPython does, so ``http.client``, ``smtplib``, ``ftplib`` and ``socketserver`` read lines
  and write through it; the socket stays open until the last file is closed.
- :func:`sendmsg` / :func:`recvmsg` / :func:`recvmsg_into`: TCP on Linux has no ancillary data
  to send but ``SOL_SOCKET`` controls (none of which usertcp implements: EINVAL, as
  ``sock_cmsg_send`` for an unknown type) and ignores other levels; a receive returns the
  receive timestamps of the last segment read (``SO_TIMESTAMP``: ``struct timeval``,
  ``SO_TIMESTAMPNS``: ``struct timespec``, ``SO_TIMESTAMPING`` with ``SOF_TIMESTAMPING_SOFTWARE``:
  ``struct scm_timestamping``; Linux tcp_recv_timestamp, the times on the host driver's clock)
  and then the ``TCP_CM_INQ`` control message when ``TCP_INQ`` is on (as Linux, truncated with
  ``MSG_CTRUNC`` to a short buffer), never sets ``MSG_TRUNC`` (a stream), and reports no source
  address (None), as CPython on Linux.
- :func:`sendfile` reads the file and sends it, as CPython's fallback for sockets without a
  kernel descriptor does.
"""

from __future__ import annotations

import errno
import io
import os
import socket as _pysocket
import struct
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, BinaryIO

from usertcp.api.constants import IPPROTO_TCP, MSG_CTRUNC, SOL_SOCKET, TCP_CM_INQ, os_error
from usertcp.api.sockopts import as_bytes_view
from usertcp.tcp.timestamping import SO_TIMESTAMP_OLD, SO_TIMESTAMPNS_OLD, recv_timestamps

if TYPE_CHECKING:
    from usertcp.api.sockets import Socket

__all__ = ["makefile", "recvmsg", "recvmsg_into", "sendfile", "sendmsg"]

_SENDFILE_CHUNK = 65536
_CMSG_HDR = _pysocket.CMSG_LEN(0)      # sizeof(struct cmsghdr)


def makefile(sock: Socket, mode: str = "r", buffering: int | None = None, *,
             encoding: str | None = None, errors: str | None = None,
             newline: str | None = None) -> Any:
    """A file object on ``sock``, as :meth:`socket.socket.makefile`."""
    if not set(mode) <= {"r", "w", "b"}:
        raise ValueError(f"invalid mode {mode!r} (only r, w, b allowed)")
    writing = "w" in mode
    reading = "r" in mode or not writing
    binary = "b" in mode
    rawmode = ("r" if reading else "") + ("w" if writing else "")
    # SocketIO only calls recv_into/send/fileno and _decref_socketios on the socket.
    raw = _pysocket.SocketIO(sock, rawmode)  # type: ignore[arg-type]
    sock.add_io_ref()
    if buffering is None or buffering < 0:
        buffering = io.DEFAULT_BUFFER_SIZE
    if buffering == 0:
        if not binary:
            raise ValueError("unbuffered streams must be binary")
        return raw
    buffer: io.BufferedIOBase
    if reading and writing:
        buffer = io.BufferedRWPair(raw, raw, buffering)
    elif reading:
        buffer = io.BufferedReader(raw, buffering)
    else:
        buffer = io.BufferedWriter(raw, buffering)
    if binary:
        return buffer
    text = io.TextIOWrapper(buffer, io.text_encoding(encoding), errors, newline)  # type: ignore[type-var]
    text.mode = mode  # type: ignore[misc]
    return text


def _check_ancdata(ancdata: Iterable[tuple[int, int, Any]]) -> None:
    for item in ancdata:
        if len(item) != 3:
            raise TypeError("ancillary data items must be (level, type, data) tuples")
        level, _kind, data = item
        as_bytes_view(data)
        if level == SOL_SOCKET:
            # Linux tcp_sendmsg -> sock_cmsg_send: SOL_SOCKET controls usertcp has none of.
            raise os_error(errno.EINVAL, "unsupported SOL_SOCKET control message")


def sendmsg(sock: Socket, buffers: Iterable[Any], ancdata: Iterable[tuple[int, int, Any]] = (),
            flags: int = 0, address: Any = None) -> int:
    """Send the concatenated ``buffers``; the count sent (a short count as ``send``)."""
    views = [as_bytes_view(b) for b in buffers]
    _check_ancdata(list(ancdata))
    if address is not None:
        # Linux TCP ignores msg_name on a connected socket; unconnected, it is EPIPE anyway.
        sock.getsockname()
    data = views[0] if len(views) == 1 else b"".join(views)
    return sock.send(data, flags)


def recvmsg(sock: Socket, bufsize: int, ancbufsize: int = 0,
            flags: int = 0) -> tuple[bytes, list[tuple[int, int, bytes]], int, None]:
    """(data, ancdata, msg_flags, address) as :meth:`socket.socket.recvmsg` on Linux TCP."""
    if bufsize < 0:
        raise ValueError("negative buffer size in recvmsg()")
    if ancbufsize < 0:
        raise ValueError("negative ancillary buffer size in recvmsg()")
    data = sock.recv(bufsize, flags)
    ancdata, msg_flags = _control(sock, ancbufsize, len(data) > 0)
    return data, ancdata, msg_flags, None


_TIMEVAL = struct.Struct("=qq")        # struct __kernel_old_timeval (64-bit)
_TIMESPEC = struct.Struct("=qq")       # struct __kernel_old_timespec
_TS3 = struct.Struct("=qqqqqq")        # struct scm_timestamping


def _stamp_cmsgs(sock: Socket) -> list[tuple[int, int, bytes]]:
    """Linux tcp_recv_timestamp(): the receive timestamps of the last segment read."""
    conn = sock.connection
    if conn is None:
        return []
    opts = sock.options
    stamp = conn.rcv_buf.last_stamp
    sec = int(stamp)
    nsec = min(round((stamp - sec) * 1e9), 999_999_999)
    out: list[tuple[int, int, bytes]] = []
    for kind in recv_timestamps(stamp, opts.rcvtstamp, opts.rcvtstampns, opts.tsflags):
        if kind == SO_TIMESTAMP_OLD:
            out.append((SOL_SOCKET, kind, _TIMEVAL.pack(sec, nsec // 1000)))
        elif kind == SO_TIMESTAMPNS_OLD:
            out.append((SOL_SOCKET, kind, _TIMESPEC.pack(sec, nsec)))
        else:
            out.append((SOL_SOCKET, kind, _TS3.pack(sec, nsec, 0, 0, 0, 0)))
    return out


def _control(sock: Socket, ancbufsize: int, read: bool) -> tuple[list[tuple[int, int, bytes]], int]:
    """The control messages of one receive (timestamps once data was read, then TCP_CM_INQ),
    fitted to ``ancbufsize`` as Linux put_cmsg() does: none and MSG_CTRUNC below a header, a
    cut-short one and MSG_CTRUNC below its length."""
    cmsgs = _stamp_cmsgs(sock) if read else []
    if sock.options.recv_inq:
        # Linux tcp_recvmsg: with TCP_INQ, a TCP_CM_INQ cmsg after every successful read.
        cmsgs.append((IPPROTO_TCP, TCP_CM_INQ, struct.pack("i", sock.inq_hint())))
    out: list[tuple[int, int, bytes]] = []
    room = ancbufsize
    for level, kind, payload in cmsgs:
        if room < _CMSG_HDR:
            return out, MSG_CTRUNC
        if room < _pysocket.CMSG_LEN(len(payload)):
            out.append((level, kind, payload[:room - _CMSG_HDR]))
            return out, MSG_CTRUNC
        out.append((level, kind, payload))
        room -= _pysocket.CMSG_SPACE(len(payload))
    return out, 0


def recvmsg_into(sock: Socket, buffers: Iterable[Any], ancbufsize: int = 0,
                 flags: int = 0) -> tuple[int, list[tuple[int, int, bytes]], int, None]:
    """Scatter one receive over ``buffers`` (a single ``recv`` of their total size)."""
    views = [as_bytes_view(b) for b in buffers]
    if any(v.readonly for v in views):
        raise TypeError("recvmsg_into() argument 1 must be an iterable of writable buffers")
    if ancbufsize < 0:
        raise ValueError("negative ancillary buffer size in recvmsg_into()")
    data = sock.recv(sum(len(v) for v in views), flags)
    pos = 0
    for v in views:
        take = min(len(v), len(data) - pos)
        v[:take] = data[pos:pos + take]
        pos += take
    ancdata, msg_flags = _control(sock, ancbufsize, len(data) > 0)
    return len(data), ancdata, msg_flags, None


def sendfile(sock: Socket, file: BinaryIO, offset: int = 0, count: int | None = None) -> int:
    """Send ``count`` bytes (all when None) of ``file`` from ``offset``; the bytes sent.

    As CPython: only blocking sockets, binary files; the file position ends after the last
    byte sent.
    """
    if "b" not in getattr(file, "mode", "b"):
        raise ValueError("file should be opened in binary mode")
    if not sock.getblocking():
        raise ValueError("non-blocking sockets are not supported")
    if count is not None:           # as CPython's _check_sendfile_params
        if not isinstance(count, int):
            raise TypeError(f"count must be a positive integer (got {count!r})")
        if count <= 0:
            raise ValueError(f"count must be a positive integer (got {count!r})")
    if offset:
        file.seek(offset)
    total = 0
    try:
        while count is None or total < count:
            want = _SENDFILE_CHUNK if count is None else min(_SENDFILE_CHUNK, count - total)
            chunk = file.read(want)
            if not chunk:
                break
            sock.sendall(chunk)
            total += len(chunk)
    finally:
        if total > 0 and hasattr(file, "seek"):
            file.seek(offset + total, os.SEEK_SET)
    return total
