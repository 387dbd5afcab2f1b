"""The offloads of packetdrill's TUN device, and how outbound packets are compared under them.

packetdrill's ``tun0`` offers TSO (TUN_F_TSO4/TSO6): the kernel hands it one TCP packet per
skb it transmits (tcp_write_xmit: an skb, or its head cut by tso_fragment), and a script line
such as ``> P. 1:10001(10000)`` is matched against those packets (several in a row when the
kernel sends several: packetdrill aggregates them).  ``ethtool -K tun0 tso off gso off`` turns
the device's segmentation off: TCP still builds GSO skbs (sk_setup_caps forces NETIF_F_GSO for
TCP), which software GSO cuts into MSS packets before the device, so the script is compared
packet by packet (PSH only on the last packet of each skb).

The runner gives its stack the same link: GSO packets up to ``TSO_GSO_MAX_SIZE`` with offloads
on (compared per skb), MSS packets with them off (per packet).
"""

from __future__ import annotations

import re

from usertcp.wire.segment import TxPacket

# Linux GSO_LEGACY_MAX_SIZE: sk_gso_max_size of a TSO device.
TSO_GSO_MAX_SIZE = 65536
# Stack.gso_max_size for a link without TSO/GSO (ethtool -K gso off): packets of one MSS.
NO_GSO = -1

ETHTOOL_OFFLOADS_OFF = re.compile(r"^ethtool\s+-K\s+\S+(\s+(tso|gso|gro)\s+off)+$")


def link_gso_max_size(offload: bool) -> int:
    """What the drill stack's link segments for it: TSO packets, or nothing at all."""
    return TSO_GSO_MAX_SIZE if offload else NO_GSO


def outbound_problem(pkt: TxPacket, offload: bool) -> str | None:
    """Why the stack must not have emitted ``pkt`` on this link (None: it may)."""
    if pkt.gso_size and not offload:
        return "the stack emitted a GSO packet on a link with TSO and GSO off"
    return None
