"""The link MTU a run uses: packetdrill's own default (TUN_DRIVER_DEFAULT_MTU, 1500) unless
--mtu says otherwise; the upstream runners pass --mtu=1520 for IPv6 (an MSS of 1460, as over
IPv4), which is the corpus table's IPv6 profile.  On this machine's kernel an IPv6 SYN over a
1500-byte link carries MSS 1440, over 1520 MSS 1460 (checked with a veth pair in a namespace)."""

from __future__ import annotations

from pathlib import Path

import pytest

from usertcp.drill.runner import RunOptions, run_file

ROOT = Path(__file__).resolve().parents[1]
_CANDIDATES = (ROOT.parent / "shared" / "packetdrill", Path("/work/shared/packetdrill"))
CORPUS = next((p for p in _CANDIDATES if p.is_dir()), None)
SCRIPT = "gtests/net/tcp/fastopen/client/syn-data-icmp-unreach-frag-needed-with-seq-ipv6.pkt"

pytestmark = pytest.mark.skipif(CORPUS is None, reason="packetdrill corpus not found")


def test_ipv6_syn_data_and_packet_too_big_at_packetdrills_default_mtu() -> None:
    """MSS 1440 at MTU 1500; the SYN-data (1400 = MSS - 40) meets an ICMPv6 packet-too-big for
    1400, the plain SYN is resent at once with MSS 1340 (tcp_simple_retransmit)."""
    assert CORPUS is not None
    res = run_file(CORPUS / SCRIPT, RunOptions(ip_version="ipv6", options={"mtu": "1500"}))
    assert res.status == "passed", f"{res.line}: {res.reason}"


def test_the_runners_ipv6_mtu_gives_mss_1460() -> None:
    assert CORPUS is not None
    res = run_file(CORPUS / SCRIPT, RunOptions(ip_version="ipv6"))
    assert res.status == "failed" and res.line == 13 and "actual mss 1460" in res.reason


# google/packetdrill's run_all.py, StartTestIPv6: packetdrill's built-in IPv6 addresses (config.c
# DEFAULT_V6_LIVE_*), which mtu_probe/basic-v6.pkt names in its `ip -6 route change` commands.
RUN_ALL_IPV6 = {"mtu": "1520", "local_ip": "fd3d:fa7b:d17d::0", "gateway_ip": "fd3d:fa7b:d17d:8888::0",
                "remote_ip": "2001:DB8::1"}
MTU_PROBE_V6 = "gtests/net/tcp/mtu_probe/basic-v6.pkt"


def test_mtu_probe_v6_passes_with_the_addresses_its_route_commands_name() -> None:
    """With run_all.py's IPv6 addresses the route to 2001:DB8::1 exists: after its MTU rises from
    660 to 1520 the next write starts with a 986-byte RFC 4821 probe among 600-byte segments,
    and the write after the probe's ACK uses the larger MSS; with the corpus table's (ksft)
    addresses that route does not exist (ENOENT, as the kernel would answer)."""
    assert CORPUS is not None
    res = run_file(CORPUS / MTU_PROBE_V6, RunOptions(ip_version="ipv6", options=RUN_ALL_IPV6))
    assert res.status == "passed", f"{res.line}: {res.reason}"
    res = run_file(CORPUS / MTU_PROBE_V6, RunOptions(ip_version="ipv6"))
    assert res.status == "failed" and res.line == 15 and "No such file or directory" in res.reason
