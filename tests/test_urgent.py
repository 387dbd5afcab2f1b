"""The urgent mark as Linux keeps it (tcp/urgent.py): tcp_check_urg/tcp_urg, reads that stop
at the mark and skip the urgent byte, MSG_OOB, SO_OOBINLINE, POLLPRI, splice stopping at the
mark; through the drill shim and through usertcp.socket."""

from __future__ import annotations

import errno
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from drill_snippets import passive_open
from netns_helpers import namespace_fixture, tun_host
from usertcp import socket as usocket
from usertcp.drill.parser import parse_script
from usertcp.drill.runner import ScriptResult, run_script
from usertcp.net import netns
from usertcp.tcp.stack import Stack

OPEN = passive_open(ack_delay="+0") + "   +0 fcntl(4, F_SETFL, O_RDWR|O_NONBLOCK) = 0\n"


def _run(body: str) -> ScriptResult:
    return run_script(parse_script(OPEN + body, path="<test>"))


def _passes(res: ScriptResult) -> None:
    assert res.status == "passed", f"{res.status} at line {res.line}: {res.reason}\n" + "\n".join(res.details)


def test_read_stops_at_the_mark_and_the_urgent_byte_is_out_of_band() -> None:
    """urg 10 on 1:11 names the 10th byte (BSD reading): 9 bytes read, the 10th only by MSG_OOB."""
    _passes(_run("""\
   +0 < U. 1:11(10) ack 1 win 257 urg 10
   +0 poll([{fd=4, events=POLLIN|POLLPRI, revents=POLLIN|POLLPRI}], 1, 0) = 1
   +0 recv(4, "\\x00", 100, MSG_OOB|MSG_PEEK) = 1
   +0 < P. 11:21(10) ack 1 win 257
   +0 ioctl(4, SIOCATMARK, [0]) = 0
   +0 read(4, ..., 100) = 9
   +0 ioctl(4, SIOCATMARK, [1]) = 0
   +0 ioctl(4, SIOCINQ, [11]) = 0
   +0 recv(4, ..., 100, MSG_OOB) = 1
   +0 recv(4, ..., 100, MSG_OOB) = -1 EINVAL (Invalid argument)
   +0 read(4, ..., 100) = 10
   +0 ioctl(4, SIOCATMARK, [0]) = 0
   +0 read(4, ..., 100) = -1 EAGAIN (Resource temporarily unavailable)
"""))


def test_a_lone_urgent_byte_is_not_readable_and_a_read_skips_it() -> None:
    _passes(_run("""\
   +0 < U. 1:2(1) ack 1 win 257 urg 1
   +0 poll([{fd=4, events=POLLIN|POLLPRI, revents=POLLPRI}], 1, 0) = 1
   +0 read(4, ..., 100) = -1 EAGAIN (Resource temporarily unavailable)
   +0 recv(4, ..., 100, MSG_OOB) = -1 EINVAL (Invalid argument)
"""))


def test_oobinline_keeps_the_byte_in_the_stream_but_reads_still_stop_at_the_mark() -> None:
    _passes(_run("""\
   +0 setsockopt(4, SOL_SOCKET, SO_OOBINLINE, [1], 4) = 0
   +0 getsockopt(4, SOL_SOCKET, SO_OOBINLINE, [1], [4]) = 0
   +0 < U. 1:6(5) ack 1 win 257 urg 3
   +0 < P. 6:11(5) ack 1 win 257
   +0 read(4, ..., 100) = 2
   +0 recv(4, ..., 100, MSG_OOB) = -1 EINVAL (Invalid argument)
   +0 read(4, ..., 100) = 8
"""))


def test_an_accepted_socket_inherits_oobinline() -> None:
    """sk_clone_lock copies the listener's sock flags: SO_OOBINLINE holds on the child."""
    listen = "   +0 listen(3, 1) = 0\n"
    opening = OPEN.replace(listen, "   +0 setsockopt(3, SOL_SOCKET, SO_OOBINLINE, [1], 4) = 0\n" + listen)
    assert opening != OPEN
    res = run_script(parse_script(opening + """\
   +0 getsockopt(4, SOL_SOCKET, SO_OOBINLINE, [1], [4]) = 0
   +0 < U. 1:6(5) ack 1 win 257 urg 3
   +0 read(4, ..., 100) = 2
   +0 read(4, ..., 100) = 3
""", path="<test>"))
    _passes(res)


def test_splice_stops_at_the_mark_and_moves_nothing_there() -> None:
    """tcp_splice_read over __tcp_read_sock: up to the mark, then nothing while the mark is
    held, even once MSG_OOB read the byte: EAGAIN if it may not wait, else 0 (no loop). This
    machine's kernel does the same (os.splice over loopback: 99, EAGAIN, 0, then EAGAIN)."""
    _passes(_run("""\
   +0 pipe([5, 6]) = 0
   +0 < U. 1:101(100) ack 1 win 257 urg 50
   +0 splice(4, NULL, 6, NULL, 100, 0) = 49
   +0 splice(4, NULL, 6, NULL, 100, 0) = -1 EAGAIN (Resource temporarily unavailable)
   +0 fcntl(4, F_SETFL, O_RDWR) = 0
   +0 splice(4, NULL, 6, NULL, 100, 0) = 0
   +0 recv(4, ..., 1, MSG_OOB) = 1
   +0 splice(4, NULL, 6, NULL, 100, 0) = 0
   +0 splice(4, NULL, 6, NULL, 100, SPLICE_F_NONBLOCK) = -1 EAGAIN (Resource temporarily unavailable)
   +0 read(4, ..., 100) = 50
   +0 fcntl(4, F_SETFL, O_RDWR|O_NONBLOCK) = 0
   +0 splice(4, NULL, 6, NULL, 100, 0) = -1 EAGAIN (Resource temporarily unavailable)
"""))


def test_an_old_or_repeated_pointer_is_ignored() -> None:
    """tcp_check_urg: a pointer not past the held one (a retransmitted URG segment) keeps the
    mark; a later one moves it, and the old urgent byte becomes plain data."""
    _passes(_run("""\
   +0 < U. 1:11(10) ack 1 win 257 urg 5
   +0 < U. 1:11(10) ack 1 win 257 urg 5
   +0 > . 1:1(0) ack 11
   +0 read(4, ..., 100) = 4
   +0 < U. 11:21(10) ack 1 win 257 urg 3
   +0 read(4, ..., 100) = 7
   +0 recv(4, "\\x00", 1, MSG_OOB) = 1
   +0 read(4, ..., 100) = 7
"""))


# --------------------------------------------------------------------------- against the kernel

@pytest.fixture
def ns() -> Iterator[str]:
    yield from namespace_fixture()


PEER, PEER_CIDR, US = "10.77.0.1", "10.77.0.1/24", "10.77.0.2"
PORT = 7799


def _reads(sock: Any, inline: bool) -> list[bytes | int]:
    """The reads the test compares: MSG_OOB first, then the stream (errnos as ints)."""
    out: list[bytes | int] = []

    def attempt(n: int, flags: int) -> None:
        try:
            out.append(sock.recv(n, flags))
        except OSError as exc:
            out.append(exc.errno or 0)

    attempt(1, socket.MSG_OOB)
    attempt(100, 0)
    attempt(100, 0)
    attempt(1, socket.MSG_OOB)
    return out


def _kernel_sender(server: socket.socket) -> None:
    """Every connection gets "abc", the urgent "X" (MSG_OOB), then "def" (Nagle off)."""
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.sendall(b"abc")
            conn.send(b"X", socket.MSG_OOB)
            conn.sendall(b"def")
            conn.recv(1)                 # until the reader closes


def _kernel_reader(inline: bool) -> list[bytes | int]:
    """This machine's kernel as the receiver (over loopback in the namespace)."""
    with socket.create_connection((PEER, PORT), timeout=5) as c:
        c.settimeout(None)               # Python's timeout mode would poll before recv(MSG_OOB)
        if inline:
            c.setsockopt(socket.SOL_SOCKET, socket.SO_OOBINLINE, 1)
        time.sleep(0.3)                  # all of it has arrived
        return _reads(c, inline)


@pytest.mark.netns
def test_usertcp_socket_reads_urgent_data_as_the_kernel_does(ns: str) -> None:
    """The kernel sends "abc", MSG_OOB "X", "def"; usertcp.socket over TUN reads it back as
    the kernel itself does (SO_OOBINLINE off and on): the same results, call by call."""
    server = netns.call_in_namespace(ns, socket.create_server, ("0.0.0.0", PORT))
    server.settimeout(20)
    thread = threading.Thread(target=_kernel_sender, args=(server,), daemon=True)
    thread.start()
    results: dict[tuple[str, bool], list[bytes | int]] = {}
    try:
        with tun_host(ns, "uturg0", PEER_CIDR, Stack([US], name="urgent")) as host:
            for inline in (False, True):
                results[("kernel", inline)] = netns.call_in_namespace(ns, _kernel_reader, inline)
            for inline in (False, True):
                c = host.socket(usocket.AF_INET)
                c.settimeout(5)
                if inline:
                    c.setsockopt(usocket.SOL_SOCKET, usocket.SO_OOBINLINE, 1)
                    assert c.getsockopt(usocket.SOL_SOCKET, usocket.SO_OOBINLINE) == 1
                c.connect((PEER, PORT))
                time.sleep(0.3)
                results[("usertcp", inline)] = _reads(c, inline)
                c.close()
    finally:
        server.close()
    assert results[("kernel", False)] == [b"X", b"abc", b"def", errno.EINVAL]
    assert results[("kernel", True)] == [errno.EINVAL, b"abc", b"Xdef", errno.EINVAL]
    for inline in (False, True):
        assert results[("usertcp", inline)] == results[("kernel", inline)]
