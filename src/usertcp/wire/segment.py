"""The parsed form of one inbound TCP/IP packet and the outbound packet type.

These two classes are the contract between the wire format, the TCP core and
the links. Both are per-packet objects, so they use ``__slots__``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

Buffer: TypeAlias = bytes | bytearray | memoryview

# TCP flags (RFC 9293 §3.1, RFC 3168, RFC 9768 AE bit in the reserved nibble).
FIN = 0x01
SYN = 0x02
RST = 0x04
PSH = 0x08
ACK = 0x10
URG = 0x20
ECE = 0x40
CWR = 0x80
AE = 0x100

# TCP option kinds.
OPT_EOL = 0
OPT_NOP = 1
OPT_MSS = 2
OPT_WSCALE = 3
OPT_SACK_PERM = 4
OPT_SACK = 5
OPT_TIMESTAMP = 8
OPT_MD5 = 19
OPT_AO = 29
OPT_FASTOPEN = 34
OPT_ACCECN0 = 172   # RFC 9768 §3.2.3 (layout in wire/accecn.py)
OPT_ACCECN1 = 174
OPT_EXP = 254
FASTOPEN_EXP_MAGIC = 0xF989

IPPROTO_TCP = 6

# The ECN field: the low two bits of the IPv4 TOS / IPv6 traffic class (RFC 3168 §5).
ECN_MASK = 0x3
ECN_NOT_ECT = 0x0
ECN_ECT1 = 0x1
ECN_ECT0 = 0x2
ECN_CE = 0x3


class DropPacket(Exception):
    """A packet that must be dropped; ``counter`` is the nstat name to increment."""

    __slots__ = ("counter", "reason")

    def __init__(self, counter: str, reason: str) -> None:
        super().__init__(f"{counter}: {reason}")
        self.counter = counter
        self.reason = reason


class NotTcp(DropPacket):
    """A valid IP packet for another protocol: a drop for TCP, and where its payload lies
    (``mv[offset:end]``) so that the stack can hand ICMP to its error handling."""

    __slots__ = ("dst", "end", "ip_version", "mv", "offset", "protocol", "src")

    def __init__(self, counter: str, protocol: int, ip_version: int, mv: memoryview, offset: int,
                 end: int, src: bytes, dst: bytes) -> None:
        super().__init__(counter, f"IP protocol {protocol}")
        self.protocol = protocol
        self.ip_version = ip_version
        self.mv = mv
        self.offset = offset
        self.end = end
        self.src = src
        self.dst = dst


class Segment:
    """One validated inbound TCP segment with its IP addressing.

    Addresses are packed bytes (4 or 16). ``tos`` is the IPv4 TOS byte or the IPv6 traffic
    class, ECN field included (``ecn``). ``payload``, ``tcp_header`` and
    ``raw_options`` are memoryviews into the buffer the packet arrived in: no copy.
    Absent options: ``mss``/``wscale``/``ts_val`` are -1, ``sack_blocks`` is (),
    ``fastopen`` is None (b"" means a cookie request), ``md5`` is None.
    """

    __slots__ = (
        "ip_version", "src", "dst", "tos", "ttl", "flow_label",
        "sport", "dport", "seq", "ack", "flags", "window", "urg_ptr", "data_offset",
        "mss", "wscale", "sack_permitted", "sack_blocks", "ts_val", "ts_ecr",
        "fastopen", "fastopen_exp", "md5", "ao", "accecn", "unknown_options",
        "payload", "tcp_header", "raw_options", "checksum_ok", "gso_size",
    )

    ip_version: int
    src: bytes
    dst: bytes
    tos: int
    ttl: int
    flow_label: int
    sport: int
    dport: int
    seq: int
    ack: int
    flags: int
    window: int
    urg_ptr: int
    data_offset: int          # TCP header length in bytes (doff * 4)
    mss: int
    wscale: int
    sack_permitted: bool
    sack_blocks: tuple[tuple[int, int], ...]
    ts_val: int               # -1 when the timestamp option is absent
    ts_ecr: int
    fastopen: bytes | None
    fastopen_exp: bool        # True when the cookie came in the experimental kind 254 form
    md5: memoryview | None    # the 16 digest bytes
    ao: memoryview | None     # TCP-AO option body, opaque
    accecn: memoryview | None  # the AccECN option (kind 172/174) whole, RFC 9768 §3.2.3
    unknown_options: int      # count of options with kinds we do not know (skipped)
    payload: memoryview
    tcp_header: memoryview    # TCP header including options (for MD5 and the drill runner)
    raw_options: memoryview
    checksum_ok: bool
    gso_size: int             # a GRO packet's segment size (Linux skb_shinfo()->gso_size), else 0

    @property
    def ecn(self) -> int:
        """The ECN codepoint of the IP header (``ECN_NOT_ECT`` .. ``ECN_CE``, RFC 3168 §5)."""
        return self.tos & ECN_MASK

    @property
    def seg_len(self) -> int:
        """RFC 9293 SEG.LEN: payload plus one for each of SYN and FIN."""
        return len(self.payload) + (self.flags & SYN and 1) + (self.flags & FIN and 1)


class TxPacket:
    """One outbound IP packet: a header (IP + TCP) and payload parts, not yet joined.

    Links join the parts only where bytes leave the process (``os.writev`` on TUN).
    ``gso_size`` > 0 asks a link with TSO to cut the payload into segments of that
    size; the header then carries the partial (pseudo-header) checksum when
    ``csum_partial`` is set.
    """

    __slots__ = ("header", "payload", "gso_size", "csum_partial")

    def __init__(self, header: bytes, payload: Sequence[Buffer] = (), gso_size: int = 0,
                 csum_partial: bool = False) -> None:
        self.header = header
        self.payload = payload
        self.gso_size = gso_size
        self.csum_partial = csum_partial

    def tobytes(self) -> bytes:
        if not self.payload:
            return self.header
        return b"".join((self.header, *self.payload))

    def __len__(self) -> int:
        return len(self.header) + sum(len(p) for p in self.payload)
