"""RFC 9293 Figure 5 state transitions and the §3.10.7 segment-arrival rules, one test each.

Every test drives one Stack with a scripted peer (tests/peer.py). Sequence numbers are
relative to the ISNs: our SYN is 0 and our first data byte 1; likewise for the peer.
Where the RFC leaves a choice the expected behaviour is Linux's, and the comment says so.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import Any

import pytest

from peer import LOCAL_IP, REMOTE_IP, ScriptedPeer
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import Connection, State
from usertcp.tcp.states import TRANSITIONS, IllegalTransition, transition_effects

TW = 5.0   # a short 2*MSL keeps the timer tests readable


def established(config: StackConfig | None = None, peer: ScriptedPeer | None = None
                ) -> tuple[ScriptedPeer, Connection]:
    peer = peer or ScriptedPeer(config or StackConfig(time_wait=TW))
    conn = peer.passive_open()
    peer.expect_nothing()
    return peer, conn


def reach(state: State, peer: ScriptedPeer | None = None) -> tuple[ScriptedPeer, Connection, int, int]:
    """A connection in ``state``; returns (peer, conn, our RCV.NXT, our SND.NXT), relative.

    The owner keeps the socket (shutdown(write) rather than close()), so a reset is
    reported to a live socket.
    """
    peer, conn = established(peer=peer)
    if state is State.ESTABLISHED:
        return peer, conn, 1, 1
    if state in (State.CLOSE_WAIT, State.LAST_ACK):
        peer.send("F.", 1, 1)
        peer.expect(".", 1, 2)
        assert conn.state is State.CLOSE_WAIT
        if state is State.CLOSE_WAIT:
            return peer, conn, 2, 1
        conn.shutdown(False, True, peer.now)
        peer.expect("F.", 1, 2)
        assert conn.state is State.LAST_ACK
        return peer, conn, 2, 2
    conn.shutdown(False, True, peer.now)
    peer.expect("F.", 1, 1)
    assert conn.state is State.FIN_WAIT_1
    if state is State.FIN_WAIT_1:
        return peer, conn, 1, 2
    if state is State.CLOSING:
        peer.send("F.", 1, 1)            # the peer's FIN crosses ours
        peer.expect(".", 2, 2)
        assert conn.state is State.CLOSING
        return peer, conn, 2, 2
    peer.send(".", 1, 2)
    assert conn.state is State.FIN_WAIT_2
    if state is State.FIN_WAIT_2:
        return peer, conn, 1, 2
    peer.send("F.", 1, 2)
    peer.expect(".", 2, 2)
    assert conn.state is State.TIME_WAIT
    assert state is State.TIME_WAIT
    return peer, conn, 2, 2


def gone(peer: ScriptedPeer, conn: Connection) -> bool:
    return conn.state is State.CLOSED and conn.key not in peer.stack.connections


# --------------------------------------------------------------------------- opening

def test_passive_open_listen_synrcvd_established() -> None:
    peer = ScriptedPeer()
    lst = peer.listen()
    peer.send("S", 0)
    syn_ack = peer.expect("S.", 0, 1)
    assert syn_ack.mss > 0                          # RFC 9293 §3.7.1: MSS in every SYN
    conn = peer.connection()
    assert conn.state is State.SYN_RECEIVED
    assert lst.accept() is None                     # not accepted before the handshake ends
    peer.send(".", 1, 1)
    assert conn.state is State.ESTABLISHED
    assert lst.accept() is conn
    peer.expect_nothing()
    # Data flows both ways.
    peer.send("P.", 1, 1, payload=b"ping")
    peer.expect(".", 1, 5)
    conn.send(b"pong", peer.now)
    peer.expect("P.", 1, 5, payload_len=4)
    assert conn.recv(100, peer.now) == b"ping"


def test_active_open_closed_synsent_established() -> None:
    peer = ScriptedPeer()
    conn = peer.stack.create_connection("192.0.2.1", peer.peer_port, local_port=peer.local_port)
    assert conn.state is State.CLOSED
    peer.stack.connect(conn, peer.now)
    assert conn.state is State.SYN_SENT
    peer.expect("S", 0)
    peer.send("S.", 0, 1)
    peer.expect(".", 1, 1)                          # RFC 9293 §3.10.7.3: ACK the SYN-ACK
    assert conn.state is State.ESTABLISHED
    assert conn.error == 0


def _simultaneous_syn() -> tuple[ScriptedPeer, Connection]:
    """Our SYN and the peer's bare SYN cross: SYN-SENT -> SYN-RECEIVED (Figure 8)."""
    peer = ScriptedPeer()
    conn = peer.connect()
    peer.expect("S", 0)
    peer.send("S", 0)
    # RFC 9293 §3.10.7.3 fifth: "form a SYN,ACK segment <SEQ=ISS><ACK=RCV.NXT><CTL=SYN,ACK>".
    peer.expect("S.", 0, 1)
    assert conn.state is State.SYN_RECEIVED
    return peer, conn


def test_simultaneous_open_completed_by_ack() -> None:
    peer, conn = _simultaneous_syn()
    peer.send(".", 1, 1)
    assert conn.state is State.ESTABLISHED
    peer.expect_nothing()


def test_simultaneous_open_completed_by_peer_synack() -> None:
    # RFC 9293 Figure 8 line 6: the peer's own SYN,ACK (SEQ=its ISS, ACK=our ISS+1) moves
    # SYN-RECEIVED to ESTABLISHED. Linux does the same (tcp_validate_incoming lets this
    # SYN-ACK pass in TCP_SYN_RECV instead of challenging it).
    peer, conn = _simultaneous_syn()
    peer.send("S.", 0, 1)
    assert conn.state is State.ESTABLISHED
    # And it is not torn down: at most a pure ACK goes back.
    for s in peer.drain():
        assert not s.seg.flags & 0x04, peer.describe(s)


def test_syn_retries_exponential_backoff_then_etimedout() -> None:
    # Linux tcp_syn_retries: 3 retransmissions at RTO 1, 2, 4 s (RFC 6298 §5.5 doubling),
    # then the attempt fails after one more doubled RTO (t=15) with ETIMEDOUT.
    peer = ScriptedPeer(StackConfig(syn_retries=3, rto_initial=1.0))
    conn = peer.connect()
    peer.advance(14.9)
    syns = peer.drain()
    assert [round(s.time, 6) for s in syns] == [0.0, 1.0, 3.0, 7.0], [peer.describe(s) for s in syns]
    assert all(s.seg.flags == 0x02 and s.seg.seq == syns[0].seg.seq for s in syns)   # same ISN
    assert conn.state is State.SYN_SENT
    peer.advance(0.2)
    assert gone(peer, conn)
    assert conn.error == errno.ETIMEDOUT
    peer.expect_nothing()                           # no RST: nothing synchronized


def test_synack_retries_then_dropped_listener_survives() -> None:
    # Linux tcp_synack_retries=2: SYN-ACKs at 0, 1, 3 s, the request dies at 7 s.
    peer = ScriptedPeer(StackConfig(synack_retries=2, rto_initial=1.0))
    lst = peer.listen()
    peer.send("S", 0)
    conn = peer.connection()
    peer.advance(6.9)
    sa = peer.drain()
    assert [round(s.time, 6) for s in sa] == [0.0, 1.0, 3.0], [peer.describe(s) for s in sa]
    assert all(s.seg.flags == 0x12 for s in sa)
    assert conn.state is State.SYN_RECEIVED
    peer.advance(0.2)
    assert gone(peer, conn)
    assert not lst.embryonic and not lst.accept_queue
    peer.expect_nothing()
    # The late ACK finds only the listener: RFC 9293 §3.10.7.2 <SEQ=SEG.ACK><CTL=RST>.
    peer.send(".", 1, 1)
    peer.expect("R", 1)
    # The listener still listens.
    peer.send("S", 0)
    peer.expect("S.", 0, 1)


# --------------------------------------------------------------------------- closing

def test_active_close_finwait1_finwait2_timewait_closed() -> None:
    peer, conn = established()
    conn.close(peer.now)
    assert conn.state is State.FIN_WAIT_1
    peer.expect("F.", 1, 1)
    peer.send(".", 1, 2)
    assert conn.state is State.FIN_WAIT_2
    peer.expect_nothing()
    peer.send("F.", 1, 2)
    peer.expect(".", 2, 2)
    assert conn.state is State.TIME_WAIT
    assert conn.key in peer.stack.connections       # the 4-tuple stays reserved for 2*MSL
    peer.advance(TW - 0.1)
    assert conn.state is State.TIME_WAIT
    peer.advance(0.2)
    assert gone(peer, conn)
    peer.expect_nothing()
    # Once the TCB is deleted a segment for it is answered as for a CLOSED port.
    peer.send(".", 2, 2)
    peer.expect("R", 2)


def test_simultaneous_close_finwait1_closing_timewait() -> None:
    peer, conn = established()
    conn.close(peer.now)
    peer.expect("F.", 1, 1)
    peer.send("F.", 1, 1)                            # the peer's FIN does not ack ours
    peer.expect(".", 2, 2)
    assert conn.state is State.CLOSING
    peer.send(".", 2, 2)
    assert conn.state is State.TIME_WAIT
    peer.advance(TW + 0.1)
    assert gone(peer, conn)


def test_finwait1_to_timewait_on_fin_acking_our_fin() -> None:
    peer, conn = established()
    conn.close(peer.now)
    peer.expect("F.", 1, 1)
    peer.send("F.", 1, 2)                            # FIN and the ACK of our FIN together
    peer.expect(".", 2, 2)
    assert conn.state is State.TIME_WAIT
    peer.advance(TW + 0.1)
    assert gone(peer, conn)


def test_passive_close_closewait_lastack_closed() -> None:
    peer, conn = established()
    peer.send("F.", 1, 1)
    peer.expect(".", 1, 2)
    assert conn.state is State.CLOSE_WAIT
    assert conn.recv(10, peer.now) == b""            # EOF
    conn.close(peer.now)
    assert conn.state is State.LAST_ACK
    peer.expect("F.", 1, 2)
    peer.send(".", 2, 2)
    assert gone(peer, conn)                         # no TIME-WAIT on the passive side
    peer.expect_nothing()


def test_synsent_close_deletes_tcb() -> None:
    peer = ScriptedPeer()
    conn = peer.connect()
    peer.expect("S", 0)
    conn.close(peer.now)
    # RFC 9293 §3.10.4 SYN-SENT: delete the TCB; nothing is sent.
    assert gone(peer, conn)
    peer.expect_nothing()
    peer.advance(10)
    peer.expect_nothing()                           # no SYN retransmission either
    # A late SYN-ACK now meets a CLOSED port: <SEQ=SEG.ACK><CTL=RST>.
    peer.send("S.", 0, 1)
    peer.expect("R", 1)


def test_synrcvd_close_sends_fin_enters_finwait1() -> None:
    # RFC 9293 §3.10.4 SYN-RECEIVED: "If no SENDs have been issued and there is no pending
    # data to send, then form a FIN segment and send it, and enter FIN-WAIT-1 state".
    # Linux tcp_close does the same (tcp_close_state: SYN_RECV -> FIN_WAIT1 | ACTION_FIN).
    peer, conn = _simultaneous_syn()
    conn.close(peer.now)
    assert conn.state is State.FIN_WAIT_1
    peer.expect("F.", 1, 1)
    peer.send(".", 1, 2)                             # acks our SYN and our FIN
    assert conn.state is State.FIN_WAIT_2


def test_synrcvd_close_with_pending_data_queues_fin_until_established() -> None:
    # RFC 9293 §3.10.4 SYN-RECEIVED "otherwise, queue for processing after entering
    # ESTABLISHED state": the data and then the FIN go out once the handshake completes.
    peer, conn = _simultaneous_syn()
    assert conn.send(b"data", peer.now) == 4
    conn.close(peer.now)
    peer.expect_nothing()                           # nothing may be sent before ESTABLISHED
    peer.send(".", 1, 1)
    assert conn.state is State.FIN_WAIT_1
    segs = [s.seg for s in peer.drain()]
    iss = peer.local_isn
    payload = b"".join(bytes(s.payload) for s in segs)
    fins = [s for s in segs if s.flags & 0x01]
    assert payload == b"data" and (segs[0].seq - iss) % 2**32 == 1
    assert len(fins) == 1 and (fins[0].seq + len(fins[0].payload) - iss) % 2**32 == 5
    peer.send(".", 1, 6)
    assert conn.state is State.FIN_WAIT_2


def test_close_with_unread_data_sends_rst() -> None:
    # RFC 2525 §2.17 (and Linux tcp_close, TCPAbortOnClose): closing with unread received
    # data resets the connection instead of sending a FIN: RST|ACK at SND.NXT.
    peer, conn = established()
    peer.send("P.", 1, 1, payload=b"unread")
    peer.expect(".", 1, 7)
    conn.close(peer.now)
    peer.expect("R.", 1, 7)
    assert gone(peer, conn)
    peer.expect_nothing()


def test_timewait_acks_retransmitted_fin() -> None:
    peer, conn, _, _ = reach(State.TIME_WAIT)
    peer.advance(1.0)
    peer.send("F.", 1, 2)                            # our last ACK was lost: the FIN comes again
    peer.expect(".", 2, 2)
    assert conn.state is State.TIME_WAIT


def test_timewait_retransmitted_fin_restarts_2msl() -> None:
    # RFC 9293 §3.10.7.4 eighth, TIME-WAIT: "Restart the 2 MSL time-wait timeout."
    # Linux tcp_timewait_state_process reschedules TCP_TIMEWAIT_LEN for it as well.
    peer, conn, _, _ = reach(State.TIME_WAIT)
    peer.advance(TW - 1.0)
    peer.send("F.", 1, 2)
    peer.expect(".", 2, 2)
    peer.advance(2.0)                                # past the original deadline
    assert conn.state is State.TIME_WAIT
    peer.advance(TW - 1.5)
    assert gone(peer, conn)


def test_half_close_peer_keeps_sending_after_our_fin() -> None:
    peer, conn = established()
    conn.shutdown(False, True, peer.now)
    peer.expect("F.", 1, 1)
    peer.send(".", 1, 2)
    assert conn.state is State.FIN_WAIT_2
    with pytest.raises(OSError):
        conn.send(b"x", peer.now)                    # our direction is closed
    peer.send("P.", 1, 2, payload=b"still talking")
    peer.expect(".", 2, 14)
    peer.send("F.", 14, 2)
    peer.expect(".", 2, 15)
    assert conn.state is State.TIME_WAIT
    assert conn.recv(100, peer.now) == b"still talking"


def test_half_close_we_keep_sending_in_close_wait() -> None:
    peer, conn = established()
    peer.send("F.", 1, 1)
    peer.expect(".", 1, 2)
    assert conn.state is State.CLOSE_WAIT
    conn.send(b"reply", peer.now)
    peer.expect("P.", 1, 2, payload_len=5)
    peer.send(".", 2, 6)
    assert conn.snd_una == 6 and conn.state is State.CLOSE_WAIT


# --------------------------------------------------------------------------- resets

def test_rst_in_synsent_with_acceptable_ack_refuses() -> None:
    peer = ScriptedPeer()
    conn = peer.connect()
    peer.expect("S", 0)
    peer.send("R.", 0, 1)
    # RFC 9293 §3.10.7.3: "signal to the user 'error: connection reset'", enter CLOSED.
    assert gone(peer, conn)
    assert conn.error == errno.ECONNREFUSED
    peer.expect_nothing()


@pytest.mark.parametrize("ack", [0, 2, 1000, -1])
def test_rst_in_synsent_with_unacceptable_ack_ignored(ack: int) -> None:
    # RFC 9293 §3.10.7.3: SEG.ACK =< ISS or SEG.ACK > SND.NXT with RST: drop the segment.
    peer = ScriptedPeer()
    conn = peer.connect()
    peer.expect("S", 0)
    peer.send("R.", 0, ack)
    assert conn.state is State.SYN_SENT and conn.error == 0
    peer.expect_nothing()
    peer.send("S.", 0, 1)                            # the real SYN-ACK still completes it
    peer.expect(".", 1, 1)
    assert conn.state is State.ESTABLISHED


def test_rst_without_ack_in_synsent_ignored() -> None:
    # RFC 9293 §3.10.7.3: RST without ACK in SYN-SENT: "drop the segment and return".
    peer = ScriptedPeer()
    conn = peer.connect()
    peer.expect("S", 0)
    peer.send("R", 0)
    assert conn.state is State.SYN_SENT
    peer.expect_nothing()


def test_unacceptable_ack_in_synsent_gets_rst() -> None:
    # RFC 9293 §3.10.7.3: "If SEG.ACK =< ISS or SEG.ACK > SND.NXT, send a reset
    # <SEQ=SEG.ACK><CTL=RST>" and drop the segment; the connection stays in SYN-SENT.
    peer = ScriptedPeer()
    conn = peer.connect()
    peer.expect("S", 0)
    peer.send("S.", 0, 7)
    peer.expect("R", 7)
    assert conn.state is State.SYN_SENT


def test_rst_in_synrcvd_passive_returns_to_listen() -> None:
    # RFC 9293 §3.10.7.4 SYN-RECEIVED, passive OPEN: "return this connection to LISTEN".
    peer = ScriptedPeer()
    lst = peer.listen()
    peer.send("S", 0)
    peer.expect("S.", 0, 1)
    conn = peer.connection()
    peer.send("R", 1)
    assert gone(peer, conn)
    assert not lst.embryonic and lst.accept() is None
    peer.expect_nothing()
    assert (b"", peer.local_port) in peer.stack.listeners
    peer.send("S", 100)                              # the listener still answers
    peer.expect("S.", 0, 101)


def test_rst_in_synrcvd_active_closes() -> None:
    # RFC 9293: an active-open SYN-RECEIVED connection is refused; Linux tcp_reset reports
    # ECONNRESET there (only SYN_SENT gets ECONNREFUSED). Either way it is closed and failed.
    peer, conn = _simultaneous_syn()
    peer.send("R", 1)
    assert gone(peer, conn)
    assert conn.error in (errno.ECONNREFUSED, errno.ECONNRESET)
    peer.expect_nothing()


RST_RESET_STATES = [State.ESTABLISHED, State.FIN_WAIT_1, State.FIN_WAIT_2, State.CLOSE_WAIT]


@pytest.mark.parametrize("state", RST_RESET_STATES, ids=lambda s: s.name)
def test_rst_exact_seq_resets(state: State) -> None:
    # RFC 9293 §3.10.7.4 second / RFC 5961 §3.2: SEG.SEQ == RCV.NXT resets the connection;
    # ESTABLISHED..CLOSE-WAIT: "any outstanding RECEIVEs and SEND should receive 'reset'".
    peer, conn, rcv_nxt, _ = reach(state)
    peer.send("R", rcv_nxt)
    assert gone(peer, conn)
    # The errno follows Linux tcp_reset(): EPIPE in CLOSE-WAIT (the peer had already closed).
    assert conn.error == (errno.EPIPE if state is State.CLOSE_WAIT else errno.ECONNRESET)
    peer.expect_nothing()                           # never answer a RST


@pytest.mark.parametrize("state", [*RST_RESET_STATES, State.CLOSING, State.LAST_ACK],
                         ids=lambda s: s.name)
def test_rst_in_window_not_exact_challenge_ack(state: State) -> None:
    # RFC 5961 §3.2 (RFC 9293 §3.10.7.4 second, 3): in-window but not exact -> challenge ACK
    # <SEQ=SND.NXT><ACK=RCV.NXT><CTL=ACK>, connection unchanged.
    peer, conn, rcv_nxt, snd_nxt = reach(state)
    before = peer.stack.counters["TcpExtTCPChallengeACK"]
    peer.send("R", rcv_nxt + 1000)
    peer.expect(".", snd_nxt, rcv_nxt)
    assert conn.state is state and conn.error == 0
    assert peer.stack.counters["TcpExtTCPChallengeACK"] == before + 1
    peer.expect_nothing()


@pytest.mark.parametrize("state", [*RST_RESET_STATES, State.CLOSING, State.LAST_ACK, State.TIME_WAIT],
                         ids=lambda s: s.name)
@pytest.mark.parametrize("offset", [-1, 70_000, 2**31])
def test_rst_out_of_window_dropped_silently(state: State, offset: int) -> None:
    # RFC 5961 §3.2 / RFC 9293 §3.10.7.4 second, 1: outside the window -> silently drop.
    peer, conn, rcv_nxt, _ = reach(state)
    peer.send("R", rcv_nxt + offset)
    assert conn.state is state
    peer.expect_nothing()


@pytest.mark.parametrize("state", [State.CLOSING, State.LAST_ACK, State.TIME_WAIT], ids=lambda s: s.name)
def test_rst_exact_seq_closes_late_states(state: State) -> None:
    # RFC 9293 §3.10.7.4 CLOSING, LAST-ACK, TIME-WAIT: "enter the CLOSED state, delete the
    # TCB". For TIME-WAIT this is Linux's default (tcp_rfc1337=0), not RFC 1337's advice.
    peer, conn, rcv_nxt, _ = reach(state)
    peer.send("R", rcv_nxt)
    assert gone(peer, conn)
    peer.expect_nothing()


def test_listen_rst_ignored_ack_reset() -> None:
    # RFC 9293 §3.10.7.2: a RST to a listener is ignored; an ACK gets <SEQ=SEG.ACK><CTL=RST>.
    peer = ScriptedPeer()
    peer.listen()
    peer.send("R", 5)
    peer.expect_nothing()
    peer.send(".", 5, 12345)
    peer.expect("R", 12345)
    assert not peer.stack.connections


# --------------------------------------------------------------------------- RFC 5961

@pytest.mark.parametrize("state", [State.ESTABLISHED, State.FIN_WAIT_1, State.FIN_WAIT_2,
                                   State.CLOSE_WAIT, State.CLOSING, State.LAST_ACK],
                         ids=lambda s: s.name)
def test_syn_in_synchronized_state_challenge_ack(state: State) -> None:
    # RFC 5961 §4.2 (RFC 9293 §3.10.7.4 fourth): a SYN in a synchronized state, in window,
    # gets a challenge ACK and is dropped; the connection is not reset.
    peer, conn, rcv_nxt, snd_nxt = reach(state)
    before = peer.stack.counters["TcpExtTCPChallengeACK"]
    peer.send("S", rcv_nxt + 10)
    peer.expect(".", snd_nxt, rcv_nxt)
    assert conn.state is state and conn.error == 0
    assert peer.stack.counters["TcpExtTCPChallengeACK"] == before + 1
    peer.expect_nothing()


def test_syn_out_of_window_in_established_acked_not_reset() -> None:
    # RFC 5961 §4.2: "irrespective of the sequence number": the old SYN (seq = IRS) and a
    # far one are answered with an ACK <SEQ=SND.NXT><ACK=RCV.NXT>, never with a reset.
    peer, conn = established()
    peer.send("S", 0)
    peer.expect(".", 1, 1)
    peer.advance(1.0)                                # past the per-socket out-of-window limit
    peer.send("S", 2**31)
    peer.expect(".", 1, 1)
    assert conn.state is State.ESTABLISHED and conn.error == 0


def test_ack_of_unsent_data_acked_and_dropped() -> None:
    # RFC 9293 §3.10.7.4 fifth (ESTABLISHED): SEG.ACK > SND.NXT -> send an ACK, drop the
    # segment (RFC 5961 §5.2: its data is not accepted either).
    peer, conn = established()
    conn.send(b"abc", peer.now)
    peer.expect("P.", 1, 1, payload_len=3)
    peer.send(".", 1, 100)
    peer.expect(".", 4, 1)
    assert conn.snd_una == 1 and conn.snd_nxt == 4
    peer.send(".", 1, 4)                              # the real ACK still works
    assert conn.snd_una == 4
    peer.advance(1.0)                                 # past the per-socket out-of-window limit
    peer.send("P.", 1, 100, payload=b"injected")
    peer.expect(".", 4, 1)
    assert conn.readable_bytes == 0 and conn.rcv_nxt == 1
    assert conn.state is State.ESTABLISHED and conn.snd_una == 4


def test_ack_too_old_dropped_with_challenge() -> None:
    # RFC 5961 §5.2: acceptable iff SND.UNA - MAX.SND.WND <= SEG.ACK <= SND.NXT; anything
    # else is discarded and an ACK sent back. The peer's window is 65535 (unscaled).
    peer, conn = established()
    peer.send("P.", 1, 1 - 70_000, payload=b"injected")
    peer.expect(".", 1, 1)
    assert conn.readable_bytes == 0 and conn.rcv_nxt == 1
    assert conn.state is State.ESTABLISHED


def test_out_of_window_data_acked_not_delivered() -> None:
    # RFC 9293 §3.10.7.4 first: an unacceptable segment gets <SEQ=SND.NXT><ACK=RCV.NXT><ACK>
    # and is dropped. Our window is 65535 (no window scaling offered by the peer).
    peer, conn = established()
    peer.send("P.", 1 + 70_000, 1, payload=b"beyond")
    peer.expect(".", 1, 1)
    assert conn.readable_bytes == 0 and conn.rcv_nxt == 1
    peer.send("P.", 1, 1, payload=b"0123456789")
    peer.expect(".", 1, 11)
    peer.send("P.", 3, 1, payload=b"23456")          # entirely old: a duplicate
    peer.expect(".", 1, 11)
    assert conn.recv(100, peer.now) == b"0123456789"
    assert conn.rcv_nxt == 11


# --------------------------------------------------------------------------- no connection

def test_unknown_port_syn_gets_rst_ack() -> None:
    # RFC 9293 §3.10.7.1, no ACK bit: <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>.
    peer = ScriptedPeer()
    peer.send("S", 0, dport=9999)
    rst = peer.expect("R.", 0, 1)
    assert (rst.sport, rst.dport) == (9999, peer.peer_port)
    assert (rst.src, rst.dst) == (LOCAL_IP, REMOTE_IP)
    assert not peer.stack.connections


def test_unknown_port_data_fin_without_ack_counts_seg_len() -> None:
    # SEG.LEN counts the payload and the FIN.
    peer = ScriptedPeer()
    peer.send("FP", 5, payload=b"0123456789", dport=9999)
    peer.expect("R.", 0, 16)


def test_unknown_port_ack_gets_rst_seq_seg_ack() -> None:
    # RFC 9293 §3.10.7.1, ACK bit on: <SEQ=SEG.ACK><CTL=RST>, no ACK bit in the reset.
    peer = ScriptedPeer()
    peer.send("P.", 5, 0x12345678, payload=b"x", dport=9999)
    rst = peer.expect("R", 0x12345678)
    assert rst.ack == 0 or not rst.flags & 0x10


def test_unknown_port_rst_not_answered() -> None:
    peer = ScriptedPeer()
    peer.send("R", 5, dport=9999)
    peer.send("R.", 5, 9, dport=9999)
    peer.expect_nothing()


# --------------------------------------------------------------------------- receive window

def test_small_read_sends_no_duplicate_window_update() -> None:
    # The window is unscaled (the peer offered no window scale), so it is already the
    # 65535 maximum and its right edge cannot move until more data arrives: a read must not
    # emit an ACK identical to the last one (a peer with data in flight would count it as a
    # duplicate ACK, RFC 5681 §2). Linux tcp_cleanup_rbuf only sends a window update when
    # 2 * rcv_wnd <= window_clamp; RFC 9293 §3.8.6.2.2 (receiver SWS avoidance) likewise
    # updates only when the window can grow by min(RCV.BUFF/2, Eff.snd.MSS).
    # (The first window is Linux's tcp_select_initial_window: half the 128 KiB buffer in whole
    # 1460-byte segments, 64240. The 4 bytes do not move its right edge: __tcp_select_window
    # offers less, and tcp_select_window keeps the edge, 64236; tools/kernel_receive_probe.py
    # shows 6.18 doing the same, 65160 - 4 with timestamps.)
    peer, conn = established()
    peer.send("P.", 1, 1, payload=b"ping")
    ack = peer.expect(".", 1, 5)
    assert ack.window == 64236
    assert conn.recv(100, peer.now) == b"ping"
    peer.expect_nothing()


@pytest.mark.parametrize("state", [State.FIN_WAIT_1, State.LAST_ACK, State.CLOSING], ids=lambda s: s.name)
def test_unacked_fin_is_retransmitted(state: State) -> None:
    # RFC 9293 §3.10.4: the FIN occupies sequence space and is retransmitted until acked
    # (RFC 6298 §5.4: on the retransmission timer, same sequence number).
    peer, conn, _, snd_nxt = reach(state)
    peer.advance(5.0)
    fins = [s for s in peer.drain() if s.seg.flags & 0x01]
    assert fins, "the FIN was never retransmitted"
    assert all((s.seg.seq - peer.local_isn) % 2**32 == snd_nxt - 1 for s in fins)
    assert conn.state is state


# ------------------------------------------------------------- the transition table

def record_transitions(peer: ScriptedPeer) -> set[tuple[State, State]]:
    """Every state change of the peer's stack, from its trace events."""
    seen: set[tuple[State, State]] = set()

    def tracer(event: dict[str, Any]) -> None:
        if event["name"] == "tcp:state_updated":
            seen.add((State[event["data"]["old"]], State[event["data"]["new"]]))

    peer.stack.tracer = tracer
    return seen


def _active_close(peer: ScriptedPeer) -> None:
    reach(State.TIME_WAIT, peer)
    peer.advance(TW + 0.1)


def _crossed_fins(peer: ScriptedPeer) -> None:
    reach(State.CLOSING, peer)
    peer.send(".", 2, 2)


def _passive_close(peer: ScriptedPeer) -> None:
    reach(State.LAST_ACK, peer)
    peer.send(".", 2, 2)


def _active_open(peer: ScriptedPeer) -> None:
    peer.active_open()


def _crossed_syns_then_close(peer: ScriptedPeer) -> None:
    conn = peer.connect()
    peer.expect("S", 0)
    peer.send("S", 0)
    conn.close(peer.now)            # RFC 9293 §3.10.4: SYN-RECEIVED, nothing queued: FIN


def _abort_in(state: State) -> Callable[[ScriptedPeer], None]:
    def scenario(peer: ScriptedPeer) -> None:
        if state is State.SYN_SENT:
            conn = peer.connect()
        elif state is State.SYN_RECEIVED:
            peer.listen()
            peer.send("S", 0)
            conn = peer.connection()
        else:
            conn = reach(state, peer)[1]
        assert conn.state is state
        conn.abort(peer.now)
        assert conn.state is State.CLOSED
    return scenario


SCENARIOS: list[Callable[[ScriptedPeer], None]] = [
    _active_close, _crossed_fins, _passive_close, _active_open, _crossed_syns_then_close,
    *(_abort_in(s) for s in State if s not in (State.CLOSED, State.LISTEN)),
]


def test_every_listed_transition_is_reachable() -> None:
    seen: set[tuple[State, State]] = set()
    for scenario in SCENARIOS:
        peer = ScriptedPeer(StackConfig(time_wait=TW))
        recorded = record_transitions(peer)
        scenario(peer)
        seen |= recorded
    assert seen == set(TRANSITIONS)


@pytest.mark.parametrize("old", list(State))
@pytest.mark.parametrize("new", list(State))
def test_unlisted_transitions_raise(old: State, new: State) -> None:
    if (old, new) in TRANSITIONS:
        transition_effects(old, new)
        return
    with pytest.raises(IllegalTransition) as excinfo:
        transition_effects(old, new)
    assert (excinfo.value.old, excinfo.value.new) == (old, new)


def test_illegal_transition_raises_where_the_state_changes() -> None:
    peer, conn = established()
    with pytest.raises(IllegalTransition):
        conn.set_state(State.SYN_SENT, peer.now)
    assert conn.state is State.ESTABLISHED          # refused before anything changed
