"""Sequence-number arithmetic modulo 2**32 (RFC 9293 §3.4, RFC 1982)."""

from __future__ import annotations

from typing import Final

SEQ_MOD: Final = 1 << 32
SEQ_MASK: Final = SEQ_MOD - 1
_HALF: Final = 1 << 31


def seq_add(a: int, n: int) -> int:
    return (a + n) & SEQ_MASK


def seq_diff(a: int, b: int) -> int:
    """Signed distance a - b in sequence space."""
    d = (a - b) & SEQ_MASK
    return d - SEQ_MOD if d >= _HALF else d
