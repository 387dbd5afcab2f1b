"""The drill shim's descriptors (drill/fdtable.py): the kernel's lowest-free numbers and
packetdrill's map of script numbers to them (CHECK_FD), a read on a deferred
TCP_FASTOPEN_CONNECT socket, and when packetdrill's syscall thread checks a blocking call."""

from __future__ import annotations

from usertcp.drill.fdtable import FIRST_FD, ScriptFds
from usertcp.drill.parser import parse_script
from usertcp.drill.runner import ScriptResult, run_script


def _run(text: str) -> ScriptResult:
    return run_script(parse_script(text, path="<test>"))


def _passes(res: ScriptResult) -> None:
    assert res.status == "passed", f"{res.status} at line {res.line}: {res.reason}\n" + "\n".join(res.details)


def test_script_numbers_name_live_descriptors_newest_first() -> None:
    names = ScriptFds()
    assert names.live(4) == -1
    names.name(FIRST_FD, 4)
    names.name(FIRST_FD + 1, 5)
    names.name(FIRST_FD + 2, 4)          # a newer descriptor takes script fd 4
    assert names.live(4) == FIRST_FD + 2 and names.live(5) == FIRST_FD + 1
    names.forget(FIRST_FD + 2)           # closed: 4 names the older one again
    assert names.live(4) == FIRST_FD
    names.forget(FIRST_FD)
    names.forget(FIRST_FD)               # closing twice changes nothing
    assert names.live(4) == -1 and names.live(5) == FIRST_FD + 1


def test_any_new_descriptor_passes_as_the_scripts_number() -> None:
    """socket() = 7 gets live fd 3 (fd 3 was closed), epoll_create() = 9 live fd 4, a pipe
    [12, 11] live 5 and 6: every later call finds the file by the script's number."""
    _passes(_run("""\
    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
   +0 close(3) = 0
   +0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 7
   +0 epoll_create(1) = 9
   +0 pipe([12, 11]) = 0
   +0 read(12, ..., 10) = -1 ENOTSOCK (Socket operation on non-socket)
   +0 read(3, ..., 10) = -1 EBADF (Bad file descriptor)
   +0 epoll_ctl(9, EPOLL_CTL_ADD, 7, {events=EPOLLOUT, fd=7}) = 0
   +0 epoll_wait(9, {events=EPOLLOUT|EPOLLHUP, fd=7}, 1, 0) = 1
   +0 close(7) = 0
   +0 close(7) = -1 EBADF (Bad file descriptor)
   +0 epoll_wait(9, {events=0, ptr=0}, 1, 0) = 0
   +0 close(9) = 0
   +0 close(12) = 0
   +0 close(11) = 0
"""))


def test_read_on_a_deferred_fastopen_connect_socket_would_block() -> None:
    """tcp_recvmsg_locked: the deferred socket is in SYN-SENT with nothing to read (EAGAIN),
    not unconnected (ENOTCONN)."""
    _passes(_run("""\
`sysctl -q net.ipv4.tcp_fastopen=0x1
sysctl -q net.ipv4.tcp_timestamps=0`
    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
   +0 fcntl(3, F_SETFL, O_RDWR|O_NONBLOCK) = 0
   +0 sendto(3, ..., 0, MSG_FASTOPEN, ..., ...) = -1 EINPROGRESS (Operation is now in progress)
   +0 > S 0:0(0) <mss 1460,nop,nop,sackOK,nop,wscale 8,FO,nop,nop>
 +.01 < S. 123:123(0) ack 1 win 14600 <mss 1460,nop,nop,sackOK,nop,wscale 6,FO abcd1234,nop,nop>
   +0 > . 1:1(0) ack 1
   +0 close(3) = 0
   +0 > F. 1:1(0) ack 1
   +0 < F. 1:1(0) ack 2 win 92
   +0 > . 2:2(0) ack 2
   +0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 4
   +0 fcntl(4, F_SETFL, O_RDWR|O_NONBLOCK) = 0
   +0 setsockopt(4, SOL_TCP, TCP_FASTOPEN_CONNECT, [1], 4) = 0
   +0 connect(4, ..., ...) = 0
   +0 read(4, ..., 100) = -1 EAGAIN (Resource temporarily unavailable)
   +0 write(4, ..., 10) = 10
   +0 > S 0:10(10) <mss 1460,nop,nop,sackOK,nop,wscale 8,FO abcd1234,nop,nop>
"""))


# A client whose connect() times out after one SYN retransmission (1 s, then 2 s more).
_SYN_TIMEOUT = """\
`sysctl -q net.ipv4.tcp_syn_retries=1`
    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
   +0...{end} connect(3, ..., ...) = -1 ETIMEDOUT (Connection timed out)
   +0 > S 0:0(0) <mss 1460,sackOK,TS val 100 ecr 0,nop,wscale 8>
   +1 > S 0:0(0) <mss 1460,sackOK,TS val 1100 ecr 0,nop,wscale 8>
{last}"""


def test_a_pending_call_is_checked_after_the_outbound_wait_it_ended_in() -> None:
    """packetdrill's syscall thread checks its return under the lock the main thread holds while
    it sniffs: a packet that never comes is the failure reported, not the early return."""
    missing = "   +2 > S 0:0(0) <mss 1460,sackOK,TS val 3100 ecr 0,nop,wscale 8>\n"
    res = _run(_SYN_TIMEOUT.format(end="30", last=missing))
    assert res.status == "failed" and res.line == 6 and "timed out waiting for outbound packet" in res.reason
    # With no packet wait in the way, the early return is the failure.
    res = _run(_SYN_TIMEOUT.format(end="30", last="  +10 close(3) = 0\n"))
    assert res.status == "failed" and res.line == 3 and "timing error" in res.reason
    _passes(_run(_SYN_TIMEOUT.format(end="3", last="")))
