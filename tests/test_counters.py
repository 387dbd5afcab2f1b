"""The counters mapping: per-segment counters in a native block, shown under Linux names."""

from __future__ import annotations

from pair import make_pair
from usertcp.net.memnet import LinkConfig
from usertcp.obs.counters import nstat
from usertcp.tcp.counters import HOT_NAMES, Counters


def test_hot_counters_read_and_write_under_their_linux_names() -> None:
    c = Counters()
    assert c["TcpInSegs"] == 0 and "TcpInSegs" not in c and c.get("TcpInSegs", -1) == -1
    c.hot.in_segs += 3
    c.hot.count_ecn_in(True, 2)
    c.hot.count_ecn_in(False, 3)
    assert c["TcpInSegs"] == 3 and "TcpInSegs" in c and c.get("TcpInSegs") == 3
    assert c["IpExtInECT0Pkts"] == 1 and c["Ip6InCEPkts"] == 1 and c["IpExtInCEPkts"] == 0
    # A hot name also counted in the dict (code that predates the block) reads as the sum.
    c.table["TcpInSegs"] += 2
    c.table["TcpExtListenDrops"] += 1
    assert c["TcpInSegs"] == 5
    assert c.snapshot() == {"Ip6InCEPkts": 1, "IpExtInECT0Pkts": 1, "TcpExtListenDrops": 1, "TcpInSegs": 5}
    assert dict(c.items()) == c.snapshot() and sorted(c) == sorted(c.snapshot()) and len(c) == 4
    c["TcpInSegs"] = 7                       # one value again, in the block
    assert c["TcpInSegs"] == 7 and c.hot.in_segs == 7 and "TcpInSegs" not in c.table
    for i, name in enumerate(HOT_NAMES):
        c[name] = 100 + i
    assert [c[n] for n in HOT_NAMES] == [100 + i for i in range(len(HOT_NAMES))]
    assert list(c.hot.values()) == [100 + i for i in range(len(HOT_NAMES))]
    c.clear()
    assert c.snapshot() == {} and not any(c.hot.values())


def test_fast_path_ratio_counts_hot_and_table() -> None:
    c = Counters()
    assert c.fast_path_ratio() == 0.0
    c.hot.hp_hits = 2
    c.hot.hp_acks = 1
    c.hot.slow_path_segs = 1
    assert c.fast_path_ratio() == 0.75


def test_a_transfer_counts_segments_once_each() -> None:
    """TcpOutSegs of one side equals TcpInSegs of the other on a lossless link, and nstat
    shows the hot counters beside the dict's."""
    p = make_pair(LinkConfig(delay=0.001), seed=3)
    a, b, drv = p.a, p.b, p.driver
    c, s = p.open(80, timeout=5)
    sent = got = 0
    while got < 200_000:
        if sent < 200_000:
            sent += c.send(bytes(200_000 - sent), drv.now())
        assert drv.run_until(lambda: s.readable_bytes > 0, 10)
        got += len(s.recv(1 << 20, drv.now()))
    drv.run_until_idle(1)
    assert a.counters["TcpOutSegs"] == b.counters["TcpInSegs"] > 140
    assert b.counters["TcpOutSegs"] == a.counters["TcpInSegs"] > 0
    assert b.counters["TcpExtTCPHPHits"] > 100 and a.counters["TcpExtTCPHPAcks"] > 0
    assert b.counters["IpExtInNoECTPkts"] + b.counters["IpExtInECT0Pkts"] == b.counters["TcpInSegs"]
    shown = nstat(b)
    assert shown["TcpInSegs"] == b.counters["TcpInSegs"] and shown["TcpPassiveOpens"] == 1
