"""The SCM_TIMESTAMPING_OPT_STATS payload: TCP statistics as netlink attributes.

A transmit timestamp taken with ``SOF_TIMESTAMPING_OPT_STATS`` (and ``OPT_TSONLY``) carries,
instead of a copy of the packet, the attributes Linux ``tcp_get_timestamping_opt_stats()``
(net/ipv4/tcp.c) writes: ``struct nlattr`` (``nla_len``, ``nla_type``, host order) then the
value, each attribute padded to 4 bytes (NLA_ALIGN). 64-bit values are ``nla_put_u64_64bit``
without a TCP_NLA_PAD attribute in front: none is needed where unaligned access is cheap
(x86-64, arm64). The order and widths below are the kernel's; this machine's 6.18 kernel
hands exactly this sequence over loopback (checked with Python's ``socket.recvmsg``).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Final

__all__ = ["OPT_STATS_LAYOUT", "SCM_TIMESTAMPING_OPT_STATS", "decode_opt_stats", "encode_opt_stats"]

SCM_TIMESTAMPING_OPT_STATS: Final = 54       # include/uapi/asm-generic/socket.h

# enum in include/uapi/linux/tcp.h (TCP_NLA_PAD is 0).
TCP_NLA_BUSY: Final = 1
TCP_NLA_RWND_LIMITED: Final = 2
TCP_NLA_SNDBUF_LIMITED: Final = 3
TCP_NLA_DATA_SEGS_OUT: Final = 4
TCP_NLA_TOTAL_RETRANS: Final = 5
TCP_NLA_PACING_RATE: Final = 6
TCP_NLA_DELIVERY_RATE: Final = 7
TCP_NLA_SND_CWND: Final = 8
TCP_NLA_REORDERING: Final = 9
TCP_NLA_MIN_RTT: Final = 10
TCP_NLA_RECUR_RETRANS: Final = 11
TCP_NLA_DELIVERY_RATE_APP_LMT: Final = 12
TCP_NLA_SNDQ_SIZE: Final = 13
TCP_NLA_CA_STATE: Final = 14
TCP_NLA_SND_SSTHRESH: Final = 15
TCP_NLA_DELIVERED: Final = 16
TCP_NLA_DELIVERED_CE: Final = 17
TCP_NLA_BYTES_SENT: Final = 18
TCP_NLA_BYTES_RETRANS: Final = 19
TCP_NLA_DSACK_DUPS: Final = 20
TCP_NLA_REORD_SEEN: Final = 21
TCP_NLA_SRTT: Final = 22
TCP_NLA_TIMEOUT_REHASH: Final = 23
TCP_NLA_BYTES_NOTSENT: Final = 24
TCP_NLA_EDT: Final = 25
TCP_NLA_TTL: Final = 26
TCP_NLA_REHASH: Final = 27

# (attribute, value bytes) in the order tcp_get_timestamping_opt_stats() puts them.
OPT_STATS_LAYOUT: Final[tuple[tuple[int, int], ...]] = (
    (TCP_NLA_BUSY, 8), (TCP_NLA_RWND_LIMITED, 8), (TCP_NLA_SNDBUF_LIMITED, 8),
    (TCP_NLA_DATA_SEGS_OUT, 8), (TCP_NLA_TOTAL_RETRANS, 8), (TCP_NLA_PACING_RATE, 8),
    (TCP_NLA_DELIVERY_RATE, 8), (TCP_NLA_SND_CWND, 4), (TCP_NLA_REORDERING, 4), (TCP_NLA_MIN_RTT, 4),
    (TCP_NLA_RECUR_RETRANS, 1), (TCP_NLA_DELIVERY_RATE_APP_LMT, 1), (TCP_NLA_SND_SSTHRESH, 4),
    (TCP_NLA_DELIVERED, 4), (TCP_NLA_DELIVERED_CE, 4), (TCP_NLA_SNDQ_SIZE, 4), (TCP_NLA_CA_STATE, 1),
    (TCP_NLA_BYTES_SENT, 8), (TCP_NLA_BYTES_RETRANS, 8), (TCP_NLA_DSACK_DUPS, 4),
    (TCP_NLA_REORD_SEEN, 4), (TCP_NLA_SRTT, 4), (TCP_NLA_TIMEOUT_REHASH, 2),
    (TCP_NLA_BYTES_NOTSENT, 4), (TCP_NLA_EDT, 8), (TCP_NLA_TTL, 1), (TCP_NLA_REHASH, 4),
)
_WIDTH: Final = dict(OPT_STATS_LAYOUT)
_NLA: Final = struct.Struct("=HH")
_VALUE: Final = {1: struct.Struct("=B"), 2: struct.Struct("=H"), 4: struct.Struct("=I"),
                 8: struct.Struct("=Q")}


def encode_opt_stats(values: Mapping[int, int]) -> bytes:
    """The attributes of ``values`` (TCP_NLA_* -> int) in the kernel's order; an attribute
    missing from ``values`` is left out (as TCP_NLA_TTL is without an incoming ACK). Each
    value is cut to its width, as the kernel's u8/u16/u32 puts truncate."""
    out = bytearray()
    for kind, width in OPT_STATS_LAYOUT:
        if kind not in values:
            continue
        out += _NLA.pack(4 + width, kind)
        out += _VALUE[width].pack(values[kind] & ((1 << (8 * width)) - 1))
        out += bytes(-(4 + width) % 4)              # NLA_ALIGN
    return bytes(out)


def decode_opt_stats(data: bytes) -> dict[int, int]:
    """TCP_NLA_* -> value of an OPT_STATS payload; ValueError if it is malformed."""
    out: dict[int, int] = {}
    off = 0
    while off < len(data):
        if len(data) - off < _NLA.size:
            raise ValueError(f"truncated attribute header at {off}")
        length, kind = _NLA.unpack_from(data, off)
        width = length - _NLA.size
        if width < 0 or off + length > len(data):
            raise ValueError(f"attribute {kind} of length {length} overruns the payload at {off}")
        if kind in _WIDTH and _WIDTH[kind] == width:
            out[kind] = _VALUE[width].unpack_from(data, off + _NLA.size)[0]
        off += (length + 3) & ~3
    return out
