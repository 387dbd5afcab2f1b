"""TCP MD5 signature option (RFC 2385 §2.0), computed as Linux does.

The digest covers, in order (tcp_v4_md5_hash_skb / tcp_v6_md5_hash_skb):
the pseudo-header, the fixed 20-byte TCP header with the checksum zeroed and
options excluded, the segment data, then the key.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Sequence

from .segment import IPPROTO_TCP, Buffer, Segment

# IPv4 tcp4_pseudohdr: saddr, daddr, pad 0, protocol, be16 length.
_S_PH4 = struct.Struct("!4s4sxBH")
# IPv6 tcp6_pseudohdr: saddr, daddr, be32 length, be32 protocol (3 zero bytes + 6).
_S_PH6 = struct.Struct("!16s16sII")


def tcp_md5_digest(key: bytes, src: bytes, dst: bytes, tcp_header: Buffer,
                   payload: Sequence[Buffer]) -> bytes:
    """RFC 2385 digest of one segment; ``tcp_header`` includes the options (for the length)."""
    seg_len = len(tcp_header)
    for p in payload:
        seg_len += len(p)
    return md5_digest_fixed(key, src, dst, memoryview(tcp_header)[:20], seg_len, payload)


def md5_digest_fixed(key: bytes, src: bytes, dst: bytes, fixed: Buffer, seg_len: int,
                     payload: Sequence[Buffer]) -> bytes:
    """Digest from the 20-byte fixed header and the TCP segment length (header + options + data)."""
    h = hashlib.md5(usedforsecurity=False)
    if len(src) == 4:
        h.update(_S_PH4.pack(src, dst, IPPROTO_TCP, seg_len))
    else:
        h.update(_S_PH6.pack(src, dst, seg_len, IPPROTO_TCP))
    th = memoryview(fixed)
    h.update(th[:16])            # ports, seq, ack, offset/flags, window
    h.update(b"\x00\x00")        # checksum taken as zero
    h.update(th[18:20])          # urgent pointer; options are not covered
    for p in payload:
        h.update(p)
    h.update(key)
    return h.digest()


def verify_segment_md5(seg: Segment, key: bytes) -> bool:
    """True when ``seg`` carries an MD5 option whose digest matches ``key``."""
    if seg.md5 is None:
        return False
    want = tcp_md5_digest(key, seg.src, seg.dst, seg.tcp_header, (seg.payload,))
    return hmac.compare_digest(want, seg.md5)


__all__ = ["md5_digest_fixed", "tcp_md5_digest", "verify_segment_md5"]
