"""Drill commands and code blocks the congestion-control scripts use: names shared between
%{ }% blocks, ``sysctl -e``, tcp_early_retrans, and an inline HyStart script (module
parameter written with echo) that must exit slow start on a delay rise, and must not with
the delay method turned off."""

from __future__ import annotations

from pathlib import Path

from drill_snippets import passive_open
from usertcp.drill.parser import parse_script
from usertcp.drill.profile import Environment, linux_config
from usertcp.drill.runner import RunOptions, ScriptResult, run_script


def run(text: str) -> ScriptResult:
    return run_script(parse_script(text, path="<test>"), RunOptions(ip_version="ipv4"))


def test_names_assigned_in_a_code_block_are_seen_by_later_blocks() -> None:
    res = run(passive_open() + "   +0 %{ cwnd = tcpi_snd_cwnd }%\n"
              "   +0 %{ cwnd += 1; assert tcpi_snd_cwnd + 1 == cwnd, cwnd }%\n")
    assert res.status == "passed", res.reason
    res = run(passive_open() + "   +0 %{ assert undefined_name == 1 }%\n")
    assert res.status == "failed" and "NameError" in res.reason


def test_sysctl_ignore_flag_and_early_retrans(tmp_path: Path) -> None:
    env = Environment(linux_config(), lambda: None, tmp_path)
    env.run("sysctl -e -q net.ipv4.tcp_min_tso_segs=4")
    assert env.config.min_tso_segs == 4
    env.run("sysctl -q net.ipv4.tcp_early_retrans=0")          # no tail loss probes
    assert not env.config.tlp


_HYSTART = """\
   +0 setsockopt(4, SOL_SOCKET, SO_SNDBUF, [200000], 4) = 0
   +0 write(4, ..., 30000) = 30000
   +0 > P. 1:10001(10000) ack 1
+.200 < . 1:1(0) ack 10001 win 257
   +0 > P. 10001:30001(20000) ack 1
+.240 < . 1:1(0) ack 12001 win 257
+.001 < . 1:1(0) ack 14001 win 257
+.001 < . 1:1(0) ack 16001 win 257
+.001 < . 1:1(0) ack 18001 win 257
+.001 < . 1:1(0) ack 20001 win 257
+.001 < . 1:1(0) ack 22001 win 257
+.001 < . 1:1(0) ack 24001 win 257
+.001 < . 1:1(0) ack 26001 win 257
+.001 < . 1:1(0) ack 28001 win 257
   +0 %{ assert tcpi_snd_ssthresh == SSTHRESH, tcpi_snd_ssthresh }%
"""


def test_hystart_delay_detection_follows_the_module_parameter() -> None:
    # RTT 200 ms, then a round of samples at >= 240 ms: the delay method ends slow start
    # at the 9th sample (ssthresh = cwnd = 36); with hystart_detect=1 (ACK train only) not.
    for detect, ssthresh in (("2", "36"), ("1", "0x7fffffff")):
        head = f"`echo {detect} > /sys/module/tcp_cubic/parameters/hystart_detect`\n"
        res = run(head + passive_open(ack_delay="+.2") + _HYSTART.replace("SSTHRESH", ssthresh))
        assert res.status == "passed", (detect, res.reason)
