"""How does *this machine's* Linux kernel reduce cwnd on an ECN echo (tcp_enter_cwr + PRR)?

Run as root: ``.venv/bin/python tools/kernel_cc_probe.py``. The probe creates its own network
namespace with a TUN device (TSO on, as packetdrill's tun), makes the kernel an ECN-capable
TCP client of a hand-driven peer (10.77.0.2, inside the namespace only) and replays
cwnd_moderation/cwnd-moderation-ecn-enter-cwr-no-moderation-700.pkt: 4000 bytes at mss 1000,
then an ACK of the first 1000 with ECE. It prints tcpi_ca_state, tcpi_snd_cwnd and
tcpi_snd_ssthresh as TCP_INFO reports them. That script expects cwnd 4 (PRR-CRB: sndcnt =
min(delta, newly_acked) = 1), the PRR of kernels before 5.x; since "tcp: PRR uses CRB mode by
default and SS mode conditionally" (2021) and its 2022 follow-up, tcp_cwnd_reduction adds one
more packet when snd_una advanced without new loss: cwnd 3 + 2 = 5, which usertcp gives.

It also replays nagle/https_client.pkt at the script's 100 ms RTT on a device without TSO
(kernel_psh_probe.py answers the SYN at once): the kernel still builds GSO skbs, here of two
segments (tcp_tso_autosize at that pacing rate), and software GSO puts PSH on the last packet
of each, so 1543:2517 carries PSH as the script expects (usertcp does the same).
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from netns_helpers import PEER, TCP_ACK, TCP_SYN, US, PacketReader, build_tcp, probe_session
from usertcp.net import netns
from usertcp.net.tun import TunDevice
from usertcp.wire.segment import TxPacket

TCP_ECE, TCP_CWR = 0x40, 0x80
TCP_CONGESTION = 13
PORT = 8080


def tcp_info(s: socket.socket) -> tuple[int, int, int]:
    """(tcpi_ca_state, tcpi_snd_cwnd, tcpi_snd_ssthresh) from struct tcp_info."""
    raw = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    ssthresh, cwnd = struct.unpack_from("=II", raw, 76)
    return raw[1], cwnd, ssthresh


def ecn_cwr(dev: TunDevice, rd: PacketReader, ns: str) -> None:
    subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "ut0", "root", "pfifo"],
                   check=True)

    def connect() -> socket.socket:
        s = socket.socket()
        s.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, b"cubic")
        s.setblocking(False)
        s.connect_ex((US, PORT))
        return s

    s = netns.call_in_namespace(ns, connect)
    syn, _, _ = rd.next(lambda seg, p, ok: bool(seg.flags & TCP_SYN))
    print(f"  SYN flags {syn.flags:#x} (ECE|CWR requested: {syn.flags & (TCP_ECE | TCP_CWR) == 0xC0})")
    time.sleep(0.1)
    me = 5000
    opts = struct.pack("!BBH", 2, 4, 1000) + bytes([1, 1, 4, 2, 1, 3, 3, 7])
    hdr, _ = build_tcp(US, PEER, PORT, syn.sport, me, syn.seq + 1, TCP_SYN | TCP_ACK | TCP_ECE, window=32792,
                       options=opts)
    dev.write(TxPacket(hdr))
    rd.next(lambda seg, p, ok: bool(seg.flags & TCP_ACK) and not seg.payload)
    s.send(b"x" * 4000)
    end = 0
    while end < syn.seq + 4001:
        seg, _, _ = rd.next(lambda seg, p, ok: len(seg.payload) > 0)
        end = seg.seq + len(seg.payload)
    print(f"  after the write: ca_state, cwnd, ssthresh = {tcp_info(s)}")
    time.sleep(0.095)
    hdr, _ = build_tcp(US, PEER, PORT, syn.sport, me + 1, syn.seq + 1001, TCP_ACK | TCP_ECE, window=320)
    dev.write(TxPacket(hdr))
    time.sleep(0.005)
    print(f"  after <E. ack 1001>: ca_state, cwnd, ssthresh = {tcp_info(s)} (script: 2, 4, 7)")
    s.close()


def https_client_at_script_rtt(dev: TunDevice, rd: PacketReader, ns: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import kernel_psh_probe as psh

    psh.https_client(dev, rd, ns, rtt=0.1)


if __name__ == "__main__":
    print(f"kernel {subprocess.run(['uname', '-r'], capture_output=True, text=True).stdout.strip()}")
    print("cwnd-moderation-ecn-enter-cwr-no-moderation-700:")
    probe_session("ccprobe", ecn_cwr, offload=True,
                  sysctls=["net.ipv4.tcp_timestamps=0", "net.ipv4.tcp_ecn=1",
                           "net.ipv4.tcp_slow_start_after_idle=0"])
    print("nagle/https_client at 100 ms RTT (script: . 569:1543, P. 1543:2517, P. 2517:2571):")
    probe_session("ccprobe", https_client_at_script_rtt, sysctls=["net.ipv4.tcp_timestamps=0"])
