"""Which packets and PSH flags does *this machine's* Linux kernel send for corpus write patterns?

Run as root: ``.venv/bin/python tools/kernel_psh_probe.py``.  Each probe creates its own
network namespace with a TUN device (with TSO when the corpus' tun has it), makes the kernel a
TCP client of a hand-driven peer (10.77.0.2, inside the namespace only), replays the writes of
a packetdrill script and prints the kernel's data packets as the device gets them (one per
skb with TSO).  It is the evidence behind the notes on nagle/https_client.pkt and
sack/sack-route-refresh-ip-tos.pkt (issue 3), and behind the skb model of issue 14: PSH on
every multi-segment TSO packet (__tcp_transmit_skb: "Force a PSH flag on all (GSO) packets to
expedite GRO flush at receiver", when tcp_skb_pcount(skb) > 1), half the cwnd per packet
(tcp_cwnd_test), MSG_EOR skbs never coalesced, and later skbs pulled into the one being sent
(tcp_grow_skb, 6.10+), which the eor/, tests/drill/sndbuf-skb-accounting.pkt, MSG_MORE and
epoll/notsent_lowat probes show; and why the FreeBSD fr-4pkt-sack-bsd.pkt cannot pass on a
Linux TSO link.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from netns_helpers import PEER, TCP_ACK, TCP_PSH, TCP_SYN, US, PacketReader, Tcp, build_tcp, probe_session
from usertcp.net import netns
from usertcp.net.tun import TunDevice
from usertcp.wire.segment import TxPacket

TCP_CONGESTION = 13
MSG_EOR, MSG_MORE = 0x80, 0x8000
SockOpt = tuple[int, int, int | bytes]


def kernel_connects(dev: TunDevice, rd: PacketReader, ns: str, port: int,
                     sockopts: list[SockOpt], synack_opts: bytes,
                     window: int, rtt: float = 0.0) -> tuple[socket.socket, Tcp, int]:
    """The kernel connects to us (``port``) with ``sockopts``; we answer its SYN after
    ``rtt`` seconds (its first RTT sample) and wait for its ACK. Returns (the kernel's
    socket, its SYN, our next sequence number)."""
    def connect() -> socket.socket:
        s = socket.socket()
        for level, name, value in sockopts:
            s.setsockopt(level, name, value)
        s.setblocking(False)
        s.connect_ex((US, port))
        return s

    s = netns.call_in_namespace(ns, connect)
    syn, _, _ = rd.next(lambda seg, p, ok: seg.flags == TCP_SYN)
    time.sleep(rtt)
    iss = 5000
    hdr, _ = build_tcp(US, PEER, port, syn.sport, iss, syn.seq + 1, TCP_SYN | TCP_ACK, window=window,
                       options=synack_opts)
    dev.write(TxPacket(hdr))
    rd.next(lambda seg, p, ok: seg.flags == TCP_ACK)
    return s, syn, iss + 1


def show(seg: Tcp, base: int) -> None:
    rel = seg.seq - base
    print(f"  {'P.' if seg.flags & TCP_PSH else '. '} {rel}:{rel + len(seg.payload)}({len(seg.payload)})")


def https_client(dev: TunDevice, rd: PacketReader, ns: str, rtt: float = 0.0) -> None:
    """nagle/https_client.pkt: no TSO/GSO on the device, TCP_NODELAY, mss 974, writes 517, 51, 2002;
    ``rtt``: how long we hold our SYN-ACK (the kernel's first RTT sample)."""
    opts = struct.pack("!BBH", 2, 4, 974) + bytes([1, 1, 4, 2, 1, 3, 3, 7])
    s, syn, me = kernel_connects(dev, rd, ns, 443, [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)], opts, 5792,
                                 rtt=rtt)
    base = syn.seq
    for n, pause in ((517, 0.1), (51, 0.03), (2002, 0.0)):
        s.send(b"x" * n)
        want = base + 1 + {517: 517, 51: 568, 2002: 2570}[n]
        end = 0
        while end < want:
            seg, _, _ = rd.next(lambda seg, p, ok: len(seg.payload) > 0)
            show(seg, base)
            end = seg.seq + len(seg.payload)
        time.sleep(pause)
        hdr, _ = build_tcp(US, PEER, 443, syn.sport, me, end, TCP_ACK, window=229)
        dev.write(TxPacket(hdr))
    s.close()


def sack_route_refresh(dev: TunDevice, rd: PacketReader, ns: str) -> None:
    """sack/sack-route-refresh-ip-tos.pkt: TSO device, writes 5840, 5840, 14600, then a SACK."""
    opts = struct.pack("!BBH", 2, 4, 1460) + bytes([1, 3, 3, 2, 1, 1, 4, 2])
    # IP_MTU_DISCOVER (10) = IP_PMTUDISC_DONT, as the script sets it.
    s, syn, me = kernel_connects(dev, rd, ns, 8080, [(socket.IPPROTO_IP, 10, 0)], opts, 65535)
    base = syn.seq
    def ack(n: int, sack: tuple[tuple[int, int], ...] = ()) -> None:
        o = b""
        if sack:
            o = bytes([1, 1, 5, 2 + 8 * len(sack)]) + b"".join(
                struct.pack("!II", base + a, base + b) for a, b in sack)
        dev.write(TxPacket(build_tcp(US, PEER, 8080, syn.sport, me, base + n, TCP_ACK, window=65535,
                                     options=o)[0]))

    for n, upto, acked in ((5840, 5841, True), (5840, 11681, True), (14600, 26281, False)):
        time.sleep(0.01)
        s.send(b"x" * n)
        end = 0
        while end < base + upto:
            seg, _, _ = rd.next(lambda seg, p, ok: len(seg.payload) > 0)
            show(seg, base)
            end = seg.seq + len(seg.payload)
        if acked:
            time.sleep(0.01)
            ack(upto)
    time.sleep(0.01)
    ack(13141, ((16061, 17521), (20441, 26281)))
    print("  after <sack 16061:17521 20441:26281>, ack 13141:")
    for _ in range(3):
        seg, _, _ = rd.next(lambda seg, p, ok: len(seg.payload) > 0)
        show(seg, base)
    s.close()


# Linux defaults the corpus' defaults.sh sets that matter here; the qdisc is a pfifo, as there.
CORPUS_SYSCTLS = ["net.ipv4.tcp_timestamps=0", "net.ipv4.tcp_slow_start_after_idle=0",
                   "net.ipv4.tcp_wmem=4096 262144 4194304"]
CUBIC: SockOpt = (socket.IPPROTO_TCP, TCP_CONGESTION, b"cubic")


def pfifo(ns: str) -> None:
    subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "ut0", "root", "pfifo"],
                   check=True)


class _Peer:
    """The hand-driven side of a probe: ACKs (window unscaled) and the kernel's packets."""

    def __init__(self, dev: TunDevice, rd: PacketReader, syn: Tcp, me: int, port: int, window: int) -> None:
        self.dev, self.rd, self.syn, self.me, self.port, self.window = dev, rd, syn, me, port, window

    def ack(self, n: int) -> None:
        hdr, _ = build_tcp(US, PEER, self.port, self.syn.sport, self.me, self.syn.seq + n, TCP_ACK,
                           window=self.window)
        self.dev.write(TxPacket(hdr))

    def show_until(self, upto: int) -> None:
        end = 0
        while end < self.syn.seq + upto:
            seg, _, _ = self.rd.next(lambda seg, p, ok: len(seg.payload) > 0)
            show(seg, self.syn.seq)
            end = seg.seq + len(seg.payload)


def _cubic_connection(dev: TunDevice, rd: PacketReader, ns: str, more_opts: bytes, window: int,
                      ack_window: int, *, rtt: float, extra: list[SockOpt] | None = None
                      ) -> tuple[socket.socket, _Peer]:
    """A pfifo qdisc, then the kernel connecting to port 8080 with CUBIC (and ``extra`` socket
    options), answered by a SYN-ACK with MSS 1000 then ``more_opts``, and ``window``: its
    socket and the peer that ACKs it with ``ack_window``."""
    pfifo(ns)
    opts = struct.pack("!BBH", 2, 4, 1000) + more_opts
    s, syn, me = kernel_connects(dev, rd, ns, 8080, [CUBIC, *(extra or [])], opts, window, rtt=rtt)
    return s, _Peer(dev, rd, syn, me, 8080, ack_window)


def eor_no_coalesce(dev: TunDevice, rd: PacketReader, ns: str) -> None:
    """eor/no-coalesce-small.pkt: writes 10400, 400 with MSG_EOR, 10000 at mss 1000."""
    s, peer = _cubic_connection(dev, rd, ns, bytes([4, 2, 1, 1, 1, 3, 3, 10]),
                                32792, 514, rtt=0.01)
    peer.ack(1)
    time.sleep(0.01)
    s.send(b"x" * 10400)
    s.send(b"x" * 400, MSG_EOR)
    s.send(b"x" * 10000)
    peer.show_until(10001)
    time.sleep(0.001)
    peer.ack(10001)
    print("  after ack 10001:")
    peer.show_until(20801)
    s.close()


def tso_psh_msg_more(dev: TunDevice, rd: PacketReader, ns: str) -> None:
    """30000 bytes written with MSG_MORE (no PSH mark on any skb): which packets carry PSH?"""
    s, peer = _cubic_connection(dev, rd, ns, bytes([4, 2, 1, 1, 1, 3, 3, 7]),
                                65535, 65535, rtt=0.01)
    peer.ack(1)
    time.sleep(0.01)
    s.send(b"x" * 30000, MSG_MORE)
    peer.show_until(10001)
    time.sleep(0.005)
    peer.ack(10001)
    print("  after ack 10001:")
    peer.show_until(20001)
    s.close()


def sndbuf_skb_layout(dev: TunDevice, rd: PacketReader, ns: str) -> None:
    """tests/drill/sndbuf-skb-accounting.pkt: SO_SNDBUF 21000, a non-blocking 61000-byte
    write at a 100 ms RTT with tcp_min_tso_segs 10, then ACKs of 10000 and 30000 bytes."""
    s, peer = _cubic_connection(dev, rd, ns, bytes([1, 3, 3, 0]),
                                50000, 50000, rtt=0.1, extra=[(socket.SOL_SOCKET, socket.SO_SNDBUF, 21000)])
    time.sleep(0.1)
    peer.ack(1)
    s.setblocking(False)
    print(f"  sk_sndbuf {s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)}, wrote {s.send(b'x' * 61000)}")
    peer.show_until(10001)
    for n, upto in ((10001, 30001), (30001, 60001)):
        time.sleep(0.1)
        peer.ack(n)
        print(f"  after ack {n}:")
        peer.show_until(upto)
    s.close()


def wmem_50000_after_ack(dev: TunDevice, rd: PacketReader, ns: str) -> None:
    """epoll/epoll_out_edge*.pkt, notsent_lowat/notsent-lowat-default.pkt: tcp_wmem 50000, peer
    window 257 << 7 (skbs of 16000: tcp_bound_to_half_wnd), a 59000-byte non-blocking write,
    then the ACK of the first 10000 bytes. The scripts expect 10001:26001 (16000 bytes: the
    rest of the first skb, then 10 segments of the next, as before tcp_grow_skb in 6.10)."""
    s, peer = _cubic_connection(dev, rd, ns, bytes([4, 2, 1, 1, 1, 3, 3, 7]),
                                32792, 257, rtt=0.02)
    peer.ack(1)
    time.sleep(0.01)
    s.setblocking(False)
    print(f"  wrote {s.send(b'x' * 59000)}")
    peer.show_until(10001)
    time.sleep(0.02)
    peer.ack(10001)
    print("  after ack 10001 (cwnd 20):")
    peer.show_until(30001)
    s.close()


def bsd_four_segments(dev: TunDevice, rd: PacketReader, ns: str) -> None:
    """packetdrill/tests/bsd/fast_retransmit/fr-4pkt-sack-bsd.pkt: RTT 100 ms, 1000 bytes
    acked, then a 4000-byte write. The FreeBSD script expects four one-MSS packets."""
    s, peer = _cubic_connection(dev, rd, ns, bytes([1, 1, 4, 2, 1, 3, 3, 7]),
                                32792, 257, rtt=0.1)
    s.send(b"x" * 1000)
    peer.show_until(1001)
    time.sleep(0.1)
    peer.ack(1001)
    time.sleep(0.001)
    s.send(b"x" * 4000)
    peer.show_until(5001)
    s.close()


def retrans_collapse(dev: TunDevice, rd: PacketReader, ns: str) -> None:
    """tcp_retrans_try_collapse: TCP_NODELAY writes of 100, 100 (MSG_EOR), 100, 100 bytes, each
    its own packet; no ACK, so the RTO resends them: small skbs join up to the MSS, but never
    across the MSG_EOR end (tcp_skb_can_collapse)."""
    s, peer = _cubic_connection(dev, rd, ns, bytes([4, 2, 1, 1, 1, 3, 3, 7]),
                                32792, 257, rtt=0.01, extra=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    for flags in (0, MSG_EOR, 0, 0):
        s.send(b"x" * 100, flags)
    peer.show_until(401)
    print("  then (the tail loss probe, the RTO's retransmissions):")
    first = None
    while True:
        try:
            seg, _, _ = rd.next(lambda seg, p, ok: len(seg.payload) > 0, timeout=3.0)
        except TimeoutError:
            break
        show(seg, peer.syn.seq)
        if seg.seq == peer.syn.seq + 1:
            first = seg
        if first is not None and seg.seq + len(seg.payload) == peer.syn.seq + 401:
            break
    s.close()


if __name__ == "__main__":
    if sys.argv[1:] == ["retrans_collapse"]:        # this probe alone
        print("retrans_collapse (one packet per write, then the RTO's retransmissions):")
        probe_session("pshprobe", retrans_collapse, offload=True, sysctls=CORPUS_SYSCTLS)
        sys.exit(0)
    print(f"kernel {subprocess.run(['uname', '-r'], capture_output=True, text=True).stdout.strip()}")
    print("https_client (script expects P. on 1543:2517):")
    probe_session("pshprobe", https_client, sysctls=["net.ipv4.tcp_timestamps=0"])
    print("sack-route-refresh-ip-tos (script expects . 13141:16061, P. 17521:20441):")
    probe_session("pshprobe", sack_route_refresh, offload=True)
    print("eor/no-coalesce-small (script: P. 1:10001, P. 10001:10801, P. 10801:20801):")
    probe_session("pshprobe", eor_no_coalesce, offload=True, sysctls=CORPUS_SYSCTLS)
    print("MSG_MORE 30000 bytes (no skb pushed, yet PSH on every multi-segment packet):")
    probe_session("pshprobe", tso_psh_msg_more, offload=True, sysctls=CORPUS_SYSCTLS)
    print("sndbuf-skb-accounting (our script: 60000 written; 10000-byte packets after ack 10001):")
    probe_session("pshprobe", sndbuf_skb_layout, offload=True,
                  sysctls=[*CORPUS_SYSCTLS, "net.ipv4.tcp_min_tso_segs=10"])
    print("notsent-lowat-default, epoll_out_edge* (scripts: 10001:26001 after ack 10001, then nothing):")
    probe_session("pshprobe", wmem_50000_after_ack, offload=True,
                  sysctls=[*CORPUS_SYSCTLS[:2], "net.ipv4.tcp_wmem=4096 50000 4194304",
                           "net.ipv4.tcp_min_tso_segs=10"])
    print("fr-4pkt-sack-bsd (script: four one-MSS packets, PSH on the last only):")
    probe_session("pshprobe", bsd_four_segments, offload=True, sysctls=CORPUS_SYSCTLS)
    print("retrans_collapse (tests/drill/retrans-collapse-eor.pkt: P. 1:201 after the RTO):")
    probe_session("pshprobe", retrans_collapse, offload=True, sysctls=CORPUS_SYSCTLS)
