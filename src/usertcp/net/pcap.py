"""Classic pcap files of raw IP packets (LINKTYPE_RAW, like a TUN device).

With checksum offload (``usertcp serve --offload``) the TCP checksum field of a packet
holds only the pseudo-header sum (CHECKSUM_PARTIAL): the kernel or the stack finishes it
later. A capture is for people, and Wireshark flags every such packet, so a
``PcapWriter(..., complete_checksums=True)`` writes the finished checksum instead, as
``tcpdump`` shows the kernel's own packets.
"""

from __future__ import annotations

import os
import struct
import threading
from types import TracebackType
from typing import BinaryIO

from usertcp.wire.checksum import internet_checksum, pseudo_header_sum
from usertcp.wire.packet import parse_packet
from usertcp.wire.segment import DropPacket, TxPacket

LINKTYPE_RAW = 101          # raw IPv4/IPv6, no link-layer header
MAGIC_USEC = 0xA1B2C3D4
MAGIC_NSEC = 0xA1B23C4D

_GLOBAL = struct.Struct("<IHHiIII")
_RECORD = struct.Struct("<IIII")
_U16 = struct.Struct("!H")
TCP_PROTO = 6
TCP_CHECKSUM_OFFSET = 16    # RFC 9293 §3.1: the checksum is the TCP header's 9th 16-bit word


def complete_tcp_checksum(packet: bytes) -> bytes:
    """``packet`` with its TCP checksum computed over the whole segment (a copy), or
    ``packet`` itself when it is not a TCP packet this can finish (then left as it is)."""
    try:
        seg = parse_packet(packet, verify_checksum=False)
    except DropPacket:
        return packet
    tcp_len = len(seg.tcp_header) + len(seg.payload)
    start = len(packet) - tcp_len     # a TUN packet carries no link padding after the segment
    buf = bytearray(packet)
    _U16.pack_into(buf, start + TCP_CHECKSUM_OFFSET, 0)
    pseudo = pseudo_header_sum(seg.src, seg.dst, TCP_PROTO, tcp_len)
    csum = internet_checksum([memoryview(buf)[start:]], pseudo)
    _U16.pack_into(buf, start + TCP_CHECKSUM_OFFSET, csum)
    done = bytes(buf)
    try:        # the parser checks the result: padding or an odd layout keeps the original
        parse_packet(done)
    except DropPacket:
        return packet
    return done


class PcapWriter:
    """Writes packets to a classic pcap file. ``write`` is thread-safe.

    A path is opened (and closed) by the writer; a file object passed in is
    flushed but left open on ``close()``. ``complete_checksums`` finishes the TCP checksum
    of every packet (see the module docstring): for captures of an offloading link only,
    since it would also hide a genuinely bad checksum.
    """

    def __init__(self, target: str | os.PathLike[str] | BinaryIO, *, nanosecond: bool = True,
                 snaplen: int = 262144, complete_checksums: bool = False) -> None:
        if isinstance(target, (str, os.PathLike)):
            self._file: BinaryIO = open(target, "wb")  # noqa: SIM115 - closed in close()
            self._owns = True
        else:
            self._file = target
            self._owns = False
        self.nanosecond = nanosecond
        self.snaplen = snaplen
        self.complete_checksums = complete_checksums
        self._scale = 1_000_000_000 if nanosecond else 1_000_000
        self._lock = threading.Lock()
        self._closed = False
        self.count = 0
        self._file.write(_GLOBAL.pack(MAGIC_NSEC if nanosecond else MAGIC_USEC, 2, 4, 0, 0, snaplen,
                                      LINKTYPE_RAW))

    def write(self, packet: bytes | bytearray | memoryview | TxPacket, timestamp: float) -> None:
        data = packet.tobytes() if isinstance(packet, TxPacket) else bytes(packet)
        if self.complete_checksums:
            data = complete_tcp_checksum(data)
        # Integer ticks first so the fraction can never round up to a full second.
        sec, frac = divmod(round(timestamp * self._scale), self._scale)
        incl = min(len(data), self.snaplen)
        rec = _RECORD.pack(sec & 0xFFFFFFFF, frac, incl, len(data))
        with self._lock:
            if self._closed:
                raise ValueError("write to a closed PcapWriter")
            self._file.write(rec)
            self._file.write(data if incl == len(data) else data[:incl])
            self.count += 1

    def flush(self) -> None:
        with self._lock:
            if not self._closed:
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._file.flush()
            if self._owns:
                self._file.close()

    def __enter__(self) -> PcapWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def read_pcap(source: str | os.PathLike[str] | BinaryIO) -> list[tuple[float, bytes]]:
    """Every ``(timestamp, captured bytes)`` in a classic pcap (µs or ns, either byte order)."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            raw = f.read()
    else:
        raw = source.read()
    if len(raw) < _GLOBAL.size:
        raise ValueError("not a pcap file: too short")
    for order in ("<", ">"):
        (magic,) = struct.unpack_from(order + "I", raw)
        if magic in (MAGIC_USEC, MAGIC_NSEC):
            break
    else:
        raise ValueError(f"not a classic pcap file (magic {raw[:4].hex()})")
    scale = 1e9 if magic == MAGIC_NSEC else 1e6
    rec = struct.Struct(order + "IIII")
    out: list[tuple[float, bytes]] = []
    off = _GLOBAL.size
    end = len(raw)
    while off + rec.size <= end:
        sec, frac, incl, _orig = rec.unpack_from(raw, off)
        off += rec.size
        if off + incl > end:
            raise ValueError(f"truncated pcap record at offset {off - rec.size}")
        out.append((sec + frac / scale, raw[off:off + incl]))
        off += incl
    if off != end:
        raise ValueError(f"trailing garbage at offset {off}")
    return out
