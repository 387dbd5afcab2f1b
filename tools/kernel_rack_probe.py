"""When does *this machine's* kernel fire the RACK reordering timer (tcp_rack_reo_timeout)?

Run as root: ``.venv/bin/python tools/kernel_rack_probe.py``. The kernel is a TCP client of a
hand-driven peer in a fresh namespace with a TUN device (as ``kernel_psh_probe.py``): its
handshake takes 100 ms, it sends a write, and 100 ms later the peer SACKs one segment. RACK then
waits the reordering window (min_rtt/4 = 25 ms) plus TCP_TIMEOUT_MIN (2 jiffies), both rounded
up to jiffies (usecs_to_jiffies), before it retransmits the first segment.

This is the evidence behind the corpus notes on fast_retransmit/fr-4pkt-fack-last-mss.pkt
(expects 40 ms) and sack/sack-shift-sacked-*.pkt (expect 27 ms): on a HZ=1000 kernel the timer
is 25 + 2 = 27 ms, on a HZ=250 kernel 28 + 8 = 36 ms less the phase of the jiffy clock
(about 29 to 36 ms measured); no single kernel gives both scripts their times.
"""

from __future__ import annotations

import gzip
import re
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from kernel_psh_probe import CORPUS_SYSCTLS, CUBIC, kernel_connects, pfifo, show

from netns_helpers import PEER, TCP_ACK, US, PacketReader, build_tcp, probe_session
from usertcp.net.tun import TunDevice
from usertcp.wire.segment import TxPacket


def kernel_hz() -> str:
    """CONFIG_HZ of the running kernel, from /proc/config.gz or /boot/config-<release>."""
    release = Path("/proc/sys/kernel/osrelease").read_text().strip()
    for path in (Path("/proc/config.gz"), Path(f"/boot/config-{release}")):
        try:
            text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
        except OSError:
            continue
        m = re.search(r"^CONFIG_HZ=(\d+)$", text, re.M)
        if m:
            return m.group(1)
    return "unknown"


def reo_timer(nbytes: int, sacked: tuple[int, int]) -> None:
    def body(dev: TunDevice, rd: PacketReader, ns: str) -> None:
        pfifo(ns)
        opts = struct.pack("!BBH", 2, 4, 1000) + bytes([1, 1, 4, 2, 1, 3, 3, 7])
        s, syn, me = kernel_connects(dev, rd, ns, 8080, [CUBIC], opts, 32792, rtt=0.1)
        base = syn.seq
        s.send(b"x" * nbytes)
        end = 0
        while end < base + 1 + nbytes:
            seg, _, _ = rd.next(lambda seg, p, ok: len(seg.payload) > 0)
            show(seg, base)
            end = seg.seq + len(seg.payload)
        time.sleep(0.1)
        sack = bytes([1, 1, 5, 10]) + struct.pack("!II", base + sacked[0], base + sacked[1])
        t0 = time.monotonic()
        dev.write(TxPacket(build_tcp(US, PEER, 8080, syn.sport, me, base + 1, TCP_ACK, window=320,
                                     options=sack)[0]))
        seg, _, _ = rd.next(lambda seg, p, ok: len(seg.payload) > 0)
        print(f"  <sack {sacked[0]}:{sacked[1]}>, then {1e3 * (time.monotonic() - t0):.1f} ms later:", end="")
        show(seg, base)
        s.close()

    probe_session("rackprobe", body, offload=True, sysctls=CORPUS_SYSCTLS)


if __name__ == "__main__":
    print(f"kernel CONFIG_HZ={kernel_hz()}")
    for _ in range(3):
        print("fr-4pkt-fack-last-mss (script: 40 ms):")
        reo_timer(4000, (3001, 4001))
        print("sack-shift-sacked-7-3-4-8-9-fack (script: 27 ms):")
        reo_timer(10000, (7001, 8001))
