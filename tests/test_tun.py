"""The TUN link against the real Linux stack, each test inside its own throw-away namespace.

The test plays a tiny hand-written TCP peer at 10.77.0.2; the kernel is 10.77.0.1.
Objects bound to the namespace (the TUN fd, kernel sockets) are created in a thread that
entered it (``call_in_namespace``), then used from the test thread.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from netns_helpers import (
    PEER,
    TCP_ACK,
    TCP_PSH,
    TCP_RST,
    TCP_SYN,
    US,
    PacketReader,
    Tcp,
    build_tcp,
    namespace_fixture,
    parse,
    pseudo_sum,
    tcp_checksum_ok,
    wait_socket_error,
)
from usertcp.net import netns
from usertcp.net.tun import (
    VIRTIO_NET_HDR_F_NEEDS_CSUM,
    VIRTIO_NET_HDR_GSO_NONE,
    VIRTIO_NET_HDR_GSO_TCPV4,
    VNET_HDR,
    TunDevice,
    TunDriver,
    _complete_checksum,
    vnet_header_for,
)
from usertcp.wire.segment import Buffer, TxPacket

DEV = "utun0"


@pytest.fixture
def ns() -> Iterator[str]:
    yield from namespace_fixture()


def _open(ns: str, offload: bool, mtu: int = 1500) -> TunDevice:
    dev = TunDevice.open(DEV, offload=offload, netns=ns)
    try:
        dev.configure(peer_address=f"{PEER}/24", mtu=mtu)
    except BaseException:
        dev.close()
        raise
    return dev


def _link_exists(ns: str, name: str) -> bool:
    def lookup() -> bool:
        from pyroute2 import IPRoute

        with IPRoute() as ipr:
            return bool(ipr.link_lookup(ifname=name))

    return netns.call_in_namespace(ns, lookup)


def _client(port: int, **opts: int) -> socket.socket:
    s = socket.socket()
    for opt, val in opts.items():
        s.setsockopt(socket.SOL_SOCKET, getattr(socket, opt), val)
    s.setblocking(False)
    assert s.connect_ex((US, port)) == errno.EINPROGRESS
    return s


def _rst_for(syn: Tcp) -> bytes:
    hdr, _ = build_tcp(syn.dst, syn.src, syn.dport, syn.sport, 0, syn.seq + 1, TCP_RST | TCP_ACK, window=0)
    return hdr


def _is_syn(port: int) -> Callable[[Tcp, memoryview, bool], bool]:
    return lambda seg, pkt, ok: seg.dport == port and seg.flags == TCP_SYN


# -- unit tests (no namespace needed) -----------------------------------------------------------


def test_vnet_header_for() -> None:
    hdr, payload = build_tcp(US, PEER, 1, 2, 0, 0, TCP_ACK, payload=bytes(4200), partial=True)
    gso = vnet_header_for(TxPacket(hdr, [payload], gso_size=1400, csum_partial=True))
    assert VNET_HDR.unpack(gso) == (VIRTIO_NET_HDR_F_NEEDS_CSUM, VIRTIO_NET_HDR_GSO_TCPV4, 40, 1400, 20, 16)
    small = vnet_header_for(TxPacket(hdr, [bytes(1000)], gso_size=1400, csum_partial=True))
    assert VNET_HDR.unpack(small) == (VIRTIO_NET_HDR_F_NEEDS_CSUM, VIRTIO_NET_HDR_GSO_NONE, 0, 0, 20, 16)
    assert vnet_header_for(TxPacket(hdr, [bytes(10)])) == bytes(10)
    v6 = bytes([0x60]) + bytes(39) + bytes(20)
    v6_hdr = VNET_HDR.unpack(vnet_header_for(TxPacket(v6, [bytes(3000)], gso_size=1000)))
    assert v6_hdr[1:] == (4, 60, 1000, 40, 16)


@pytest.mark.parametrize("parts", [[b"hello world!"], [b"odd", b"parts", b"x", b""], [bytes(range(251)) * 7]])
def test_software_checksum_completion(parts: list[bytes]) -> None:
    payload = b"".join(parts)
    full, _ = build_tcp(US, PEER, 1000, 2000, 7, 9, TCP_ACK | TCP_PSH, payload=payload)
    partial, _ = build_tcp(US, PEER, 1000, 2000, 7, 9, TCP_ACK | TCP_PSH, payload=payload, partial=True)
    done = _complete_checksum(TxPacket(partial, parts, csum_partial=True))
    assert done.header == full
    assert tcp_checksum_ok(done.tobytes())


def _pair_device(offload: bool) -> tuple[TunDevice, socket.socket]:
    """A TunDevice over one end of an AF_UNIX datagram pair (one packet per datagram, as TUN)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    ours.setblocking(False)
    dev = TunDevice("pair0", ours.detach(), offload=offload, multi_queue=False, persistent=False, netns=None)
    return dev, theirs


def test_read_segments_passes_the_gro_segment_size() -> None:
    dev, peer = _pair_device(offload=True)
    try:
        hdr, payload = build_tcp(PEER, US, 1, 2, 0, 0, TCP_ACK, payload=bytes(2896))
        peer.send(VNET_HDR.pack(VIRTIO_NET_HDR_F_NEEDS_CSUM, VIRTIO_NET_HDR_GSO_TCPV4, 40, 1448, 20, 16)
                  + hdr + payload)
        peer.send(VNET_HDR.pack(0, VIRTIO_NET_HDR_GSO_NONE, 0, 0, 0, 0) + hdr + payload)
        (big, verified, gso), (plain, plain_verified, plain_gso) = dev.read_segments()
        assert bytes(big) == hdr + payload and verified and gso == 1448
        assert bytes(plain) == hdr + payload and not plain_verified and plain_gso == 0
        assert dev.stats["rx_gso"] == 1 and dev.stats["rx_packets"] == 2
        assert dev.read_segments() == []
    finally:
        dev.close()
        peer.close()


@pytest.mark.parametrize("offload", [False, True], ids=["plain", "offload"])
def test_write_packets_goes_on_past_a_refused_packet(offload: bool) -> None:
    """One gather write per packet; a packet the device cannot take is counted, the rest go."""
    dev, peer = _pair_device(offload)
    try:
        ack, _ = build_tcp(US, PEER, 1, 2, 0, 0, TCP_ACK, partial=True)
        hdr, payload = build_tcp(US, PEER, 1, 2, 0, 0, TCP_ACK, payload=bytes(4000), partial=True)
        gso = TxPacket(hdr, [payload[:1000], payload[1000:]], gso_size=1448, csum_partial=True)
        sent, nbytes, errors = dev.write_packets([TxPacket(ack, csum_partial=True), gso, TxPacket(ack)])
        got = [peer.recv(70000) for _ in range(sent)]
        if offload:
            assert (sent, errors) == (3, [])
            assert VNET_HDR.unpack(got[0][:10]) == (VIRTIO_NET_HDR_F_NEEDS_CSUM, 0, 0, 0, 20, 16)
            assert VNET_HDR.unpack(got[1][:10])[1:4] == (VIRTIO_NET_HDR_GSO_TCPV4, 40, 1448)
            assert got[1][10:] == hdr + payload and got[2] == bytes(10) + ack
            assert dev.stats["tx_gso"] == 1
        else:
            assert sent == 2 and len(errors) == 1 and isinstance(errors[0], ValueError)
            assert tcp_checksum_ok(got[0]) and got[1] == ack    # the checksum finished in software
        assert nbytes == sum(len(g) for g in got) - sent * dev.vnet_hdr_len
        assert dev.stats["tx_packets"] == sent and dev.stats["tx_bytes"] == nbytes
    finally:
        dev.close()
        peer.close()


# -- kernel over TUN ------------------------------------------------------------------------------


@pytest.mark.netns
@pytest.mark.parametrize("offload", [False, True], ids=["plain", "offload"])
def test_syn_answered_with_rst(ns: str, offload: bool) -> None:
    dev = _open(ns, offload)
    rd = PacketReader(dev.read_batch, dev.fd)
    try:
        assert dev.offload is offload and dev.vnet_hdr_len == (10 if offload else 0)
        s1 = netns.call_in_namespace(ns, _client, 7)
        s2 = netns.call_in_namespace(ns, _client, 7)
        try:
            if offload:
                # Decode one SYN's header by hand: proves the little-endian layout.
                deadline = time.monotonic() + 5
                while True:
                    assert time.monotonic() < deadline
                    got = dev.read_vnet()
                    if got is None:
                        time.sleep(0.01)
                        continue
                    vhdr, pkt = got
                    seg0 = parse(pkt)
                    if seg0 is not None and seg0.flags == TCP_SYN:
                        break
                assert vhdr[0] == VIRTIO_NET_HDR_F_NEEDS_CSUM and vhdr[1] == VIRTIO_NET_HDR_GSO_NONE
                assert vhdr[4:] == (20, 16)  # csum_start, csum_offset
                dev.write(TxPacket(_rst_for(seg0)))
            want = {s.getsockname()[1] for s in (s1, s2)}
            if offload:
                assert seg0 is not None
                want.discard(seg0.sport)
            while want:
                before = dev.stats["rx_needs_csum"]
                seg, pkt, verified = rd.next(
                    lambda seg, p, ok: seg.flags == TCP_SYN and seg.sport in want)
                want.discard(seg.sport)
                assert seg.src == PEER and seg.dst == US and seg.dport == 7
                assert seg.option(2) == struct.pack("!H", 1460)  # MSS from MTU 1500
                assert seg.option(4) is not None  # SACK permitted
                if offload:
                    assert verified
                    assert dev.stats["rx_needs_csum"] > before
                    src, dst = socket.inet_aton(seg.src), socket.inet_aton(seg.dst)
                    assert seg.checksum == pseudo_sum(src, dst, seg.total_len - 20)
                    assert not tcp_checksum_ok(pkt)
                else:
                    assert not verified
                    assert tcp_checksum_ok(pkt)
                dev.write(TxPacket(_rst_for(seg)))
            for s in (s1, s2):
                assert wait_socket_error(s) == errno.ECONNREFUSED
        finally:
            s1.close()
            s2.close()
    finally:
        dev.close()
    assert not _link_exists(ns, DEV)


def _handshake_as_server(dev: TunDevice, rd: PacketReader, port: int) -> tuple[int, int, Tcp]:
    """Answer the kernel client's SYN; returns (our next seq, kernel's next seq, SYN)."""
    syn, _, _ = rd.next(_is_syn(port))
    iss = 1000
    opts = struct.pack("!BBH", 2, 4, 1460) + struct.pack("!BBBB", 1, 3, 3, 7)  # MSS 1460, NOP, WS 7
    hdr, _ = build_tcp(US, PEER, port, syn.sport, iss, syn.seq + 1, TCP_SYN | TCP_ACK, options=opts)
    dev.write(TxPacket(hdr))
    return iss + 1, syn.seq + 1, syn


@pytest.mark.netns
@pytest.mark.parametrize("offload", [False, True], ids=["plain", "offload"])
def test_kernel_sends_64k(ns: str, offload: bool) -> None:
    dev = _open(ns, offload)
    rd = PacketReader(dev.read_batch, dev.fd)
    data = os.urandom(65536)
    try:
        s = netns.call_in_namespace(ns, _client, 80, SO_SNDBUF=1 << 20)
        try:
            our_seq, rcv_nxt, syn = _handshake_as_server(dev, rd, 80)
            base = rcv_nxt
            s.setblocking(True)
            s.settimeout(10)
            assert wait_socket_error(s) == 0
            sender = threading.Thread(target=s.sendall, args=(data,), daemon=True)
            sender.start()
            got = bytearray(len(data))
            sizes: list[int] = []
            deadline = time.monotonic() + 10
            while rcv_nxt - base < len(data):
                assert time.monotonic() < deadline, f"stalled at {rcv_nxt - base}"

                def data_pkt(seg: Tcp, pkt: memoryview, ok: bool) -> bool:
                    return seg.sport == syn.sport and bool(seg.payload)

                seg, pkt, _ = rd.next(data_pkt)
                sizes.append(len(pkt))
                off = seg.seq - base
                got[off : off + len(seg.payload)] = seg.payload
                if seg.seq <= rcv_nxt:
                    rcv_nxt = max(rcv_nxt, seg.seq + len(seg.payload))
                ack, _ = build_tcp(US, PEER, 80, syn.sport, our_seq, rcv_nxt, TCP_ACK, window=4096)
                dev.write(TxPacket(ack))  # window 4096 << 7 = 512 KiB
            sender.join(5)
            assert bytes(got) == data
            if offload:
                assert max(sizes) > 1500, sizes
                assert dev.stats["rx_gso"] >= 1
            else:
                assert max(sizes) <= 1500, sizes
                assert dev.stats["rx_gso"] == 0
            print(f"offload={offload}: {len(sizes)} packets, largest {max(sizes)} B")
            rst, _ = build_tcp(US, PEER, 80, syn.sport, our_seq, rcv_nxt, TCP_RST)
            dev.write(TxPacket(rst))
        finally:
            s.close()
    finally:
        dev.close()
    assert not _link_exists(ns, DEV)


def _listener(port: int) -> socket.socket:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((PEER, port))
    srv.listen(4)
    return srv


@pytest.mark.netns
def test_tso_write_to_kernel(ns: str) -> None:
    dev = _open(ns, True)
    rd = PacketReader(dev.read_batch, dev.fd)
    try:
        srv = netns.call_in_namespace(ns, _listener, 9000)
        try:
            sport, iss = 40000, 5000
            opts = struct.pack("!BBH", 2, 4, 1460)
            syn, _ = build_tcp(US, PEER, sport, 9000, iss, 0, TCP_SYN, options=opts)
            dev.write(TxPacket(syn))
            synack, _, _ = rd.next(
                lambda seg, p, ok: seg.sport == 9000 and seg.flags == TCP_SYN | TCP_ACK)
            assert synack.ack == iss + 1
            ack, _ = build_tcp(US, PEER, sport, 9000, iss + 1, synack.seq + 1, TCP_ACK)
            dev.write(TxPacket(ack))
            parts = [os.urandom(1400) for _ in range(3)]
            hdr, _ = build_tcp(US, PEER, sport, 9000, iss + 1, synack.seq + 1, TCP_ACK | TCP_PSH,
                               payload=b"".join(parts), partial=True)
            dev.write(TxPacket(hdr, parts, gso_size=1400, csum_partial=True))
            assert dev.stats["tx_gso"] == 1
            srv.settimeout(5)
            conn, peer = srv.accept()
            with conn:
                assert peer == (US, sport)
                conn.settimeout(5)
                buf = bytearray()
                while len(buf) < 4200:
                    chunk = conn.recv(65536)
                    assert chunk
                    buf += chunk
                assert bytes(buf) == b"".join(parts)
            # The kernel ACKs everything we sent.
            rd.next(lambda seg, p, ok: seg.sport == 9000 and seg.ack == iss + 4201)
        finally:
            srv.close()
    finally:
        dev.close()


class RstEndpoint:
    """Answers every SYN with RST|ACK; one optional timer to check the driver's timer path."""

    def __init__(self, timer_at: float | None = None) -> None:
        self.out: list[TxPacket] = []
        self.received = 0
        self.answered = 0
        self.timer_at = timer_at
        self.timers_run = 0

    def receive(self, packet: bytes | bytearray | memoryview, now: float, *,
                checksum_verified: bool = False) -> None:
        self.received += 1
        seg = parse(packet)
        if seg is not None and seg.flags & TCP_SYN and not seg.flags & TCP_ACK:
            self.out.append(TxPacket(_rst_for(seg)))
            self.answered += 1

    def datagrams_to_send(self) -> list[TxPacket]:
        out, self.out = self.out, []
        return out

    def get_timer(self) -> float | None:
        return self.timer_at

    def handle_timer(self, now: float) -> None:
        if self.timer_at is not None and now >= self.timer_at:
            self.timer_at = None
            self.timers_run += 1


class Sink:
    def __init__(self) -> None:
        self.packets: list[tuple[int, float]] = []

    def write(self, packet: Buffer | TxPacket, timestamp: float) -> None:
        self.packets.append((len(packet), timestamp))


@pytest.mark.netns
@pytest.mark.parametrize("offload", [False, True], ids=["plain", "offload"])
def test_driver_refuses_connections(ns: str, offload: bool) -> None:
    dev = _open(ns, offload)
    ep = RstEndpoint(timer_at=time.monotonic() + 0.2)
    sink = Sink()
    driver = TunDriver(ep, dev, pcap=sink)
    try:
        driver.start()
        socks = [netns.call_in_namespace(ns, _client, 7) for _ in range(3)]
        try:
            assert driver.wait_until(lambda: ep.answered >= 3, 5)
            for s in socks:
                assert wait_socket_error(s) == errno.ECONNREFUSED
        finally:
            for s in socks:
                s.close()
        assert driver.wait_until(lambda: ep.timers_run == 1, 2)
        # kick(): output queued by "the application" under the lock goes out at once.
        with driver.lock:
            hdr, _ = build_tcp(US, PEER, 7, 5555, 1, 1, TCP_RST)
            ep.out.append(TxPacket(hdr))
        driver.kick()
        assert driver.stats["tx_packets"] == 4
        t0 = time.monotonic()
        driver.stop()
        assert time.monotonic() - t0 < 1.0
        st = driver.stats
        print(st, dev.stats)
        assert st["rx_packets"] == ep.received >= 3
        assert 1 <= st["batches"] <= st["wakeups"]
        assert st["rx_packets"] >= st["batches"]
        assert st["wakeups"] < 100, "driver busy-waits"
        assert st["timers"] == 1 and st["tx_errors"] == 0
        assert len(sink.packets) == st["rx_packets"] + st["tx_packets"]
        assert driver.error is None
    finally:
        driver.close()
        dev.close()
    assert not _link_exists(ns, DEV)


@pytest.mark.netns
def test_multi_queue(ns: str) -> None:
    dev = TunDevice.open(DEV, offload=True, multi_queue=True, netns=ns)
    try:
        q2 = dev.open_queue()
        try:
            assert q2.name == DEV and q2.fd != dev.fd and q2.offload
            dev.configure(peer_address=f"{PEER}/24")
            s = netns.call_in_namespace(ns, _client, 7)
            try:
                # The SYN lands on one of the two queues (by flow hash); answer from that one.
                deadline = time.monotonic() + 5
                found: tuple[TunDevice, Tcp] | None = None
                while found is None:
                    assert time.monotonic() < deadline
                    for q in (dev, q2):
                        for pkt, _ in q.read_batch():
                            seg = parse(pkt)
                            if seg is not None and seg.flags == TCP_SYN:
                                found = (q, seg)
                    time.sleep(0.01)
                found[0].write(TxPacket(_rst_for(found[1])))
                assert wait_socket_error(s) == errno.ECONNREFUSED
            finally:
                s.close()
        finally:
            q2.close()
        assert _link_exists(ns, DEV)  # one queue still open
    finally:
        dev.close()
    assert not _link_exists(ns, DEV)


@pytest.mark.netns
def test_offload_auto_and_fallback(ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with TunDevice.open(DEV, netns=ns) as dev:
        assert dev.offload and dev.vnet_hdr_len == 10  # this kernel takes the offloads
    real_open = TunDevice._open          # the original, bound to TunDevice (the only cls here)

    def refuse_offload(cls: type[TunDevice], name: str, offload: bool, mq: bool,
                       ns_: str | None) -> TunDevice:
        if offload:
            raise OSError(errno.EINVAL, "no vnet header")
        return real_open(name, offload, mq, ns_)

    monkeypatch.setattr(TunDevice, "_open", classmethod(refuse_offload))
    with TunDevice.open(DEV, netns=ns) as dev:
        assert not dev.offload and dev.vnet_hdr_len == 0 and dev.netns == ns
    assert not _link_exists(ns, DEV)


@pytest.mark.netns
def test_netns_helpers(ns: str) -> None:
    netns.set_sysctl(ns, "net.ipv4.tcp_sack", 0)
    assert netns.get_sysctl(ns, "net.ipv4.tcp_sack") == "0"
    assert netns.run_in_namespace(ns, os.getpid) != os.getpid()
    inode = netns.run_in_namespace(ns, lambda: os.stat("/proc/self/ns/net").st_ino)
    assert inode == os.stat(netns.namespace_path(ns)).st_ino
    with pytest.raises(ValueError):
        netns.set_sysctl(ns, "kernel.hostname", "x")
    with netns.namespace("utcp") as other:
        assert other in netns.list_namespaces()
    assert other not in netns.list_namespaces()


@pytest.mark.netns
def test_netem(ns: str) -> None:
    dev = _open(ns, False)
    try:
        try:
            netns.add_netem(ns, DEV, loss=10, reorder=25)
        except netns.NetemUnavailable as exc:
            pytest.skip(str(exc))
        netns.remove_netem(ns, DEV)
    finally:
        dev.close()
