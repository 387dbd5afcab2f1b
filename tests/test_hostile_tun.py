"""Martian sources over a real link (issue 20 point 4): ``usertcp serve`` on a TUN device in a
namespace, and SYNs with forged sources written by a raw socket on the kernel's side. The
stack answers the kernel's own address and nobody else: no SYN-ACK to a loopback, broadcast,
multicast or own source; each drop is counted in the stats file.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from netns_helpers import TCP_SYN, ServeProcess, build_tcp, namespace_fixture
from usertcp.net import netns
from usertcp.net.pcap import read_pcap
from usertcp.wire.packet import parse_packet
from usertcp.wire.segment import ACK, SYN, DropPacket

DEV = "ut0"
PEER, US = "10.77.0.1", "10.77.0.2"
FORGED = ["127.0.0.1", "224.0.0.1", "255.255.255.255", US]


@pytest.fixture
def ns() -> Iterator[str]:
    yield from namespace_fixture()


def _send_raw(packets: list[bytes]) -> None:
    """In the namespace: write whole IP packets (forged sources included) towards US."""
    with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW) as s:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
        for pkt in packets:
            s.sendto(pkt, (US, 0))


@pytest.mark.timeout(60)
def test_forged_sources_over_tun_get_no_syn_ack(ns: str, tmp_path: Path) -> None:
    pcap = tmp_path / "us.pcap"
    stats = tmp_path / "stats.json"
    with ServeProcess(ns, "--tun", DEV, "--address", US, "--peer-address", f"{PEER}/24", "--app", "echo",
                      "--quiet", "--pcap", str(pcap), "--stats-file", str(stats),
                      "--stats-interval", "0.1"):
        packets = []
        for i, src in enumerate([*FORGED, PEER]):
            head, _ = build_tcp(src, US, 51000 + i, 7, 1000, 0, TCP_SYN)
            packets.append(head)
        netns.call_in_namespace(ns, _send_raw, packets)
        counters: dict[str, int] = {}
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            time.sleep(0.2)
            if stats.exists():
                try:
                    counters = json.loads(stats.read_text()).get("counters", {})
                except ValueError:
                    continue
                if counters.get("TcpPassiveOpens", 0) + counters.get("UsertcpInMartianSrc", 0) >= 1 \
                        and counters.get("UsertcpInMartianSrc", 0) >= 1:
                    break
    synacks = []
    for _, raw in read_pcap(pcap):
        try:
            seg = parse_packet(raw, verify_checksum=False)
        except DropPacket:
            continue
        if seg.flags & SYN and seg.flags & ACK:
            synacks.append(socket.inet_ntoa(seg.dst))
    # The kernel may itself refuse to emit some forged sources; whatever reached us was dropped.
    assert synacks and set(synacks) == {PEER}, synacks
    assert counters.get("UsertcpInMartianSrc", 0) >= 1, counters
