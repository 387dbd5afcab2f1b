from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from usertcp.wire.checksum import internet_checksum, pseudo_header_sum
from usertcp.wire.md5 import verify_segment_md5
from usertcp.wire.packet import build_packet, parse_packet
from usertcp.wire.segment import ACK, AE, FIN, PSH, RST, SYN, Buffer, DropPacket, Segment
from usertcp.wire.tcp import encode_options, options_length

det = settings(derandomize=True, deadline=None, max_examples=250)

V4 = (bytes((192, 0, 2, 1)), bytes((198, 51, 100, 7)))
V6 = (bytes.fromhex("20010db8000000000000000000000001"), bytes.fromhex("20010db80000000000000000000000ff"))


def data_pkt(v6: bool = False, payload: bytes = b"hello world", options: bytes | None = None,
             flags: int = ACK | PSH) -> bytes:
    src, dst = V6 if v6 else V4
    return build_packet(src=src, dst=dst, sport=40000, dport=80, seq=1000, ack=2000, flags=flags, window=512,
                        options=encode_options(ts=(7, 9)) if options is None else options,
                        payload=(payload,)).tobytes()


def fix_ip4_csum(b: bytearray) -> None:
    ihl = (b[0] & 15) * 4
    if len(b) < 20 or ihl < 20 or ihl > len(b):
        return
    b[10:12] = b"\0\0"
    b[10:12] = internet_checksum([b[:ihl]]).to_bytes(2, "big")


def fix_tcp_csum(b: bytearray, v6: bool) -> None:
    off = 40 if v6 else (b[0] & 15) * 4
    end = 40 + int.from_bytes(b[4:6], "big") if v6 else int.from_bytes(b[2:4], "big")
    if len(b) < 40 or end > len(b) or end < off + 20:
        return
    src, dst = (bytes(b[8:24]), bytes(b[24:40])) if v6 else (bytes(b[12:16]), bytes(b[16:20]))
    b[off + 16:off + 18] = b"\0\0"
    c = internet_checksum([b[off:end]], pseudo_header_sum(src, dst, 6, end - off))
    b[off + 16:off + 18] = c.to_bytes(2, "big")


# ---------------------------------------------------------------- round trip

fields_st = st.fixed_dictionaries({
    "v6": st.booleans(),
    "sport": st.integers(0, 0xFFFF),
    "dport": st.integers(0, 0xFFFF),
    "seq": st.integers(0, 2**32 - 1),
    "ack": st.integers(0, 2**32 - 1),
    "flags": st.integers(0, 0x1FF).filter(lambda f: not (f & SYN and f & RST)),
    "window": st.integers(0, 0xFFFF),
    "urg_ptr": st.integers(0, 0xFFFF),
    "tos": st.integers(0, 255),
    "ttl": st.integers(0, 255),
    "flow_label": st.integers(0, 0xFFFFF),
    "ip_id": st.integers(0, 0xFFFF),
    "df": st.booleans(),
    "payload": st.lists(st.binary(max_size=300), max_size=5),
    "mss": st.one_of(st.just(-1), st.integers(0, 0xFFFF)),
    "wscale": st.one_of(st.just(-1), st.integers(0, 14)),
    "sack_permitted": st.booleans(),
    "ts": st.one_of(st.none(), st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))),
    "sack_blocks": st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)), max_size=3),
    "fastopen": st.one_of(st.none(), st.sampled_from([b"", b"abcd", b"12345678", b"x" * 16])),
    "md5_key": st.one_of(st.none(), st.binary(min_size=1, max_size=80)),
})

OPT_KEYS = ("mss", "wscale", "sack_permitted", "ts", "sack_blocks", "fastopen")


@det
@given(fields_st)
def test_build_parse_round_trip(f: dict[str, Any]) -> None:
    okw = {k: f[k] for k in OPT_KEYS}
    okw["md5"] = f["md5_key"] is not None
    if options_length(**okw) > 40:
        okw["sack_blocks"] = []
        okw["fastopen"] = None
        if options_length(**okw) > 40:
            okw["ts"] = None
    opts = encode_options(**okw)
    src, dst = V6 if f["v6"] else V4
    tx = build_packet(src=src, dst=dst, sport=f["sport"], dport=f["dport"], seq=f["seq"], ack=f["ack"],
                      flags=f["flags"], window=f["window"], urg_ptr=f["urg_ptr"], options=opts,
                      payload=f["payload"], tos=f["tos"], ttl=f["ttl"], flow_label=f["flow_label"],
                      ip_id=f["ip_id"], df=f["df"], md5_key=f["md5_key"])
    assert tx.payload is f["payload"] or list(tx.payload) == f["payload"]
    wire = tx.tobytes()
    assert len(tx) == len(wire)
    seg = parse_packet(wire)
    assert seg.ip_version == (6 if f["v6"] else 4)
    assert (seg.src, seg.dst) == (src, dst)
    for k in ("sport", "dport", "seq", "ack", "flags", "window", "tos", "ttl"):
        assert getattr(seg, k) == f[k], k
    assert seg.urg_ptr == f["urg_ptr"]
    assert seg.flow_label == (f["flow_label"] if f["v6"] else 0)
    assert bytes(seg.payload) == b"".join(f["payload"])
    assert seg.data_offset == 20 + len(opts)
    if f["md5_key"] is None:
        assert bytes(seg.raw_options) == opts
    else:   # the digest was written in place of the placeholder
        assert bytes(seg.raw_options[:4]) + bytes(16) + bytes(seg.raw_options[20:]) == opts
        assert seg.md5 is not None and seg.md5.obj is seg.raw_options.obj and any(seg.md5)
    assert seg.mss == okw["mss"] and seg.wscale == okw["wscale"]
    assert seg.sack_permitted == okw["sack_permitted"]
    assert (seg.ts_val, seg.ts_ecr) == (okw["ts"] if okw["ts"] else (-1, 0))
    assert seg.sack_blocks == tuple(okw["sack_blocks"])
    assert seg.fastopen == okw["fastopen"]
    if f["md5_key"] is not None:
        assert verify_segment_md5(seg, f["md5_key"])
        assert not verify_segment_md5(seg, f["md5_key"] + b"x")
    else:
        assert seg.md5 is None and not verify_segment_md5(seg, b"k")
    assert seg.checksum_ok
    assert seg.seg_len == len(seg.payload) + bool(f["flags"] & SYN) + bool(f["flags"] & FIN)
    if not f["v6"]:
        assert struct.unpack_from("!H", wire, 4)[0] == f["ip_id"]
        assert bool(wire[6] & 0x40) == f["df"]


@det
@given(st.booleans(), st.lists(st.binary(max_size=200), max_size=4))
def test_csum_partial_completes_like_a_nic(v6: bool, parts: list[bytes]) -> None:
    src, dst = V6 if v6 else V4
    tx = build_packet(src=src, dst=dst, sport=1, dport=2, seq=3, ack=4, flags=ACK, window=5,
                      options=encode_options(ts=(1, 2)), payload=parts, csum_partial=True, gso_size=1448)
    assert tx.csum_partial and tx.gso_size == 1448
    full = build_packet(src=src, dst=dst, sport=1, dport=2, seq=3, ack=4, flags=ACK, window=5,
                        options=encode_options(ts=(1, 2)), payload=parts).tobytes()
    wire = bytearray(tx.tobytes())
    off = 40 if v6 else 20
    tcp_len = len(wire) - off
    assert int.from_bytes(wire[off + 16:off + 18], "big") == pseudo_header_sum(src, dst, 6, tcp_len)
    parse_packet(wire, verify_checksum=False)
    if parts and any(parts):
        with pytest.raises(DropPacket):
            parse_packet(wire)
    # What the device does for NEEDS_CSUM: checksum from csum_start with the field as is.
    c = internet_checksum([wire[off:]])
    wire[off + 16:off + 18] = c.to_bytes(2, "big")
    assert parse_packet(wire).checksum_ok
    assert internet_checksum([wire[off:]], pseudo_header_sum(src, dst, 6, tcp_len)) in (0, 0xFFFF)
    assert (bytes(wire) == full) or int.from_bytes(full[off + 16:off + 18], "big") in (0, 0xFFFF)


def test_memoryviews_are_slices_of_input() -> None:
    buf = bytearray(data_pkt(payload=b"abcdef"))
    seg = parse_packet(buf)
    buf[-1] = ord("Z")
    assert bytes(seg.payload) == b"abcdeZ"
    assert seg.payload.obj is buf and seg.tcp_header.obj is buf and seg.raw_options.obj is buf
    mv = memoryview(bytes(buf))
    seg = parse_packet(mv[0:], verify_checksum=False)
    assert seg.payload.obj is mv.obj


def test_trailing_padding_is_trimmed() -> None:
    for v6 in (False, True):
        seg = parse_packet(data_pkt(v6, payload=b"abc") + b"\0" * 7)
        assert bytes(seg.payload) == b"abc"


def test_ae_flag_and_syn_fin_accepted() -> None:
    seg = parse_packet(data_pkt(flags=SYN | ACK | AE, payload=b""))
    assert seg.flags == SYN | ACK | AE
    seg = parse_packet(data_pkt(flags=SYN | FIN, payload=b"x"))
    assert seg.flags == SYN | FIN and seg.seg_len == 3


def test_ipv6_extension_headers() -> None:
    base = bytearray(data_pkt(True, payload=b"ext"))
    tcp = bytes(base[40:])
    hbh = bytes([43, 0]) + bytes(6)             # hop-by-hop (8 bytes) -> routing
    rt = bytes([60, 0, 0, 0]) + bytes(4)        # routing, segments left 0 -> dest opts
    dst = bytes([44, 1]) + bytes(14)            # dest opts (16 bytes) -> fragment
    frag = bytes([6, 0, 0, 0]) + b"\x12\x34\x56\x78"   # atomic fragment (RFC 6946)
    ext = hbh + rt + dst + frag
    pkt = bytearray(base[:40]) + ext + tcp
    pkt[6] = 0
    pkt[4:6] = (len(ext) + len(tcp)).to_bytes(2, "big")
    seg = parse_packet(pkt)
    assert bytes(seg.payload) == b"ext"
    # a real fragment is dropped
    pkt2 = bytearray(pkt)
    pkt2[40 + 32 + 3] = 1   # M flag in the fragment header
    with pytest.raises(DropPacket) as ei:
        parse_packet(pkt2)
    assert ei.value.counter == "Ip6ReasmFails"
    # routing header with segments left
    pkt3 = bytearray(pkt)
    pkt3[40 + 8 + 3] = 1
    with pytest.raises(DropPacket) as ei:
        parse_packet(pkt3)
    assert ei.value.counter == "Ip6InHdrErrors"
    # hop-by-hop not first
    pkt4 = bytearray(pkt)
    pkt4[40 + 8] = 0
    with pytest.raises(DropPacket) as ei:
        parse_packet(pkt4)
    assert ei.value.counter == "Ip6InUnknownProtos"


# ---------------------------------------------------------------- validation


def _drop(pkt: bytes | bytearray, *, verify_checksum: bool = True) -> str:
    with pytest.raises(DropPacket) as ei:
        parse_packet(pkt, verify_checksum=verify_checksum)
    return ei.value.counter


def test_ipv4_header_errors() -> None:
    good = bytearray(data_pkt())
    parse_packet(good)
    assert _drop(b"") == "IpInHdrErrors"
    assert _drop(good[:19]) == "IpInHdrErrors"
    b = bytearray(good)
    b[0] = 0x44
    fix_ip4_csum(b)
    assert _drop(b) == "IpInHdrErrors"                    # IHL 4
    assert _drop(good[:30]) == "IpInTruncatedPkts"
    assert _drop(good[:22]) == "IpInTruncatedPkts"
    b = bytearray(good)
    b[2:4] = (10).to_bytes(2, "big")                     # total length < IHL
    fix_ip4_csum(b)
    assert _drop(b) == "IpInHdrErrors"
    b = bytearray(good)
    b[2:4] = (len(good) + 1).to_bytes(2, "big")          # total length > buffer
    fix_ip4_csum(b)
    assert _drop(b) == "IpInTruncatedPkts"
    b = bytearray(good)
    b[8] ^= 1                                            # TTL changed, checksum not
    assert _drop(b) == "IpInCsumErrors"
    b = bytearray(good)
    b[0] = 0x55
    assert _drop(b) == "IpInHdrErrors"                    # version 5
    for frag in (0x2000, 0x0001, 0x6001):
        b = bytearray(good)
        b[6:8] = frag.to_bytes(2, "big")
        fix_ip4_csum(b)
        assert _drop(b) == "IpReasmFails"
    b = bytearray(good)
    b[9] = 17
    fix_ip4_csum(b)
    assert _drop(b) == "IpInUnknownProtos"


def test_ipv4_options_are_skipped() -> None:
    good = data_pkt(payload=b"opt")
    b = bytearray(good[:20]) + b"\x01\x01\x01\x00" + good[20:]   # NOP NOP NOP EOL
    b[0] = 0x46
    b[2:4] = len(b).to_bytes(2, "big")
    fix_ip4_csum(b)
    seg = parse_packet(b)
    assert bytes(seg.payload) == b"opt" and seg.tcp_header.tobytes() == good[20:20 + seg.data_offset]
    assert len(b) == 59
    b[0] = 0x4A                      # IHL 10: TCP would start at 40, 19 bytes left
    fix_ip4_csum(b)
    assert _drop(b) == "TcpInErrs"
    b[0] = 0x4F                      # IHL 15: header longer than the 59-byte packet
    assert _drop(b) == "IpInHdrErrors"


def test_ipv4_ihl_past_buffer() -> None:
    b = bytearray(data_pkt(payload=b""))[:20]
    b[0] = 0x46                                          # IHL 6 but only 20 bytes
    b[2:4] = (24).to_bytes(2, "big")
    assert _drop(b) == "IpInHdrErrors"


def test_ipv6_header_errors() -> None:
    good = bytearray(data_pkt(True))
    parse_packet(good)
    assert _drop(good[:39]) == "Ip6InHdrErrors"
    assert _drop(good[:-1]) == "Ip6InTruncatedPkts"
    b = bytearray(good)
    b[6] = 17
    assert _drop(b) == "Ip6InUnknownProtos"
    b = bytearray(good)
    b[6] = 60                                            # dest opts header claiming 2048 bytes
    b[41] = 255
    assert _drop(b) == "Ip6InHdrErrors"
    b = bytearray(good[:40])
    b[4:6] = b"\0\0"
    assert _drop(b) == "TcpInErrs"                        # no room for a TCP header


@pytest.mark.parametrize("v6", [False, True])
def test_tcp_errors(v6: bool) -> None:
    off = 40 if v6 else 20
    good = bytearray(data_pkt(v6))

    def mutate(i: int, val: int) -> bytearray:
        b = bytearray(good)
        b[off + i] = val
        fix_tcp_csum(b, v6)
        return b

    assert _drop(mutate(12, 0x40)) == "TcpInErrs"          # data offset 4
    assert _drop(mutate(12, 0x00)) == "TcpInErrs"          # data offset 0
    short = bytearray(data_pkt(v6, payload=b"", options=b""))
    short[off + 12] = 0x60                                 # data offset 6 on a 20-byte segment
    fix_tcp_csum(short, v6)
    assert _drop(short) == "TcpInErrs"
    b = bytearray(good)
    b[-1] ^= 0xFF
    assert _drop(b) == "TcpInCsumErrors"
    assert parse_packet(b, verify_checksum=False).checksum_ok
    # SYN with RST is TCP's to judge (Linux takes the RST first), not a header error.
    assert parse_packet(mutate(13, SYN | RST)).flags == SYN | RST
    assert parse_packet(mutate(13, SYN | RST | ACK), verify_checksum=False).flags == SYN | RST | ACK
    # option length 0, 1, and overflowing the option space
    for raw in ("02000000", "03010000", "0101080c", "0101fe09"):
        b = bytearray(good)
        b[off + 20:off + 24] = bytes.fromhex(raw)
        fix_tcp_csum(b, v6)
        assert _drop(b) == "TcpInErrs", raw
    b = bytearray(good)
    del b[off + 5:]
    if not v6:
        b[2:4] = len(b).to_bytes(2, "big")
        fix_ip4_csum(b)
    else:
        b[4:6] = (len(b) - 40).to_bytes(2, "big")
    assert _drop(b) == "TcpInErrs"                         # TCP segment shorter than 20


def test_odd_length_segment_checksum() -> None:
    for v6 in (False, True):
        for n in (0, 1, 2, 3, 1459):
            seg = parse_packet(data_pkt(v6, payload=bytes(range(256)) * 6 if n == 1459 else b"\x99" * n))
            assert len(seg.payload) == (1536 if n == 1459 else n)
        pkt = data_pkt(v6, payload=b"\x01\x02\x03")
        bad = bytearray(pkt)
        bad[-1] ^= 0x10
        assert _drop(bad) == "TcpInCsumErrors"


def test_build_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        build_packet(src=V4[0], dst=V4[1], sport=1, dport=2, seq=0, ack=0, flags=0, window=0, options=b"\x01")
    with pytest.raises(ValueError):
        build_packet(src=V4[0], dst=V6[1], sport=1, dport=2, seq=0, ack=0, flags=0, window=0)
    with pytest.raises(ValueError):
        build_packet(src=V4[0], dst=V4[1], sport=1, dport=2, seq=0, ack=0, flags=0, window=0,
                     md5_key=b"k", options=encode_options(ts=(1, 2)))
    with pytest.raises(ValueError):
        build_packet(src=V4[0], dst=V4[1], sport=1, dport=2, seq=0, ack=0, flags=0, window=0,
                     payload=(bytes(65500),))


# ---------------------------------------------------------------- robustness (h11-style fuzz invariant)


def _check_invariant(buf: Buffer, *, verify_checksum: bool = True) -> Segment | None:
    try:
        seg = parse_packet(buf, verify_checksum=verify_checksum)
    except DropPacket as e:
        assert isinstance(e.counter, str) and e.counter
        return None
    assert 20 <= seg.data_offset <= 60
    assert len(seg.tcp_header) == seg.data_offset
    assert -1 <= seg.wscale <= 14
    return seg


@settings(derandomize=True, deadline=None, max_examples=1000)
@given(st.binary(max_size=200))
def test_random_bytes_only_drop(raw: bytes) -> None:
    for buf in (raw, bytearray(raw), memoryview(raw)):
        _check_invariant(buf)
        _check_invariant(buf, verify_checksum=False)


@settings(derandomize=True, deadline=None, max_examples=1000)
@given(st.booleans(), st.binary(min_size=0, max_size=60), st.sampled_from([b"", encode_options(ts=(1, 2)),
       encode_options(mss=1460, sack_permitted=True, ts=(3, 4), wscale=7),
       encode_options(md5=True, mss=1), encode_options(sack_blocks=[(1, 2)] * 4)]),
       st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=8),
       st.integers(0, 300), st.booleans(), st.booleans())
def test_mutated_packets_only_drop(v6: bool, payload: bytes, opts: bytes, muts: list[tuple[int, int]],
                                   cut: int, fix_ip: bool, fix_tcp: bool) -> None:
    b = bytearray(data_pkt(v6, payload=payload, options=opts))
    for i, v in muts:
        if i < len(b):
            b[i] = v
    if fix_ip and not v6:
        fix_ip4_csum(b)
    if fix_tcp:
        fix_tcp_csum(b, v6)
    b = b[:cut] if cut < len(b) else b
    for buf in (bytes(b), b, memoryview(b)):
        _check_invariant(buf)
        _check_invariant(buf, verify_checksum=False)


def test_odd_memoryview_formats() -> None:
    import array

    pkt = data_pkt(payload=b"abcd")   # even length
    assert len(pkt) % 2 == 0
    arr = array.array("H", pkt)
    seg = parse_packet(memoryview(arr))
    assert bytes(seg.payload) == b"abcd"
    strided = memoryview(bytes(x for c in pkt for x in (c, 0)))[::2]
    assert bytes(parse_packet(strided).payload) == b"abcd"
    assert _check_invariant(memoryview(array.array("I", bytes(40)))) is None
