"""Receive timestamps on the socket API (Linux tcp_recv_timestamp): SO_TIMESTAMP (struct
timeval), SO_TIMESTAMPNS (struct timespec) and SO_TIMESTAMPING with SOF_TIMESTAMPING_RX_SOFTWARE
| SOF_TIMESTAMPING_SOFTWARE (struct scm_timestamping), for the last segment a read took from;
in virtual time the stamp is the segment's arrival on the driver's clock."""

from __future__ import annotations

import struct

import pytest

from pair import SocketPair, socket_pair
from usertcp import socket as us
from usertcp.tcp.buffers import RecvBuffer
from usertcp.tcp.timestamping import SOF_TIMESTAMPING_OPT_RX_FILTER, SOF_TIMESTAMPING_RX_SOFTWARE

SOF_SOFTWARE = 1 << 4


@pytest.fixture
def pair() -> SocketPair:
    return socket_pair(seed=7)


def test_recv_buffer_stamps_the_last_chunk_read() -> None:
    buf = RecvBuffer()
    buf.append(memoryview(b"before"), 0.5)      # queued before stamps were asked for
    buf.enable_stamps()
    buf.append(memoryview(b"abc"), 1.0)
    buf.append(memoryview(b"defg"), 2.0)
    assert buf.read(6) == b"before" and buf.last_stamp == -1.0
    assert buf.read(2) == b"ab" and buf.last_stamp == 1.0       # a chunk read in part
    assert buf.peek(0, 3) == b"cde" and buf.last_stamp == 2.0
    assert buf.read(5) == b"cdefg" and buf.last_stamp == 2.0


def test_so_timestamp_and_timestampns(pair: SocketPair) -> None:
    srv, cli = pair.server, pair.client
    assert srv.getsockopt(us.SOL_SOCKET, us.SO_TIMESTAMP) == 0
    srv.setsockopt(us.SOL_SOCKET, us.SO_TIMESTAMP, 1)
    assert srv.getsockopt(us.SOL_SOCKET, us.SO_TIMESTAMP) == 1
    pair.driver.run_for(0.25)
    sent = pair.driver.now()
    cli.send(b"hello")
    data, anc, flags, _ = srv.recvmsg(100, 1024)
    assert data == b"hello" and flags == 0
    (level, kind, raw), = anc
    assert (level, kind) == (us.SOL_SOCKET, us.SO_TIMESTAMP)
    sec, usec = struct.unpack("=qq", raw)
    assert abs(sec + usec / 1e6 - (sent + 0.01)) < 1e-5       # arrival: one link delay later
    # SO_TIMESTAMPNS replaces the timeval by a timespec (sock_set_timestamp).
    srv.setsockopt(us.SOL_SOCKET, us.SO_TIMESTAMPNS, 1)
    assert srv.getsockopt(us.SOL_SOCKET, us.SO_TIMESTAMP) == 0
    cli.send(b"again")
    _data, anc, _flags, _ = srv.recvmsg(100, 1024)
    (level, kind, raw), = anc
    assert (level, kind) == (us.SOL_SOCKET, us.SO_TIMESTAMPNS) and len(raw) == 16
    # Off: no message; and a buffer too short for the header truncates (MSG_CTRUNC).
    srv.setsockopt(us.SOL_SOCKET, us.SO_TIMESTAMPNS, 0)
    cli.send(b"x")
    assert srv.recvmsg(100, 1024)[1] == []
    srv.setsockopt(us.SOL_SOCKET, us.SO_TIMESTAMP, 1)
    cli.send(b"y")
    _data, anc, flags, _ = srv.recvmsg(100, 8)
    assert anc == [] and flags & us.MSG_CTRUNC


def test_so_timestamping_rx_software(pair: SocketPair) -> None:
    srv, cli = pair.server, pair.client
    # SOFTWARE alone reports receive times too (no OPT_RX_FILTER); with the filter, only
    # with RX_SOFTWARE.
    srv.setsockopt(us.SOL_SOCKET, us.SO_TIMESTAMPING, SOF_TIMESTAMPING_RX_SOFTWARE | SOF_SOFTWARE)
    cli.send(b"data")
    _data, anc, _flags, _ = srv.recvmsg(100, 1024)
    (level, kind, raw), = anc
    assert (level, kind) == (us.SOL_SOCKET, us.SO_TIMESTAMPING) and len(raw) == 48
    assert struct.unpack("=qqqqqq", raw)[2:] == (0, 0, 0, 0)
    srv.setsockopt(us.SOL_SOCKET, us.SO_TIMESTAMPING, SOF_SOFTWARE | SOF_TIMESTAMPING_OPT_RX_FILTER)
    cli.send(b"more")
    assert srv.recvmsg(100, 1024)[1] == []
