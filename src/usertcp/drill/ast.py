"""AST of a packetdrill script, as produced by :mod:`usertcp.drill.parser`.

Times are kept in seconds (floats rounded to whole microseconds, the resolution packetdrill works
in); sequence numbers, ack and SACK values are the literal script values (the runner maps them to
live values).  Anything the parser recognises but our runner is not expected to emulate is
recorded in the node's ``unsupported`` list rather than rejected, so that a script can be skipped
with a precise reason instead of failing to parse.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

TimeKind: TypeAlias = Literal["absolute", "relative", "any", "range"]
Direction: TypeAlias = Literal["<", ">"]
Protocol: TypeAlias = Literal["tcp", "udp", "icmp"]


# --------------------------------------------------------------------------- expressions


@dataclass(slots=True)
class Int:
    """An integer literal: decimal (possibly negative) or hex (``text`` keeps the spelling)."""

    value: int
    text: str


@dataclass(slots=True)
class Symbol:
    """A bare word such as ``SOL_SOCKET``; resolved against the constant table by the runner."""

    name: str


@dataclass(slots=True)
class String:
    """A string literal with C escapes decoded; ``ellipsis`` marks the ``"abc"...`` prefix form."""

    value: bytes
    raw: str
    ellipsis: bool = False


@dataclass(slots=True)
class EllipsisExpr:
    """``...``: "don't care" / "use the default" (buffers, sockaddrs, lengths)."""


@dataclass(slots=True)
class BinOr:
    """``a | b`` (flag sets such as ``POLLIN|POLLOUT``)."""

    left: Expr
    right: Expr


@dataclass(slots=True)
class List:
    """``[a, b]``: an array (``[1]`` is an int pointer for setsockopt)."""

    items: list[Expr]


@dataclass(slots=True)
class Field:
    """``name=value`` or ``name(count...)=value`` (e.g. ``msg_iov(1)=[...]``, ``msg_name(...)=...``).

    ``count`` is None for the plain form and the parenthesised expressions otherwise.
    """

    name: str
    value: Expr
    count: list[Expr] | None = None


@dataclass(slots=True)
class Struct:
    """``{...}``: named members are :class:`Field` items, positional ones any other expression."""

    items: list[Expr]

    def named(self) -> dict[str, Field]:
        return {item.name: item for item in self.items if isinstance(item, Field)}

    def positional(self) -> list[Expr]:
        return [item for item in self.items if not isinstance(item, Field)]

    def get(self, name: str) -> Expr | None:
        member = self.named().get(name)
        return None if member is None else member.value


@dataclass(slots=True)
class Call:
    """``htons(8080)``, ``inet_addr("192.0.2.1")``, ..."""

    name: str
    args: list[Expr]


Expr: TypeAlias = Int | Symbol | String | EllipsisExpr | BinOr | List | Field | Struct | Call


def walk(expr: Expr) -> Iterator[Expr]:
    """Yield ``expr`` and every sub-expression, depth first."""
    yield expr
    if isinstance(expr, BinOr):
        yield from walk(expr.left)
        yield from walk(expr.right)
    elif isinstance(expr, List | Struct):
        for item in expr.items:
            yield from walk(item)
    elif isinstance(expr, Field):
        for sub in expr.count or []:
            yield from walk(sub)
        yield from walk(expr.value)
    elif isinstance(expr, Call):
        for arg in expr.args:
            yield from walk(arg)


# --------------------------------------------------------------------------- time


@dataclass(slots=True)
class TimeSpec:
    """When an event is expected.

    * ``absolute``: ``start`` seconds after the script start;
    * ``relative``: ``+start`` after the anchor (see :mod:`usertcp.drill.timing`);
    * ``any``: ``*`` (outbound packets only);
    * ``range``: ``start~end``, relative to the anchor when ``relative`` (``+a~+b``).

    ``block_end`` is the ``...end`` of a blocking syscall: the time it must *return*, with the
    same anchor as ``start``.
    """

    kind: TimeKind
    start: float = 0.0
    end: float | None = None
    relative: bool = False
    block_end: float | None = None


# --------------------------------------------------------------------------- packets


@dataclass(slots=True)
class IpInfo:
    """The ``[ect0]``, ``(tos 0x10)``, ``[ttl 64]``, ``[noecn, flowlabel 0x1]`` prefix."""

    ecn: Literal["noecn", "ect0", "ect1", "ce", "ect01"] | None = None
    tos: int | None = None
    ttl: int | None = None
    flowlabel: int | None = None


@dataclass(slots=True)
class Encapsulation:
    """An ``ipv4 a > b:`` / ``ipv6 ...:`` / ``gre ...:`` / ``mpls ...:`` prefix (kept as text)."""

    kind: str
    text: str


# TCP option kinds by script name (RFC 793/1323/2018/2385/7413, 254 = experimental with magic).
OPTION_KINDS: dict[str, int] = {
    "eol": 0,
    "nop": 1,
    "mss": 2,
    "wscale": 3,
    "sackOK": 4,
    "sack": 5,
    "TS": 8,
    "md5": 19,
    "FO": 34,
    "ECN": 172,  # AccECN order 0 (EE0B, ECEB, EE1B); the parser picks by the field order
    "ECN1": 174,  # AccECN order 1 (EE1B, ECEB, EE0B)
    "FOEXP": 254,
}


@dataclass(slots=True)
class TcpOption:
    """One TCP option of a packet line.

    ``values``: mss/wscale -> (n,); TS -> (val, ecr); sack -> (l1, r1, l2, r2, ...).
    ``data``: FO/FOEXP cookie or md5 digest bytes (b"" for a bare ``FO``).
    ``symbol``: a cookie written as an undefined word (``FOEXP TFO_COOKIE`` without ``-D``);
    the runner must resolve it (e.g. compute the cookie) or fail.
    ``wildcard``: ``md5 *`` (our extension: the runner signs/verifies with the script's key).
    ``raw``: the option's source text, for messages and for unsupported forms (AccECN).
    """

    name: str
    values: tuple[int, ...] = ()
    data: bytes | None = None
    symbol: str | None = None
    wildcard: bool = False
    raw: str = ""
    supported: bool = True

    @property
    def kind(self) -> int | None:
        return OPTION_KINDS.get(self.name)


@dataclass(slots=True)
class IcmpInfo:
    """``icmp TYPE [CODE] [mtu N] [id N] [[echoed]]``; ``echoed_*`` describe the quoted packet."""

    type: str
    code: str | None = None
    mtu: int | None = None
    echo_id: int | None = None
    echoed_protocol: Literal["tcp", "udp", "raw"] = "tcp"
    echoed_seq_start: int = 0
    echoed_len: int = 0


# --------------------------------------------------------------------------- events


@dataclass(slots=True, kw_only=True)
class Event:
    line: int
    time: TimeSpec


@dataclass(slots=True, kw_only=True)
class PacketEvent(Event):
    """A packet line.  ``options``: None = ``<...>`` (don't check); [] = none allowed.

    ``options_absent`` tells "no option list written" (options == []) from an explicit list.
    For udp, ``seq_len`` is the UDP payload length; for icmp see ``icmp``.
    ``payload`` is our extension (``payload "..."``): the exact segment bytes.
    """

    direction: Direction
    protocol: Protocol = "tcp"
    ip: IpInfo | None = None
    encapsulation: list[Encapsulation] = field(default_factory=list)
    src_port: int | None = None
    dst_port: int | None = None
    flags: str = ""
    seq_start: int = 0
    seq_end: int = 0
    seq_len: int = 0
    ack: int | None = None
    win: int | None = None
    urg: int | None = None
    options: list[TcpOption] | None = field(default_factory=list)
    options_absent: bool = True
    payload: bytes | None = None
    icmp: IcmpInfo | None = None
    unsupported: list[str] = field(default_factory=list)

    @property
    def inbound(self) -> bool:
        return self.direction == "<"

    @property
    def outbound(self) -> bool:
        return self.direction == ">"


@dataclass(slots=True, kw_only=True)
class SyscallEvent(Event):
    """``name(args) = result [ERRNO (text)] [(note)]``; blocking when ``time.block_end`` is set."""

    name: str
    args: list[Expr]
    result: Expr
    errno: str | None = None
    errno_text: str | None = None
    note: str | None = None

    @property
    def blocking(self) -> bool:
        return self.time.block_end is not None


@dataclass(slots=True, kw_only=True)
class CommandEvent(Event):
    """A backtick shell command.  ``role`` is "init"/"cleanup" for the untimed first/last ones."""

    command: str
    role: Literal["init", "event", "cleanup"] = "event"


@dataclass(slots=True, kw_only=True)
class CodeEvent(Event):
    """A ``%{ python }%`` block (text stripped of surrounding blanks, like packetdrill)."""

    code: str


@dataclass(slots=True)
class Script:
    """A parsed script.  ``options``: the ``--name[=value]`` lines ("" for flags without value);
    ``defines``: the effective ``-D``/``--define`` symbols used while parsing."""

    options: dict[str, str]
    events: list[Event]
    path: str
    init_command: CommandEvent | None = None
    cleanup_command: CommandEvent | None = None
    defines: dict[str, str] = field(default_factory=dict)

    def symbols(self) -> set[str]:
        """Every bare word used in system call arguments and results (SOL_SOCKET, ...)."""
        names: set[str] = set()
        for ev in self.events:
            if isinstance(ev, SyscallEvent):
                for expr in (*ev.args, ev.result):
                    names.update(e.name for e in walk(expr) if isinstance(e, Symbol))
        return names

    def errnos(self) -> set[str]:
        return {ev.errno for ev in self.events if isinstance(ev, SyscallEvent) and ev.errno}

    def unsupported(self) -> list[tuple[int, str]]:
        """(line, reason) for every construct marked unsupported in the script."""
        return [(ev.line, why) for ev in self.events if isinstance(ev, PacketEvent) for why in ev.unsupported]
