"""Before a run: the first construct of a script the runner cannot emulate (the script is skipped)."""

from __future__ import annotations

import re
from pathlib import Path

from usertcp.drill.ast import CodeEvent, CommandEvent, Event, PacketEvent, Script, Symbol, SyscallEvent, walk
from usertcp.drill.defaults import KNOWN_OPTIONS, UNSUPPORTED_SYMBOLS
from usertcp.drill.profile import CommandError, Environment, Unsupported, linux_config
from usertcp.drill.syscalls import SUPPORTED_SOCKOPTS, SUPPORTED_SYSCALLS
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import Connection
from usertcp.tcp.stack import Stack, pack_ip

__all__ = ["prescan"]


_TCPI = re.compile(r"\btcpi_[a-z_0-9]+\b")
Reason = tuple[int | None, str]


def _known_tcpi() -> set[str]:
    stack = Stack(["192.0.2.99"], StackConfig(isn_secret=bytes(16), ts_secret=bytes(16)))
    conn = Connection(stack, pack_ip("192.0.2.99"), 1, pack_ip("192.0.2.98"), 2)
    return set(conn.info())


def _packet_reason(ev: PacketEvent) -> str | None:
    if ev.protocol == "udp":
        return "UDP packets not emulated (the core is TCP only)"
    if ev.protocol == "icmp":
        assert ev.icmp is not None
        if not ev.inbound:
            return "outbound ICMP not emulated (the stack sends only echo replies)"
        if ev.icmp.echoed_protocol != "tcp":
            return f"ICMP quoting {ev.icmp.echoed_protocol} not emulated (TCP only)"
    if ev.encapsulation:
        return "encapsulated packets not emulated"
    for tcp_opt in ev.options or []:
        if not tcp_opt.supported:
            return f"TCP option {tcp_opt.raw or tcp_opt.name} not emulated"
    return None


def _syscall_reason(ev: SyscallEvent) -> str | None:
    if ev.name not in SUPPORTED_SYSCALLS:
        return f"system call {ev.name}() not emulated"
    for expr in (*ev.args, ev.result):
        for sub in walk(expr):
            if isinstance(sub, Symbol) and sub.name in UNSUPPORTED_SYMBOLS:
                return f"{sub.name}: {UNSUPPORTED_SYMBOLS[sub.name]}"
    if ev.name in ("setsockopt", "getsockopt") and len(ev.args) >= 3:
        lvl, opt = ev.args[1], ev.args[2]
        if (
            isinstance(lvl, Symbol)
            and isinstance(opt, Symbol)
            and (lvl.name, opt.name) not in SUPPORTED_SOCKOPTS
        ):
            return f"{ev.name}({lvl.name}, {opt.name}) not emulated"
    return None


def _option_reason(script: Script) -> str | None:
    """Every packetdrill option is handled (usertcp.drill.cmdline); others are unknown."""
    for name in script.options:
        if name not in KNOWN_OPTIONS:
            return f"option --{name} not emulated"
    return None


def prescan(script: Script) -> Reason | None:
    """(line, reason) of the first construct the runner cannot emulate, or None."""
    why = _option_reason(script)
    if why is not None:
        return None, why
    for line, why in script.unsupported():
        return line, why
    known: set[str] | None = None
    scratch = Environment(linux_config(), lambda: None, Path(script.path).parent)
    cmds: list[Event] = [c for c in (script.init_command, script.cleanup_command) if c is not None]
    for ev in list(script.events) + cmds:
        reason: str | None = None
        if isinstance(ev, PacketEvent):
            reason = _packet_reason(ev)
        elif isinstance(ev, SyscallEvent):
            reason = _syscall_reason(ev)
        elif isinstance(ev, CodeEvent):
            known = known if known is not None else _known_tcpi()
            reason = next(
                (f"tcp_info field {n} not modelled" for n in _TCPI.findall(ev.code) if n not in known), None
            )
        elif isinstance(ev, CommandEvent):
            try:
                scratch.run(ev.command)
            except Unsupported as exc:
                reason = str(exc)
            except CommandError:
                pass
        if reason is not None:
            return ev.line, reason
    return None
