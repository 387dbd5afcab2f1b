"""The drill shim's epoll, files, sendfile/splice and error queue beyond the upstream corpus:
errnos of misuse, level-triggered and one-shot items, sendfile offsets, scratch files."""

from __future__ import annotations

import pytest

from drill_snippets import passive_open
from usertcp.drill.parser import parse_script
from usertcp.drill.runner import ScriptResult, run_script

HANDSHAKE = passive_open(ack_delay="+0")


def _run(body: str, init: str = "") -> ScriptResult:
    return run_script(parse_script(init + HANDSHAKE + body, path="<test>"))


def _passes(res: ScriptResult) -> None:
    assert res.status == "passed", f"{res.status} at line {res.line}: {res.reason}\n" + "\n".join(res.details)


def test_epoll_ctl_misuse_errnos() -> None:
    _passes(_run("""\
   +0 epoll_create(0) = -1 EINVAL (Invalid argument)
   +0 epoll_create1(1) = -1 EINVAL (Invalid argument)
   +0 epoll_create(1) = 5
   +0 epoll_ctl(5, EPOLL_CTL_MOD, 4, {events=EPOLLIN, fd=4}) = -1 ENOENT (No such file or directory)
   +0 epoll_ctl(5, EPOLL_CTL_DEL, 4, {events=0, fd=4}) = -1 ENOENT (No such file or directory)
   +0 epoll_ctl(5, EPOLL_CTL_ADD, 9, {events=EPOLLIN, fd=9}) = -1 EBADF (Bad file descriptor)
   +0 epoll_ctl(5, EPOLL_CTL_ADD, 5, {events=EPOLLIN, fd=5}) = -1 EINVAL (Invalid argument)
   +0 epoll_ctl(4, EPOLL_CTL_ADD, 3, {events=EPOLLIN, fd=3}) = -1 EINVAL (Invalid argument)
   +0 epoll_ctl(5, EPOLL_CTL_ADD, 4, {events=EPOLLIN|EPOLLEXCLUSIVE|EPOLLONESHOT, fd=4}) = -1 EINVAL (Inval)
   +0 epoll_ctl(5, EPOLL_CTL_ADD, 4, {events=EPOLLIN|EPOLLEXCLUSIVE, fd=4}) = 0
   +0 epoll_ctl(5, EPOLL_CTL_ADD, 4, {events=EPOLLIN, fd=4}) = -1 EEXIST (File exists)
   +0 epoll_ctl(5, EPOLL_CTL_MOD, 4, {events=EPOLLIN, fd=4}) = -1 EINVAL (Invalid argument)
   +0 epoll_wait(5, {events=0, ptr=0}, 0, 0) = -1 EINVAL (Invalid argument)
   +0 epoll_ctl(5, EPOLL_CTL_DEL, 4, {events=0, fd=4}) = 0
   +0 read(5, ..., 10) = -1 ENOTSOCK (Socket operation on non-socket)
   +0 close(5) = 0
"""))


def test_level_triggered_reports_until_drained_and_oneshot_disarms() -> None:
    _passes(_run("""\
   +0 fcntl(4, F_SETFL, O_RDWR|O_NONBLOCK) = 0
   +0 epoll_create(1) = 5
   +0 epoll_ctl(5, EPOLL_CTL_ADD, 4, {events=EPOLLIN, u64=77}) = 0
   +0 epoll_wait(5, {events=0, ptr=0}, 1, 0) = 0
   +0 < P. 1:1001(1000) ack 1 win 257
   +0 > . 1:1(0) ack 1001
   +0 epoll_wait(5, {events=EPOLLIN, u64=77}, 1, 0) = 1
   +0 epoll_wait(5, {events=EPOLLIN, u64=77}, 1, 0) = 1
   +0 read(4, ..., 1000) = 1000
   +0 epoll_wait(5, {events=0, ptr=0}, 1, 0) = 0
   +0 epoll_ctl(5, EPOLL_CTL_MOD, 4, {events=EPOLLIN|EPOLLONESHOT, fd=4}) = 0
   +0 < P. 1001:1101(100) ack 1 win 257
   +0 epoll_wait(5, {events=EPOLLIN, fd=4}, 1, 0) = 1
   +0 epoll_wait(5, {events=0, ptr=0}, 1, 0) = 0
   +0 < P. 1101:1201(100) ack 1 win 257
   +0 epoll_wait(5, {events=0, ptr=0}, 1, 0) = 0
   // A blocking wait returns when data arrives.
   +0 epoll_ctl(5, EPOLL_CTL_MOD, 4, {events=EPOLLIN|EPOLLET, fd=4}) = 0
   +0 epoll_wait(5, {events=EPOLLIN, fd=4}, 1, 0) = 1
   +0...0.100 epoll_wait(5, {events=EPOLLIN, fd=4}, 1, 500) = 1
 +.1 < P. 1201:1301(100) ack 1 win 257
"""))


def test_closing_a_watched_socket_drops_its_item() -> None:
    _passes(_run("""\
   +0 epoll_create(1) = 5
   +0 epoll_ctl(5, EPOLL_CTL_ADD, 4, {events=EPOLLOUT, fd=4}) = 0
   +0 close(4) = 0
   +0 > F. 1:1(0) ack 1
   +0 epoll_wait(5, {events=0, ptr=0}, 1, 0) = 0
"""))


def test_sendfile_offsets_and_scratch_files() -> None:
    init = "`/bin/rm -f /tmp/sf\n/bin/dd bs=10 count=3 if=/dev/zero of=/tmp/sf status=none`\n"
    _passes(_run("""\
   +0 open("/tmp/nonexistent-usertcp-file", O_RDONLY) = -1 ENOENT (No such file or directory)
   +0 open("/tmp/sf", O_RDONLY) = 5
   +0 sendfile(4, 5, [20], 100) = 10
   +0 > P. 1:11(10) ack 1
   +0 < . 1:1(0) ack 11 win 257
   +0 sendfile(4, 5, NULL, 25) = 25
   +0 > P. 11:36(25) ack 1
   +0 < . 1:1(0) ack 36 win 257
   +0 sendfile(4, 5, NULL, 25) = 5
   +0 > P. 36:41(5) ack 1
   +0 sendfile(5, 4, NULL, 25) = -1 EBADF (Bad file descriptor)
""", init))


def test_splice_moves_received_bytes_into_a_pipe() -> None:
    _passes(_run("""\
   +0 fcntl(4, F_SETFL, O_RDWR|O_NONBLOCK) = 0
   +0 pipe([5, 6]) = 0
   +0 splice(4, NULL, 6, NULL, 10, 0) = -1 EAGAIN (Resource temporarily unavailable)
   +0 < P. 1:101(100) ack 1 win 257
   +0 splice(4, NULL, 6, NULL, 60, 0) = 60
   +0 splice(4, NULL, 5, NULL, 60, 0) = -1 EBADF (Bad file descriptor)
   +0 splice(4, NULL, 6, NULL, 60, 0) = 40
   +0 < F. 101:101(0) ack 1 win 257
   +0 splice(4, NULL, 6, NULL, 60, 0) = 0
"""))


@pytest.mark.parametrize("flags", ["0", "MSG_ZEROCOPY"])
def test_zerocopy_needs_so_zerocopy(flags: str) -> None:
    """MSG_ZEROCOPY alone is ignored (Linux TCP): no id is taken, nothing is queued."""
    _passes(_run(f"""\
   +0 send(4, ..., 100, {flags}) = 100
   +0 > P. 1:101(100) ack 1
   +0 < . 1:1(0) ack 101 win 257
   +0 recvmsg(4, {{msg_name(...)=..., msg_iov(1)=[{{..., 0}}], msg_flags=MSG_ERRQUEUE,
                  msg_control=[]}}, MSG_ERRQUEUE) = -1 EAGAIN (Resource temporarily unavailable)
   +0 setsockopt(4, SOL_SOCKET, SO_ZEROCOPY, [1], 4) = 0
   +0 getsockopt(4, SOL_SOCKET, SO_ZEROCOPY, [1], [4]) = 0
   +0 send(4, ..., 100, MSG_ZEROCOPY) = 100
   +0 > P. 101:201(100) ack 1
   +0 < . 1:1(0) ack 201 win 257
   +0 recvmsg(4, {{msg_name(...)=..., msg_iov(1)=[{{..., 0}}], msg_flags=MSG_ERRQUEUE,
                  msg_control=[{{cmsg_level=CMSG_LEVEL_IP, cmsg_type=CMSG_TYPE_RECVERR,
                                 cmsg_data={{ee_errno=0, ee_origin=SO_EE_ORIGIN_ZEROCOPY, ee_type=0,
                                            ee_code=SO_EE_CODE_ZEROCOPY_COPIED, ee_info=0,
                                            ee_data=0}}}}]}}, MSG_ERRQUEUE) = 0
"""))


def test_reset_completes_pending_zerocopy_sends() -> None:
    """tcp_write_queue_purge on a reset frees the unacknowledged buffers: their completion."""
    _passes(_run("""\
   +0 setsockopt(4, SOL_SOCKET, SO_ZEROCOPY, [1], 4) = 0
   +0 send(4, ..., 100, MSG_ZEROCOPY) = 100
   +0 > P. 1:101(100) ack 1
   +0 < R. 1:1(0) ack 1 win 257
   +0 recvmsg(4, {msg_name(...)=..., msg_iov(1)=[{..., 0}], msg_flags=MSG_ERRQUEUE,
                  msg_control=[{cmsg_level=CMSG_LEVEL_IP, cmsg_type=CMSG_TYPE_RECVERR,
                                cmsg_data={ee_errno=0, ee_origin=SO_EE_ORIGIN_ZEROCOPY, ee_type=0,
                                           ee_code=SO_EE_CODE_ZEROCOPY_COPIED, ee_info=0,
                                           ee_data=0}}]}, MSG_ERRQUEUE) = 0
"""))


def _tstamp(kind: str, key: int) -> str:
    return f"""\
   +0 recvmsg(4, {{msg_name(...)=..., msg_iov(1)=[{{..., 0}}], msg_flags=MSG_ERRQUEUE|MSG_TRUNC,
                  msg_control=[{{cmsg_level=CMSG_LEVEL_IP, cmsg_type=CMSG_TYPE_RECVERR,
                                cmsg_data={{ee_errno=ENOMSG, ee_origin=SO_EE_ORIGIN_TIMESTAMPING, ee_type=0,
                                           ee_code=0, ee_info={kind}, ee_data={key}}}}}]}}, MSG_ERRQUEUE) = 0
"""


def test_retransmissions_are_timestamped_again() -> None:
    """The skb keeps its tx_flags: each transmission of the marked byte is stamped (checked on
    this machine's kernel with a tail loss probe, tools/kernel_txnotify_probe.py)."""
    _passes(_run("""\
   +0 setsockopt(4, SOL_SOCKET, SO_TIMESTAMPING, [SOF_TIMESTAMPING_TX_SCHED | SOF_TIMESTAMPING_TX_SOFTWARE |
                 SOF_TIMESTAMPING_TX_ACK | SOF_TIMESTAMPING_OPT_ID], 4) = 0
   +0 write(4, ..., 100) = 100
   +0 > P. 1:101(100) ack 1
    * > P. 1:101(100) ack 1
   +0 < . 1:1(0) ack 101 win 257
""" + _tstamp("SCM_TSTAMP_SCHED", 99) + _tstamp("SCM_TSTAMP_SND", 99) + _tstamp("SCM_TSTAMP_SCHED", 99)
        + _tstamp("SCM_TSTAMP_SND", 99) + _tstamp("SCM_TSTAMP_ACK", 99) + """\
   +0 recvmsg(4, {msg_name(...)=..., msg_iov(1)=[{..., 0}], msg_flags=MSG_ERRQUEUE,
                  msg_control=[]}, MSG_ERRQUEUE) = -1 EAGAIN (Resource temporarily unavailable)
"""))
