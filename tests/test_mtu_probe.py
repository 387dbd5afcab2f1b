"""RFC 4821 MTU probing (Linux tcp_mtu_probe and friends) and the route metrics it reads:
over an ICMP black hole the probes find the path MTU; route advmss/mtu/initcwnd as ``ip
route`` sets them, from the stack config and from drill commands."""

from __future__ import annotations

from pathlib import Path

import pytest

from pair import A_ADDR, B_ADDR, make_pair, sha, transfer
from usertcp.drill.profile import CommandError, Environment, Unsupported, linux_config
from usertcp.net.memnet import LinkConfig
from usertcp.tcp.config import StackConfig
from usertcp.tcp.route import RouteMetrics, RouteTable, parse_route_metrics
from usertcp.tcp.rtx_queue import SentSegment

TS = 12          # timestamp option bytes in every segment


def _probing(mode: int = 2, base_mss: int = 1024) -> StackConfig:
    cfg = StackConfig()
    assert cfg.apply_sysctl("net.ipv4.tcp_mtu_probing", str(mode))
    assert cfg.apply_sysctl("net.ipv4.tcp_base_mss", str(base_mss))
    return cfg


@pytest.mark.parametrize("addresses", [(A_ADDR, B_ADDR), ("fd00::a", "fd00::b")])
def test_probing_finds_the_mtu_of_an_icmp_black_hole(addresses: tuple[str, str]) -> None:
    """A 1300-byte hop drops bigger packets without telling anyone. Without probing the
    transfer cannot even start (every full segment vanishes); with tcp_mtu_probing=2 the
    sender starts at tcp_base_mss and its probes climb to the largest MSS that fits."""
    v6 = ":" in addresses[0]
    pair = make_pair(LinkConfig(delay=0.005, mtu=1300, mtu_icmp=False), cfg_a=_probing(),
                     addresses=addresses)
    client, server = pair.open()
    data = bytes(range(256)) * 4096      # enough for the search to narrow below the threshold
    got = transfer(pair, client, server, data)
    assert sha(got) == sha(data)
    fits = 1300 - (60 if v6 else 40) - TS
    assert client.mss <= fits and client.mss > fits - 8       # within tcp_probe_threshold
    assert client.pmtu == 0                                    # no ICMP ever came
    counters = pair.a.counters
    assert counters["TcpExtTCPMTUPSuccess"] >= 1 and counters["TcpExtTCPMTUPFail"] >= 1
    assert pair.link.directions[0].stats.too_big == counters["TcpExtTCPMTUPFail"]
    # A lost probe resends the probe alone (tcp_simple_retransmit marks what tcp_skb_seglen
    # says is longer than the MSS): the multi-segment packets around it are not lost.
    assert counters["TcpRetransSegs"] <= 4 * counters["TcpExtTCPMTUPFail"]


def test_seglen_is_the_mss_a_packet_went_out_with() -> None:
    """Linux tcp_skb_seglen(): a multi-segment packet's segments are its MSS long, whatever its
    length; a single-segment one (an MTU probe) is as long as its payload; cuts keep the MSS."""
    tso = SentSegment(1, 1 + 3 * 1000, False, 0.0, gso_size=1000)
    assert tso.seglen == 1000
    tail = tso.split(2001)
    assert (tso.seglen, tail.seglen) == (1000, 1000)
    assert SentSegment(1, 1 + 1300, False, 0.0).seglen == 1300
    assert SentSegment(1, 1 + 500, True, 0.0, gso_size=1000).seglen == 499    # FIN not counted


def test_no_probing_keeps_the_mss_and_succeeds_only_with_icmp() -> None:
    pair = make_pair(LinkConfig(delay=0.005, mtu=1300), cfg_a=_probing(mode=0))
    client, server = pair.open()
    data = bytes(200_000)
    assert transfer(pair, client, server, data) == data
    assert client.mss == 1300 - 40 - TS and client.pmtu == 1300      # RFC 1191 did it
    assert pair.a.counters["UsertcpMtuProbes"] == 0


def test_probing_on_a_clean_path_climbs_to_the_peer_mss() -> None:
    pair = make_pair(LinkConfig(delay=0.005), cfg_a=_probing())
    client, server = pair.open()
    assert client.mss == 1024               # tcp_base_mss bounds the MSS until a probe succeeds
    data = bytes(400_000)
    assert transfer(pair, client, server, data) == data
    assert 1400 < client.mss <= 1460 - TS and pair.a.counters["TcpExtTCPMTUPFail"] == 0
    assert pair.a.counters["TcpExtTCPMTUPSuccess"] >= 3         # a binary search upwards


def test_black_hole_detection_after_timeouts_lowers_the_mss() -> None:
    """tcp_mtu_probing=1: a path that silently drops full-sized segments times out; after
    tcp_retries1 timeouts probing turns on (search_low at tcp_base_mss) and the data flows."""
    pair = make_pair(LinkConfig(delay=0.005, mtu=1200, mtu_icmp=False), cfg_a=_probing(mode=1))
    client, server = pair.open()
    data = bytes(100_000)
    assert transfer(pair, client, server, data, timeout=300.0) == data
    assert pair.a.counters["UsertcpMtuBlackHoles"] >= 1
    assert client.mss <= 1200 - 40 - TS


def test_route_metrics_from_the_stack_config() -> None:
    cfg = StackConfig()
    cfg.routes.set(B_ADDR, RouteMetrics(mtu=1000, mtu_locked=True, advmss=900, initcwnd=4))
    pair = make_pair(LinkConfig(delay=0.005), cfg_a=cfg)
    client, server = pair.open()
    assert client.mss == 1000 - 40 - TS                 # the route's MTU
    assert server.peer_mss == 900                       # our SYN advertised the route's advmss
    assert client.cc.cwnd == 4 * client.mss             # initcwnd
    assert transfer(pair, client, server, bytes(50_000)) == bytes(50_000)


def test_route_table_and_parsing() -> None:
    table = RouteTable()
    gen = table.generation
    words = "via 192.168.0.2 dev tun0 advmss 600 mtu lock 640 initcwnd 11"
    table.set("192.0.2.1", parse_route_metrics(words.split()))
    assert table.generation == gen + 1
    route = table.lookup(bytes([192, 0, 2, 1]))
    assert route == RouteMetrics(mtu=640, mtu_locked=True, advmss=600, initcwnd=11)
    assert table.delete("192.0.2.1") and not table.delete("192.0.2.1")
    for bad in ("rtt 3", "mtu 20", "advmss lock 3", "mtu"):
        with pytest.raises(ValueError):
            parse_route_metrics(bad.split())


def test_drill_route_commands(tmp_path: Path) -> None:
    env = Environment(linux_config(), lambda: None, tmp_path, peer="192.0.2.1")
    env.run("ip route change 192.0.2.1 via 192.168.0.2 dev tun0 advmss 600 mtu lock 640")
    route = env.config.routes.lookup(bytes([192, 0, 2, 1]))
    assert route is not None and route.mtu == 640 and route.advmss == 600
    with pytest.raises(CommandError):               # no such route: the kernel says ENOENT
        env.run("ip route change 192.0.2.9 dev tun0 mtu 1000")
    with pytest.raises(Unsupported):
        env.run("ip route change 192.0.2.1 dev eth7 mtu 1000")
    with pytest.raises(Unsupported):
        env.run("ip route change 192.0.2.1 dev tun0 rtt 10")
    env.run("sysctl -q net.ipv4.tcp_mtu_probing=1 net.ipv4.tcp_probe_interval=30")
    assert env.config.mtu_probing == 1 and env.config.probe_interval == 30.0
    with pytest.raises(CommandError):
        env.run("sysctl -q net.ipv4.tcp_mtu_probing=3")
