"""SO_TIMESTAMPING with SOF_TIMESTAMPING_OPT_STATS: each transmit timestamp carries the
connection's statistics (Linux tcp_get_timestamping_opt_stats) as an SCM_TIMESTAMPING_OPT_STATS
control message, netlink attributes laid out by usertcp.wire.opt_stats. The attribute sequence
asserted here is what this machine's kernel (6.18) hands over loopback for the same flags."""

from __future__ import annotations

import pytest

from pair import socket_pair
from usertcp import socket as us
from usertcp.api.errqueue import SCM_TIMESTAMPING, parse_extended_err
from usertcp.tcp.timestamping import SCM_TSTAMP_ACK, SCM_TSTAMP_SND
from usertcp.wire import opt_stats as nla

SOF_TX_SOFTWARE, SOF_SOFTWARE, SOF_OPT_ID, SOF_TX_ACK = 1 << 1, 1 << 4, 1 << 7, 1 << 9
SOF_OPT_TSONLY, SOF_OPT_STATS = 1 << 11, 1 << 12
# The kernel's order (tcp_get_timestamping_opt_stats); TCP_NLA_TTL only on an ACK timestamp.
KERNEL_ORDER = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 15, 16, 17, 13, 14, 18, 19, 20, 21, 22, 23, 24, 25, 27]


def _types(data: bytes) -> list[int]:
    out, off = [], 0
    while off < len(data):
        length = int.from_bytes(data[off:off + 2], "little")
        out.append(int.from_bytes(data[off + 2:off + 4], "little"))
        off += (length + 3) & ~3
    return out


def test_wire_layout_round_trip_and_malformed_input() -> None:
    values = {kind: kind * 1000 for kind, _w in nla.OPT_STATS_LAYOUT if kind != nla.TCP_NLA_TTL}
    data = nla.encode_opt_stats(values)
    assert _types(data) == KERNEL_ORDER
    assert len(data) == 248          # as the kernel's SND entry over loopback
    back = nla.decode_opt_stats(data)
    assert back[nla.TCP_NLA_EDT] == 25000 and back[nla.TCP_NLA_SND_CWND] == 8000
    assert back[nla.TCP_NLA_CA_STATE] == 14000 & 0xFF     # an u8 attribute keeps its low byte
    with pytest.raises(ValueError):
        nla.decode_opt_stats(data[:-3])
    with pytest.raises(ValueError):
        nla.decode_opt_stats(b"\x02\x00\x01\x00")


def test_opt_stats_on_send_and_ack_timestamps() -> None:
    p = socket_pair(seed=5)
    drv, lst, cli, srv = p.driver, p.listener, p.client, p.server
    flags = SOF_TX_SOFTWARE | SOF_SOFTWARE | SOF_OPT_ID | SOF_TX_ACK | SOF_OPT_TSONLY | SOF_OPT_STATS
    cli.setsockopt(us.SOL_SOCKET, us.SO_TIMESTAMPING, flags)
    sent_at = drv.now()
    assert cli.send(b"x" * 3000) == 3000
    got = b""
    while len(got) < 3000:
        got += srv.recv(4000)
    drv.run_for(0.1)
    # The send timestamp: its stats say 3000 bytes queued, none acknowledged yet.
    data, anc, msg_flags, _addr = cli.recvmsg(0, 4096, us.MSG_ERRQUEUE)
    assert [(lvl, kind) for lvl, kind, _d in anc] == [
        (us.SOL_SOCKET, SCM_TIMESTAMPING), (us.SOL_SOCKET, nla.SCM_TIMESTAMPING_OPT_STATS),
        (us.IPPROTO_IP, us.IP_RECVERR)]
    assert data == b"" and msg_flags & us.MSG_TRUNC   # the stats are the data too, cut here
    assert parse_extended_err(anc[2][2]).ee_info == SCM_TSTAMP_SND
    assert _types(anc[1][2]) == KERNEL_ORDER
    snd = nla.decode_opt_stats(anc[1][2])
    assert snd[nla.TCP_NLA_SNDQ_SIZE] == 3000 and snd[nla.TCP_NLA_BYTES_SENT] == 3000
    assert snd[nla.TCP_NLA_DATA_SEGS_OUT] >= 1 and snd[nla.TCP_NLA_SND_CWND] == 10
    assert abs(snd[nla.TCP_NLA_EDT] - sent_at * 1e9) < 1e6
    # The ACK timestamp: nothing left, the ACK's TTL, the same send time (EDT).
    data, anc, msg_flags, _addr = cli.recvmsg(4096, 4096, us.MSG_ERRQUEUE)
    assert parse_extended_err(anc[2][2]).ee_info == SCM_TSTAMP_ACK
    assert data == anc[1][2] and not msg_flags & us.MSG_TRUNC
    assert _types(data) == [*KERNEL_ORDER[:-1], nla.TCP_NLA_TTL, nla.TCP_NLA_REHASH]
    ack = nla.decode_opt_stats(data)
    assert ack[nla.TCP_NLA_SNDQ_SIZE] == 0 and ack[nla.TCP_NLA_TTL] == 64
    assert ack[nla.TCP_NLA_EDT] == snd[nla.TCP_NLA_EDT]
    assert ack[nla.TCP_NLA_SRTT] > 0 and ack[nla.TCP_NLA_MIN_RTT] > 0
    for sock in (cli, srv, lst):
        sock.close()
