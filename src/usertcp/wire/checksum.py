"""The Internet checksum (RFC 1071) and the TCP pseudo-header sums.

The one's-complement sum of big-endian 16-bit words equals the whole buffer read
as one big integer modulo 0xFFFF, because 2**16 == 1 (mod 0xFFFF). Both
``int.from_bytes`` and ``%`` run in C, which makes this the fastest pure-Python
form (see docs/python-and-tun-notes.md §4: ~3 µs for 1500 B).

Representation: partial sums are plain non-negative ints that need not be reduced;
adding two of them is adding their sums (RFC 1071 §2(B), associativity). A reduced
residue of 0 stands for 0xFFFF ("negative zero") whenever the data was not all zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from .segment import Buffer

_from_bytes: Final = int.from_bytes

# Masks (1 << k) - 1 for the split points used by mod_ffff; bounded so that adversarial
# packet sizes cannot grow it without limit (sizes seen in practice need a few dozen).
_MASKS: dict[int, int] = {}
_MASKS_MAX: Final = 256


# Above this many bits mod_ffff halves the integer by shift-and-add before dividing.
_SPLIT_BITS: Final = 1 << 15


def mod_ffff(x: int) -> int:
    """``x % 0xFFFF`` for a non-negative int, faster than ``%`` on large values.

    CPython's single-digit long division is one hardware division per 30-bit digit;
    shift-and-add at a 16-bit-aligned split point halves the integer for less, and keeps
    the residue because 2**16 == 1 (mod 0xFFFF). Each halving allocates two integers of
    the half's size, so below 4 KiB the division alone is cheaper (measured with callgrind:
    an MSS-sized sum costs 3.6 k instructions with ``%``, 15.7 k with halvings down to
    2048 bits; in wall time about 0.7x at 1480 bytes, even at 4 KiB, 2.5x slower at 16 KiB).
    """
    b = x.bit_length()
    while b > _SPLIT_BITS:
        k = (b >> 5) << 4
        m = _MASKS.get(k)
        if m is None:
            m = (1 << k) - 1
            if len(_MASKS) < _MASKS_MAX:
                _MASKS[k] = m
        x = (x >> k) + (x & m)
        b = x.bit_length()
    return x % 0xFFFF


def residue(data: Buffer) -> int:
    """The 16-bit one's-complement sum of ``data`` modulo 0xFFFF (0..0xFFFE), an odd
    trailing byte padded with zero: the sum reduced while it is one integer, so that
    adding the pseudo-header's small terms never copies a payload-sized integer.

    The padding multiplies the residue by 2**8 instead of shifting the big integer."""
    r = mod_ffff(_from_bytes(data, "big"))
    if len(data) & 1:
        return (r << 8) % 0xFFFF
    return r


def ones_complement_sum(data: Buffer) -> int:
    """16-bit one's-complement sum of ``data`` (big-endian words), in 0..0xFFFF.

    An odd trailing byte is padded with zero (RFC 1071 §4.1) by shifting the integer
    one byte left rather than copying. Non-zero data never yields 0 (returns 0xFFFF).
    """
    v = _from_bytes(data, "big")
    if len(data) & 1:
        v <<= 8
    r = mod_ffff(v)
    if r == 0 and v:
        return 0xFFFF
    return r


def parts_sum(parts: Sequence[Buffer], offset: int = 0) -> tuple[int, int]:
    """Unreduced sum of ``parts`` as if concatenated, starting at byte ``offset``.

    Returns ``(sum, total_length)``. A part that ends at an odd offset inside the
    (zero-padded, even-length) whole is followed by an odd number of bytes, so its
    integer value weighs 2**8 modulo 0xFFFF: one shift, no copy or join.
    """
    total = 0
    pos = offset
    for p in parts:
        pos += len(p)
        v = _from_bytes(p, "big")
        if pos & 1:
            v <<= 8
        total += v
    return total, pos - offset


def internet_checksum(parts: Sequence[Buffer], initial: int = 0) -> int:
    """Final (inverted) 16-bit checksum over the concatenation of ``parts``.

    ``initial`` is an unfolded partial sum added first, e.g. ``pseudo_header_sum``.
    The checksum field inside ``parts`` must be zero when computing; when verifying,
    a result of 0 means the data is intact.
    """
    if len(parts) == 1:
        p = parts[0]
        v = _from_bytes(p, "big")
        if len(p) & 1:
            v <<= 8
        total = initial + v
    else:
        s, _ = parts_sum(parts)
        total = initial + s
    r = mod_ffff(total)
    # Residue 0 of non-zero data is the sum 0xFFFF, whose complement is 0 (RFC 1071);
    # all-zero data sums to +0 and checks as 0xFFFF.
    if r:
        return 0xFFFF - r
    return 0 if total else 0xFFFF


def fold(total: int) -> int:
    """Fold an unreduced sum to 16 bits like Linux csum_fold without the inversion.

    Non-zero sums map to 1..0xFFFF (end-around carry never produces +0).
    """
    r = mod_ffff(total)
    if r == 0 and total:
        return 0xFFFF
    return r


def finish(total: int) -> int:
    """Inverted checksum of an unreduced sum (the value written in the header)."""
    r = mod_ffff(total)
    if r:
        return 0xFFFF - r
    return 0 if total else 0xFFFF


def pseudo_header_sum(src: bytes, dst: bytes, proto: int, length: int) -> int:
    """Folded (1..0xFFFF) sum of the TCP/UDP pseudo-header.

    IPv4 (RFC 9293 §3.1): src, dst, zero, protocol, 16-bit length.
    IPv6 (RFC 8200 §8.1): src, dst, 32-bit upper-layer length, 3 zero bytes, next header.
    Both reduce to the same words: the addresses, ``length`` and ``proto``
    (a 32-bit length is its two halves, which is ``length`` modulo 0xFFFF).
    """
    return fold(_from_bytes(src, "big") + _from_bytes(dst, "big") + proto + length)


def pseudo_header_bytes(src: bytes, dst: bytes, proto: int, length: int) -> bytes:
    """The literal pseudo-header (for tests and MD5); IPv4 when ``len(src) == 4``."""
    if len(src) == 4:
        return src + dst + bytes((0, proto)) + length.to_bytes(2, "big")
    return src + dst + length.to_bytes(4, "big") + bytes((0, 0, 0, proto))


__all__ = [
    "finish",
    "fold",
    "internet_checksum",
    "mod_ffff",
    "ones_complement_sum",
    "parts_sum",
    "pseudo_header_bytes",
    "pseudo_header_sum",
    "residue",
]
