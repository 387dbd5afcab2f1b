"""Parser for packetdrill scripts (our own implementation of packetdrill's grammar).

A script is::

    script   := option* [`init command`] event+ [`cleanup command`]
    option   := --name | --name=value                 (top of file only)
    event    := time action
    time     := T | +T | * | T~T | +T~+T              (T: seconds, int or float, >= 0)
    action   := packet | [...T] syscall | `shell command` | %{ python }%

Packets (``<`` inbound, injected; ``>`` outbound, expected)::

    packet   := dir encap* [ipinfo] [sport>dport] FLAGS seq [ack N] [win N] [urg N] [tcpopts]
                [payload "..."]
              | dir encap* [ipinfo] udp [sport>dport] (LEN)
              | dir encap* [ipinfo] icmp TYPE [CODE] [mtu N] [id N] [\\[echoed\\]]
    ipinfo   := [item, ...] or (item, ...) with items noecn|ect0|ect1|ce|ect01|tos 0xNN|ttl N|flowlabel 0xN
    encap    := ipv4 A > B:  | ipv6 A > B:  | gre ...:  | mpls ...:   (parsed, marked unsupported)
    FLAGS    := letters of S F R P U E W A, optionally followed by '.' (ACK); '.' alone; '-' none;
                an ACE value 0..7 may stand for E W A (AccECN: ``P5.``, ``.5``, ``F5.``)
    seq      := START:END(LEN)           with END == START + LEN
    tcpopts  := <...>                    (outbound only: options are not checked)
              | <opt, opt, ...>          nop | eol | mss N | wscale N | sackOK | sack L:R ... |
                                         TS val V ecr E | md5 HEX | md5 * | FO [HEX] | FOEXP [HEX] |
                                         ECN [e1b N] [ceb N] [e0b N] (AccECN, RFC 9768: the field
                                         order picks the kind, 174 when e1b leads, else 172)

No option list means "the packet carries no options".

System calls::

    syscall  := name(expr, ...) = expr [ERRNO (strerror text)] [(note)]
    expr     := primary ('|' primary)*
    primary  := ... | INT | 0xHEX | SYMBOL | "string" ["string" ...] [...] | [expr, ...] |
                {item, ...} | name(expr, ...) | name=expr | name(expr, ...)=expr

``{item, ...}`` covers sockaddrs, msghdrs (``msg_iov(1)=[{..., 40}]``), iovecs, pollfds,
linger, epoll events: members are named (``name=...``, ``name(count)=...``) or positional.
``+T...E`` is a blocking call that starts at ``+T`` and must return at ``+E`` (same anchor).

Comments are ``//`` and ``/* */``; newlines are insignificant, so statements may span lines.
``-D NAME=value`` (``defines``) and ``--define=NAME=value`` replace words by their value.

Our two extensions (packetdrill only checks sizes and copies literal option bytes):

* ``payload "C-escaped text"`` at the end of a TCP packet line gives the segment's exact bytes;
  its length must equal the sequence length, e.g. ``> P. 1:12(11) ack 1 payload "220 ready\\r\\n"``.
* ``md5 *`` in an option list: the runner signs inbound / verifies outbound segments with the
  script's TCP-MD5 key instead of comparing literal digest bytes.

Every syntax or semantic error raises :class:`ScriptSyntaxError` with the offending line.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from usertcp.drill.ast import (
    BinOr,
    Call,
    CodeEvent,
    CommandEvent,
    Direction,
    EllipsisExpr,
    Encapsulation,
    Event,
    Expr,
    Field,
    IcmpInfo,
    Int,
    IpInfo,
    List,
    PacketEvent,
    Script,
    String,
    Struct,
    Symbol,
    SyscallEvent,
    TcpOption,
    TimeSpec,
)
from usertcp.drill.defaults import KNOWN_OPTIONS
from usertcp.drill.lexer import ScriptSyntaxError, Token, tokenize

__all__ = ["ScriptSyntaxError", "decode_c_string", "parse_file", "parse_script"]

_U8, _U16, _U20, _U32 = 0xFF, 0xFFFF, 0xFFFFF, 0xFFFFFFFF
_FLAG_LETTERS = frozenset("SFRPUEWA")
_ACE_DIGITS = frozenset("01234567")
_ACCECN_FIELDS = ("e0b", "ceb", "e1b")
_ECN_WORDS = frozenset({"noecn", "ect0", "ect1", "ce", "ect01"})
_ENCAP_WORDS = frozenset({"ipv4", "ipv6", "gre", "GREv0", "mpls"})
# packetdrill bounds a cookie only by the option space: 40 bytes less the option's base (kind and
# length, plus the 2-byte magic for the experimental kind 254); Linux itself caches at most 16.
_MAX_COOKIE_BYTES = {"FO": 40 - 2, "FOEXP": 40 - 4}
_MAX_MD5_BYTES = 16
_MAX_TIME = 1e7  # seconds; keeps float->microsecond conversions finite
_MAX_DEPTH = 64  # expression nesting; deeper input is garbage, and recursion must stay bounded
_HEX = re.compile(r"[0-9a-fA-F]*")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_SIMPLE_ESCAPES = {
    "n": 10, "r": 13, "t": 9, "0": 0, "a": 7, "b": 8, "f": 12, "v": 11, "e": 27,
    "\\": 92, '"': 34, "'": 39, "?": 63,
}  # fmt: skip


def decode_c_string(raw: str) -> bytes:
    """Decode C escapes (``\\n``, ``\\x41``, ``\\101``, ...) into bytes; other text is UTF-8.

    Raises ValueError on a malformed escape (the parser turns it into a ScriptSyntaxError).
    """
    out = bytearray()
    i = 0
    while i < len(raw):
        c = raw[i]
        if c != "\\":
            j = raw.find("\\", i)
            j = len(raw) if j < 0 else j
            out += raw[i:j].encode("utf-8", "surrogatepass")
            i = j
            continue
        if i + 1 >= len(raw):
            raise ValueError("string ends with a lone backslash")
        e = raw[i + 1]
        if e == "x":
            m = re.compile(r"[0-9a-fA-F]{1,2}").match(raw, i + 2)
            if m is None:
                raise ValueError("\\x escape without hex digits")
            out.append(int(m.group(), 16))
            i = m.end()
        elif e in "01234567":
            m = re.compile(r"[0-7]{1,3}").match(raw, i + 1)
            assert m is not None
            value = int(m.group(), 8)
            if value > 0xFF:
                raise ValueError(f"octal escape \\{m.group()} out of range")
            out.append(value)
            i = m.end()
        elif e in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[e])
            i += 2
        elif e == "\n":  # line continuation inside a string
            i += 2
        else:
            raise ValueError(f"unknown escape \\{e}")
    return bytes(out)


def parse_script(text: str, *, path: str = "<string>", defines: dict[str, str] | None = None) -> Script:
    """Parse script ``text``; ``defines`` are ``-D NAME=value`` symbols (they win over the
    script's own ``--define`` options)."""
    script_defines: dict[str, str] = {}
    try:
        tokens = tokenize(text, path=path, defines=defines, script_defines=script_defines)
        parser = _Parser(tokens, text, path)
        script = parser.script()
    except RecursionError:
        # Bounded by _MAX_DEPTH in practice; this only guards against tiny recursion limits.
        raise ScriptSyntaxError(path, 0, "script nesting too deep") from None
    script.defines = {**script_defines, **(defines or {})}
    return script


def parse_file(path: str | Path, defines: dict[str, str] | None = None) -> Script:
    """Read and parse a script file (UTF-8; undecodable bytes become U+FFFD)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise ScriptSyntaxError(str(p), 0, f"cannot read script: {err.strerror or err}") from None
    return parse_script(text, path=str(p), defines=defines)


class _Parser:
    def __init__(self, tokens: list[Token], text: str, path: str) -> None:
        self.toks = tokens
        self.text = text
        self.path = path
        self.i = 0

    # ----------------------------------------------------------------- token helpers

    def peek(self, k: int = 0) -> Token:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def advance(self) -> Token:
        tok = self.peek()
        if tok.kind != "EOF":
            self.i += 1
        return tok

    def error(self, tok: Token, message: str) -> ScriptSyntaxError:
        return ScriptSyntaxError(self.path, tok.line, message)

    @staticmethod
    def describe(tok: Token) -> str:
        if tok.kind == "EOF":
            return "end of script"
        if tok.kind == "STRING":
            return "a string"
        if tok.kind == "BACKTICK":
            return "a `command`"
        if tok.kind == "CODE":
            return "a %{ code }% block"
        text = tok.text if len(tok.text) <= 30 else tok.text[:27] + "..."
        return f"'{text}'"

    def unexpected(self, tok: Token, wanted: str) -> ScriptSyntaxError:
        return self.error(tok, f"expected {wanted}, found {self.describe(tok)}")

    def expect_punct(self, char: str, wanted: str | None = None) -> Token:
        tok = self.peek()
        if not tok.is_punct(char):
            raise self.unexpected(tok, wanted or f"'{char}'")
        return self.advance()

    def accept_punct(self, char: str) -> bool:
        if self.peek().is_punct(char):
            self.advance()
            return True
        return False

    def expect_int(self, what: str, limit: int | None = None, *, allow_hex: bool = False) -> int:
        tok = self.peek()
        kinds = ("INT", "HEX") if allow_hex else ("INT",)
        if tok.kind not in kinds:
            raise self.unexpected(tok, f"an integer {what}")
        self.advance()
        value = int(tok.text, 16) if tok.kind == "HEX" else int(tok.text)
        if limit is not None and not 0 <= value <= limit:
            raise self.error(tok, f"{what} {tok.text} out of range (0..{limit})")
        return value

    # ----------------------------------------------------------------- script

    def script(self) -> Script:
        options: dict[str, str] = {}
        while self.peek().kind == "OPTION":
            tok = self.advance()
            takes_value = KNOWN_OPTIONS.get(tok.text)
            if takes_value is None:
                raise self.error(tok, f"unknown option --{tok.text}")
            if takes_value != (tok.value is not None):
                needs = "requires a value (--name=value)" if takes_value else "takes no value"
                raise self.error(tok, f"option --{tok.text} {needs}")
            options[tok.text] = tok.value if tok.value is not None else ""
        script = Script(options=options, events=[], path=self.path)
        if self.peek().kind == "BACKTICK":
            tok = self.advance()
            script.init_command = CommandEvent(
                line=tok.line, time=TimeSpec("absolute"), command=tok.text, role="init"
            )
        while (tok := self.peek()).kind != "EOF":
            if tok.kind == "BACKTICK" and self.peek(1).kind == "EOF" and script.events:
                self.advance()
                script.cleanup_command = CommandEvent(
                    line=tok.line, time=TimeSpec("absolute"), command=tok.text, role="cleanup"
                )
                break
            if tok.kind == "OPTION":
                raise self.error(tok, f"option --{tok.text} must come before the first event")
            if tok.kind == "BACKTICK":
                raise self.error(tok, "a `command` between events needs a time (e.g. +0 `...`)")
            script.events.append(self.event())
        if not script.events:
            raise self.error(self.peek(), "script has no events")
        return script

    def event(self) -> Event:
        first = self.peek()
        time = self.time_spec()
        tok = self.peek()
        event: Event
        if tok.kind == "ELLIPSIS":
            self.advance()
            time.block_end = self.time_value()
            if time.kind != "absolute" and time.kind != "relative":
                raise self.error(first, "a blocking system call needs a plain start time (T...E)")
            if time.block_end < time.start:
                raise self.error(first, "blocking system call ends before it starts")
            if not (self.peek().kind == "WORD" and self.peek(1).is_punct("(")):
                raise self.unexpected(self.peek(), "a system call after '...end-time'")
            event = self.syscall(first.line, time)
        elif tok.is_punct("<") or tok.is_punct(">"):
            event = self.packet(first.line, time)
        elif tok.kind == "BACKTICK":
            self.advance()
            event = CommandEvent(line=first.line, time=time, command=tok.text)
        elif tok.kind == "CODE":
            self.advance()
            event = CodeEvent(line=first.line, time=time, code=tok.text)
        elif tok.kind == "WORD" and self.peek(1).is_punct("("):
            event = self.syscall(first.line, time)
        else:
            raise self.unexpected(tok, "a packet ('<' or '>'), a system call, a `command` or %{ code }%")
        if time.kind in ("any", "range") and not (isinstance(event, PacketEvent) and event.outbound):
            what = "'*'" if time.kind == "any" else "a time range"
            raise self.error(first, f"{what} can only be used with outbound packets")
        return event

    # ----------------------------------------------------------------- time

    def time_value(self) -> float:
        tok = self.peek()
        if tok.kind not in ("INT", "FLOAT"):
            raise self.unexpected(tok, "a time in seconds")
        self.advance()
        value = float(tok.text)
        if value < 0:
            raise self.error(tok, f"negative time {tok.text}")
        if not math.isfinite(value) or value > _MAX_TIME:
            raise self.error(tok, f"time {tok.text} too large")
        return round(value, 6)  # packetdrill keeps microseconds

    def time_spec(self) -> TimeSpec:
        tok = self.peek()
        if tok.is_punct("*"):
            self.advance()
            return TimeSpec("any")
        if tok.kind not in ("INT", "FLOAT") and not tok.is_punct("+"):
            raise self.unexpected(tok, "an event time (e.g. 0, +0.1, *, +.1~+.2)")
        relative = self.accept_punct("+")
        start = self.time_value()
        if not self.peek().is_punct("~"):
            return TimeSpec("relative" if relative else "absolute", start, relative=relative)
        tilde = self.advance()
        if self.accept_punct("+") != relative:
            raise self.error(tilde, "a time range must be absolute (a~b) or relative on both sides (+a~+b)")
        end = self.time_value()
        if end < start:
            raise self.error(tilde, "time range is backwards")
        return TimeSpec("range", start, end, relative=relative)

    # ----------------------------------------------------------------- packets

    def packet(self, line: int, time: TimeSpec) -> PacketEvent:
        dtok = self.advance()
        direction: Direction = "<" if dtok.text == "<" else ">"
        pkt = PacketEvent(line=line, time=time, direction=direction)
        while self.peek().kind == "WORD" and self.peek().text in _ENCAP_WORDS:
            pkt.encapsulation.append(self.encapsulation())
            pkt.unsupported.append(f"{pkt.encapsulation[-1].kind} encapsulation")
        if self.peek().is_punct("[") or self.peek().is_punct("("):
            pkt.ip = self.ip_info(pkt)
        if self.peek().is_word("udp"):
            self.advance()
            self.udp(pkt)
        elif self.peek().is_word("icmp"):
            self.advance()
            self.icmp(pkt)
        else:
            self.tcp(pkt)
        return pkt

    def encapsulation(self) -> Encapsulation:
        kind = self.advance()
        depth = 0
        while True:
            tok = self.peek()
            if tok.kind == "EOF":
                raise self.unexpected(tok, f"':' ending the {kind.text} encapsulation")
            self.advance()
            if tok.kind == "PUNCT" and tok.text in "([{":
                depth += 1
            elif tok.kind == "PUNCT" and tok.text in ")]}":
                depth -= 1
            elif tok.is_punct(":") and depth <= 0:
                return Encapsulation(kind.text, " ".join(self.text[kind.end : tok.start].split()))

    def ip_info(self, pkt: PacketEvent) -> IpInfo:
        close = "]" if self.advance().text == "[" else ")"
        info = IpInfo()
        while True:
            tok = self.advance()
            if tok.kind == "WORD" and tok.text in _ECN_WORDS:
                if tok.text == "ect01" and pkt.inbound:
                    raise self.error(tok, "[ect01] can only be used with outbound packets")
                info.ecn = tok.text  # type: ignore[assignment]  # checked against _ECN_WORDS
            elif tok.is_word("tos"):
                info.tos = self.expect_int("tos", _U8, allow_hex=True)
            elif tok.is_word("ttl"):
                info.ttl = self.expect_int("ttl", _U8, allow_hex=True)
            elif tok.is_word("flowlabel"):
                info.flowlabel = self.expect_int("flowlabel", _U20, allow_hex=True)
                pkt.unsupported.append("IPv6 flow label")
            else:
                raise self.unexpected(tok, "noecn, ect0, ect1, ce, ect01, tos N, ttl N or flowlabel N")
            if self.accept_punct(","):
                continue
            self.expect_punct(close, f"',' or '{close}' in the ip info")
            return info

    def ports(self, pkt: PacketEvent) -> None:
        if self.peek().kind == "INT" and self.peek(1).is_punct(">"):
            pkt.src_port = self.expect_int("source port", _U16)
            self.advance()
            pkt.dst_port = self.expect_int("destination port", _U16)

    def udp(self, pkt: PacketEvent) -> None:
        pkt.protocol = "udp"
        pkt.unsupported.append("UDP packet")
        self.ports(pkt)
        self.expect_punct("(", "'(' before the UDP payload length")
        pkt.seq_len = pkt.seq_end = self.expect_int("UDP payload length", _U16)
        self.expect_punct(")")

    def icmp(self, pkt: PacketEvent) -> None:
        pkt.protocol = "icmp"
        tok = self.peek()
        if tok.kind != "WORD":
            raise self.unexpected(tok, "an ICMP type name (e.g. unreachable)")
        info = IcmpInfo(type=self.advance().text)
        tok = self.peek()
        if tok.kind in ("WORD", "INT") and tok.text not in ("mtu", "id"):
            info.code = self.advance().text
        if self.peek().is_word("mtu"):
            self.advance()
            info.mtu = self.expect_int("ICMP mtu", _U16)
        if self.peek().is_word("id"):
            self.advance()
            info.echo_id = self.expect_int("ICMP echo id", _U16)
        if self.accept_punct("["):
            if self.peek().is_word("udp", "raw"):
                info.echoed_protocol = "udp" if self.advance().text == "udp" else "raw"
                self.expect_punct("(")
                info.echoed_len = self.expect_int("echoed payload length", _U16)
                self.expect_punct(")")
            else:
                start, _end, length = self.seq()
                info.echoed_seq_start, info.echoed_len = start, length
            self.expect_punct("]", "']' after the echoed packet")
        pkt.icmp = info

    def flags(self, pkt: PacketEvent) -> None:
        tok = self.peek()
        if tok.is_punct("-"):
            self.advance()
            pkt.flags = ""
            return
        text = ""
        if tok.kind == "WORD" or (tok.kind == "INT" and tok.text in _ACE_DIGITS):
            bad = set(tok.text) - _FLAG_LETTERS - _ACE_DIGITS
            digits = [ch for ch in tok.text if ch in _ACE_DIGITS]
            if bad or len(digits) > 1 or (digits and set(tok.text) & set("EWA")):
                raise self.error(tok, f"unknown TCP flag(s) in {tok.text!r}")
            text = self.advance().text
        nxt = self.peek()
        if nxt.is_punct("."):
            self.advance()
            text += "."
        elif (nxt.kind == "FLOAT" and nxt.text[:1] == "." and nxt.text[1:] in _ACE_DIGITS
              and not any(ch in _ACE_DIGITS for ch in text)):
            # ".5", "P.5": ACK with an AccECN ACE value (RFC 9768 §3.2.2), lexed as a float.
            self.advance()
            text += nxt.text
        if not text:
            raise self.unexpected(tok, "TCP flags (e.g. S, S., P., ., F., R, -), 'udp' or 'icmp'")
        pkt.flags = text

    def seq(self) -> tuple[int, int, int]:
        first = self.peek()
        start = self.expect_int("start sequence number", _U32)
        self.expect_punct(":", "':' in start:end(length)")
        end = self.expect_int("end sequence number", _U32)
        self.expect_punct("(", "'(' in start:end(length)")
        length = self.expect_int("payload length", _U16)
        self.expect_punct(")", "')' in start:end(length)")
        if end != start + length:
            raise self.error(first, f"inconsistent sequence numbers: {start}:{end} is not {length} bytes")
        return start, end, length

    def tcp(self, pkt: PacketEvent) -> None:
        self.ports(pkt)
        self.flags(pkt)
        pkt.seq_start, pkt.seq_end, pkt.seq_len = self.seq()
        if self.peek().is_word("ack"):
            self.advance()
            pkt.ack = self.expect_int("ack number", _U32)
        if self.peek().is_word("win"):
            self.advance()
            pkt.win = self.expect_int("window", _U16)
        if self.peek().is_word("urg"):
            self.advance()
            pkt.urg = self.expect_int("urgent pointer", _U16)
        if pkt.inbound and pkt.win is None:
            # packetdrill has no default window to inject; the runner needs an explicit one.
            raise ScriptSyntaxError(self.path, pkt.line, "inbound TCP packets need a window (win N)")
        if self.peek().is_punct("<"):
            lt = self.advance()
            pkt.options_absent = False
            if self.peek().kind == "ELLIPSIS" and self.peek(1).is_punct(">"):
                self.advance()
                self.advance()
                if pkt.inbound:
                    raise self.error(lt, "<...> for TCP options can only be used with outbound packets")
                pkt.options = None
            else:
                pkt.options = self.tcp_options(pkt)
        if self.peek().is_word("payload"):
            ptok = self.advance()
            value, _raw = self.strings("the payload string")
            if len(value) != pkt.seq_len:
                raise self.error(
                    ptok, f"payload has {len(value)} bytes but the segment length is {pkt.seq_len}"
                )
            pkt.payload = value

    def tcp_options(self, pkt: PacketEvent) -> list[TcpOption]:
        options: list[TcpOption] = []
        while True:
            options.append(self.tcp_option(pkt))
            if self.accept_punct(","):
                continue
            self.expect_punct(">", "',' or '>' in the TCP option list")
            return options

    def tcp_option(self, pkt: PacketEvent) -> TcpOption:
        tok = self.peek()
        if tok.kind != "WORD":
            raise self.unexpected(tok, "a TCP option")
        self.advance()
        name = tok.text
        opt: TcpOption
        if name in ("nop", "eol", "sackOK"):
            opt = TcpOption(name)
        elif name == "mss":
            opt = TcpOption(name, (self.expect_int("mss value", _U16),))
        elif name == "wscale":
            opt = TcpOption(name, (self.expect_int("window scale shift count", _U8),))
        elif name == "sack":
            blocks: list[int] = []
            while self.peek().kind == "INT":
                blocks.append(self.expect_int("SACK left edge", _U32))
                self.expect_punct(":", "':' in a SACK block")
                blocks.append(self.expect_int("SACK right edge", _U32))
            if not blocks:
                raise self.unexpected(self.peek(), "SACK blocks (left:right)")
            opt = TcpOption(name, tuple(blocks))
        elif name == "TS":
            if not self.peek().is_word("val"):
                raise self.unexpected(self.peek(), "'val' after TS")
            self.advance()
            val = self.expect_int("TS val", _U32)
            if not self.peek().is_word("ecr"):
                raise self.unexpected(self.peek(), "'ecr' after TS val")
            self.advance()
            opt = TcpOption(name, (val, self.expect_int("TS ecr", _U32)))
        elif name == "md5":
            if self.accept_punct("*"):
                opt = TcpOption(name, wildcard=True)
            else:
                opt = self.hex_option(name, required=True, limit=_MAX_MD5_BYTES)
        elif name in ("FO", "FOEXP"):
            opt = self.hex_option(name, required=False, limit=_MAX_COOKIE_BYTES[name])
        elif name in ("ECN", "AccECN"):
            opt = self.accecn_option()
        else:
            raise self.error(tok, f"unknown TCP option {name!r}")
        opt.raw = " ".join(self.text[tok.start : self.toks[self.i - 1].end].split())
        return opt

    def accecn_option(self) -> TcpOption:
        """``ECN e1b N ceb N e0b N`` (any prefix of one of the two orders): the AccECN option
        with its 24-bit fields as written; ``ECN1`` (kind 174) when EE1B leads, else ``ECN``
        (kind 172). An empty ``ECN`` is the 2-byte option."""
        names: list[str] = []
        values: list[int] = []
        while self.peek().is_word(*_ACCECN_FIELDS):
            names.append(self.advance().text)
            values.append(self.expect_int(f"{names[-1]} value", 0xFFFFFF))
        order1 = bool(names) and names[0] == "e1b"
        want = ("e1b", "ceb", "e0b") if order1 else _ACCECN_FIELDS
        if names != list(want[: len(names)]):
            order = " ".join(want)
            raise self.error(self.peek(), f"AccECN fields {' '.join(names)} not in the order {order}")
        data = b"".join(v.to_bytes(3, "big") for v in values)
        return TcpOption("ECN1" if order1 else "ECN", tuple(values), data=data)

    def hex_option(self, name: str, *, required: bool, limit: int) -> TcpOption:
        tok = self.peek()
        if tok.kind not in ("WORD", "INT"):
            if required:
                raise self.unexpected(tok, f"a hex string after {name}")
            return TcpOption(name, data=b"")
        self.advance()
        text = tok.text
        if _HEX.fullmatch(text) is None:
            if _IDENT.fullmatch(text):
                # An undefined -D symbol (e.g. TFO_COOKIE): left for the runner to resolve.
                return TcpOption(name, symbol=text)
            raise self.error(tok, f"{name} value {text!r} is not a valid hex string")
        if len(text) % 2:
            raise self.error(tok, f"{name} value {text!r} has an odd number of hex digits")
        data = bytes.fromhex(text)
        if len(data) > limit:
            raise self.error(tok, f"{name} value of {len(data)} bytes exceeds the maximum of {limit}")
        return TcpOption(name, data=data)

    # ----------------------------------------------------------------- syscalls

    def syscall(self, line: int, time: TimeSpec) -> SyscallEvent:
        name = self.advance().text
        self.expect_punct("(")
        args = self.expr_list(")", 1)
        if not self.peek().is_punct("="):
            raise self.unexpected(self.peek(), f"'= result' after {name}(...)")
        self.advance()
        result = self.expr(1)
        event = SyscallEvent(line=line, time=time, name=name, args=args, result=result)
        if self.peek().kind == "WORD":
            event.errno = self.advance().text
            if self.peek().is_punct("("):
                event.errno_text = self.note()
        if self.peek().is_punct("("):
            event.note = self.note()
        return event

    def note(self) -> str:
        """The free text of ``(Operation now in progress)``, taken from the source."""
        open_tok = self.advance()
        depth = 1
        while True:
            tok = self.peek()
            if tok.kind == "EOF":
                raise self.unexpected(tok, "')' closing the note")
            self.advance()
            if tok.is_punct("("):
                depth += 1
            elif tok.is_punct(")"):
                depth -= 1
                if depth == 0:
                    return " ".join(self.text[open_tok.end : tok.start].split())

    # ----------------------------------------------------------------- expressions

    def expr_list(self, close: str, depth: int) -> list[Expr]:
        items: list[Expr] = []
        if self.accept_punct(close):
            return items
        while True:
            items.append(self.expr(depth))
            if self.accept_punct(","):
                continue
            self.expect_punct(close, f"',' or '{close}'")
            return items

    def expr(self, depth: int) -> Expr:
        left = self.primary(depth)
        while self.peek().is_punct("|"):
            self.advance()
            left = BinOr(left, self.primary(depth))
        return left

    def strings(self, wanted: str) -> tuple[bytes, str]:
        """One or more adjacent string literals (C-style concatenation), decoded."""
        if self.peek().kind != "STRING":
            raise self.unexpected(self.peek(), wanted)
        value = bytearray()
        raw = []
        while self.peek().kind == "STRING":
            tok = self.advance()
            try:
                value += decode_c_string(tok.text)
            except ValueError as err:
                raise self.error(tok, f"bad string literal: {err}") from None
            raw.append(tok.text)
        return bytes(value), "".join(raw)

    def primary(self, depth: int) -> Expr:
        tok = self.peek()
        if depth > _MAX_DEPTH:
            raise self.error(tok, "expression nested too deeply")
        if tok.kind == "ELLIPSIS":
            self.advance()
            return EllipsisExpr()
        if tok.kind in ("INT", "HEX"):
            self.advance()
            return Int(int(tok.text, 16) if tok.kind == "HEX" else int(tok.text), tok.text)
        if tok.kind == "STRING":
            value, raw = self.strings("a string")
            ellipsis = self.peek().kind == "ELLIPSIS"
            if ellipsis:
                self.advance()
            return String(value, raw, ellipsis)
        if tok.is_punct("["):
            self.advance()
            return List(self.expr_list("]", depth + 1))
        if tok.is_punct("{"):
            self.advance()
            return Struct(self.expr_list("}", depth + 1))
        if tok.kind == "WORD":
            self.advance()
            if self.peek().is_punct("("):
                self.advance()
                args = self.expr_list(")", depth + 1)
                if self.accept_punct("="):
                    return Field(tok.text, self.expr(depth + 1), args)
                return Call(tok.text, args)
            if self.accept_punct("="):
                return Field(tok.text, self.expr(depth + 1))
            return Symbol(tok.text)
        raise self.unexpected(tok, "an expression")
