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
  fails the script.  A pending call that ends while an outbound line is being waited for is
  checked when that wait ends: packetdrill's syscall thread checks its result under the global
  lock (``end_syscall``), which the main thread holds while it sniffs (``sniff_outbound_live_packet``),
  so a packet that never comes is reported first.
* **Sequence numbers**: the local ISN is learned from the first outbound SYN / SYN-ACK (script
  and live); remote sequence numbers are literal.  TS val: the first outbound TS val pair is the
  baseline; inbound TS ecr is mapped back through the outbound val seen for that script value.
* **Checks** of an outbound line: :mod:`usertcp.drill.outbound`; inbound packets are built
  by :mod:`usertcp.drill.inbound`; constructs we cannot emulate are found up front by
  :mod:`usertcp.drill.prescan` (the script is skipped).

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

import re
import textwrap
import time
import traceback
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from usertcp.drill import timing
from usertcp.drill.ast import CodeEvent, CommandEvent, EllipsisExpr, Event, PacketEvent, Script, SyscallEvent
from usertcp.drill.cmdline import MAPPED, Settings, resolve
from usertcp.drill.defaults import (
    CODE_CONSTANTS,
    DEFAULT_DEFINES,
    ERRNO,
    STRERROR,
)
from usertcp.drill.flow import Flow
from usertcp.drill.inbound import InboundBuilder
from usertcp.drill.lexer import ScriptSyntaxError
from usertcp.drill.offload import outbound_problem
from usertcp.drill.outbound import OutboundChecker, fragment_mismatch
from usertcp.drill.outcome import RunOptions, ScriptFail, ScriptResult, ScriptSkip, Status
from usertcp.drill.parser import parse_file
from usertcp.drill.prescan import prescan
from usertcp.drill.profile import CommandError, Environment, Unsupported, linux_config
from usertcp.drill.render import errname, fmt_expected, fmt_live
from usertcp.drill.syscalls import FD_RESULT_CALLS, Mismatch, Sock, SyscallGen, Syscalls, SysError, value
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import Connection
from usertcp.tcp.stack import Stack, pack_ip
from usertcp.wire.packet import parse_packet
from usertcp.wire.segment import DropPacket, Segment

__all__ = [
    "PACKET_TIMEOUT",
    "RunOptions",
    "ScriptResult",
    "Status",
    "iter_scripts",
    "prescan",
    "run_file",
    "run_script",
]

PACKET_TIMEOUT = 2.0  # seconds an outbound line waits past its expected time
REMOTE_PORT_BASE = 48000  # ports of the scripted peer (packetdrill picks ephemeral ones)
_MAX_TIMER_STEPS = 200_000


@dataclass
class _Pending:
    event: SyscallEvent
    expected: timing.Expected
    gen: SyscallGen
    wake: float | None


# ----------------------------------------------------------------------------- the runner


class _Runner:
    def __init__(self, script: Script, opts: RunOptions, settings: Settings) -> None:
        self.script = script
        self.opts = opts
        self.settings = settings
        self.ip_version = settings.ip_version
        self.local_ip = settings.local_ip
        self.remote_ip = settings.remote_ip
        self.mapped = settings.mapped
        self.bind_port = settings.bind_port
        self.connect_port = settings.connect_port
        self.tol_us = settings.tol_us
        self.tol_pct = settings.tol_pct
        self.md5_key = settings.md5_key
        self.inbound = InboundBuilder(self.md5_key, settings.ts_ecr_scaled)
        self.checker = OutboundChecker(self.tol_us, self.tol_pct, settings.ts_tick, self.md5_key)
        self.config: StackConfig = linux_config(self.ip_version)
        if settings.mtu is not None:
            self.config.mtu = settings.mtu
        self._stack: Stack | None = None
        self.env = Environment(self.config, lambda: self._stack, Path(script.path).parent,
                               peer=settings.remote_ip)
        self.sys = Syscalls(self)
        # packetdrill runs every %{ }% block in one Python program: names a block assigns
        # (``cwnd = 58``) are seen by the blocks after it.
        self.code_vars: dict[str, Any] = {}
        self.now_s = 0.0
        self.cursor = 0.0
        self.outq: deque[tuple[float, bytes]] = deque()
        self.flows: dict[tuple[int, bytes, int], Flow] = {}
        self.current: Flow | None = None
        self.listening: Sock | None = None
        self.next_remote_port = REMOTE_PORT_BASE
        self.pending: _Pending | None = None
        self.sniffing = False                  # the main thread holds the lock (an outbound wait)
        self.deferred: ScriptFail | None = None   # a pending call's failure, checked after it
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
                raise ScriptFail(None, problem)
            self.outq.append((self.now_s, data))
            if self.opts.verbose:
                self.log.append(f"{self.now_s:.6f} sent {len(data)} bytes")

    def on_listen(self, sock: Sock) -> None:
        self.listening = sock

    def on_connect(self, sock: Sock) -> None:
        conn = sock.conn
        assert conn is not None
        flow = Flow(conn.local_ip, conn.local_port, conn.remote_ip, conn.remote_port, conn=conn)
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
                raise ScriptFail(
                    None, f"timer storm: more than {_MAX_TIMER_STEPS} timer events before {t:.6f} s"
                )
        if t > self.now_s:
            self.now_s = t

    # ------------------------------------------------------------ main loop

    def run(self) -> None:
        err = timing.check_first_event(self.script)
        if err is not None and self.script.events:
            raise ScriptFail(self.script.events[0].line, err)
        if self.script.init_command is not None:
            self._command(self.script.init_command)
        for ev in self.script.events:
            if self.last_event is not None:
                order = timing.check_order(self.last_event, ev)
                if order:
                    raise ScriptFail(ev.line, order)
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
                raise ScriptFail(ev.line, f"unknown event {ev!r}")
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
            raise ScriptFail(ev.line, err)

    def _wait(self, ev: Event, exp: timing.Expected) -> float:
        self.advance_to(exp.start)
        self._check_time(ev, exp, self.now_s)
        return self.now_s

    # ------------------------------------------------------------ commands and code

    def _command(self, ev: CommandEvent) -> None:
        try:
            self.env.run(ev.command)
        except Unsupported as exc:
            raise ScriptSkip(ev.line, str(exc)) from exc
        except CommandError as exc:
            raise ScriptFail(ev.line, str(exc)) from exc

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
            raise ScriptFail(ev.line, "%{ }% block: no socket to read tcp_info from")
        ns: dict[str, Any] = dict(CODE_CONSTANTS)
        ns.update(self.code_vars)
        info = conn.info(self.now_s)
        ns.update(info)
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
            self.code_vars = {k: v for k, v in ns.items() if k not in info and k != "__builtins__"}
        except AssertionError as exc:
            raise ScriptFail(ev.line, f"assertion failed: {code.strip()!r}: {exc}") from exc
        except Exception as exc:
            raise ScriptFail(ev.line, f"%{{ }}% block raised {type(exc).__name__}: {exc}") from exc

    # ------------------------------------------------------------ syscalls

    def _syscall(self, ev: SyscallEvent, exp: timing.Expected) -> float:
        if self.pending is not None:
            self._finish_pending(ev.line)
        start = self._wait(ev, exp)
        try:
            if ev.name in FD_RESULT_CALLS and not isinstance(ev.result, EllipsisExpr):
                self.sys.fd_hint = value(ev.result)
            gen = self.sys.start(ev.name, ev.args)
        except Unsupported as exc:
            raise ScriptSkip(ev.line, str(exc)) from exc
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
            raise ScriptFail(
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
            raise ScriptFail(ev.line, f"{ev.name}(): {exc}") from exc
        except Unsupported as exc:
            raise ScriptSkip(ev.line, str(exc)) from exc
        if ev.blocking:
            err = timing.check_return_time(
                ev, pending.expected, self.now_s, tolerance_usecs=self.tol_us, tolerance_percent=self.tol_pct
            )
            if err:
                raise ScriptFail(ev.line, err)
        return True

    def _poll_pending(self) -> None:
        p = self.pending
        if p is None:
            return
        try:
            done = self._drive(p)
        except ScriptFail as fail:
            if not self.sniffing:
                raise
            self.deferred, done = fail, True      # end_syscall waits for the lock
        if done:
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
            raise ScriptFail(
                p.event.line,
                f"blocking {p.event.name}() still blocked {where} "
                f"(expected to return at {p.expected.block_end:.6f} s)",
            )

    def _check_result(self, ev: SyscallEvent, ret: int, err: int | None) -> None:
        try:
            want = None if isinstance(ev.result, EllipsisExpr) else value(ev.result)
        except Unsupported as exc:
            raise ScriptSkip(ev.line, str(exc)) from exc
        got = f"{ret}" if err is None else f"-1 {errname(err)} ({STRERROR.get(errname(err), '')})"
        expected = f"{want}" + (f" {ev.errno}" if ev.errno else "")
        if want is not None and want != ret:
            raise ScriptFail(ev.line, f"{ev.name}() returned {got}, expected {expected}")
        if err is not None and ev.errno is not None and ERRNO.get(ev.errno) != err:
            raise ScriptFail(ev.line, f"{ev.name}() returned {got}, expected errno {ev.errno}")
        if err is None and ev.errno is not None:
            raise ScriptFail(ev.line, f"{ev.name}() returned {got}, expected -1 {ev.errno}")

    # ------------------------------------------------------------ inbound

    def _flow_for_inbound(self, ev: PacketEvent) -> Flow:
        syn_only = "S" in ev.flags and "." not in ev.flags
        if (self.listening is not None and syn_only) or self.current is None:
            lport = (
                self.listening.bound[1]
                if self.listening is not None and self.listening.bound
                else self.bind_port
            )
            flow = Flow(pack_ip(self.local_ip), lport, pack_ip(self.remote_ip), self.next_remote_port)
            self.next_remote_port += 1
            self.flows[flow.key] = flow
            self.current = flow
            self.listening = None
        return self.current

    def _inbound(self, ev: PacketEvent) -> None:
        flow = self._flow_for_inbound(ev)
        if ev.protocol == "icmp":
            pkt = self.inbound.icmp_packet(ev, flow)
        else:
            pkt = self.inbound.tcp_packet(ev, flow)
        # packetdrill --mss: a longer inbound segment is written to the TUN device as one
        # GRO packet of gso_size mss (virtio_net_hdr), as the kernel's GRO would build it.
        mss = self.settings.mss
        gso = mss if mss and ev.protocol != "icmp" and ev.seq_len > mss else 0
        self.stack.receive(pkt, self.now_s, gso_size=gso)
        self.flush()
        self._poll_pending()

    # ------------------------------------------------------------ outbound

    def _next_outbound(self, deadline: float) -> tuple[float, bytes] | None:
        steps = 0
        while not self.outq:
            if not self._step(deadline):
                return None
            steps += 1
            if steps > _MAX_TIMER_STEPS:
                raise ScriptFail(None, "timer storm while waiting for an outbound packet")
        return self.outq.popleft()

    def _outbound(self, ev: PacketEvent, exp: timing.Expected) -> float:
        self.sniffing = True
        try:
            actual = self._sniff(ev, exp)
        finally:
            self.sniffing = False
        if self.deferred is not None:
            fail, self.deferred = self.deferred, None
            raise fail
        return actual

    def _sniff(self, ev: PacketEvent, exp: timing.Expected) -> float:
        base = exp.end if exp.end is not None else (exp.start if ev.time.kind != "any" else self.now_s)
        deadline = max(base, self.now_s) + PACKET_TIMEOUT
        want_len = ev.seq_len
        segs: list[tuple[float, Segment]] = []
        total = 0
        while True:
            item = self._next_outbound(deadline)
            if item is None:
                what = "any" if not segs else f"the rest of the {want_len} bytes ({total} seen)"
                raise ScriptFail(
                    ev.line,
                    f"timed out waiting for outbound packet: expected {fmt_expected(ev)} "
                    f"({what} by {deadline:.6f} s)",
                    [f"expected  {fmt_expected(ev)}"],
                )
            t, data = item
            try:
                seg = parse_packet(data, verify_checksum=True)
            except DropPacket as exc:
                raise ScriptFail(ev.line, f"bad outbound packet from the stack: {exc.reason}") from exc
            cur = self.current
            if cur is not None and (seg.sport, seg.dport, seg.dst) != (cur.local_port, cur.remote_port,
                                                                      cur.remote_ip):
                continue  # packetdrill sniffs the socket under test only (find_socket_for_live_packet)
            if segs:
                prev = segs[-1][1]
                if (prev.sport, prev.dport, prev.dst) != (seg.sport, seg.dport, seg.dst):
                    segs, total = [], 0  # packetdrill restarts the aggregate on another 4-tuple
                else:
                    err = fragment_mismatch(prev, seg, total, want_len)
                    if err:
                        raise ScriptFail(ev.line, f"aggregating segments for {fmt_expected(ev)}: {err}")
            segs.append((t, seg))
            total += len(seg.payload)
            if total >= want_len or self.settings.strict_segments:
                break
        flow = self.flows.get((segs[0][1].sport, segs[0][1].dst, segs[0][1].dport))
        if flow is None:
            raise ScriptFail(
                ev.line, f"outbound packet for a connection the script does not know: {fmt_live(segs[0][1])}"
            )
        self.checker.verify(ev, exp, flow, segs, self.last_expected)
        return segs[0][0]


# ----------------------------------------------------------------------------- helpers


def run_script(script: Script, opts: RunOptions | None = None) -> ScriptResult:
    """Run a parsed script; never raises for script problems (they become the result)."""
    opts = opts or RunOptions()
    res = ScriptResult(script.path, "passed", ip_version=opts.ip_version)
    skip = prescan(script)
    if skip is not None:
        res.status, res.line, res.reason = "skipped", skip[0], skip[1]
        return res
    try:
        settings = resolve(script.options, opts.options, opts.ip_version, opts.tolerance_usecs)
    except ScriptSkip as exc:
        res.status, res.reason = "skipped", exc.reason
        return res
    except ScriptFail as exc:
        res.status, res.reason = "failed", exc.reason
        return res
    res.ip_version = MAPPED if settings.mapped else settings.ip_version
    notes = "; ".join(settings.notes)
    if settings.dry_run:
        res.reason = "--dry_run: parsed, not run" + (f"; {notes}" if notes else "")
        return res
    runner = _Runner(script, opts, settings)
    _run_and_report(runner, res)
    if notes and res.status != "skipped":
        res.reason = f"{res.reason}; {notes}" if res.reason else notes
    res.virtual_time = runner.now_s
    res.details = res.details + runner.log
    return res


def _run_and_report(runner: _Runner, res: ScriptResult) -> None:
    try:
        runner.run()
    except ScriptSkip as exc:
        res.status, res.line, res.reason = "skipped", exc.line, exc.reason
    except ScriptFail as exc:
        res.status, res.line, res.reason, res.details = "failed", exc.line, exc.reason, exc.details
        if exc.line is None and runner.last_event is not None:
            res.line = runner.last_event.line
    except Exception as exc:  # a bug in the runner or the core: report it, keep going
        res.status, res.reason = "failed", f"internal error: {type(exc).__name__}: {exc}"
        res.line = runner.last_event.line if runner.last_event is not None else None
        res.details = traceback.format_exc().splitlines()
    res.reason = re.sub(r"^line \d+: ", "", res.reason)


def run_file(path: str | Path, opts: RunOptions | None = None) -> ScriptResult:
    """Parse and run one .pkt file (``-D`` defines: the harness ones plus ``opts.defines``)."""
    opts = opts or RunOptions()
    family = opts.options.get("ip_version", opts.ip_version)
    defines = dict(DEFAULT_DEFINES.get(family, DEFAULT_DEFINES[opts.ip_version]))
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
