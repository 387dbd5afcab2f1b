"""MSG_ZEROCOPY with MSG_FASTOPEN on the socket API (Linux tcp_sendmsg_fastopen hands the call's
ubuf_info to the SYN's data, tcp_send_syn_data; a SYN without data takes no id,
net_zcopy_put_abort)."""

from __future__ import annotations

import errno

import pytest

from pair import make_pair
from usertcp import MSG_FASTOPEN
from usertcp import socket as usocket
from usertcp.api.errqueue import parse_extended_err
from usertcp.tcp.config import StackConfig
from usertcp.tcp.errqueue import SO_EE_ORIGIN_ZEROCOPY


def test_fastopen_syn_data_takes_a_zerocopy_id_and_a_cookie_request_does_not() -> None:
    pair = make_pair(seed=3, cfg_a=StackConfig(fastopen=0x1), cfg_b=StackConfig(fastopen=0x2),
                     addresses=("10.0.0.1", "10.0.0.2"))
    ch, sh = usocket.Host(pair.a, pair.driver), usocket.Host(pair.b, pair.driver)
    srv = sh.socket()
    srv.setsockopt(usocket.IPPROTO_TCP, usocket.TCP_FASTOPEN, 16)
    srv.bind(("10.0.0.2", 80))
    srv.listen()
    srv.settimeout(5)
    flags = MSG_FASTOPEN | usocket.MSG_ZEROCOPY
    # No cookie yet: the SYN asks for one and carries nothing; the call takes no id.
    first = ch.socket()
    first.setsockopt(usocket.SOL_SOCKET, usocket.SO_ZEROCOPY, 1)
    first.setblocking(False)
    with pytest.raises(OSError) as ei:
        first.sendto(b"x" * 500, flags, ("10.0.0.2", 80))
    assert ei.value.errno == errno.EINPROGRESS
    pair.driver.run_for(0.1)
    with pytest.raises(OSError) as ei:
        first.recvmsg(0, 1024, usocket.MSG_ERRQUEUE)
    assert ei.value.errno == errno.EAGAIN
    # With the cookie: the SYN carries the data under id 0 of this socket, completed once
    # the SYN-ACK acknowledges it.
    second = ch.socket()
    second.setsockopt(usocket.SOL_SOCKET, usocket.SO_ZEROCOPY, 1)
    second.setblocking(False)
    assert second.sendto(b"y" * 500, flags, ("10.0.0.2", 80)) == 500
    pair.driver.run_for(0.1)
    _data, anc, _flags, _addr = second.recvmsg(0, 1024, usocket.MSG_ERRQUEUE)
    (_level, _kind, raw), = anc
    ee = parse_extended_err(raw)
    assert (ee.ee_origin, ee.ee_info, ee.ee_data) == (SO_EE_ORIGIN_ZEROCOPY, 0, 0)
    for sock in (first, second, srv):
        sock.close()
