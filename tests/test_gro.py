"""GRO: a batch of segments of one flow coalesced as Linux tcp_gro_receive does (wire/gro.py),
and the offload link of the in-memory network handing the receiver such packets."""

from __future__ import annotations

from ipaddress import ip_address

import pytest

from pair import make_pair, transfer
from usertcp.net.memnet import LinkConfig, software_gso
from usertcp.wire.gro import coalesce
from usertcp.wire.packet import build_packet, parse_packet
from usertcp.wire.segment import ACK, CWR, FIN, PSH, SYN

A4, B4, A6, B6 = "10.0.0.1", "10.0.0.2", "fd00::1", "fd00::2"
TS = b"\x01\x01\x08\x0a" + bytes(8)


def seg(seq: int, payload: bytes, *, flags: int = ACK, ack: int = 7, window: int = 100,
        options: bytes = TS, v6: bool = False, tos: int = 0) -> bytes:
    src, dst = (A6, B6) if v6 else (A4, B4)
    return build_packet(src=ip_address(src).packed, dst=ip_address(dst).packed, sport=1, dport=2,
                        seq=seq, ack=ack, flags=flags, window=window, options=options,
                        payload=(payload,), tos=tos).tobytes()


def body(n: int, k: int = 0) -> bytes:
    return bytes((i * 7 + k) & 0xFF for i in range(n))


@pytest.mark.parametrize("v6", [False, True])
def test_a_burst_of_mss_segments_becomes_one_packet_as_the_tso_packet_it_was_cut_from(v6: bool) -> None:
    mss = 1428 if v6 else 1448            # 1500-byte frames with timestamps
    data = body(mss * 5 + 300)
    src, dst = (A6, B6) if v6 else (A4, B4)
    tso = build_packet(src=ip_address(src).packed, dst=ip_address(dst).packed, sport=1, dport=2,
                       seq=0xFFFFF000, ack=7, flags=ACK | PSH, window=100, options=TS,
                       payload=(data,), csum_partial=True, gso_size=mss)
    wire = software_gso(tso)
    assert len(wire) == 6
    out = coalesce(wire)
    assert len(out) == 1
    got = parse_packet(out[0], verify_checksum=False)       # the link trusts TCP checksums
    assert bytes(got.payload) == data and got.seq == 0xFFFFF000 and got.ack == 7
    assert got.flags == ACK | PSH and got.window == 100 and got.ts_val == 0
    if not v6:
        assert int.from_bytes(out[0][:20], "big") % 0xFFFF == 0    # IPv4 header checksum valid


def test_a_short_or_psh_segment_ends_the_packet_and_a_larger_one_starts_a_new_one() -> None:
    a, b, c = body(1000), body(1000, 1), body(400, 2)
    d, e = body(1000, 3), body(1200, 4)
    batch = [seg(0, a), seg(1000, b), seg(2000, c), seg(2400, d), seg(3400, e)]
    out = [parse_packet(p, verify_checksum=False) for p in coalesce(batch)]
    # 1000+1000+400 (short: ends it), then 1000, then 1200 > mss 1000: a packet of its own.
    assert [len(s.payload) for s in out] == [2400, 1000, 1200]
    assert bytes(out[0].payload) == a + b + c
    pshed = coalesce([seg(0, a), seg(1000, b, flags=ACK | PSH), seg(2000, c)])
    assert [len(parse_packet(p, verify_checksum=False).payload) for p in pshed] == [2000, 400]
    assert parse_packet(pshed[0], verify_checksum=False).flags == ACK | PSH


@pytest.mark.parametrize("case", ["gap", "ack", "window", "options", "tos", "cwr", "syn", "empty",
                                  "other_flow"])
def test_segments_that_linux_would_not_merge_stay_apart(case: str) -> None:
    a, b = body(1000), body(1000, 1)
    second = {
        "gap": seg(1001, b),
        "ack": seg(1000, b, ack=8),
        "window": seg(1000, b, window=101),
        "options": seg(1000, b, options=b"\x01\x01\x08\x0a" + bytes(7) + b"\x01"),
        "tos": seg(1000, b, tos=2),
        "cwr": seg(1000, b, flags=ACK | CWR),
        "syn": seg(1000, b, flags=ACK | SYN),
        "empty": seg(1000, b""),
        "other_flow": seg(1000, b, v6=True),
    }[case]
    batch = [seg(0, a), second]
    assert coalesce(batch) == batch


def test_a_fin_is_joined_and_ends_the_packet() -> None:
    out = coalesce([seg(0, body(1000)), seg(1000, body(1000, 1), flags=ACK | FIN), seg(2000, body(1000))])
    assert len(out) == 2
    assert parse_packet(out[0], verify_checksum=False).flags == ACK | FIN


def test_the_packet_stays_within_64k() -> None:
    batch = [seg(i * 1448, body(1448, i)) for i in range(50)]          # 72,400 bytes
    out = [parse_packet(p, verify_checksum=False) for p in coalesce(batch)]
    assert [len(s.payload) for s in out] == [1448 * 45, 1448 * 5]
    assert all(len(p) <= 65535 for p in coalesce(batch))
    assert b"".join(bytes(s.payload) for s in out) == b"".join(body(1448, i) for i in range(50))


def test_a_tso_packet_carried_whole_is_never_joined() -> None:
    big = seg(0, body(4000))                     # larger than the wire MTU: a super-packet
    batch = [big, seg(4000, body(1000)), seg(5000, body(1000, 1))]
    out = coalesce(batch)
    assert out[0] == big and len(out) == 2
    assert coalesce([seg(0, body(1000)), big]) == [seg(0, body(1000)), big]


def test_garbage_in_a_batch_is_passed_through_untouched() -> None:
    good = seg(0, body(1000))
    batch = [b"", b"\x45" + bytes(10), good, b"\x60" * 70, seg(1000, body(1000, 1))]
    out = coalesce(batch)
    assert out[:4] == batch[:4] and len(out) == 5


def _gro_transfer(config: LinkConfig, data: bytes) -> tuple[bytes, int, int, int]:
    """``data`` a -> b from a sender without TSO; (received, packets delivered on the link,
    segments b's stack took in, packets GRO merged)."""
    pair = make_pair(config)
    pair.a.gso_max_size = 0           # as a kernel with TSO off: it emits MSS-sized segments
    client, server = pair.open()
    got = transfer(pair, client, server, data)
    st = pair.link.ab.stats
    return got, st.delivered, pair.b.counters["TcpInSegs"], st.gro_merged


def test_offload_link_coalesces_segments_that_arrive_together() -> None:
    data = body(400_000)
    # The sender's MSS-sized segments arrive in bursts (one per ACK it gets); GRO joins each
    # burst's full segments, so the stack takes far fewer, larger segments.
    got, delivered, taken, merged = _gro_transfer(LinkConfig(delay=0.001, offload=True), data)
    assert got == data and merged > delivered // 2
    assert taken == delivered - merged
    got, delivered, taken, merged = _gro_transfer(LinkConfig(delay=0.001), data)
    assert got == data and merged == 0 and taken == delivered
