"""Tests for the packetdrill front end: lexer/parser, AST, timing rules and defaults.

The upstream corpus is GPL test data: it is read from ../shared/packetdrill at test time and
never copied here.  Spot checks locate their line by content so they survive re-numbering.
"""

from __future__ import annotations

import errno as errno_mod
import math
import os
import re
import socket
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from usertcp.drill import defaults, timing
from usertcp.drill.ast import (
    BinOr,
    Call,
    CodeEvent,
    CommandEvent,
    EllipsisExpr,
    Event,
    Field,
    Int,
    List,
    PacketEvent,
    Script,
    String,
    Struct,
    Symbol,
    SyscallEvent,
    TimeSpec,
)
from usertcp.drill.parser import ScriptSyntaxError, decode_c_string, parse_file, parse_script

ROOT = Path(__file__).resolve().parents[1]


def _corpus_dir() -> Path | None:
    for candidate in (ROOT / ".." / "shared" / "packetdrill", Path("/work/shared/packetdrill")):
        if candidate.is_dir():
            return candidate.resolve()
    return None


CORPUS = _corpus_dir()
CORPUS_FILES = sorted(CORPUS.rglob("*.pkt")) if CORPUS else []
V4_DEFINES = defaults.DEFAULT_DEFINES["ipv4"]
needs_corpus = pytest.mark.skipif(CORPUS is None, reason="packetdrill corpus not found")


def corpus(rel: str) -> Path:
    if CORPUS is None:
        pytest.skip("packetdrill corpus not found")
    path = CORPUS / rel
    if not path.exists():
        pytest.skip(f"{rel} not in the corpus")
    return path


def event_on(script: Script, path: Path, needle: str) -> Event:
    """The event whose time token is on the first line containing ``needle``."""
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if needle in text and not text.lstrip().startswith("//"):
            for event in script.events:
                if event.line == number:
                    return event
            raise AssertionError(f"no event on line {number} ({text!r})")
    raise AssertionError(f"{needle!r} not found in {path}")


def parse(body: str, defines: dict[str, str] | None = None) -> Script:
    return parse_script(body, path="t.pkt", defines=defines)


def one(body: str, defines: dict[str, str] | None = None) -> Event:
    script = parse(body, defines)
    assert len(script.events) == 1
    return script.events[0]


# --------------------------------------------------------------------------- corpus


@needs_corpus
def test_corpus_is_there() -> None:
    assert len(CORPUS_FILES) >= 50


@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: str(p.relative_to(CORPUS)) if CORPUS else "")
def test_corpus_file_parses(path: Path) -> None:
    script = parse_file(path)
    assert script.events
    assert script.path == str(path)
    lines = [ev.line for ev in script.events]
    assert lines == sorted(lines) and lines[0] >= 1
    assert timing.check_first_event(script) is None
    for prev, cur in zip(script.events, script.events[1:], strict=False):
        assert timing.check_order(prev, cur) is None
    # With the runner's -D symbols every cookie is concrete.
    defined = parse_file(path, defines=V4_DEFINES)
    for ev in defined.events:
        if isinstance(ev, PacketEvent) and ev.options:
            assert all(opt.symbol is None for opt in ev.options)


@needs_corpus
def test_corpus_symbols_are_all_known() -> None:
    symbols: set[str] = set()
    errnos: set[str] = set()
    code_names: set[str] = set()
    for path in CORPUS_FILES:
        script = parse_file(path)
        symbols |= script.symbols()
        errnos |= script.errnos()
        for ev in script.events:
            if isinstance(ev, CodeEvent):
                code_names |= set(re.findall(r"\bTCPI?_[A-Za-z0-9_]+\b", ev.code))
    assert symbols  # the walk found something
    unknown = symbols - defaults.SYMBOLS.keys() - defaults.UNSUPPORTED_SYMBOLS.keys()
    assert not unknown
    assert not errnos - defaults.ERRNO.keys()
    assert not code_names - defaults.CODE_CONSTANTS.keys()


def test_time_kinds_in_corpus() -> None:
    path = corpus("gtests/net/tcp/nagle/sendmsg_msg_more.pkt")
    script = parse_file(path)
    first = script.events[0]
    assert isinstance(first, SyscallEvent) and first.name == "socket"
    assert first.time == TimeSpec("absolute", 0.0)
    ev = event_on(script, path, "+.01 < . 1:1(0) ack 1 win 257")
    assert ev.time == TimeSpec("relative", 0.01, relative=True)
    ev = event_on(script, path, "+.21~+.215")
    assert ev.time == TimeSpec("range", 0.21, 0.215, relative=True)
    assert isinstance(ev, PacketEvent) and ev.outbound and ev.flags == "P." and ev.seq_len == 40

    path = corpus("gtests/net/tcp/fastopen/server/fin-close-socket.pkt")
    ev = event_on(parse_file(path), path, "* > F.")
    assert ev.time.kind == "any"
    assert isinstance(ev, PacketEvent) and ev.flags == "F." and ev.ack == 12


def test_syn_with_options_and_cookie_define() -> None:
    path = corpus("gtests/net/tcp/fastopen/server/basic-rw.pkt")
    ev = event_on(parse_file(path), path, "< S 0:10(10)")
    assert isinstance(ev, PacketEvent)
    assert (ev.direction, ev.flags, ev.seq_start, ev.seq_end, ev.seq_len) == ("<", "S", 0, 10, 10)
    assert ev.win == 32792 and ev.ack is None and not ev.options_absent
    assert ev.options is not None
    assert [o.name for o in ev.options] == ["mss", "sackOK", "nop", "nop", "FOEXP"]
    assert ev.options[0].values == (1460,) and ev.options[0].kind == 2
    fo = ev.options[-1]
    assert fo.symbol == "TFO_COOKIE" and fo.data is None and fo.kind == 254

    defined = event_on(parse_file(path, defines=V4_DEFINES), path, "< S 0:10(10)")
    assert isinstance(defined, PacketEvent) and defined.options is not None
    assert defined.options[-1].data == bytes.fromhex("3021b9d889017eeb")
    assert defined.options[-1].symbol is None

    synack = event_on(parse_file(path), path, "> S. 0:0(0) ack 11")
    assert isinstance(synack, PacketEvent) and synack.ack == 11 and synack.win is None


def test_dont_care_options_vs_no_options() -> None:
    path = corpus("gtests/net/tcp/close/close-on-syn-sent.pkt")
    ev = event_on(parse_file(path), path, "> S 0:0(0) <...>")
    assert isinstance(ev, PacketEvent)
    assert ev.options is None and not ev.options_absent

    path = corpus("gtests/net/tcp/blocking/blocking-accept.pkt")
    ev = event_on(parse_file(path), path, "+0 > P. 1:2001(2000) ack 1")
    assert isinstance(ev, PacketEvent)
    assert ev.options == [] and ev.options_absent


def test_syscall_with_errno() -> None:
    path = corpus("gtests/net/tcp/close/close-on-syn-sent.pkt")
    ev = event_on(parse_file(path), path, "EINPROGRESS")
    assert isinstance(ev, SyscallEvent) and ev.name == "connect"
    assert ev.args == [Int(3, "3"), EllipsisExpr(), EllipsisExpr()]
    assert ev.result == Int(-1, "-1")
    assert ev.errno == "EINPROGRESS" and ev.errno_text == "Operation now in progress"
    assert ev.note is None and not ev.blocking


def test_blocking_accept() -> None:
    path = corpus("gtests/net/tcp/blocking/blocking-accept.pkt")
    ev = event_on(parse_file(path), path, "+0...0.200 accept")
    assert isinstance(ev, SyscallEvent) and ev.name == "accept" and ev.blocking
    assert ev.time == TimeSpec("relative", 0.0, relative=True, block_end=0.2)
    assert ev.result == Int(4, "4")


def test_struct_arguments() -> None:
    path = corpus("gtests/net/tcp/nagle/sendmsg_msg_more.pkt")
    script = parse_file(path)
    ev = next(e for e in script.events if isinstance(e, SyscallEvent) and e.result == Int(495, "495"))
    msg = ev.args[1]
    assert isinstance(msg, Struct)
    named = msg.named()
    assert named["msg_name"] == Field("msg_name", EllipsisExpr(), [EllipsisExpr()])
    iov = named["msg_iov"]
    assert iov.count == [Int(3, "3")] and isinstance(iov.value, List)
    assert [item for item in iov.value.items] == [
        Struct([EllipsisExpr(), Int(100, "100")]),
        Struct([EllipsisExpr(), Int(200, "200")]),
        Struct([EllipsisExpr(), Int(195, "195")]),
    ]
    assert msg.get("msg_flags") == Int(0, "0")
    assert ev.args[2] == Symbol("MSG_MORE")


def test_code_block_and_commands() -> None:
    path = corpus("gtests/net/tcp/fastopen/server/basic-rw.pkt")
    script = parse_file(path)
    ev = event_on(script, path, "%{")
    assert isinstance(ev, CodeEvent)
    assert ev.code == "assert (tcpi_options & TCPI_OPT_SYN_DATA) != 0, tcpi_options"
    assert script.init_command is not None and script.init_command.role == "init"
    assert script.init_command.command == "../../common/defaults.sh"

    path = corpus("gtests/net/tcp/fastopen/server/pure-syn-data.pkt")
    script = parse_file(path)
    ev = event_on(script, path, "tcp_ecn=2`")
    assert isinstance(ev, CommandEvent) and ev.role == "event"
    assert ev.command == "sysctl -q net.ipv4.tcp_ecn=2"
    assert script.cleanup_command is not None
    assert script.cleanup_command.command == "/tmp/sysctl_restore_${PPID}.sh"
    assert script.cleanup_command.role == "cleanup"


def test_multiline_init_command_and_icmp() -> None:
    path = corpus("gtests/net/tcp/fastopen/server/icmp-baseline.pkt")
    script = parse_file(path)
    assert script.init_command is not None
    assert "set_sysctls.py /proc/sys/net/ipv4/tcp_fastopen=0x30003" in script.init_command.command
    ev = event_on(script, path, "< icmp unreachable CODE")
    assert isinstance(ev, PacketEvent) and ev.protocol == "icmp" and ev.icmp is not None
    assert (ev.icmp.type, ev.icmp.code) == ("unreachable", "CODE")

    path = corpus("gtests/net/tcp/fastopen/server/icmp-before-accept.pkt")
    ev = event_on(parse_file(path), path, "icmp unreachable [5000:6000(1000)]")
    assert isinstance(ev, PacketEvent) and ev.icmp is not None
    assert ev.icmp.code is None and (ev.icmp.echoed_seq_start, ev.icmp.echoed_len) == (5000, 1000)


def test_top_of_file_options() -> None:
    script = parse_file(corpus("gtests/net/tcp/fastopen/server/simple1.pkt"))
    assert script.options == {"local_ip": "192.168.0.2", "remote_ip": "10.248.0.2"}
    script = parse_file(corpus("gtests/net/tcp/blocking/blocking-read.pkt"))
    assert script.options == {"tolerance_usecs": "10000"}


# --------------------------------------------------------------------------- own scripts


def test_payload_extension() -> None:
    ev = one('0 > P. 1:12(11) ack 1 payload "220 ready\\r\\n"')
    assert isinstance(ev, PacketEvent) and ev.payload == b"220 ready\r\n"
    ev = one('0 < P. 1:5(4) ack 1 win 100 <nop,nop> payload "\\x00\\101" "\\tz"')
    assert isinstance(ev, PacketEvent) and ev.payload == b"\x00A\tz"
    ev = one("0 > P. 1:12(11) ack 1")
    assert isinstance(ev, PacketEvent) and ev.payload is None
    with pytest.raises(ScriptSyntaxError, match="payload has 3 bytes but the segment length is 4") as err:
        parse('\n0 > P. 1:5(4) ack 1 payload "abc"')
    assert err.value.line == 2


def test_md5_options() -> None:
    ev = one("0 > S. 0:0(0) ack 1 <md5 *,mss 1460>")
    assert isinstance(ev, PacketEvent) and ev.options is not None
    assert ev.options[0].wildcard and ev.options[0].kind == 19 and ev.options[0].data is None
    ev = one("0 < . 1:1(0) ack 1 win 10 <md5 000102030405060708090a0b0c0d0e0f>")
    assert isinstance(ev, PacketEvent) and ev.options is not None
    assert ev.options[0].data == bytes(range(16)) and not ev.options[0].wildcard
    with pytest.raises(ScriptSyntaxError, match="exceeds"):
        parse("0 < . 1:1(0) ack 1 win 10 <md5 " + "00" * 17 + ">")


def test_fast_open_and_misc_options() -> None:
    ev = one("0 > S 0:0(0) <mss 1460,sackOK,TS val 100 ecr 0,nop,wscale 8,FO,sack 1:2 3:4,eol>")
    assert isinstance(ev, PacketEvent) and ev.options is not None
    by_name = {o.name: o for o in ev.options}
    assert by_name["TS"].values == (100, 0) and by_name["wscale"].values == (8,)
    assert by_name["FO"].data == b"" and by_name["FO"].kind == 34
    assert by_name["sack"].values == (1, 2, 3, 4)
    assert by_name["TS"].raw == "TS val 100 ecr 0"
    ev = one("0 < S 0:0(0) win 10 <FO 1234123412341234>")  # an all-digit cookie lexes as an int
    assert isinstance(ev, PacketEvent) and ev.options is not None
    assert ev.options[0].data == bytes.fromhex("1234123412341234")
    with pytest.raises(ScriptSyntaxError, match="odd number"):
        parse("0 < S 0:0(0) win 10 <FO abc>")


def test_defines() -> None:
    ev = one("0 < S 0:0(0) win W <FOEXP C>", defines={"C": "aabb", "W": "77"})
    assert isinstance(ev, PacketEvent) and ev.win == 77 and ev.options is not None
    assert ev.options[0].data == b"\xaa\xbb"
    # Keywords cannot be redefined.
    ev = one("0 < S 0:0(0) win 5", defines={"win": "1"})
    assert isinstance(ev, PacketEvent) and ev.win == 5
    # Script --define, overridden by the command line.
    script = parse("--define=X=3\n--define=Y=4\n0 close(X) = Y\n", defines={"Y": "5"})
    ev = script.events[0]
    assert isinstance(ev, SyscallEvent) and ev.args == [Int(3, "3")] and ev.result == Int(5, "5")
    assert script.defines == {"X": "3", "Y": "5"}
    ev = one("0 write(3, S, 2) = 2", defines={"S": '"hi"'})
    assert isinstance(ev, SyscallEvent) and ev.args[1] == String(b"hi", "hi")


def test_expressions() -> None:
    ev = one(
        "0 poll([{fd=4, events=POLLIN|POLLOUT, revents=0}], 1, 0x10) = -1 EAGAIN "
        "(Resource temporarily unavailable) (a note)"
    )
    assert isinstance(ev, SyscallEvent)
    pollfds = ev.args[0]
    assert isinstance(pollfds, List) and isinstance(pollfds.items[0], Struct)
    assert pollfds.items[0].get("events") == BinOr(Symbol("POLLIN"), Symbol("POLLOUT"))
    assert ev.args[2] == Int(16, "0x10")
    assert (ev.errno, ev.errno_text, ev.note) == ("EAGAIN", "Resource temporarily unavailable", "a note")
    ev = one(
        '0 connect(3, {sa_family=AF_INET, sin_port=htons(8080), sin_addr=inet_addr("192.0.2.1")}, 16) = 0'
    )
    assert isinstance(ev, SyscallEvent) and isinstance(ev.args[1], Struct)
    assert ev.args[1].get("sin_port") == Call("htons", [Int(8080, "8080")])
    assert ev.args[1].get("sin_addr") == Call("inet_addr", [String(b"192.0.2.1", "192.0.2.1")])
    ev = one('0 write(3, "ab\\n"..., 10) = 10 (note only)')
    assert isinstance(ev, SyscallEvent) and ev.args[1] == String(b"ab\n", "ab\\n", ellipsis=True)
    assert ev.note == "note only" and ev.errno is None
    ev = one("0 getpid() = 7")
    assert isinstance(ev, SyscallEvent) and ev.args == []


def test_unsupported_forms_are_marked() -> None:
    ev = one("0 > [ect0] WA.5 1:1(0) ack 1 <ECN e1b 1 ceb 0 e0b 1,nop>")
    assert isinstance(ev, PacketEvent) and ev.ip is not None and ev.ip.ecn == "ect0"
    assert ev.flags == "WA.5" and ev.options is not None      # AccECN forms are supported now
    assert ev.options[0].name == "ECN1" and ev.options[0].values == (1, 0, 1) and not ev.unsupported
    ev = one("0 < udp 5000>8080 (100)")
    assert isinstance(ev, PacketEvent) and ev.protocol == "udp" and ev.seq_len == 100
    assert (ev.src_port, ev.dst_port) == (5000, 8080) and "UDP packet" in ev.unsupported
    ev = one("0 < ipv4 192.0.2.2 > 192.168.0.1: gre: (tos 0x10, flowlabel 0x5) S 0:0(0) win 1")
    assert isinstance(ev, PacketEvent)
    assert [e.kind for e in ev.encapsulation] == ["ipv4", "gre"]
    assert ev.encapsulation[0].text == "192.0.2.2 > 192.168.0.1"
    assert ev.ip is not None and (ev.ip.tos, ev.ip.flowlabel) == (0x10, 5)
    script = parse("0 > - 1:1(0) <...>\n0 < ipv6 fd3d::2 > fd3d::1: S 0:0(0) win 1\n")
    first, second = script.events
    assert isinstance(first, PacketEvent) and first.flags == "" and first.options is None
    assert isinstance(second, PacketEvent) and second.encapsulation[0].text == "fd3d::2 > fd3d::1"
    assert [line for line, _ in script.unsupported()] == [2]


ERROR_CASES = [
    ("0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n+0 < X 0:0(0) win 1\n", 2, "unknown TCP flag"),
    ("\n\n0 < S 0:5(4) win 1", 3, "inconsistent sequence numbers"),
    ("0 socket()=3\n* close(3) = 0\n", 2, "'*' can only be used with outbound packets"),
    ("0 socket()=3\n+0~+1 close(3) = 0\n", 2, "time range can only be used"),
    ("0 socket()=3\n\n+.2~+.1 > S 0:0(0)\n", 3, "time range is backwards"),
    ("0 socket()=3\n+.1~.2 > S 0:0(0)\n", 2, "relative on both sides"),
    ("0 socket()=3\n+0 < S 0:0(0) win 1 <...>\n", 2, "<...> for TCP options"),
    ('0 socket()=3\n+0 write(4, "abc\n\n', 2, "unterminated string"),
    ("0 socket()=3\n/* never\n closed\n", 2, "unterminated /* comment"),
    ("0 socket()=3\n+0 %{ assert 1\n", 2, "unterminated %{ code block"),
    ("0 socket()=3\n+0 `ls\n", 2, "unterminated backtick"),
    ("0 socket()=3\n+0 close(3)\n+0 close(4) = 0\n", 3, "'= result' after close"),
    ("0 socket()=3\n--mss=1000\n", 2, "must come before the first event"),
    ("--bogus=1\n0 socket()=3\n", 1, "unknown option --bogus"),
    ("--strict_segments=1\n0 socket()=3\n", 1, "takes no value"),
    ("--mss\n0 socket()=3\n", 1, "requires a value"),
    ("0 socket()=3\n-1 close(3) = 0\n", 2, "negative time"),
    ("0 socket()=3\n+0 > S 0:0(0) <mms 1460>\n", 2, "unknown TCP option 'mms'"),
    ("// nothing\n", 1, "script has no events"),
    ("`init`\n", 1, "script has no events"),
    ("0 socket()=3\n+0 < . 1:1(0) ack 1\n", 2, "need a window"),
    ("0 socket()=3\n+0.2...0.1 accept(3, ..., ...) = 4\n", 2, "ends before it starts"),
    ("0 socket()=3\n+0 close(" + "9" * 70 + ") = 0\n", 2, "numeric literal too long"),
    ('0 socket()=3\n+0 write(3, "\\q", 1) = 1\n', 2, "unknown escape"),
    ("0 socket()=3\n+0 f(" + "[" * 200 + ") = 0\n", 2, "nested too deeply"),
    ("0 socket()=3\n`mid`\n+0 close(3) = 0\n", 2, "needs a time"),
    ("0 socket()=3\n+0 > S 0:0(0) win 70000\n", 2, "window 70000 out of range"),
    ("0 socket()=3\n+0 > S 4294967296:4294967296(0)\n", 2, "out of range"),
    ("0 socket()=3\n+0 > S 0:0(0) <mss 1460\n+0 close(3) = 0\n", 3, "',' or '>' in the TCP option list"),
    ("0 socket()=3\n+0 hello\n", 2, "expected a packet"),
    ("0 socket()=3\n+0 > [ttl 3, bogus] S 0:0(0)\n", 2, "found 'bogus'"),
    ("0 socket()=3\n+0 < [ect01] S 0:0(0) win 1\n", 2, "[ect01] can only be used with outbound"),
    ("0 socket()=3\n+0 < icmp 5\n", 2, "ICMP type name"),
]


@pytest.mark.parametrize(("text", "line", "message"), ERROR_CASES)
def test_syntax_errors(text: str, line: int, message: str) -> None:
    with pytest.raises(ScriptSyntaxError) as err:
        parse(text)
    assert err.value.line == line, str(err.value)
    assert message in err.value.message
    assert err.value.path == "t.pkt"
    assert str(err.value).startswith(f"t.pkt:{line}: ")


def test_parse_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ScriptSyntaxError, match="cannot read script"):
        parse_file(tmp_path / "missing.pkt")
    bad = tmp_path / "bad.pkt"
    bad.write_bytes(b"0 socket()=3\n+0 \xff\n")
    with pytest.raises(ScriptSyntaxError) as err:
        parse_file(bad)
    assert err.value.line == 2 and err.value.path == str(bad)


def test_decode_c_string() -> None:
    assert decode_c_string(r"a\r\n\t\\\"\x41\101\0\e") == b'a\r\n\t\\"AA\x00\x1b'
    assert decode_c_string("é") == "é".encode()
    for bad in ("\\", r"\x", r"\400", r"\z"):
        with pytest.raises(ValueError):
            decode_c_string(bad)


# --------------------------------------------------------------------------- fuzzing

_ALPHABET = st.sampled_from([*'0123456789+.*~<>()[]{},:=|-_"`%/\\ \n\tSFPRaxeEw', "..."])
_FUZZ = settings(
    max_examples=300, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow],
)  # fmt: skip


def _parse_or_syntax_error(text: str) -> None:
    try:
        parse_script(text, path="fuzz.pkt", defines={"TFO_COOKIE": "aabb", "Q": '"x"', "B": "`b`"})
    except ScriptSyntaxError as err:
        assert err.path == "fuzz.pkt" and err.line >= 0


@_FUZZ
@given(st.text(max_size=200))
def test_fuzz_random_text(text: str) -> None:
    _parse_or_syntax_error(text)


@_FUZZ
@given(st.lists(_ALPHABET, max_size=80).map("".join))
def test_fuzz_script_alphabet(text: str) -> None:
    _parse_or_syntax_error(text)


_SEED_TEXT = (
    "--tolerance_usecs=10000\n`init`\n0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n"
    "+0 setsockopt(3, SOL_SOCKET, SO_REUSEADDR, [1], 4) = 0\n"
    "+0...0.2 accept(3, ..., ...) = 4\n+.1 < S 0:10(10) win 32792 <mss 1460,sackOK,FOEXP TFO_COOKIE>\n"
    '+0 > S. 0:0(0) ack 11 <...>\n+.1~+.2 > P. 1:3(2) ack 11 payload "ab"\n'
    "+0 sendmsg(4, {msg_name(...)=..., msg_iov(1)=[{..., 40}], msg_flags=0}, MSG_MORE) = 40\n"
    "+0 %{ assert tcpi_state == 1 }%\n* > F. 3:3(0) ack 11\n+0 read(4, ..., 1) = -1 EAGAIN (x y)\n`cleanup`\n"
)


@_FUZZ
@given(st.data())
def test_fuzz_mutated_scripts(data: st.DataObject) -> None:
    seeds = [_SEED_TEXT] + [p.read_text() for p in CORPUS_FILES[:8]]
    text = data.draw(st.sampled_from(seeds))
    for _ in range(data.draw(st.integers(1, 6))):
        pos = data.draw(st.integers(0, len(text)))
        op = data.draw(st.sampled_from(["delete", "insert", "replace"]))
        size = data.draw(st.integers(1, 8))
        piece = data.draw(st.lists(_ALPHABET, min_size=1, max_size=3).map("".join))
        if op == "delete":
            text = text[:pos] + text[pos + size :]
        elif op == "insert":
            text = text[:pos] + piece + text[pos:]
        else:
            text = text[:pos] + piece + text[pos + size :]
    _parse_or_syntax_error(text)


def test_seed_script_parses() -> None:
    script = parse_script(_SEED_TEXT, defines={"TFO_COOKIE": "aabb"})
    assert len(script.events) == 10
    assert script.init_command is not None and script.cleanup_command is not None


# --------------------------------------------------------------------------- timing


def ev(text: str) -> Event:
    return one(text)


def test_tolerance() -> None:
    assert timing.tolerance(0.1) == pytest.approx(0.0125)
    assert timing.tolerance(0.01) == pytest.approx(0.004)
    assert timing.tolerance(0.0) == pytest.approx(0.004)
    assert timing.tolerance(0.032) == pytest.approx(0.004)  # 12.5% of 32 ms is exactly 4 ms
    assert timing.tolerance(1.0, tolerance_usecs=10000) == pytest.approx(0.125)
    assert timing.tolerance(0.05, tolerance_usecs=10000) == pytest.approx(0.010)
    assert timing.tolerance(1.0, tolerance_percent=25) == pytest.approx(0.25)
    assert timing.tolerance(0.032007) == 0.004  # 4000.875 us truncates, as in C


def test_resolve_relative_and_anchor() -> None:
    script = parse("0 socket()=3\n+.1 < S 0:0(0) win 1\n+.2 < . 1:1(0) ack 1 win 1\n+.3 close(3) = 0\n")
    sock, syn, ack, close = script.events
    # Relative to the actual time the runner got there...
    exp = timing.resolve(syn, now=0.0105, last_event=sock, last_expected=0.0)
    assert (exp.start, exp.anchor) == (pytest.approx(0.1105), pytest.approx(0.0105))
    # ...except inbound after inbound: anchored on the previous packet's expected time.
    exp = timing.resolve(ack, now=0.15, last_event=syn, last_expected=0.1105)
    assert exp.start == pytest.approx(0.3105)
    exp = timing.resolve(close, now=0.32, last_event=ack, last_expected=0.3105)
    assert exp.start == pytest.approx(0.62)
    assert timing.resolve(sock, now=5.0).start == 0.0


def test_resolve_ranges_any_and_blocking() -> None:
    exp = timing.resolve(ev("+.1~+.2 > . 1:1(0)"), now=1.0)
    assert (exp.start, exp.end) == (pytest.approx(1.1), pytest.approx(1.2))
    exp = timing.resolve(ev("1~2 > . 1:1(0)"), now=5.0)
    assert (exp.start, exp.end, exp.anchor) == (1.0, 2.0, 0.0)
    exp = timing.resolve(ev("* > . 1:1(0)"), now=3.0)
    assert (exp.kind, exp.start) == ("any", 3.0)
    exp = timing.resolve(ev("+0...0.200 accept(3, ..., ...) = 4"), now=1.0)
    assert (exp.start, exp.block_end) == (pytest.approx(1.0), pytest.approx(1.2))
    exp = timing.resolve(ev("0.5...0.7 accept(3, ..., ...) = 4"), now=0.4)
    assert (exp.start, exp.block_end) == (0.5, 0.7)


def test_check_time() -> None:
    pkt = ev("+.1 > . 1:1(0)")
    assert timing.check_time(pkt, 1.1, None, 1.1125, last_expected=1.0) is None
    msg = timing.check_time(pkt, 1.1, None, 1.1126, last_expected=1.0)
    assert msg is not None and msg.startswith("line 1: timing error: expected outbound packet at 1.100000")
    # First event: only the fixed 4 ms.
    assert timing.check_time(pkt, 1.1, None, 1.104) is None
    assert timing.check_time(pkt, 1.1, None, 1.0959) is not None
    assert timing.check_time(pkt, 1.1, None, 1.12, tolerance_usecs=20000) is None
    rng = ev("+.1~+.2 > . 1:1(0)")
    assert timing.check_time(rng, 1.1, 1.2, 1.15, last_expected=1.0) is None
    assert timing.check_time(rng, 1.1, 1.2, 1.2125, last_expected=1.0) is None  # 12.5% of 0.1
    msg = timing.check_time(rng, 1.1, 1.2, 1.25, last_expected=1.0, anchor=1.0)
    assert msg is not None and "relative time range +0.100000~+0.200000" in msg
    star = ev("* > . 1:1(0)")
    assert timing.check_time(star, 0.0, None, 99.0) is None
    with pytest.raises(ValueError):
        timing.check_time(rng, 1.1, None, 1.15)


def test_check_return_time() -> None:
    call = ev("+0...0.200 accept(3, ..., ...) = 4")
    assert isinstance(call, SyscallEvent)
    exp = timing.resolve(call, now=1.0)
    assert timing.check_return_time(call, exp, 1.2) is None
    assert timing.check_return_time(call, exp, 1.225) is None  # 12.5% of 0.2 s
    msg = timing.check_return_time(call, exp, 1.226)
    assert msg is not None and "system call return" in msg
    plain = ev("+0 close(3) = 0")
    assert isinstance(plain, SyscallEvent)
    with pytest.raises(ValueError):
        timing.check_return_time(plain, timing.resolve(plain, now=0.0), 0.0)


def test_first_event_and_order() -> None:
    assert timing.check_first_event(parse("+0 socket()=3")) is None
    msg = timing.check_first_event(parse("\n0.1 socket()=3"))
    assert msg == "t.pkt:2: first event should be at time 0"
    a, b, c = parse("0 socket()=3\n0.2 close(3)=0\n+0 close(4)=0\n").events
    assert timing.check_order(a, b) is None and timing.check_order(b, c) is None
    x, y = parse("0.3 socket()=3\n0.2 close(3)=0\n").events
    assert "time goes backward" in (timing.check_order(x, y) or "")


# --------------------------------------------------------------------------- defaults


def test_address_defaults() -> None:
    assert (defaults.IPV4.local_ip, defaults.IPV4.remote_ip) == ("192.168.0.1", "192.0.2.1")
    assert (defaults.IPV6.local_ip, defaults.IPV6.remote_ip) == ("fd3d:0a0b:17d6::1", "fd3d:fa7b:d17d::1")
    assert defaults.IPV4.mtu - 20 - 20 == defaults.IPV4.mss == 1460
    assert defaults.IPV6.mtu - 40 - 20 == defaults.IPV6.mss == 1460
    assert defaults.DEFAULT_PORT == 8080
    assert defaults.OPTION_DEFAULTS["tolerance_usecs"] == timing.DEFAULT_TOLERANCE_USECS


def test_sysctl_profile_matches_defaults_sh() -> None:
    path = corpus("gtests/net/common/defaults.sh")
    seen = 0
    for line in path.read_text().splitlines():
        if not line.startswith("sysctl -q "):
            continue
        for assignment in re.findall(r'(net\.[\w.]+)=("[^"]*"|\S+)', line):
            key, raw = assignment
            # Evaluate the shell arithmetic the script uses, e.g. $((15*1024*1024)).
            raw = re.sub(
                r"\$\(\(([0-9*]+)\)\)",
                lambda m: str(math.prod(int(f) for f in m.group(1).split("*"))),
                raw,
            )
            assert defaults.SYSCTL_DEFAULTS[key] == defaults.parse_sysctl_value(raw), key
            seen += 1
    assert seen == len(defaults.SYSCTL_DEFAULTS)


def test_sysctl_helpers() -> None:
    assert defaults.sysctl_name("/proc/sys/net/ipv4/tcp_fastopen") == "net.ipv4.tcp_fastopen"
    assert defaults.sysctl_name("net.ipv4.tcp_ecn") == "net.ipv4.tcp_ecn"
    assert defaults.parse_sysctl_value("0x402") == 0x402
    assert defaults.parse_sysctl_value('"4096 87380 6291456"') == (4096, 87380, 6291456)
    assert defaults.parse_sysctl_value("cubic") == "cubic"
    key = "a0bf63f7-ed803d81-cd641d30-cebc4a90"
    assert defaults.parse_sysctl_value(key) == key


def test_required_constants() -> None:
    expected = {
        "TCP_FASTOPEN": 23, "TCP_FASTOPEN_CONNECT": 30, "TCP_FASTOPEN_KEY": 33,
        "TCP_FASTOPEN_NO_COOKIE": 34, "TCP_MD5SIG": 14, "SOL_SOCKET": 1, "SO_REUSEADDR": 2,
        "IPPROTO_TCP": 6, "TCP_NODELAY": 1, "O_NONBLOCK": 0o4000, "MSG_FASTOPEN": 0x20000000,
        "SIOCINQ": 0x541B, "AF_INET6": 10, "SHUT_RDWR": 2, "POLLRDNORM": 0x40, "IPV6_TCLASS": 67,
    }  # fmt: skip
    for name, value in expected.items():
        assert defaults.SYMBOLS[name] == value, name
    assert defaults.ERRNO["EAGAIN"] == defaults.ERRNO["EWOULDBLOCK"] == 11
    assert defaults.STRERROR["EINPROGRESS"] == "Operation now in progress"
    assert not set(defaults.UNSUPPORTED_SYMBOLS) - set(defaults.SYMBOLS)


@pytest.mark.skipif(sys.platform != "linux", reason="Linux values")
def test_constants_match_the_platform() -> None:
    checked = 0
    for name, value in defaults.SYMBOLS.items():
        for module in (socket, os, errno_mod):
            platform_value = getattr(module, name, None)
            if isinstance(platform_value, int):
                assert int(platform_value) == value, name
                checked += 1
                break
    assert checked > 40
    for name, value in defaults.ERRNO.items():
        if hasattr(errno_mod, name):
            assert getattr(errno_mod, name) == value, name
