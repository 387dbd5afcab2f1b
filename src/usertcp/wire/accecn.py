"""The Accurate ECN option (RFC 9768 §3.2.3): layout, and Linux's option writing around it.

Two kinds carry the same three 24-bit byte counters in different orders (RFC 9768 §3.2.3,
Table 5): kind 172 (AccECN0) is EE0B, ECEB, EE1B; kind 174 (AccECN1) is EE1B, ECEB, EE0B.
A sender may truncate the option after any whole field (length 2, 5, 8 or 11). Linux
writes only kind 174 (``tcp_options_write``) and folds the option's odd bytes into the
two NOPs that pad the SACK-permitted, window-scale or SACK option that follows it; this
module reproduces that layout byte for byte, so our segments look like Linux's on the wire.

The counters are passed here as the 24-bit values to put on the wire (the RFC's initial
offsets are the protocol's business, in ``tcp/accecn.py``).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from .segment import OPT_ACCECN0, OPT_ACCECN1, OPT_NOP, OPT_SACK, OPT_SACK_PERM, OPT_WSCALE

ACCECN_BASE_LEN = 2           # kind + length (TCPOLEN_ACCECN_BASE)
ACCECN_FIELD_LEN = 3          # one 24-bit counter (TCPOLEN_ACCECN_PERFIELD)
ACCECN_MAX_LEN = ACCECN_BASE_LEN + 3 * ACCECN_FIELD_LEN
FIELD_MASK = 0xFFFFFF

# IP-ECN codepoint of the counter in field i (0..2), for each order (Linux
# tcp_accecn_optfield_to_ecnfield): 1 = ECT(1), 2 = ECT(0), 3 = CE.
FIELD_ECN = ((2, 3, 1), (1, 3, 2))

_MD5_PLACEHOLDER = b"\x01\x01\x13\x12" + bytes(16)     # as wire/tcp.py encode_options
_S_II = struct.Struct("!II")
_S_TS_ACCECN3 = struct.Struct("!4sIIIII")
_TS_NOP_PREFIX = b"\x01\x01\x08\x0a"
_ACCECN3_HEAD = (OPT_ACCECN1 << 24) | (ACCECN_MAX_LEN << 16)
_S_I = struct.Struct("!I")


def parse_accecn(opt: memoryview) -> tuple[int, tuple[int, ...]]:
    """(order, counters) of an AccECN option (kind, length, fields): ``order`` is 0 or 1,
    ``counters`` the whole 24-bit fields present, in wire order (0 to 3 of them)."""
    order = 1 if opt[0] == OPT_ACCECN1 else 0
    n = (len(opt) - ACCECN_BASE_LEN) // ACCECN_FIELD_LEN
    if n >= 3:                       # the usual full option: one conversion, three shifts
        v = int.from_bytes(opt[2:11], "big")
        return order, (v >> 48, (v >> 24) & FIELD_MASK, v & FIELD_MASK)
    fields = tuple((opt[2 + 3 * i] << 16) | (opt[3 + 3 * i] << 8) | opt[4 + 3 * i] for i in range(n))
    return order, fields


def accecn_size(nfields: int, combine_saving: int) -> int:
    """Option bytes Linux charges for ``nfields`` fields when up to ``combine_saving`` odd
    bytes can replace the NOP padding of the option written after it (tcp_options_fit_accecn):
    rounded down to a word when the remainder fits the padding, else up."""
    size = ACCECN_BASE_LEN + ACCECN_FIELD_LEN * nfields
    if (size & 3) > combine_saving:
        return (size + 3) & ~3
    return size & ~3


def encode_with_accecn(*, mss: int = -1, ts: tuple[int, int] | None = None, sack_permitted: bool = False,
                       wscale: int = -1, accecn: tuple[int, int, int, int],
                       sack_blocks: Sequence[tuple[int, int]] = (), md5: bool = False) -> bytes:
    """Options with an AccECN option, word for word as Linux tcp_options_write: the MD5
    placeholder (filled by ``build_packet``), MSS, SACK-permitted folded before TS, AccECN, SACK-permitted,
    window scale, SACK blocks. ``accecn`` is (nfields, ee1b, eceb, ee0b) in order 1."""
    out = [_MD5_PLACEHOLDER if md5 else b""]
    if mss >= 0:
        out.append(struct.pack("!BBH", 2, 4, mss))
    if ts is not None:
        head = b"\x04\x02\x08\x0a" if sack_permitted else b"\x01\x01\x08\x0a"
        out.append(head + _S_II.pack(ts[0], ts[1]))
        sack_permitted = False
    nfields, e1b, ceb, e0b = accecn
    if nfields == 3 and ts is not None and not sack_blocks and not md5 and mss < 0 and wscale < 0:
        # Every segment of a connection with timestamps, in full option mode: one pack.
        e1b &= FIELD_MASK
        word3 = ((e0b & FIELD_MASK) << 8) | OPT_NOP
        return _S_TS_ACCECN3.pack(_TS_NOP_PREFIX, ts[0], ts[1], _ACCECN3_HEAD | (e1b >> 8),
                                  ((e1b & 0xFF) << 24) | (ceb & FIELD_MASK), word3)
    length = ACCECN_BASE_LEN + ACCECN_FIELD_LEN * nfields
    hi, lo = OPT_NOP, OPT_NOP           # bytes that replace the next option's two NOPs
    e1b &= FIELD_MASK
    ceb &= FIELD_MASK
    e0b &= FIELD_MASK
    if nfields >= 1:
        out.append(_S_I.pack((OPT_ACCECN1 << 24) | (length << 16) | (e1b >> 8)))
        if nfields == 1:
            hi = e1b & 0xFF
        else:
            out.append(_S_I.pack(((e1b & 0xFF) << 24) | ceb))
            if nfields == 3:
                out.append(_S_I.pack((e0b << 8) | OPT_NOP))
    else:
        hi, lo = OPT_ACCECN1, length
    if sack_permitted:
        out.append(bytes((hi, lo, OPT_SACK_PERM, 2)))
        hi = lo = OPT_NOP
    if wscale >= 0:
        first = OPT_NOP
        if hi != OPT_NOP and lo == OPT_NOP:     # only a single leftover byte goes here
            first, hi = hi, OPT_NOP
        out.append(bytes((first, OPT_WSCALE, 3, wscale)))
    if sack_blocks:
        out.append(bytes((hi, lo, OPT_SACK, 2 + 8 * len(sack_blocks))))
        for start, end in sack_blocks:
            out.append(_S_II.pack(start, end))
    elif hi != OPT_NOP or lo != OPT_NOP:
        out.append(bytes((hi, lo, OPT_NOP, OPT_NOP)))
    res = b"".join(out)
    if len(res) > 40:
        raise ValueError(f"TCP options need {len(res)} bytes, more than 40")
    return res


__all__ = [
    "ACCECN_BASE_LEN",
    "ACCECN_FIELD_LEN",
    "ACCECN_MAX_LEN",
    "FIELD_ECN",
    "FIELD_MASK",
    "OPT_ACCECN0",
    "OPT_ACCECN1",
    "accecn_size",
    "encode_with_accecn",
    "parse_accecn",
]
