"""The drill runner itself (timing, option and aggregation rules, blocking calls, failure
reports, the CLI) and our own scripts in tests/drill/."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest

from drill_snippets import passive_open
from usertcp.drill import command
from usertcp.drill.parser import parse_script
from usertcp.drill.runner import RunOptions, ScriptResult, run_file, run_script
from usertcp.tcp.md5sig import build_tcp_md5sig

DRILL = Path(__file__).parent / "drill"

HANDSHAKE = passive_open()


def run(text: str, *, ip_version: str = "ipv4", tolerance_usecs: int | None = None) -> ScriptResult:
    options = RunOptions(ip_version=ip_version, tolerance_usecs=tolerance_usecs)
    return run_script(parse_script(text, path="<test>"), options)


def assert_passed(res: ScriptResult) -> None:
    assert res.status == "passed", f"line {res.line}: {res.reason}\n" + "\n".join(res.details)


# ----------------------------------------------------------------------------- basics


def test_handshake_and_write_pass() -> None:
    assert_passed(run(HANDSHAKE + "   +0 write(4, ..., 1000) = 1000\n   +0 > P. 1:1001(1000) ack 1\n"))


@pytest.mark.parametrize("version", ["ipv4", "ipv6"])
def test_both_address_families(version: str) -> None:
    res = run(HANDSHAKE + "   +0 write(4, ..., 10) = 10\n   +0 > P. 1:11(10) ack 1\n", ip_version=version)
    assert_passed(res)
    assert res.ip_version == version


def test_wrong_script_fails_with_a_diff() -> None:
    res = run(
        HANDSHAKE
        + "   +0 write(4, ..., 1000) = 1000\n   +0 > . 1:1001(1000) ack 1 win 300 <nop,nop,TS val 1 ecr 2>\n"
    )
    assert res.status == "failed" and res.line == 10
    assert "flags (expected ., actual P.)" in res.reason and "win (expected 300" in res.reason
    assert res.details[0].startswith("expected  > . 1:1001(1000) ack 1 win 300 <nop,nop,TS val 1 ecr 2>")
    assert res.details[1].startswith("actual    > P. 1:1001(1000) ack 1 win ")
    assert res.details[2] == "differs:  flags, win, options"


def test_wrong_syscall_result_fails() -> None:
    res = run(HANDSHAKE + "   +0 read(4, ..., 100) = 10\n")
    assert res.status == "failed" and res.line == 9
    assert "EAGAIN" not in res.reason  # a blocking socket: the read blocks (not marked ...)
    res = run(HANDSHAKE + "   +0 fcntl(4, F_SETFL, O_RDWR|O_NONBLOCK) = 0\n   +0 read(4, ..., 100) = 10\n")
    assert res.status == "failed" and "-1 EAGAIN" in res.reason


def test_missing_packet_times_out() -> None:
    res = run(HANDSHAKE + "   +0 > P. 1:11(10) ack 1\n")
    assert res.status == "failed" and "timed out waiting for outbound packet" in res.reason


# ----------------------------------------------------------------------------- timing


DELACK = (
    HANDSHAKE
    + """
 +.01 < P. 1:11(10) ack 1 win 257
   +0 > . 1:1(0) ack 11
   +0 write(4, ..., 10) = 10
   +0 > P. 1:11(10) ack 11
 +.01 < P. 11:21(10) ack 11 win 257
{time} > . 11:11(0) ack 21
"""
)


@pytest.mark.parametrize("when", ["+.04", "+.037", "+.043", "+.03~+.05", "*"])
def test_timing_within_tolerance(when: str) -> None:
    assert_passed(run(DELACK.format(time=when)))


@pytest.mark.parametrize("when", ["+.03", "+.05", "+0", "+.05~+.06"])
def test_timing_outside_tolerance(when: str) -> None:
    res = run(DELACK.format(time=when))
    assert res.status == "failed" and "timing error" in res.reason, res.reason


def test_tolerance_is_configurable() -> None:
    assert run(DELACK.format(time="+.03")).status == "failed"
    assert_passed(run(DELACK.format(time="+.03"), tolerance_usecs=15000))
    assert_passed(run("--tolerance_usecs=15000\n" + DELACK.format(time="+.03")))


# ----------------------------------------------------------------------------- options


def test_option_order_mismatch_detected() -> None:
    text = HANDSHAKE.replace(
        "<mss 1460,nop,nop,sackOK,nop,wscale 8>", "<nop,nop,sackOK,mss 1460,nop,wscale 8>"
    )
    res = run(text)
    assert (
        res.status == "failed"
        and res.line == 6
        and "options (expected <nop,nop,sackOK,mss 1460" in res.reason
    )


def test_option_value_mismatch_detected() -> None:
    res = run(HANDSHAKE.replace("wscale 8>", "wscale 7>"))
    assert res.status == "failed" and "wscale (expected wscale 7, actual wscale 8)" in res.reason


def test_no_option_list_rejects_options() -> None:
    res = run(HANDSHAKE.replace("ack 1 <mss 1460,nop,nop,sackOK,nop,wscale 8>", "ack 1"))
    assert res.status == "failed" and "options (expected none, actual <mss 1460" in res.reason


def test_ellipsis_options_accept_anything() -> None:
    assert_passed(run(HANDSHAKE.replace("<mss 1460,nop,nop,sackOK,nop,wscale 8>", "<...>")))


TS_HANDSHAKE = """    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
   +0 bind(3, ..., ...) = 0
   +0 listen(3, 1) = 0
   +0 < S 0:0(0) win 32792 <mss 1000,sackOK,TS val 100 ecr 0,nop,wscale 7>
   +0 > S. 0:0(0) ack 1 <mss 1460,sackOK,TS val 700 ecr 100,nop,wscale 8>
  +.1 < . 1:1(0) ack 1 win 257 <nop,nop,TS val 200 ecr 700>
   +0 accept(3, ..., ...) = 4
  +.2 write(4, ..., 10) = 10
"""


def test_ts_val_checked_only_with_tick() -> None:
    # TS val 700 is mapped to the live value; later vals follow it in script space.
    assert_passed(run(TS_HANDSHAKE + "   +0 > P. 1:11(10) ack 1 <nop,nop,TS val 1 ecr 200>\n"))
    tick = "--tcp_ts_tick_usecs=1000\n"
    assert_passed(run(tick + TS_HANDSHAKE + "   +0 > P. 1:11(10) ack 1 <nop,nop,TS val 1000 ecr 200>\n"))
    res = run(tick + TS_HANDSHAKE + "   +0 > P. 1:11(10) ack 1 <nop,nop,TS val 1100 ecr 200>\n")
    assert res.status == "failed" and "TS val (expected 1100, actual 1000" in res.reason


def test_ts_ecr_checked() -> None:
    res = run(TS_HANDSHAKE + "   +0 > P. 1:11(10) ack 1 <nop,nop,TS val 1 ecr 201>\n")
    assert res.status == "failed" and "TS ecr (expected 201, actual 200)" in res.reason


def test_inbound_ecr_needs_a_known_ts_val() -> None:
    res = run(TS_HANDSHAKE.replace("ecr 700>", "ecr 701>"))
    assert res.status == "failed" and "unable to infer live TS ecr" in res.reason


# ----------------------------------------------------------------------------- aggregation


NO_OFFLOAD = "`ethtool -K tun0 tso off gso off`\n"


def test_aggregation_of_consecutive_segments() -> None:
    # Per packet (no TSO, no GSO): three MSS segments, aggregated or matched one by one. TCP
    # still builds GSO skbs (two segments here, tcp_tso_autosize) that software GSO cuts, PSH
    # on the last packet of each (6.18 on this machine, nagle/https_client at its 100 ms RTT).
    write = "   +0 write(4, ..., 3000) = 3000\n"
    assert_passed(run(NO_OFFLOAD + HANDSHAKE + write + "   +0 > P. 1:3001(3000) ack 1\n"))
    split = (
        "   +0 > . 1:1001(1000) ack 1\n   +0 > P. 1001:2001(1000) ack 1\n   +0 > P. 2001:3001(1000) ack 1\n"
    )
    assert_passed(run(NO_OFFLOAD + HANDSHAKE + write + split))


def test_tso_link_is_compared_per_skb() -> None:
    # packetdrill's tun offers TSO: Linux sends a packet per skb, here two segments at most
    # (tcp_tso_autosize: 1 ms of pacing rate, at least tcp_min_tso_segs = 2), PSH on each
    # multi-segment one (Linux 6.18, tools/kernel_psh_probe.py).
    write = "   +0 write(4, ..., 3000) = 3000\n"
    assert_passed(run(HANDSHAKE + write + "   +0 > P. 1:3001(3000) ack 1\n"))
    per_skb = "   +0 > P. 1:2001(2000) ack 1\n   +0 > P. 2001:3001(1000) ack 1\n"
    assert_passed(run(HANDSHAKE + write + per_skb))
    res = run(HANDSHAKE + write + "   +0 > . 1:1001(1000) ack 1\n")
    assert res.status == "failed" and "payload length (expected 1000, actual 2000)" in res.reason


def test_strict_segments_disables_aggregation() -> None:
    res = run(
        "--strict_segments\n"
        + NO_OFFLOAD
        + HANDSHAKE
        + "   +0 write(4, ..., 3000) = 3000\n   +0 > P. 1:3001(3000) ack 1\n"
    )
    assert res.status == "failed" and "payload length (expected 3000, actual 1000)" in res.reason


def test_aggregate_longer_than_expected_fails() -> None:
    res = run(HANDSHAKE + "   +0 write(4, ..., 3000) = 3000\n   +0 > P. 1:1501(1500) ack 1\n")
    assert res.status == "failed"


# ----------------------------------------------------------------------------- blocking calls


BLOCKING_ACCEPT = """
    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
   +0 bind(3, ..., ...) = 0
   +0 listen(3, 1) = 0
   +0...{end} accept(3, ..., ...) = 4
  +.1 < S 0:0(0) win 32792 <mss 1000,nop,wscale 7>
   +0 > S. 0:0(0) ack 1 <mss 1460,nop,wscale 8>
  +.1 < . 1:1(0) ack 1 win 257
  +.1 write(4, ..., 10) = 10
   +0 > P. 1:11(10) ack 1
"""


def test_blocking_call_returns_at_its_end_time() -> None:
    res = run(BLOCKING_ACCEPT.format(end="0.200"))
    assert_passed(res)
    assert res.virtual_time == pytest.approx(0.3)


@pytest.mark.parametrize("end", ["0.100", "0.300", "0"])
def test_blocking_call_at_the_wrong_time_fails(end: str) -> None:
    res = run(BLOCKING_ACCEPT.format(end=end))
    assert res.status == "failed" and res.line == 5 and "system call return" in res.reason


def test_unmarked_blocking_call_fails() -> None:
    res = run(BLOCKING_ACCEPT.format(end="0.200").replace("+0...0.200 accept", "+0 accept"))
    assert res.status == "failed" and "does not mark it as a blocking call" in res.reason


def test_blocking_call_still_pending_at_the_end_fails() -> None:
    res = run(
        "    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n   +0 bind(3, ..., ...) = 0\n"
        "   +0 listen(3, 1) = 0\n   +0...0.5 accept(3, ..., ...) = 4\n"
    )
    assert res.status == "failed" and "still blocked" in res.reason


# ----------------------------------------------------------------------------- environment and code


def test_sysctl_commands_configure_the_stack() -> None:
    text = "`sysctl -q net.ipv4.tcp_sack=0`\n" + HANDSHAKE.replace(
        "<mss 1460,nop,nop,sackOK,nop,wscale 8>", "<mss 1460,nop,wscale 8>"
    )
    assert_passed(run(text))


def test_unmodelled_command_skips() -> None:
    res = run("`tc qdisc add dev tun0 root netem delay 10ms`\n" + HANDSHAKE)
    assert res.status == "skipped" and "command not modelled" in res.reason
    res = run("`sysctl -q net.ipv4.tcp_no_such_knob=1`\n" + HANDSHAKE)
    assert res.status == "skipped" and "not modelled" in res.reason


def test_code_assertions() -> None:
    assert_passed(run(HANDSHAKE + "   +0 %{ assert tcpi_state == TCP_ESTABLISHED, tcpi_state }%\n"))
    res = run(HANDSHAKE + "   +0 %{ assert tcpi_snd_cwnd == 3, tcpi_snd_cwnd }%\n")
    assert res.status == "failed" and res.line == 9 and "assertion failed" in res.reason
    res = run(HANDSHAKE + "   +0 %{ assert tcpi_no_such_field == 0 }%\n")
    assert res.status == "skipped" and "tcpi_no_such_field" in res.reason


def test_string_data_and_payload_extension() -> None:
    text = (
        HANDSHAKE
        + """
   +0 write(4, "hello", 5) = 5
   +0 > P. 1:6(5) ack 1 payload "hello"
 +.01 < P. 1:4(3) ack 6 win 257 payload "abc"
   +0 read(4, "abc", 10) = 3
"""
    )
    assert_passed(run(text))
    assert run(text.replace('payload "hello"', 'payload "hellO"')).status == "failed"
    res = run(text.replace('read(4, "abc"', 'read(4, "abd"'))
    assert res.status == "failed" and "data read" in res.reason


# ----------------------------------------------------------------------------- our scripts

# Our scripts that fail because the core disagrees with Linux (file -> reason fragment).
KNOWN_CORE_FAILURES: dict[str, str] = {
}


@pytest.mark.parametrize("version", ["ipv4", "ipv6"])
@pytest.mark.parametrize("script", sorted(p.name for p in DRILL.glob("*.pkt")))
def test_our_scripts(script: str, version: str) -> None:
    res = run_file(DRILL / script, RunOptions(ip_version=version))
    known = KNOWN_CORE_FAILURES.get(script)
    if known is None:
        assert_passed(res)
    elif res.status == "passed":
        pytest.fail(f"{script} passes now: remove it from KNOWN_CORE_FAILURES")
    else:
        assert res.status == "failed" and known in res.reason, res.reason


def _md5sig_literal(key: bytes) -> str:
    raw = build_tcp_md5sig("192.0.2.1", key)
    return '"' + "".join(f"\\x{b:02x}" for b in raw) + f'", {len(raw)}'


def test_md5_signatures_are_verified() -> None:
    text = (DRILL / "md5-passive.pkt").read_text()
    # The listener's key given as struct tcp_md5sig bytes: the same key passes ...
    same = text.replace("TCP_MD5SIG, ..., ...)", f"TCP_MD5SIG, {_md5sig_literal(b'drill-secret')})")
    assert_passed(run_script(parse_script(same, path="x")))
    # ... another key makes our inbound signatures wrong: the stack ignores the SYN.
    other = text.replace("TCP_MD5SIG, ..., ...)", f"TCP_MD5SIG, {_md5sig_literal(b'other-key')})")
    res = run_script(parse_script(other, path="x"))
    assert res.status == "failed" and res.line == 12 and "timed out" in res.reason
    # A listener without a key must not answer a signed SYN.
    res = run_script(
        parse_script(text.replace("   +0 setsockopt(3, SOL_TCP, TCP_MD5SIG, ..., ...) = 0\n", ""), path="x")
    )
    assert res.status == "failed" and res.line == 11 and "timed out" in res.reason


# ----------------------------------------------------------------------------- CLI


def _cli(*argv: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    out = io.StringIO()
    return command.main(parser.parse_args(list(argv)), out), out.getvalue()


def test_cli_summary_and_exit_status(tmp_path: Path) -> None:
    good = tmp_path / "good.pkt"
    good.write_text(HANDSHAKE)
    bad = tmp_path / "bad.pkt"
    bad.write_text(HANDSHAKE + "   +0 > P. 1:11(10) ack 1\n")
    skip = tmp_path / "skip.pkt"
    skip.write_text("`frobnicate --now`\n" + HANDSHAKE)
    code, out = _cli(str(good))
    assert code == 0 and out.splitlines()[-1] == "1 passed, 0 failed, 0 skipped"
    code, out = _cli("--ip-version", "both", str(tmp_path))
    assert code == 1 and out.splitlines()[-1] == "2 passed, 2 failed, 2 skipped"
    assert "FAIL" in out and "bad.pkt" in out


def test_cli_json(tmp_path: Path) -> None:
    (tmp_path / "a.pkt").write_text(HANDSHAKE + "   +0 > P. 1:11(10) ack 1\n")
    code, out = _cli("--json", "-D", "X=1", str(tmp_path))
    doc = json.loads(out)
    assert code == 1 and doc["failed"] == 1 and doc["passed"] == 0 and doc["skipped"] == 0
    entry = doc["scripts"][0]
    assert entry["status"] == "failed" and entry["line"] == 9 and entry["path"].endswith("a.pkt")
    assert {"path", "status", "line", "reason"} <= set(entry)


# ----------------------------------------------------------------------------- ECN and numbering

ECN_HANDSHAKE = """`sysctl -q net.ipv4.tcp_ecn=2`
    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
   +0 setsockopt(3, SOL_SOCKET, SO_REUSEADDR, [1], 4) = 0
   +0 bind(3, ..., ...) = 0
   +0 listen(3, 1) = 0
   +0 < SEW 0:0(0) win 32792 <mss 1000,sackOK,nop,nop,nop,wscale 7>
   +0 > [noecn] SE. 0:0(0) ack 1 <mss 1460,nop,nop,sackOK,nop,wscale 8>
  +.1 < . 1:1(0) ack 1 win 257
   +0 accept(3, ..., ...) = 4
   +0 %{ assert tcpi_options & 8 == 8, tcpi_options }%
"""


def test_ecn_receiver_echo_in_script_form() -> None:
    """[ect0]/[ce]/[noecn]/[ect01] on packets, ECE until the peer's CWR (RFC 3168 §6.1.3)."""
    text = ECN_HANDSHAKE + """   +0 write(4, ..., 1000) = 1000
   +0 > [ect0] P. 1:1001(1000) ack 1
  +.1 < [ce] P. 1:101(100) ack 1001 win 257
   +0 > [noecn] E. 1001:1001(0) ack 101
   +0 write(4, ..., 1000) = 1000
   +0 > [ect01] PE. 1001:2001(1000) ack 101
  +.1 < [ect0] PW. 101:201(100) ack 2001 win 257
   +0 > [noecn] . 2001:2001(0) ack 201
"""
    assert_passed(run(text))
    res = run(ECN_HANDSHAKE + "   +0 write(4, ..., 10) = 10\n   +0 > [noecn] P. 1:11(10) ack 1\n")
    assert res.status == "failed" and "ECN field (expected noecn, actual 2)" in res.reason


def test_ecn_sender_reduction_in_script_form() -> None:
    # A two-segment TSO packet carries PSH (Linux 6.18, tools/kernel_psh_probe.py).
    text = ECN_HANDSHAKE + """   +0 write(4, ..., 3000) = 3000
   +0 > [ect0] P. 1:2001(2000) ack 1
   +0 > [ect0] P. 2001:3001(1000) ack 1
  +.1 < E. 1:1(0) ack 1001 win 257
   +0 %{ assert tcpi_ca_state == 2, tcpi_ca_state }%
   +0 write(4, ..., 1000) = 1000
   +0 > [ect0] PW. 3001:4001(1000) ack 1
"""
    assert_passed(run(text))


def test_ecn_off_in_the_profile() -> None:
    res = run(ECN_HANDSHAKE.replace("tcp_ecn=2", "tcp_ecn=0"))
    assert res.status == "failed" and res.line == 7            # plain S. without ECE


def test_non_syn_numbers_are_relative_to_the_live_isn() -> None:
    """packetdrill local_seq_script_to_live_offset: the ISN a script writes on its SYN-ACK
    maps only SYN segments; every other segment counts from the live ISN as 0."""
    text = HANDSHAKE.replace("> S. 0:0(0) ack 1", "> S. 1234:1234(0) ack 1")
    assert_passed(run(text + "   +0 write(4, ..., 10) = 10\n   +0 > P. 1:11(10) ack 1\n"))


def test_script_fd_of_an_open_socket_is_reused() -> None:
    """packetdrill maps script fds to live fds: a new socket may take a script fd whose
    socket is still open (the older one stays open, shadowed), and bind honours its
    inherited SO_REUSEADDR."""
    again = HANDSHAKE.replace("    0 socket", "   +0 socket").replace("+.1 <", "+0 <")
    text = HANDSHAKE + "   +0 close(3) = 0\n" + again + "   +0 write(4, ..., 10) = 10\n" \
        + "   +0 > P. 1:11(10) ack 1\n"
    assert_passed(run(text))


def test_msg_preload_needs_a_listening_socket_and_checks_contents() -> None:
    opening = """
    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
   +0 setsockopt(3, SOL_SOCKET, SO_REUSEADDR, [1], 4) = 0
   +0 bind(3, ..., ...) = 0
"""
    # Not listening yet: EINVAL, as our socket API answers (the patch set defines no error;
    # docs/differences-from-linux-patches.md says why).
    assert_passed(run(opening + '   +0 send(3, "hi", 2, MSG_PRELOAD) = -1 EINVAL (Invalid argument)\n'))
    script = opening + """   +0 listen(3, 1) = 0
   +0 send(3, "hi\\r\\n", 4, MSG_PRELOAD) = 4
   +0 < S 0:0(0) win 65535 <mss 1460>
   +0 > S. 0:0(0) ack 1 <mss 1460>
   +0 < . 1:1(0) ack 1 win 65535
   +0 > P. 1:5(4) ack 1 payload "hi\\r\\n"
"""
    assert_passed(run(script))
    res = run(script.replace('payload "hi\\r\\n"', 'payload "ho\\r\\n"'))
    assert res.status == "failed" and "payload" in res.reason
