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
