"""Parse inbound IPv4/IPv6 + TCP packets and build outbound ones.

``parse_packet`` validates in the order Linux does (ip_rcv_core / ip6_rcv_core,
local delivery, tcp_v4_rcv / tcp_v6_rcv) and raises :class:`DropPacket` naming
the nstat counter to increment; it raises nothing else for any input bytes.

Counters (one per drop; where Linux bumps two, the parent is noted):

==================== ====================================================================
IpInHdrErrors        < 20 bytes, version not 4/6, IHL < 5, buffer shorter than IHL,
                     total length < IHL
IpInCsumErrors       IPv4 header checksum wrong (Linux also counts IpInHdrErrors)
IpInTruncatedPkts    total length > bytes received
IpReasmFails         IPv4 fragment (MF or offset != 0): no reassembly here, so every
                     fragment is a failed reassembly (Linux would count IpReasmReqds first)
IpInUnknownProtos    protocol is not TCP (raised as :class:`NotTcp`: ICMP goes to wire.icmp)
Ip6InHdrErrors       < 40 bytes, extension header past the payload, routing header with
                     segments left != 0 (RFC 8200 §4.4: we are not a router)
Ip6InTruncatedPkts   payload length > bytes received
Ip6ReasmFails        fragment header with offset != 0 or M set (atomic fragments,
                     RFC 6946, are accepted as Linux does)
Ip6InUnknownProtos   final next header not TCP (:class:`NotTcp`), or hop-by-hop not first
                     (RFC 8200 §4.3)
TcpInErrs            TCP segment < 20 bytes, data offset < 5 or past the segment,
                     malformed option length (SYN together with RST is TCP's to judge:
                     Linux takes the RST first, tcp_validate_incoming / LISTEN's discard)
TcpInCsumErrors      TCP checksum wrong (Linux also counts TcpInErrs)
==================== ====================================================================
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

from .checksum import mod_ffff, residue
from .md5 import md5_digest_fixed
from .segment import Buffer, DropPacket, NotTcp, Segment, TxPacket
from .tcp import parse_options

_from_bytes: Final = int.from_bytes

_S_IP4: Final = struct.Struct("!BBHHHBBH4s4s")
_S_IP6: Final = struct.Struct("!IHBB16s16s")
_S_TCP: Final = struct.Struct("!HHIIHHHH")
_S_IP4TCP: Final = struct.Struct("!BBHHHBBH4s4sHHIIHHHH")
_S_IP6TCP: Final = struct.Struct("!IHBB16s16sHHIIHHHH")

_MD5_PREFIX: Final = b"\x01\x01\x13\x12"
_EXT_SKIP: Final = (0, 43, 60)     # hop-by-hop, routing, destination options (RFC 8200 §4.1)


def _as_bytes_view(buf: Buffer) -> memoryview:
    mv = memoryview(buf)
    if mv.format != "B" or mv.ndim != 1 or not mv.c_contiguous:
        if mv.c_contiguous:
            mv = mv.cast("B")
        else:
            mv = memoryview(mv.tobytes())   # rare: strided input, copy once
    return mv


def parse_packet(buf: Buffer, *, verify_checksum: bool = True) -> Segment:
    """Validate one IP packet carrying TCP and return its :class:`Segment`.

    Memoryview fields are slices of ``buf`` (no copy). Bytes beyond the IP total /
    payload length (link padding) are ignored. ``verify_checksum=False`` trusts the
    TCP checksum (offload said valid or partial) and sets ``checksum_ok``.
    """
    mv = memoryview(buf)
    if mv.format != "B" or mv.ndim != 1 or not mv.c_contiguous:
        mv = _as_bytes_view(buf)
    n = len(mv)
    if n == 0:
        raise DropPacket("IpInHdrErrors", "empty packet")
    version = mv[0] >> 4
    seg = Segment()
    if version == 4:
        off, end = _parse_ipv4(seg, mv, n)
    elif version == 6:
        off, end = _parse_ipv6(seg, mv, n)
    else:
        raise DropPacket("IpInHdrErrors", f"IP version {version}")
    _parse_tcp(seg, mv, off, end, verify_checksum)
    return seg


def _parse_ipv4(seg: Segment, mv: memoryview, n: int) -> tuple[int, int]:
    """The IPv4 header (Linux ip_rcv_core); returns where TCP starts and ends."""
    if n < 20:
        raise DropPacket("IpInHdrErrors", "shorter than an IPv4 header")
    vihl, tos, tot, _ipid, frag, ttl, proto, _ipsum, src, dst = _S_IP4.unpack_from(mv, 0)
    ihl = (vihl & 15) << 2
    if ihl < 20:
        raise DropPacket("IpInHdrErrors", f"IHL {ihl >> 2} < 5")
    if ihl > n:
        raise DropPacket("IpInHdrErrors", "IPv4 options past the buffer")
    # RFC 1071: the sum over a correct header including its checksum is -0.
    if _from_bytes(mv[:ihl], "big") % 0xFFFF:
        raise DropPacket("IpInCsumErrors", "bad IPv4 header checksum")
    if tot > n:
        raise DropPacket("IpInTruncatedPkts", f"total length {tot} > {n} received")
    if tot < ihl:
        raise DropPacket("IpInHdrErrors", f"total length {tot} < header length {ihl}")
    # RFC 791: MF set or a non-zero offset means a fragment; we do not reassemble.
    if frag & 0x3FFF:
        raise DropPacket("IpReasmFails", "IPv4 fragment")
    if proto != 6:
        raise NotTcp("IpInUnknownProtos", proto, 4, mv, ihl, tot, src, dst)
    seg.ip_version = 4
    seg.tos = tos
    seg.ttl = ttl
    seg.flow_label = 0
    seg.src = src
    seg.dst = dst
    return ihl, tot


def _parse_ipv6(seg: Segment, mv: memoryview, n: int) -> tuple[int, int]:
    """The IPv6 header and its extension headers (Linux ip6_rcv_core, ipv6_parse_exthdrs);
    returns where TCP starts and ends."""
    if n < 40:
        raise DropPacket("Ip6InHdrErrors", "shorter than an IPv6 header")
    vtcfl, plen, nh, hlim, src, dst = _S_IP6.unpack_from(mv, 0)
    end = 40 + plen
    if end > n:
        raise DropPacket("Ip6InTruncatedPkts", f"payload length {plen} > {n - 40} received")
    off = 40
    while nh != 6:
        if nh in _EXT_SKIP:
            if nh == 0 and off != 40:
                raise DropPacket("Ip6InUnknownProtos", "hop-by-hop header not first")
            if off + 8 > end:
                raise DropPacket("Ip6InHdrErrors", "extension header past the payload")
            hl = (mv[off + 1] + 1) << 3
            if off + hl > end:
                raise DropPacket("Ip6InHdrErrors", "extension header past the payload")
            if nh == 43 and mv[off + 3]:
                raise DropPacket("Ip6InHdrErrors", "routing header with segments left")
            nh = mv[off]
            off += hl
        elif nh == 44:
            if off + 8 > end:
                raise DropPacket("Ip6InHdrErrors", "fragment header past the payload")
            if ((mv[off + 2] << 8) | mv[off + 3]) & 0xFFF9:
                raise DropPacket("Ip6ReasmFails", "IPv6 fragment")
            nh = mv[off]
            off += 8
        else:
            raise NotTcp("Ip6InUnknownProtos", nh, 6, mv, off, end, src, dst)
    seg.ip_version = 6
    seg.tos = (vtcfl >> 20) & 0xFF
    seg.ttl = hlim
    seg.flow_label = vtcfl & 0xFFFFF
    seg.src = src
    seg.dst = dst
    return off, end


def _parse_tcp(seg: Segment, mv: memoryview, off: int, end: int, verify_checksum: bool) -> None:
    """The TCP header at ``mv[off:end]`` (Linux tcp_v4_rcv / tcp_v6_rcv checks), its options."""
    tlen = end - off
    if tlen < 20:
        raise DropPacket("TcpInErrs", f"TCP segment of {tlen} bytes")
    sport, dport, seq, ack, offflags, window, _csum, urg = _S_TCP.unpack_from(mv, off)
    doff = (offflags >> 12) << 2
    if doff < 20 or doff > tlen:
        raise DropPacket("TcpInErrs", f"data offset {doff >> 2} invalid for {tlen} bytes")
    if verify_checksum:
        # Pseudo-header words (RFC 9293 §3.1, RFC 8200 §8.1) + segment must be -0.
        pseudo = _from_bytes(seg.src, "big") + _from_bytes(seg.dst, "big") + 6 + tlen
        if (residue(mv[off:end]) + pseudo) % 0xFFFF:
            raise DropPacket("TcpInCsumErrors", "bad TCP checksum")
    flags = offflags & 0x1FF
    seg.sport = sport
    seg.dport = dport
    seg.seq = seq
    seg.ack = ack
    seg.flags = flags
    seg.window = window
    seg.urg_ptr = urg
    seg.data_offset = doff
    hend = off + doff
    seg.tcp_header = mv[off:hend]
    seg.raw_options = opts = mv[off + 20:hend]
    seg.payload = mv[hend:end]
    seg.checksum_ok = True
    seg.gso_size = 0
    parse_options(seg, opts)


def build_packet(*, src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int,
                 window: int, urg_ptr: int = 0, options: bytes = b"", payload: Sequence[Buffer] = (),
                 tos: int = 0, ttl: int = 64, flow_label: int = 0, ip_id: int = 0, df: bool = True,
                 md5_key: bytes | None = None, csum_partial: bool = False,
                 gso_size: int = 0) -> TxPacket:
    """Build one IPv4 (``len(src) == 4``) or IPv6 packet; payload parts are kept by reference.

    Checksums are computed arithmetically from the field values (RFC 1071 sums are
    linear), so the header is packed once. ``csum_partial`` stores the folded,
    non-inverted pseudo-header sum in the TCP checksum field (Linux CHECKSUM_PARTIAL /
    virtio VIRTIO_NET_HDR_F_NEEDS_CSUM); the IPv4 header checksum is always complete.
    """
    optlen = len(options)
    if optlen & 3 or optlen > 40:
        raise ValueError(f"options length {optlen} must be a multiple of 4 and <= 40")
    plen, psum = _payload_sum(payload, csum_partial)
    thl = 20 + optlen
    tcp_len = thl + plen
    offflags = (thl << 10) | flags
    if len(dst) != len(src):
        raise ValueError("src and dst address families differ")
    a_sum = _from_bytes(src, "big") + _from_bytes(dst, "big")
    pseudo = a_sum + 6 + tcp_len

    if md5_key is not None:
        fixed = _S_TCP.pack(sport, dport, seq, ack, offflags, window, 0, urg_ptr)
        options = _md5_signed(options, md5_key, src, dst, fixed, tcp_len, payload)

    if csum_partial:
        r = pseudo % 0xFFFF
        tcsum = r if r else 0xFFFF
    else:
        total = psum + (pseudo + sport + dport + seq + ack + offflags + window + urg_ptr
                        + _from_bytes(options, "big"))
        r = mod_ffff(total)
        tcsum = 0xFFFF - r if r else 0

    if len(src) == 4:
        tot = 20 + tcp_len
        if tot > 0xFFFF:
            raise ValueError(f"IPv4 packet of {tot} bytes")
        frag = 0x4000 if df else 0
        ttlp = (ttl << 8) | 6
        r = ((0x4500 | tos) + tot + ip_id + frag + ttlp + a_sum) % 0xFFFF
        ipcsum = 0xFFFF - r if r else 0
        hdr = _S_IP4TCP.pack(0x45, tos, tot, ip_id, frag, ttl, 6, ipcsum, src, dst,
                             sport, dport, seq, ack, offflags, window, tcsum, urg_ptr)
    elif len(src) == 16:
        if tcp_len > 0xFFFF:
            raise ValueError(f"IPv6 payload of {tcp_len} bytes needs a jumbogram")
        vtcfl = 0x60000000 | (tos << 20) | flow_label
        hdr = _S_IP6TCP.pack(vtcfl, tcp_len, 6, ttl, src, dst,
                             sport, dport, seq, ack, offflags, window, tcsum, urg_ptr)
    else:
        raise ValueError(f"address of {len(src)} bytes")
    if optlen:
        hdr += options
    return TxPacket(hdr, payload, gso_size, csum_partial)


def _payload_sum(payload: Sequence[Buffer], partial: bool) -> tuple[int, int]:
    """The payload's length and its unfolded (small) RFC 1071 sum, parts kept where they are; with
    ``partial`` (checksum offload: the link or device sums the payload) the sum is 0."""
    plen = 0
    psum = 0
    for p in payload:
        plen += len(p)
        if partial:
            continue
        # Payload starts at an even offset (header is a multiple of 4): a part ending at an
        # odd offset weighs 2**8 (mod 0xFFFF), see checksum.parts_sum.
        # Each part's sum reduced on its own (checksum.residue): adding payload-sized
        # integers would copy them.
        r = mod_ffff(_from_bytes(p, "big"))
        psum += r << 8 if plen & 1 else r
    return plen, psum


def _md5_signed(options: bytes, key: bytes, src: bytes, dst: bytes, fixed: bytes, tcp_len: int,
                payload: Sequence[Buffer]) -> bytes:
    """The options with the RFC 2385 digest filled into the MD5 option that leads them."""
    if options[:4] != _MD5_PREFIX:
        raise ValueError("md5_key needs options built with encode_options(md5=True)")
    digest = md5_digest_fixed(key, src, dst, fixed, tcp_len, payload)
    return _MD5_PREFIX + digest + options[20:]


__all__ = ["build_packet", "parse_packet"]
