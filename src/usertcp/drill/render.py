"""Segments and script lines as text (packetdrill's notation), for diffs and error messages."""

from __future__ import annotations

import struct

from usertcp.drill.ast import PacketEvent, TcpOption
from usertcp.drill.defaults import ERRNO
from usertcp.wire.segment import ACK, AE, CWR, ECE, FIN, PSH, RST, SYN, URG, Segment

__all__ = [
    "ECN_BITS",
    "errname",
    "flag_bits",
    "fmt_expected",
    "fmt_flags",
    "fmt_live",
    "fmt_opts",
    "fmt_script_opts",
    "parse_options",
]

FLAG_BITS = {"F": FIN, "S": SYN, "R": RST, "P": PSH, ".": ACK, "U": URG, "E": ECE, "W": CWR, "A": AE}
ECN_BITS = {"noecn": 0, "ect1": 1, "ect0": 2, "ce": 3}


def errname(err: int) -> str:
    for name, num in ERRNO.items():
        if num == err:
            return name
    return str(err)


def flag_bits(flags: str) -> int:
    bits = 0
    for ch in flags:
        if "0" <= ch <= "7":
            bits |= (ord(ch) - 48) << 6        # an AccECN ACE value: AE, CWR, ECE
        else:
            bits |= FLAG_BITS.get(ch, 0)
    return bits


def fmt_flags(bits: int) -> str:
    out = "".join(ch for ch in "SFRPUEWA" if bits & FLAG_BITS[ch])
    if bits & ACK:
        out += "."
    return out or "-"


def parse_options(raw: bytes) -> list[tuple[int, bytes]]:
    """(kind, data) pairs of a TCP option block, as sent (a malformed tail is kept as is)."""
    out: list[tuple[int, bytes]] = []
    i = 0
    while i < len(raw):
        kind = raw[i]
        if kind == 0:
            out.append((0, b""))
            break
        if kind == 1:
            out.append((1, b""))
            i += 1
            continue
        if i + 1 >= len(raw) or raw[i + 1] < 2:
            out.append((kind, raw[i + 2 :]))
            break
        ln = raw[i + 1]
        out.append((kind, raw[i + 2 : i + ln]))
        i += ln
    return out


def _fmt_sack(data: bytes, sack_off: int) -> str:
    vals = [
        (struct.unpack("!I", data[j : j + 4])[0] - sack_off) & 0xFFFFFFFF for j in range(0, len(data) - 3, 4)
    ]
    return "sack " + " ".join(f"{vals[j]}:{vals[j + 1]}" for j in range(0, len(vals) - 1, 2))


def _fmt_opt(kind: int, data: bytes, ts: tuple[int, int] | None, sack_off: int) -> str:
    if kind == 0:
        return "eol"
    if kind == 1:
        return "nop"
    if kind == 2 and len(data) == 2:
        return f"mss {struct.unpack('!H', data)[0]}"
    if kind == 3 and len(data) == 1:
        return f"wscale {data[0]}"
    if kind == 4:
        return "sackOK"
    if kind == 5:
        return _fmt_sack(data, sack_off)
    if kind == 8 and len(data) == 8:
        val, ecr = ts if ts is not None else struct.unpack("!II", data)
        return f"TS val {val} ecr {ecr}"
    if kind == 19:
        return f"md5 {data.hex()}"
    if kind == 34:
        return f"FO {data.hex()}" if data else "FO"
    if kind in (172, 174) and len(data) % 3 == 0:
        names = ("e0b", "ceb", "e1b") if kind == 172 else ("e1b", "ceb", "e0b")
        fields = [int.from_bytes(data[j:j + 3], "big") for j in range(0, len(data), 3)]
        return " ".join(["ECN", *(f"{n} {v}" for n, v in zip(names, fields, strict=False))])
    if kind == 254 and data[:2] == b"\xf9\x89":
        return f"FOEXP {data[2:].hex()}" if len(data) > 2 else "FOEXP"
    return f"kind {kind} len {len(data) + 2}"


def fmt_opts(opts: list[tuple[int, bytes]], ts: tuple[int, int] | None = None, sack_off: int = 0) -> str:
    return ",".join(_fmt_opt(kind, data, ts, sack_off) for kind, data in opts)


def fmt_script_opts(opts: list[TcpOption]) -> str:
    return ",".join(o.raw or o.name for o in opts)


def fmt_expected(ev: PacketEvent) -> str:
    text = f"{ev.direction} {ev.flags} {ev.seq_start}:{ev.seq_end}({ev.seq_len})"
    if ev.ack is not None:
        text += f" ack {ev.ack}"
    if ev.win is not None:
        text += f" win {ev.win}"
    if ev.urg is not None:
        text += f" urg {ev.urg}"
    if ev.options is None:
        text += " <...>"
    elif ev.options:
        text += f" <{fmt_script_opts(ev.options)}>"
    if ev.payload is not None:
        text += f" payload {ev.payload!r}"
    return text


def fmt_live(
    seg: Segment,
    *,
    seq: int | None = None,
    length: int | None = None,
    flags: int | None = None,
    ts: tuple[int, int] | None = None,
    opts: list[tuple[int, bytes]] | None = None,
    ack: int | None = None,
    sack_off: int = 0,
    payload: bytes | None = None,
) -> str:
    seq = seg.seq if seq is None else seq
    length = len(seg.payload) if length is None else length
    flags = seg.flags if flags is None else flags
    text = f"> {fmt_flags(flags)} {seq}:{(seq + length) & 0xFFFFFFFF}({length})"
    if flags & ACK:
        text += f" ack {seg.ack if ack is None else ack}"
    text += f" win {seg.window}"
    if seg.urg_ptr:
        text += f" urg {seg.urg_ptr}"
    opts = parse_options(bytes(seg.raw_options)) if opts is None else opts
    if opts:
        text += f" <{fmt_opts(opts, ts, sack_off)}>"
    if payload is not None:
        text += f" payload {payload!r}"
    return text
