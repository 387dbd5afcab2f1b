"""Tail loss probe scheduling (RFC 8985 §7.2, Linux tcp_schedule_loss_probe()), checked with
small drill scripts at a tight timing tolerance."""

from __future__ import annotations

from usertcp.drill.parser import parse_script
from usertcp.drill.runner import RunOptions, ScriptResult, run_script

TIGHT = "--tolerance_usecs=500\n--tolerance_percent=0\n"


def handshake(rtt: str, *, sack: bool) -> str:
    syn = "<mss 1000,sackOK,nop,nop,nop,wscale 7>" if sack else "<mss 1000,nop,wscale 7>"
    synack = "<mss 1460,nop,nop,sackOK,nop,wscale 8>" if sack else "<mss 1460,nop,wscale 8>"
    return f"""    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
   +0 setsockopt(3, SOL_SOCKET, SO_REUSEADDR, [1], 4) = 0
   +0 bind(3, ..., ...) = 0
   +0 listen(3, 1) = 0
   +0 < S 0:0(0) win 32792 {syn}
   +0 > S. 0:0(0) ack 1 {synack}
  +{rtt} < . 1:1(0) ack 1 win 257
   +0 accept(3, ..., ...) = 4
"""


def run(text: str) -> ScriptResult:
    return run_script(parse_script(TIGHT + text, path="<test>"), RunOptions())


def assert_passed(res: ScriptResult) -> None:
    assert res.status == "passed", f"line {res.line}: {res.reason}\n" + "\n".join(res.details)


def test_no_loss_probe_without_sack() -> None:
    # Two segments out, no SACK: no probe at 2*SRTT; the RTO (300 ms) retransmits the head.
    body = """   +0 write(4, ..., 2000) = 2000
   +0 > P. 1:2001(2000) ack 1
  +.3 > . 1:1001(1000) ack 1
   +0 %{ assert tcpi_total_retrans == 1, tcpi_total_retrans }%
"""
    assert_passed(run(handshake(".1", sack=False) + body))


def test_pto_is_two_srtt_plus_timeout_min() -> None:
    # SRTT 100 ms, two segments out: PTO = 2*SRTT + TCP_TIMEOUT_MIN (2 ms); the probe
    # retransmits the last segment (no new data to send).
    body = """   +0 write(4, ..., 2000) = 2000
   +0 > P. 1:2001(2000) ack 1
+.202 > P. 1001:2001(1000) ack 1
"""
    assert_passed(run(handshake(".1", sack=True) + body))


def test_single_segment_pto_adds_rto_min() -> None:
    # SRTT 300 ms, one segment out: PTO = 2*SRTT + TCP_RTO_MIN = 800 ms (the RTO, 900 ms, is
    # later so it does not cap the probe).
    body = """   +0 write(4, ..., 1000) = 1000
   +0 > P. 1:1001(1000) ack 1
  +.8 > P. 1:1001(1000) ack 1
"""
    assert_passed(run(handshake(".3", sack=True) + body))
