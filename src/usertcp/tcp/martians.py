"""Martian source addresses: packets no real peer can send, dropped before TCP or ICMP answer.

A SYN-ACK, a reset or an echo reply to such a source goes to a broadcast or multicast group,
to nobody, or back to ourselves (a reflector, or the LAND attack). Linux drops these in
routing (ip_route_input_slow's ``martian_source``, counted in /proc/net/stat/rt_cache
``in_martian_src``) and, for IPv6, in ip6_rcv_core (RFC 4291 §2.5.3, §2.7: counted as
Ip6InHdrErrors). RFC 1122 §3.2.1.3 lists the IPv4 forms a source may not take.

Traffic that stays on a loopback path (a loopback destination) is exempt, as Linux only
rejects loopback sources arriving on other devices (IN_DEV_ROUTE_LOCALNET off).
"""

from __future__ import annotations

from collections.abc import Container

V4_LIMITED_BROADCAST = b"\xff\xff\xff\xff"
V6_UNSPECIFIED = bytes(16)
V6_LOOPBACK = bytes(15) + b"\x01"


def martian_source(src: bytes, dst: bytes, own: Container[bytes]) -> bool:
    """True if a packet from ``src`` to ``dst`` (packed addresses) must be dropped.

    IPv4 (ip_route_input_slow, fib_validate_source): a multicast source (224/4), the limited
    broadcast 255.255.255.255, "this network" 0/8, loopback 127/8 towards a non-loopback
    destination, or one of our own addresses (accept_local off: only the loopback device
    may carry those, so a packet to a non-loopback address with our source is spoofed, the
    LAND attack among them). IPv6 (ip6_rcv_core): a multicast source (ff00::/8), the
    loopback ::1 towards another destination, the unspecified :: (nothing can answer it),
    or one of our own addresses towards a non-loopback destination.
    """
    if len(src) == 4:
        first = src[0]
        if first == 0 or 224 <= first < 240 or src == V4_LIMITED_BROADCAST:
            return True
        if first == 127 or src in own:
            return dst[0] != 127
        return False
    if src[0] == 0xFF or src == V6_UNSPECIFIED:
        return True
    if src == V6_LOOPBACK or src in own:
        return dst != V6_LOOPBACK
    return False
