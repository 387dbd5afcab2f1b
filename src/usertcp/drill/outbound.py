"""Outbound ``>`` lines: the stack's segments compared with the script (packetdrill's strict check).

All flags, seq, ack, payload length and urg; the window only when written; IP tos/ecn/ttl only
when written; options kind by kind in order and byte for byte, except TS val (only with
``--tcp_ts_tick_usecs``) and ``md5 *``; ``<...>`` = any options, no list = no options.  We also
check TS ecr (the peer's TS val is literal, so the ecr is too), which packetdrill leaves out.
Consecutive segments are aggregated up to the expected payload (verify_packet_fragments).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from usertcp.drill import timing
from usertcp.drill.ast import PacketEvent
from usertcp.drill.flow import Flow
from usertcp.drill.inbound import encode_options
from usertcp.drill.outcome import ScriptFail, ScriptSkip
from usertcp.drill.render import (
    ECN_BITS,
    flag_bits,
    fmt_expected,
    fmt_flags,
    fmt_live,
    fmt_opts,
    fmt_script_opts,
    parse_options,
)
from usertcp.wire.md5 import verify_segment_md5
from usertcp.wire.segment import ACK, CWR, ECE, FIN, PSH, SYN, Segment

__all__ = ["OutboundChecker", "fragment_mismatch"]

Options = list[tuple[int, bytes]]


def fragment_mismatch(prev: Segment, seg: Segment, sniffed: int, expected: int) -> str | None:
    """packetdrill's verify_packet_fragments: same header flags (FIN/PSH/CWR aside), contiguous
    sequence, and every fragment but the last as long as the previous one."""
    mask = ~(FIN | PSH | CWR)
    if prev.flags & mask != seg.flags & mask:
        return f"flags differ between segments ({fmt_flags(prev.flags)} then {fmt_flags(seg.flags)})"
    if seg.seq != (prev.seq + len(prev.payload)) & 0xFFFFFFFF:
        return f"segments are not contiguous (seq {prev.seq}+{len(prev.payload)} then {seg.seq})"
    if sniffed + len(seg.payload) < expected and len(seg.payload) != len(prev.payload):
        return (
            f"fragment payload: expected {len(prev.payload)} bytes vs actual {len(seg.payload)} bytes; "
            f"total payload: expected {expected} bytes vs actual {sniffed + len(seg.payload)} bytes"
        )
    return None


@dataclass
class _Seen:
    """The aggregate of outbound segments for one line, in script space."""

    first: Segment
    last: Segment
    sent_at: float
    seq: int
    flags: int
    length: int
    payload: bytes
    opts: Options
    ack: int
    sack_off: int
    ts: tuple[int, int] | None

    def text(self, payload: bool) -> str:
        return fmt_live(self.last, seq=self.seq, length=self.length, flags=self.flags, ts=self.ts,
                        opts=self.opts, ack=self.ack, sack_off=self.sack_off,
                        payload=self.payload if payload else None)  # fmt: skip


def _learn_ts(ev: PacketEvent, flow: Flow, opts: Options) -> tuple[int, int] | None:
    """TS val: learn the baseline, record the mapping, return (val, ecr) in script space."""
    script_ts = next((o for o in ev.options or [] if o.name == "TS"), None)
    live_ts = next((o for o in opts if o[0] == 8 and len(o[1]) == 8), None)
    if live_ts is None:
        return None
    live_val, live_ecr = struct.unpack("!II", live_ts[1])
    if script_ts is not None:
        flow.ts_map[script_ts.values[0] & 0xFFFFFFFF] = live_val
        if flow.first_ts is None:
            flow.first_ts = (script_ts.values[0], live_val)
    return flow.script_ts(live_val), live_ecr


def _ip_problems(ev: PacketEvent, last: Segment) -> list[str]:
    problems: list[str] = []
    if ev.ip is None:
        return problems
    if ev.ip.ecn is not None and ev.ip.ecn in ECN_BITS and last.tos & 3 != ECN_BITS[ev.ip.ecn]:
        problems.append(f"ECN field (expected {ev.ip.ecn}, actual {last.tos & 3})")
    if ev.ip.ecn == "ect01" and last.tos & 3 not in (1, 2):
        # packetdrill TOS_CHECK_ECN_ECT01: an outbound packet may carry either ECT.
        problems.append(f"ECN field (expected ect0 or ect1, actual {last.tos & 3})")
    if ev.ip.tos is not None and last.tos != ev.ip.tos:
        problems.append(f"tos (expected {ev.ip.tos:#x}, actual {last.tos:#x})")
    if ev.ip.ttl is not None and last.ttl != ev.ip.ttl:
        problems.append(f"ttl (expected {ev.ip.ttl}, actual {last.ttl})")
    return problems


def _header_problems(ev: PacketEvent, seen: _Seen) -> list[str]:
    problems: list[str] = []
    want_flags = flag_bits(ev.flags)
    if seen.flags != want_flags:
        problems.append(f"flags (expected {fmt_flags(want_flags)}, actual {fmt_flags(seen.flags)})")
    if seen.seq != ev.seq_start & 0xFFFFFFFF:
        problems.append(f"seq (expected {ev.seq_start}, actual {seen.seq})")
    if seen.length != ev.seq_len:
        problems.append(f"payload length (expected {ev.seq_len}, actual {seen.length})")
    want_ack = (ev.ack or 0) & 0xFFFFFFFF
    if seen.ack != want_ack:
        problems.append(f"ack (expected {want_ack}, actual {seen.ack})")
    if ev.win is not None and seen.last.window != ev.win:
        problems.append(f"win (expected {ev.win}, actual {seen.last.window})")
    if (ev.urg or 0) != seen.last.urg_ptr:
        problems.append(f"urg (expected {ev.urg or 0}, actual {seen.last.urg_ptr})")
    return problems + _ip_problems(ev, seen.last)


class OutboundChecker:
    """Checks outbound lines for one run (its tolerances, TS tick and MD5 key)."""

    __slots__ = ("md5_key", "tol_pct", "tol_us", "ts_tick")

    def __init__(self, tol_us: int, tol_pct: float, ts_tick: int, md5_key: bytes | None) -> None:
        self.tol_us = tol_us
        self.tol_pct = tol_pct
        self.ts_tick = ts_tick
        self.md5_key = md5_key

    def verify(
        self,
        ev: PacketEvent,
        exp: timing.Expected,
        flow: Flow,
        segs: list[tuple[float, Segment]],
        last_expected: float | None,
    ) -> None:
        """Fail unless the aggregate ``segs`` matches the line ``ev`` (headers, options, time)."""
        seen = self._seen(ev, flow, segs)
        problems = _header_problems(ev, seen)
        if ev.options is not None:
            problems += self._compare_options(ev, flow, seen.opts, seen.last, exp)
        if ev.payload is not None and seen.payload != ev.payload:
            problems.append(f"payload (expected {ev.payload!r}, actual {seen.payload!r})")
        if problems:
            raise ScriptFail(
                ev.line,
                "outbound packet differs: " + "; ".join(problems),
                [
                    f"expected  {fmt_expected(ev)}",
                    f"actual    {seen.text(ev.payload is not None)}",
                    "differs:  " + ", ".join(p.split(" (")[0] for p in problems),
                ],
            )
        err = timing.check_time(
            ev, exp.start, exp.end, seen.sent_at, last_expected=last_expected, anchor=exp.anchor,
            tolerance_usecs=self.tol_us, tolerance_percent=self.tol_pct,
        )  # fmt: skip
        if err:
            sent = f"actual    {seen.text(False)}  (sent at {seen.sent_at:.6f} s)"
            raise ScriptFail(ev.line, err, [f"expected  {fmt_expected(ev)}", sent])

    def _seen(self, ev: PacketEvent, flow: Flow, segs: list[tuple[float, Segment]]) -> _Seen:
        first = segs[0][1]
        last = segs[-1][1]
        if first.flags & SYN and flow.live_local_isn is None:
            flow.live_local_isn = first.seq
            flow.script_local_isn = ev.seq_start
        seq = (first.seq - flow.local_offset(bool(first.flags & SYN))) & 0xFFFFFFFF
        flags = last.flags | (ECE & first.flags) if len(segs) > 1 else first.flags
        payload = b"".join(bytes(s.payload) for _, s in segs)
        opts = parse_options(bytes(last.raw_options))
        roff = flow.remote_offset(bool(last.flags & SYN))
        ack = (last.ack - roff) & 0xFFFFFFFF if last.flags & ACK else last.ack
        return _Seen(first, last, segs[0][0], seq, flags, len(payload), payload, opts, ack, roff,
                     _learn_ts(ev, flow, opts))  # fmt: skip

    def _compare_options(
        self, ev: PacketEvent, flow: Flow, actual: Options, seg: Segment, exp: timing.Expected
    ) -> list[str]:
        script = ev.options or []
        if len(script) != len(actual) or any(
            (o.kind if o.kind is not None else -1) != a[0] for o, a in zip(script, actual, strict=False)
        ):
            shown = fmt_opts(actual, sack_off=flow.remote_offset(bool(seg.flags & SYN)))
            return [
                f"options (expected <{fmt_script_opts(script)}>, actual <{shown}>)"
                if script
                else f"options (expected none, actual <{shown}>)"
            ]
        problems: list[str] = []
        for opt, (kind, data) in zip(script, actual, strict=True):
            if opt.name in ("nop", "eol"):
                continue
            if opt.name == "TS":
                problems += self._ts_problems(flow, opt.values, data, exp)
            elif opt.name == "md5" and opt.wildcard:
                if self.md5_key is None:
                    raise ScriptSkip(ev.line, "md5 * needs --md5_key=KEY at the top of the script")
                if not verify_segment_md5(seg, self.md5_key):
                    problems.append("md5 (the signature does not verify with --md5_key)")
            else:
                one = PacketEvent(line=ev.line, time=ev.time, direction=">", options=[opt])
                want, _ = encode_options(one, flow.remote_offset("S" in ev.flags))
                if want[2:] != data or want[1:2] != bytes((len(data) + 2,)):
                    problems.append(
                        f"{opt.name} (expected {opt.raw or opt.name}, actual {fmt_opts([(kind, data)])})"
                    )
        return problems

    def _ts_problems(
        self, flow: Flow, script_vals: tuple[int, ...], data: bytes, exp: timing.Expected
    ) -> list[str]:
        val, ecr = struct.unpack("!II", data) if len(data) == 8 else (0, 0)
        script_val, script_ecr = script_vals
        problems: list[str] = []
        if self.ts_tick and flow.first_ts is not None:
            mapped = flow.script_ts(val)
            tol = max(self.tol_us, int(self.tol_pct / 100.0 * round(exp.start * 1e6)))
            dev = abs(((mapped - script_val + 0x80000000) & 0xFFFFFFFF) - 0x80000000)
            if dev * self.ts_tick > tol:
                problems.append(f"TS val (expected {script_val}, actual {mapped}; tolerance {tol} us)")
        if ecr != script_ecr & 0xFFFFFFFF:
            problems.append(f"TS ecr (expected {script_ecr}, actual {ecr})")
        return problems
