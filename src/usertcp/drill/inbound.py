"""Inbound ``<`` lines as packets: script values mapped to live ones, checksummed, MD5-signed.

packetdrill's run_packet.c maps a script's remote line to the live connection: ports of the
flow, ACK numbers and SACK blocks relative to our live ISN, TS ecr through the outbound TS
val the script saw; ICMP errors quote our segment the same way (new_icmp_packet).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable

from usertcp.drill.ast import IcmpInfo, PacketEvent
from usertcp.drill.flow import Flow
from usertcp.drill.outcome import ScriptFail, ScriptSkip
from usertcp.drill.render import ECN_BITS, flag_bits
from usertcp.wire import icmp as wire_icmp
from usertcp.wire.md5 import md5_digest_fixed
from usertcp.wire.packet import build_packet
from usertcp.wire.segment import ACK, SYN

__all__ = ["InboundBuilder", "encode_options", "icmp_type_code"]

_MAX_OPTION_BYTES = 40


def icmp_type_code(line: int, info: IcmpInfo, v6: bool) -> tuple[int, int]:
    """Type and code bytes from packetdrill's names (or ``type_N`` / ``code_N``) for a family."""
    types = wire_icmp.ICMP6_TYPES if v6 else wire_icmp.ICMP4_TYPES
    m = re.fullmatch(r"type_(\d+)", info.type)
    icmp_type = int(m.group(1)) if m else types.get(info.type, -1)
    if not 0 <= icmp_type <= 255:
        raise ScriptSkip(line, f"bad ICMP type {info.type} for IPv{6 if v6 else 4} (packetdrill rejects it)")
    if info.code is None:
        return icmp_type, 0  # packetdrill: a missing code means code 0
    m = re.fullmatch(r"code_(\d+)", info.code)
    if m:
        code = int(m.group(1))
    elif info.code.isdigit():
        code = int(info.code)
    elif v6:
        code = wire_icmp.ICMP6_CODES.get(icmp_type, {}).get(info.code, -1)
    else:
        code = wire_icmp.ICMP4_UNREACH_CODES.get(info.code, -1) if icmp_type == 3 else -1
    if not 0 <= code <= 255:
        # packetdrill stops with "bad ICMP code": a template script needs -D NAME=code.
        hint = f"; a template: define it with -D {info.code}=<code name>" if info.code.isupper() else ""
        raise ScriptSkip(
            line, f"bad ICMP code {info.code} for IPv{6 if v6 else 4} (packetdrill rejects it{hint})"
        )
    return icmp_type, code


def encode_options(
    ev: PacketEvent, sack_offset: int, map_ecr: Callable[[int], int] | None = None
) -> tuple[bytes, int | None]:
    """Option bytes of a script line and the offset of an ``md5 *`` digest to fill in.

    ``sack_offset`` maps SACK block edges to live numbers; ``map_ecr`` (inbound ACKs only)
    maps the TS ecr.  Unpadded: the caller pads inbound options.
    """
    out = bytearray()
    md5_at = None
    for opt in ev.options or []:
        name = opt.name
        if name == "nop":
            out.append(1)
        elif name == "eol":
            out.append(0)
        elif name == "mss":
            out += struct.pack("!BBH", 2, 4, opt.values[0])
        elif name == "wscale":
            out += struct.pack("!BBB", 3, 3, opt.values[0])
        elif name == "sackOK":
            out += b"\x04\x02"
        elif name == "sack":
            vals = [(v + sack_offset) & 0xFFFFFFFF for v in opt.values]
            out += struct.pack("!BB", 5, 2 + 4 * len(vals)) + b"".join(struct.pack("!I", v) for v in vals)
        elif name == "TS":
            val, ecr = opt.values
            if map_ecr is not None:
                ecr = map_ecr(ecr)
            out += struct.pack("!BBII", 8, 10, val & 0xFFFFFFFF, ecr & 0xFFFFFFFF)
        elif name == "md5" and opt.wildcard:
            md5_at = len(out) + 2
            out += b"\x13\x12" + bytes(16)
        elif name == "md5":
            data = opt.data or b""
            out += bytes((19, 2 + len(data))) + data
        elif name in ("ECN", "ECN1"):                # AccECN (RFC 9768 §3.2.3)
            data = opt.data or b""
            out += bytes((172 if name == "ECN" else 174, 2 + len(data))) + data
        elif name in ("FO", "FOEXP"):
            if opt.symbol is not None:
                raise ScriptSkip(ev.line, f"undefined cookie symbol {opt.symbol}")
            cookie = opt.data or b""
            out += (
                bytes((34, 2 + len(cookie))) + cookie
                if name == "FO"
                else (bytes((254, 4 + len(cookie))) + b"\xf9\x89" + cookie)
            )
        else:
            raise ScriptSkip(ev.line, f"TCP option {opt.raw or name} not emulated")
    if len(out) > _MAX_OPTION_BYTES:
        raise ScriptFail(ev.line, f"TCP options take {len(out)} bytes, more than {_MAX_OPTION_BYTES}")
    return bytes(out), md5_at


def _ip_fields(ev: PacketEvent) -> tuple[int, int, int]:
    """(tos, ttl, flow label) of an inbound line's ``[...]`` IP attributes."""
    if ev.ip is None:
        return 0, 64, 0
    tos = ev.ip.tos if ev.ip.tos is not None else 0
    if ev.ip.ecn is not None and ev.ip.ecn in ECN_BITS:
        tos = (tos & ~3) | ECN_BITS[ev.ip.ecn]
    ttl = ev.ip.ttl if ev.ip.ttl is not None else 64
    return tos, ttl, ev.ip.flowlabel or 0


class InboundBuilder:
    """Builds the packets of inbound lines for one run (its MD5 key and TS ecr rule)."""

    __slots__ = ("md5_key", "ts_ecr_scaled")

    def __init__(self, md5_key: bytes | None, ts_ecr_scaled: bool) -> None:
        self.md5_key = md5_key
        self.ts_ecr_scaled = ts_ecr_scaled

    def tcp_packet(self, ev: PacketEvent, flow: Flow) -> bytes:
        flags = flag_bits(ev.flags)
        syn = bool(flags & SYN)
        sport = ev.src_port if ev.src_port is not None else flow.remote_port
        dport = ev.dst_port if ev.dst_port is not None else flow.local_port
        ack = ((ev.ack or 0) + flow.local_offset(syn)) & 0xFFFFFFFF if flags & ACK else (ev.ack or 0)
        map_ecr = (lambda ecr: self._map_ecr(ev, flow, ecr)) if flags & ACK else None
        opts, md5_at = encode_options(ev, flow.local_offset(syn), map_ecr)
        opts += bytes(-len(opts) % 4)  # EOL padding, as the kernel would need
        payload = ev.payload if ev.payload is not None else bytes(ev.seq_len)
        if syn and flow.remote_isn is None:
            flow.remote_isn = ev.seq_start & 0xFFFFFFFF
        seq = (ev.seq_start + flow.remote_offset(syn)) & 0xFFFFFFFF
        window = ev.win if ev.win is not None else 0
        if md5_at is not None:
            opts = self._sign(ev, flow, opts, md5_at, (sport, dport, seq, ack, flags, window), payload)
        tos, ttl, flow_label = _ip_fields(ev)
        pkt = build_packet(
            src=flow.remote_ip, dst=flow.local_ip, sport=sport, dport=dport, seq=seq, ack=ack, flags=flags,
            window=window, urg_ptr=ev.urg or 0, options=opts, payload=(payload,) if payload else (),
            tos=tos, ttl=ttl, flow_label=flow_label,
        )  # fmt: skip
        return pkt.tobytes()

    def _sign(
        self,
        ev: PacketEvent,
        flow: Flow,
        opts: bytes,
        md5_at: int,
        header: tuple[int, int, int, int, int, int],
        payload: bytes,
    ) -> bytes:
        """Fill the ``md5 *`` digest (RFC 2385 §2.0) with ``--md5_key``."""
        if self.md5_key is None:
            raise ScriptSkip(ev.line, "md5 * needs --md5_key=KEY at the top of the script")
        sport, dport, seq, ack, flags, window = header
        thl = 20 + len(opts)
        fixed = struct.pack("!HHIIHHHH", sport, dport, seq, ack, (thl << 10) | flags, window, 0, ev.urg or 0)
        digest = md5_digest_fixed(
            self.md5_key, flow.remote_ip, flow.local_ip, fixed, thl + len(payload), (payload,)
        )
        return opts[:md5_at] + digest + opts[md5_at + 16 :]

    def icmp_packet(self, ev: PacketEvent, flow: Flow) -> bytes:
        """An ICMP error from the remote side quoting our segment (packetdrill new_icmp_packet):
        the quote's ports are the flow's, its sequence number is mapped like an outbound one."""
        info = ev.icmp
        assert info is not None
        v6 = len(flow.local_ip) == 16
        icmp_type, code = icmp_type_code(ev.line, info, v6)
        mtu = info.mtu or 0
        if (v6 and mtu and icmp_type != wire_icmp.ICMPV6_PKT_TOOBIG) or (
            not v6 and mtu and (icmp_type, code) != (wire_icmp.ICMP_DEST_UNREACH, wire_icmp.ICMP_FRAG_NEEDED)
        ):
            raise ScriptFail(ev.line, "ICMP mtu is only valid for unreachable frag_needed / packet_too_big")
        # packetdrill cannot see the quoted segment's flags and assumes it is no SYN.
        seq = (info.echoed_seq_start + flow.local_offset(False)) & 0xFFFFFFFF
        return wire_icmp.build_icmp_error(
            src=flow.remote_ip,
            dst=flow.local_ip,
            icmp_type=icmp_type,
            code=code,
            info=mtu,
            quoted_src=flow.local_ip,
            quoted_dst=flow.remote_ip,
            sport=flow.local_port,
            dport=flow.remote_port,
            seq=seq,
            quoted_payload_len=info.echoed_len,
        )

    def _map_ecr(self, ev: PacketEvent, flow: Flow, ecr: int) -> int:
        live = flow.ts_map.get(ecr)
        if live is not None:
            return live
        if self.ts_ecr_scaled and flow.first_ts is not None:
            return (ecr - flow.first_ts[0] + flow.first_ts[1]) & 0xFFFFFFFF
        if flow.first_ts is None and ecr == 0:
            return 0
        raise ScriptFail(
            ev.line,
            f"unable to infer live TS ecr for script TS ecr {ecr}: no matching or preceding outbound TS val",
        )
