from __future__ import annotations

import os
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from usertcp.wire.checksum import (
    finish,
    fold,
    internet_checksum,
    mod_ffff,
    ones_complement_sum,
    parts_sum,
    pseudo_header_bytes,
    pseudo_header_sum,
)

det = settings(derandomize=True, deadline=None, max_examples=300)


def naive_sum(data: bytes) -> int:
    """RFC 1071 §4.1 reference: add 16-bit words with end-around carry."""
    if len(data) & 1:
        data += b"\x00"
    s = 0
    for (w,) in struct.iter_unpack("!H", data):
        s += w
        s = (s & 0xFFFF) + (s >> 16)
    return s


def naive_checksum(data: bytes) -> int:
    return ~naive_sum(data) & 0xFFFF


def test_known_vectors() -> None:
    # RFC 1071 §3 example: 00 01 f2 03 f4 f5 f6 f7 sums to 0xddf2.
    data = bytes.fromhex("0001f203f4f5f6f7")
    assert ones_complement_sum(data) == 0xDDF2
    assert internet_checksum([data]) == 0x220D
    # A real IPv4 header (checksum field zeroed): 0xb861 is the well-known answer.
    hdr = bytes.fromhex("450000730000400040110000c0a80001c0a800c7")
    assert internet_checksum([hdr]) == 0xB861


def test_zero_and_negative_zero() -> None:
    assert internet_checksum([b""]) == 0xFFFF
    assert internet_checksum([bytes(10)]) == 0xFFFF
    # Non-zero data whose sum is 0xFFFF ("-0") must give checksum 0, as RFC 1071 folding does.
    assert internet_checksum([b"\xff\xff"]) == 0
    assert internet_checksum([b"\x12\x34", b"\xed\xcb"]) == 0
    assert ones_complement_sum(b"\xff\xff") == 0xFFFF
    assert ones_complement_sum(b"") == 0


@det
@given(st.binary(max_size=3000))
def test_single_buffer_matches_naive(data: bytes) -> None:
    assert internet_checksum([data]) == naive_checksum(data)
    assert ones_complement_sum(data) == naive_sum(data)
    assert internet_checksum([memoryview(data)]) == naive_checksum(data)
    assert internet_checksum([bytearray(data)]) == naive_checksum(data)


@det
@given(st.lists(st.binary(max_size=41), max_size=12), st.integers(0, 0xFFFF))
def test_parts_with_odd_boundaries(parts: list[bytes], initial: int) -> None:
    whole = b"".join(parts)
    want = ~fold(naive_sum(whole) + initial) & 0xFFFF if (whole or initial) else 0xFFFF
    got = internet_checksum(parts, initial)
    # fold() of the sum of two folded values is the one's-complement sum.
    assert got == want
    if not initial:
        assert got == naive_checksum(whole)
    s, n = parts_sum(parts)
    assert n == len(whole)
    assert fold(s) == naive_sum(whole) or (s == 0 and naive_sum(whole) == 0)


@det
@given(st.binary(min_size=1, max_size=200), st.integers(0, 199))
def test_verification_is_zero(data: bytes, cut: int) -> None:
    # Append the checksum (word aligned): the total must then verify to 0 whatever the split.
    if len(data) & 1:
        data += b"\x00"
    c = internet_checksum([data])
    full = data + c.to_bytes(2, "big")
    cut = min(cut, len(full))
    assert internet_checksum([full[:cut], full[cut:]]) in (0, 0xFFFF)
    assert mod_ffff(int.from_bytes(full, "big")) == 0


@det
@given(st.binary(max_size=5000), st.integers(0, 64))
def test_mod_ffff(data: bytes, shift: int) -> None:
    x = int.from_bytes(data, "big") << shift
    assert mod_ffff(x) == x % 0xFFFF


def test_mod_ffff_large_random() -> None:
    for n in (257, 1460, 9001, 65536):
        x = int.from_bytes(os.urandom(n), "big")
        assert mod_ffff(x) == x % 0xFFFF
    assert mod_ffff((1 << 70000) - 1) == ((1 << 70000) - 1) % 0xFFFF


@det
@given(st.sampled_from([4, 16]), st.data())
def test_pseudo_header(alen: int, data: st.DataObject) -> None:
    src = data.draw(st.binary(min_size=alen, max_size=alen))
    dst = data.draw(st.binary(min_size=alen, max_size=alen))
    length = data.draw(st.integers(0, 0xFFFF))
    ph = pseudo_header_bytes(src, dst, 6, length)
    assert len(ph) == (12 if alen == 4 else 40)
    assert pseudo_header_sum(src, dst, 6, length) == naive_sum(ph)
    seg = data.draw(st.binary(max_size=100))
    assert internet_checksum([seg], pseudo_header_sum(src, dst, 6, length)) == naive_checksum(ph + seg)
    assert finish(pseudo_header_sum(src, dst, 6, length)) == naive_checksum(ph)

