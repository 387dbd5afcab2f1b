"""scapy (and tcpdump when installed) as independent checkers of the wire format."""

from __future__ import annotations

import hashlib
import shutil
import struct
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

scapy_all = pytest.importorskip("scapy.all")
IP = scapy_all.IP
IPv6 = scapy_all.IPv6
TCP = scapy_all.TCP
if TYPE_CHECKING:
    from scapy.packet import Packet

from usertcp.wire.md5 import tcp_md5_digest, verify_segment_md5  # noqa: E402
from usertcp.wire.packet import build_packet, parse_packet  # noqa: E402
from usertcp.wire.segment import ACK, PSH, SYN  # noqa: E402
from usertcp.wire.tcp import encode_options, options_length  # noqa: E402

det = settings(derandomize=True, deadline=None, max_examples=60)

V4 = ("192.0.2.1", "198.51.100.7")
V6 = ("2001:db8::1", "2001:db8::ff")
A4 = (bytes((192, 0, 2, 1)), bytes((198, 51, 100, 7)))
A6 = (bytes.fromhex("20010db8000000000000000000000001"), bytes.fromhex("20010db80000000000000000000000ff"))


def _scapy_opts(p: Packet) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, val in p[TCP].options:
        if name in ("NOP", "EOL"):
            continue
        out[name] = val
    return out


opts_st = st.fixed_dictionaries({
    "mss": st.one_of(st.just(-1), st.integers(0, 0xFFFF)),
    "wscale": st.one_of(st.just(-1), st.integers(0, 14)),
    "sack_permitted": st.booleans(),
    "ts": st.one_of(st.none(), st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))),
    "sack_blocks": st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)), max_size=3),
    "fastopen": st.one_of(st.none(), st.just(b""), st.just(b"abcdefgh"), st.just(b"wxyz")),
})


@det
@given(st.booleans(), opts_st, st.binary(max_size=100), st.integers(0, 2**32 - 1), st.integers(0, 0x1FF))
def test_scapy_reads_what_we_build(v6: bool, okw: dict[str, Any], payload: bytes, seq: int,
                                   flags: int) -> None:
    if options_length(**okw) > 40:
        okw["sack_blocks"] = []
    if options_length(**okw) > 40:
        okw["fastopen"] = None
    src, dst = A6 if v6 else A4
    opts = encode_options(**okw)
    wire = build_packet(src=src, dst=dst, sport=1234, dport=443, seq=seq, ack=99, flags=flags & ~0x04,
                        window=1000, options=opts, payload=(payload[:33], payload[33:]),
                        tos=0x28, ttl=17, flow_label=0xABCDE).tobytes()
    p = IPv6(wire) if v6 else IP(wire)
    t = p[TCP]
    assert (t.sport, t.dport, t.seq, t.ack, t.window) == (1234, 443, seq, 99, 1000)
    assert int(t.flags) == flags & ~0x04
    assert bytes(t.payload) == payload
    if v6:
        assert (p.src, p.dst, p.tc, p.hlim, p.fl, p.plen) == (*V6, 0x28, 17, 0xABCDE, len(wire) - 40)
    else:
        assert (p.src, p.dst, p.tos, p.ttl, p.len, p.flags.DF) == (*V4, 0x28, 17, len(wire), True)
    # scapy's own checksums over our bytes.
    ours_tcp = t.chksum
    del t.chksum
    if not v6:
        ours_ip = p.chksum
        del p.chksum
    q = (IPv6 if v6 else IP)(bytes(p))
    assert q[TCP].chksum == ours_tcp
    if not v6:
        assert q.chksum == ours_ip
    so = _scapy_opts(p)
    assert so.get("MSS", -1) == okw["mss"]
    assert so.get("WScale", -1) == okw["wscale"]
    assert ("SAckOK" in so) == okw["sack_permitted"]
    assert so.get("Timestamp") == okw["ts"]
    blocks = so.get("SAck", ())
    assert tuple(zip(blocks[::2], blocks[1::2], strict=True)) == tuple(okw["sack_blocks"])
    fo = so.get("TFO")
    if okw["fastopen"] is None:
        assert fo is None
    elif len(okw["fastopen"]) == 8:
        assert isinstance(fo, tuple) and struct.pack("!II", *fo) == okw["fastopen"]
    else:
        assert fo == okw["fastopen"]


@pytest.mark.parametrize("v6", [False, True])
def test_we_read_what_scapy_builds(v6: bool) -> None:
    opts = [("MSS", 1400), ("NOP", None), ("WScale", 9), ("SAckOK", b""), ("Timestamp", (11, 22)),
            ("NOP", None), ("NOP", None), ("SAck", (100, 200, 300, 400))]   # exactly 40 bytes
    ip = IPv6(src=V6[0], dst=V6[1], tc=3, hlim=9, fl=77) if v6 else IP(src=V4[0], dst=V4[1], tos=3, ttl=9)
    p = ip / TCP(sport=5, dport=6, seq=7, ack=8, flags="SA", window=9, urgptr=10, options=opts) / b"data!"
    seg = parse_packet(bytes(p))
    assert (seg.sport, seg.dport, seg.seq, seg.ack, seg.flags, seg.window, seg.urg_ptr) == (
        5, 6, 7, 8, SYN | ACK, 9, 10)
    assert (seg.tos, seg.ttl) == (3, 9)
    assert seg.flow_label == (77 if v6 else 0)
    assert (seg.mss, seg.wscale, seg.sack_permitted, seg.ts_val, seg.ts_ecr) == (1400, 9, True, 11, 22)
    assert seg.sack_blocks == ((100, 200), (300, 400))
    assert bytes(seg.payload) == b"data!"
    assert seg.fastopen is None and seg.unknown_options == 0
    # EOL ends the list: what follows is padding to us.
    p = ip / TCP(flags="S", options=[("SAckOK", b""), ("EOL", None), ("WScale", 3)])
    seg = parse_packet(bytes(p))
    assert seg.sack_permitted and seg.wscale == -1
    # Fast Open cookie and request (RFC 7413 kind 34) as scapy writes them.
    for cookie in (b"", b"12345678", b"abcd"):
        p = ip / TCP(flags="S", options=[("MSS", 1460), ("TFO", cookie)])
        seg = parse_packet(bytes(p))
        assert seg.fastopen == cookie and not seg.fastopen_exp and seg.mss == 1460
    # Bad checksum from scapy is caught.
    p = ip / TCP(sport=1, dport=2, chksum=0x1234) / b"x"
    with pytest.raises(Exception) as ei:
        parse_packet(bytes(p))
    assert getattr(ei.value, "counter", None) == "TcpInCsumErrors"


def _independent_md5(key: bytes, p: Packet, v6: bool) -> bytes:
    """RFC 2385 §2.0 from scapy's decoded fields, not from our code."""
    t = p[TCP]
    data = bytes(t.payload)
    seg_len = t.dataofs * 4 + len(data)
    if v6:
        ph = (scapy_all.inet_pton(scapy_all.socket.AF_INET6, p.src)
              + scapy_all.inet_pton(scapy_all.socket.AF_INET6, p.dst)
              + struct.pack("!I", seg_len) + b"\0\0\0\x06")
    else:
        ph = (scapy_all.inet_aton(p.src) + scapy_all.inet_aton(p.dst) + b"\0\x06"
              + struct.pack("!H", seg_len))
    fixed = struct.pack("!HHIIBBHHH", t.sport, t.dport, t.seq, t.ack, t.dataofs << 4 | (int(t.flags) >> 8),
                        int(t.flags) & 0xFF, t.window, 0, t.urgptr)
    return hashlib.md5(ph + fixed + data + key).digest()


@pytest.mark.parametrize("v6", [False, True])
@pytest.mark.parametrize("payload", [b"", b"odd", b"x" * 1000])
def test_md5_against_independent_digest(v6: bool, payload: bytes) -> None:
    key = b"s3cret-key"
    src, dst = A6 if v6 else A4
    opts = encode_options(md5=True, mss=1460, ts=(5, 6))
    wire = build_packet(src=src, dst=dst, sport=179, dport=50000, seq=1, ack=2, flags=ACK | PSH, window=3,
                        options=opts, payload=(payload,), md5_key=key).tobytes()
    p = IPv6(wire) if v6 else IP(wire)
    digest = dict(p[TCP].options)["MD5"]
    assert digest == _independent_md5(key, p, v6)
    assert digest != _independent_md5(key + b"!", p, v6)
    seg = parse_packet(wire)
    assert verify_segment_md5(seg, key)
    assert not verify_segment_md5(seg, b"other")
    assert tcp_md5_digest(key, src, dst, seg.tcp_header, (seg.payload,)) == digest
    # scapy-built MD5 segment (digest computed independently) verifies with our code.
    ip = IPv6(src=V6[0], dst=V6[1]) if v6 else IP(src=V4[0], dst=V4[1])
    q = ip / TCP(sport=1, dport=2, seq=3, ack=4, flags="A",
                 options=[("NOP", None), ("NOP", None), ("MD5", bytes(16))]) / payload
    q = (IPv6 if v6 else IP)(bytes(q))
    d = _independent_md5(key, q, v6)
    q = ip / TCP(sport=1, dport=2, seq=3, ack=4, flags="A",
                 options=[("NOP", None), ("NOP", None), ("MD5", d)]) / payload
    assert verify_segment_md5(parse_packet(bytes(q)), key)


def _write_pcap(path: Path, packets: list[bytes]) -> None:
    # Classic pcap, LINKTYPE_RAW (101): the record starts at the IP header.
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 101)]
    for i, pkt in enumerate(packets):
        out.append(struct.pack("<IIII", 1_700_000_000 + i, 0, len(pkt), len(pkt)))
        out.append(pkt)
    path.write_bytes(b"".join(out))


def _tcpdump(path: Path, *args: str) -> str:
    tcpdump = shutil.which("tcpdump")
    assert tcpdump is not None
    r = subprocess.run([tcpdump, "-nn", "-vv", *args, "-r", str(path)], capture_output=True,
                       text=True, timeout=15, check=False)
    return r.stdout + r.stderr


@pytest.mark.skipif(shutil.which("tcpdump") is None, reason="tcpdump not installed")
def test_tcpdump_md5_and_checksums(tmp_path: Path) -> None:
    key = "tcpdump-key"
    pkt = build_packet(src=A4[0], dst=A4[1], sport=179, dport=40000, seq=10, ack=20, flags=ACK | PSH,
                       window=30, options=encode_options(md5=True, ts=(1, 2)), payload=(b"bgp open",),
                       md5_key=key.encode()).tobytes()
    path = tmp_path / "md5.pcap"
    _write_pcap(path, [pkt])
    out = _tcpdump(path, "-M", key)
    if "can't check" in out:
        pytest.skip(f"tcpdump cannot check MD5 here: {out!r}")
    assert "md5 valid" in out, out
    assert "cksum" in out and "incorrect" not in out, out
    bad = _tcpdump(path, "-M", key + "x")
    assert "md5 valid" not in bad and "md5" in bad, bad


@pytest.mark.skipif(shutil.which("tcpdump") is None, reason="tcpdump not installed")
def test_tcpdump_checksums_v4_v6(tmp_path: Path) -> None:
    pkts = []
    for src, dst in (A4, A6):
        for payload in (b"", b"a", b"hello" * 300):
            pkts.append(build_packet(src=src, dst=dst, sport=1, dport=2, seq=3, ack=4, flags=ACK,
                                     window=5, options=encode_options(ts=(6, 7)),
                                     payload=(payload[:7], payload[7:])).tobytes())
    path = tmp_path / "ck.pcap"
    _write_pcap(path, pkts)
    out = _tcpdump(path)
    assert out.count(" cksum 0x") == 6 and out.count("(correct)") == 6, out   # IPv4 header: shown only if bad
    assert "incorrect" not in out, out
