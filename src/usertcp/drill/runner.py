"""Run a packetdrill script against a fresh usertcp stack, in virtual time.

Model (packetdrill's run.c / run_packet.c / run_system_call.c semantics, our own code):

* **Clock.** One virtual clock (seconds, script time 0 = the first event).  Waiting means
  running the stack's timers in order up to the target time; nothing else ever advances it.
* **Inbound** ``<`` lines are built from the script (script->live mapping of ports, ack, SACK
  blocks and TS ecr; checksummed; MD5-signed for ``md5 *``) and handed to ``stack.receive`` at
  their time.  **Outbound** ``>`` lines take the stack's next packets (time-stamped when the
  stack emitted them; we wait up to 2 s past the expected time), aggregate consecutive segments
  up to the expected payload unless ``--strict_segments``, map live->script and compare.
* **Syscalls** go through :mod:`usertcp.drill.syscalls`.  A call marked ``+a...b`` that would
  block stays *pending* (its generator is retried after every packet and timer) while the later
  events run; it must return at ``b`` within the tolerance.  A new syscall first waits for the
  pending one, as packetdrill's single syscall thread does.  An unmarked call that would block
  fails the script.
* **Sequence numbers**: the local ISN is learned from the first outbound SYN / SYN-ACK (script
  and live); remote sequence numbers are literal.  TS val: the first outbound TS val pair is the
  baseline; inbound TS ecr is mapped back through the outbound val seen for that script value.
* **Checks** of an outbound line (packetdrill's strict header check): all flags, seq, ack,
  payload length, urg, window only when written, IP tos/ecn/ttl only when written; options
  kind by kind in order and byte for byte, except TS val (only with ``--tcp_ts_tick_usecs``)
  and ``md5 *``; ``<...>`` = any options, no list = no options.  We also check TS ecr (the
  peer's TS val is literal, so the ecr is too), which packetdrill leaves out.

Extensions (our own scripts; packetdrill has no such syntax):

* ``payload "C text"`` on a packet line: inbound bytes to send / outbound bytes to compare.
* a string buffer in ``write``/``send``/``sendto``/``sendmsg`` iovecs is the data sent (padded
  with zeros or cut to the length argument); in ``read``/``recv``/``recvmsg`` it is the data
  the call must return (``"prefix"...`` checks a prefix).
* ``--md5_key=KEY`` (``0x``-prefixed hex, else the text): ``md5 *`` options are signed
  (inbound) / verified (outbound) with it, and ``setsockopt(fd, SOL_TCP, TCP_MD5SIG, ..., ...)``
  installs it for the remote address (a string value is parsed as ``struct tcp_md5sig``).
"""

from __future__ import annotations

import ipaddress
import re
import struct
import textwrap
import time
import traceback
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from usertcp.drill import timing
from usertcp.drill.ast import (
    CodeEvent,
    CommandEvent,
    EllipsisExpr,
    Event,
    IcmpInfo,
    PacketEvent,
    Script,
    Symbol,
    SyscallEvent,
    TcpOption,
    walk,
)
from usertcp.drill.defaults import (
    ADDRESS_DEFAULTS,
    CODE_CONSTANTS,
    DEFAULT_DEFINES,
    DEFAULT_PORT,
    ERRNO,
    KNOWN_OPTIONS,
    STRERROR,
    UNSUPPORTED_SYMBOLS,
)
from usertcp.drill.lexer import ScriptSyntaxError
from usertcp.drill.offload import outbound_problem
from usertcp.drill.parser import parse_file
from usertcp.drill.profile import CommandError, Environment, Unsupported, linux_config
from usertcp.drill.syscalls import (
    SUPPORTED_SOCKOPTS,
    SUPPORTED_SYSCALLS,
    Mismatch,
    Sock,
    SyscallGen,
    Syscalls,
    SysError,
    value,
)
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import Connection
from usertcp.tcp.stack import Stack, pack_ip
from usertcp.wire import icmp as wire_icmp
from usertcp.wire.md5 import md5_digest_fixed, verify_segment_md5
from usertcp.wire.packet import build_packet, parse_packet
from usertcp.wire.segment import ACK, AE, CWR, ECE, FIN, PSH, RST, SYN, URG, DropPacket, Segment

__all__ = ["PACKET_TIMEOUT", "RunOptions", "ScriptResult", "Status", "run_file", "run_script"]

Status = Literal["passed", "failed", "skipped"]
PACKET_TIMEOUT = 2.0  # seconds an outbound line waits past its expected time
REMOTE_PORT_BASE = 48000  # ports of the scripted peer (packetdrill picks ephemeral ones)
_MAX_TIMER_STEPS = 200_000

_FLAG_BITS = {"F": FIN, "S": SYN, "R": RST, "P": PSH, ".": ACK, "U": URG, "E": ECE, "W": CWR, "A": AE}
_ECN_BITS = {"noecn": 0, "ect1": 1, "ect0": 2, "ce": 3}
_SUPPORTED_OPTIONS = {
    "ip_version", "local_ip", "remote_ip", "gateway_ip", "netmask_ip", "bind_port", "connect_port",
    "tolerance_usecs", "tolerance_percent", "tcp_ts_tick_usecs", "tcp_ts_ecr_scaled", "strict_segments",
    "mtu", "define", "verbose", "debug", "dry_run", "md5_key", "non_fatal", "init_scripts",
}  # fmt: skip


# ----------------------------------------------------------------------------- results


@dataclass
class RunOptions:
    ip_version: str = "ipv4"  # "ipv4" | "ipv6"
    defines: dict[str, str] = field(default_factory=dict)
    tolerance_usecs: int | None = None  # overrides the script's --tolerance_usecs
    verbose: bool = False


@dataclass
class ScriptResult:
    path: str
    status: Status
    line: int | None = None
    reason: str = ""
    ip_version: str = "ipv4"
    details: list[str] = field(default_factory=list)  # diff / log lines
    virtual_time: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "status": self.status, "line": self.line, "reason": self.reason,
                "ip_version": self.ip_version}  # fmt: skip


class _Fail(Exception):
    def __init__(self, line: int | None, reason: str, details: list[str] | None = None) -> None:
        super().__init__(reason)
        self.line = line
        self.reason = reason
        self.details = details or []


class _Skip(Exception):
    def __init__(self, line: int | None, reason: str) -> None:
        super().__init__(reason)
        self.line = line
        self.reason = reason


def _icmp_type_code(line: int, info: IcmpInfo, v6: bool) -> tuple[int, int]:
    """Type and code bytes from packetdrill's names (or ``type_N`` / ``code_N``) for a family."""
    types = wire_icmp.ICMP6_TYPES if v6 else wire_icmp.ICMP4_TYPES
    m = re.fullmatch(r"type_(\d+)", info.type)
    icmp_type = int(m.group(1)) if m else types.get(info.type, -1)
    if not 0 <= icmp_type <= 255:
        raise _Skip(line, f"bad ICMP type {info.type} for IPv{6 if v6 else 4} (packetdrill rejects it)")
    if info.code is None:
        return icmp_type, 0            # packetdrill: a missing code means code 0
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
        raise _Skip(line, f"bad ICMP code {info.code} for IPv{6 if v6 else 4} (packetdrill rejects it{hint})")
    return icmp_type, code


# ----------------------------------------------------------------------------- flows


@dataclass(eq=False)
class _Flow:
    """One connection as the script sees it (packetdrill's struct socket)."""

    local_ip: bytes
    local_port: int
    remote_ip: bytes
    remote_port: int
    script_local_isn: int = 0
    live_local_isn: int | None = None
    remote_isn: int | None = None  # the peer's ISN: non-SYN remote sequence numbers are relative to it
    ts_map: dict[int, int] = field(default_factory=dict)  # script TS val -> live TS val
    first_ts: tuple[int, int] | None = None  # (script, live) baseline
    conn: Connection | None = None

    @property
    def key(self) -> tuple[int, bytes, int]:
        return (self.local_port, self.remote_ip, self.remote_port)

    def local_offset(self, syn: bool) -> int:
        """live = script + offset, for our (local) sequence space.

        packetdrill's local_seq_script_to_live_offset: only SYN segments map the script's own
        ISN (the seq of its ``> S``/``> S.`` line) onto the live one; every other segment's
        numbers are relative to the live ISN, whatever ISN the script wrote.
        """
        script = self.script_local_isn if syn else 0
        if self.live_local_isn is None:
            if self.conn is not None:
                return (self.conn.iss - script) & 0xFFFFFFFF
            return 0
        return (self.live_local_isn - script) & 0xFFFFFFFF

    def remote_offset(self, syn: bool) -> int:
        """live = script + offset, for the peer's sequence space (literal in SYN segments)."""
        return 0 if syn or self.remote_isn is None else self.remote_isn


@dataclass
class _Pending:
    event: SyscallEvent
    expected: timing.Expected
    gen: SyscallGen
    wake: float | None


# ----------------------------------------------------------------------------- the runner


class _Runner:
    def __init__(self, script: Script, opts: RunOptions) -> None:
        self.script = script
        self.opts = opts
        sopts = script.options
        self.ip_version = opts.ip_version
        if sopts.get("ip_version") in ("ipv4", "ipv6"):
            self.ip_version = sopts["ip_version"]
        addr = ADDRESS_DEFAULTS[self.ip_version]
        self.local_ip = sopts.get("local_ip", addr.local_ip)
        self.remote_ip = sopts.get("remote_ip", addr.remote_ip)
        pinned = ipaddress.ip_address(self.local_ip).version
        if (pinned == 4) != (self.ip_version == "ipv4"):
            # The script pins addresses of the other family: run it in that family.
            self.ip_version = "ipv4" if pinned == 4 else "ipv6"
            addr = ADDRESS_DEFAULTS[self.ip_version]
            self.remote_ip = sopts.get("remote_ip", addr.remote_ip)
        self.bind_port = int(sopts.get("bind_port", DEFAULT_PORT))
        self.connect_port = int(sopts.get("connect_port", DEFAULT_PORT))
        tol = opts.tolerance_usecs if opts.tolerance_usecs is not None else sopts.get("tolerance_usecs")
        self.tol_us = int(tol) if tol is not None else timing.DEFAULT_TOLERANCE_USECS
        self.tol_pct = float(sopts.get("tolerance_percent", timing.DEFAULT_TOLERANCE_PERCENT))
        self.ts_tick = int(sopts.get("tcp_ts_tick_usecs", 0) or 0)
        self.ts_ecr_scaled = "tcp_ts_ecr_scaled" in sopts
        self.strict_segments = "strict_segments" in sopts
        self.md5_key = _parse_key(sopts["md5_key"]) if "md5_key" in sopts else None
        self.config: StackConfig = linux_config(self.ip_version)
        if "mtu" in sopts:
            self.config.mtu = int(sopts["mtu"])
        self._stack: Stack | None = None
        self.env = Environment(self.config, lambda: self._stack)
        self.sys = Syscalls(self)
        self.now_s = 0.0
        self.cursor = 0.0
        self.outq: deque[tuple[float, bytes]] = deque()
        self.flows: dict[tuple[int, bytes, int], _Flow] = {}
        self.current: _Flow | None = None
        self.listening: Sock | None = None
        self.next_remote_port = REMOTE_PORT_BASE
        self.pending: _Pending | None = None
        self.last_event: Event | None = None
        self.last_expected: float | None = None
        self.log: list[str] = []

    # ------------------------------------------------------------ Host protocol

    @property
    def stack(self) -> Stack:
        if self._stack is None:
            self._stack = Stack([self.local_ip], self.config, name="drill")
            self.env.attach(self._stack)
        return self._stack

    def now(self) -> float:
        return self.now_s

    def flush(self) -> None:
        if self._stack is None:
            return
        for pkt in self._stack.datagrams_to_send():
            data = pkt.tobytes()
            problem = outbound_problem(pkt, self.env.offload)   # per skb with TSO, else per packet
            if problem:
                raise _Fail(None, problem)
            self.outq.append((self.now_s, data))
            if self.opts.verbose:
                self.log.append(f"{self.now_s:.6f} sent {len(data)} bytes")

    def on_listen(self, sock: Sock) -> None:
        self.listening = sock

    def on_connect(self, sock: Sock) -> None:
        conn = sock.conn
        assert conn is not None
        flow = _Flow(conn.local_ip, conn.local_port, conn.remote_ip, conn.remote_port, conn=conn)
        self.flows[flow.key] = flow
        self.current = flow
        self.listening = None

    def on_accept(self, sock: Sock) -> None:
        conn = sock.conn
        if conn is not None:
            flow = self.flows.get((conn.local_port, conn.remote_ip, conn.remote_port))
            if flow is not None:
                flow.conn = conn

    # ------------------------------------------------------------ clock

    def _next_wake(self) -> float | None:
        cands = []
        if self._stack is not None:
            t = self._stack.get_timer()
            if t is not None:
                cands.append(t)
        if self.pending is not None and self.pending.wake is not None:
            cands.append(self.pending.wake)
        return min(cands) if cands else None

    def _step(self, limit: float) -> bool:
        """Run the next timer due at or before ``limit``; False when there is none."""
        wake = self._next_wake()
        if wake is None or wake > limit:
            return False
        self.now_s = max(self.now_s, wake)
        if self._stack is not None:
            self._stack.handle_timer(self.now_s)
            self.flush()
        self._poll_pending()
        return True

    def advance_to(self, t: float) -> None:
        steps = 0
        while self._step(t):
            steps += 1
            if steps > _MAX_TIMER_STEPS:
                raise _Fail(None, f"timer storm: more than {_MAX_TIMER_STEPS} timer events before {t:.6f} s")
        if t > self.now_s:
            self.now_s = t

    # ------------------------------------------------------------ main loop

    def run(self) -> None:
        err = timing.check_first_event(self.script)
        if err is not None and self.script.events:
            raise _Fail(self.script.events[0].line, err)
        if self.script.init_command is not None:
            self._command(self.script.init_command)
        for ev in self.script.events:
            if self.last_event is not None:
                order = timing.check_order(self.last_event, ev)
                if order:
                    raise _Fail(ev.line, order)
            exp = timing.resolve(
                ev, now=self.cursor, last_event=self.last_event, last_expected=self.last_expected
            )
            if isinstance(ev, PacketEvent) and ev.outbound:
                actual = self._outbound(ev, exp)
            elif isinstance(ev, PacketEvent):
                actual = self._wait(ev, exp)
                self._inbound(ev)
            elif isinstance(ev, SyscallEvent):
                actual = self._syscall(ev, exp)
            elif isinstance(ev, CommandEvent):
                actual = self._wait(ev, exp)
                self._command(ev)
            elif isinstance(ev, CodeEvent):
                actual = self._wait(ev, exp)
                self._code(ev)
            else:  # pragma: no cover
                raise _Fail(ev.line, f"unknown event {ev!r}")
            self.last_event = ev
            self.last_expected = actual if ev.time.kind == "any" else exp.start
            self.cursor = actual if isinstance(ev, SyscallEvent) and ev.blocking else self.now_s
        if self.pending is not None:
            self._finish_pending(self.pending.event.line, at_end=True)
        if self.script.cleanup_command is not None:
            self._command(self.script.cleanup_command)

    def _check_time(self, ev: Event, exp: timing.Expected, actual: float) -> None:
        err = timing.check_time(
            ev, exp.start, exp.end, actual, last_expected=self.last_expected, anchor=exp.anchor,
            tolerance_usecs=self.tol_us, tolerance_percent=self.tol_pct,
        )  # fmt: skip
        if err:
            raise _Fail(ev.line, err)

    def _wait(self, ev: Event, exp: timing.Expected) -> float:
        self.advance_to(exp.start)
        self._check_time(ev, exp, self.now_s)
        return self.now_s

    # ------------------------------------------------------------ commands and code

    def _command(self, ev: CommandEvent) -> None:
        try:
            self.env.run(ev.command)
        except Unsupported as exc:
            raise _Skip(ev.line, str(exc)) from exc
        except CommandError as exc:
            raise _Fail(ev.line, str(exc)) from exc

    def _info_conn(self) -> Connection | None:
        flow = self.current
        if flow is not None:
            if self._stack is not None:
                live = self._stack.connections.get(
                    (flow.local_ip, flow.local_port, flow.remote_ip, flow.remote_port)
                )
                if live is not None:
                    flow.conn = live
            if flow.conn is not None:
                return flow.conn
        sock = self.sys.last_sock
        return sock.conn if sock is not None else None

    def _code(self, ev: CodeEvent) -> None:
        conn = self._info_conn()
        if conn is None:
            raise _Fail(ev.line, "%{ }% block: no socket to read tcp_info from")
        ns: dict[str, Any] = dict(CODE_CONSTANTS)
        ns.update(conn.info(self.now_s))
        code = textwrap.dedent(ev.code)
        where = f"{self.script.path}:{ev.line}"
        try:
            # Verbatim first, as packetdrill hands it to Python: a backslash joins lines
            # ("assert a; \<newline>    assert b"); else each continued line on its own.
            compiled = compile(code + "\n", where, "exec")   # packetdrill's file goes on after it
        except SyntaxError:
            code = code.replace("\\\n", "\n")
            compiled = None
        try:
            exec(compiled if compiled is not None else compile(code, where, "exec"), ns)
        except AssertionError as exc:
            raise _Fail(ev.line, f"assertion failed: {code.strip()!r}: {exc}") from exc
        except Exception as exc:
            raise _Fail(ev.line, f"%{{ }}% block raised {type(exc).__name__}: {exc}") from exc

    # ------------------------------------------------------------ syscalls

    def _syscall(self, ev: SyscallEvent, exp: timing.Expected) -> float:
        if self.pending is not None:
            self._finish_pending(ev.line)
        start = self._wait(ev, exp)
        try:
            if ev.name in ("socket", "accept", "accept4") and not isinstance(ev.result, EllipsisExpr):
                self.sys.fd_hint = value(ev.result)
            gen = self.sys.start(ev.name, ev.args)
        except Unsupported as exc:
            raise _Skip(ev.line, str(exc)) from exc
        pending = _Pending(ev, exp, gen, None)
        if self._drive(pending):
            return start
        if ev.blocking:
            self.pending = pending
            return start
        # Not marked blocking: packetdrill's main thread would block here.  Allow what the
        # tolerance allows (timers only), then report.
        limit = start + timing.tolerance(0.0, self.tol_us, self.tol_pct)
        self.pending = pending
        while self.pending is not None and self._step(limit):
            pass
        if self.pending is not None:
            self.pending = None
            raise _Fail(
                ev.line,
                f"{ev.name}() blocked, but the script does not mark it as a blocking call "
                f"(+t...t); it would block packetdrill forever",
            )
        return start

    def _drive(self, pending: _Pending) -> bool:
        """Advance the call; True when it completed (and was checked)."""
        ev = pending.event
        try:
            pending.wake = next(pending.gen)
            return False
        except StopIteration as stop:
            self.flush()
            self._check_result(ev, stop.value, None)
        except SysError as exc:
            self.flush()
            self._check_result(ev, -1, exc.errno)
        except Mismatch as exc:
            raise _Fail(ev.line, f"{ev.name}(): {exc}") from exc
        except Unsupported as exc:
            raise _Skip(ev.line, str(exc)) from exc
        if ev.blocking:
            err = timing.check_return_time(
                ev, pending.expected, self.now_s, tolerance_usecs=self.tol_us, tolerance_percent=self.tol_pct
            )
            if err:
                raise _Fail(ev.line, err)
        return True

    def _poll_pending(self) -> None:
        p = self.pending
        if p is not None and self._drive(p):
            self.pending = None

    def _finish_pending(self, line: int, at_end: bool = False) -> None:
        p = self.pending
        assert p is not None
        limit = (p.expected.block_end or self.now_s) + PACKET_TIMEOUT
        while self.pending is not None and self._step(limit):
            pass
        if self.pending is not None:
            self.pending = None
            where = "at the end of the script" if at_end else f"when line {line} needed the syscall thread"
            raise _Fail(
                p.event.line,
                f"blocking {p.event.name}() still blocked {where} "
                f"(expected to return at {p.expected.block_end:.6f} s)",
            )

    def _check_result(self, ev: SyscallEvent, ret: int, err: int | None) -> None:
        try:
            want = None if isinstance(ev.result, EllipsisExpr) else value(ev.result)
        except Unsupported as exc:
            raise _Skip(ev.line, str(exc)) from exc
        got = f"{ret}" if err is None else f"-1 {_errname(err)} ({STRERROR.get(_errname(err), '')})"
        expected = f"{want}" + (f" {ev.errno}" if ev.errno else "")
        if want is not None and want != ret:
            raise _Fail(ev.line, f"{ev.name}() returned {got}, expected {expected}")
        if err is not None and ev.errno is not None and ERRNO.get(ev.errno) != err:
            raise _Fail(ev.line, f"{ev.name}() returned {got}, expected errno {ev.errno}")
        if err is None and ev.errno is not None:
            raise _Fail(ev.line, f"{ev.name}() returned {got}, expected -1 {ev.errno}")

    # ------------------------------------------------------------ inbound

    def _flow_for_inbound(self, ev: PacketEvent) -> _Flow:
        syn_only = "S" in ev.flags and "." not in ev.flags
        if (self.listening is not None and syn_only) or self.current is None:
            lport = (
                self.listening.bound[1]
                if self.listening is not None and self.listening.bound
                else self.bind_port
            )
            flow = _Flow(pack_ip(self.local_ip), lport, pack_ip(self.remote_ip), self.next_remote_port)
            self.next_remote_port += 1
            self.flows[flow.key] = flow
            self.current = flow
            self.listening = None
        return self.current

    def _inbound(self, ev: PacketEvent) -> None:
        flow = self._flow_for_inbound(ev)
        if ev.protocol == "icmp":
            self._inbound_icmp(ev, flow)
            return
        flags = _flag_bits(ev.flags)
        sport = ev.src_port if ev.src_port is not None else flow.remote_port
        dport = ev.dst_port if ev.dst_port is not None else flow.local_port
        off = flow.local_offset(bool(flags & SYN))
        ack = ((ev.ack or 0) + off) & 0xFFFFFFFF if flags & ACK else (ev.ack or 0)
        opts, md5_at = self._encode_options(ev, flow, inbound=True, ack_flag=bool(flags & ACK))
        payload = ev.payload if ev.payload is not None else bytes(ev.seq_len)
        tos = 0
        ttl = 64
        flow_label = 0
        if ev.ip is not None:
            if ev.ip.tos is not None:
                tos = ev.ip.tos
            if ev.ip.ecn is not None and ev.ip.ecn in _ECN_BITS:
                tos = (tos & ~3) | _ECN_BITS[ev.ip.ecn]
            ttl = ev.ip.ttl if ev.ip.ttl is not None else 64
            flow_label = ev.ip.flowlabel or 0
        window = ev.win if ev.win is not None else 0
        if flags & SYN and flow.remote_isn is None:
            flow.remote_isn = ev.seq_start & 0xFFFFFFFF
        seq = (ev.seq_start + flow.remote_offset(bool(flags & SYN))) & 0xFFFFFFFF
        if md5_at is not None:
            key = self._md5_key(ev)
            thl = 20 + len(opts)
            fixed = struct.pack(
                "!HHIIHHHH", sport, dport, seq, ack, (thl << 10) | flags, window, 0, ev.urg or 0
            )
            digest = md5_digest_fixed(
                key, flow.remote_ip, flow.local_ip, fixed, thl + len(payload), (payload,)
            )
            opts = opts[:md5_at] + digest + opts[md5_at + 16 :]
        pkt = build_packet(
            src=flow.remote_ip, dst=flow.local_ip, sport=sport, dport=dport, seq=seq, ack=ack, flags=flags,
            window=window, urg_ptr=ev.urg or 0, options=opts, payload=(payload,) if payload else (),
            tos=tos, ttl=ttl, flow_label=flow_label,
        )  # fmt: skip
        self.stack.receive(pkt.tobytes(), self.now_s)
        self.flush()
        self._poll_pending()

    def _inbound_icmp(self, ev: PacketEvent, flow: _Flow) -> None:
        """An ICMP error from the remote side quoting our segment (packetdrill new_icmp_packet):
        the quote's ports are the flow's, its sequence number is mapped like an outbound one."""
        info = ev.icmp
        assert info is not None
        v6 = len(flow.local_ip) == 16
        icmp_type, code = _icmp_type_code(ev.line, info, v6)
        mtu = info.mtu or 0
        if (v6 and mtu and icmp_type != wire_icmp.ICMPV6_PKT_TOOBIG) or (not v6 and mtu and (
            icmp_type, code) != (wire_icmp.ICMP_DEST_UNREACH, wire_icmp.ICMP_FRAG_NEEDED)):
            raise _Fail(ev.line, "ICMP mtu is only valid for unreachable frag_needed / packet_too_big")
        # packetdrill cannot see the quoted segment's flags and assumes it is no SYN.
        seq = (info.echoed_seq_start + flow.local_offset(False)) & 0xFFFFFFFF
        pkt = wire_icmp.build_icmp_error(
            src=flow.remote_ip, dst=flow.local_ip, icmp_type=icmp_type, code=code, info=mtu,
            quoted_src=flow.local_ip, quoted_dst=flow.remote_ip, sport=flow.local_port,
            dport=flow.remote_port, seq=seq, quoted_payload_len=info.echoed_len,
        )
        self.stack.receive(pkt, self.now_s)
        self.flush()
        self._poll_pending()

    def _md5_key(self, ev: PacketEvent) -> bytes:
        if self.md5_key is None:
            raise _Skip(ev.line, "md5 * needs --md5_key=KEY at the top of the script")
        return self.md5_key

    def _encode_options(
        self, ev: PacketEvent, flow: _Flow, *, inbound: bool, ack_flag: bool
    ) -> tuple[bytes, int | None]:
        """Option bytes of a script line (inbound: mapped to live values) and the md5 digest offset."""
        out = bytearray()
        md5_at = None
        off = flow.local_offset("S" in ev.flags) if inbound else flow.remote_offset("S" in ev.flags)
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
                vals = [(v + off) & 0xFFFFFFFF for v in opt.values]
                out += struct.pack("!BB", 5, 2 + 4 * len(vals)) + b"".join(struct.pack("!I", v) for v in vals)
            elif name == "TS":
                val, ecr = opt.values
                if inbound and ack_flag:
                    ecr = self._map_ecr(ev, flow, ecr)
                out += struct.pack("!BBII", 8, 10, val & 0xFFFFFFFF, ecr & 0xFFFFFFFF)
            elif name == "md5":
                if opt.wildcard:
                    md5_at = len(out) + 2
                    out += b"\x13\x12" + bytes(16)
                else:
                    data = opt.data or b""
                    out += bytes((19, 2 + len(data))) + data
            elif name in ("FO", "FOEXP"):
                if opt.symbol is not None:
                    raise _Skip(ev.line, f"undefined cookie symbol {opt.symbol}")
                cookie = opt.data or b""
                if name == "FO":
                    out += bytes((34, 2 + len(cookie))) + cookie
                else:
                    out += bytes((254, 4 + len(cookie))) + b"\xf9\x89" + cookie
            else:
                raise _Skip(ev.line, f"TCP option {opt.raw or name} not emulated")
        if len(out) > 40:
            raise _Fail(ev.line, f"TCP options take {len(out)} bytes, more than 40")
        if inbound and len(out) % 4:
            out += bytes(-len(out) % 4)  # EOL padding, as the kernel would need
        return bytes(out), md5_at

    def _map_ecr(self, ev: PacketEvent, flow: _Flow, ecr: int) -> int:
        live = flow.ts_map.get(ecr)
        if live is not None:
            return live
        if self.ts_ecr_scaled and flow.first_ts is not None:
            return (ecr - flow.first_ts[0] + flow.first_ts[1]) & 0xFFFFFFFF
        if flow.first_ts is None and ecr == 0:
            return 0
        raise _Fail(
            ev.line,
            f"unable to infer live TS ecr for script TS ecr {ecr}: no matching or preceding outbound TS val",
        )

    # ------------------------------------------------------------ outbound

    def _next_outbound(self, deadline: float) -> tuple[float, bytes] | None:
        steps = 0
        while not self.outq:
            if not self._step(deadline):
                return None
            steps += 1
            if steps > _MAX_TIMER_STEPS:
                raise _Fail(None, "timer storm while waiting for an outbound packet")
        return self.outq.popleft()

    def _outbound(self, ev: PacketEvent, exp: timing.Expected) -> float:
        base = exp.end if exp.end is not None else (exp.start if ev.time.kind != "any" else self.now_s)
        deadline = max(base, self.now_s) + PACKET_TIMEOUT
        want_len = ev.seq_len
        segs: list[tuple[float, Segment]] = []
        total = 0
        while True:
            item = self._next_outbound(deadline)
            if item is None:
                what = "any" if not segs else f"the rest of the {want_len} bytes ({total} seen)"
                raise _Fail(
                    ev.line,
                    f"timed out waiting for outbound packet: expected {_fmt_expected(ev)} "
                    f"({what} by {deadline:.6f} s)",
                    [f"expected  {_fmt_expected(ev)}"],
                )
            t, data = item
            try:
                seg = parse_packet(data, verify_checksum=True)
            except DropPacket as exc:
                raise _Fail(ev.line, f"bad outbound packet from the stack: {exc.reason}") from exc
            cur = self.current
            if cur is not None and (seg.sport, seg.dport, seg.dst) != (cur.local_port, cur.remote_port,
                                                                      cur.remote_ip):
                continue  # packetdrill sniffs the socket under test only (find_socket_for_live_packet)
            if segs:
                prev = segs[-1][1]
                if (prev.sport, prev.dport, prev.dst) != (seg.sport, seg.dport, seg.dst):
                    segs, total = [], 0  # packetdrill restarts the aggregate on another 4-tuple
                else:
                    err = _fragment_mismatch(prev, seg, total, want_len)
                    if err:
                        raise _Fail(ev.line, f"aggregating segments for {_fmt_expected(ev)}: {err}")
            segs.append((t, seg))
            total += len(seg.payload)
            if total >= want_len or self.strict_segments:
                break
        flow = self.flows.get((segs[0][1].sport, segs[0][1].dst, segs[0][1].dport))
        if flow is None:
            raise _Fail(
                ev.line, f"outbound packet for a connection the script does not know: {_fmt_live(segs[0][1])}"
            )
        self._verify(ev, exp, flow, segs, total)
        return segs[0][0]

    def _verify(
        self,
        ev: PacketEvent,
        exp: timing.Expected,
        flow: _Flow,
        segs: list[tuple[float, Segment]],
        total: int,
    ) -> None:
        first = segs[0][1]
        last = segs[-1][1]
        t = segs[0][0]
        if first.flags & SYN and flow.live_local_isn is None:
            flow.live_local_isn = first.seq
            flow.script_local_isn = ev.seq_start
        off = flow.local_offset(bool(first.flags & SYN))
        seq = (first.seq - off) & 0xFFFFFFFF
        flags = last.flags | (ECE & first.flags) if len(segs) > 1 else first.flags
        payload = b"".join(bytes(s.payload) for _, s in segs)
        actual_opts = _parse_options(bytes(last.raw_options))
        # TS val: learn the baseline, record the mapping, view it in script space.
        script_ts = next((o for o in ev.options or [] if o.name == "TS"), None)
        live_ts = next((o for o in actual_opts if o[0] == 8 and len(o[1]) == 8), None)
        shown_ts: tuple[int, int] | None = None
        if live_ts is not None:
            live_val, live_ecr = struct.unpack("!II", live_ts[1])
            if script_ts is not None:
                flow.ts_map[script_ts.values[0] & 0xFFFFFFFF] = live_val
                if flow.first_ts is None:
                    flow.first_ts = (script_ts.values[0], live_val)
            if flow.first_ts is not None:
                shown_ts = ((flow.first_ts[0] + live_val - flow.first_ts[1]) & 0xFFFFFFFF, live_ecr)
            else:
                shown_ts = (live_val, live_ecr)
        problems: list[str] = []
        want_flags = _flag_bits(ev.flags)
        if flags != want_flags:
            problems.append(f"flags (expected {_fmt_flags(want_flags)}, actual {_fmt_flags(flags)})")
        if seq != ev.seq_start & 0xFFFFFFFF:
            problems.append(f"seq (expected {ev.seq_start}, actual {seq})")
        if total != ev.seq_len:
            problems.append(f"payload length (expected {ev.seq_len}, actual {total})")
        want_ack = (ev.ack or 0) & 0xFFFFFFFF
        roff = flow.remote_offset(bool(last.flags & SYN))
        live_ack = (last.ack - roff) & 0xFFFFFFFF if last.flags & ACK else last.ack
        if live_ack != want_ack:
            problems.append(f"ack (expected {want_ack}, actual {live_ack})")
        if ev.win is not None and last.window != ev.win:
            problems.append(f"win (expected {ev.win}, actual {last.window})")
        if (ev.urg or 0) != last.urg_ptr:
            problems.append(f"urg (expected {ev.urg or 0}, actual {last.urg_ptr})")
        if ev.ip is not None:
            if ev.ip.ecn is not None and ev.ip.ecn in _ECN_BITS and last.tos & 3 != _ECN_BITS[ev.ip.ecn]:
                problems.append(f"ECN field (expected {ev.ip.ecn}, actual {last.tos & 3})")
            if ev.ip.ecn == "ect01" and last.tos & 3 not in (1, 2):
                # packetdrill TOS_CHECK_ECN_ECT01: an outbound packet may carry either ECT.
                problems.append(f"ECN field (expected ect0 or ect1, actual {last.tos & 3})")
            if ev.ip.tos is not None and last.tos != ev.ip.tos:
                problems.append(f"tos (expected {ev.ip.tos:#x}, actual {last.tos:#x})")
            if ev.ip.ttl is not None and last.ttl != ev.ip.ttl:
                problems.append(f"ttl (expected {ev.ip.ttl}, actual {last.ttl})")
        if ev.options is not None:
            problems += self._compare_options(ev, flow, actual_opts, last, exp)
        if ev.payload is not None and payload != ev.payload:
            problems.append(f"payload (expected {ev.payload!r}, actual {payload!r})")
        def live_text(with_payload: bool) -> str:
            return _fmt_live(last, seq=seq, length=total, flags=flags, ts=shown_ts, opts=actual_opts,
                             ack=live_ack, sack_off=roff,
                             payload=payload if with_payload and ev.payload is not None else None)

        if problems:
            live = live_text(True)
            raise _Fail(
                ev.line,
                "outbound packet differs: " + "; ".join(problems),
                [
                    f"expected  {_fmt_expected(ev)}",
                    f"actual    {live}",
                    "differs:  " + ", ".join(p.split(" (")[0] for p in problems),
                ],
            )
        err = timing.check_time(
            ev,
            exp.start,
            exp.end,
            t,
            last_expected=self.last_expected,
            anchor=exp.anchor,
            tolerance_usecs=self.tol_us,
            tolerance_percent=self.tol_pct,
        )
        if err:
            live = live_text(False)
            raise _Fail(
                ev.line, err, [f"expected  {_fmt_expected(ev)}", f"actual    {live}  (sent at {t:.6f} s)"]
            )

    def _compare_options(
        self,
        ev: PacketEvent,
        flow: _Flow,
        actual: list[tuple[int, bytes]],
        seg: Segment,
        exp: timing.Expected,
    ) -> list[str]:
        script = ev.options or []
        problems: list[str] = []
        if len(script) != len(actual) or any(
            (o.kind if o.kind is not None else -1) != a[0] for o, a in zip(script, actual, strict=False)
        ):
            shown = _fmt_opts(actual, sack_off=flow.remote_offset(bool(seg.flags & SYN)))
            return [
                f"options (expected <{_fmt_script_opts(script)}>, actual <{shown}>)"
                if script
                else f"options (expected none, actual <{shown}>)"
            ]
        for opt, (kind, data) in zip(script, actual, strict=True):
            if opt.name in ("nop", "eol"):
                continue
            if opt.name == "TS":
                val, ecr = struct.unpack("!II", data) if len(data) == 8 else (0, 0)
                script_val, script_ecr = opt.values
                if self.ts_tick and flow.first_ts is not None:
                    mapped = (flow.first_ts[0] + val - flow.first_ts[1]) & 0xFFFFFFFF
                    tol = max(self.tol_us, int(self.tol_pct / 100.0 * round(exp.start * 1e6)))
                    dev = abs(((mapped - script_val + 0x80000000) & 0xFFFFFFFF) - 0x80000000)
                    if dev * self.ts_tick > tol:
                        problems.append(
                            f"TS val (expected {script_val}, actual {mapped}; tolerance {tol} us)"
                        )
                if ecr != script_ecr & 0xFFFFFFFF:
                    problems.append(f"TS ecr (expected {script_ecr}, actual {ecr})")
                continue
            if opt.name == "md5" and opt.wildcard:
                if self.md5_key is None:
                    raise _Skip(ev.line, "md5 * needs --md5_key=KEY at the top of the script")
                if not verify_segment_md5(seg, self.md5_key):
                    problems.append("md5 (the signature does not verify with --md5_key)")
                continue
            want, _ = self._encode_options(
                PacketEvent(line=ev.line, time=ev.time, direction=">", options=[opt]),
                flow,
                inbound=False,
                ack_flag=False,
            )
            if want[2:] != data or want[1:2] != bytes((len(data) + 2,)):
                problems.append(
                    f"{opt.name} (expected {opt.raw or opt.name}, actual {_fmt_opts([(kind, data)])})"
                )
        return problems


# ----------------------------------------------------------------------------- helpers


def _parse_key(text: str) -> bytes:
    """``--md5_key``: ``0x`` + hex digits, else the literal text (quotes stripped)."""
    text = text.strip().strip('"')
    if text.lower().startswith("0x"):
        return bytes.fromhex(text[2:])
    return text.encode()


def _errname(err: int) -> str:
    for name, num in ERRNO.items():
        if num == err:
            return name
    return str(err)


def _flag_bits(flags: str) -> int:
    bits = 0
    for ch in flags:
        bits |= _FLAG_BITS.get(ch, 0)
    return bits


def _fmt_flags(bits: int) -> str:
    out = "".join(ch for ch in "SFRPUEWA" if bits & _FLAG_BITS[ch])
    if bits & ACK:
        out += "."
    return out or "-"


def _parse_options(raw: bytes) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    i = 0
    while i < len(raw):
        kind = raw[i]
        if kind == 0:
            out.append((0, b""))
            break
        if kind == 1:
            out.append((1, b""))
            i += 1
            continue
        if i + 1 >= len(raw) or raw[i + 1] < 2:
            out.append((kind, raw[i + 2 :]))
            break
        ln = raw[i + 1]
        out.append((kind, raw[i + 2 : i + ln]))
        i += ln
    return out


def _fmt_opts(opts: list[tuple[int, bytes]], ts: tuple[int, int] | None = None, sack_off: int = 0) -> str:
    parts = []
    for kind, data in opts:
        if kind == 0:
            parts.append("eol")
        elif kind == 1:
            parts.append("nop")
        elif kind == 2 and len(data) == 2:
            parts.append(f"mss {struct.unpack('!H', data)[0]}")
        elif kind == 3 and len(data) == 1:
            parts.append(f"wscale {data[0]}")
        elif kind == 4:
            parts.append("sackOK")
        elif kind == 5:
            vals = [
                (struct.unpack("!I", data[j : j + 4])[0] - sack_off) & 0xFFFFFFFF
                for j in range(0, len(data) - 3, 4)
            ]
            parts.append("sack " + " ".join(f"{vals[j]}:{vals[j + 1]}" for j in range(0, len(vals) - 1, 2)))
        elif kind == 8 and len(data) == 8:
            val, ecr = ts if ts is not None else struct.unpack("!II", data)
            parts.append(f"TS val {val} ecr {ecr}")
        elif kind == 19:
            parts.append(f"md5 {data.hex()}")
        elif kind == 34:
            parts.append(f"FO {data.hex()}" if data else "FO")
        elif kind == 254 and data[:2] == b"\xf9\x89":
            parts.append(f"FOEXP {data[2:].hex()}" if len(data) > 2 else "FOEXP")
        else:
            parts.append(f"kind {kind} len {len(data) + 2}")
    return ",".join(parts)


def _fmt_script_opts(opts: list[TcpOption]) -> str:
    return ",".join(o.raw or o.name for o in opts)


def _fmt_expected(ev: PacketEvent) -> str:
    text = f"{ev.direction} {ev.flags} {ev.seq_start}:{ev.seq_end}({ev.seq_len})"
    if ev.ack is not None:
        text += f" ack {ev.ack}"
    if ev.win is not None:
        text += f" win {ev.win}"
    if ev.urg is not None:
        text += f" urg {ev.urg}"
    if ev.options is None:
        text += " <...>"
    elif ev.options:
        text += f" <{_fmt_script_opts(ev.options)}>"
    if ev.payload is not None:
        text += f" payload {ev.payload!r}"
    return text


def _fmt_live(
    seg: Segment,
    *,
    seq: int | None = None,
    length: int | None = None,
    flags: int | None = None,
    ts: tuple[int, int] | None = None,
    opts: list[tuple[int, bytes]] | None = None,
    ack: int | None = None,
    sack_off: int = 0,
    payload: bytes | None = None,
) -> str:
    seq = seg.seq if seq is None else seq
    length = len(seg.payload) if length is None else length
    flags = seg.flags if flags is None else flags
    text = f"> {_fmt_flags(flags)} {seq}:{(seq + length) & 0xFFFFFFFF}({length})"
    if flags & ACK:
        text += f" ack {seg.ack if ack is None else ack}"
    text += f" win {seg.window}"
    if seg.urg_ptr:
        text += f" urg {seg.urg_ptr}"
    opts = _parse_options(bytes(seg.raw_options)) if opts is None else opts
    if opts:
        text += f" <{_fmt_opts(opts, ts, sack_off)}>"
    if payload is not None:
        text += f" payload {payload!r}"
    return text


def _fragment_mismatch(prev: Segment, seg: Segment, sniffed: int, expected: int) -> str | None:
    """packetdrill's verify_packet_fragments: same header flags (FIN/PSH/CWR aside), contiguous
    sequence, and every fragment but the last as long as the previous one."""
    mask = ~(FIN | PSH | CWR)
    if prev.flags & mask != seg.flags & mask:
        return f"flags differ between segments ({_fmt_flags(prev.flags)} then {_fmt_flags(seg.flags)})"
    if seg.seq != (prev.seq + len(prev.payload)) & 0xFFFFFFFF:
        return f"segments are not contiguous (seq {prev.seq}+{len(prev.payload)} then {seg.seq})"
    if sniffed + len(seg.payload) < expected and len(seg.payload) != len(prev.payload):
        return (
            f"fragment payload: expected {len(prev.payload)} bytes vs actual {len(seg.payload)} bytes; "
            f"total payload: expected {expected} bytes vs actual {sniffed + len(seg.payload)} bytes"
        )
    return None


_TCPI = re.compile(r"\btcpi_[a-z_0-9]+\b")


def _known_tcpi() -> set[str]:
    stack = Stack(["192.0.2.99"], StackConfig(isn_secret=bytes(16), ts_secret=bytes(16)))
    conn = Connection(stack, pack_ip("192.0.2.99"), 1, pack_ip("192.0.2.98"), 2)
    return set(conn.info())


def prescan(script: Script) -> tuple[int | None, str] | None:
    """(line, reason) of the first construct the runner cannot emulate, or None."""
    for name in script.options:
        if name not in _SUPPORTED_OPTIONS:
            kind = "packetdrill option" if name in KNOWN_OPTIONS else "option"
            return None, f"{kind} --{name} not emulated"
    for line, why in script.unsupported():
        return line, why
    known: set[str] | None = None
    scratch = Environment(linux_config(), lambda: None)
    cmds = [c for c in (script.init_command, script.cleanup_command) if c is not None]
    for ev in list(script.events) + cmds:
        if isinstance(ev, PacketEvent):
            if ev.protocol == "udp":
                return ev.line, "UDP packets not emulated (the core is TCP only)"
            if ev.protocol == "icmp":
                assert ev.icmp is not None
                if not ev.inbound:
                    return ev.line, "outbound ICMP not emulated (the stack sends only echo replies)"
                if ev.icmp.echoed_protocol != "tcp":
                    return ev.line, f"ICMP quoting {ev.icmp.echoed_protocol} not emulated (TCP only)"
            if ev.encapsulation:
                return ev.line, "encapsulated packets not emulated"
            for tcp_opt in ev.options or []:
                if not tcp_opt.supported:
                    return ev.line, f"TCP option {tcp_opt.raw or tcp_opt.name} not emulated"
        elif isinstance(ev, SyscallEvent):
            if ev.name not in SUPPORTED_SYSCALLS:
                return ev.line, f"system call {ev.name}() not emulated"
            for expr in (*ev.args, ev.result):
                for sub in walk(expr):
                    if isinstance(sub, Symbol) and sub.name in UNSUPPORTED_SYMBOLS:
                        return ev.line, f"{sub.name}: {UNSUPPORTED_SYMBOLS[sub.name]}"
            if ev.name in ("setsockopt", "getsockopt") and len(ev.args) >= 3:
                lvl, opt = ev.args[1], ev.args[2]
                if (
                    isinstance(lvl, Symbol)
                    and isinstance(opt, Symbol)
                    and (lvl.name, opt.name) not in SUPPORTED_SOCKOPTS
                ):
                    return ev.line, f"{ev.name}({lvl.name}, {opt.name}) not emulated"
        elif isinstance(ev, CodeEvent):
            if known is None:
                known = _known_tcpi()
            for name in _TCPI.findall(ev.code):
                if name not in known:
                    return ev.line, f"tcp_info field {name} not modelled"
        elif isinstance(ev, CommandEvent):
            try:
                scratch.run(ev.command)
            except Unsupported as exc:
                return ev.line, str(exc)
            except CommandError:
                pass
    return None


def run_script(script: Script, opts: RunOptions | None = None) -> ScriptResult:
    """Run a parsed script; never raises for script problems (they become the result)."""
    opts = opts or RunOptions()
    res = ScriptResult(script.path, "passed", ip_version=opts.ip_version)
    skip = prescan(script)
    if skip is not None:
        res.status, res.line, res.reason = "skipped", skip[0], skip[1]
        return res
    runner = _Runner(script, opts)
    res.ip_version = runner.ip_version
    try:
        runner.run()
    except _Skip as exc:
        res.status, res.line, res.reason = "skipped", exc.line, exc.reason
    except _Fail as exc:
        res.status, res.line, res.reason, res.details = "failed", exc.line, exc.reason, exc.details
        if exc.line is None and runner.last_event is not None:
            res.line = runner.last_event.line
    except Exception as exc:  # a bug in the runner or the core: report it, keep going
        res.status, res.reason = "failed", f"internal error: {type(exc).__name__}: {exc}"
        res.line = runner.last_event.line if runner.last_event is not None else None
        res.details = traceback.format_exc().splitlines()
    res.reason = re.sub(r"^line \d+: ", "", res.reason)
    if runner.ip_version != opts.ip_version and res.status != "skipped":
        res.reason = (
            res.reason + "; " if res.reason else ""
        ) + f"ran over {runner.ip_version}: the script pins its addresses"
    res.virtual_time = runner.now_s
    res.details = res.details + runner.log
    return res


def run_file(path: str | Path, opts: RunOptions | None = None) -> ScriptResult:
    """Parse and run one .pkt file (``-D`` defines: the harness ones plus ``opts.defines``)."""
    opts = opts or RunOptions()
    defines = dict(DEFAULT_DEFINES[opts.ip_version])
    defines.update(opts.defines)
    try:
        script = parse_file(path, defines)
    except ScriptSyntaxError as exc:
        return ScriptResult(str(path), "failed", exc.line, f"syntax error: {exc}", opts.ip_version)
    except OSError as exc:
        return ScriptResult(str(path), "failed", None, f"cannot read script: {exc}", opts.ip_version)
    started = time.perf_counter()
    res = run_script(script, opts)
    if opts.verbose:
        res.details.append(
            f"wall time {time.perf_counter() - started:.3f} s, virtual time {res.virtual_time:.3f} s"
        )
    return res


def iter_scripts(paths: list[str]) -> Iterator[Path]:
    """Files as given; folders searched recursively for *.pkt, sorted."""
    for p in paths:
        path = Path(p)
        if path.is_dir():
            yield from sorted(path.rglob("*.pkt"))
        else:
            yield path
