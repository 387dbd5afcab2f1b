"""Martian addresses: packets no real peer can send, dropped before TCP or ICMP answer.

A SYN-ACK, a reset or an echo reply to such a source goes to a broadcast or multicast group,
to nobody, or back to ourselves (a reflector, or the LAND attack). Linux drops these in
routing (ip_route_input_slow's ``martian_source`` and ``martian_destination``, counted in
/proc/net/stat/rt_cache ``in_martian_src``/``in_martian_dst``) and, for IPv6, in ip6_rcv_core
(RFC 4291 §2.5.3, §2.7: Ip6InHdrErrors). RFC 1122 §3.2.1.3 lists the IPv4 forms a source may
not take. Each drop is counted under the reason Linux gives it (``SKB_DROP_REASON_*``).

Traffic that stays on a loopback path (loopback source and destination) is exempt, as Linux
only rejects loopback addresses arriving on other devices (IN_DEV_ROUTE_LOCALNET off).
"""

from __future__ import annotations

from collections.abc import Container

V4_LIMITED_BROADCAST = b"\xff\xff\xff\xff"
V6_UNSPECIFIED = bytes(16)
V6_LOOPBACK = bytes(15) + b"\x01"
V6_V4MAPPED_PREFIX = bytes(10) + b"\xff\xff"       # ::ffff:0:0/96 (RFC 4291 §2.5.5.2)

# Linux's drop reasons (include/net/dropreason-core.h).
INVALID_SOURCE = "SKB_DROP_REASON_IP_INVALID_SOURCE"   # multicast, broadcast, 0/8 source
LOCALNET = "SKB_DROP_REASON_IP_LOCALNET"               # 127/8 off the loopback device
LOCAL_SOURCE = "SKB_DROP_REASON_IP_LOCAL_SOURCE"       # our own address as source
INHDR = "SKB_DROP_REASON_IP_INHDR"                     # ip6_rcv_core's header errors


def martian_reason(src: bytes, dst: bytes, own: Container[bytes],
                   tcp: bool = True) -> tuple[str, bool] | None:
    """Why a packet from ``src`` to ``dst`` (packed addresses, ``dst`` one of ``own``) must be
    dropped, as (Linux drop reason, True if it is the source that is martian); None if fine.

    IPv4 (ip_route_input_slow, fib_validate_source): a multicast source (224/4), the limited
    broadcast 255.255.255.255 or "this network" 0/8 (INVALID_SOURCE); a loopback 127/8
    source or destination while the other end is not loopback (LOCALNET, martian source or
    destination); one of our own addresses as source towards a non-loopback destination
    (accept_local off: only the loopback device may carry those, so such a packet is
    spoofed, the LAND attack among them: LOCAL_SOURCE).

    IPv6 (ip6_rcv_core, all IP_INHDR with Ip6InHdrErrors): a multicast source (ff00::/8,
    RFC 4291 §2.7); the loopback ::1 as source or destination unless both are (§2.5.3); one
    of our own addresses towards a non-loopback destination, as for IPv4; the unspecified
    :: (no reply can reach it: Linux finds no route back, we drop it here). For TCP also an
    IPv4-mapped source ::ffff:a.b.c.d (tcp_v6_conn_request refuses those with
    Ip6InHdrErrors: mapped addresses never appear on an IPv6 wire).
    """
    if len(src) == 4:
        first = src[0]
        if first == 0 or 224 <= first < 240 or src == V4_LIMITED_BROADCAST:
            return INVALID_SOURCE, True
        if first == 127:
            return None if dst[0] == 127 else (LOCALNET, True)
        if dst[0] == 127:
            return LOCALNET, False
        if src in own:
            return LOCAL_SOURCE, True
        return None
    if src[0] == 0xFF:
        return INHDR, True
    if src == V6_LOOPBACK or dst == V6_LOOPBACK:
        return None if src == dst else (INHDR, src == V6_LOOPBACK)
    if src in own or src == V6_UNSPECIFIED or (tcp and src[:12] == V6_V4MAPPED_PREFIX):
        return INHDR, True
    return None

