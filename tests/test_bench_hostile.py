"""``usertcp bench hostile``: a tiny run completes and reports every figure (issue 20)."""

from __future__ import annotations

from usertcp.bench import hostile


def test_bench_hostile_reports_each_attack_beside_no_attack() -> None:
    out = hostile.run(span=0.2, clients=2, acks=8, repeat=1, queue_lengths="100", rate=500.0,
                      hoarders=6, mem_limit=1 << 20, storm_pieces=100)
    cost = out["sack_cost"]["100"]
    for kind in ("ordinary", "recovery", "split", "span", "mixed"):
        assert cost[f"{kind}_us"] > 0
    avail = out["availability"]
    for name in ("no_attack", "syn_flood", "zero_window_hoarding", "sack_storm"):
        assert avail[name]["server_s"] >= 0.2
    assert avail["no_attack"]["completed"] > 0
    for name in ("zero_window_hoarding", "sack_storm"):
        assert avail[name]["attack_took_hold"], name
    assert avail["zero_window_hoarding"]["server_mem_used"] >= 0.9 * (1 << 20)
    assert isinstance(out["goal_met_vs_ordinary"], bool)
