"""What does *this machine's* kernel do with Accurate ECN in the handshake's retransmissions?

Run as root: ``.venv/bin/python tools/kernel_accecn_probe.py``. Linux 6.18 refuses
``net.ipv4.tcp_ecn=3`` but negotiates AccECN for a congestion control flagged
``TCP_CONG_NEEDS_ACCECN``; the probe registers one (Reno as BPF struct_ops,
tests/bpf_accecn_ca.py, gone when the probe exits) and, in a namespace of its own with a TUN
device, plays the peer by hand:

* **SYN retransmissions**: the kernel connects with that controller and we never answer;
  for each SYN it sends: AE, CWR, ECE (the ACE field) and the IP-ECN field.
* **SYN-ACK retransmissions**: we send an AccECN SYN (AE|CWR|ECE, Not-ECT) to a listener
  with that controller and never complete the handshake; for each SYN-ACK: its ACE, IP-ECN
  field and whether it carries the AccECN option (kinds 172/174).
* **A large ACK without the option** (tests/drill/accecn-large-ack-no-option.pkt against the
  kernel): the handshake completes, the kernel sends 10 segments, one ACK covers them all
  with its ACE unchanged and no option; then 3 more, ACKed with ACE + 2. The kernel's
  ``tcpi_delivered_ce`` and ``tcpi_ca_state`` after each.
* **A bleached handshake ACK** (ACE 000, RFC 9768 Table 4): the IP-ECN field and ACE of the
  kernel's next data, and its ``tcpi_accecn_fail_mode``.
* **An RFC 3168 client meets AccECN SYN-ACKs**: the kernel with ``tcp_ecn=1`` (what
  ``tcp_ecn=4`` asks for too) answered by SYN-ACKs of every ACE value: its handshake ACK
  and first data (6.18 turns to AccECN on 010, 011, 100 and 110).
* **SACK precedence**: with timestamps, CE-marked out-of-order segments make one, two, three
  SACK blocks; the AccECN option the kernel fits beside them (tests/drill/accecn-sack-
  precedence.pkt: three fields and one block, two fields and two blocks, two fields and two
  of three blocks, then no option and three blocks).
* **Our ACKs' loss seen from the kernel**: with options both ways, we send a segment and then
  the same segment twice more, as a sender whose ACKs (carrying the option) never arrive;
  whether the kernel concludes that its options are dropped (``tcpi_accecn_fail_mode``
  bit 4, ``TCP_ACCECN_OPT_FAIL_SEND``, which later kernels set from the D-SACK) and whether
  its later ACKs still carry the option.

It is the evidence for what usertcp's tcp/accecn.py does on those paths (docs/ecn.md,
"Retransmissions").
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from bpf_accecn_ca import AccEcnCongestionControl
from netns_helpers import (
    PEER,
    TCP_ACK,
    TCP_RST,
    TCP_SYN,
    US,
    PacketReader,
    build_tcp,
    ip_checksum,
    probe_session,
)
from usertcp.net import netns
from usertcp.net.tun import TunDevice
from usertcp.wire.segment import TxPacket

TCP_ECE, TCP_CWR = 0x40, 0x80
ACCECN_KINDS = (172, 174)


def describe(pkt: memoryview | bytes) -> str:
    """ACE (AE CWR ECE as three bits), IP-ECN field and AccECN option of a TCP/IPv4 packet."""
    raw = bytes(pkt)
    ihl = (raw[0] & 0xF) * 4
    doff = (raw[ihl + 12] >> 4) * 4
    ace = (raw[ihl + 12] & 1) << 2 | raw[ihl + 13] >> 6       # AE, CWR, ECE
    opts, i, found = raw[ihl + 20:ihl + doff], 0, {}
    while i < len(opts) and opts[i] != 0:
        if opts[i] == 1:
            i += 1
            continue
        found[opts[i]] = opts[i + 2:i + opts[i + 1]]
        i += max(opts[i + 1], 2)
    acc = next((k for k in found if k in ACCECN_KINDS), None)
    text = f"ACE {ace:03b}  IP-ECN {raw[1] & 3}  AccECN option "
    if acc is None:
        text += "none"
    else:
        body = found[acc]
        text += f"{acc} {[int.from_bytes(body[j:j + 3], 'big') for j in range(0, len(body), 3)]}"
    if 5 in found:
        blocks = found[5]
        text += "  SACK " + " ".join(f"{int.from_bytes(blocks[j:j + 4], 'big')}:"
                                     f"{int.from_bytes(blocks[j + 4:j + 8], 'big')}"
                                     for j in range(0, len(blocks), 8))
    return text


def _cc_socket(cc: str) -> socket.socket:
    """A TCP socket with congestion control ``cc`` (call it inside the namespace)."""
    s = socket.socket()
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
    return s


def _listener(cc: str, port: int) -> socket.socket:
    """The kernel listening at PEER:``port`` with controller ``cc``."""
    s = _cc_socket(cc)
    s.bind((PEER, port))
    s.listen(4)
    return s


def _connecting(cc: str, port: int) -> socket.socket:
    """The kernel connecting to US:``port`` with controller ``cc``, non-blocking (its SYN leaves)."""
    s = _cc_socket(cc)
    s.setblocking(False)
    s.connect_ex((US, port))
    return s


def syn_retransmissions(cc: str, count: int = 3, fallback: int = 1) -> list[str]:
    out: list[str] = []

    def body(dev: TunDevice, rd: PacketReader, ns: str) -> None:
        s = netns.call_in_namespace(ns, _connecting, cc, 7101)
        t0 = time.monotonic()
        try:
            for _ in range(count):
                _seg, pkt, _ = rd.next(lambda seg, p, ok: seg.flags & TCP_SYN != 0, timeout=10)
                out.append(f"SYN at +{time.monotonic() - t0:.1f} s: {describe(pkt)}")
        finally:
            s.close()

    probe_session("utaccp1", body, sysctls=[f"net.ipv4.tcp_ecn_fallback={fallback}"])
    return out


def synack_retransmissions(cc: str, count: int = 4) -> list[str]:
    out: list[str] = []

    def body(dev: TunDevice, rd: PacketReader, ns: str) -> None:
        lst = netns.call_in_namespace(ns, _listener, cc, 7102)
        try:
            opts = struct.pack("!BBH", 2, 4, 1460) + b"\x04\x02\x01\x01"      # MSS, SACK-permitted
            hdr, _ = build_tcp(US, PEER, 40001, 7102, 1000, 0, TCP_SYN | TCP_ECE | TCP_CWR, options=opts)
            syn = bytearray(hdr)
            _set_ae(syn)
            dev.write(TxPacket(bytes(syn)))
            t0 = time.monotonic()
            seq = 0
            for _ in range(count):
                seg, pkt, _ = rd.next(lambda seg, p, ok: seg.flags & (TCP_SYN | TCP_ACK) == TCP_SYN | TCP_ACK,
                                      timeout=10)
                seq = seg.seq
                out.append(f"SYN-ACK at +{time.monotonic() - t0:.1f} s: {describe(pkt)}")
            rst, _ = build_tcp(US, PEER, 40001, 7102, 1001, seq + 1, TCP_RST)
            dev.write(TxPacket(rst))
        finally:
            lst.close()

    probe_session("utaccp2", body)
    return out


def _set_ae(packet: bytearray) -> None:
    """Set AE (the reserved bit before CWR) in a built IPv4/TCP packet, checksum fixed."""
    ihl = (packet[0] & 0xF) * 4
    packet[ihl + 12] |= 1
    csum = struct.unpack_from("!H", packet, ihl + 16)[0]
    # RFC 1624 incremental update: the 16-bit word at ihl+12 grew by 0x0100.
    total = (~csum & 0xFFFF) + 0x0100
    total = (total & 0xFFFF) + (total >> 16)
    struct.pack_into("!H", packet, ihl + 16, ~total & 0xFFFF)


def _packet(seq: int, ack: int, flags: int, ace: int, *, tos: int = 0, options: bytes = b"",
            window: int = 257, sport: int = 40003, dport: int = 7103, payload: bytes = b"") -> TxPacket:
    """A segment to the kernel with the ACE field ``ace`` (AE, CWR, ECE) and IP-ECN ``tos``."""
    flags |= (ace & 2) << 6 | (ace & 1) << 6
    hdr, data = build_tcp(US, PEER, sport, dport, seq, ack, flags, window=window, options=options,
                          payload=payload)
    pkt = bytearray(hdr + data)
    if ace & 4:
        _set_ae(pkt)
    pkt[1] = tos
    pkt[10:12] = b"\0\0"
    struct.pack_into("!H", pkt, 10, ip_checksum(bytes(pkt[:20])))
    return TxPacket(bytes(pkt))


def _kernel_info(sock: socket.socket) -> tuple[int, int, int]:
    """tcpi_delivered_ce, tcpi_ca_state, tcpi_accecn_fail_mode (Linux 6.18 struct tcp_info)."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 512)
    return struct.unpack_from("=I", raw, 196)[0], raw[1], struct.unpack_from("=H", raw, 276)[0]


def _kernel_server(cc: str, third_ace: int, out: list[str], body: Callable[[TunDevice, PacketReader,
                   socket.socket, int], None], name: str, third_opt: bytes = b"") -> None:
    """A listener with controller ``cc``; our AccECN SYN (Not-ECT, MSS 1000, SACK, WS 7), its
    SYN-ACK described in ``out``, our handshake ACK with ACE ``third_ace`` (ECT(0)), then
    ``body(device, reader, accepted socket, the kernel's next sequence number)``."""
    def run(dev: TunDevice, rd: PacketReader, ns: str) -> None:
        lst = netns.call_in_namespace(ns, _listener, cc, 7103)
        try:
            # MSS 1000, NOP NOP SACK-permitted, NOP wscale 7
            opts = struct.pack("!BBH", 2, 4, 1000) + b"\x01\x01\x04\x02\x01\x03\x03\x07"
            dev.write(_packet(0, 0, TCP_SYN, 0b111, options=opts, window=32792))
            synack, pkt, _ = rd.next(lambda seg, p, ok: seg.flags & TCP_SYN != 0)
            out.append(f"SYN-ACK: {describe(pkt)}")
            dev.write(_packet(1, synack.seq + 1, TCP_ACK, third_ace, tos=2, options=third_opt))
            conn, _ = lst.accept()
            with conn:
                body(dev, rd, conn, synack.seq + 1)
        finally:
            lst.close()

    probe_session(name, run)


def _read_data(rd: PacketReader, size: int) -> list[str]:
    got, seen = 0, []
    while got < size:
        seg, pkt, _ = rd.next(lambda seg, p, ok: len(seg.payload) > 0)
        got += len(seg.payload)
        seen.append(describe(pkt))
    return seen


def large_ack(cc: str) -> list[str]:
    out: list[str] = []

    def body(dev: TunDevice, rd: PacketReader, conn: socket.socket, nxt: int) -> None:
        for size, ace, want in ((10_000, 0b101, "unchanged ACE"), (3000, 0b111, "ACE + 2")):
            conn.sendall(bytes(size))
            _read_data(rd, size)
            nxt += size
            dev.write(_packet(1, nxt, TCP_ACK, ace, tos=2))
            time.sleep(0.05)
            ce, ca_state, _fail = _kernel_info(conn)
            out.append(f"{size} bytes in {size // 1000} segments, one ACK with {want}, no option: "
                       f"tcpi_delivered_ce {ce}, tcpi_ca_state {ca_state}")

    _kernel_server(cc, 0b010, out, body, "utaccp3")
    return out


def third_ack_bleached(cc: str) -> list[str]:
    """RFC 9768 Table 4: a handshake ACK with ACE 000 means a middlebox cleared the field."""
    out: list[str] = []

    def body(dev: TunDevice, rd: PacketReader, conn: socket.socket, nxt: int) -> None:
        conn.sendall(bytes(1000))
        out.extend(f"then data: {d}" for d in _read_data(rd, 1000))
        out.append(f"tcpi_accecn_fail_mode {_kernel_info(conn)[2]}")

    _kernel_server(cc, 0b000, out, body, "utaccp4")
    return out


def classic_client_meets_accecn_synack(synack_ace: int, cc: str = "cubic") -> list[str]:
    """The kernel as an RFC 3168 client (tcp_ecn=1, as tcp_ecn=4 asks), answered with a SYN-ACK
    whose ACE is ``synack_ace``: does it run ECN (its data ECT(0), TCPI_OPT_ECN)?"""
    out: list[str] = []

    def body(dev: TunDevice, rd: PacketReader, ns: str) -> None:
        s = netns.call_in_namespace(ns, _connecting, cc, 7104)
        try:
            syn, pkt, _ = rd.next(lambda seg, p, ok: seg.flags & TCP_SYN != 0)
            out.append(f"SYN: {describe(pkt)}")
            dev.write(_packet(5000, syn.seq + 1, TCP_SYN | TCP_ACK, synack_ace, sport=7104, dport=syn.sport,
                              options=struct.pack("!BBH", 2, 4, 1000), window=65535))
            _seg, pkt, _ = rd.next(lambda seg, p, ok: seg.flags & (TCP_SYN | TCP_ACK) == TCP_ACK)
            out.append(f"SYN-ACK with ACE {synack_ace:03b}: the handshake's ACK {describe(pkt)}")
            time.sleep(0.05)
            raw = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 512)
            ssthresh, cwnd = struct.unpack_from("=II", raw, 76)
            out.append(f"  then tcpi_ca_state {raw[1]}, snd_ssthresh {ssthresh}, snd_cwnd {cwnd}")
            s.setblocking(True)
            s.sendall(bytes(500))
            _seg, pkt, _ = rd.next(lambda seg, p, ok: len(seg.payload) > 0)
            raw = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 512)
            out.append(f"SYN-ACK with ACE {synack_ace:03b}: its data {describe(pkt)}; "
                       f"TCPI_OPT_ECN {bool(raw[5] & 8)}")
        finally:
            s.close()

    probe_session("utaccp6", body, sysctls=["net.ipv4.tcp_ecn=1"])
    return out


ACCECN_OPT_INIT = bytes((174, 11, 0, 0, 1, 0, 0, 0, 0, 0, 1, 1))    # e1b 1, ceb 0, e0b 1; NOP


def options_dropped(cc: str) -> list[str]:
    out: list[str] = []

    def body(dev: TunDevice, rd: PacketReader, conn: socket.socket, nxt: int) -> None:
        def send(seq: int) -> str:
            dev.write(_packet(seq, nxt, TCP_ACK | 0x08, 0b101, tos=2, options=ACCECN_OPT_INIT,
                              payload=bytes(100)))
            _seg, pkt, _ = rd.next(lambda seg, p, ok: seg.flags & TCP_ACK != 0 and not seg.payload)
            return describe(pkt)
        for what in ("the segment", "again (1st duplicate)", "again (2nd duplicate)",
                     "again (3rd duplicate)"):
            ack = send(1)
            out.append(f"{what}: the kernel ACKs with {ack}; tcpi_accecn_fail_mode "
                       f"{_kernel_info(conn)[2]}")

    _kernel_server(cc, 0b010, out, body, "utaccp5", third_opt=ACCECN_OPT_INIT)
    return out


def _ts(val: int, ecr: int) -> bytes:
    return b"\x01\x01" + struct.pack("!BBII", 8, 10, val, ecr)


def sack_precedence(cc: str) -> list[str]:
    """tests/drill/accecn-sack-precedence.pkt against the kernel: with timestamps, out-of-order
    CE-marked segments make one, two, three SACK blocks; what AccECN option shares the space."""
    out: list[str] = []

    def run(dev: TunDevice, rd: PacketReader, ns: str) -> None:
        lst = netns.call_in_namespace(ns, _listener, cc, 7105)
        try:
            syn_opts = struct.pack("!BBH", 2, 4, 1000) + b"\x04\x02" + _ts(100, 0)[2:] + b"\x01\x03\x03\x07"
            dev.write(_packet(0, 0, TCP_SYN, 0b111, options=syn_opts, window=32792, sport=40005, dport=7105))
            synack, pkt, _ = rd.next(lambda seg, p, ok: seg.flags & TCP_SYN != 0)
            ts_opt = synack.option(8)
            tsval = struct.unpack("!I", ts_opt[:4])[0] if ts_opt else 0
            nxt = synack.seq + 1
            dev.write(_packet(1, nxt, TCP_ACK, 0b010, tos=2, options=_ts(110, tsval) + ACCECN_OPT_INIT,
                              sport=40005, dport=7105))
            conn, _ = lst.accept()
            with conn:
                for i, (start, tos) in enumerate(((1001, 3), (3001, 3), (5001, 3), (7001, 2))):
                    dev.write(_packet(start, nxt, TCP_ACK | 0x08, 0b101, tos=tos, payload=bytes(1000),
                                      options=_ts(120 + i, tsval) + ACCECN_OPT_INIT, sport=40005,
                                      dport=7105))
                    _seg, pkt, _ = rd.next(lambda seg, p, ok: seg.flags & TCP_ACK != 0 and not seg.payload)
                    out.append(f"{start}:{start + 1000} {'CE' if tos == 3 else 'ECT(0)'}: the kernel ACKs "
                               f"with {describe(pkt)}")
        finally:
            lst.close()

    probe_session("utaccp7", run)
    return out


def _show(title: str, lines: list[str]) -> None:
    print(title)
    for line in lines:
        print("  " + line)


def main() -> None:
    if os.geteuid() != 0:
        sys.exit("run as root (network namespaces, bpf)")
    with AccEcnCongestionControl(f"utaccp{os.getpid() % 10000}") as cc:
        print(f"kernel {os.uname().release}; controller {cc.name} (TCP_CONG_NEEDS_ACCECN)")
        for fallback in (1, 0):
            _show(f"\nThe kernel's SYNs, never answered (net.ipv4.tcp_ecn_fallback={fallback}):",
                  syn_retransmissions(cc.name, fallback=fallback))
        _show("\nThe kernel's SYN-ACKs to an AccECN SYN (Not-ECT), never ACKed (tcp_ecn_fallback=1):",
              synack_retransmissions(cc.name))
        _show("\nLarge ACKs without the AccECN option (the kernel sends):", large_ack(cc.name))
        _show("\nOur handshake ACK with ACE 000 (a middlebox cleared it):", third_ack_bleached(cc.name))
        print("\nThe kernel as an RFC 3168 client (tcp_ecn=1) answered by SYN-ACKs of each ACE:")
        for ace in (0b001, 0b010, 0b011, 0b101, 0b110):
            for line in classic_client_meets_accecn_synack(ace)[1:]:
                print("  " + line)
        _show("\nSACK blocks and the AccECN option in one option space (timestamps on):",
              sack_precedence(cc.name))
        _show("\nThe kernel receives a segment three times, as if its ACKs were lost:",
              options_dropped(cc.name))


if __name__ == "__main__":
    main()
