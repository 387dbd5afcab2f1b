"""pcap writing/reading, and tshark as an independent checker of what we capture."""

from __future__ import annotations

import io
import struct
import sys
import threading
from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.packet import Raw

from usertcp.net.driver import VirtualTimeDriver
from usertcp.net.memnet import LinkConfig, Network
from usertcp.net.pcap import LINKTYPE_RAW, PcapWriter, read_pcap
from usertcp.wire.segment import TxPacket

# The helper sits next to this file; make it importable whatever pytest's import mode.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from pair import RecordingEndpoint
from tshark import HAVE_TSHARK, tshark_count, tshark_problems

needs_tshark = pytest.mark.skipif(not HAVE_TSHARK, reason="tshark is not installed")


def scapy_packets() -> list[bytes]:
    """A small valid TCP exchange over IPv4 and IPv6, checksums by scapy."""
    out = []
    for ip in (IP(src="10.0.0.1", dst="10.0.0.2"), IPv6(src="fd00::1", dst="fd00::2")):
        out.append(bytes(ip / TCP(sport=40000, dport=80, flags="S", seq=100, options=[("MSS", 1460)])))
        out.append(bytes(ip / TCP(sport=40000, dport=80, flags="A", seq=101, ack=1) / Raw(b"x" * 500)))
        out.append(bytes(ip / TCP(sport=40000, dport=80, flags="FA", seq=601, ack=1)))
    return out


# -- round trip -----------------------------------------------------------------------

@pytest.mark.parametrize("nanosecond", [True, False])
def test_round_trip(tmp_path: Path, nanosecond: bool) -> None:
    pkts = scapy_packets()
    times = [0.0, 0.000001, 1.5, 2.123456, 1_700_000_000.25, 3.999999]
    path = tmp_path / "rt.pcap"
    with PcapWriter(path, nanosecond=nanosecond) as w:
        for p, t in zip(pkts, times, strict=True):
            w.write(p, t)
    raw = path.read_bytes()
    magic, major, minor, _, _, snaplen, linktype = struct.unpack_from("<IHHiIII", raw)
    assert magic == (0xA1B23C4D if nanosecond else 0xA1B2C3D4)
    assert (major, minor, snaplen, linktype) == (2, 4, 262144, LINKTYPE_RAW)
    back = read_pcap(path)
    assert [p for _, p in back] == pkts
    tol = 1e-9 if nanosecond else 1e-6
    for (t, _), want in zip(back, times, strict=True):
        assert abs(t - want) <= tol * max(1.0, want / 1e6)


def test_txpacket_memoryview_and_file_object() -> None:
    buf = io.BytesIO()
    w = PcapWriter(buf)
    w.write(TxPacket(b"\x45" + bytes(19), (b"abc", memoryview(b"def"))), 1.0)
    w.write(memoryview(b"\x60" + bytes(39)), 2.0)
    w.write(bytearray(b"\x45" + bytes(19)), 3.0)
    w.close()
    assert not buf.closed                  # not ours to close
    buf.seek(0)
    assert read_pcap(buf) == [(1.0, b"\x45" + bytes(19) + b"abcdef"), (2.0, b"\x60" + bytes(39)),
                              (3.0, b"\x45" + bytes(19))]
    with pytest.raises(ValueError):
        w.write(b"x", 4.0)


def test_snaplen_truncates_but_keeps_original_length(tmp_path: Path) -> None:
    path = tmp_path / "snap.pcap"
    with PcapWriter(path, snaplen=64) as w:
        w.write(bytes(range(200)), 0.5)
    raw = path.read_bytes()
    _, _, incl, orig = struct.unpack_from("<IIII", raw, 24)
    assert (incl, orig) == (64, 200)
    assert read_pcap(path) == [(0.5, bytes(range(64)))]


def test_fraction_never_rounds_to_a_full_second() -> None:
    buf = io.BytesIO()
    with PcapWriter(buf, nanosecond=False) as w:
        w.write(b"\x45", 1.9999999)
        raw = buf.getvalue()
    sec, frac = struct.unpack_from("<II", raw, 24)
    assert (sec, frac) == (2, 0)


def test_reads_big_endian_microsecond_files() -> None:
    raw = struct.pack(">IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 101)
    raw += struct.pack(">IIII", 7, 250000, 3, 3) + b"abc"
    raw += struct.pack(">IIII", 8, 0, 2, 2) + b"de"
    assert read_pcap(io.BytesIO(raw)) == [(7.25, b"abc"), (8.0, b"de")]
    with pytest.raises(ValueError, match="truncated"):
        read_pcap(io.BytesIO(raw[:-1]))
    with pytest.raises(ValueError, match="magic"):
        read_pcap(io.BytesIO(b"\0" * 24))


def test_concurrent_writes_do_not_interleave(tmp_path: Path) -> None:
    path = tmp_path / "mt.pcap"
    w = PcapWriter(path)

    def writer(k: int) -> None:
        for i in range(500):
            w.write(bytes([k]) * (1 + i % 300), k + i / 1000)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.close()
    back = read_pcap(path)
    assert len(back) == 2000 == w.count
    assert all(p == bytes([p[0]]) * len(p) for _, p in back)


# -- captures from the network ----------------------------------------------------------



def run_capture(path: Path, cfg: LinkConfig, where: str = "send", copies: int = 1) -> RecordingEndpoint:
    net = Network(seed=3)
    a = net.add_host(RecordingEndpoint(scapy_packets() * copies), ["10.0.0.1", "fd00::1"])
    sink = RecordingEndpoint()
    b = net.add_host(sink, ["10.0.0.2", "fd00::2"])
    net.connect(a, b, cfg)
    with PcapWriter(path) as w:
        net.attach_pcap(w, where="deliver" if where == "deliver" else "send")
        VirtualTimeDriver(net).run_until_idle(10.0)
    return sink


def test_network_capture_matches_deliveries(tmp_path: Path) -> None:
    path = tmp_path / "net.pcap"
    sink = run_capture(path, LinkConfig(delay=0.25, bandwidth_bps=1e6), where="deliver")
    back = read_pcap(path)
    assert [p for _, p in back] == sink.got == scapy_packets()
    assert back[0][0] == pytest.approx(0.25 + len(sink.got[0]) * 8 / 1e6, abs=1e-9)


@needs_tshark
def test_tshark_accepts_valid_capture(tmp_path: Path) -> None:
    path = tmp_path / "good.pcap"
    run_capture(path, LinkConfig(delay=0.01))
    assert tshark_count(path) == 6
    assert tshark_problems(path) == []


@needs_tshark
def test_tshark_flags_network_corruption(tmp_path: Path) -> None:
    path = tmp_path / "bad.pcap"
    sink = run_capture(path, LinkConfig(delay=0.01, corrupt=1.0), where="deliver", copies=3)
    assert len(sink.got) == 18
    problems = tshark_problems(path)
    # A flip in a length field can also read as malformed; every frame must be caught.
    assert len(problems) == 18, problems
    assert any("checksum" in p.lower() for p in problems)


@needs_tshark
def test_tshark_flags_bad_checksum_and_truncated_header(tmp_path: Path) -> None:
    good = scapy_packets()
    bad_tcp = bytearray(good[1])
    bad_tcp[-1] ^= 0x01                       # payload byte: TCP checksum
    bad_ip = bytearray(good[0])
    bad_ip[8] ^= 0x01                         # TTL: IPv4 header checksum
    truncated = good[0][:30]                  # TCP header cut short
    frames: list[bytes | bytearray] = [good[0], bad_tcp, good[2], bad_ip, truncated, good[3]]
    path = tmp_path / "mixed.pcap"
    with PcapWriter(path) as w:
        for i, p in enumerate(frames):
            w.write(p, float(i))
    assert tshark_count(path) == 6
    problems = tshark_problems(path)
    assert [p.split(":")[0] for p in problems] == ["frame 2", "frame 4", "frame 5"], problems
    assert "checksum" in problems[0].lower() and "checksum" in problems[1].lower()
