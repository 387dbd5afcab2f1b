"""TCP option encoding (Linux tcp_options_write layout) and parsing (tcp_parse_options).

Encoding follows net/ipv4/tcp_output.c:tcp_options_write word by word, so that our
SYNs and data segments are byte-identical to Linux's and middlebox behaviour is the
same. Parsing follows net/ipv4/tcp_input.c:tcp_parse_options, except that a
malformed length (< 2, or past the option space) drops the packet as ``TcpInErrs``
where Linux silently stops parsing: a segment whose option space is corrupt is not
one we want to act on.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

from .segment import (
    FASTOPEN_EXP_MAGIC,
    OPT_ACCECN0,
    OPT_ACCECN1,
    OPT_AO,
    OPT_EOL,
    OPT_EXP,
    OPT_FASTOPEN,
    OPT_MD5,
    OPT_MSS,
    OPT_NOP,
    OPT_SACK,
    OPT_SACK_PERM,
    OPT_TIMESTAMP,
    OPT_WSCALE,
    Buffer,
    DropPacket,
    Segment,
)

MAX_OPTIONS_LEN: Final = 40          # RFC 9293 §3.1: data offset is 4 bits, header <= 60 bytes
TCP_HEADER_LEN: Final = 20
MD5_OPTION_LEN: Final = 20           # TCPOLEN_MD5SIG_ALIGNED: NOP, NOP, 19, 18, digest[16]
MD5_DIGEST_OFFSET: Final = TCP_HEADER_LEN + 4   # digest offset inside the TCP header
MAX_WSCALE: Final = 14               # RFC 7323 §2.3
FASTOPEN_COOKIE_MIN: Final = 4       # RFC 7413 §4.1.1 (erratum 4238: even lengths 4..16)
FASTOPEN_COOKIE_MAX: Final = 16

_MD5_PLACEHOLDER = b"\x01\x01\x13\x12" + bytes(16)
_S_MSS: Final = struct.Struct("!BBH")
_TS_NOP_PREFIX: Final = b"\x01\x01\x08\x0a"
_TS_SACKPERM_PREFIX: Final = b"\x04\x02\x08\x0a"
_S_TS_FULL: Final = struct.Struct("!4sII")
_SACKPERM_NOP: Final = b"\x01\x01\x04\x02"
_S_WSCALE: Final = struct.Struct("!BBBB")
_S_II: Final = struct.Struct("!II")
_S_H: Final = struct.Struct("!H")


def options_length(*, mss: int = -1, wscale: int = -1, sack_permitted: bool = False,
                   ts: bool | tuple[int, int] | None = None, sack_blocks: int | Sequence[object] = 0,
                   fastopen: int | bytes | None = None, fastopen_exp: bool = False,
                   md5: bool = False) -> int:
    """Bytes ``encode_options`` would produce, without building (for budgeting).

    ``ts`` is truthy when timestamps are present; ``sack_blocks`` may be a count or a
    sequence; ``fastopen`` may be the cookie or its length (None = absent).
    """
    n = MD5_OPTION_LEN if md5 else 0
    if mss >= 0:
        n += 4
    if ts:
        n += 12
    elif sack_permitted:
        n += 4
    if wscale >= 0:
        n += 4
    nblocks = sack_blocks if isinstance(sack_blocks, int) else len(sack_blocks)
    if nblocks:
        n += 4 + 8 * nblocks
    if fastopen is not None:
        clen = fastopen if isinstance(fastopen, int) else len(fastopen)
        n += (clen + (4 if fastopen_exp else 2) + 3) & ~3
    return n


def encode_options(*, mss: int = -1, wscale: int = -1, sack_permitted: bool = False,
                   ts: tuple[int, int] | None = None, sack_blocks: Sequence[tuple[int, int]] = (),
                   fastopen: bytes | None = None, fastopen_exp: bool = False,
                   md5: bool = False) -> bytes:
    """Encode TCP options in Linux's order; result is a multiple of 4 bytes, <= 40.

    With ``md5`` the digest is a 16 zero-byte placeholder at ``MD5_DIGEST_OFFSET``
    (filled by ``build_packet``). ``mss``/``wscale`` < 0 mean absent.
    Raises ValueError if the options do not fit in 40 bytes.
    """
    # Fast path: the timestamp-only block of every established-state segment.
    if (ts is not None and not md5 and mss < 0 and wscale < 0 and not sack_permitted
            and not sack_blocks and fastopen is None):
        return _S_TS_FULL.pack(_TS_NOP_PREFIX, ts[0], ts[1])
    out: list[bytes] = []
    if md5:
        out.append(_MD5_PLACEHOLDER)
    if mss >= 0:
        out.append(_S_MSS.pack(OPT_MSS, 4, mss))
    if ts is not None:
        # tcp_options_write folds SACK-permitted into the padding before TS.
        prefix = _TS_SACKPERM_PREFIX if sack_permitted else _TS_NOP_PREFIX
        out.append(_S_TS_FULL.pack(prefix, ts[0], ts[1]))
    elif sack_permitted:
        out.append(_SACKPERM_NOP)
    if wscale >= 0:
        out.append(_S_WSCALE.pack(OPT_NOP, OPT_WSCALE, 3, wscale))
    if sack_blocks:
        n = len(sack_blocks)
        if n > 4:
            raise ValueError(f"{n} SACK blocks do not fit in TCP options")
        out.append(bytes((OPT_NOP, OPT_NOP, OPT_SACK, 2 + 8 * n)))
        for start, end in sack_blocks:
            out.append(_S_II.pack(start, end))
    if fastopen is not None:
        if fastopen_exp:
            # RFC 7413 §4.1.1 experimental form (kind 254, magic 0xF989), pre-RFC peers.
            olen = 4 + len(fastopen)
            head = bytes((OPT_EXP, olen)) + _S_H.pack(FASTOPEN_EXP_MAGIC)
        else:
            olen = 2 + len(fastopen)
            head = bytes((OPT_FASTOPEN, olen))
        if olen > 255:
            raise ValueError("fastopen cookie too long")
        out.append(head)
        out.append(bytes(fastopen))
        pad = -olen & 3
        if pad:
            out.append(b"\x01" * pad)
    res = b"".join(out)
    if len(res) > MAX_OPTIONS_LEN:
        raise ValueError(f"TCP options need {len(res)} bytes, more than {MAX_OPTIONS_LEN}")
    return res


def parse_options(seg: Segment, opts: memoryview) -> None:
    """Fill the option fields of ``seg`` from ``opts`` (a slice of the received buffer).

    tcp_parse_options semantics: EOL stops; NOP is skipped; a known option of the
    wrong length is ignored; unknown kinds are skipped and counted. MSS, wscale,
    SACK-permitted and Fast Open are parsed on any segment: the caller decides
    whether they matter (Linux only honours them on SYNs).
    Raises DropPacket("TcpInErrs") for a length < 2 or running past the option space.
    """
    seg.mss = -1
    seg.wscale = -1
    seg.sack_permitted = False
    seg.sack_blocks = ()
    seg.ts_val = -1
    seg.ts_ecr = 0
    seg.fastopen = None
    seg.fastopen_exp = False
    seg.md5 = seg.ao = seg.accecn = None
    seg.unknown_options = 0
    n = len(opts)
    if n == 0:
        return
    # Fast path: NOP NOP TS (and nothing after it, or only EOL/NOP padding).
    if n == 12 and opts[0] == 1 and opts[1] == 1 and opts[2] == 8 and opts[3] == 10:
        seg.ts_val, seg.ts_ecr = _S_II.unpack_from(opts, 4)
        return
    _walk_options(seg, opts, n)


def _walk_options(seg: Segment, opts: memoryview, n: int) -> None:
    """parse_options' general case: walk the ``n`` option bytes kind by kind (Linux
    tcp_parse_options' loop), the frequent kinds inline, the rare ones in _other_option."""
    i = 0
    while i < n:
        kind = opts[i]
        if kind == OPT_EOL:
            return
        if kind == OPT_NOP:
            i += 1
            continue
        if i + 1 >= n:
            raise DropPacket("TcpInErrs", f"TCP option {kind} has no length byte")
        olen = opts[i + 1]
        if olen < 2:
            raise DropPacket("TcpInErrs", f"TCP option {kind} length {olen} < 2")
        if i + olen > n:
            raise DropPacket("TcpInErrs", f"TCP option {kind} length {olen} runs past the header")
        if kind == OPT_TIMESTAMP:
            if olen == 10:
                seg.ts_val, seg.ts_ecr = _S_II.unpack_from(opts, i + 2)
        elif kind == OPT_MSS:
            if olen == 4:
                seg.mss = (opts[i + 2] << 8) | opts[i + 3]
        elif kind == OPT_WSCALE:
            if olen == 3:
                # RFC 7323 §2.3: values above 14 are treated as 14 (Linux logs and caps).
                ws = opts[i + 2]
                seg.wscale = ws if ws <= MAX_WSCALE else MAX_WSCALE
        elif kind == OPT_SACK_PERM:
            if olen == 2:
                seg.sack_permitted = True
        elif kind == OPT_SACK:
            # RFC 2018 §3: length 2 + 8n, at least one block (Linux: opsize >= 10).
            if olen >= 10 and (olen - 2) & 7 == 0:
                blocks = []
                for j in range(i + 2, i + olen, 8):
                    blocks.append(_S_II.unpack_from(opts, j))
                seg.sack_blocks = tuple(blocks)
        elif kind == OPT_FASTOPEN:
            _fastopen(seg, opts, i + 2, olen - 2, False)
        elif kind == OPT_EXP:
            # RFC 7413 §4.1.1 / RFC 6994: experimental Fast Open is kind 254 + magic 0xF989;
            # other experiments (e.g. SMC) are ignored, not counted as unknown.
            if olen >= 4 and ((opts[i + 2] << 8) | opts[i + 3]) == FASTOPEN_EXP_MAGIC:
                _fastopen(seg, opts, i + 4, olen - 4, True)
        else:
            _other_option(seg, opts, i, kind, olen)
        i += olen


def _other_option(seg: Segment, opts: memoryview, i: int, kind: int, olen: int) -> None:
    """An option _walk_options has no branch for: TCP-MD5 (RFC 2385), TCP-AO (RFC 5925
    §2.2: KeyID, RNextKeyID, MAC; at least 4 bytes; verified elsewhere), the AccECN option
    (RFC 9768 §3.2.3, kept whole for tcp/accecn.py, which reads it with wire/accecn.py), or
    an unknown kind."""
    if kind == OPT_MD5:
        if olen == 18:
            seg.md5 = opts[i + 2:i + 18]
    elif kind == OPT_AO:
        if olen >= 4:
            seg.ao = opts[i + 2:i + olen]
    elif kind in (OPT_ACCECN0, OPT_ACCECN1):
        seg.accecn = opts[i:i + olen]
    else:
        seg.unknown_options += 1


def _fastopen(seg: Segment, opts: memoryview, start: int, clen: int, exp: bool) -> None:
    """tcp_parse_fastopen_option: length 0 = cookie request, 4..16 even = cookie, else ignored."""
    if clen & 1:
        return
    if clen == 0:
        seg.fastopen = b""
    elif FASTOPEN_COOKIE_MIN <= clen <= FASTOPEN_COOKIE_MAX:
        seg.fastopen = bytes(opts[start:start + clen])
    else:
        return
    seg.fastopen_exp = exp


def options_from(data: Buffer) -> Segment:
    """Parse a bare option block into a fresh Segment (options fields only; for tests/tools)."""
    seg = Segment()
    parse_options(seg, memoryview(data))
    return seg


__all__ = [
    "FASTOPEN_COOKIE_MAX",
    "FASTOPEN_COOKIE_MIN",
    "MAX_OPTIONS_LEN",
    "MAX_WSCALE",
    "MD5_DIGEST_OFFSET",
    "MD5_OPTION_LEN",
    "encode_options",
    "options_from",
    "options_length",
    "parse_options",
]
