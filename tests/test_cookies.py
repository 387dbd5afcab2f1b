"""SipHash-2-4 vectors, Linux TFO cookie constants from packetdrill, RFC 6528 ISNs."""

from __future__ import annotations

import ipaddress

import pytest

from usertcp.tcp.cookies import (
    IsnGenerator,
    parse_tfo_key_sysctl,
    parse_tfo_keys_sysctl,
    tfo_cookie,
    tfo_key_sysctl_format,
)
from usertcp.tcp.siphash import siphash24

# The 64 SipHash-2-4 outputs of the reference implementation's vectors.h (vectors_sip64),
# as u64 values: key 00 01 .. 0f, message 00 01 .. (i-1) for i = 0..63.
SIP64 = [
    0x726FDB47DD0E0E31, 0x74F839C593DC67FD, 0x0D6C8009D9A94F5A, 0x85676696D7FB7E2D,
    0xCF2794E0277187B7, 0x18765564CD99A68D, 0xCBC9466E58FEE3CE, 0xAB0200F58B01D137,
    0x93F5F5799A932462, 0x9E0082DF0BA9E4B0, 0x7A5DBBC594DDB9F3, 0xF4B32F46226BADA7,
    0x751E8FBC860EE5FB, 0x14EA5627C0843D90, 0xF723CA908E7AF2EE, 0xA129CA6149BE45E5,
    0x3F2ACC7F57C29BDB, 0x699AE9F52CBE4794, 0x4BC1B3F0968DD39C, 0xBB6DC91DA77961BD,
    0xBED65CF21AA2EE98, 0xD0F2CBB02E3B67C7, 0x93536795E3A33E88, 0xA80C038CCD5CCEC8,
    0xB8AD50C6F649AF94, 0xBCE192DE8A85B8EA, 0x17D835B85BBB15F3, 0x2F2E6163076BCFAD,
    0xDE4DAAACA71DC9A5, 0xA6A2506687956571, 0xAD87A3535C49EF28, 0x32D892FAD841C342,
    0x7127512F72F27CCE, 0xA7F32346F95978E3, 0x12E0B01ABB051238, 0x15E034D40FA197AE,
    0x314DFFBE0815A3B4, 0x027990F029623981, 0xCADCD4E59EF40C4D, 0x9ABFD8766A33735C,
    0x0E3EA96B5304A7D0, 0xAD0C42D6FC585992, 0x187306C89BC215A9, 0xD4A60ABCF3792B95,
    0xF935451DE4F21DF2, 0xA9538F0419755787, 0xDB9ACDDFF56CA510, 0xD06C98CD5C0975EB,
    0xE612A3CB9ECBA951, 0xC766E62CFCADAF96, 0xEE64435A9752FE72, 0xA192D576B245165A,
    0x0A8787BF8ECB74B2, 0x81B3E73D20B49B6F, 0x7FA8220BA3B2ECEA, 0x245731C13CA42499,
    0xB78DBFAF3A8D83BD, 0xEA1AD565322A1A0B, 0x60E61C23A3795013, 0x6606D7E446282B93,
    0x6CA4ECB15C5F91E1, 0x9F626DA15C9625F3, 0xE51B38608EF25F57, 0x958A324CEB064572,
]  # fmt: skip

KEY = bytes(range(16))


@pytest.mark.parametrize("n", range(64))
def test_siphash_reference_vectors(n: int) -> None:
    assert siphash24(KEY, bytes(range(n))) == SIP64[n]


def test_siphash_vector_bytes_form() -> None:
    # vectors.h lists outputs as bytes, i.e. the u64 written little-endian.
    assert siphash24(KEY, b"").to_bytes(8, "little") == bytes.fromhex("310e0edd47db6f72")
    assert siphash24(KEY, bytes(range(15))).to_bytes(8, "little") == bytes.fromhex("e545be4961ca29a1")


def test_siphash_rejects_bad_key() -> None:
    with pytest.raises(ValueError):
        siphash24(b"short", b"")


def ip(s: str) -> bytes:
    return ipaddress.ip_address(s).packed


DEFAULT_KEY = "a1a1a1a1-b2b2b2b2-c3c3c3c3-d4d4d4d4"  # gtests/net/common/defaults.sh
SIMPLE_KEY = "a0bf63f7-ed803d81-cd641d30-cebc4a90"  # fastopen/server/simple*.pkt


@pytest.mark.parametrize(
    ("key", "client", "server", "cookie"),
    [
        # packetdrill defaults: remote (client) 192.0.2.1, local (server) 192.168.0.1.
        (DEFAULT_KEY, "192.0.2.1", "192.168.0.1", "3021b9d889017eeb"),
        (DEFAULT_KEY, "fd3d:fa7b:d17d::1", "fd3d:0a0b:17d6::1", "c1d1e9742a47a9bc"),
        # simple1.pkt: --local_ip=192.168.0.2 --remote_ip=10.248.0.2
        (SIMPLE_KEY, "10.248.0.2", "192.168.0.2", "00abaaabe8e954c2"),
        # simple2.pkt: --local_ip=192.168.0.2 --remote_ip=10.248.0.3
        (SIMPLE_KEY, "10.248.0.3", "192.168.0.2", "1313a2da994a0951"),
        # simple3.pkt: --local_ip=192.168.0.3 --remote_ip=10.248.0.3
        (SIMPLE_KEY, "10.248.0.3", "192.168.0.3", "76d2c1c530f51f79"),
        # sockopt-fastopen-key.pkt: global key 0-0-0-0, addresses as simple1.pkt.
        ("00000000-00000000-00000000-00000000", "10.248.0.2", "192.168.0.2", "93b7aa4f550f8a1a"),
    ],
)
def test_tfo_cookie_packetdrill_constants(key: str, client: str, server: str, cookie: str) -> None:
    assert tfo_cookie(parse_tfo_key_sysctl(key), ip(client), ip(server)).hex() == cookie


def test_tfo_cookie_depends_on_direction() -> None:
    k = parse_tfo_key_sysctl(DEFAULT_KEY)
    assert tfo_cookie(k, ip("192.0.2.1"), ip("192.168.0.1")) != tfo_cookie(
        k, ip("192.168.0.1"), ip("192.0.2.1")
    )


def test_tfo_key_sysctl_matches_setsockopt_bytes() -> None:
    # sockopt-fastopen-key.pkt: setsockopt(TCP_FASTOPEN_KEY) with these raw bytes gives the
    # same cookie as the sysctl string, so the sysctl words are stored little-endian.
    raw = b"\xf7\x63\xbf\xa0\x81\x3d\x80\xed\x30\x1d\x64\xcd\x90\x4a\xbc\xce"
    assert parse_tfo_key_sysctl(SIMPLE_KEY) == raw
    assert tfo_key_sysctl_format(raw) == SIMPLE_KEY


def test_tfo_key_rotation_form() -> None:
    primary, backup = parse_tfo_keys_sysctl(f"{SIMPLE_KEY},{DEFAULT_KEY}")
    assert primary == parse_tfo_key_sysctl(SIMPLE_KEY)
    assert backup == parse_tfo_key_sysctl(DEFAULT_KEY)
    assert parse_tfo_key_sysctl(f"{SIMPLE_KEY},{DEFAULT_KEY}") == primary
    assert tfo_key_sysctl_format(primary, backup) == f"{SIMPLE_KEY},{DEFAULT_KEY}"
    # Linux's sscanf("%x") also takes unpadded words.
    assert tfo_key_sysctl_format(parse_tfo_key_sysctl("1-2-3-4")) == "00000001-00000002-00000003-00000004"


@pytest.mark.parametrize(
    "bad", ["", "a-b-c", "a-b-c-d-e", "xyz-1-2-3", "1-2-3-4,1-2-3-4,1-2-3-4", "123456789-1-2-3"]
)
def test_tfo_key_parse_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_tfo_keys_sysctl(bad)


def test_tfo_cookie_rejects_mixed_families() -> None:
    with pytest.raises(ValueError):
        tfo_cookie(bytes(16), ip("10.0.0.1"), ip("::1"))
    with pytest.raises(ValueError):
        tfo_cookie(bytes(15), ip("10.0.0.1"), ip("10.0.0.2"))


SECRET = bytes(range(100, 116))
TUPLE = (ip("192.168.0.1"), 8080, ip("192.0.2.1"), 40000)


def test_isn_formula() -> None:
    gen = IsnGenerator(SECRET)
    msg = TUPLE[0] + (8080).to_bytes(2, "big") + TUPLE[2] + (40000).to_bytes(2, "big")
    f = siphash24(SECRET, msg) & 0xFFFFFFFF
    assert gen.isn(*TUPLE, now=0.0) == f
    assert gen.isn(*TUPLE, now=1.0) == (f + 250_000) & 0xFFFFFFFF


def test_isn_monotonic_in_time() -> None:
    gen = IsnGenerator(SECRET)
    prev = gen.isn(*TUPLE, now=10.0)
    for i in range(1, 200):
        cur = gen.isn(*TUPLE, now=10.0 + i * 0.001)
        assert 0 < (cur - prev) & 0xFFFFFFFF < 1 << 31  # increases in sequence space
        assert (cur - prev) & 0xFFFFFFFF == 250  # 4 µs ticks: 250 per millisecond
        prev = cur


def test_isn_differs_per_tuple_and_secret() -> None:
    gen = IsnGenerator(SECRET)
    base = gen.isn(*TUPLE, now=5.0)
    variants = [
        (ip("192.168.0.2"), 8080, ip("192.0.2.1"), 40000),
        (ip("192.168.0.1"), 8081, ip("192.0.2.1"), 40000),
        (ip("192.168.0.1"), 8080, ip("192.0.2.2"), 40000),
        (ip("192.168.0.1"), 8080, ip("192.0.2.1"), 40001),
        (ip("192.0.2.1"), 40000, ip("192.168.0.1"), 8080),
    ]
    values = {gen.isn(*v, now=5.0) for v in variants}
    assert base not in values and len(values) == len(variants)
    assert IsnGenerator(bytes(16)).isn(*TUPLE, now=5.0) != base
    with pytest.raises(ValueError):
        IsnGenerator(b"too short")
