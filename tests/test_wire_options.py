from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from usertcp.wire.segment import DropPacket
from usertcp.wire.tcp import MD5_DIGEST_OFFSET, encode_options, options_from, options_length

det = settings(derandomize=True, deadline=None, max_examples=300)


def test_linux_syn_layout() -> None:
    # What Linux puts on a SYN: MSS, SACK_PERM folded before TS, NOP+WS (tcp_options_write).
    got = encode_options(mss=1460, sack_permitted=True, ts=(0x01020304, 0), wscale=7)
    assert got.hex() == "020405b4" "0402080a" "01020304" "00000000" "01030307"


def test_layouts() -> None:
    assert encode_options(ts=(1, 2)).hex() == "0101080a0000000100000002"
    assert encode_options(sack_permitted=True).hex() == "01010402"
    assert encode_options(mss=536, sack_permitted=True, wscale=0).hex() == "020402180101040201030300"
    assert encode_options(sack_blocks=[(1, 2), (3, 4)]).hex() == (
        "01010512" "00000001" "00000002" "00000003" "00000004")
    assert encode_options(fastopen=bytes(range(8))).hex() == "220a0001020304050607" "0101"
    assert encode_options(fastopen=b"").hex() == "22020101"
    assert encode_options(fastopen=b"abcd").hex() == "2206" + b"abcd".hex() + "0101"
    assert encode_options(fastopen=bytes(8), fastopen_exp=True).hex() == "fe0cf989" + "00" * 8
    assert encode_options(fastopen=b"", fastopen_exp=True).hex() == "fe04f989"
    md5 = encode_options(md5=True, mss=1460)
    assert md5.hex() == "01011312" + "00" * 16 + "020405b4"
    assert MD5_DIGEST_OFFSET == 24
    assert encode_options() == b""


def test_order_md5_mss_ts_ws_sack_fo() -> None:
    got = encode_options(md5=True, ts=(5, 6), mss=1000, wscale=2)
    assert got.hex() == ("01011312" + "00" * 16 + "020403e8" "0101080a" "00000005" "00000006"
                         "01030302")
    got = encode_options(ts=(5, 6), sack_blocks=[(7, 8)], fastopen=b"")
    assert got.hex() == "0101080a" "00000005" "00000006" "0101050a" "00000007" "00000008" "22020101"


def test_too_long_raises() -> None:
    with pytest.raises(ValueError):
        encode_options(ts=(1, 2), sack_blocks=[(1, 2)] * 4)
    with pytest.raises(ValueError):
        encode_options(md5=True, ts=(1, 2), sack_blocks=[(1, 2)])
    with pytest.raises(ValueError):
        encode_options(sack_blocks=[(1, 2)] * 5)
    assert len(encode_options(ts=(1, 2), sack_blocks=[(1, 2)] * 3)) == 40


opt_sets = st.fixed_dictionaries({}, optional={
    "mss": st.integers(0, 0xFFFF),
    "wscale": st.integers(0, 14),
    "sack_permitted": st.booleans(),
    "ts": st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)),
    "sack_blocks": st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)),
                            max_size=4),
    "fastopen": st.one_of(st.just(b""), st.integers(2, 8).flatmap(
        lambda n: st.binary(min_size=2 * n, max_size=2 * n))),
    "fastopen_exp": st.booleans(),
    "md5": st.booleans(),
})


@det
@given(opt_sets)
def test_encode_parse_round_trip(kw: dict[str, Any]) -> None:
    n = options_length(**kw)
    try:
        raw = encode_options(**kw)
    except ValueError:
        assert n > 40
        return
    assert len(raw) == n
    assert n % 4 == 0 and n <= 40
    seg = options_from(raw)
    assert seg.mss == kw.get("mss", -1)
    assert seg.wscale == kw.get("wscale", -1)
    assert seg.sack_permitted == kw.get("sack_permitted", False)
    if "ts" in kw:
        assert (seg.ts_val, seg.ts_ecr) == kw["ts"]
    else:
        assert seg.ts_val == -1
    assert seg.sack_blocks == tuple(kw.get("sack_blocks", ()))
    assert seg.fastopen == kw.get("fastopen")
    assert seg.fastopen_exp == ("fastopen" in kw and kw.get("fastopen_exp", False))
    if kw.get("md5"):
        assert seg.md5 is not None and bytes(seg.md5) == bytes(16)
    else:
        assert seg.md5 is None
    assert seg.unknown_options == 0


def test_parse_semantics() -> None:
    # EOL stops parsing: the MSS after it is not seen.
    seg = options_from(bytes.fromhex("0000020405b4"))
    assert seg.mss == -1
    # Wrong-length known options are ignored (Linux), parsing continues.
    seg = options_from(bytes.fromhex("0203ff" "020405b4"))
    assert seg.mss == 1460
    seg = options_from(bytes.fromhex("080600000000" "0402"))
    assert seg.ts_val == -1 and seg.sack_permitted
    seg = options_from(bytes.fromhex("0502" "0303" "01"))  # SACK len 2, WS len 3
    assert seg.sack_blocks == () and seg.wscale == 1
    seg = options_from(bytes.fromhex("050b" + "00" * 9))
    assert seg.sack_blocks == ()
    # wscale capped at 14 (RFC 7323 §2.3).
    assert options_from(bytes.fromhex("030320")).wscale == 14
    # Fast Open: odd lengths, 2-byte and 18-byte cookies ignored (RFC 7413, erratum 4238).
    assert options_from(bytes.fromhex("2205aabbcc")).fastopen is None
    assert options_from(bytes.fromhex("2204aabb")).fastopen is None
    assert options_from(bytes.fromhex("2212" + "11" * 16)).fastopen == b"\x11" * 16
    assert options_from(bytes.fromhex("2214" + "11" * 18)).fastopen is None
    assert options_from(bytes.fromhex("2204aabb" "2206aabbccdd")).fastopen == bytes.fromhex("aabbccdd")
    # kind 254 other magic ignored, not unknown.
    seg = options_from(bytes.fromhex("fe06e2d4c3d9"))
    assert seg.fastopen is None and seg.unknown_options == 0
    # MD5 wrong length ignored; AO opaque.
    assert options_from(bytes.fromhex("1304aabb")).md5 is None
    seg = options_from(bytes.fromhex("1d10" "0102" + "ee" * 12))
    assert seg.ao is not None and bytes(seg.ao) == bytes.fromhex("0102") + b"\xee" * 12
    # unknown kinds counted and skipped.
    seg = options_from(bytes.fromhex("1e04aabb" "fd02" "020405b4"))
    assert seg.unknown_options == 2 and seg.mss == 1460


def test_parse_memoryviews_are_slices() -> None:
    raw = bytearray.fromhex("01011312" + "ab" * 16)
    seg = options_from(raw)
    assert seg.md5 is not None
    raw[4] = 0xCD
    assert seg.md5[0] == 0xCD


@pytest.mark.parametrize("raw", ["0200", "0201", "0205b4", "02", "0101080a00", "1e0a00", "fe"])
def test_malformed_lengths_drop(raw: str) -> None:
    with pytest.raises(DropPacket) as ei:
        options_from(bytes.fromhex(raw))
    assert ei.value.counter == "TcpInErrs"


@det
@given(st.binary(max_size=40))
def test_parse_random_only_drops(raw: bytes) -> None:
    try:
        seg = options_from(raw)
    except DropPacket as e:
        assert e.counter == "TcpInErrs"
    else:
        assert -1 <= seg.wscale <= 14
        assert len(seg.sack_blocks) <= 4
