"""Header prediction: the fast path changes cost, never behaviour (differential tests)."""

from __future__ import annotations

import functools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pair import make_pair
from usertcp.bench.replay import Event, Trace, connection_state, fixed_config, record, record_rr, replay
from usertcp.tcp.connection import Connection
from usertcp.tcp.stack import Stack
from usertcp.wire.packet import build_packet, parse_packet
from usertcp.wire.segment import ACK


@functools.cache
def plain_trace() -> Trace:
    return record(size=300_000, upload=200_000, seed=3)


@functools.cache
def lossy_trace() -> Trace:
    return record(size=300_000, upload=400_000, loss=0.03, seed=6)


@functools.cache
def md5_trace() -> Trace:
    return record(size=200_000, upload=100_000, seed=5, md5_key=b"bgp-secret")


def assert_same(trace: Trace, events: list[Event] | None = None, *, require_hits: bool = False,
                require_ack_hits: bool = True) -> None:
    fast = replay(trace, header_prediction=True, events=events)
    slow = replay(trace, header_prediction=False, events=events)
    if require_hits:
        assert fast.stack.counters["TcpExtTCPHPHits"] > 0
        if require_ack_hits:
            assert fast.stack.counters["TcpExtTCPHPAcks"] > 0
    assert slow.stack.counters["TcpExtTCPHPHits"] == 0
    assert len(fast.outputs) == len(slow.outputs)
    for i, (a, b) in enumerate(zip(fast.outputs, slow.outputs, strict=True)):
        assert a == b, f"output {i} differs: fast {parse_packet(a[1]).__class__} at {a[0]} vs {b[0]}"
    assert fast.delivered == slow.delivered
    assert connection_state(fast.conn) == connection_state(slow.conn)


def test_fast_path_is_used_and_identical_plain() -> None:
    trace = plain_trace()
    assert_same(trace, require_hits=True)
    fast = replay(trace, header_prediction=True)
    # Most established segments of a clean bulk transfer are predictable. Not the ACKs whose
    # window changed: while the peer's window opens (tcp_grow_window, receive buffer
    # auto-tuning) each ACK offers a new one and takes the slow path, in Linux too.
    c = fast.stack.counters
    assert c.fast_path_ratio() > 0.75, c.snapshot()


def test_fast_path_identical_under_loss() -> None:
    # Predicted data, but no predicted ACK: with losses the peer's window keeps opening (its
    # rcv_ssthresh grows with every in-order segment, tcp_grow_window) and moving with its
    # out-of-order queue, so each ACK offers a new window, which Linux never predicts either.
    assert_same(lossy_trace(), require_hits=True, require_ack_hits=False)


def test_fast_path_identical_md5() -> None:
    trace = md5_trace()
    assert_same(trace, require_hits=True)
    fast = replay(trace, header_prediction=True)
    assert fast.conn is not None and fast.conn.md5_key == b"bgp-secret"
    assert fast.stack.counters["TcpExtTCPMD5Failure"] == 0


def test_md5_fast_path_setting_off_takes_slow_path() -> None:
    trace = md5_trace()
    off = replay(trace, header_prediction=True, md5_fast_path=False)
    assert off.stack.counters["TcpExtTCPHPHits"] == 0
    on = replay(trace, header_prediction=True, md5_fast_path=True)
    assert on.outputs == off.outputs


def _mutate(ev: Event, how: int, value: int) -> list[Event]:
    """Adversarial variants of one inbound packet (rebuilt with a valid checksum)."""
    if ev.kind != "pkt":
        return [ev]
    if how == 0:
        return []                                      # lost
    if how == 1:
        return [ev, Event(ev.time, ev.kind, ev.data)]  # duplicated
    seg = parse_packet(ev.data)
    fields: dict[str, Any]                            # build_packet's keywords, edited below
    fields = dict(src=seg.src, dst=seg.dst, sport=seg.sport, dport=seg.dport, seq=seg.seq, ack=seg.ack,
                  flags=seg.flags, window=seg.window, urg_ptr=seg.urg_ptr, options=bytes(seg.raw_options),
                  payload=[bytes(seg.payload)])
    opts = bytearray(fields["options"])
    if how == 2:
        fields["window"] = value & 0xFFFF              # a window change
    elif how == 3:
        fields["seq"] = (seg.seq + value) & 0xFFFFFFFF  # a sequence gap / old data
    elif how == 4:
        fields["ack"] = (seg.ack - value) & 0xFFFFFFFF  # old or duplicate ACK
    elif how == 5 and len(opts) >= 12 and opts[2] == 8:
        opts[4:8] = ((int.from_bytes(opts[4:8], "big") - value) & 0xFFFFFFFF).to_bytes(4, "big")  # PAWS
        fields["options"] = bytes(opts)
    elif how == 6:
        fields["flags"] = seg.flags | 0x20             # urgent
        fields["urg_ptr"] = value & 0xFFFF
    elif how == 7:
        fields["flags"] = seg.flags | 0x08             # PSH is ignored by the prediction
    if seg.md5 is not None:
        return [ev]                                    # re-signing needs the key: keep as is
    return [Event(ev.time, "pkt", build_packet(**fields).tobytes())]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(min_value=0, max_value=10_000), st.integers(0, 7),
                          st.integers(min_value=0, max_value=70_000)), min_size=1, max_size=25))
def test_differential_adversarial(mutations: list[tuple[int, int, int]]) -> None:
    trace = plain_trace()
    events = list(trace.events)
    for index, how, value in mutations:
        i = index % len(events)
        events[i:i + 1] = _mutate(events[i], how, value)
    assert_same(trace, events)


def test_prediction_off_while_out_of_order_data_is_queued() -> None:
    trace = lossy_trace()
    fast = replay(trace, header_prediction=True)
    assert fast.stack.counters["TcpExtTCPOFOQueue"] > 0
    assert fast.stack.counters["UsertcpSlowPathSegs"] > 0


def test_md5_crossed_syn_prediction_header_length() -> None:
    """Simultaneous open of a signed connection: the prediction covers TS + MD5 (52-byte header)."""
    from pair import make_pair
    from usertcp.tcp.connection import State
    from usertcp.tcp.md5sig import Md5Keys
    cfg = fixed_config()
    pair = make_pair(seed=9, cfg_a=cfg, cfg_b=fixed_config())
    keys_a, keys_b = Md5Keys(), Md5Keys()
    keys_a.add("10.0.0.2", b"k")
    keys_b.add("10.0.0.1", b"k")
    ca = pair.a.create_connection("10.0.0.2", 179, local_port=179)
    cb = pair.b.create_connection("10.0.0.1", 179, local_port=179)
    ca.md5_keys, cb.md5_keys = keys_a, keys_b
    pair.a.connect(ca, 0.0)
    pair.b.connect(cb, 0.0)
    pair.driver.kick()
    assert pair.driver.run_until(lambda: ca.state is State.ESTABLISHED and cb.state is State.ESTABLISHED, 10)
    assert ca.passive is False and cb.passive is False
    data = bytes(range(256)) * 400
    sent = 0
    for _ in range(200):        # one MSS per skb without GSO: the send buffer takes it in parts
        sent += ca.send(data[sent:], pair.now)
        pair.driver.kick()
        pair.driver.run_for(0.01)
        if sent == len(data):
            break
    pair.driver.run_for(2.0)
    assert cb.recv(1 << 20, pair.now) == data
    assert cb.pred_flags >> 28 == (20 + 12 + 20) // 4
    assert pair.b.counters["TcpExtTCPHPHits"] > 0
    assert pair.b.counters["TcpExtTCPMD5Failure"] == 0


# ------------------------------------------- Linux's rule: what the fast path takes


@functools.cache
def rr_trace(active: bool = False, md5: bool = False) -> Trace:
    """Request/response: every segment is in-order data whose ACK advances (netperf TCP_RR)."""
    return record_rr(transactions=60, seed=21, active=active, md5_key=b"rr-key" if md5 else None)


@functools.cache
def reno_lossy_trace() -> Trace:
    """No SACK, with loss: duplicate pure ACKs that match the prediction (no SACK option)."""
    return record(size=100_000, upload=300_000, loss=0.03, seed=4, config=fixed_config(sack=False))


@functools.cache
def active_bulk_trace() -> Trace:
    """The active-open side receiving bulk data."""
    return record(size=50_000, upload=300_000, seed=6, active=True)


def _scripted_pair() -> tuple[Stack, Connection, Stack, Connection]:
    """Two stacks without timestamps or SACK, established; b has data in flight to a."""
    cfg = fixed_config(timestamps=False, sack=False)
    pair = make_pair(seed=5, cfg_a=cfg, cfg_b=fixed_config(timestamps=False, sack=False))
    client, server = pair.open(7001)
    server.send(b"x" * 3000, pair.now)       # three segments in flight from b
    pair.b.datagrams_to_send()               # ... and lost: a never sees them
    assert server.pred_flags and server.snd_max > server.snd_una
    return pair.a, client, pair.b, server


def _from_client(client: Connection, server: Connection, *, ack_off: int, payload: bytes = b"") -> bytes:
    """A segment from the client as it would build it: SEQ = its SND.NXT, the window it advertised."""
    return build_packet(src=client.local_ip, dst=client.remote_ip, sport=client.local_port,
                        dport=client.remote_port, seq=(client.iss + client.snd_nxt) & 0xFFFFFFFF,
                        ack=(server.iss + ack_off) & 0xFFFFFFFF, flags=ACK,
                        window=server.snd_wnd >> server.snd_wscale,
                        payload=[payload] if payload else []).tobytes()


def test_duplicate_pure_ack_takes_the_fast_path() -> None:
    """tcp_rcv_established: a predicted pure ACK with SEG.ACK = SND.UNA enters the fast path
    (tcp_ack does the duplicate-ACK work); it is not a slow-path segment."""
    _a, client, b, server = _scripted_pair()
    c = b.counters
    slow, acks = c["UsertcpSlowPathSegs"], c["TcpExtTCPHPAcks"]
    dup = _from_client(client, server, ack_off=server.snd_una)
    b.receive(dup, 0.1)
    assert c["UsertcpDupAcks"] == 1 and server.recovery.dupacks == 1
    assert c["UsertcpSlowPathSegs"] == slow and c["TcpExtTCPHPAcks"] == acks
    b.receive(dup, 0.1)
    b.receive(dup, 0.1)                      # the third: fast retransmit (RFC 5681), as the slow path
    assert server.recovery.dupacks == 3 and c["UsertcpSlowPathSegs"] == slow
    assert any(len(parse_packet(p.tobytes()).payload) for p in b.datagrams_to_send())


def test_data_with_advancing_ack_takes_the_fast_path() -> None:
    """In-order data whose ACK advances SND.UNA: Linux's fast path queues it, then tcp_ack."""
    _a, client, b, server = _scripted_pair()
    c = b.counters
    slow, hits, acks = c["UsertcpSlowPathSegs"], c["TcpExtTCPHPHits"], c["TcpExtTCPHPAcks"]
    b.receive(_from_client(client, server, ack_off=server.snd_una + 1000, payload=b"request"), 0.1)
    assert c["UsertcpSlowPathSegs"] == slow
    assert (c["TcpExtTCPHPHits"], c["TcpExtTCPHPAcks"]) == (hits + 1, acks + 1)
    assert server.recv(100, 0.1) == b"request" and server.snd_una == 1 + 1000


def test_fast_path_identical_request_response() -> None:
    for active in (False, True):
        trace = rr_trace(active)
        assert_same(trace, require_hits=True)
        c = replay(trace, header_prediction=True).stack.counters
        assert c["TcpExtTCPHPHits"] >= 60 and c["UsertcpSlowPathSegs"] <= 2, c.snapshot()


def test_fast_path_identical_request_response_md5() -> None:
    trace = rr_trace(md5=True)
    assert_same(trace, require_hits=True)
    c = replay(trace, header_prediction=True).stack.counters
    assert c["TcpExtTCPHPHits"] >= 60 and c["TcpExtTCPMD5Failure"] == 0


def test_fast_path_identical_reno_duplicate_acks() -> None:
    trace = reno_lossy_trace()
    assert_same(trace)
    c = replay(trace, header_prediction=True).stack.counters
    taken = c["TcpInSegs"] - c["UsertcpSlowPathSegs"] - c["TcpExtTCPHPHits"] - c["TcpExtTCPHPAcks"]
    assert c["UsertcpDupAcks"] > 0 and taken > 3, c.snapshot()   # dupacks beyond the handshake's


def test_fast_path_identical_active_open() -> None:
    assert_same(active_bulk_trace(), require_hits=True)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["rr", "rr_active", "reno"]),
       st.lists(st.tuples(st.integers(min_value=0, max_value=10_000), st.integers(0, 7),
                          st.integers(min_value=0, max_value=70_000)), min_size=1, max_size=15))
def test_differential_adversarial_new_cases(which: str, mutations: list[tuple[int, int, int]]) -> None:
    trace = reno_lossy_trace() if which == "reno" else rr_trace(which == "rr_active")
    events = list(trace.events)
    for index, how, value in mutations:
        i = index % len(events)
        events[i:i + 1] = _mutate(events[i], how, value)
    assert_same(trace, events)


def test_bench_fastpath_covers_the_six_workloads() -> None:
    """bench fastpath measures bulk data, ACKs and request/response on both sides, plain and
    MD5, each replayed through the fast path (nearly every segment predicted)."""
    from usertcp.bench.fastpath import run
    out = run(size=60_000, repeat=1, transactions=30)
    names = {"data", "acks", "active_data", "active_acks", "rr", "rr_active"}
    for label in ("plain", "md5"):
        assert set(out[label]) == names
        for name in ("data", "active_data", "rr", "rr_active"):
            assert out[label][name]["fast_path_share"] > 0.9, (label, name, out[label][name])
            assert out[label][name]["fast_us"] > 0 and out[label][name]["slow_us"] > 0
    assert out["plain"]["rr"]["fast_us_per_transaction"] > 0
