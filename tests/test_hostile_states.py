"""Flag combinations Linux drops outside LISTEN, counted under its drop reasons (issue 20
point 5): tcp_rcv_synsent_state_process in SYN-SENT, tcp_rcv_established /
tcp_validate_incoming in the synchronized states, tcp_timewait_state_process in TIME-WAIT.
"""

from __future__ import annotations

from peer import ScriptedPeer
from usertcp.tcp.connection import Connection, State


def established() -> tuple[ScriptedPeer, Connection]:
    p = ScriptedPeer()
    conn = p.passive_open()
    p.drain()
    return p, conn


def time_wait() -> tuple[ScriptedPeer, Connection]:
    """The stack closed first and the peer's FIN arrived: TIME-WAIT at RCV.NXT 2."""
    p, conn = established()
    conn.close(p.now)
    p.expect("F.", 1, 1)
    p.send("F.", 1, 2)
    p.expect(".", 2, 2)
    assert conn.state is State.TIME_WAIT
    return p, conn


def test_segments_without_ack_rst_or_syn_are_dropped_unanswered() -> None:
    # tcp_rcv_established: !th->ack && !th->rst && !th->syn -> SKB_DROP_REASON_TCP_FLAGS, before
    # the sequence check, so not even an out-of-window one gets a duplicate ACK.
    p, conn = established()
    p.send("P", 1, payload=b"data")               # in order, no ACK flag
    p.send("F", 1)                                # a bare FIN
    p.send("F", 100_000)                          # out of window
    p.send("P", 100_000, payload=b"far")
    p.expect_nothing()
    assert conn.state is State.ESTABLISHED and conn.readable_bytes == 0
    assert p.stack.counters["SKB_DROP_REASON_TCP_FLAGS"] == 4
    p.send("P.", 1, 1, payload=b"data")           # the same data with ACK is taken
    assert conn.readable_bytes == 4


def test_syn_in_established_is_challenged_in_and_out_of_window() -> None:
    # tcp_validate_incoming: a SYN in the window, or out of it, goes to syn_challenge.
    p, conn = established()
    p.send("S", 1)
    p.expect(".", 1, 1)
    p.advance(1.0)                                # past tcp_invalid_ratelimit
    p.send("S", 500_000)
    p.expect(".", 1, 1)
    mib = p.stack.counters
    assert mib["TcpExtTCPSYNChallenge"] == 2 and mib["TcpExtTCPChallengeACK"] == 2
    assert mib["SKB_DROP_REASON_TCP_INVALID_SYN"] == 2 and mib["TcpInErrs"] == 2
    assert conn.state is State.ESTABLISHED


def test_rst_in_window_is_challenged_and_at_rcv_nxt_resets() -> None:
    # tcp_validate_incoming step 2 (RFC 5961 §3.2): SKB_DROP_REASON_TCP_RESET for the
    # challenged one. (RST together with SYN never gets here: wire/packet.py drops it.)
    p, conn = established()
    p.send("R.", 10, 1)
    p.expect(".", 1, 1)
    assert p.stack.counters["SKB_DROP_REASON_TCP_RESET"] == 1
    assert conn.state is State.ESTABLISHED
    p.send("R.", 1, 1)
    assert conn.state is State.CLOSED


def test_out_of_window_segments_are_counted_by_sequence_reason() -> None:
    p, _ = established()
    p.send(".", 1_000_000, 1)
    p.expect(".", 1, 1)
    p.advance(1.0)
    p.send("R", 1_000_000)
    p.expect_nothing()
    mib = p.stack.counters
    assert mib["SKB_DROP_REASON_TCP_INVALID_SEQUENCE"] == 2


def test_syn_sent_drops_ackless_reset_and_synless_ack() -> None:
    p = ScriptedPeer()
    conn = p.connect()
    p.expect("S", 0)
    p.send("R", 0)                                 # no ACK: drop (TCP_RESET)
    p.send(".", 0, 1)                              # acceptable ACK, no SYN: drop (TCP_FLAGS)
    p.send("F", 0)                                 # neither SYN, RST nor ACK
    p.expect_nothing()
    p.send(".", 0, 7)                              # unacceptable ACK: a reset for it
    p.expect("R", 7)
    mib = p.stack.counters
    assert mib["SKB_DROP_REASON_TCP_RESET"] == 1 and mib["SKB_DROP_REASON_TCP_FLAGS"] == 1
    assert mib["SKB_DROP_REASON_NOT_SPECIFIED"] == 1
    assert mib["SKB_DROP_REASON_TCP_INVALID_ACK_SEQUENCE"] == 1
    assert conn.state is State.SYN_SENT
    p.send("S.", 0, 1)
    p.expect(".", 1, 1)
    assert conn.state is State.ESTABLISHED


def test_time_wait_ignores_a_reset_not_at_rcv_nxt() -> None:
    # tcp_timewait_state_process: only a reset exactly at RCV.NXT counts (and kills with
    # tcp_rfc1337 = 0); any other is consumed silently, never challenged.
    p, conn = time_wait()
    p.send("R", 5)
    p.expect_nothing()
    assert conn.state is State.TIME_WAIT
    assert p.stack.counters["TcpExtTCPChallengeACK"] == 0
    p.send("R", 2)
    assert conn.state is State.CLOSED


def test_time_wait_answers_a_syn_that_cannot_reopen_with_a_plain_ack() -> None:
    p, conn = time_wait()
    p.send("S", 1)                                 # older than RCV.NXT: no reuse
    p.expect(".", 2, 2)
    mib = p.stack.counters
    assert mib["TcpExtTCPChallengeACK"] == 0 and mib["TcpExtTCPSYNChallenge"] == 0
    assert conn.state is State.TIME_WAIT
    p.send("S", 1)                                 # at once again: rate limited
    p.expect_nothing()
    assert mib["TcpExtTCPACKSkippedTimeWait"] == 1


def test_time_wait_acks_data_and_bare_fin_and_restarts_on_a_bare_ack() -> None:
    p, conn = time_wait()
    p.send("P.", 2, 2, payload=b"late")            # data is exempt from the rate limit
    p.expect(".", 2, 2)
    p.send("F", 1)                                 # a FIN without ACK: answered too
    p.expect(".", 2, 2)
    p.advance(30.0)
    p.send(".", 2, 2)                              # a bare ACK at RCV.NXT: restarts 2 MSL
    p.expect_nothing()
    p.advance(45.0)
    assert conn.state is State.TIME_WAIT
    p.advance(20.0)
    assert conn.state is State.CLOSED
