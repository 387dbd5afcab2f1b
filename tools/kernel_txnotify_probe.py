"""What does *this machine's* kernel do for the transmit notifications of issue 14 (points 4-6)?

Run as root: ``.venv/bin/python tools/kernel_txnotify_probe.py``. Each probe creates a network
namespace with a TUN device, makes the kernel a TCP client of a hand-driven peer (as
``kernel_psh_probe.py``), and prints what the corpus scripts assert, so usertcp's model can be
checked against a live kernel rather than only against scripts recorded on older ones:

- TCP_NOTSENT_LOWAT 4000 (notsent_lowat/notsent-lowat-setsockopt.pkt): what a non-blocking
  write of 59000 bytes returns (the script: 26000) and the first data segment.
- MSG_ZEROCOPY over TUN (zerocopy/basic.pkt): the completion after the peer's ACK, with
  ``SO_EE_CODE_ZEROCOPY_COPIED`` (tun copies the frags) and consecutive ids merged.
- SO_TIMESTAMPING with OPT_ID (timestamping/server.pkt): the SCHED/SND/ACK keys of two writes.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from netns_helpers import PEER, TCP_ACK, TCP_SYN, US, PacketReader, Tcp, build_tcp, probe_session
from usertcp.net import netns
from usertcp.net.tun import TunDevice
from usertcp.wire.segment import TxPacket

SO_ZEROCOPY, MSG_ZEROCOPY, SO_TIMESTAMPING, TCP_NOTSENT_LOWAT = 60, 0x4000000, 37, 25
# mss 1000, sackOK, nop x3, wscale 7: the corpus scripts' SYN options
SYN_OPTS = struct.pack("!BBH", 2, 4, 1000) + bytes([4, 2, 1, 1, 1, 3, 3, 7])
_NO_TS = ["net.ipv4.tcp_timestamps=0"]


def _connect(dev: TunDevice, rd: PacketReader, ns: str, sockopts: list[tuple[int, int, int]]
             ) -> tuple[socket.socket, Tcp, int]:
    def connect() -> socket.socket:
        s = socket.socket()
        for level, name, value in sockopts:
            s.setsockopt(level, name, value)
        s.setblocking(False)
        s.connect_ex((US, 8080))
        return s

    s = netns.call_in_namespace(ns, connect)
    syn, _, _ = rd.next(lambda seg, p, ok: seg.flags == TCP_SYN)
    hdr, _ = build_tcp(US, PEER, 8080, syn.sport, 5000, syn.seq + 1, TCP_SYN | TCP_ACK, window=32792,
                       options=SYN_OPTS)
    dev.write(TxPacket(hdr))
    rd.next(lambda seg, p, ok: seg.flags == TCP_ACK)
    return s, syn, 5001


def _ack(dev: TunDevice, syn: Tcp, me: int, rel: int) -> None:
    dev.write(TxPacket(build_tcp(US, PEER, 8080, syn.sport, me, syn.seq + rel, TCP_ACK, window=257)[0]))


def notsent_lowat(dev: TunDevice, rd: PacketReader, ns: str) -> None:
    s, syn, _me = _connect(dev, rd, ns, [(socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT, 4000)])
    time.sleep(0.01)
    n = s.send(b"\0" * 59000)
    seg, _, _ = rd.next(lambda seg, p, ok: len(seg.payload) > 0)
    rel = seg.seq - syn.seq
    print(f"  write(59000) = {n} (script: 26000); first segment {rel}:{rel + len(seg.payload)}"
          f" (script: 1:10001)")
    s.close()


def _errqueue(s: socket.socket) -> list[tuple[int, int, bytes]]:
    _data, anc, _flags, _addr = s.recvmsg(0, 1024, socket.MSG_ERRQUEUE)
    return anc


def zerocopy(dev: TunDevice, rd: PacketReader, ns: str) -> None:
    s, syn, me = _connect(dev, rd, ns, [(socket.SOL_SOCKET, SO_ZEROCOPY, 1)])
    time.sleep(0.01)
    end = 1
    for i in range(2):
        s.send(b"\0" * 4000, MSG_ZEROCOPY)
        while end < 1 + 4000 * (i + 1):
            seg, _, _ = rd.next(lambda seg, p, ok: len(seg.payload) > 0)
            end = seg.seq - syn.seq + len(seg.payload)
        _ack(dev, syn, me, end)
        time.sleep(0.02)
    (_lvl, _kind, data), = _errqueue(s)
    err, origin, _t, code, _pad, info, value = struct.unpack_from("=IBBBBII", data)
    print(f"  two acked sends: errno={err} origin={origin} code={code} range {info}..{value}"
          f" (usertcp: origin 5, code 1 COPIED, 0..1)")
    s.close()


def timestamps(dev: TunDevice, rd: PacketReader, ns: str) -> None:
    s, syn, me = _connect(dev, rd, ns, [])
    time.sleep(0.01)
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, (1 << 8) | (1 << 1) | (1 << 9) | (1 << 4) | (1 << 7))
    s.send(b"\0" * 2000)
    s.send(b"\0" * 2000)
    end = 1
    while end < 4001:
        seg, _, _ = rd.next(lambda seg, p, ok: len(seg.payload) > 0)
        end = seg.seq - syn.seq + len(seg.payload)
    _ack(dev, syn, me, 2001)
    time.sleep(0.01)
    _ack(dev, syn, me, 4001)
    time.sleep(0.02)
    names = {0: "SND", 1: "SCHED", 2: "ACK"}
    seen = []
    while True:
        try:
            anc = _errqueue(s)
        except BlockingIOError:
            break
        data = anc[-1][2]
        _e, _o, _t, _c, _p, info, key = struct.unpack_from("=IBBBBII", data)
        seen.append(f"{names.get(info, info)}:{key}")
    print(f"  {' '.join(seen)}")
    print("  (server.pkt and usertcp: SCHED:1999 SND:1999 SCHED:3999 SND:3999 ACK:1999 ACK:3999)")
    s.close()


if __name__ == "__main__":
    print(f"kernel {subprocess.run(['uname', '-r'], capture_output=True, text=True).stdout.strip()}")
    print("TCP_NOTSENT_LOWAT 4000:")
    probe_session("txnprobe", notsent_lowat, offload=True, sysctls=_NO_TS)
    print("MSG_ZEROCOPY over TUN:")
    probe_session("txnprobe", zerocopy, offload=True, sysctls=_NO_TS)
    print("SO_TIMESTAMPING OPT_ID, two writes of 2000:")
    probe_session("txnprobe", timestamps, offload=True, sysctls=_NO_TS)
