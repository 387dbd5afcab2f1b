"""The RFC 9293 connection state machine as a table (Figure 5, plus Linux's extra edges).

``TRANSITIONS`` lists every state change a :class:`~usertcp.tcp.connection.Connection`
may make, each with the side effects of taking it. ``Connection.set_state`` looks the
change up and raises :class:`IllegalTransition` for anything not listed, so a wrong edge
fails where it happens instead of being found later by ``tcp/invariants.py``.

A listening socket is its own object (``Listener``), so no connection is ever in LISTEN:
Figure 5's LISTEN -> SYN-RECEIVED is a new child going CLOSED -> SYN-RECEIVED (the listener
stays), and SYN-RECEIVED -> LISTEN on a reset is the child going to CLOSED.
"""

from __future__ import annotations

from enum import IntEnum, IntFlag

from usertcp.native import mypyc_attr


class State(IntEnum):
    """TCP states, numbered as Linux's tcpi_state so tcp_info reads the same."""

    ESTABLISHED = 1
    SYN_SENT = 2
    SYN_RECEIVED = 3
    FIN_WAIT_1 = 4
    FIN_WAIT_2 = 5
    TIME_WAIT = 6
    CLOSED = 7
    CLOSE_WAIT = 8
    LAST_ACK = 9
    LISTEN = 10
    CLOSING = 11


SYNCHRONIZED = frozenset({State.ESTABLISHED, State.FIN_WAIT_1, State.FIN_WAIT_2, State.CLOSE_WAIT,
                          State.CLOSING, State.LAST_ACK, State.TIME_WAIT})
# States in which received data is still delivered (RFC 9293 §3.10.7.4, seventh step).
RECEIVING = frozenset({State.ESTABLISHED, State.FIN_WAIT_1, State.FIN_WAIT_2})
# States in which the application may still send.
SENDING = frozenset({State.ESTABLISHED, State.CLOSE_WAIT, State.SYN_SENT, State.SYN_RECEIVED})
# TcpCurrEstab counts ESTABLISHED and CLOSE_WAIT, as RFC 4022 tcpCurrEstab does.
CURR_ESTAB = frozenset({State.ESTABLISHED, State.CLOSE_WAIT})


class Effect(IntFlag):
    """Side effects of taking a transition, run by ``Connection.set_state``."""

    NONE = 0
    # The handshake completed (Linux tcp_finish_connect / tcp_init_transfer): TcpActiveOpens
    # or TcpPassiveOpens, tcp_init_buffer_space, and the SYN (or SYN-ACK) counts as delivered.
    OPENED = 1
    # An opening attempt failed (RFC 4022 tcpAttemptFails): SYN-SENT/SYN-RECEIVED -> CLOSED.
    ATTEMPT_FAILED = 2
    # TIME-WAIT entered: the other timers stop, the 2 MSL timer starts, the stack counts it.
    TIME_WAIT = 4


_S = State
TRANSITIONS: dict[tuple[State, State], Effect] = {
    # Opening (RFC 9293 Figure 5; Figure 7 and 8 for simultaneous open).
    (_S.CLOSED, _S.SYN_SENT): Effect.NONE,                 # active OPEN
    (_S.CLOSED, _S.SYN_RECEIVED): Effect.NONE,             # a listener's child (or SYN cookie)
    (_S.SYN_SENT, _S.ESTABLISHED): Effect.OPENED,          # SYN-ACK
    (_S.SYN_SENT, _S.SYN_RECEIVED): Effect.NONE,           # crossed SYNs (Linux tcp_rcv_synsent)
    (_S.SYN_RECEIVED, _S.ESTABLISHED): Effect.OPENED,      # ACK of our SYN
    (_S.SYN_RECEIVED, _S.FIN_WAIT_1): Effect.NONE,         # CLOSE with nothing queued (§3.10.4)
    # Closing (Figure 5, Figure 12/13).
    (_S.ESTABLISHED, _S.FIN_WAIT_1): Effect.NONE,          # CLOSE / shutdown(SHUT_WR)
    (_S.ESTABLISHED, _S.CLOSE_WAIT): Effect.NONE,          # FIN received
    (_S.FIN_WAIT_1, _S.FIN_WAIT_2): Effect.NONE,           # our FIN ACKed
    (_S.FIN_WAIT_1, _S.CLOSING): Effect.NONE,              # crossed FINs (Linux tcp_fin)
    (_S.FIN_WAIT_2, _S.TIME_WAIT): Effect.TIME_WAIT,       # FIN received
    (_S.CLOSING, _S.TIME_WAIT): Effect.TIME_WAIT,          # our FIN ACKed
    (_S.CLOSE_WAIT, _S.LAST_ACK): Effect.NONE,             # CLOSE / shutdown(SHUT_WR)
}
# ABORT, a reset, a timeout, the end of TIME-WAIT or LAST-ACK, or TIME-WAIT reuse: any state
# may go to CLOSED (RFC 9293 §3.10.5, §3.10.7.4; Linux tcp_done).
for _old in State:
    if _old is not State.CLOSED and _old is not State.LISTEN:
        TRANSITIONS[(_old, State.CLOSED)] = (
            Effect.ATTEMPT_FAILED if _old in (State.SYN_SENT, State.SYN_RECEIVED) else Effect.NONE)
del _old, _S


@mypyc_attr(native_class=False)      # mypyc compiles no subclass of this builtin exception
class IllegalTransition(RuntimeError):
    """A state change the table does not list: a bug in the caller, never the peer's doing."""

    def __init__(self, old: State, new: State) -> None:
        super().__init__(f"illegal TCP state transition {old.name} -> {new.name}")
        self.old = old
        self.new = new


def transition_effects(old: State, new: State) -> Effect:
    """The effects of ``old`` -> ``new``; raises :class:`IllegalTransition` if it is not listed."""
    effects = TRANSITIONS.get((old, new))
    if effects is None:
        raise IllegalTransition(old, new)
    return effects
