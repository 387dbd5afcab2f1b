"""The drill shim's Fast Open client calls with MSG_ZEROCOPY: tcp_sendmsg_locked takes the
zerocopy range before tcp_sendmsg_fastopen, so the data a SYN carries gets an id; a SYN with
no data (a cookie request) takes none."""

from __future__ import annotations

from usertcp.drill.parser import parse_script
from usertcp.drill.runner import ScriptResult, run_script

_ERRQ = """recvmsg({fd}, {{msg_name(...)=..., msg_iov(1)=[{{..., 0}}], msg_flags=MSG_ERRQUEUE,
          msg_control=[{control}]}}, MSG_ERRQUEUE)"""
_NOTE = """{cmsg_level=CMSG_LEVEL_IP, cmsg_type=CMSG_TYPE_RECVERR,
          cmsg_data={ee_errno=0, ee_origin=SO_EE_ORIGIN_ZEROCOPY, ee_type=0,
                     ee_code=SO_EE_CODE_ZEROCOPY_COPIED, ee_info=ID, ee_data=ID}}"""


def _run(text: str) -> ScriptResult:
    return run_script(parse_script(text, path="<test>"))


def test_syn_data_sent_with_msg_zerocopy_is_notified_once_acked() -> None:
    script = f"""\
`sysctl -q net.ipv4.tcp_fastopen=0x1
sysctl -q net.ipv4.tcp_timestamps=0`
    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
   +0 fcntl(3, F_SETFL, O_RDWR|O_NONBLOCK) = 0
   +0 setsockopt(3, SOL_SOCKET, SO_ZEROCOPY, [1], 4) = 0
   +0 sendto(3, ..., 300, MSG_FASTOPEN|MSG_ZEROCOPY, ..., ...) = -1 EINPROGRESS (Operation now in progress)
   +0 > S 0:0(0) <mss 1460,nop,nop,sackOK,nop,wscale 8,FO,nop,nop>
 +.01 < S. 7:7(0) ack 1 win 14600 <mss 1460,nop,nop,sackOK,nop,wscale 6,FO abcd1234,nop,nop>
   +0 > . 1:1(0) ack 1
   +0 {_ERRQ.format(fd=3, control="")} = -1 EAGAIN (Resource temporarily unavailable)
   +0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 4
   +0 fcntl(4, F_SETFL, O_RDWR|O_NONBLOCK) = 0
   +0 setsockopt(4, SOL_SOCKET, SO_ZEROCOPY, [1], 4) = 0
   +0 sendto(4, ..., 300, MSG_FASTOPEN|MSG_ZEROCOPY, ..., ...) = 300
   +0 > S 0:300(300) <mss 1460,nop,nop,sackOK,nop,wscale 8,FO abcd1234,nop,nop>
   +0 {_ERRQ.format(fd=4, control="")} = -1 EAGAIN (Resource temporarily unavailable)
 +.01 < S. 9:9(0) ack 301 win 14600 <mss 1460,nop,nop,sackOK,nop,wscale 6>
   +0 > . 301:301(0) ack 1
   +0 {_ERRQ.format(fd=4, control=_NOTE.replace("ID", "0"))} = 0
"""
    res = _run(script)
    assert res.status == "passed", f"{res.line}: {res.reason}\n" + "\n".join(res.details)
