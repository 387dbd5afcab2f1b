"""The header peek behind header prediction (Linux tcp_rcv_established's fast path).

The stack's fast path must not know header layouts, so it asks this module, in three
cheap steps that let it give up as early as possible:

1. :func:`peek_tcp` reads the fixed IPv4/IPv6 and TCP headers of an unfragmented TCP
   packet (no options decoded, no checksum) and returns the fields prediction compares
   (:data:`NO_PEEK` for anything else);
2. :func:`checksums_ok` checks the IPv4 header checksum and the TCP checksum;
3. :func:`predicted_options` decodes only the option layout a predicted segment has:
   the TCP-MD5 option first if signed (RFC 2385), then NOP, NOP, timestamps (RFC 7323
   Appendix A), each at its canonical place.

Anything else returns None and the caller takes the full parser (``wire/packet.py``),
which also counts every error.
"""

from __future__ import annotations

import hmac
import struct
from typing import Final

from usertcp.wire.checksum import residue
from usertcp.wire.md5 import md5_digest_fixed
from usertcp.wire.segment import Buffer

# Only the fields prediction compares (pad bytes skip the rest: fewer objects per packet on
# the compiled build, where a failed prediction pays this peek on top of the full parse); the
# TCP data offset, flags and window are read as one word. Bound once: no method lookup per call.
_S_IP4TCP: Final = struct.Struct("!xBHxxHxBxx4s4sHHIII")
_S_IP6TCP: Final = struct.Struct("!IHBx16s16sHHIII")
_unpack_ip4tcp: Final = _S_IP4TCP.unpack_from
_unpack_ip6tcp: Final = _S_IP6TCP.unpack_from
_S_III: Final = struct.Struct("!III")
_from_bytes: Final = int.from_bytes
_MD5_NOPS: Final = b"\x01\x01\x13\x12"          # NOP, NOP, MD5 kind 19, length 18
_TS_WORD: Final = 0x0101080A                     # NOP, NOP, TS kind 8, length 10

# Header prediction (Linux pred_flags): the 4th TCP header word with the reserved bits, AE
# and PSH masked out; a connection predicts (header length << 28) | ACK << 16 | window.
HP_MASK: Final = 0xF0F7FFFF

# peek_tcp's result: (ip_len, tot, tos, src, dst, sport, dport, seq, ack, hp_word), where
# hp_word is the 4th TCP header word (data offset, flags, window) as one integer.
# Not optional: the compiled build returns a fixed tuple by value, no tuple object to build
# and take apart on every packet; ip_len 0 (NO_PEEK) says "not a plain TCP packet".
Peek = tuple[int, int, int, bytes, bytes, int, int, int, int, int]
NO_PEEK: Final[Peek] = (0, 0, 0, b"", b"", 0, 0, 0, 0, 0)


def peek_tcp(buf: Buffer) -> Peek:
    """The fixed headers of an unfragmented IPv4/IPv6 TCP packet, or :data:`NO_PEEK`.
    ``buf`` is read in place (no view is made: a missed prediction should cost little)."""
    n = len(buf)
    if n < 40:
        return NO_PEEK
    first = buf[0]
    if first == 0x45:
        tos, tot, frag, proto, src, dst, sport, dport, seq, ack, hp_word = _unpack_ip4tcp(buf, 0)
        if proto != 6 or frag & 0x3FFF or tot > n:
            return NO_PEEK
        ip_len = 20
    elif first >> 4 == 6 and n >= 60:
        vtc, plen6, nh, src, dst, sport, dport, seq, ack, hp_word = _unpack_ip6tcp(buf, 0)
        tot = 40 + plen6
        if nh != 6 or tot > n:
            return NO_PEEK
        ip_len = 40
        tos = (vtc >> 20) & 0xFF
    else:
        return NO_PEEK
    return ip_len, tot, tos, src, dst, sport, dport, seq, ack, hp_word


def checksums_ok(mv: memoryview, ip_len: int, tot: int, tcp_verified: bool) -> bool:
    """The IPv4 header checksum and (unless the link verified it) the TCP checksum."""
    if ip_len == 20 and _from_bytes(mv[:20], "big") % 0xFFFF:
        return False
    if tcp_verified:
        return True
    # RFC 9293 §3.1 pseudo-header: the addresses end the IP header (IPv4 bytes 12-20, IPv6
    # 8-40), an even offset, so one residue over them and the segment sums both; the
    # protocol and the TCP length are added.
    return not (residue(mv[ip_len - (8 if ip_len == 20 else 32):tot]) + 6 + tot - ip_len) % 0xFFFF


def predicted_options(mv: memoryview, ip_len: int, tot: int, hp_word: int, md5_key: bytes | None,
                      timestamps: bool, src: bytes, dst: bytes) -> tuple[int, int, int] | None:
    """(payload offset, TSval or -1, TSecr) for the predicted option layout, with the MD5
    digest verified when ``md5_key`` is set; None for anything else."""
    doff = (hp_word >> 28) << 2
    if doff > tot - ip_len:
        return None
    opt = ip_len + 20
    digest = None
    if md5_key is not None:
        if mv[opt:opt + 4] != _MD5_NOPS:
            return None
        digest = mv[opt + 4:opt + 20]
        opt += 20
    ts_val = -1
    ts_ecr = 0
    if timestamps:
        if opt + 12 > tot:
            return None
        word, ts_val, ts_ecr = _S_III.unpack_from(mv, opt)
        if word != _TS_WORD:
            return None
    start = ip_len + doff
    if digest is not None and md5_key is not None and not hmac.compare_digest(
            md5_digest_fixed(md5_key, src, dst, mv[ip_len:ip_len + 20], tot - ip_len, (mv[start:tot],)),
            digest):
        return None
    return start, ts_val, ts_ecr
