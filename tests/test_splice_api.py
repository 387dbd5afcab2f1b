"""splice(2) through the socket API (issue 14 point 7): a usertcp socket at one end, a real pipe
at the other. The Linux facts asserted here were checked with os.splice on this machine's kernel
over a kernel TCP socket: EPIPE for a pipe into an unconnected socket (the pipe keeps its bytes),
ENOTCONN out of one, EINVAL for a non-pipe end or unknown flags, EBADF for a pipe end of the
wrong direction, EAGAIN when a non-blocking call has nothing to move."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator

import pytest

from pair import SocketPair, socket_pair
from usertcp import socket as us


@pytest.fixture
def pair() -> SocketPair:
    return socket_pair(seed=3)


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        with contextlib.suppress(OSError):
            os.close(fd)


def test_received_bytes_move_into_the_pipe_then_eof(pair: SocketPair, pipe: tuple[int, int]) -> None:
    r, w = pipe
    data = bytes(range(256)) * 40
    pair.server.sendall(data)
    got = b""
    while len(got) < len(data):
        n = us.splice(pair.client, w, len(data))      # blocks until something arrived
        assert n > 0
        got += os.read(r, n)
    assert got == data
    pair.server.close()
    assert us.splice(pair.client, w, 100) == 0          # EOF


def test_socket_to_pipe_moves_at_most_what_the_pipe_holds(pair: SocketPair, pipe: tuple[int, int]) -> None:
    r, w = pipe
    pair.server.sendall(bytes(200_000))
    pair.driver.run_for(0.5)
    moved = us.splice(pair.client, w, 200_000)
    assert 0 < moved <= 65536                           # the default pipe: 16 pages
    with pytest.raises(BlockingIOError):                # full pipe, may not wait: EAGAIN
        us.splice(pair.client, w, 200_000, us.SPLICE_F_NONBLOCK)
    assert len(os.read(r, 1 << 20)) == moved
    assert pair.client.recv(1 << 20, us.MSG_DONTWAIT)   # what the pipe did not take stayed


def test_nonblocking_splice_without_data_is_eagain(pair: SocketPair, pipe: tuple[int, int]) -> None:
    _r, w = pipe
    with pytest.raises(BlockingIOError):
        us.splice(pair.client, w, 100, us.SPLICE_F_NONBLOCK)
    pair.client.setblocking(False)
    with pytest.raises(BlockingIOError):
        us.splice(pair.client, w, 100)


def test_pipe_bytes_are_sent_and_an_empty_pipe_without_writer_is_eof(pair: SocketPair,
                                                                     pipe: tuple[int, int]) -> None:
    r, w = pipe
    os.write(w, b"hello splice")
    assert us.splice(r, pair.client, 5) == 5
    assert us.splice(r, pair.client, 100, us.SPLICE_F_MORE) == 7
    got = b""
    while len(got) < 12:
        got += pair.server.recv(100)
    assert got == b"hello splice"
    with pytest.raises(BlockingIOError):                # empty, a writer left: EAGAIN
        us.splice(r, pair.client, 100, us.SPLICE_F_NONBLOCK)
    os.close(w)
    assert us.splice(r, pair.client, 100) == 0


def test_nonblocking_splice_takes_only_what_the_socket_can_queue(pair: SocketPair,
                                                                 pipe: tuple[int, int]) -> None:
    r, w = pipe
    pair.client.setblocking(False)
    conn = pair.client.connection
    assert conn is not None
    os.set_blocking(w, False)
    written = spliced = 0
    while conn.send_space > 0:                          # the peer never reads: fill the buffer
        with contextlib.suppress(BlockingIOError):
            written += os.write(w, bytes(65536))
        spliced += us.splice(r, pair.client, 65536)
        pair.driver.run_for(0.05)
    with pytest.raises(BlockingIOError):                # no send room: EAGAIN, pipe untouched
        us.splice(r, pair.client, 65536)
    left = len(os.read(r, 1 << 20))
    assert left > 0 and spliced + left == written       # nothing lost between pipe and socket
    got = 0
    while got < spliced:                                # and the socket sent all it took
        got += len(pair.server.recv(1 << 20))
    assert got == spliced


def test_misuse_gets_linux_errnos(pair: SocketPair, pipe: tuple[int, int],
                                  tmp_path: os.PathLike[str]) -> None:
    r, w = pipe
    with open(os.path.join(tmp_path, "f"), "wb") as f:
        with pytest.raises(OSError) as exc:
            us.splice(pair.client, f.fileno(), 10)      # neither end a pipe
        assert exc.value.errno == errno.EINVAL
    for args in ((pair.client, pair.server, 10, 0), (pair.client, w, 10, 0x100)):
        with pytest.raises(OSError) as exc:
            us.splice(*args)
        assert exc.value.errno == errno.EINVAL
    with pytest.raises(OSError) as exc:
        us.splice(pair.client, r, 10)                   # the read end as destination
    assert exc.value.errno == errno.EBADF
    fresh = pair.host.socket()
    os.write(w, b"abc")
    with pytest.raises(OSError) as exc:
        us.splice(r, fresh, 3)
    assert exc.value.errno == errno.EPIPE and os.read(r, 10) == b"abc"
    with pytest.raises(OSError) as exc:
        us.splice(fresh, w, 3)
    assert exc.value.errno == errno.ENOTCONN
    assert us.splice(pair.client, w, 0) == 0
