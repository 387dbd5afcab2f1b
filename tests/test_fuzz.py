"""Fuzzing the packet input under a fixed CI budget, seeded from the pcaps the tests write.

The seeds: fuzz/stackfuzz.py scenarios (lossy SACK/timestamp transfer, a plain one, TFO,
SYN cookies, an abort) run between two stacks, captured with PcapWriter into tmp_path,
read back and replayed to a fresh server with ``check_invariants`` after every event.
The fuzz run mutates them (deterministic seed; ``USERTCP_FUZZ_EXECS`` sets the budget) and
every execution must end without an exception and without a broken invariant. The one core
bug the fuzzer found (a SACKed head of the queue at an RTO) is fixed; its minimal
reproducer stays below as a regression test. The atheris target (fuzz/fuzz_stack.py) takes
the same pcaps as its corpus.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from peer import ScriptedPeer
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import Connection
from usertcp.tcp.invariants import CheckedEndpoint, InvariantViolation, check_invariants
from usertcp.wire.tcp import encode_options

FUZZ_DIR = Path(__file__).resolve().parent.parent / "fuzz"
sys.path.insert(0, str(FUZZ_DIR))

import fuzz_stack  # noqa: E402
import stackfuzz as sf  # noqa: E402

EXECS = int(os.environ.get("USERTCP_FUZZ_EXECS", "3000"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("seeds")
    paths = {}
    for sc in sf.SCENARIOS:
        path = out / f"{sc.name}.pcap"
        sf.record_scenario(sc, path)
        paths[sc.name] = path
    return paths


def test_seed_pcaps_replay_exactly(corpus: dict[str, Path]) -> None:
    """Replaying a capture reproduces the run: the server receives every byte again."""
    for sc in sf.SCENARIOS:
        trace = sf.seed_trace(corpus[sc.name])
        st_ = sf.run_trace(trace)
        expect = sc.size * sc.conns * (2 if sc.tfo else 1)
        assert st_.received == expect, (sc.name, st_.received, expect)
        assert st_.checks >= len(trace)
    counters = sf.run_trace(sf.seed_trace(corpus["flood-cookies"])).counters
    assert counters.get("TcpExtSyncookiesRecv", 0) > 0          # the seeds cover SYN cookies
    assert sf.run_trace(sf.seed_trace(corpus["tfo"])).counters.get("TcpExtTCPFastOpenPassive", 0) > 0


def test_fuzz_packet_input_fixed_budget(corpus: dict[str, Path], tmp_path: Path) -> None:
    seeds = [sf.seed_trace(p) for p in corpus.values()]
    res = sf.fuzz(seeds, executions=EXECS, seed=9293)
    new = []
    for i, (msg, trace) in enumerate(res.findings):
        path = tmp_path / f"finding-{i}.pcap"
        sf.write_trace(path, trace)
        new.append(f"{msg} (reproducer {path})")
    print(json.dumps({"figure": "fuzz", "executions": res.executions, "packets": res.packets,
                      "invariant_checks": res.checks, "findings": len(new)}))
    assert res.executions == EXECS and res.packets > EXECS * 20
    assert not new, "\n".join(new[:5])


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_atheris_target_on_mutated_pcap_bytes(corpus: dict[str, Path], data: st.DataObject) -> None:
    """The atheris entry point on byte-mutated pcaps (what libFuzzer feeds it)."""
    name = data.draw(st.sampled_from(sorted(corpus)))
    raw = bytearray(corpus[name].read_bytes())
    for _ in range(data.draw(st.integers(0, 6))):
        pos = data.draw(st.integers(24, len(raw) - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.one_of(st.none(), st.integers(0, len(raw))))
    if cut is not None:
        raw = raw[:cut]
    fuzz_stack.test_one_input(bytes(raw))


def test_invariant_checker_catches_corruption() -> None:
    """The checker is able to fail: corrupt one counter of a live connection."""
    p = ScriptedPeer()
    p.listen()
    conn = p.passive_open()
    conn.send(b"x" * 3000, p.now)
    check_invariants(p.stack)
    ep = CheckedEndpoint(p.stack)
    ep.handle_timer(p.now)
    conn.recovery.lost_bytes += 1
    with pytest.raises(InvariantViolation, match="scoreboard"):
        check_invariants(p.stack)
    conn.recovery.lost_bytes -= 1
    conn.snd_nxt = conn.snd_max + 1
    with pytest.raises(InvariantViolation, match="snd-order"):
        ep.receive(b"", p.now)


# --------------------------------------------------------------------- regressions

def sacked_head_at_rto() -> tuple[ScriptedPeer, Connection]:
    """The minimal script of the fuzzer's finding: a SACKed head of the queue at an RTO."""
    p = ScriptedPeer(StackConfig(timestamps=False))
    lst = p.listen()
    p.send("S", 0, options=encode_options(mss=1000, sack_permitted=True))
    p.expect("S.", 0, 1)
    p.send(".", 1, 1)
    conn = lst.accept()
    assert conn is not None
    conn.send(b"x" * 3000, p.now)
    p.drain()
    isn = p.local_isn
    # A SACK block starting at SND.UNA (a reneging or malicious receiver) marks the head SACKed.
    block = ((isn + 1) & 0xFFFFFFFF, (isn + 1001) & 0xFFFFFFFF)
    p.send(".", 1, 1, options=encode_options(sack_blocks=[block]))
    p.advance(1.5)                       # the RTO fires with the SACKed head
    p.send(".", 1, 3001)                 # everything acknowledged
    return p, conn


def test_regression_sacked_head_at_rto_is_sack_reneging() -> None:
    # Linux tcp_timeout_mark_lost: the SACK marks are forgotten (TCPSACKReneging), no leak.
    p, conn = sacked_head_at_rto()
    assert p.stack.counters["TcpExtTCPSACKReneging"] == 1
    assert conn.recovery.retrans_bytes == 0 and conn.in_flight == 0
    check_invariants(p.stack)


def test_mutator_is_deterministic(corpus: dict[str, Path]) -> None:
    seeds = [sf.seed_trace(p) for p in corpus.values()]
    runs = [[sf.mutate(random.Random(i), seeds[0], seeds) for i in range(5)] for _ in range(2)]
    assert runs[0] == runs[1] and any(m != seeds[0] for m in runs[0])
