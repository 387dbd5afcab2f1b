"""The packet paths' checksums against the RFC 1071 reference sum, at every size.

``wire/checksum.py`` reduces sums by division below 4 KiB and by shift-and-add above, and
the builder and both receive paths (full parser, header-prediction peek) reduce the payload's
sum before adding the pseudo-header: these tests cross those sizes with odd lengths and odd
part boundaries, and check each path against the 16-bit word-by-word reference.
"""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from usertcp.wire.checksum import mod_ffff, residue
from usertcp.wire.packet import build_packet, parse_packet
from usertcp.wire.predict import checksums_ok, peek_tcp
from usertcp.wire.segment import ACK, DropPacket
from usertcp.wire.tcp import encode_options

det = settings(derandomize=True, deadline=None, max_examples=60)

V4 = (bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
V6 = (bytes(range(16)), bytes(range(16, 32)))

# Part sizes around the interesting points: tiny, odd, one MSS, the 4 KiB split, 16 KiB.
part_size = st.one_of(st.integers(0, 9), st.integers(1440, 1460), st.integers(4090, 4100),
                      st.integers(16380, 16390))


def reference_sum(data: bytes) -> int:
    """RFC 1071 §4.1: 16-bit big-endian words with end-around carry (odd byte zero-padded)."""
    if len(data) & 1:
        data += b"\x00"
    s = sum(w for (w,) in struct.iter_unpack("!H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


@settings(derandomize=True, deadline=None, max_examples=200)
@given(st.binary(max_size=50), st.sampled_from([0, 1, 1459, 4095, 4096, 4097, 20001]), st.integers(0, 40))
def test_residue_and_mod_ffff_match_the_reference(head: bytes, n: int, shift: int) -> None:
    data = head + random.Random(n + len(head)).randbytes(n)
    assert residue(data) == reference_sum(data) % 0xFFFF
    x = int.from_bytes(data, "big") << shift
    assert mod_ffff(x) == x % 0xFFFF


def test_mod_ffff_either_side_of_the_split() -> None:
    for bits in (2047, 2048, 2049, (1 << 15) - 1, 1 << 15, (1 << 15) + 1, 1 << 19):
        for x in ((1 << bits) - 1, 1 << (bits - 1), int("9" * (bits // 4)) if bits < 20000 else 3 ** bits):
            assert mod_ffff(x) == x % 0xFFFF


@det
@given(st.booleans(), st.lists(part_size, min_size=1, max_size=3), st.integers(0, 2**32 - 1))
def test_built_checksum_is_the_reference_and_both_receive_paths_verify_it(
        v6: bool, sizes: list[int], seq: int) -> None:
    rnd = random.Random(seq)            # payload bytes: too many for hypothesis to draw
    parts = [rnd.randbytes(n) for n in sizes]
    src, dst = V6 if v6 else V4
    opts = encode_options(ts=(rnd.getrandbits(32), rnd.getrandbits(32)))
    wire = bytearray(build_packet(src=src, dst=dst, sport=1234, dport=80, seq=seq, ack=7, flags=ACK,
                                  window=501, options=opts, payload=parts).tobytes())
    off = 40 if v6 else 20
    tcp = bytes(wire[off:])
    pseudo = src + dst + (b"\x00\x06" + len(tcp).to_bytes(2, "big") if not v6
                          else len(tcp).to_bytes(4, "big") + b"\x00\x00\x00\x06")
    assert reference_sum(pseudo + tcp) == 0xFFFF        # the field makes the whole sum -0
    assert parse_packet(wire).checksum_ok
    mv = memoryview(wire)
    peek = peek_tcp(mv)
    assert peek[0] == (40 if v6 else 20)
    assert checksums_ok(mv, peek[0], peek[1], False)
    # One flipped payload (or header) bit: both paths must refuse the packet.
    pos = off + rnd.randrange(len(tcp))
    wire[pos] ^= 1 << rnd.randrange(8)
    with pytest.raises(DropPacket):
        parse_packet(wire)
    assert not checksums_ok(memoryview(wire), peek[0], peek[1], False)
    # The pseudo-header's addresses are read from the packet: a flipped address bit is refused.
    addr = bytearray(build_packet(src=src, dst=dst, sport=1234, dport=80, seq=seq, ack=7, flags=ACK,
                                  window=501, options=opts, payload=parts).tobytes())
    addr[(8 if v6 else 12) + rnd.randrange(32 if v6 else 8)] ^= 1 << rnd.randrange(8)
    assert not checksums_ok(memoryview(addr), peek[0], peek[1], False)
