"""ICMP (RFC 792) and ICMPv6 (RFC 4443) messages: the errors that quote our TCP segments, and echo.

:func:`parse_icmp` takes the ICMP part of a packet that :func:`~usertcp.wire.packet.parse_packet`
turned away as not TCP (:class:`~usertcp.wire.segment.NotTcp` carries where it starts) and
returns an :class:`IcmpMessage`, or raises :class:`~usertcp.wire.segment.DropPacket` naming the
nstat counter, as Linux's icmp_rcv / icmpv6_rcv count them:

===================== =====================================================================
IcmpInCsumErrors      ICMPv4 checksum wrong (Linux also counts IcmpInErrors)
IcmpInErrors          ICMPv4 message shorter than its header, or an error quoting less than
                      an IP header and 8 bytes (RFC 792: the quote is header + 64 bits)
Icmp6InCsumErrors     ICMPv6 checksum wrong (with the pseudo-header, RFC 4443 §2.3)
Icmp6InErrors         the same length rules for ICMPv6 (RFC 4443 §2.4 (c): quoted packet)
===================== =====================================================================

Builders for echo replies (:func:`build_echo_reply`) and for error messages quoting a TCP
header (:func:`build_icmp_error`, used by the drill runner and the tests) live here too.
"""

from __future__ import annotations

import struct

from .checksum import finish, mod_ffff
from .segment import DropPacket, TxPacket

_from_bytes = int.from_bytes

# ICMPv4 types (RFC 792) and the Destination Unreachable codes (RFC 792, RFC 1812 §5.2.7.1).
ICMP_ECHOREPLY = 0
ICMP_DEST_UNREACH = 3
ICMP_SOURCE_QUENCH = 4
ICMP_REDIRECT = 5
ICMP_ECHO = 8
ICMP_TIME_EXCEEDED = 11
ICMP_PARAMETERPROB = 12
ICMP_NET_UNREACH = 0
ICMP_HOST_UNREACH = 1
ICMP_PORT_UNREACH = 3
ICMP_FRAG_NEEDED = 4
# ICMPv6 types and codes (RFC 4443 §3, §4).
ICMPV6_DEST_UNREACH = 1
ICMPV6_PKT_TOOBIG = 2
ICMPV6_TIME_EXCEED = 3
ICMPV6_PARAMPROB = 4
ICMPV6_ECHO_REQUEST = 128
ICMPV6_ECHO_REPLY = 129
ICMPV6_NOROUTE = 0
MIN_MTU6 = 1280                                 # RFC 8200 §5

IPPROTO_ICMP = 1
IPPROTO_ICMPV6 = 58

# The names packetdrill scripts use (its icmp_packet.c tables), per family.
ICMP4_TYPES = {"echo_reply": 0, "unreachable": 3, "source_quench": 4, "redirect": 5,
               "echo_request": 8, "time_exceeded": 11, "parameter_problem": 12,
               "timestamp_request": 13, "timestamp_reply": 14, "information_request": 15,
               "information_reply": 16, "address_mask_request": 17, "address_mask_reply": 18}
ICMP4_UNREACH_CODES = {"net_unreachable": 0, "host_unreachable": 1, "protocol_unreachable": 2,
                       "port_unreachable": 3, "frag_needed": 4, "source_route_failed": 5,
                       "net_unknown": 6, "host_unknown": 7, "source_host_isolated": 8,
                       "net_prohibited": 9, "host_prohibited": 10, "net_unreachable_for_tos": 11,
                       "host_unreachable_for_tos": 12, "packet_filtered": 13,
                       "precedence_violation": 14, "precedence_cutoff": 15}
ICMP6_TYPES = {"unreachable": 1, "packet_too_big": 2, "time_exceeded": 3, "parameter_problem": 4,
               "echo_request": 128, "echo_reply": 129}
ICMP6_CODES = {
    1: {"net_unreachable": 0, "no_route": 0, "admin_prohibited": 1, "not_neighbour": 2,
        "address_unreachable": 3, "port_unreachable": 4},
    3: {"exceeded_hop_limit": 0, "exceeded_frag_time": 1},
    4: {"header_field": 0, "unknown_next_header": 1, "unknown_option": 2},
}

_S_HDR = struct.Struct("!BBHI")                 # type, code, checksum, rest of header
_S_IP4 = struct.Struct("!BBHHHBBH4s4s")
_S_IP6 = struct.Struct("!IHBB16s16s")
_S_PORTS_SEQ = struct.Struct("!HHI")
_IP6_EXT = (0, 43, 60)                          # hop-by-hop, routing, destination options


class IcmpMessage:
    """One validated inbound ICMP or ICMPv6 message.

    ``info`` is the 32-bit word after the checksum (the next-hop MTU of a fragmentation-needed
    error is its low 16 bits, RFC 1191 §4; the MTU of a Packet Too Big is all of it).  For an
    error quoting a TCP segment, ``quoted_*`` are that segment's addresses, ports and sequence
    number (it was sent by us: ``quoted_src`` is our address); ``quoted_protocol`` is -1 when
    the quote is not an IP packet.  ``body`` is the message after the checksum (for echo).
    """

    __slots__ = ("body", "code", "dst", "info", "ip_version", "quoted_dport", "quoted_dst",
                 "quoted_protocol", "quoted_seq", "quoted_sport", "quoted_src", "src", "type")

    def __init__(self, ip_version: int, src: bytes, dst: bytes, icmp_type: int, code: int,
                 info: int, body: memoryview) -> None:
        self.ip_version = ip_version
        self.src = src
        self.dst = dst
        self.type = icmp_type
        self.code = code
        self.info = info
        self.body = body
        self.quoted_protocol = -1
        self.quoted_src = self.quoted_dst = b""
        self.quoted_sport = self.quoted_dport = self.quoted_seq = 0

    @property
    def is_error(self) -> bool:
        """An error message (RFC 4443 §2.1: types below 128; RFC 792 errors quote a packet)."""
        if self.ip_version == 6:
            return self.type < 128
        return self.type in (ICMP_DEST_UNREACH, ICMP_SOURCE_QUENCH, ICMP_REDIRECT,
                             ICMP_TIME_EXCEEDED, ICMP_PARAMETERPROB)


def parse_icmp(mv: memoryview, off: int, end: int, ip_version: int, src: bytes, dst: bytes,
               *, verify_checksum: bool = True) -> IcmpMessage:
    """Validate the ICMP message in ``mv[off:end]`` of a packet from ``src`` to ``dst``."""
    v6 = ip_version == 6
    errors = "Icmp6InErrors" if v6 else "IcmpInErrors"
    length = end - off
    if length < 8:
        raise DropPacket(errors, f"ICMP message of {length} bytes")
    if verify_checksum:
        v = _from_bytes(mv[off:end], "big")
        if length & 1:
            v <<= 8
        if v6:
            # RFC 4443 §2.3: the IPv6 pseudo-header (RFC 8200 §8.1) is part of the sum.
            v += _from_bytes(src, "big") + _from_bytes(dst, "big") + IPPROTO_ICMPV6 + length
        if mod_ffff(v):
            raise DropPacket("Icmp6InCsumErrors" if v6 else "IcmpInCsumErrors", "bad ICMP checksum")
    icmp_type, code, _csum, info = _S_HDR.unpack_from(mv, off)
    msg = IcmpMessage(ip_version, src, dst, icmp_type, code, info, mv[off + 4:end])
    if msg.is_error:
        _parse_quote(msg, mv, off + 8, end, errors)
    return msg


def _parse_quote(msg: IcmpMessage, mv: memoryview, q: int, end: int, errors: str) -> None:
    """The quoted packet: its IP header and at least the 8 bytes that hold ports and sequence."""
    n = end - q
    if n < 1:
        raise DropPacket(errors, "ICMP error without a quoted packet")
    version = mv[q] >> 4
    if version == 4 and msg.ip_version == 4:
        if n < 20:
            raise DropPacket(errors, "quoted IPv4 header truncated")
        vihl, _tos, _tot, _id, _frag, _ttl, proto, _sum, qsrc, qdst = _S_IP4.unpack_from(mv, q)
        ihl = (vihl & 15) << 2
        # RFC 792 / Linux icmp_unreach: the quote must hold the header and 64 bits of data.
        if ihl < 20 or n < ihl + 8:
            raise DropPacket(errors, "quoted packet shorter than its header and 8 bytes")
        l4 = q + ihl
    elif version == 6 and msg.ip_version == 6:
        if n < 40:
            raise DropPacket(errors, "quoted IPv6 header truncated")
        _vtcfl, _plen, proto, _hlim, qsrc, qdst = _S_IP6.unpack_from(mv, q)
        l4 = q + 40
        while proto in _IP6_EXT or proto == 44:
            if l4 + 8 > end:
                raise DropPacket(errors, "quoted extension header truncated")
            nxt = mv[l4]
            l4 += 8 if proto == 44 else (mv[l4 + 1] + 1) << 3
            proto = nxt
        if end < l4 + 8:
            raise DropPacket(errors, "quoted packet shorter than its header and 8 bytes")
    else:
        return            # not a packet of this family: nothing to deliver
    msg.quoted_protocol = proto
    msg.quoted_src = bytes(qsrc)
    msg.quoted_dst = bytes(qdst)
    msg.quoted_sport, msg.quoted_dport, msg.quoted_seq = _S_PORTS_SEQ.unpack_from(mv, l4)


def _ip_header(src: bytes, dst: bytes, proto: int, payload_len: int, ttl: int = 64) -> bytes:
    if len(src) == 4:
        tot = 20 + payload_len
        a_sum = _from_bytes(src, "big") + _from_bytes(dst, "big")
        r = (0x4500 + tot + ((ttl << 8) | proto) + a_sum) % 0xFFFF
        return _S_IP4.pack(0x45, 0, tot, 0, 0, ttl, proto, 0xFFFF - r if r else 0, src, dst)
    return _S_IP6.pack(0x60000000, payload_len, proto, ttl, src, dst)


def _icmp_packet(src: bytes, dst: bytes, icmp_type: int, code: int, info: int, body: bytes) -> bytes:
    return _finish_icmp(src, dst, _S_HDR.pack(icmp_type, code, 0, info) + body)


def build_echo_reply(request: IcmpMessage) -> TxPacket:
    """RFC 792 / RFC 4443 §4.2: the reply carries the request's identifier, sequence and data."""
    v6 = request.ip_version == 6
    body = bytes(request.body[4:])
    return TxPacket(_icmp_packet(request.dst, request.src, ICMPV6_ECHO_REPLY if v6 else ICMP_ECHOREPLY,
                                 0, request.info, body))


def build_icmp_error(*, src: bytes, dst: bytes, icmp_type: int, code: int, info: int,
                     quoted_src: bytes, quoted_dst: bytes, sport: int, dport: int, seq: int,
                     quoted_payload_len: int = 0) -> bytes:
    """An error from ``src`` (a router or the peer) to ``dst`` quoting a TCP segment we sent
    (``quoted_src`` -> ``quoted_dst``): its IP header and the first 8 TCP bytes, as packetdrill
    writes them (RFC 792; RFC 4443 §3 would allow more, 8 is what every stack must accept)."""
    quoted_len = 20 + quoted_payload_len
    quoted = _ip_header(quoted_src, quoted_dst, 6, quoted_len) + _S_PORTS_SEQ.pack(sport, dport, seq)
    return _icmp_packet(src, dst, icmp_type, code, info, quoted)


def error_for_packet(packet: bytes, *, mtu: int) -> bytes | None:
    """The "fragmentation needed" (RFC 1191 §4) or "packet too big" (RFC 4443 §3.2) message a
    router with next-hop ``mtu`` returns for ``packet``, sent from the packet's destination
    address and quoting the packet as RFC 792 (header + 8 bytes) and RFC 4443 (as much as fits
    in the IPv6 minimum MTU) ask.  None for bytes that are not an IP packet."""
    if len(packet) >= 40 and packet[0] >> 4 == 6:
        src, dst = packet[8:24], packet[24:40]
        body = _S_HDR.pack(ICMPV6_PKT_TOOBIG, 0, 0, mtu) + packet[:MIN_MTU6 - 48]
        return _finish_icmp(dst, src, body)
    if len(packet) >= 20 and packet[0] >> 4 == 4:
        ihl = (packet[0] & 15) << 2
        src, dst = packet[12:16], packet[16:20]
        body = _S_HDR.pack(ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED, 0, mtu & 0xFFFF) + packet[:ihl + 8]
        return _finish_icmp(dst, src, body)
    return None


def _finish_icmp(src: bytes, dst: bytes, msg: bytes) -> bytes:
    """Checksum ``msg`` (type, code, zero checksum, rest) and prefix the IP header."""
    v6 = len(src) == 16
    proto = IPPROTO_ICMPV6 if v6 else IPPROTO_ICMP
    total = _from_bytes(msg, "big") << (8 if len(msg) & 1 else 0)
    if v6:
        total += _from_bytes(src, "big") + _from_bytes(dst, "big") + proto + len(msg)
    csum = finish(total)
    return _ip_header(src, dst, proto, len(msg)) + msg[:2] + csum.to_bytes(2, "big") + msg[4:]


__all__ = ["IcmpMessage", "build_echo_reply", "build_icmp_error", "error_for_packet", "parse_icmp"]
