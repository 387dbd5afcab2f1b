"""TCP Fast Open (RFC 7413) as Linux's tcp_fastopen.c does it: server and client."""

from __future__ import annotations

import errno

import pytest

from pair import A_ADDR, B_ADDR, Pair, make_pair
from test_preload import CIP, KEY, SIP, Peer, child, data_of, server
from usertcp.net.memnet import LinkConfig
from usertcp.tcp import fastopen
from usertcp.tcp.config import (
    TFO_CLIENT_ENABLE,
    TFO_SERVER_COOKIE_NOT_REQD,
    TFO_SERVER_ENABLE,
    TFO_SERVER_WO_SOCKOPT1,
    StackConfig,
)
from usertcp.tcp.connection import State
from usertcp.tcp.cookies import tfo_cookie
from usertcp.tcp.stack import Listener, Stack
from usertcp.wire.packet import build_packet, parse_packet
from usertcp.wire.segment import ACK, SYN, Segment
from usertcp.wire.tcp import encode_options

KEY2 = bytes(range(16, 32))
COOKIE = tfo_cookie(KEY, CIP, SIP)


def cfg(bits: int = TFO_CLIENT_ENABLE | TFO_SERVER_ENABLE) -> StackConfig:
    return StackConfig(fastopen=bits, fastopen_key=KEY, random_ts_offset=False)


def tfo(bits: int = TFO_CLIENT_ENABLE | TFO_SERVER_ENABLE, qlen: int = 8) -> tuple[Stack, Peer]:
    st, _lst = server(cfg(bits), b"", fastopen_qlen=qlen)
    return st, Peer(st)


# ------------------------------------------------------------------- server


@pytest.mark.parametrize("exp", [False, True])
def test_cookie_request_gets_linux_cookie_in_the_form_used(exp: bool) -> None:
    st, peer = tfo()
    peer.syn(cookie=b"", exp=exp)
    sa = peer.synack()
    assert sa.fastopen == COOKIE and sa.fastopen_exp is exp
    raw = bytes(sa.raw_options)
    assert (b"\xfe\x0c\xf9\x89" + COOKIE if exp else b"\x22\x0a" + COOKIE) in raw
    assert st.counters["TcpExtTCPFastOpenCookieReqd"] == 1
    assert child(st, peer).tfo is not None and not st.listeners[(b"", 25)].accept_queue


def test_valid_cookie_data_delivered_at_once_and_acked() -> None:
    st, peer = tfo()
    lst = st.listeners[(b"", 25)]
    peer.syn(payload=b"GET / HTTP/1.0\r\n\r\n", cookie=COOKIE)
    sa = peer.synack()
    assert sa.ack == peer.isn + 1 + 18 and sa.fastopen is None
    conn = lst.accept()
    assert conn is not None and conn.state is State.SYN_RECEIVED
    assert conn.recv(100, peer.now) == b"GET / HTTP/1.0\r\n\r\n"
    assert conn.syn_data_acked and conn.info()["tcpi_options"] & 32
    assert lst.fastopen_pending == 1 and st.counters["TcpExtTCPFastOpenPassive"] == 1
    peer.ack(1, data_off=19)
    assert conn.state is State.ESTABLISHED and lst.fastopen_pending == 0


def test_invalid_cookie_gets_fresh_cookie_and_data_not_acked() -> None:
    st, peer = tfo()
    peer.syn(payload=b"data", cookie=b"\x00" * 8)
    sa = peer.synack()
    assert sa.ack == peer.isn + 1 and sa.fastopen == COOKIE
    assert st.counters["TcpExtTCPFastOpenPassiveFail"] == 1
    conn = child(st, peer)
    assert conn.readable_bytes == 0 and not st.listeners[(b"", 25)].accept_queue


def test_data_without_option_gets_no_cookie() -> None:
    """Commit 531c94a: no TFO option in the SYN, no cookie in the SYN-ACK."""
    _st, peer = tfo()
    peer.syn(payload=b"data")
    sa = peer.synack()
    assert sa.fastopen is None and sa.ack == peer.isn + 1


def test_backup_key_accepted_and_fresh_primary_cookie_sent() -> None:
    st, lst = server(cfg(), b"", fastopen_qlen=4)
    lst.set_fastopen_key(KEY2 + KEY)                   # rotated: the old key is now the backup
    peer = Peer(st)
    peer.syn(payload=b"x", cookie=COOKIE)
    sa = peer.synack()
    assert sa.ack == peer.isn + 2                      # accepted
    assert sa.fastopen == tfo_cookie(KEY2, CIP, SIP)
    assert st.counters["TcpExtTCPFastOpenPassiveAltKey"] == 1
    with pytest.raises(OSError) as e:
        lst.set_fastopen_key(b"short")
    assert e.value.errno == errno.EINVAL


def test_per_listener_key_overrides_sysctl_key() -> None:
    st, lst = server(cfg(), b"", fastopen_qlen=4)
    lst.set_fastopen_key(KEY2)
    peer = Peer(st)
    peer.syn(payload=b"x", cookie=COOKIE)              # made with the sysctl key: now invalid
    sa = peer.synack()
    assert sa.ack == peer.isn + 1 and sa.fastopen == tfo_cookie(KEY2, CIP, SIP)


def test_pending_queue_limit() -> None:
    st, peer = tfo(qlen=1)
    peer.syn(payload=b"one", cookie=COOKIE)
    assert peer.synack().ack == peer.isn + 4
    second = Peer(st, sport=40001)
    second.syn(payload=b"two", cookie=COOKIE)
    sa = second.synack()
    assert sa.ack == second.isn + 1 and sa.fastopen is None   # plain 3WHS, no cookie
    assert st.counters["TcpExtTCPFastOpenListenOverflow"] == 1
    peer.ack(1, data_off=4)                            # the first completes: room again
    third = Peer(st, sport=40002)
    third.syn(payload=b"three", cookie=COOKIE)
    assert third.synack().ack == third.isn + 6


def test_qlen_zero_disables_and_negative_rejected() -> None:
    st, peer = tfo(qlen=0)
    peer.syn(payload=b"x", cookie=COOKIE)
    assert peer.synack().ack == peer.isn + 1
    with pytest.raises(OSError):
        st.listeners[(b"", 25)].fastopen_qlen = -1


def test_server_bit_off_ignores_tfo() -> None:
    _st, peer = tfo(bits=TFO_CLIENT_ENABLE)
    peer.syn(cookie=b"")
    assert peer.synack().fastopen is None


def test_cookie_not_required_bit() -> None:
    _st, peer = tfo(bits=TFO_SERVER_ENABLE | TFO_SERVER_COOKIE_NOT_REQD)
    peer.syn(payload=b"no cookie")
    sa = peer.synack()
    assert sa.ack == peer.isn + 1 + 9 and sa.fastopen is None


def test_backlog_is_qlen_without_setsockopt() -> None:
    st = Stack([SIP], cfg(TFO_SERVER_ENABLE | TFO_SERVER_WO_SOCKOPT1))
    lst = st.listen(25, backlog=3)
    assert lst.fastopen_qlen == 0 and lst.fastopen_max_qlen == 3
    assert isinstance(st.hooks, fastopen.FastOpen)
    peer = Peer(st)
    peer.syn(payload=b"abc", cookie=COOKIE)
    assert peer.synack().ack == peer.isn + 4


def test_syn_fin_with_data_is_discarded() -> None:
    # Linux tcp_rcv_state_process in LISTEN drops SYN+FIN, cookie or not ("tcp: drop SYN+FIN
    # messages"; SKB_DROP_REASON_TCP_FLAGS): no SYN-ACK, no child (issue 20 point 5).
    st, peer = tfo()
    peer.syn(payload=b"QUIT\r\n", cookie=COOKIE, fin=True)
    assert peer.out() == [] and not st.connections
    assert st.counters["SKB_DROP_REASON_TCP_FLAGS"] == 1


def test_tfo_child_sends_in_syn_received_after_synack() -> None:
    st, peer = tfo()
    peer.syn(payload=b"req", cookie=COOKIE)
    peer.synack()
    conn = st.listeners[(b"", 25)].accept()
    assert conn is not None
    conn.send(b"early reply", peer.now)
    conn.output(peer.now)                              # what the socket layer does after send()
    segs = peer.out()
    assert data_of(segs, peer.server_isn) == {1: b"early reply"} and conn.state is State.SYN_RECEIVED
    assert segs[0].flags & ACK and segs[0].ack == peer.isn + 4
    peer.ack(1 + 11, data_off=4)
    assert conn.state is State.ESTABLISHED and conn.snd_una == 12 and peer.out() == []


def test_tfo_child_first_flight_is_a_full_initial_window() -> None:
    # Linux counts packets: the SYN-ACK is not in the child's packets_out, so its sequence
    # byte takes no room from the 10 segments of the first flight (RFC 6928 IW10).
    st, peer = tfo()
    peer.syn(payload=b"req", cookie=COOKIE)
    peer.synack()
    conn = st.listeners[(b"", 25)].accept()
    assert conn is not None
    mss = conn.mss
    conn.send(b"r" * (12 * mss), peer.now)
    conn.output(peer.now)
    sent = data_of(peer.out(), peer.server_isn)
    assert sum(len(v) for v in sent.values()) == 10 * mss and conn.state is State.SYN_RECEIVED


def test_tfo_child_synack_retransmitted_by_rto() -> None:
    st, peer = tfo()
    peer.syn(payload=b"req", cookie=COOKIE)
    first = peer.synack()
    peer.run_to(0.99)
    assert peer.out() == []
    peer.run_to(1.01)
    again = peer.synack()
    assert again.seq == first.seq and again.ack == first.ack
    assert st.counters["TcpExtTCPSynRetrans"] == 1


def test_synack_cookie_dropped_when_options_are_full() -> None:
    st, peer = tfo()
    lst = st.listeners[(b"", 25)]
    lst.options["md5_key"] = b"k"                      # MD5 (20) + MSS + TS + wscale leave no room
    ts_opts = encode_options(mss=1460, ts=(1, 0), sack_permitted=True, wscale=7, fastopen=b"")
    peer.send(SYN, options=ts_opts)
    raw = [parse_packet(p.tobytes(), verify_checksum=False) for p in st.datagrams_to_send()]
    assert raw and raw[0].fastopen is None


# ------------------------------------------------------------------- client


def client_pair(server_bits: int = TFO_SERVER_ENABLE, loss: float = 0.0
                ) -> tuple[Pair, Listener, list[Segment]]:
    pair = make_pair(LinkConfig(delay=0.005, loss=loss), cfg_a=cfg(TFO_CLIENT_ENABLE),
                     cfg_b=cfg(server_bits))
    lst = pair.b.listen(80)
    lst.fastopen_qlen = 16
    syns: list[Segment] = []

    def tap(data: bytes, now: float, d: object) -> None:
        seg = parse_packet(data)
        if seg.flags & SYN and not seg.flags & ACK:
            syns.append(seg)
    pair.net.add_tap(tap)
    return pair, lst, syns


def test_client_requests_cookie_then_sends_data_in_syn() -> None:
    pair, lst, syns = client_pair()
    hooks = fastopen.install(pair.a)
    c1 = pair.a.create_connection(B_ADDR, 80)
    assert not fastopen.defer_connect(c1, pair.now)     # no cookie: TCP_FASTOPEN_CONNECT connects now
    # Linux tcp_send_syn_data: without a cookie the SYN takes none of the data (a cookie request);
    # the caller sends it once connected.
    assert fastopen.tfo_connect(c1, b"first", pair.now) == 0
    assert pair.driver.run_until(lambda: c1.state is State.ESTABLISHED, 5)
    assert c1.send(b"first", pair.now) == 5
    assert pair.driver.run_until(lambda: bool(lst.accept_queue), 5)
    s1 = lst.accept()
    assert syns[0].fastopen == b"" and len(syns[0].payload) == 0   # a cookie request, no data
    assert pair.driver.run_until(lambda: s1 is not None and s1.readable_bytes == 5, 5)
    assert s1 is not None and s1.recv(10, pair.now) == b"first" and not c1.syn_data_acked
    cookie = tfo_cookie(KEY, bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
    entry = hooks.client.cache.get(bytes([10, 0, 0, 2]))
    assert entry is not None and entry.cookie == cookie

    c2 = pair.a.create_connection(B_ADDR, 80)
    assert fastopen.defer_connect(c2, pair.now)         # a cookie: the SYN waits for the data
    t0 = pair.now
    assert fastopen.tfo_connect(c2, b"second request", pair.now) == 14
    pair.driver.kick()
    assert syns[1].fastopen == cookie and bytes(syns[1].payload) == b"second request"
    assert pair.driver.run_until(lambda: bool(lst.accept_queue), 5)
    s2 = lst.accept()
    assert s2 is not None and s2.state is State.SYN_RECEIVED
    assert pair.now - t0 == pytest.approx(0.005)       # half an RTT: the data came with the SYN
    assert s2.recv(100, pair.now) == b"second request"
    assert pair.driver.run_until(lambda: c2.state is State.ESTABLISHED, 5)
    assert c2.syn_data_acked and pair.a.counters["TcpExtTCPFastOpenActive"] == 1


def test_client_fallback_when_server_ignores_tfo() -> None:
    pair, lst, _syns = client_pair(server_bits=0)
    hooks = fastopen.install(pair.a)
    c = pair.a.create_connection(B_ADDR, 80)
    assert fastopen.tfo_connect(c, b"hello", pair.now) == 0
    assert pair.driver.run_until(lambda: c.state is State.ESTABLISHED, 5)
    c.send(b"hello", pair.now)
    assert pair.driver.run_until(lambda: bool(lst.accept_queue), 5)
    s = lst.accept()
    assert s is not None
    assert pair.driver.run_until(lambda: s.readable_bytes == 5, 5)
    assert s.recv(10, pair.now) == b"hello"
    entry = hooks.client.cache.get(bytes([10, 0, 0, 2]))
    # tcp_rcv_fastopen_synack: no cookie for the request; try the experimental option next time.
    assert entry is not None and entry.cookie is None and entry.try_exp == 1


def test_client_stale_cookie_data_resent_right_after_handshake() -> None:
    pair, lst, syns = client_pair(server_bits=0)      # server does not do TFO any more
    hooks = fastopen.install(pair.a)
    hooks.client.cache.entries[bytes([10, 0, 0, 2])] = fastopen.CookieEntry(cookie=b"\x11" * 8)
    c = pair.a.create_connection(B_ADDR, 80)
    fastopen.tfo_connect(c, b"in the syn", pair.now)
    pair.driver.kick()
    assert bytes(syns[0].payload) == b"in the syn"
    assert pair.driver.run_until(lambda: bool(lst.accept_queue), 5)
    s = lst.accept()
    assert s is not None
    assert pair.driver.run_until(lambda: s.readable_bytes == 10, 5)
    assert s.recv(20, pair.now) == b"in the syn"
    assert pair.now == pytest.approx(0.015)            # 1.5 RTT: resent with the 3rd ACK, no RTO
    assert pair.a.counters["TcpExtTCPFastOpenActiveFail"] == 1


def test_client_syn_retransmission_carries_no_data() -> None:
    st = Stack([A_ADDR], cfg(TFO_CLIENT_ENABLE))
    hooks = fastopen.install(st)
    hooks.client.cache.entries[SIP] = fastopen.CookieEntry(cookie=COOKIE)
    c = st.create_connection("10.0.0.2", 80)
    fastopen.tfo_connect(c, b"payload", 0.0)
    first = [parse_packet(p.tobytes()) for p in st.datagrams_to_send()]
    assert bytes(first[0].payload) == b"payload" and first[0].fastopen == COOKIE
    st.handle_timer(1.0)
    again = [parse_packet(p.tobytes()) for p in st.datagrams_to_send()]
    assert again[0].flags == SYN and len(again[0].payload) == 0
    # The SYN-ACK acks only the SYN: the data follows at once, from offset 1.
    isn = first[0].seq
    synack = build_packet(src=SIP, dst=bytes([10, 0, 0, 1]), sport=80, dport=c.local_port, seq=5000,
                          ack=(isn + 1) & 0xFFFFFFFF, flags=SYN | ACK, window=65535,
                          options=encode_options(mss=1460))
    st.receive(synack.tobytes(), 1.2)
    out = [parse_packet(p.tobytes()) for p in st.datagrams_to_send()]
    sent = [(s.seq, bytes(s.payload)) for s in out if len(s.payload)]
    assert sent == [((isn + 1) & 0xFFFFFFFF, b"payload")]
    assert c.state is State.ESTABLISHED and not c.syn_data_acked


def test_client_receives_preload_in_synack_over_pair() -> None:
    """Both stacks ours: the banner arrives in the SYN-ACK, 1 RTT after the SYN."""
    pair, lst, _ = client_pair()
    lst.set_preload(b"220 hi\r\n", 0.0)
    fastopen.install(pair.a).client.cache.entries[bytes([10, 0, 0, 2])] = fastopen.CookieEntry(
        cookie=tfo_cookie(KEY, bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])))
    c = pair.a.create_connection(B_ADDR, 80)
    fastopen.tfo_connect(c, b"", 0.0)
    assert pair.driver.run_until(lambda: c.readable_bytes > 0, 5)
    assert pair.now == pytest.approx(0.010) and c.recv(100, pair.now) == b"220 hi\r\n"
    assert c.state is State.ESTABLISHED


def test_tfo_with_loss_still_delivers_everything() -> None:
    for seed in range(5):
        pair, lst, _ = client_pair(loss=0.3)
        pair.net.rng.seed(seed)
        lst.set_preload(b"220 banner\r\n", 0.0)
        fastopen.install(pair.a).client.cache.entries[bytes([10, 0, 0, 2])] = fastopen.CookieEntry(
            cookie=tfo_cookie(KEY, bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])))
        c = pair.a.create_connection(B_ADDR, 80)
        fastopen.tfo_connect(c, b"EHLO x\r\n", 0.0)
        assert pair.driver.run_until(
            lambda: c.readable_bytes >= 12 and bool(lst.accept_queue), 120)  # noqa: B023 - called in this pass
        s = lst.accept()
        assert s is not None
        assert pair.driver.run_until(lambda: s.readable_bytes >= 8, 120)  # noqa: B023 - called in this pass
        assert c.recv(100, pair.now) == b"220 banner\r\n" and s.recv(100, pair.now) == b"EHLO x\r\n"

