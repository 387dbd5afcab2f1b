"""The Fast Open client as Linux does it (tcp/fastopen_client.py), over IPv4 and IPv6.

Each behaviour is checked on the wire against a hand-driven peer (the SYN our stack sends,
the SYN-ACK we inject), through the socket API, and against this machine's kernel as the
server over TUN in a namespace (the second connection carries data in its SYN: the pcap
shows it and the kernel acknowledges it).
"""

from __future__ import annotations

import errno
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from netns_helpers import ServeProcess, namespace_fixture, tun_host
from pair import make_pair
from usertcp import MSG_FASTOPEN
from usertcp import socket as usocket
from usertcp.net import netns
from usertcp.net.pcap import read_pcap
from usertcp.tcp import fastopen
from usertcp.tcp.config import TFO_CLIENT_ENABLE, TFO_CLIENT_NO_COOKIE, StackConfig
from usertcp.tcp.connection import Connection, State
from usertcp.tcp.fastopen_client import TFO_DATA_NOT_ACKED, ClientTfo, CookieEntry
from usertcp.tcp.recovery import CA_LOSS
from usertcp.tcp.stack import Stack
from usertcp.wire import icmp
from usertcp.wire.packet import build_packet, parse_packet
from usertcp.wire.segment import ACK, PSH, RST, SYN, DropPacket, NotTcp, Segment
from usertcp.wire.tcp import encode_options

FAMILIES = {
    "ipv4": (bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]), "10.0.0.2"),
    "ipv6": (bytes.fromhex("fd00" + "00" * 13 + "01"), bytes.fromhex("fd00" + "00" * 13 + "02"), "fd00::2"),
}
TEXT = {"ipv4": ("10.0.0.1", "10.0.0.2"), "ipv6": ("fd00::1", "fd00::2")}
COOKIE = bytes.fromhex("0123456789abcdef")


class Peer:
    """One stack under test, talking to a hand-driven server (packets built by the test)."""

    def __init__(self, family: str, fastopen_bits: int = TFO_CLIENT_ENABLE, **cfg: float) -> None:
        self.local, self.remote, self.remote_text = FAMILIES[family]
        self.v6 = family == "ipv6"
        config = StackConfig(fastopen=fastopen_bits, timestamps=False)
        for key, val in cfg.items():
            setattr(config, key, val)
        self.stack = Stack([self.local], config)
        self.hooks = fastopen.install(self.stack)
        self.now = 0.0

    def cache(self, cookie: bytes | None = COOKIE, mss: int = 0, exp: bool = False) -> None:
        self.hooks.client.cache.entries[self.remote] = CookieEntry(cookie, exp=exp, mss=mss)

    def conn(self) -> Connection:
        return self.stack.create_connection(self.remote_text, 80)

    def out(self) -> list[Segment]:
        return [parse_packet(p.tobytes()) for p in self.stack.datagrams_to_send()]

    def at(self, t: float) -> list[Segment]:
        self.now = t
        self.stack.handle_timer(t)
        return self.out()

    def synack(self, c: Connection, syn: Segment, *, acked: int, cookie: bytes | None = None,
               mss: int = 1460, exp: bool = False, t: float | None = None) -> list[Segment]:
        if t is not None:
            self.now = t
        pkt = build_packet(src=self.remote, dst=self.local, sport=80, dport=c.local_port, seq=7000,
                           ack=(syn.seq + 1 + acked) & 0xFFFFFFFF, flags=SYN | ACK, window=65535,
                           options=encode_options(mss=mss, sack_permitted=True, wscale=7,
                                                  fastopen=cookie, fastopen_exp=exp))
        self.stack.receive(pkt.tobytes(), self.now)
        return self.out()


@pytest.fixture(params=sorted(FAMILIES))
def family(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_first_contact_sends_a_cookie_request_and_no_data(family: str) -> None:
    p = Peer(family)
    c = p.conn()
    assert fastopen.tfo_connect(c, b"x" * 100, 0.0) == 0       # nothing rides in the SYN
    (syn,) = p.out()
    assert syn.fastopen == b"" and not syn.fastopen_exp and len(syn.payload) == 0
    # The SYN retransmission drops the request (Linux: fo->cookie.len = -1 after the first SYN).
    (again,) = p.at(1.0)
    assert again.flags == SYN and again.fastopen is None
    # The answer (a cookie) is cached even after the timeout: it may have been spurious.
    p.synack(c, syn, acked=0, cookie=COOKIE, mss=1200, t=1.01)
    entry = p.hooks.client.cache.get(p.remote)
    assert entry is not None and entry.cookie == COOKIE and entry.mss == 1200
    assert c.state is State.ESTABLISHED and not c.syn_data_acked


def test_syn_data_size_is_cached_mss_less_option_space(family: str) -> None:
    """tcp_send_syn_data: min(path MSS, cached MSS, TCP_MAXSEG) - MAX_TCP_OPTION_SPACE (40)."""
    for cached, user_mss, want in ((0, 0, 1420 if family == "ipv4" else 1400), (940, 0, 900),
                                   (10000, 0, 1420 if family == "ipv4" else 1400), (1340, 1040, 1000)):
        p = Peer(family)
        p.cache(mss=cached)
        c = p.conn()
        c.user_mss = user_mss
        assert fastopen.tfo_connect(c, bytes(5000), 0.0) == want
        (syn,) = p.out()
        assert len(syn.payload) == want and syn.fastopen == COOKIE
        assert c.send_queue_bytes == want                          # the rest is not taken
    p = Peer(family)
    p.cache()
    assert fastopen.tfo_connect(p.conn(), b"short", 0.0) == 5       # never more than written


def test_fully_acked_syn_data_sets_syn_data_and_caches_the_new_cookie(family: str) -> None:
    p = Peer(family)
    p.cache()
    c = p.conn()
    fastopen.tfo_connect(c, b"GET /", 0.0)
    (syn,) = p.out()
    out = p.synack(c, syn, acked=5, cookie=bytes(6), mss=940, t=0.02)
    assert [s.flags for s in out] == [ACK]                          # only the 3rd ACK: all acked
    assert c.syn_data_acked and c.info()["tcpi_options"] & 32       # TCPI_OPT_SYN_DATA
    entry = p.hooks.client.cache.get(p.remote)
    assert entry is not None and entry.cookie == bytes(6) and entry.mss == 940
    assert p.stack.counters["TcpExtTCPFastOpenActive"] == 1
    assert c.rtt.srtt == pytest.approx(0.02)                        # RTT from the SYN-data exchange


def test_unacked_syn_data_is_resent_at_once(family: str) -> None:
    p = Peer(family)
    p.cache()
    c = p.conn()
    fastopen.tfo_connect(c, b"0123456789", 0.0)
    (syn,) = p.out()
    out = p.synack(c, syn, acked=0, t=0.02)                         # the server ignored the data
    data = [s for s in out if len(s.payload)]
    assert len(data) == 1 and bytes(data[0].payload) == b"0123456789"
    assert data[0].seq == (syn.seq + 1) & 0xFFFFFFFF
    assert not c.syn_data_acked
    st = c.tfo
    assert isinstance(st, ClientTfo) and st.client_fail == TFO_DATA_NOT_ACKED
    assert c.info()["tcpi_fastopen_client_fail"] == TFO_DATA_NOT_ACKED
    entry = p.hooks.client.cache.get(p.remote)
    assert entry is not None and entry.cookie == COOKIE and entry.syn_loss == 0   # not a loss


def test_unacked_syn_data_is_marked_lost_and_retransmitted_in_the_loss_state(family: str) -> None:
    """tcp_rcv_fastopen_synack: tcp_mark_skb_lost on the SYN's data skb, then
    tcp_non_congestion_loss_retransmit: a retransmission (tcpi_retrans, total_retrans,
    TcpRetransSegs) of its own skb (ACK|PSH), in the Loss state, not new data."""
    p = Peer(family)
    p.cache()
    c = p.conn()
    assert fastopen.tfo_connect(c, bytes(1300), 0.0) == 1300
    (syn,) = p.out()
    out = p.synack(c, syn, acked=100, mss=1000, t=0.02)            # a partial ACK, smaller MSS
    rtx = [s for s in out if len(s.payload)]                        # one skb, segmented (no GSO)
    assert [len(s.payload) for s in rtx] == [1000, 200] and rtx[0].seq == (syn.seq + 101) & 0xFFFFFFFF
    assert rtx[-1].flags == ACK | PSH
    info = c.info()
    assert info["tcpi_retrans"] == 2 and info["tcpi_total_retrans"] == 2   # two segments' worth
    assert info["tcpi_ca_state"] == CA_LOSS and info["tcpi_snd_cwnd"] == 10   # no cwnd cut
    assert p.stack.counters["TcpRetransSegs"] == 2
    # A later write is a new skb after the SYN's: new data, not counted as retransmitted.
    c.send(bytes(500), 0.02)
    (new,) = [s for s in p.out() if len(s.payload)]
    assert new.seq == (syn.seq + 1301) & 0xFFFFFFFF and len(new.payload) == 500
    assert c.info()["tcpi_retrans"] == 2
    ack = build_packet(src=p.remote, dst=p.local, sport=80, dport=c.local_port, seq=7001,
                       ack=(syn.seq + 1801) & 0xFFFFFFFF, flags=ACK, window=65535)
    p.stack.receive(ack.tobytes(), 0.04)
    info = c.info()
    assert info["tcpi_retrans"] == 0 and info["tcpi_ca_state"] == 0     # recovery point reached


def test_syn_data_lost_then_plain_synack_is_negatively_cached(family: str) -> None:
    """SYN timed out, and the SYN-ACK neither has a cookie nor covers the data: syn_loss++."""
    p = Peer(family)
    p.cache()
    c = p.conn()
    fastopen.tfo_connect(c, b"abc", 0.0)
    (syn,) = p.out()
    (again,) = p.at(1.0)
    assert again.flags == SYN and len(again.payload) == 0 and again.fastopen is None
    p.synack(c, syn, acked=0, t=1.05)
    entry = p.hooks.client.cache.get(p.remote)
    assert entry is not None and entry.syn_loss == 1 and entry.cookie == COOKIE


def test_unanswered_request_falls_back_to_the_experimental_option_once(family: str) -> None:
    """tcp_rcv_fastopen_synack try_exp: RFC 7413 option, then kind 254 once, then RFC for good."""
    p = Peer(family)
    seen = []
    for i in range(4):
        c = p.conn()
        fastopen.tfo_connect(c, b"", 0.0)
        (syn,) = p.out()
        seen.append(syn.fastopen_exp)
        assert syn.fastopen == b""
        p.synack(c, syn, acked=0)                                  # a server without TFO
        c.abort(p.now)
        p.out()
        del i
    assert seen == [False, True, False, False]


def test_exp_cookie_is_echoed_in_the_exp_form(family: str) -> None:
    p = Peer(family)
    c = p.conn()
    fastopen.tfo_connect(c, b"", 0.0)
    (syn,) = p.out()
    p.synack(c, syn, acked=0, cookie=COOKIE, exp=True)
    c2 = p.conn()
    fastopen.tfo_connect(c2, b"hi", 0.0)
    (syn2,) = p.out()
    assert syn2.fastopen == COOKIE and syn2.fastopen_exp and bytes(syn2.payload) == b"hi"


def test_unsolicited_cookie_is_ignored_in_cookieless_mode(family: str) -> None:
    p = Peer(family, TFO_CLIENT_ENABLE | TFO_CLIENT_NO_COOKIE)
    c = p.conn()
    assert fastopen.tfo_connect(c, b"data", 0.0) == 4
    (syn,) = p.out()
    assert syn.fastopen is None and bytes(syn.payload) == b"data"   # no option at all
    p.synack(c, syn, acked=4, cookie=COOKIE)
    entry = p.hooks.client.cache.get(p.remote)
    assert c.syn_data_acked and (entry is None or entry.cookie is None)


def test_per_socket_no_cookie_and_disabled_client(family: str) -> None:
    p = Peer(family)
    c = p.conn()
    assert fastopen.defer_connect(c, 0.0, no_cookie=True)           # TCP_FASTOPEN_NO_COOKIE
    assert fastopen.tfo_connect(c, b"abc", 0.0, no_cookie=True) == 3
    off = Peer(family, 0)
    with pytest.raises(OSError) as ei:
        fastopen.tfo_connect(off.conn(), b"abc", 0.0)
    assert ei.value.errno == errno.EOPNOTSUPP


def test_blackhole_pauses_active_fastopen(family: str) -> None:
    """Three timeouts in a row of a Fast Open SYN pause TFO for the blackhole timeout (doubling)."""
    p = Peer(family)
    p.stack.config.fastopen_blackhole_timeout = 3600.0
    p.stack.config.syn_retries = 2
    p.cache()
    c = p.conn()
    fastopen.tfo_connect(c, b"data", 0.0)
    p.out()
    t = 0.0
    while c.state is not State.CLOSED:
        nxt = p.stack.get_timer()
        assert nxt is not None
        t = nxt
        p.at(t)
    cache = p.hooks.client.cache
    assert cache.disable_times == 1 and p.stack.counters["TcpExtTCPFastOpenBlackhole"] == 1
    # While paused: no cookie, no data, no option (tcp_fastopen_active_should_disable).
    c2 = p.conn()
    assert not fastopen.defer_connect(c2, t)
    assert fastopen.tfo_connect(c2, b"data", t) == 0
    (syn,) = p.out()
    assert syn.fastopen is None and len(syn.payload) == 0
    # After the timeout Fast Open is tried again; a connection that then receives data shows
    # the path works, and its end forgets the blackhole (tcp_fastopen_active_disable_ofo_check).
    c3 = p.conn()
    assert fastopen.tfo_connect(c3, b"data", t + 3601) == 4
    (syn3,) = p.out()
    p.synack(c3, syn3, acked=4, t=t + 3601.01)
    reply = build_packet(src=p.remote, dst=p.local, sport=80, dport=c3.local_port, seq=7001,
                         ack=(syn3.seq + 5) & 0xFFFFFFFF, flags=ACK, window=512, payload=[b"ok"])
    p.stack.receive(reply.tobytes(), p.now)
    assert cache.disable_times == 1
    c3.abort(p.now)
    assert cache.disable_times == 0


def test_path_mtu_report_on_syn_data_resends_the_plain_syn(family: str) -> None:
    """tcp_simple_retransmit (c31b70c9968f): the SYN-data was too big, resend the SYN now."""
    p = Peer(family)
    p.cache()
    c = p.conn()
    fastopen.tfo_connect(c, bytes(1000), 0.0)
    (raw,) = [pkt.tobytes() for pkt in p.stack.datagrams_to_send()]
    mtu = 1280 if p.v6 else 800
    err = icmp.error_for_packet(raw, mtu=mtu)
    assert err is not None
    p.stack.receive(err, 0.01)
    (again,) = p.out()
    assert again.flags == SYN and len(again.payload) == 0 and again.fastopen is None
    assert again.mss == mtu - (60 if p.v6 else 40)
    assert c.total_retrans == 1 and c.state is State.SYN_SENT
    # The SYN-ACK does not cover the data: it goes again at once, in path-MTU-sized segments.
    syn = parse_packet(raw)
    out = p.synack(c, syn, acked=0, t=0.03)
    sizes = [len(s.payload) for s in out if len(s.payload)]
    assert sum(sizes) == 1000 and max(sizes) <= mtu - (60 if p.v6 else 40)
    entry = p.hooks.client.cache.get(p.remote)
    assert entry is not None and entry.syn_loss == 1                 # negatively cached


# --------------------------------------------------------------------------- socket API


def _hosts(family: str) -> tuple[usocket.Host, usocket.Host, str]:
    pair = make_pair(seed=3, cfg_a=StackConfig(fastopen=0x1), cfg_b=StackConfig(fastopen=0x2),
                     addresses=TEXT[family])
    return usocket.Host(pair.a, pair.driver), usocket.Host(pair.b, pair.driver), TEXT[family][1]


def test_socket_api_sendto_and_fastopen_connect(family: str) -> None:
    ch, sh, addr = _hosts(family)
    fam = usocket.AF_INET6 if family == "ipv6" else usocket.AF_INET
    srv = sh.socket(fam)
    srv.setsockopt(usocket.IPPROTO_TCP, usocket.TCP_FASTOPEN, 16)
    srv.bind((addr, 80))
    srv.listen()
    srv.settimeout(5)
    # Blocking sendto(MSG_FASTOPEN) with no cookie: connects, then sends everything.
    c = ch.socket(fam)
    c.settimeout(5)
    assert c.sendto(b"first", MSG_FASTOPEN, (addr, 80)) == 5
    s, _ = srv.accept()
    assert s.recv(10) == b"first" and not s.tcp_info()["tcpi_options"] & 32
    # A connected socket refuses MSG_FASTOPEN (EISCONN), as Linux's __inet_stream_connect.
    with pytest.raises(OSError) as ei:
        c.sendto(b"x", MSG_FASTOPEN, (addr, 80))
    assert ei.value.errno == errno.EISCONN
    # TCP_FASTOPEN_CONNECT with the cookie now cached: connect() returns at once, the write
    # goes in the SYN.
    c2 = ch.socket(fam)
    c2.setsockopt(usocket.IPPROTO_TCP, usocket.TCP_FASTOPEN_CONNECT, 1)
    c2.settimeout(5)
    c2.connect((addr, 80))
    conn = c2.connection
    assert conn is not None and conn.state is State.CLOSED          # no SYN yet
    assert c2.send(b"in the syn") == 10
    s2, _ = srv.accept()
    assert s2.recv(20) == b"in the syn" and s2.tcp_info()["tcpi_options"] & 32
    assert c2.tcp_info()["tcpi_options"] & 32
    # Non-blocking sendto with the cookie: returns what the SYN took.
    c3 = ch.socket(fam)
    c3.setblocking(False)
    assert c3.sendto(bytes(3000), MSG_FASTOPEN, (addr, 80)) == (1420 if family == "ipv4" else 1400)
    s3, _ = srv.accept()
    # sendall() as the first write of a deferred connect: the SYN takes its share, the rest follows.
    c4 = ch.socket(fam)
    c4.setsockopt(usocket.IPPROTO_TCP, usocket.TCP_FASTOPEN_CONNECT, 1)
    c4.settimeout(5)
    c4.connect((addr, 80))
    c4.sendall(bytes(range(256)) * 12)
    s4, _ = srv.accept()
    got = b""
    while len(got) < 3072:
        got += s4.recv(4096)
    assert got == bytes(range(256)) * 12 and s4.tcp_info()["tcpi_options"] & 32
    for sock in (c, c2, c3, c4, s, s2, s3, s4, srv):
        sock.close()


# --------------------------------------------------------------------------- kernel over TUN


@pytest.fixture
def ns() -> Iterator[str]:
    yield from namespace_fixture()


KERNEL = {"ipv4": ("10.77.0.1", "10.77.0.1/24", "10.77.0.2"), "ipv6": ("fd77::1", "fd77::1/64", "fd77::2")}


@pytest.mark.netns
@pytest.mark.parametrize("family", sorted(KERNEL))
def test_kernel_server_takes_our_syn_data(ns: str, tmp_path: Path, family: str) -> None:
    """usertcp as the client, this machine's kernel as the server: the first connection gets a
    cookie, the second carries its data in the SYN (pcap), which the kernel acknowledges."""
    peer, peer_cidr, us = KERNEL[family]
    v6 = family == "ipv6"
    netns.set_sysctl(ns, "net.ipv4.tcp_fastopen", "0x2")           # the kernel: server side
    server = netns.call_in_namespace(ns, socket.create_server, ("::" if v6 else "0.0.0.0", 7788),
                                     family=socket.AF_INET6 if v6 else socket.AF_INET)
    server.setsockopt(socket.IPPROTO_TCP, socket.TCP_FASTOPEN, 16)
    server.settimeout(15)
    got: list[bytes] = []

    def serve() -> None:
        for _ in range(2):
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                data = conn.recv(100)
                got.append(data)
                conn.sendall(data.upper())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    pcap = tmp_path / "tfo-client.pcap"
    stack = Stack([us], StackConfig(fastopen=0x1), name="tfo-client")
    try:
        with tun_host(ns, "uttfo0", peer_cidr, stack, pcap=pcap) as host:
            _kernel_round(host, peer, v6, b"first")
            _kernel_round(host, peer, v6, b"second")
        thread.join(10)
    finally:
        server.close()
    assert got == [b"first", b"second"]
    parsed = [_tcp(raw) for _, raw in read_pcap(pcap)]
    segs = [s for s in parsed if s is not None and 7788 in (s.sport, s.dport)]
    # Per connection (our port), the first SYN and the SYN-ACK. (A SYN may be retransmitted if
    # the kernel's new IPv6 address is still tentative; the retransmission is a plain SYN.)
    ports = list(dict.fromkeys(s.sport for s in segs if s.flags == SYN))
    assert len(ports) == 2
    syns = [next(s for s in segs if s.flags == SYN and s.sport == port) for port in ports]
    synacks = [next(s for s in segs if s.flags == SYN | ACK and s.dport == port) for port in ports]
    assert syns[0].fastopen == b"" and len(syns[0].payload) == 0      # the cookie request
    assert synacks[0].fastopen                                         # the kernel's cookie
    assert syns[1].fastopen == synacks[0].fastopen
    assert bytes(syns[1].payload) == b"second"                         # data in the SYN
    assert synacks[1].ack == (syns[1].seq + 1 + 6) & 0xFFFFFFFF         # ... which it took
    assert not any(s.flags & RST for s in segs)


def _tcp(raw: bytes) -> Segment | None:
    try:
        return parse_packet(raw, verify_checksum=False)
    except (DropPacket, NotTcp):
        return None                   # the kernel's neighbour discovery and the like


def _kernel_round(host: usocket.Host, peer: str, v6: bool, data: bytes) -> None:
    c = host.socket(usocket.AF_INET6 if v6 else usocket.AF_INET)
    c.setsockopt(usocket.IPPROTO_TCP, usocket.TCP_FASTOPEN_CONNECT, 1)
    c.settimeout(10)
    try:
        c.connect((peer, 7788))
        assert c.send(data) == len(data)
        deadline = time.monotonic() + 10
        reply = b""
        while len(reply) < len(data) and time.monotonic() < deadline:
            reply += c.recv(100)
        assert reply == data.upper()
    finally:
        c.close()


def _kernel_client(peer: str, v6: bool, size: int) -> tuple[int, int]:
    """This machine's kernel as a non-blocking Fast Open client: (errno of a sendto with no
    cookie yet, bytes a sendto of ``size`` takes once the cookie is cached)."""
    fam = socket.AF_INET6 if v6 else socket.AF_INET
    first = socket.socket(fam, socket.SOCK_STREAM)
    first.setblocking(False)
    try:
        first.sendto(bytes(size), socket.MSG_FASTOPEN, (peer, 9))
        err = 0
    except BlockingIOError as exc:
        err = exc.errno or 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:             # wait for the handshake (the cookie)
        try:
            first.send(b"")
            break
        except BlockingIOError:
            time.sleep(0.01)
    first.close()
    second = socket.socket(fam, socket.SOCK_STREAM)
    second.setblocking(False)
    try:
        return err, second.sendto(bytes(size), socket.MSG_FASTOPEN, (peer, 9))
    finally:
        time.sleep(0.2)
        second.close()


@pytest.mark.netns
@pytest.mark.parametrize("family", sorted(KERNEL))
def test_kernel_client_agrees_on_syn_data(ns: str, tmp_path: Path, family: str) -> None:
    """The kernel as the client, usertcp as the server: the kernel's non-blocking sendto answers
    EINPROGRESS without a cookie and then puts as much in its SYN as our model computes."""
    _kernel_ip, peer_cidr, us = KERNEL[family]
    v6 = family == "ipv6"
    netns.set_sysctl(ns, "net.ipv4.tcp_fastopen", "0x1")
    pcap = tmp_path / "kernel-client.pcap"
    with ServeProcess(ns, "--tun", "uttfo1", "--address", us, "--peer-address", peer_cidr, "--app", "discard",
                      "--fastopen", "--pcap", str(pcap), "--quiet") as srv:
        err, took = netns.call_in_namespace(ns, _kernel_client, us, v6, 5000)
        assert srv.stop() == 0, srv.stderr
    assert err == errno.EINPROGRESS
    segs = [s for s in (_tcp(raw) for _, raw in read_pcap(pcap)) if s is not None]
    ports = list(dict.fromkeys(s.sport for s in segs if s.flags == SYN))
    syns = [next(s for s in segs if s.flags == SYN and s.sport == port) for port in ports]
    assert len(syns) == 2 and syns[0].fastopen == b"" and len(syns[0].payload) == 0
    assert len(syns[1].payload) == took and syns[1].fastopen
    synack = next(s for s in segs if s.flags == SYN | ACK)
    # Our client in the kernel's place: same MTU, the same server MSS cached.
    p = Peer(family)
    p.stack.config.mtu = 1500
    p.cache(mss=synack.mss)
    assert fastopen.tfo_connect(p.conn(), bytes(5000), 0.0) == took
