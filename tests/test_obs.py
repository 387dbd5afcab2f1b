"""Observability: ss/nstat views, the stats file, JSON-lines traces, the Sampler, plots, progress."""

from __future__ import annotations

import argparse
import io
import json
from collections import Counter
from pathlib import Path
from typing import Protocol

import pytest

from usertcp.net.memnet import Network
from usertcp.net.pcap import read_pcap
from usertcp.obs import (
    JsonLinesTracer,
    Sampler,
    StatsFileWriter,
    format_nstat,
    format_ss,
    nstat,
    progress,
    read_stats_file,
    read_trace,
    ss_rows,
    stats_snapshot,
    write_stats_file,
)
from usertcp.obs import counters as nstat_mod
from usertcp.obs import plot as plot_mod
from usertcp.obs import ss as ss_mod
from usertcp.obs import trace as trace_mod
from usertcp.obs.scenario import Transfer, run_transfer
from usertcp.tcp.stack import Stack


class _CliModule(Protocol):
    """What _cli needs of an obs module (ss, nstat, trace, plot)."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def cli(self, args: argparse.Namespace) -> int: ...


def _cli(module: _CliModule, argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    status: int = module.cli(parser.parse_args(argv))
    return status


@pytest.fixture(scope="module")
def midway() -> Transfer:
    """A lossy transfer stopped half way: connections open, data queued, some retransmitted."""
    return run_transfer(size=600_000, loss=0.03, seed=2, stop_at=0.5)


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Transfer]:
    path = tmp_path_factory.mktemp("trace") / "t.jsonl"
    tracer = JsonLinesTracer(path)

    def setup(net: Network, client: Stack, server: Stack) -> None:
        tracer.attach(client)
        tracer.attach(server)
        Sampler(tracer, network=net)
    tr = run_transfer(size=300_000, loss=0.03, seed=5, setup=setup)
    tracer.close()
    return path, tr


# ----------------------------------------------------------------------------- ss / nstat


def test_ss_rows_report_state_queues_and_tcp_info(midway: Transfer) -> None:
    client, server = midway.stacks
    (row,) = ss_rows(client)
    conn = midway.client_conn
    assert row["state"] == "ESTAB"
    assert row["local"] == f"10.0.0.1:{conn.local_port}" and row["peer"] == "10.0.0.2:5001"
    assert row["send_q"] == conn.send_queue_bytes > 0
    info = conn.info()
    assert row["cwnd"] == info["tcpi_snd_cwnd"] > 0
    assert row["rtt_ms"] == info["tcpi_rtt"] / 1000 > 0
    assert row["total_retrans"] == client.counters["TcpRetransSegs"] > 0
    rows = ss_rows(server)
    assert [r["state"] for r in rows] == ["LISTEN", "ESTAB"]
    assert rows[0]["local"] == "*:5001" and rows[0]["send_q"] == 128
    assert midway.server_conn is not None
    assert rows[1]["bytes_received"] == midway.received + midway.server_conn.readable_bytes
    text = format_ss(client)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["State", "Recv-Q", "Send-Q"]
    assert lines[1].split()[:3] == ["ESTAB", "0", str(conn.send_queue_bytes)]
    assert f"cwnd:{row['cwnd']}" in lines[2]
    assert f"retrans:{row['retrans']}/{row['total_retrans']}" in lines[2]
    assert "cwnd:" not in format_ss(client, info=False)
    json.dumps(ss_rows(client))                # JSON-ready


def test_nstat_uses_linux_names_and_matches_the_counters(midway: Transfer) -> None:
    client = midway.client
    counters = nstat(client)
    assert counters == {k: v for k, v in sorted(client.counters.items()) if v}
    assert list(counters) == sorted(counters)
    for name in ("TcpActiveOpens", "TcpInSegs", "TcpOutSegs", "TcpRetransSegs"):
        assert counters[name] > 0
    text = format_nstat(counters, title="client")
    assert text.splitlines()[0] == "#client"
    assert any(line.split() == ["TcpActiveOpens", "1"] for line in text.splitlines())


def test_stats_file_round_trip_and_cli(midway: Transfer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    path = tmp_path / "stats.json"
    write_stats_file(path, midway.server, now=1.5)
    (snap,) = read_stats_file(path)
    assert snap["format"] == "usertcp-stats" and snap["version"] == 1
    assert snap["stack"] == "server" and snap["time"] == 1.5 and snap["addresses"] == ["10.0.0.2"]
    assert snap["counters"] == nstat(midway.server)
    assert [r["state"] for r in snap["connections"]] == ["LISTEN", "ESTAB"]
    write_stats_file(path, *midway.stacks)
    assert [s["stack"] for s in read_stats_file(path)] == ["client", "server"]

    assert _cli(ss_mod, ["--stats-file", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [s["stack"] for s in out] == ["client", "server"]
    assert out[0]["connections"][0]["state"] == "ESTAB"
    assert _cli(ss_mod, ["--stats-file", str(path), "-l"]) == 0
    text = capsys.readouterr().out
    assert "LISTEN" in text and "ESTAB" not in text
    assert _cli(nstat_mod, ["--stats-file", str(path), "--json", "retranssegs", "activeopens"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out[0]["counters"] == {"TcpActiveOpens": 1,
                                  "TcpRetransSegs": midway.client.counters["TcpRetransSegs"]}

    bad = tmp_path / "bad.json"
    bad.write_text('{"connections": []}')
    assert _cli(nstat_mod, ["--stats-file", str(bad)]) == 1
    assert "not a usertcp stats file" in capsys.readouterr().err


def test_stats_file_writer_rate_limits(midway: Transfer, tmp_path: Path) -> None:
    w = StatsFileWriter(tmp_path / "s.json", midway.client, interval=1.0)
    assert w.maybe_write(10.0) and not w.maybe_write(10.5) and w.maybe_write(11.0)
    assert w.writes == 2 and read_stats_file(tmp_path / "s.json")[0]["time"] == 11.0
    assert not list(tmp_path.glob(".stats-*"))      # no temp files left behind
    bare = tmp_path / "bare.json"                   # what another writer may produce
    bare.write_text('{"counters": {"TcpInSegs": 3}, "per_queue": []}')
    assert read_stats_file(bare) == [{"counters": {"TcpInSegs": 3}, "per_queue": [], "connections": []}]


def test_ss_and_nstat_demo_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(ss_mod, ["--demo", "--size", "200000", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [s["stack"] for s in out] == ["client", "server"]
    assert out[0]["connections"][0]["state"] == "ESTAB"
    assert _cli(nstat_mod, ["--size", "200000"]) == 0        # plain text when not a tty
    text = capsys.readouterr().out
    assert "#client" in text and "#server" in text and "TcpPassiveOpens" in text
    assert stats_snapshot(Stack(["10.9.9.9"], name="idle"))["connections"] == []


# ----------------------------------------------------------------------------- traces


def test_tracer_writes_state_changes_tagged_by_stack() -> None:
    buf = io.StringIO()
    tracer = JsonLinesTracer(buf)

    def setup(net: Network, client: Stack, server: Stack) -> None:
        tracer.attach(client)
        server.tracer = tracer                   # plain assignment works too (no "stack" tag)
    run_transfer(size=10_000, loss=0.0, setup=setup)
    events = read_trace(io.StringIO(buf.getvalue()))
    assert tracer.count == len(events) > 0
    client_states = [e["data"]["new"] for e in events if e.get("stack") == "client"]
    assert client_states[:2] == ["SYN_SENT", "ESTABLISHED"]
    assert "TIME_WAIT" in client_states
    server_states = [e["data"]["new"] for e in events if "stack" not in e]
    assert server_states[:2] == ["SYN_RECEIVED", "ESTABLISHED"] and server_states[-1] == "CLOSED"
    with pytest.raises(ValueError, match="line 2"):
        read_trace(["{\"name\": \"x\"}", "not json"])


def test_sampler_packets_losses_and_congestion_events(traced: tuple[Path, Transfer]) -> None:
    path, tr = traced
    events = read_trace(path)
    names = Counter(e["name"] for e in events)
    stats = tr.network.link_stats()
    assert names["transport:packet_sent"] == sum(s["sent"] for s in stats.values())
    assert names["transport:packet_received"] == sum(s["delivered"] for s in stats.values())
    cid = f"10.0.0.1:{tr.client_conn.local_port}-10.0.0.2:5001"
    sent = [e["data"] for e in events if e["name"] == "transport:packet_sent" and e["data"]["conn"] == cid]
    assert sent[0]["flags"] == "S" and sent[0]["rel_seq"] == 0
    assert sum(d["retransmission"] for d in sent) == tr.client.counters["TcpRetransSegs"] > 0
    assert sum(d["len"] for d in sent if not d["retransmission"]) == 300_000
    metrics = [e["data"] for e in events
               if e["name"] == "recovery:metrics_updated" and e["data"]["conn"] == cid]
    assert max(m["cwnd"] for m in metrics) > 10 * 1448                  # slow start grew it
    assert any(m["ssthresh"] is not None for m in metrics)              # a loss set ssthresh
    states = [e["data"]["new"] for e in events if e["name"] == "recovery:congestion_state_updated"]
    assert "Recovery" in states
    assert any(e["name"] == "recovery:packet_lost" for e in events)
    acks = [e["data"] for e in events if e["name"] == "transport:packet_received"
            and e["data"]["conn"].startswith("10.0.0.2")]
    assert max(a["rel_ack"] or 0 for a in acks) == 300_002             # SYN + data + FIN
    assert any(a.get("sack") for a in acks)


def test_trace_cli_writes_trace_pcap_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, pcap, png = tmp_path / "t.jsonl", tmp_path / "t.pcap", tmp_path / "t.png"
    assert _cli(trace_mod, ["-o", str(out), "--pcap", str(pcap), "--plot", str(png), "--size", "100000",
                            "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["ok"] and summary["events"] == len(read_trace(out))
    sent = sum(1 for e in read_trace(out) if e["name"] == "transport:packet_sent")
    assert len(read_pcap(pcap)) == sent
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ----------------------------------------------------------------------------- plot


def test_plot_draws_sequence_and_cwnd(traced: tuple[Path, Transfer], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    path, tr = traced
    png = tmp_path / "seq.png"
    summary = plot_mod.plot_trace(path, png)
    assert summary["conn"] == f"10.0.0.1:{tr.client_conn.local_port}-10.0.0.2:5001"   # the big sender
    assert summary["retransmissions"] == tr.client.counters["TcpRetransSegs"]
    assert summary["segments"] > 200 and summary["metrics"] > 10 and summary["acks"] > 100
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(data[16:20], "big") == 1100 and int.from_bytes(data[20:24], "big") == 850
    assert _cli(plot_mod, [str(path), "--list", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert next(iter(listing)) == summary["conn"] and listing[summary["conn"]] > 300_000   # + retransmissions
    assert _cli(plot_mod, [str(path), "-o", str(tmp_path / "b.png"), "--conn", "1.2.3.4:1-5.6.7.8:2"]) == 1
    assert "sent no data" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match="no transport:packet_sent"):
        plot_mod.plot_trace(empty, tmp_path / "c.png")


# ----------------------------------------------------------------------------- progress


def test_progress_plain_lines_when_not_a_tty() -> None:
    out = io.StringIO()
    assert list(progress(range(20), label="drill", tty=False, stream=out)) == list(range(20))
    lines = out.getvalue().splitlines()
    assert lines[0] == "drill: 2/20 (10%)" and lines[-1] == "drill: 20/20 (100%)" and len(lines) == 10
    out = io.StringIO()
    assert list(progress(iter(range(5)), label="x", tty=False, stream=out)) == list(range(5))
    assert out.getvalue() == "x: done, 5 items\n"


def test_progress_bar_on_a_tty(capsys: pytest.CaptureFixture[str]) -> None:
    assert list(progress([1, 2, 3], label="bench", tty=True)) == [1, 2, 3]
    assert "bench" in capsys.readouterr().out


# ----------------------------------------------------------------------------- the usertcp command


def test_subcommands_plug_into_the_usertcp_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The registry lines proposed for usertcp.cli: each module wires itself (add_arguments/cli)."""
    from usertcp import cli

    for name, module in (("ss", "usertcp.obs.ss"), ("nstat", "usertcp.obs.counters"),
                         ("trace", "usertcp.obs.trace"), ("plot", "usertcp.obs.plot")):
        monkeypatch.setitem(cli.COMMANDS, name, cli.Command(module, f"{name} help"))
    assert cli.main(["nstat", "--size", "100000", "--json", "TcpActiveOpens"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out[0]["counters"] == {"TcpActiveOpens": 1}
    trace = tmp_path / "t.jsonl"
    assert cli.main(["trace", "-o", str(trace), "--size", "50000"]) == 0
    assert cli.main(["plot", str(trace), "-o", str(tmp_path / "t.png")]) == 0
    assert "segments" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["ss", "--help"])
    assert "like 'ss -ti'" in capsys.readouterr().out
