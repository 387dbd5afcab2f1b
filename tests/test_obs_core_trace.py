"""The core's own trace points (losses, retransmissions, congestion state, RTO) on a lossy run."""

from __future__ import annotations

from typing import Any

from pair import make_pair, transfer
from usertcp.net.memnet import LinkConfig


def test_core_emits_loss_retransmit_and_congestion_events() -> None:
    events: list[dict[str, Any]] = []
    pair = make_pair(LinkConfig(delay=0.005, loss=0.03), seed=21)
    pair.a.tracer = events.append
    client, server = pair.open()
    data = bytes(range(256)) * 4000
    assert transfer(pair, client, server, data) == data
    names = {e["name"] for e in events}
    assert {"tcp:state_updated", "tcp:packet_lost", "tcp:retransmit", "tcp:congestion_state",
            "tcp:cwnd"} <= names
    retrans = [e for e in events if e["name"] == "tcp:retransmit"]
    assert len(retrans) == pair.a.counters["TcpRetransSegs"]
    lost = [e for e in events if e["name"] == "tcp:packet_lost"]
    assert all(e["data"]["end"] > e["data"]["rel_seq"] for e in lost)
    assert all(e["data"]["conn"] == client.trace_id for e in events if e["name"] != "tcp:state_updated")


def test_transfer_unaffected_with_tracing_off() -> None:
    pair = make_pair(LinkConfig(delay=0.005, loss=0.03), seed=21)
    assert pair.a.tracer is None
    client, server = pair.open()
    assert transfer(pair, client, server, b"x" * 100_000) == b"x" * 100_000
