"""Which PSH flags does *this machine's* Linux kernel put on two corpus write patterns?

Run as root: ``.venv/bin/python tools/kernel_psh_probe.py``.  Each probe creates its own
network namespace with a TUN device, makes the kernel a TCP client of a hand-driven peer
(10.77.0.2, inside the namespace only), replays the writes of an upstream packetdrill script
and prints the kernel's data segments.  It is the evidence behind the notes on
nagle/https_client.pkt and sack/sack-route-refresh-ip-tos.pkt (see issue 3): the scripts were
recorded on older kernels, and the probe shows what a current one does.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from netns_helpers import PEER, TCP_ACK, TCP_PSH, TCP_SYN, US, PacketReader, Tcp, build_tcp
from usertcp.net import netns
from usertcp.net.tun import TunDevice
from usertcp.wire.segment import TxPacket

SYNACK_DELAY = 0.0   # seconds before the SYN-ACK: the kernel's first RTT sample


def _session(offload: bool, sysctls: list[str], body: Callable[[TunDevice, PacketReader, str], None]) -> None:
    ns = netns.create_namespace("pshprobe")
    try:
        dev = TunDevice.open("ut0", offload=offload, netns=ns)
        try:
            dev.configure(peer_address=f"{PEER}/24", mtu=1500)
            for s in sysctls:
                subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-q", s], check=True)
            body(dev, PacketReader(dev.read_batch, dev.fd), ns)
        finally:
            dev.close()
    finally:
        netns.remove_namespace(ns)


def _kernel_connects(dev: TunDevice, rd: PacketReader, ns: str, port: int,
                     sockopts: list[tuple[int, int, int]], synack_opts: bytes,
                     window: int) -> tuple[socket.socket, Tcp, int]:
    """The kernel connects to us (``port``) with ``sockopts``; we answer its SYN and wait for
    its ACK. Returns (the kernel's socket, its SYN, our next sequence number)."""
    def connect() -> socket.socket:
        s = socket.socket()
        for level, name, value in sockopts:
            s.setsockopt(level, name, value)
        s.setblocking(False)
        s.connect_ex((US, port))
        return s

    s = netns.call_in_namespace(ns, connect)
    syn, _, _ = rd.next(lambda seg, p, ok: seg.flags == TCP_SYN)
    time.sleep(SYNACK_DELAY)
    iss = 5000
    hdr, _ = build_tcp(US, PEER, port, syn.sport, iss, syn.seq + 1, TCP_SYN | TCP_ACK, window=window,
                       options=synack_opts)
    dev.write(TxPacket(hdr))
    rd.next(lambda seg, p, ok: seg.flags == TCP_ACK)
    return s, syn, iss + 1


def _show(seg: Tcp, base: int) -> None:
    rel = seg.seq - base
    print(f"  {'P.' if seg.flags & TCP_PSH else '. '} {rel}:{rel + len(seg.payload)}({len(seg.payload)})")


def https_client(dev: TunDevice, rd: PacketReader, ns: str) -> None:
    """nagle/https_client.pkt: no TSO/GSO on the device, TCP_NODELAY, mss 974, writes 517, 51, 2002."""
    opts = struct.pack("!BBH", 2, 4, 974) + bytes([1, 1, 4, 2, 1, 3, 3, 7])
    s, syn, me = _kernel_connects(dev, rd, ns, 443, [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)], opts, 5792)
    base = syn.seq
    for n, pause in ((517, 0.1), (51, 0.03), (2002, 0.0)):
        s.send(b"x" * n)
        want = base + 1 + {517: 517, 51: 568, 2002: 2570}[n]
        end = 0
        while end < want:
            seg, _, _ = rd.next(lambda seg, p, ok: len(seg.payload) > 0)
            _show(seg, base)
            end = seg.seq + len(seg.payload)
        time.sleep(pause)
        hdr, _ = build_tcp(US, PEER, 443, syn.sport, me, end, TCP_ACK, window=229)
        dev.write(TxPacket(hdr))
    s.close()


def sack_route_refresh(dev: TunDevice, rd: PacketReader, ns: str) -> None:
    """sack/sack-route-refresh-ip-tos.pkt: TSO device, writes 5840, 5840, 14600, then a SACK."""
    opts = struct.pack("!BBH", 2, 4, 1460) + bytes([1, 3, 3, 2, 1, 1, 4, 2])
    # IP_MTU_DISCOVER (10) = IP_PMTUDISC_DONT, as the script sets it.
    s, syn, me = _kernel_connects(dev, rd, ns, 8080, [(socket.IPPROTO_IP, 10, 0)], opts, 65535)
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
            _show(seg, base)
            end = seg.seq + len(seg.payload)
        if acked:
            time.sleep(0.01)
            ack(upto)
    time.sleep(0.01)
    ack(13141, ((16061, 17521), (20441, 26281)))
    print("  after <sack 16061:17521 20441:26281>, ack 13141:")
    for _ in range(3):
        seg, _, _ = rd.next(lambda seg, p, ok: len(seg.payload) > 0)
        _show(seg, base)
    s.close()


if __name__ == "__main__":
    print(f"kernel {subprocess.run(['uname', '-r'], capture_output=True, text=True).stdout.strip()}")
    print("https_client (script expects P. on 1543:2517):")
    _session(False, ["net.ipv4.tcp_timestamps=0"], https_client)
    print("sack-route-refresh-ip-tos (script expects . 13141:16061, P. 17521:20441):")
    _session(True, [], sack_route_refresh)
