"""The command line as a newcomer uses it: sizes, trace/plot agreement, plot legibility, ss on
an 80-column terminal."""

from __future__ import annotations

import argparse
import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from usertcp.cli import build_parser, parse_size


@pytest.mark.parametrize(("text", "value"), [
    ("500000", 500_000), ("64k", 64_000), ("64K", 64_000), ("5M", 5_000_000), ("5MB", 5_000_000),
    ("1.5M", 1_500_000), ("2G", 2_000_000_000), ("64Ki", 65_536), ("1MiB", 1 << 20), ("1e6", 1_000_000),
])
def test_parse_size(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "-5", "5X", "Ki", "1.5", "5 M B", "M5", "0.1k1"])
def test_parse_size_refuses(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_size(text)


@pytest.mark.parametrize(("argv", "dest"), [
    (["demo", "--bytes", "5M"], "bytes"), (["trace", "-o", "x", "--size", "5M"], "size"),
    (["ss", "--size", "5M"], "size"), (["nstat", "--size", "5M"], "size"),
    (["bench", "throughput", "--size", "5M"], "size"),
    (["serve", "--tun", "t", "--address", "10.0.0.2", "--peer-address", "10.0.0.1/24", "--app", "source",
      "--bytes", "5M"], "bytes"),
])
def test_every_size_option_takes_suffixes(argv: list[str], dest: str) -> None:
    args = build_parser(argv[0]).parse_args(argv)
    assert getattr(args, dest) == 5_000_000


def test_trace_duration_excludes_time_wait_and_matches_the_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = subprocess.run([sys.executable, "-m", "usertcp", "trace", "-o", str(tmp_path / "t.jsonl"),
                          "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    trace = json.loads(out.stdout)
    from usertcp.obs.plot import plot_trace

    plot = plot_trace(tmp_path / "t.jsonl", tmp_path / "t.png")
    # The TIME_WAIT (60 s) is not part of the transfer; the two ends differ by the last ACK's trip.
    assert trace["ok"] and 0 < trace["duration_s"] < 5, trace
    assert abs(trace["duration_s"] - plot["duration_s"]) < 0.05, (trace, plot)


def test_plot_draws_retransmissions_as_the_legend_shows_them_and_bytes_in_engineering_units(
        tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.ticker import EngFormatter

    from usertcp.obs.plot import draw_trace
    from usertcp.obs.scenario import run_transfer
    from usertcp.obs.trace import JsonLinesTracer, Sampler, read_trace

    path = tmp_path / "t.jsonl"
    tracer = JsonLinesTracer(path)

    def setup(net: object, client: object, server: object) -> None:
        tracer.attach(client)          # type: ignore[arg-type]
        tracer.attach(server)          # type: ignore[arg-type]
        Sampler(tracer, network=net)   # type: ignore[arg-type]

    try:
        run_transfer(size=5_000_000, loss=0.02, seed=3, setup=setup)
    finally:
        tracer.close()
    fig, summary = draw_trace(read_trace(path))
    assert summary["retransmissions"] > 0
    seq_ax, cwnd_ax = fig.axes
    fig.canvas.draw()
    for ax in (seq_ax, cwnd_ax):
        assert isinstance(ax.yaxis.get_major_formatter(), EngFormatter)
        assert ax.yaxis.get_offset_text().get_text() == ""          # no bare "1e6"
        labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
        assert labels, ax
        for lab in labels:
            assert re.fullmatch(r"-?[0-9.]+ ?[kMG]?B", lab.replace("\u2212", "-")), labels
    leg = seq_ax.get_legend()
    legend = {t.get_text(): h for t, h in zip(leg.get_texts(), leg.legend_handles, strict=True)}
    handle = legend["retransmission"]
    drawn = [ln for ln in seq_ax.get_lines() if ln.get_label() == "retransmission"]
    assert len(drawn) == 1 and len(drawn[0].get_xdata()) == summary["retransmissions"]
    assert handle.get_marker() == drawn[0].get_marker() not in ("", "None", ".", ",")
    assert drawn[0].get_markersize() >= 6


def _run_on_terminal(argv: list[str], columns: int) -> str:
    """Run ``usertcp ARGV`` with a pseudo-terminal of ``columns`` columns as stdout."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "40", "TERM": "xterm"}
    proc = subprocess.Popen([sys.executable, "-m", "usertcp", *argv], stdout=slave, stderr=subprocess.PIPE,
                            env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:            # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(120) == 0
    return out.decode().replace("\r\n", "\n")


def test_ss_fits_an_80_column_terminal_with_whole_addresses_and_tcp_info() -> None:
    out = _run_on_terminal(["ss"], 80)
    lines = out.splitlines()
    too_wide = [line for line in lines if len(line.expandtabs(8)) > 80]
    assert not too_wide, too_wide
    assert "\u2026" not in out                                      # nothing cut with an ellipsis
    estab = [i for i, line in enumerate(lines) if line.startswith("ESTAB")]
    assert len(estab) == 2, out                                     # one per stack
    for i in estab:
        assert re.search(r"10\.0\.0\.[12]:\d+ +10\.0\.0\.[12]:\d+$", lines[i]), lines[i]
        assert lines[i + 1].startswith("\t rto:") and "cwnd:" in lines[i + 1], out   # the tcp_info line
