"""Generic receive offload: coalesce a batch of TCP segments of one flow, as Linux GRO does.

A link with offloads (loopback, virtio) hands the receiving stack packets that GRO built:
the segments of one flow that arrived in one poll batch, in sequence, joined into one
packet of MSS-multiples up to 64 KiB. :func:`coalesce` applies Linux's rules
(``tcp_gro_receive``, ``inet_gro_receive``, ``ipv6_gro_receive``) to a batch of raw packets:

* a segment joins the packet before it only if it continues its sequence space, has the
  same ACK, the same header word (data offset, flags, window) but for CWR/FIN/PSH, the
  same TCP option bytes, and the same IP header but for length, ID and checksum;
* only wire segments (up to the link's MTU) are joined, never a TSO packet carried whole;
* the first segment's payload length is the MSS (``gso_size``); a larger one starts a new
  packet; a shorter one, or one with PSH or FIN, is joined and ends the packet; one
  carrying CWR, SYN, RST or URG, or no payload, is never joined;
* the joined packet keeps the first header, with the PSH/FIN of the last ORed in, the IP
  length (and IPv4 header checksum) rewritten and the TCP checksum left as it is: links
  that coalesce are those whose checksums are trusted (CHECKSUM_UNNECESSARY).

The payloads are copied once into the joined packet (the link's work, like the copy a
link already does when it turns a packet into bytes); Linux chains the fragments instead.
"""

from __future__ import annotations

import struct
from typing import Final

from usertcp.wire.segment import CWR, FIN, PSH, RST, SYN, URG

GRO_MAX_SIZE: Final = 65535                     # one IPv4 total length / IPv6 payload length
_H: Final = struct.Struct("!H")
_I: Final = struct.Struct("!I")
_FLUSH_FLAGS = (PSH | FIN | RST | SYN | URG) << 16      # in the TCP header's 4th word
_NEVER_JOIN = (CWR | RST | SYN | URG) << 16
_IGNORED = (CWR | FIN | PSH) << 16


def _tcp_offset(pkt: bytes) -> int:
    """Offset of the TCP header of a plain IPv4 (no options, not a fragment) or IPv6 TCP
    packet without extension headers; 0 for anything GRO leaves alone."""
    n = len(pkt)
    if n >= 40 and pkt[0] == 0x45 and pkt[9] == 6 and not _H.unpack_from(pkt, 6)[0] & 0x3FFF:
        return 20
    if n >= 60 and pkt[0] >> 4 == 6 and pkt[6] == 6:
        return 40
    return 0


def coalesce(batch: list[bytes], wire_mtu: int = 1500) -> list[bytes]:
    """The packets a GRO receive path hands up for ``batch`` (arrival order kept). Packets
    longer than ``wire_mtu`` are super-packets already (TSO carried whole): never joined."""
    out: list[bytes] = []
    i = 0
    n = len(batch)
    while i < n:
        j = _run_end(batch, i, wire_mtu)
        out.append(batch[i] if j == i + 1 else _join(batch, i, j))
        i = j
    return out


def _run_end(batch: list[bytes], i: int, wire_mtu: int) -> int:
    """End (exclusive) of the run of segments from ``batch[i]`` that join into one packet."""
    first = batch[i]
    ip = _tcp_offset(first)
    if not ip or len(first) > wire_mtu:
        return i + 1
    word = _I.unpack_from(first, ip + 12)[0]
    doff = (word >> 28) << 2
    tot = len(first) if ip == 40 else _H.unpack_from(first, 2)[0]
    mss = tot - ip - doff
    if mss <= 0 or word & (_FLUSH_FLAGS | _NEVER_JOIN) or tot != len(first):
        return i + 1
    hdr_end = ip + doff
    size = tot - ip                      # TCP length of the packet being built
    limit = GRO_MAX_SIZE - 20 if ip == 20 else GRO_MAX_SIZE
    seq_next = (_I.unpack_from(first, ip + 4)[0] + mss) & 0xFFFFFFFF
    j = i + 1
    while j < len(batch):
        p = batch[j]
        if len(p) < hdr_end or len(p) > wire_mtu or _tcp_offset(p) != ip:
            break
        w = _I.unpack_from(p, ip + 12)[0]
        ptot = len(p) if ip == 40 else _H.unpack_from(p, 2)[0]
        plen = ptot - hdr_end
        if (ptot != len(p) or plen <= 0 or plen > mss or size + plen > limit
                or w & _NEVER_JOIN or (w ^ word) & ~_IGNORED
                or _I.unpack_from(p, ip + 4)[0] != seq_next
                or p[ip:ip + 4] != first[ip:ip + 4] or p[ip + 8:ip + 12] != first[ip + 8:ip + 12]
                or p[ip + 20:hdr_end] != first[ip + 20:hdr_end] or not _same_ip(first, p, ip)):
            break
        size += plen
        seq_next = (seq_next + plen) & 0xFFFFFFFF
        j += 1
        if plen < mss or w & _FLUSH_FLAGS:
            break                        # Linux: a short or PSH/FIN segment ends the packet
    return j


def _same_ip(a: bytes, b: bytes, ip: int) -> bool:
    if ip == 20:       # version/IHL, TOS; DF/fragment, TTL, protocol; addresses
        return a[0:2] == b[0:2] and a[6:10] == b[6:10] and a[12:20] == b[12:20]
    return a[0:4] == b[0:4] and a[6:40] == b[6:40]       # version/class/flow; next header..


def _join(batch: list[bytes], i: int, j: int) -> bytes:
    first = batch[i]
    ip = _tcp_offset(first)
    doff = (first[ip + 12] >> 4) << 2
    hdr_end = ip + doff
    parts = [first[hdr_end:]]
    flags = 0
    for p in batch[i + 1:j]:
        parts.append(p[hdr_end:])
        flags |= p[ip + 13] & (PSH | FIN)
    payload = b"".join(parts)
    hdr = bytearray(first[:hdr_end])
    hdr[ip + 13] |= flags
    if ip == 20:
        tot = hdr_end + len(payload)
        _H.pack_into(hdr, 2, tot)
        _H.pack_into(hdr, 10, 0)
        s = int.from_bytes(hdr[:20], "big") % 0xFFFF
        _H.pack_into(hdr, 10, 0xFFFF - s if s else 0)
    else:
        _H.pack_into(hdr, 4, doff + len(payload))
    return bytes(hdr) + payload


__all__ = ["GRO_MAX_SIZE", "coalesce"]
