"""Tokenizer for packetdrill scripts (see :mod:`usertcp.drill.parser` for the grammar).

Like packetdrill's flex scanner, newlines are not significant and the longest match wins (so
``3021b9d889017eeb`` is a word, ``0x10`` a hex number, ``192.168.0.1`` an address and ``0...0.2``
the tokens ``0``, ``...``, ``0.2``).  ``-D``/``--define`` symbols are substituted here: a word
equal to a defined name (and not a grammar keyword) is replaced by the tokens of its value.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Literal, TypeAlias

TokenKind: TypeAlias = Literal[
    "INT", "HEX", "FLOAT", "WORD", "ADDR4", "ADDR6", "STRING", "BACKTICK", "CODE", "ELLIPSIS",
    "OPTION", "PUNCT", "EOF",
]  # fmt: skip


class ScriptSyntaxError(Exception):
    """A script could not be parsed; ``line`` is 1-based (0 when unknown)."""

    def __init__(self, path: str, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}")
        self.path = path
        self.line = line
        self.message = message


@dataclass(slots=True)
class Token:
    kind: TokenKind
    text: str  # the token's value text (strings without quotes, options as name)
    line: int
    start: int  # offsets into the source, for error messages and raw-text slices
    end: int
    value: str | None = None  # OPTION: the text after '=' (None when absent)

    def is_punct(self, char: str) -> bool:
        return self.kind == "PUNCT" and self.text == char

    def is_word(self, *words: str) -> bool:
        return self.kind == "WORD" and (not words or self.text in words)


# Words that packetdrill's lexer turns into keywords: a -D define cannot replace them.
_KEYWORD_TEXT = """sa_family sin_port sin_addr msg_name msg_iov msg_flags msg_control cmsg_data cmsg_level
    cmsg_type ee_errno ee_origin ee_type ee_code ee_info ee_data scm_sec scm_nsec fd u32 u64 ptr
    events revents onoff linger htons ipv4 ipv6 icmp udp GREv0 gre raw sum off key seq none
    checksum present mpls label tc ttl inet_addr inet6_addr ack eol ecr mss mtu nop sack sackOK
    md5 TS FO FOEXP tos flowlabel flags Flags val win urg wscale ect01 ect0 ect1 noecn ce id mut
    trun ins ip tcp ihl source_port"""
KEYWORDS: frozenset[str] = frozenset(_KEYWORD_TEXT.split())

# Longest-match candidates, in flex rule order (earlier wins a tie).
_NUMERIC_RULES: tuple[tuple[TokenKind, re.Pattern[str]], ...] = (
    ("FLOAT", re.compile(r"-?[0-9]*\.[0-9]+")),
    ("INT", re.compile(r"-?[0-9]+")),
    ("HEX", re.compile(r"0x[0-9a-fA-F]+")),
    ("WORD", re.compile(r"[A-Za-z0-9_]+")),
    ("ADDR4", re.compile(r"[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+")),
)
_SEG = r"[0-9a-fA-F]{1,4}"
# IPv6 needs "::" or eight groups, so TCP ranges such as 1:1001 never look like addresses.
_ADDR6 = re.compile(
    rf"(?:{_SEG}:){{7}}{_SEG}|(?:{_SEG}(?::{_SEG})*)?::(?:(?:{_SEG}:)*[0-9]+(?:\.[0-9]+){{3}}|{_SEG}(?::{_SEG})*)?"
)
_OPTION = re.compile(r"--([A-Za-z0-9_]+)")
_OPTION_VALUE = re.compile(r'"[^"\n]*"|\S*')
_WS = re.compile(r"[ \t\r\n\f\v]+")
_MAX_DIGITS = 64  # beyond this a literal is certainly a typo; also keeps int() within its limits


class _Lines:
    def __init__(self, text: str) -> None:
        self._starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self._starts, offset)


def tokenize(
    text: str,
    *,
    path: str = "<string>",
    defines: dict[str, str] | None = None,
    script_defines: dict[str, str] | None = None,
) -> list[Token]:
    """Split ``text`` into tokens, ending with an EOF token.

    ``defines`` are the command-line ``-D`` symbols; ``--define=NAME=value`` options met in the
    script are added to ``script_defines`` (if given) and applied to the rest of the text, but
    never override a command-line define (packetdrill lets the command line win).
    """
    lines = _Lines(text)
    active: dict[str, str] = dict(defines or {})
    cmdline = frozenset(active)
    tokens: list[Token] = []
    i = 0
    n = len(text)

    def fail(offset: int, message: str) -> ScriptSyntaxError:
        return ScriptSyntaxError(path, lines.line_of(offset), message)

    while i < n:
        ws = _WS.match(text, i)
        if ws:
            i = ws.end()
            continue
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        line = lines.line_of(i)
        if c == "/" and nxt == "/":
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        if c == "/" and nxt == "*":
            j = text.find("*/", i + 2)
            if j < 0:
                raise fail(i, "unterminated /* comment")
            i = j + 2
            continue
        if c == "%" and nxt == "{":
            j = text.find("}%", i + 2)
            if j < 0:
                raise fail(i, "unterminated %{ code block (missing }%)")
            # Strip only blanks, as packetdrill does: Python code keeps its inner layout.
            tokens.append(Token("CODE", text[i + 2 : j].strip(" \t"), line, i, j + 2))
            i = j + 2
            continue
        if c in '"`':
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            if j >= n:
                what = "string" if c == '"' else "backtick command"
                raise fail(i, f"unterminated {what}")
            tokens.append(Token("STRING" if c == '"' else "BACKTICK", text[i + 1 : j], line, i, j + 1))
            i = j + 1
            continue
        if c == "-" and nxt == "-":
            m = _OPTION.match(text, i)
            if m is None:
                raise fail(i, "expected an option name after '--'")
            j = m.end()
            value: str | None = None
            if j < n and text[j] == "=":
                vm = _OPTION_VALUE.match(text, j + 1)
                assert vm is not None  # the pattern matches the empty string
                value = vm.group()
                if len(value) >= 2 and value[0] == value[-1] == '"':
                    value = value[1:-1]
                j = vm.end()
            name = m.group(1)
            if name == "define" and value is not None and "=" in value:
                sym, _, val = value.partition("=")
                if sym and sym not in cmdline:
                    active[sym] = val
                    if script_defines is not None:
                        script_defines[sym] = val
            tokens.append(Token("OPTION", name, line, i, j, value))
            i = j
            continue
        if text.startswith("...", i):
            tokens.append(Token("ELLIPSIS", "...", line, i, i + 3))
            i += 3
            continue
        if c.isascii() and (c.isalnum() or c == "_" or c == ":" or (c in ".-" and nxt.isdigit())):
            best_kind: TokenKind | None = None
            best_end = i
            for kind, rx in _NUMERIC_RULES:
                m = rx.match(text, i)
                if m and m.end() > best_end:
                    best_kind, best_end = kind, m.end()
            if c == ":" or c in "0123456789abcdefABCDEF":
                m6 = _ADDR6.match(text, i)
                if m6 and m6.end() > best_end:
                    best_kind, best_end = "ADDR6", m6.end()
            if best_kind is not None:
                word = text[i:best_end]
                if best_kind in ("INT", "FLOAT", "HEX") and len(word) > _MAX_DIGITS:
                    raise fail(i, f"numeric literal too long: {word[:20]}...")
                if best_kind == "WORD" and word in active and word not in KEYWORDS:
                    tokens.extend(_expand(word, active[word], line, i, best_end, path))
                else:
                    tokens.append(Token(best_kind, word, line, i, best_end))
                i = best_end
                continue
        tokens.append(Token("PUNCT", c, line, i, i + 1))
        i += 1
    # Report "end of script" errors on the last line that has text, not after the final newline.
    tokens.append(Token("EOF", "", lines.line_of(len(text.rstrip()) - 1) if text.strip() else 1, n, n))
    return tokens


def _expand(name: str, value: str, line: int, start: int, end: int, path: str) -> list[Token]:
    """The tokens a defined symbol stands for, placed at the symbol's position."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in '"`':
        kind: TokenKind = "STRING" if value[0] == '"' else "BACKTICK"
        return [Token(kind, value[1:-1], line, start, end)]
    try:
        # No defines: a symbol's value is not expanded again (no recursion, no loops).
        inner = tokenize(value, path=path)[:-1]
    except ScriptSyntaxError as err:
        raise ScriptSyntaxError(path, line, f"bad value for define {name}: {err.message}") from None
    return [Token(t.kind, t.text, line, start, end, t.value) for t in inner]
