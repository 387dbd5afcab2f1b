"""packetdrill's command line and script options (usertcp.drill.cmdline) and the CLI that
takes them (usertcp drill as a drop-in for packetdrill and the kernel's ksft_runner.sh)."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from drill_snippets import passive_open
from usertcp.drill import command
from usertcp.drill.cmdline import KSFT_ARGS, MAPPED, ksft_families, parse_argv, resolve, run_all_families
from usertcp.drill.outcome import ScriptFail
from usertcp.drill.parser import parse_script
from usertcp.drill.runner import RunOptions, run_file, run_script

HANDSHAKE = passive_open(mss=1460, ack_delay="+0")
CORPUS = next((p for p in (Path(__file__).resolve().parents[2] / "shared" / "packetdrill",
                           Path("/work/shared/packetdrill")) if p.is_dir()), None)


def test_parse_argv_forms() -> None:
    inv = parse_argv(["--ip_version=ipv6", "--mtu", "1520", "-D", "A=1", "-DB=2", "--define=C=3",
                      "--strict_segments", "-v", "x.pkt", "y.pkt"])  # fmt: skip
    assert inv.options == {"ip_version": "ipv6", "mtu": "1520", "strict_segments": "", "verbose": ""}
    assert inv.defines == {"A": "1", "B": "2", "C": "3"}
    assert inv.paths == ["x.pkt", "y.pkt"]
    for bad in (["--no_such_option"], ["--strict_segments=1"], ["--mtu"], ["-D", "NOVALUE"]):
        with pytest.raises(ValueError):
            parse_argv(bad)


def test_command_line_wins_over_the_script() -> None:
    st = resolve({"tolerance_usecs": "10000", "mss": "1000"}, {"tolerance_usecs": "7000"}, "ipv4")
    assert st.tol_us == 7000 and st.mss == 1000 and st.ip_version == "ipv4"
    assert st.local_ip == "192.168.0.1" and st.remote_ip == "192.0.2.1"


def test_address_families() -> None:
    # the script pins IPv4 addresses: a run we asked for over IPv6 follows the script, noted
    st = resolve({"remote_ip": "192.0.2.1"}, {}, "ipv6")
    assert st.ip_version == "ipv4" and "ran over ipv4" in st.notes[0]
    # ... but packetdrill's own --ip_version on the command line makes it a script error
    with pytest.raises(ScriptFail, match="script error"):
        resolve({"remote_ip": "192.0.2.1"}, {"ip_version": "ipv6"}, "ipv4")
    with pytest.raises(ScriptFail, match="different address families"):
        resolve({"local_ip": "192.168.0.1", "remote_ip": "fd3d:fa7b:d17d::1"}, {}, "ipv4")
    with pytest.raises(ScriptFail, match="not an IP address"):
        resolve({"gateway_ip": "nowhere"}, {}, "ipv4")
    # ipv4-mapped-ipv6: IPv4 addresses and packets (AF_INET6 sockets: st.mapped)
    st = resolve({}, {"ip_version": MAPPED}, "ipv4")
    assert (st.ip_version, st.mapped, st.remote_ip) == ("ipv4", True, "192.0.2.1")
    with pytest.raises(ScriptFail, match="the run is ipv4-mapped-ipv6"):
        resolve({"remote_ip": "2001:db8::1"}, {}, MAPPED)
    # the ksft runner's addresses override a script's pinned ones
    ksft = parse_argv(KSFT_ARGS["ipv6"])
    st = resolve({"local_ip": "192.168.0.2", "remote_ip": "10.248.0.2"}, ksft.options, "ipv6")
    assert st.ip_version == "ipv6" and st.remote_ip == "fd3d:fa7b:d17d::1" and st.mtu == 1520


def test_ignored_options_are_noted_and_bad_values_are_script_errors() -> None:
    st = resolve({"wire_client": "", "send_omit_free": ""}, {}, "ipv4")
    assert any("--wire_client ignored" in n for n in st.notes)
    assert any("--send_omit_free ignored" in n for n in st.notes)
    with pytest.raises(ScriptFail, match="not an integer"):
        resolve({"mss": "big"}, {}, "ipv4")


def test_ksft_families() -> None:
    assert ksft_families("tcp_advmss_pmtu_ipv4.pkt") == ["ipv4"]
    assert ksft_families("tcp_advmss_pmtu_ipv6.pkt") == ["ipv6"]
    assert ksft_families("tcp_inq_client.pkt") == ["ipv4", "ipv6"]


def test_conflicting_family_is_a_script_error_not_an_internal_error() -> None:
    script = parse_script("--remote_ip=192.0.2.1\n" + HANDSHAKE, path="x.pkt")
    res = run_script(script, RunOptions(ip_version="ipv6", options={"ip_version": "ipv6"}))
    assert res.status == "failed" and res.reason.startswith("script error")
    res = run_script(script, RunOptions(ip_version="ipv6"))
    assert res.status == "passed" and "ran over ipv4" in res.reason


def test_mss_option_makes_inbound_gro_packets() -> None:
    # packetdrill --mss: a 10000-byte inbound segment arrives as one GRO packet of 1000-byte
    # segments; Linux measures rcv_mss from gso_size (tcp_measure_rcv_mss) and ACKs it once.
    body = HANDSHAKE + "   +0 < . 1:10001(10000) ack 1 win 257\n   +0 > . 1:1(0) ack 10001\n" \
        "   +0 %{ assert tcpi_rcv_mss == RCV_MSS, tcpi_rcv_mss }%\n"
    for opt, rcv_mss in (("--mss=1000\n", 1000), ("", 1460)):
        res = run_script(parse_script(opt + body.replace("RCV_MSS", str(rcv_mss)), path="g.pkt"))
        assert res.status == "passed", res.reason


def _cli(*argv: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    out = io.StringIO()
    return command.main(parser.parse_args(list(argv)), out), out.getvalue()


def test_cli_takes_packetdrill_options(tmp_path: Path) -> None:
    v4only = tmp_path / "tcp_x_ipv4.pkt"
    v4only.write_text(HANDSHAKE)
    both = tmp_path / "tcp_y.pkt"
    both.write_text(HANDSHAKE)
    code, out = _cli("--ip-version", "ksft", str(tmp_path))
    assert code == 0 and out.splitlines()[-1] == "3 passed, 0 failed, 0 skipped"
    code, out = _cli("--ip_version=ipv6", "--mtu=1520", "--tolerance_usecs", "5000", "-D", "X=1", str(both))
    assert code == 0 and out.splitlines()[-1] == "1 passed, 0 failed, 0 skipped"
    code, out = _cli("--local_ip=192.168.0.1", "--ip_version=ipv6", str(both))
    assert code == 1 and "script error" in out


def test_run_all_families() -> None:
    # run_all.py's StartTests: "v6.pkt" names skip IPv4, "v4.pkt" names skip IPv6
    assert run_all_families("basic-v4.pkt") == ["ipv4", MAPPED]
    assert run_all_families("syn-data-icmp-unreach-frag-needed-with-seq-ipv6.pkt") == ["ipv6"]
    assert run_all_families("basic-rw.pkt") == ["ipv4", MAPPED, "ipv6"]


def test_cli_runs_a_corpus_as_packetdrills_run_all(tmp_path: Path) -> None:
    for name in ("x-v4.pkt", "y-v6.pkt", "z.pkt"):
        (tmp_path / name).write_text(HANDSHAKE)
    code, out = _cli("--ip-version", "run_all", str(tmp_path))
    assert code == 0 and out.splitlines()[-1] == "6 passed, 0 failed, 0 skipped", out
    assert "y-v6.pkt [ipv6]" in out and "y-v6.pkt [ipv4]" not in out and f"x-v4.pkt [{MAPPED}]" in out
    if CORPUS is None:
        return
    # run_all.py's -D TFO_COOKIE values (the kernel's cookies for its addresses and the
    # defaults.sh key) are the cookies our listener computes for those addresses
    code, out = _cli("--ip-version", "run_all", str(CORPUS / "gtests/net/tcp/fastopen/server/basic-rw.pkt"))
    assert code == 0 and out.splitlines()[-1] == "3 passed, 0 failed, 0 skipped", out
    # its IPv6 peer, 2001:DB8::1, is the one mtu_probe/basic-v6.pkt changes the route to
    code, out = _cli("--ip-version", "run_all", str(CORPUS / "gtests/net/tcp/mtu_probe/basic-v6.pkt"))
    assert code == 0 and out.splitlines()[-1] == "1 passed, 0 failed, 0 skipped", out


@pytest.mark.skipif(CORPUS is None, reason="packetdrill corpus not found")
def test_ipv4_mapped_sockets_are_inet6_sockets_on_an_ipv4_wire() -> None:
    # MSG_ZEROCOPY completions on an AF_INET6 socket come as SOL_IPV6/IPV6_RECVERR control
    # messages (ipv6_recv_error), whatever the wire: run_all.py defines CMSG_LEVEL_IP=SOL_IPV6
    # for its ipv4-mapped-ipv6 runs, and SOL_IP there is a mismatch.
    assert CORPUS is not None
    script = CORPUS / "gtests/net/tcp/zerocopy/basic.pkt"
    res = run_file(script, RunOptions(ip_version=MAPPED))
    assert res.status == "passed" and res.ip_version == MAPPED, res.reason
    res = run_file(script, RunOptions(ip_version=MAPPED, defines={"CMSG_LEVEL_IP": "SOL_IP"}))
    assert res.status == "failed" and "cmsg_level" in res.reason, res.reason
