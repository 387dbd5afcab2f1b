"""The ``usertcp`` command, run as ``python -m usertcp`` in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import usertcp as usertcp_package
from tshark import HAVE_TSHARK, tshark_count, tshark_problems

# Where this test imported usertcp from (src/, or the compiled build's directory).
SRC = Path(usertcp_package.__file__).resolve().parents[1]


def usertcp(*args: str, timeout: float = 60, **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "COLUMNS": "120", **extra_env}
    return subprocess.run([sys.executable, "-m", "usertcp", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_help_lists_subcommands() -> None:
    p = usertcp("--help")
    assert p.returncode == 0, p.stderr
    for name in ("demo", "bench"):
        assert name in p.stdout
    p = usertcp("bench", "--help")
    assert p.returncode == 0 and "throughput" in p.stdout and "checksum" in p.stdout
    p = usertcp("nosuch")
    assert p.returncode == 2 and "invalid choice" in p.stderr


def test_version_says_which_build_runs() -> None:
    import usertcp.tcp.connection as connection

    compiled = connection.__file__.endswith(tuple(EXTENSION_SUFFIXES))
    p = usertcp("--version")
    assert p.returncode == 0 and p.stdout.startswith(f"usertcp {usertcp_package.__version__} (")
    assert ("compiled (mypyc" in p.stdout) == compiled, p.stdout
    assert ("pure Python" in p.stdout) == (not compiled), p.stdout
    p = usertcp("--version", USERTCP_PURE="1")     # the same install, made to run its sources
    assert p.returncode == 0 and "pure Python" in p.stdout, p.stdout


def test_demo_with_pcap(tmp_path: Path) -> None:
    pcap = tmp_path / "demo.pcap"
    p = usertcp("demo", "--pcap", str(pcap), "--bytes", "300000", "--loss", "0.02")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "checksums match" in p.stdout
    assert "retransmissions" in p.stdout and "RTT" in p.stdout
    assert pcap.stat().st_size > 300_000
    if HAVE_TSHARK:
        assert tshark_count(pcap) > 200
        assert tshark_problems(pcap) == []


@pytest.mark.skipif(not HAVE_TSHARK, reason="tshark not installed")
def test_demo_default_pcap_is_clean(tmp_path: Path) -> None:
    pcap = tmp_path / "d.pcap"
    p = usertcp("demo", "--pcap", str(pcap))
    assert p.returncode == 0 and "checksums match" in p.stdout, p.stdout + p.stderr
    assert tshark_problems(pcap) == []


def test_demo_json_and_realtime() -> None:
    p = usertcp("demo", "--json", "--bytes", "200k", "--realtime", "--loss", "0")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["ok"] and res["realtime"] and res["bytes_client_to_server"] == 200_000
    assert res["sha256_sent"] == res["sha256_received"]


def test_demo_rejects_bad_loss() -> None:
    p = usertcp("demo", "--loss", "1.5")
    assert p.returncode == 2 and "--loss" in p.stderr


def test_bench_throughput_json() -> None:
    p = usertcp("bench", "throughput", "--json", "--size", "300000")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["bytes"] == 300_000
    assert res["bytes_per_s"] > 0 and res["us_per_segment"] > 0 and res["segments"] > 0
    assert res["virtual_s"] > 0 and res["cpu_s"] > 0


def test_bench_plain_output_and_bad_option() -> None:
    p = usertcp("bench", "throughput", "--size", "100000", "-o", "delay=0.002")
    assert p.returncode == 0, p.stderr
    assert "bytes_per_s:" in p.stdout          # plain lines when not a terminal
    p = usertcp("bench", "throughput", "-o", "nope=1")
    assert p.returncode == 2 and "unknown option" in p.stderr
    p = usertcp("bench", "throughput", "--size", "0")
    assert p.returncode == 2 and "size" in p.stderr
