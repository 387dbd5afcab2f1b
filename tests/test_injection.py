"""RFC 5961 blind injection at scale: thousands of off-path segments during a transfer.

tests/test_core_properties.py (b) checks the rate limits with a few hundred guesses; here
an attacker who knows the 4-tuple sprays both ends of a 2 MB bidirectional transfer with
in-window-but-not-exact RSTs (§3.2), SYNs at any sequence number (§4.2), and in-window
data and ACKs whose acknowledgement number is unacceptable (§5.2), from the guesses of
``attack_segment``. Every injected segment must be rejected: it never resets the
connection, never moves RCV.NXT or the state, and the transfer completes byte-identical.
The challenge ACKs it triggers stay within the per-second budget (§7).
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from pair import Transfers, make_pair
from peer import ISN_SECRET, TS_SECRET
from test_core_properties import attack_segment
from usertcp.net.memnet import LinkConfig
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import State
from usertcp.tcp.invariants import check_invariants


@pytest.mark.parametrize(("name", "cfg", "seed"), [
    ("full", StackConfig(), 5961),
    ("no-ts-no-sack", StackConfig(timestamps=False, sack=False), 7),
])
def test_thousands_of_blind_segments_during_a_transfer(name: str, cfg: StackConfig, seed: int) -> None:
    cfg = replace(cfg, isn_secret=ISN_SECRET, ts_secret=TS_SECRET, challenge_ack_limit=100,
                  invalid_ratelimit=0.0)
    pair = make_pair(LinkConfig(delay=0.005, bandwidth_bps=5e6, loss=0.005), seed=seed, cfg_a=cfg,
                     cfg_b=replace(cfg, isn_secret=TS_SECRET, ts_secret=ISN_SECRET))
    client, server = pair.open()
    drv = pair.driver
    rng = random.Random(seed)
    up, down = rng.randbytes(2 << 20), rng.randbytes(1 << 20)
    transfers = Transfers([(client, server, up), (server, client, down)])
    got = transfers.got
    targets = [(pair.a, client), (pair.b, server)]
    injected: dict[str, int] = {}
    per_second: dict[tuple[int, int], int] = {}
    rejected = 0
    deadline = drv.now() + 300.0
    while not transfers.done:
        now = drv.now()
        assert now < deadline, f"stalled: {transfers.progress()}"
        transfers.step(now)
        for i, (stack, conn) in enumerate(targets):
            if conn.state not in (State.ESTABLISHED, State.FIN_WAIT_1, State.FIN_WAIT_2, State.CLOSE_WAIT):
                continue     # a SYN may legitimately reopen a TIME-WAIT pair (RFC 6191)
            before = stack.counters["TcpExtTCPChallengeACK"]
            for _ in range(8):
                kind, pkt = attack_segment(conn, rng)
                state, rcv_nxt, una = conn.state, conn.rcv_nxt, conn.snd_una
                stack.receive(pkt, now)
                injected[kind] = injected.get(kind, 0) + 1
                assert conn.error == 0 and conn.state is state, (kind, conn)
                assert (conn.rcv_nxt, conn.snd_una) == (rcv_nxt, una), (kind, conn)
                rejected += 1
            key = (i, int(now))
            per_second[key] = per_second.get(key, 0) + stack.counters["TcpExtTCPChallengeACK"] - before
        drv.kick()
        drv.run_for(0.01)
    assert bytes(got[id(server)]) == up and bytes(got[id(client)]) == down
    for stack, conn in targets:
        assert conn.error == 0
        assert stack.counters["TcpEstabResets"] == 0 and stack.counters["UsertcpResetsReceived"] == 0
        check_invariants(stack)
    total = sum(injected.values())
    challenges = sum(st.counters["TcpExtTCPChallengeACK"] for st, _ in targets)
    skipped = sum(st.counters["TcpExtTCPACKSkippedChallenge"] + st.counters["UsertcpChallengeACKBudgetSpent"]
                  for st, _ in targets)
    print(json.dumps({"figure": "blind_injection", "config": name, "injected": total, "rejected": rejected,
                      "by_kind": injected, "challenge_acks": challenges,
                      "challenge_acks_rate_limited": skipped,
                      "bytes": len(up) + len(down), "bytes_lost": 0}))
    assert total >= 4000 and set(injected) == {"rst", "syn", "data", "ack"}
    assert rejected == total
    assert challenges > 0 and skipped > 0
    assert max(per_second.values()) <= 149          # challenge_ack_limit 100, drawn from [50, 150) a second
