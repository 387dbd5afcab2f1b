"""Accurate ECN against this machine's kernel over TUN, in a namespace the test makes.

Linux 6.18 carries the whole AccECN machinery but caps ``net.ipv4.tcp_ecn`` at 2
(``tcp_ecn_mode_max``; "tcp: accecn: enable AccECN" raised it to 5 after 6.18): writing 3
fails with EINVAL. Its negotiation already asks for and accepts AccECN for a congestion
control flagged ``TCP_CONG_NEEDS_ACCECN`` (``tcp_ecn_send_syn``, ``tcp_ecn_create_request``),
so where the sysctl is refused the kernel's sockets use such a controller, Reno loaded as BPF
struct_ops for the test's lifetime (tests/bpf_accecn_ca.py). So:

- **Fallbacks**: our AccECN client (``tcp_ecn=3``) meets the kernel's listener with
  ``tcp_ecn=2`` (RFC 3168 answer: ECE alone) and ``tcp_ecn=0`` (no ECN); the kernel's RFC
  3168 client (``tcp_ecn=1``) meets our AccECN listener. Checked in a pcap and in the
  kernel's ``tcp_info``.
- **AccECN both ways** (``tcp_ecn=3`` in the namespace, or the BPF controller; skipped only
  where neither is possible): usertcp as client and as server, the handshake's ACE
  encodings, ECT(0), the option both ways in a pcap, and the kernel's tcp_info AccECN
  counters against ours, with every few of our data packets CE-marked on the way out (as a
  marking router would).

(iproute2 6.1's ``ss -ti`` on this machine prints no ECN or AccECN field at all, only the
controller's name: the kernel's ``tcp_info`` is the evidence; ss's lines go to the log.)
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bpf_accecn_ca import AccEcnCongestionControl
from netns_helpers import namespace_fixture, tun_host
from usertcp import socket as usocket
from usertcp.net import netns
from usertcp.net.pcap import read_pcap
from usertcp.tcp.accecn import OPT_COUNTER_SEEN, ace_of
from usertcp.tcp.config import StackConfig
from usertcp.tcp.info import TCPI_OPT_ECN, TCPI_OPT_ECN_SEEN
from usertcp.tcp.stack import Stack
from usertcp.wire.accecn import parse_accecn
from usertcp.wire.packet import parse_packet
from usertcp.wire.segment import ACK, ECN_CE, ECN_ECT0, SYN, Buffer, DropPacket, NotTcp, Segment, TxPacket

pytestmark = pytest.mark.netns

KERNEL, KERNEL_CIDR, US = "10.77.0.1", "10.77.0.1/24", "10.77.0.2"
PORT = 7799
SIZE = 300_000
MARK_EVERY = 7            # every 7th data packet we send leaves CE-marked

# struct tcp_info (include/uapi/linux/tcp.h, Linux 6.18): the AccECN fields at the end.
TCPI_LEN = 280
_S_ACCECN = struct.Struct("=7I2H")        # tcpi_received_ce .. tcpi_accecn_opt_seen, offset 248
ACCECN_FIELDS = ("tcpi_received_ce", "tcpi_delivered_e1_bytes", "tcpi_delivered_e0_bytes",
                 "tcpi_delivered_ce_bytes", "tcpi_received_e1_bytes", "tcpi_received_e0_bytes",
                 "tcpi_received_ce_bytes", "tcpi_accecn_fail_mode", "tcpi_accecn_opt_seen")


@pytest.fixture
def ns() -> Iterator[str]:
    yield from namespace_fixture()


@pytest.fixture
def kernel_accecn(ns: str) -> Iterator[bytes | None]:
    """The kernel side of the namespace made to negotiate AccECN: ``net.ipv4.tcp_ecn=3``
    (None: nothing more to do), or, where the kernel refuses it (Linux 6.18), the name of a
    ``TCP_CONG_NEEDS_ACCECN`` controller for the kernel's sockets (``TCP_CONGESTION``).
    Skips where neither works."""
    try:
        netns.set_sysctl(ns, "net.ipv4.tcp_ecn", "3")
    except OSError as exc:
        refused = exc
    else:
        yield None
        return
    try:
        cc = AccEcnCongestionControl(f"utacc{os.getpid() % 100000}")
    except (OSError, ValueError) as exc:
        pytest.skip(f"this kernel refuses net.ipv4.tcp_ecn=3 ({refused}) and a BPF controller "
                    f"with TCP_CONG_NEEDS_ACCECN ({exc})")
    with cc:
        yield cc.name.encode()


def _use_cc(sock: socket.socket, cc: bytes | None) -> socket.socket:
    if cc is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc)
    return sock


def kernel_info(sock: socket.socket) -> dict[str, int]:
    """The kernel's tcp_info of ``sock``: options, delivered, delivered_ce and the AccECN
    fields (skips the test on a kernel that has none)."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 512)
    if len(raw) < TCPI_LEN:
        pytest.skip(f"kernel tcp_info has {len(raw)} bytes: no AccECN fields (Linux < 6.18)")
    out = dict(zip(ACCECN_FIELDS, _S_ACCECN.unpack_from(raw, 248), strict=True))
    out["tcpi_options"] = raw[5]
    out["tcpi_delivered"], out["tcpi_delivered_ce"] = struct.unpack_from("=II", raw, 192)
    return out


class CeMarker:
    """The stack as the TUN driver's endpoint, with every ``MARK_EVERY``-th outgoing data
    packet's ECN field rewritten to CE (and the IPv4 header checksum fixed), as a router
    with a marking queue would (RFC 3168 §5). Counts what it marked."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.data_packets = 0
        self.marked = 0
        self.marked_bytes = 0

    def receive(self, packet: Buffer, now: float, *, checksum_verified: bool = False) -> None:
        self.stack.receive(packet, now, checksum_verified=checksum_verified)

    def get_timer(self) -> float | None:
        return self.stack.get_timer()

    def handle_timer(self, now: float) -> None:
        self.stack.handle_timer(now)

    def datagrams_to_send(self) -> list[TxPacket]:
        out = self.stack.datagrams_to_send()
        for i, pkt in enumerate(out):
            hdr = pkt.header
            plen = len(pkt) - (hdr[0] & 0xF) * 4 - (hdr[(hdr[0] & 0xF) * 4 + 12] >> 4) * 4
            if plen <= 0 or hdr[1] & 3 != ECN_ECT0:
                continue
            self.data_packets += 1
            if self.data_packets % MARK_EVERY:
                continue
            h = bytearray(hdr)
            h[1] |= ECN_CE
            h[10:12] = b"\0\0"
            total = sum(struct.unpack("!10H", bytes(h[:20])))
            while total > 0xFFFF:
                total = (total & 0xFFFF) + (total >> 16)
            h[10:12] = struct.pack("!H", ~total & 0xFFFF)
            out[i] = TxPacket(bytes(h), pkt.payload)
            self.marked += 1
            self.marked_bytes += plen
        return out


def _recv_count(sock: socket.socket | usocket.Socket, size: int) -> int:
    """Read until ``size`` bytes came or the peer closed; how many came."""
    n = 0
    while n < size:
        chunk = sock.recv(65536)
        if not chunk:
            break
        n += len(chunk)
    return n


def _ss() -> str:
    return subprocess.run(["ss", "-tin", "state", "established"], capture_output=True,
                          text=True, check=False).stdout


def _in_ns_thread(ns: str, target: Callable[..., None], *args: object) -> threading.Thread:
    """``target(*args)`` run in namespace ``ns`` on a started daemon thread."""
    thread = threading.Thread(target=lambda: netns.call_in_namespace(ns, target, *args), daemon=True)
    thread.start()
    return thread


def _listen(host: usocket.Host) -> usocket.Socket:
    lst = host.socket(usocket.AF_INET)
    lst.bind((US, PORT))
    lst.listen(4)
    lst.settimeout(15)
    return lst


def _handshake(segs: list[Segment]) -> tuple[Segment, Segment]:
    """The SYN and the SYN-ACK among ``segs``."""
    syn = next(s for s in segs if s.flags & SYN and not s.flags & ACK)
    synack = next(s for s in segs if s.flags & SYN and s.flags & ACK)
    return syn, synack


def _check_accecn_counters(info: dict[str, int], ours: dict[str, int], marker: CeMarker) -> None:
    """AccECN negotiated on both sides, and the kernel counted our CE marks exactly, as its
    feedback told us."""
    # The kernel negotiated AccECN: TCPI_OPT_ECN (any ECN mode in 6.18's tcp_get_info) and ECN
    # seen, as ours; AccECN rather than RFC 3168: the counters and the option both ways.
    assert info["tcpi_options"] & (TCPI_OPT_ECN | TCPI_OPT_ECN_SEEN) == TCPI_OPT_ECN | TCPI_OPT_ECN_SEEN
    assert ours["tcpi_options"] & (TCPI_OPT_ECN | TCPI_OPT_ECN_SEEN) == TCPI_OPT_ECN | TCPI_OPT_ECN_SEEN
    assert info["tcpi_accecn_opt_seen"] == OPT_COUNTER_SEEN and info["tcpi_accecn_fail_mode"] == 0
    assert marker.marked > 5
    assert info["tcpi_received_ce"] == marker.marked == ours["tcpi_delivered_ce"]
    assert info["tcpi_received_ce_bytes"] == marker.marked_bytes == ours["tcpi_delivered_ce_bytes"]


def _segments(pcap: Path) -> list[Segment]:
    out = []
    for _, raw in read_pcap(pcap):
        try:
            seg = parse_packet(raw, verify_checksum=False)
        except (DropPacket, NotTcp):
            continue
        if PORT in (seg.sport, seg.dport):
            out.append(seg)
    return out


def _check_wire(segs: list[Segment], client_is_us: bool) -> None:
    """RFC 9768 on the wire, whoever is the client: AE|CWR|ECE SYN; the SYN-ACK's ACE 010
    (the SYN arrived Not-ECT); the client's handshake ACK 010 (so did the SYN-ACK); then
    ECT(0) everywhere and the AccECN option from both sides."""
    us = socket.inet_aton(US)
    syn, synack = _handshake(segs)
    assert ace_of(syn.flags) == 7 and syn.accecn is None
    assert ace_of(synack.flags) == 0b010
    assert synack.accecn is not None and parse_accecn(synack.accecn)[1][:1] == (1,)   # EE1B starts at 1
    after = segs[segs.index(synack) + 1:]
    third = after[0]
    assert (third.src == us) == client_is_us and ace_of(third.flags) == 0b010 and not third.payload
    rest = after[1:]
    assert all(s.ecn in (ECN_ECT0, ECN_CE) for s in rest)
    for side in (True, False):
        mine = [s for s in rest if (s.src == us) == side]
        assert mine and any(s.accecn is not None for s in mine), f"no AccECN option from {side=}"


def _kernel_server(server: socket.socket, got: dict[str, object]) -> None:
    conn, _ = server.accept()
    with conn:
        n = _recv_count(conn, SIZE)
        conn.sendall(b"x" * 20_000)
        time.sleep(0.3)                       # our last ACKs arrive
        got["bytes"] = n
        got["info"] = kernel_info(conn)
        got["ss"] = _ss()


@pytest.mark.timeout(60)
def test_usertcp_client_kernel_server(ns: str, tmp_path: Path, kernel_accecn: bytes | None) -> None:
    server = _use_cc(netns.call_in_namespace(ns, socket.create_server, ("0.0.0.0", PORT)), kernel_accecn)
    server.settimeout(20)
    got: dict[str, object] = {}
    thread = _in_ns_thread(ns, _kernel_server, server, got)
    pcap = tmp_path / "accecn-client.pcap"
    stack = Stack([US], StackConfig(ecn=3), name="accecn-client")
    marker = CeMarker(stack)
    try:
        with tun_host(ns, "utacc0", KERNEL_CIDR, stack, pcap=pcap, endpoint=marker, offload=False) as host:
            c = host.socket(usocket.AF_INET)
            c.settimeout(15)
            c.connect((KERNEL, PORT))
            c.sendall(bytes(SIZE))
            replied = _recv_count(c, 20_000)
            thread.join(15)
            ours = c.getsockopt(usocket.IPPROTO_TCP, usocket.TCP_INFO)
            c.close()
    finally:
        server.close()
    assert got.get("bytes") == SIZE and replied == 20_000
    info = got["info"]
    assert isinstance(info, dict)
    print("kernel:", info, "\nours:", {k: v for k, v in ours.items() if "_ce" in k or "accecn" in k})
    print(got["ss"])
    _check_accecn_counters(info, ours, marker)
    assert info["tcpi_received_e0_bytes"] == SIZE - marker.marked_bytes == ours["tcpi_delivered_e0_bytes"]
    # And we counted what the kernel sent us (all ECT(0)), which it learnt from our options.
    assert ours["tcpi_received_e0_bytes"] == 20_000 == info["tcpi_delivered_e0_bytes"]
    assert ours["tcpi_accecn_opt_seen"] == OPT_COUNTER_SEEN
    _check_wire(_segments(pcap), client_is_us=True)


def _kernel_client(got: dict[str, object], cc: bytes | None) -> None:
    with _use_cc(socket.socket(), cc) as s:
        s.settimeout(15)
        s.connect((US, PORT))
        s.sendall(bytes(SIZE // 3))
        n = _recv_count(s, SIZE)
        time.sleep(0.3)
        got["bytes"] = n
        got["info"] = kernel_info(s)
        got["ss"] = _ss()


@pytest.mark.timeout(60)
def test_kernel_client_usertcp_server(ns: str, tmp_path: Path, kernel_accecn: bytes | None) -> None:
    pcap = tmp_path / "accecn-server.pcap"
    got: dict[str, object] = {}
    stack = Stack([US], StackConfig(ecn=3), name="accecn-server")
    marker = CeMarker(stack)
    with tun_host(ns, "utacc1", KERNEL_CIDR, stack, pcap=pcap, endpoint=marker, offload=False) as host:
        lst = _listen(host)
        thread = _in_ns_thread(ns, _kernel_client, got, kernel_accecn)
        conn, _ = lst.accept()
        conn.settimeout(15)
        n = _recv_count(conn, SIZE // 3)
        conn.sendall(bytes(SIZE))
        thread.join(20)
        ours = conn.getsockopt(usocket.IPPROTO_TCP, usocket.TCP_INFO)
        conn.close()
        lst.close()
    assert n == SIZE // 3 and got.get("bytes") == SIZE
    info = got["info"]
    assert isinstance(info, dict)
    print("kernel:", info, "\nours:", {k: v for k, v in ours.items() if "_ce" in k or "accecn" in k})
    _check_accecn_counters(info, ours, marker)
    assert ours["tcpi_received_e0_bytes"] == SIZE // 3 == info["tcpi_delivered_e0_bytes"]
    _check_wire(_segments(pcap), client_is_us=False)


# ----------------------------------------------------------------------------- fallbacks


def _ecn_fields(raw: bytes) -> tuple[int, int]:
    return raw[5], struct.unpack_from("=I", raw, 196)[0]          # tcpi_options, tcpi_delivered_ce


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kernel_ecn", [2, 0])
def test_accecn_client_falls_back_with_a_kernel_listener(ns: str, tmp_path: Path, kernel_ecn: int) -> None:
    """RFC 9768 Table 2 against the real thing: the kernel's listener answers our AE|CWR|ECE
    SYN as RFC 3168 (ECE alone, tcp_ecn=2) or without ECN (tcp_ecn=0); we follow it (classic
    ECN: ECT(0) data; or none), and the kernel's tcp_info and ss say the same."""
    netns.set_sysctl(ns, "net.ipv4.tcp_ecn", str(kernel_ecn))
    server = netns.call_in_namespace(ns, socket.create_server, ("0.0.0.0", PORT))
    server.settimeout(20)
    got: dict[str, object] = {}

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            got["bytes"] = _recv_count(conn, 50_000)
            got["info"] = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 512)
            got["ss"] = _ss()

    thread = _in_ns_thread(ns, serve)
    pcap = tmp_path / "fallback.pcap"
    stack = Stack([US], StackConfig(ecn=3), name="accecn-fallback")
    try:
        with tun_host(ns, "utacc2", KERNEL_CIDR, stack, pcap=pcap, offload=False) as host:
            c = host.socket(usocket.AF_INET)
            c.settimeout(15)
            c.connect((KERNEL, PORT))
            c.sendall(bytes(50_000))
            thread.join(15)
            ours = c.getsockopt(usocket.IPPROTO_TCP, usocket.TCP_INFO)
            c.close()
    finally:
        server.close()
    assert got.get("bytes") == 50_000
    raw = got["info"]
    assert isinstance(raw, bytes)
    kopts, _ = _ecn_fields(raw)
    segs = _segments(pcap)
    syn, synack = _handshake(segs)
    data = [s for s in segs if s.payload and s.src == socket.inet_aton(US)]
    assert ace_of(syn.flags) == 7 and synack.accecn is None
    print(got["ss"])
    if kernel_ecn:
        assert ace_of(synack.flags) == 1                     # ECE alone: RFC 3168
        assert kopts & TCPI_OPT_ECN and ours["tcpi_options"] & TCPI_OPT_ECN
        # New data is ECT(0) (RFC 3168 §6.1.5: a retransmission, under load, is not).
        first = {s.seq: s for s in reversed(data)}
        assert all(s.ecn == ECN_ECT0 for s in first.values())
        assert all(not ace_of(s.flags) & 4 for s in data)
        # (iproute2 6.1's ss prints neither "ts", "sack" nor "ecn" for these sockets: the kernel's
        # tcp_info above is the evidence; ss's line is printed for the log.)
    else:
        assert ace_of(synack.flags) == 0
        assert not kopts & TCPI_OPT_ECN and not ours["tcpi_options"] & TCPI_OPT_ECN
        assert all(s.ecn == 0 and not ace_of(s.flags) for s in data)
    assert all(s.accecn is None for s in segs)


@pytest.mark.timeout(60)
def test_accecn_listener_meets_a_kernel_rfc3168_client(ns: str, tmp_path: Path) -> None:
    """Our AccECN listener (tcp_ecn=3) answers the kernel's RFC 3168 SYN (tcp_ecn=1: ECE|CWR)
    with ECE alone; both sides run classic ECN."""
    netns.set_sysctl(ns, "net.ipv4.tcp_ecn", "1")
    pcap = tmp_path / "listener.pcap"
    got: dict[str, object] = {}

    def client() -> None:
        with socket.create_connection((US, PORT), timeout=15) as s:
            s.sendall(bytes(20_000))
            got["echo"] = s.recv(10)
            got["info"] = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 512)

    stack = Stack([US], StackConfig(ecn=3), name="accecn-listener")
    with tun_host(ns, "utacc3", KERNEL_CIDR, stack, pcap=pcap, offload=False) as host:
        lst = _listen(host)
        thread = _in_ns_thread(ns, client)
        conn, _ = lst.accept()
        conn.settimeout(15)
        n = _recv_count(conn, 20_000)
        conn.sendall(b"ok")
        thread.join(15)
        ours = conn.getsockopt(usocket.IPPROTO_TCP, usocket.TCP_INFO)
        conn.close()
        lst.close()
    assert n == 20_000 and got.get("echo") == b"ok"
    raw = got["info"]
    assert isinstance(raw, bytes)
    segs = _segments(pcap)
    syn, synack = _handshake(segs)
    assert ace_of(syn.flags) == 3 and ace_of(synack.flags) == 1 and synack.accecn is None
    assert _ecn_fields(raw)[0] & TCPI_OPT_ECN and ours["tcpi_options"] & TCPI_OPT_ECN
