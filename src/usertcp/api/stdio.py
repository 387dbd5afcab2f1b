"""What the standard library asks of a socket beyond send/recv: files, messages, sendfile.

Each function takes a :class:`usertcp.api.sockets.Socket` and does what CPython's ``socket``
method of the same name does, built only on the socket's public calls:

- :func:`makefile` wraps the socket in ``socket.SocketIO`` and the ``io`` buffers exactly as
  CPython does, so ``http.client``, ``smtplib``, ``ftplib`` and ``socketserver`` read lines
  and write through it; the socket stays open until the last file is closed.
- :func:`sendmsg` / :func:`recvmsg` / :func:`recvmsg_into`: TCP on Linux has no ancillary data
  to send but ``SOL_SOCKET`` controls (none of which usertcp implements: EINVAL, as
  ``sock_cmsg_send`` for an unknown type) and ignores other levels; a receive returns the
  ``TCP_CM_INQ`` control message when ``TCP_INQ`` is on (as Linux, truncated with
  ``MSG_CTRUNC`` to a short buffer; no timestamping), never sets ``MSG_TRUNC`` (a stream), and
  reports no source address (None), as CPython on Linux.
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
    ancdata, msg_flags = _control(sock, ancbufsize)
    return data, ancdata, msg_flags, None


def _control(sock: Socket, ancbufsize: int) -> tuple[list[tuple[int, int, bytes]], int]:
    """The control messages of one receive, fitted to ``ancbufsize`` as Linux put_cmsg() does:
    none and MSG_CTRUNC below a header, a cut-short one and MSG_CTRUNC below its length."""
    if not sock.options.recv_inq:
        return [], 0
    # Linux tcp_recvmsg: with TCP_INQ, a TCP_CM_INQ cmsg after every successful read.
    payload = struct.pack("i", sock.inq_hint())
    if ancbufsize < _CMSG_HDR:
        return [], MSG_CTRUNC
    if ancbufsize < _pysocket.CMSG_LEN(len(payload)):
        return [(IPPROTO_TCP, TCP_CM_INQ, payload[:ancbufsize - _CMSG_HDR])], MSG_CTRUNC
    return [(IPPROTO_TCP, TCP_CM_INQ, payload)], 0


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
    ancdata, msg_flags = _control(sock, ancbufsize)
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
