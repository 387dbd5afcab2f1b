"""The error queue through the socket API: MSG_ZEROCOPY completions, SO_TIMESTAMPING transmit
timestamps, and TCP_NOTSENT_LOWAT writability (issue 14 points 4-6).

Virtual time on the in-memory network, both ends in this thread: a blocking call or a select
with a timeout runs the simulation forward. The Linux facts asserted here were checked on this
machine's kernel over loopback (MSG_ZEROCOPY without SO_ZEROCOPY is ignored, consecutive
completions merge into one range, SCHED then SND then ACK with the key of the write's last byte,
the errnos of SO_ZEROCOPY / SO_TIMESTAMPING / TCP_NOTSENT_LOWAT).
"""

from __future__ import annotations

import errno
import itertools
import struct

import pytest

from pair import SocketPair, socket_pair
from usertcp import socket as us
from usertcp.api.errqueue import SCM_TIMESTAMPING, parse_extended_err
from usertcp.net.driver import VirtualTimeDriver
from usertcp.net.memnet import Network
from usertcp.tcp.errqueue import SO_EE_CODE_ZEROCOPY_COPIED, SO_EE_ORIGIN_ZEROCOPY, ErrorQueue
from usertcp.tcp.stack import Stack
from usertcp.tcp.timestamping import SCM_TSTAMP_ACK, SCM_TSTAMP_SCHED, SCM_TSTAMP_SND
from usertcp.tcp.tso import size_goal

A, B = "10.0.0.1", "10.0.0.2"
SOF_TX_SOFTWARE, SOF_SOFTWARE, SOF_OPT_ID, SOF_TX_SCHED, SOF_TX_ACK = 1 << 1, 1 << 4, 1 << 7, 1 << 8, 1 << 9
SOF_OPT_TSONLY, SOF_OPT_STATS = 1 << 11, 1 << 12


@pytest.fixture
def pair() -> SocketPair:
    return socket_pair(seed=5)


def _settle(p: SocketPair, seconds: float = 0.1) -> None:
    """Let the simulation run for ``seconds`` of virtual time."""
    p.driver.run_for(seconds)


def _errqueue(sock: us.Socket) -> list[tuple[int, int, bytes]]:
    _data, anc, flags, _addr = sock.recvmsg(0, 1024, us.MSG_ERRQUEUE)
    assert flags & us.MSG_ERRQUEUE
    return anc


def _drain(sock: us.Socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        out += sock.recv(n - len(out))
    return out


def test_zerocopy_completion_once_acked_and_merged(pair: SocketPair) -> None:
    cli = pair.client
    cli.setsockopt(us.SOL_SOCKET, us.SO_ZEROCOPY, 1)
    assert cli.send(b"a" * 4000, us.MSG_ZEROCOPY) == 4000
    with pytest.raises(OSError) as ei:          # not acknowledged yet: nothing completed
        cli.recvmsg(0, 1024, us.MSG_ERRQUEUE)
    assert ei.value.errno == errno.EAGAIN
    assert cli.send(b"b" * 4000, us.MSG_ZEROCOPY) == 4000
    assert _drain(pair.server, 8000) == b"a" * 4000 + b"b" * 4000
    _settle(pair)
    (level, kind, data), = _errqueue(cli)
    assert (level, kind) == (us.IPPROTO_IP, us.IP_RECVERR) and len(data) == 32
    ee = parse_extended_err(data)
    # Both sends in one entry (ids 0..1), and the link copied the payload.
    assert (ee.ee_errno, ee.ee_origin, ee.ee_code, ee.ee_info, ee.ee_data) == \
        (0, SO_EE_ORIGIN_ZEROCOPY, SO_EE_CODE_ZEROCOPY_COPIED, 0, 1)
    with pytest.raises(OSError):
        cli.recvmsg(0, 1024, us.MSG_ERRQUEUE)
    # The next send takes the next id.
    cli.send(b"c" * 10, us.MSG_ZEROCOPY)
    _drain(pair.server, 10)
    _settle(pair)
    ee = parse_extended_err(_errqueue(cli)[0][2])
    assert (ee.ee_info, ee.ee_data) == (2, 2)


def test_zerocopy_keeps_the_buffer_by_reference(pair: SocketPair) -> None:
    """The completion says when the buffer may be reused: until then the stack reads it in place
    (here, bytes that wait for the congestion window leave with what the buffer holds then)."""
    cli = pair.client
    cli.setsockopt(us.SOL_SOCKET, us.SO_ZEROCOPY, 1)
    cli.setblocking(False)
    zc_buf = bytearray(b"z" * 60000)            # more than IW10 segments: part of it waits
    copied_buf = bytearray(b"c" * 60000)
    n = cli.send(zc_buf, us.MSG_ZEROCOPY)
    zc_buf[-100:] = b"Z" * 100                  # written into the pinned buffer before it left
    got = _drain(pair.server, n)
    assert got.endswith(b"Z" * 100)
    _settle(pair)
    assert parse_extended_err(_errqueue(cli)[0][2]).ee_origin == SO_EE_ORIGIN_ZEROCOPY
    m = cli.send(copied_buf)                    # without MSG_ZEROCOPY: copied at send time
    copied_buf[-100:] = b"C" * 100
    assert b"C" not in _drain(pair.server, m)


def test_msg_zerocopy_without_so_zerocopy_is_ignored(pair: SocketPair) -> None:
    cli = pair.client
    assert cli.send(b"x" * 100, us.MSG_ZEROCOPY) == 100
    _drain(pair.server, 100)
    _settle(pair)
    with pytest.raises(OSError) as ei:
        cli.recvmsg(0, 1024, us.MSG_ERRQUEUE)
    assert ei.value.errno == errno.EAGAIN
    assert not cli.connection.errqueue if cli.connection is not None else True


def test_errqueue_makes_the_socket_readable_for_select(pair: SocketPair) -> None:
    cli = pair.client
    cli.setsockopt(us.SOL_SOCKET, us.SO_ZEROCOPY, 1)
    cli.send(b"q" * 100, us.MSG_ZEROCOPY)
    _drain(pair.server, 100)
    readable, _w, _x = us.select([cli], [], [], 1.0)     # EPOLLERR: select reports it readable
    assert readable == [cli]
    _errqueue(cli)
    readable, _w, _x = us.select([cli], [], [], 0)
    assert readable == []


@pytest.mark.parametrize(("name", "value", "err"), [
    ("SO_ZEROCOPY", 2, errno.EINVAL),
    ("SO_ZEROCOPY", -1, errno.EINVAL),
    ("SO_TIMESTAMPING", SOF_OPT_ID, errno.EINVAL),              # OPT_ID on a closed socket
    ("SO_TIMESTAMPING", SOF_OPT_STATS, errno.EINVAL),           # OPT_STATS needs OPT_TSONLY
    ("SO_TIMESTAMPING", 1 << 20, errno.EINVAL),                 # not a flag
    ("SO_TIMESTAMPING", 1 << 16, errno.EINVAL),                 # OPT_ID_TCP needs OPT_ID
])
def test_option_misuse_gets_linux_errnos(name: str, value: int, err: int) -> None:
    sock = us.Host(Stack([A], name="x"), VirtualTimeDriver(Network(seed=1)), name="x").socket()
    with pytest.raises(OSError) as ei:
        sock.setsockopt(us.SOL_SOCKET, getattr(us, name), value)
    assert ei.value.errno == err
    sock.setsockopt(us.SOL_SOCKET, us.SO_TIMESTAMPING, SOF_OPT_STATS | SOF_OPT_TSONLY)
    assert sock.getsockopt(us.SOL_SOCKET, us.SO_TIMESTAMPING) == SOF_OPT_STATS | SOF_OPT_TSONLY


def test_transmit_timestamps_sched_snd_ack_with_byte_keys(pair: SocketPair) -> None:
    cli = pair.client
    flags = SOF_TX_SCHED | SOF_TX_SOFTWARE | SOF_TX_ACK | SOF_SOFTWARE | SOF_OPT_ID
    cli.setsockopt(us.SOL_SOCKET, us.SO_TIMESTAMPING, flags)
    assert cli.getsockopt(us.SOL_SOCKET, us.SO_TIMESTAMPING) == flags
    sent_at = pair.driver.now()
    cli.send(b"w" * 100)
    _drain(pair.server, 100)
    _settle(pair)
    seen = []
    for _ in range(3):
        data, anc, msg_flags, _addr = cli.recvmsg(0, 1024, us.MSG_ERRQUEUE)
        assert data == b"" and msg_flags & us.MSG_TRUNC       # Linux would return the packet
        (lvl_t, kind_t, ts), (lvl_e, kind_e, raw) = anc
        assert (lvl_t, kind_t, len(ts)) == (us.SOL_SOCKET, SCM_TIMESTAMPING, 48)
        assert (lvl_e, kind_e) == (us.IPPROTO_IP, us.IP_RECVERR)
        sec, nsec = struct.unpack_from("=qq", ts)
        ee = parse_extended_err(raw)
        assert ee.ee_errno == errno.ENOMSG and ee.ee_data == 99      # the write's last byte
        seen.append((ee.ee_info, sec + nsec / 1e9))
    assert [kind for kind, _t in seen] == [SCM_TSTAMP_SCHED, SCM_TSTAMP_SND, SCM_TSTAMP_ACK]
    assert seen[0][1] == pytest.approx(sent_at, abs=1e-6)
    assert seen[2][1] == pytest.approx(sent_at + 0.02, abs=1e-3)   # one round trip later


def test_timestamp_keys_count_from_option_time_and_tsonly(pair: SocketPair) -> None:
    cli = pair.client
    cli.send(b"0" * 500)                                # before the option: not counted
    _drain(pair.server, 500)
    _settle(pair)
    cli.setsockopt(us.SOL_SOCKET, us.SO_TIMESTAMPING, SOF_TX_ACK | SOF_OPT_ID | SOF_OPT_TSONLY)
    cli.send(b"1" * 1000)
    cli.send(b"2" * 10)
    _drain(pair.server, 1010)
    _settle(pair)
    keys = []
    for _ in range(2):
        _data, anc, msg_flags, _addr = cli.recvmsg(0, 1024, us.MSG_ERRQUEUE)
        assert not msg_flags & us.MSG_TRUNC             # OPT_TSONLY: no packet copy
        assert len(anc) == 1                            # no SOF_TIMESTAMPING_SOFTWARE: no time
        keys.append(parse_extended_err(anc[0][2]).ee_data)
    assert keys == [999, 1009]


def test_notsent_lowat_limits_writes_and_writability(pair: SocketPair) -> None:
    cli = pair.client
    assert cli.getsockopt(us.IPPROTO_TCP, us.TCP_NOTSENT_LOWAT) == 0
    cli.setsockopt(us.IPPROTO_TCP, us.TCP_NOTSENT_LOWAT, -1)
    assert cli.getsockopt(us.IPPROTO_TCP, us.TCP_NOTSENT_LOWAT) == -1       # stored as u32
    cli.setsockopt(us.IPPROTO_TCP, us.TCP_NOTSENT_LOWAT, 4000)
    cli.setblocking(False)
    n = cli.send(bytes(200000))
    conn = cli.connection
    assert conn is not None
    # tcp_sendmsg_locked: a new skb only while fewer than 4000 bytes are unsent.
    assert conn.unsent_bytes < 4000 + size_goal(conn)
    assert n < 100000
    _r, writable, _x = us.select([], [cli], [], 0)
    assert writable == []                               # unsent >= lowat/2: no POLLOUT
    _drain(pair.server, n)                             # the peer reads: ACKs open the window
    _r, writable, _x = us.select([], [cli], [], 1.0)
    assert writable == [cli] and conn.unsent_bytes * 2 < 4000


def test_error_queue_merges_only_consecutive_zerocopy_ranges() -> None:
    stack = Stack([A], name="t")
    conn = stack.create_connection(B, 80)
    q = ErrorQueue(conn)
    wakes: list[int] = []
    conn.wait_entries.append(wakes.append)
    q.push_zerocopy(0, 1, True)
    q.push_zerocopy(1, 2, True)          # 1..2 follows 0: one entry 0..2
    q.push_zerocopy(5, 1, True)          # a gap: a new entry
    q.push_timestamp(SCM_TSTAMP_SND, 7, 1.5, 0)
    q.push_zerocopy(6, 1, True)          # the tail is a timestamp: no merge across it
    got = [(e.origin, e.info, e.data) for e in iter(q.pop, None)]
    assert got == [(SO_EE_ORIGIN_ZEROCOPY, 0, 2), (SO_EE_ORIGIN_ZEROCOPY, 5, 5), (4, SCM_TSTAMP_SND, 7),
                   (SO_EE_ORIGIN_ZEROCOPY, 6, 6)]
    assert len(wakes) == 5 and all(k == 8 for k in wakes)     # each one an EPOLLERR wake-up


def test_sendall_zerocopy_takes_ids_for_what_it_queued(pair: SocketPair) -> None:
    cli = pair.client
    cli.setsockopt(us.SOL_SOCKET, us.SO_ZEROCOPY, 1)
    cli.sendall(bytearray(300000), us.MSG_ZEROCOPY)     # waits for space: several sends
    _drain(pair.server, 300000)
    _settle(pair)
    conn = cli.connection
    assert conn is not None and conn.errqueue is not None and conn.errqueue.zerocopy is not None
    taken = conn.errqueue.zerocopy.next_id
    assert taken >= 2                                   # more than one send() call queued bytes
    ranges = []
    while True:
        try:
            ee = parse_extended_err(_errqueue(cli)[0][2])
        except BlockingIOError:
            break
        ranges.append((ee.ee_info, ee.ee_data))
    # Every id completed once, in order (merged where consecutive: here into one range).
    assert ranges[0][0] == 0 and ranges[-1][1] == taken - 1
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(ranges))
