"""Hostile peers over a real link (issue 20 points 1 and 4), ``usertcp serve`` on a TUN device
in a namespace against the kernel's side:

- martian sources: SYNs with forged sources written by a raw socket. The stack answers the
  kernel's own address and nobody else: no SYN-ACK to a loopback, broadcast, multicast or own
  source; each drop is counted in the stats file;
- zero-window hoarders: kernel clients of echo that write and never read until the stack's
  account is used up; a new client is still served.
"""

from __future__ import annotations

import contextlib
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


def _hoarders(n: int) -> list[socket.socket]:
    """In the namespace: ``n`` kernel clients of echo that will write and never read."""
    socks = []
    for _ in range(n):
        s = socket.create_connection((US, 7), timeout=10)
        s.setblocking(False)
        socks.append(s)
    return socks


def _push(socks: list[socket.socket], blob: bytes) -> int:
    """Each writes what its send buffer takes, without blocking; bytes written."""
    total = 0
    for s in socks:
        with contextlib.suppress(BlockingIOError):
            total += s.send(blob)
    return total


def _read_stats(path: Path) -> dict[str, int]:
    try:
        return dict(json.loads(path.read_text()).get("counters", {}))
    except (OSError, ValueError):
        return {}


@pytest.mark.timeout(120)
def test_zero_window_hoarders_over_tun_do_not_lock_out_a_new_client(ns: str, tmp_path: Path) -> None:
    """Issue 20 point 1 as reported: kernel clients connect to ``usertcp serve --app echo``,
    write and never read, until the stack's account (``--mem-limit``, Linux tcp_mem) is used
    up and memory pressure begins. A new client is still served: its request comes back."""
    stats = tmp_path / "stats.json"
    with ServeProcess(ns, "--tun", DEV, "--address", US, "--peer-address", f"{PEER}/24", "--app", "echo",
                      "--quiet", "--mem-limit", "4M", "--stats-file", str(stats), "--stats-interval", "0.2"):
        hoarders = netns.call_in_namespace(ns, _hoarders, 8)
        try:
            blob = bytes(256 << 10)
            pushed = idle = 0
            counters: dict[str, int] = {}
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and idle < 10:      # until a full second blocked
                n = _push(hoarders, blob)
                pushed += n
                idle = idle + 1 if n == 0 else 0
                time.sleep(0.1)
            counters = _read_stats(stats)
            # Held: the echo backlogs (1 MiB each), then the stack's buffers up to its limit.
            assert idle >= 10 and pushed > 8 * (1 << 20) + (4 << 20), pushed
            assert counters.get("TcpExtTCPMemoryPressures", 0) >= 1, (pushed, counters)
            legit = netns.call_in_namespace(ns, socket.create_connection, (US, 7), 10)
            with legit:
                request = bytes(range(256)) * 8
                legit.sendall(request)
                got = bytearray()
                legit.settimeout(20)
                while len(got) < len(request):
                    chunk = legit.recv(65536)
                    if not chunk:
                        break
                    got += chunk
                assert bytes(got) == request
        finally:
            for s in hoarders:
                s.close()
