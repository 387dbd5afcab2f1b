"""The environment a packetdrill script expects: the Linux sysctl profile and backtick commands.

``linux_config(ip_version)`` is the stack configuration of packetdrill's harness after
``defaults.sh`` (values from :data:`usertcp.drill.defaults.SYSCTL_DEFAULTS`, MTU per address
family, fixed secrets so runs are reproducible).  :class:`Environment` interprets a backtick
command: sysctl writes the stack models go to ``StackConfig.apply_sysctl``; harmless commands are
accepted; ``nstat`` and ``grep`` over ``/proc/net/tcp`` are emulated from the stack's counters and
sockets; a ``pfifo limit 0`` root qdisc on the test device makes the stack's local queue refuse
every packet (``Stack.tx_refuse``); anything else raises :class:`Unsupported` (the runner skips
the script with the reason).

The command text is read as /bin/sh would for the forms the corpus uses: ``#`` comments (whole
line or trailing), ``$((…))`` integer arithmetic, ``;``/``&&``/newline sequences, ``a || b``
(``b`` runs when ``a`` fails), ``> /dev/null``/``2>&1``/``&> /dev/null`` redirections.  A
``defaults.sh`` command runs the file the script's directory provides (packetdrill runs scripts
from their own directory), following the corpus's symlink stubs; only a script with no such
file (an inline test script) gets the built-in profile.
"""

from __future__ import annotations

import ast
import ipaddress
import operator
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from usertcp.drill.defaults import ADDRESS_DEFAULTS, SYSCTL_DEFAULTS, SysctlValue, sysctl_name
from usertcp.drill.offload import ETHTOOL_OFFLOADS_OFF, link_gso_max_size
from usertcp.tcp import fastopen
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import State
from usertcp.tcp.route import parse_route_metrics
from usertcp.tcp.stack import Stack
from usertcp.wire.segment import TxPacket

__all__ = [
    "PROFILE_ONLY_SYSCTLS",
    "TEST_DEVICE",
    "CommandError",
    "Environment",
    "Unsupported",
    "linux_config",
    "sysctl_text",
]

# defaults.sh settings the core does not expose as knobs because its behaviour already is the
# Linux default they select (no FACK, RACK on, no pacing, cubic...).  Accepted only with
# exactly the profile's value: any other value is a behaviour change we cannot model.
# (tcp_tso_win_divisor is accepted with any value: it only tunes TSO deferral, which a stack
# without TSO never does.)
PROFILE_ONLY_SYSCTLS: dict[str, SysctlValue] = {
    key: value
    for key, value in SYSCTL_DEFAULTS.items()
    if key.split(".")[-1]
    in {
        "tcp_frto",
        "tcp_fack",
        "tcp_recovery",
        "tcp_pacing_ss_ratio",
        "tcp_pacing_ca_ratio",
    }
}


class Unsupported(Exception):
    """The script needs something the runner cannot model (the script is skipped)."""


class CommandError(Exception):
    """A command that ran and failed (non-zero exit status: the script fails)."""


def sysctl_text(value: SysctlValue) -> str:
    if isinstance(value, tuple):
        return " ".join(str(v) for v in value)
    return str(value)


def linux_config(ip_version: str = "ipv4") -> StackConfig:
    """StackConfig for packetdrill's harness: Linux defaults plus what defaults.sh sets."""
    cfg = StackConfig(
        isn_secret=bytes(range(16)),
        ts_secret=bytes(range(16, 32)),
        random_ts_offset=False,
    )
    cfg.mtu = ADDRESS_DEFAULTS[ip_version].mtu
    for key, value in SYSCTL_DEFAULTS.items():
        if key not in PROFILE_ONLY_SYSCTLS and not key.endswith("tcp_tso_win_divisor"):
            if not cfg.apply_sysctl(key, sysctl_text(value)):
                raise AssertionError(f"profile sysctl {key} is not modelled")  # pragma: no cover
    return cfg


# Commands with no effect on a fresh in-process stack.
_HARMLESS = (
    re.compile(r"^(/tmp/)?sysctl_restore_\S*\.sh$"),  # our stack dies with the script
    re.compile(r"^true$|^:$"),
)
# The root qdisc of a device: a pfifo (no pacing anyway) and its removal, which restores the
# default. ``limit 0`` holds no packet: every transmission on the device fails (Linux: the qdisc
# answers NET_XMIT_DROP and TCP sees local congestion). Any other limit, like the default
# (txqueuelen), never drops here: the runner takes each packet off the device as soon as the
# stack queues it, so the FIFO never holds more than the one being sent.
_QDISC_SET = re.compile(r"^tc\s+qdisc\s+(?:add|replace)\s+dev\s+(\S+)\s+root\s+pfifo(?:\s+limit\s+(\d+))?$")
_QDISC_FQ = re.compile(r"^tc\s+qdisc\s+(?:add|replace)\s+dev\s+(\S+)\s+root\s+fq\b(.*)$")
_QDISC_DEL = re.compile(r"^tc\s+qdisc\s+del(?:ete)?\s+dev\s+(\S+)\s+root$")
TEST_DEVICE = "tun0"   # packetdrill's TUN device: the one link the runner models
# ``echo VALUE > FILE`` into a module parameter or a sysctl file.
_ECHO_WRITE = re.compile(r"^echo\s+(\S+)\s*>\s*(/sys/module/(\w+)/parameters/(\w+)|/proc/sys/\S+)$")
# ``ip [-4|-6] route add|change|replace DEST [via GW] dev tun0 [advmss N] [mtu [lock] N] [initcwnd N]``
_ROUTE = re.compile(r"^ip\s+(?:-[46]\s+)?route\s+(add|change|replace)\s+(\S+)\s")
_METRICS_FLUSH = re.compile(r"^ip\s+tcp_metrics\s+flush(\s+all)?$")   # the Fast Open cookie cache
_DEFAULTS_SH = re.compile(r"(^|/)defaults\.sh$")
_SET_SYSCTLS = re.compile(r"(^|/)set_sysctls\.py$")
_REDIRECT = re.compile(r"\s*(&>\s*/dev/null|\d?>>?\s*/dev/null|2>&1|>\s*&\d)\s*")
_ARITH = re.compile(r"\$\(\(([^()]*(?:\([^()]*\)[^()]*)*)\)\)")
_SEQUENCE = re.compile(r"\n|;|&&")
_MAX_STUB_HOPS = 4   # git stores a symlink as a file holding its target: follow a few
_ARITH_OPS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Div: operator.floordiv, ast.Mod: operator.mod,
    ast.LShift: operator.lshift, ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor,
}  # fmt: skip


def _arith(expr: str) -> int:
    """``$((expr))``: shell integer arithmetic (literals, + - * / % << >> & | ^, parentheses)."""

    def ev(node: ast.expr) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITH_OPS:
            return _ARITH_OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            return -ev(node.operand) if isinstance(node.op, ast.USub) else ev(node.operand)
        raise ValueError(f"shell arithmetic not modelled: $(({expr}))")

    try:
        tree = ast.parse(expr.strip().replace("/", "//"), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"bad shell arithmetic $(({expr}))") from exc
    return ev(tree.body)


def _strip_comment(line: str) -> str:
    """The line without a ``#`` comment (a ``#`` that starts a word, outside quotes)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def shell_lines(command: str) -> list[str]:
    """A backtick command's statements, as /bin/sh reads them: continuations joined, comments
    dropped, ``$((…))`` expanded, split at newlines, ``;`` and ``&&``."""
    text = command.replace("\\\n", " ").replace("${PPID}", "PPID").replace("$PPID", "PPID")
    text = "\n".join(_strip_comment(line) for line in text.split("\n"))
    text = _ARITH.sub(lambda m: str(_arith(m.group(1))), text)
    return [s.strip() for s in _SEQUENCE.split(text) if s.strip()]


@dataclass
class Environment:
    """Runs backtick commands against one stack (created lazily: sysctls come first)."""

    config: StackConfig
    stack_getter: Callable[[], Stack | None]
    script_dir: Path | None = None  # relative commands (../common/defaults.sh) start here
    _nstat_base: dict[str, int] = field(default_factory=dict)
    tx_blocked: bool = False        # TEST_DEVICE's qdisc holds no packet (pfifo limit 0)
    offload: bool = True            # TEST_DEVICE offers TSO (packetdrill's tun), until ethtool -K off
    # The script's scratch file system: what its ``dd``/``rm`` commands made, for open().
    files: dict[str, bytes] = field(default_factory=dict)
    peer: str | None = None         # the script's remote address: the route packetdrill sets up

    # ------------------------------------------------------------------ entry

    def run(self, command: str) -> None:
        """Execute one backtick command; raise Unsupported or CommandError."""
        try:
            statements = shell_lines(command)
        except ValueError as exc:
            raise Unsupported(f"command not understood: {command!r} ({exc})") from exc
        for statement in statements:
            self._alternatives(statement)

    def _alternatives(self, statement: str) -> None:
        """``a || b``: b runs only when a fails (a command we cannot model counts as failing
        when an alternative follows: the script said what to do in that case)."""
        choices = [c.strip() for c in statement.split("||")]
        for i, choice in enumerate(choices):
            try:
                self._statement(choice)
                return
            except (CommandError, Unsupported):
                if i == len(choices) - 1:
                    raise

    def _statement(self, statement: str) -> None:
        try:
            self._parse_statement(statement)
        except ValueError as exc:  # shlex: unbalanced quotes and the like
            raise Unsupported(f"command not understood: {statement!r} ({exc})") from exc

    def _parse_statement(self, statement: str) -> None:
        echo = _ECHO_WRITE.match(statement)
        if echo is not None:
            self._echo_write(echo, statement)
            return
        stages = [s.strip() for s in statement.split("|")]
        if len(stages) > 1 or stages[0].startswith(("grep ", "nstat")):
            self._pipeline(stages, statement)
            return
        words = shlex.split(_REDIRECT.sub(" ", statement))
        if not words:
            return
        cmd = words[0]
        if _DEFAULTS_SH.search(cmd) and len(words) == 1:
            self.load_profile(cmd)
            return
        if cmd == "sysctl":
            self._sysctl(words[1:], statement)
            return
        if _SET_SYSCTLS.search(cmd):
            for arg in words[1:]:
                self._assign(arg, statement)
            return
        joined = " ".join(words)
        if any(p.match(joined) for p in _HARMLESS):
            return
        if ETHTOOL_OFFLOADS_OFF.match(joined):
            self.offload = False        # skbs of one MSS, compared packet by packet
            stack = self.stack_getter()
            if stack is not None:
                self.attach(stack)
            return
        route = _ROUTE.match(joined)
        if route is not None:
            self._route(route, words, statement)
            return
        if _METRICS_FLUSH.match(joined):
            stack = self.stack_getter()
            if stack is not None:
                fastopen.flush_metrics(stack)
            return
        if self._file_command(words):
            return
        qdisc = _QDISC_SET.match(joined)
        if qdisc is not None:
            self._set_qdisc(qdisc.group(1), blocked=qdisc.group(2) is not None and int(qdisc.group(2)) == 0)
            return
        fq = _QDISC_FQ.match(joined)
        if fq is not None:
            # sch_fq paces each flow at sk_pacing_rate (tcp/pacing.py); its parameters keep
            # their defaults (a script that changes them is not modelled).
            if fq.group(2).strip():
                raise Unsupported(f"fq parameters not modelled: {statement!r}")
            if fq.group(1) == TEST_DEVICE:
                self.config.qdisc = "fq"
            return
        qdisc = _QDISC_DEL.match(joined)
        if qdisc is not None:
            self._set_qdisc(qdisc.group(1), blocked=False)
            return
        raise Unsupported(f"command not modelled: {statement!r}")

    # ------------------------------------------------------------------ files

    def _file_command(self, words: list[str]) -> bool:
        """``rm -f PATH...`` and ``dd if=/dev/zero of=PATH bs=N count=M``: the scratch files."""
        name = words[0].rsplit("/", 1)[-1]
        if name == "rm" and len(words) > 1 and all(w.startswith("-") for w in words[1:2]):
            for path in words[1:]:
                if not path.startswith("-"):
                    self.files.pop(path, None)
            return True
        if name == "dd":
            ops = dict(w.split("=", 1) for w in words[1:] if "=" in w)
            if set(ops) - {"if", "of", "bs", "count", "status"} or ops.get("if") != "/dev/zero" \
                    or "of" not in ops:
                return False
            size = int(ops.get("bs", "512")) * int(ops.get("count", "0"))
            self.files[ops["of"]] = bytes(size)
            return True
        return False

    # ------------------------------------------------------------------ link

    def _set_qdisc(self, device: str, *, blocked: bool) -> None:
        if device != TEST_DEVICE:
            return          # no test traffic crosses another device
        self.config.qdisc = "pfifo"   # replaces an fq
        self.tx_blocked = blocked
        stack = self.stack_getter()
        if stack is not None:
            self.attach(stack)

    def attach(self, stack: Stack) -> None:
        """Give ``stack`` the device state the commands set so far; the runner calls this when
        it creates its (lazy) stack, so a qdisc installed before the first socket applies."""
        stack.tx_refuse = _refuse_all if self.tx_blocked else None
        stack.gso_max_size = link_gso_max_size(self.offload)

    def _route(self, route: re.Match[str], words: list[str], statement: str) -> None:
        """Route metrics (StackConfig.routes, tcp/route.py). packetdrill routes the script's
        peer through the test device: ``change`` finds only that route (for another destination
        the kernel answers ENOENT, fib_table_insert/fib6_add_rt2node); ``add``/``replace`` make one."""
        verb, dest = route.group(1), route.group(2)
        rest = words[words.index(dest) + 1:]
        if "dev" in rest and rest[rest.index("dev") + 1:][:1] != [TEST_DEVICE]:
            raise Unsupported(f"route on another device not modelled: {statement!r}")
        try:
            metrics = parse_route_metrics(rest)
            addr = ipaddress.ip_address(dest)
        except ValueError as exc:
            raise Unsupported(f"route not modelled: {statement!r} ({exc})") from exc
        if verb == "change" and (self.peer is None or ipaddress.ip_address(self.peer) != addr):
            raise CommandError(f"RTNETLINK answers: No such file or directory: {statement!r}")
        self.config.routes.set(addr.packed, metrics)

    # ------------------------------------------------------------------ sysctls

    def _echo_write(self, echo: re.Match[str], statement: str) -> None:
        """``echo V > /sys/module/M/parameters/P`` (StackConfig.apply_module_param: Linux
        module parameters, read live by the module) or ``echo V > /proc/sys/...``."""
        value, module, name = echo.group(1), echo.group(3), echo.group(4)
        if module is None:
            self.set_sysctl(echo.group(2), value, statement)
            return
        try:
            ok = self.config.apply_module_param(module, name, value)
        except (ValueError, PermissionError) as exc:
            raise CommandError(f"{statement!r}: {exc}") from exc
        if not ok:
            raise Unsupported(f"module parameter not modelled: {statement!r}")

    def load_profile(self, path: str = "defaults.sh") -> None:
        """Run the ``defaults.sh`` at ``path`` (relative to the script's directory); with no
        such file, the built-in profile (what the corpus's defaults.sh sets)."""
        text = self._read_profile(path)
        if text is not None:
            self.run(text)
            return
        for key, value in SYSCTL_DEFAULTS.items():
            self.set_sysctl(key, sysctl_text(value), "defaults.sh")

    def _read_profile(self, path: str) -> str | None:
        if self.script_dir is None:
            return None
        file = self.script_dir / path
        for _ in range(_MAX_STUB_HOPS):
            try:
                text = file.read_text(encoding="utf-8", errors="replace")
            except OSError:
                return None
            stub = text.strip()
            if "\n" in stub or not _DEFAULTS_SH.search(stub):
                return text
            file = file.parent / stub       # a symlink stored as its target's path
        return None

    def set_sysctl(self, key: str, value: str, statement: str) -> None:
        name = sysctl_name(key)
        if self.stack_getter() is not None and name.endswith(("tcp_rmem", "tcp_wmem")):
            pass  # Linux applies buffer sysctls to new sockets only; so does our config
        if name == "net.ipv4.tcp_tso_win_divisor":
            return
        profile = PROFILE_ONLY_SYSCTLS.get(name)
        if profile is not None:
            if value.strip() == sysctl_text(profile):
                return
            raise Unsupported(f"sysctl {name}={value} not modelled (only the Linux default)")
        try:
            ok = self.config.apply_sysctl(name, value)
        except ValueError as exc:
            raise CommandError(f"sysctl {name}={value}: {exc}") from exc
        if not ok:
            raise Unsupported(f"sysctl {name}={value.strip()} not modelled ({statement!r})")

    def _assign(self, arg: str, statement: str) -> None:
        if "=" not in arg:
            raise Unsupported(f"sysctl read not modelled: {statement!r}")
        key, value = arg.split("=", 1)
        self.set_sysctl(key, value, statement)

    def _sysctl(self, args: list[str], statement: str) -> None:
        for arg in args:
            if arg in ("-q", "-w", "-e", "--quiet", "--write", "--ignore"):    # -e: unknown keys are no error
                continue
            if arg.startswith("-"):
                raise Unsupported(f"sysctl option {arg} not modelled: {statement!r}")
            self._assign(arg, statement)

    # ------------------------------------------------------------------ pipelines

    def _pipeline(self, stages: list[str], statement: str) -> None:
        """``nstat [| grep ...]`` and ``grep PAT /proc/net/tcp[6] [| grep PAT]``; the exit
        status of the last stage decides (a grep without match fails the command)."""
        lines: list[str] | None = None
        for stage in stages:
            words = shlex.split(_REDIRECT.sub(" ", stage))
            if not words:
                raise Unsupported(f"command not modelled: {statement!r}")
            if words[0] == "nstat" and lines is None:
                lines = self._nstat(words[1:], statement)
            elif words[0] == "grep":
                lines = self._grep(words[1:], lines, statement)
                if not lines:
                    raise CommandError(f"command failed (exit status 1): {statement!r}")
            else:
                raise Unsupported(f"command not modelled: {statement!r}")

    def _nstat(self, args: list[str], statement: str) -> list[str]:
        """iproute2 nstat: counters changed since its last run (its history file), with ``-n``
        (update the history, print nothing), ``-s`` (leave the history), ``-a`` (absolute
        values) and ``-z`` (zero counters too)."""
        flags: set[str] = set()
        for arg in args:
            if not re.fullmatch(r"-[nsaz]+", arg):
                raise Unsupported(f"nstat option {arg} not modelled: {statement!r}")
            flags.update(arg[1:])
        stack = self.stack_getter()
        counters = dict(stack.counters.items()) if stack is not None else {}
        out = []
        for name, value in sorted(counters.items()):
            shown = value if "a" in flags else value - self._nstat_base.get(name, 0)
            if shown or "z" in flags:
                out.append(f"{name:<32}{shown:>16}{0.0:>16}")
        if "s" not in flags:
            self._nstat_base = counters
        return [] if "n" in flags else out

    def _grep(self, args: list[str], lines: list[str] | None, statement: str) -> list[str]:
        if not args or args[0].startswith("-"):
            raise Unsupported(f"grep options not modelled: {statement!r}")
        pattern, files = args[0], args[1:]
        if files:
            lines = []
            for name in files:
                if name not in ("/proc/net/tcp", "/proc/net/tcp6"):
                    raise Unsupported(f"file not modelled: {name} in {statement!r}")
                lines.extend(self._proc_net_tcp(name.endswith("6")))
        if lines is None:
            raise Unsupported(f"grep on stdin not modelled: {statement!r}")
        return [line for line in lines if pattern in line]

    def _proc_net_tcp(self, v6: bool) -> list[str]:
        """Lines shaped like /proc/net/tcp[6]: ``sl local rem st`` (addresses in kernel hex)."""
        stack = self.stack_getter()
        if stack is None:
            return []
        size = 16 if v6 else 4

        def addr(ip: bytes | None, port: int) -> str:
            raw = ip if ip is not None else bytes(size)
            words = [raw[i : i + 4][::-1].hex().upper() for i in range(0, len(raw), 4)]
            return "".join(words) + f":{port:04X}"

        rows: list[tuple[str, str, int]] = []
        for ip, port in stack.listeners:
            if (len(ip) if ip else size) == size:
                rows.append((addr(ip or None, port), addr(None, 0), 0x0A))
        for conn in stack.connections.values():
            if len(conn.local_ip) == size and conn.state is not State.CLOSED:
                rows.append(
                    (addr(conn.local_ip, conn.local_port), addr(conn.remote_ip, conn.remote_port),
                     _LINUX_STATE.get(conn.state, 0x07))
                )  # fmt: skip
        tail = "00000000:00000000 00:00000000 00000000     0        0 0 1 0000000000000000 100 0 0 10 0"
        return [f"{i:4}: {local} {remote} {st:02X} {tail}" for i, (local, remote, st) in enumerate(rows)]


def _refuse_all(_packet: TxPacket) -> bool:
    return True


_LINUX_STATE = {
    State.ESTABLISHED: 0x01,
    State.SYN_SENT: 0x02,
    State.SYN_RECEIVED: 0x03,
    State.FIN_WAIT_1: 0x04,
    State.FIN_WAIT_2: 0x05,
    State.TIME_WAIT: 0x06,
    State.CLOSED: 0x07,
    State.CLOSE_WAIT: 0x08,
    State.LAST_ACK: 0x09,
    State.LISTEN: 0x0A,
    State.CLOSING: 0x0B,
}
