"""Closing a connection at the application's request: shutdown, CLOSE and ABORT.

RFC 9293 §3.10.4 (CLOSE) and §3.10.5 (ABORT) as Linux tcp_shutdown(), tcp_close() and
tcp_disconnect(): a write shutdown queues a FIN after the data (FIN-WAIT-1 or LAST-ACK);
closing with unread data or SO_LINGER 0 resets (RFC 2525 §2.17); a closed socket is an
orphan the stack counts, reset past tcp_max_orphans. These are parts of the connection
(they write its fields); ``Connection.shutdown``, ``close`` and ``abort`` call them. The
teardown itself (``Connection.close_now``, Linux tcp_done) stays with the control block.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from usertcp.tcp.states import SYNCHRONIZED, State

if TYPE_CHECKING:
    from usertcp.tcp.connection import Connection

__all__ = ["abort_connection", "close_connection", "queue_fin", "shutdown_connection"]


def shutdown_connection(conn: Connection, how_read: bool, how_write: bool, now: float) -> None:
    """shutdown(2) (Linux tcp_shutdown): reads end at once; writes end with a FIN after the
    queued data, or, before the handshake finished, with the connection."""
    if how_read:
        conn.read_shutdown = True
    if how_write and not conn.write_shutdown:
        conn.write_shutdown = True
        if conn.state in (State.ESTABLISHED, State.CLOSE_WAIT):
            queue_fin(conn, now)
        elif conn.state is State.SYN_SENT:
            conn.close_now(now)
    conn.reschedule()


def queue_fin(conn: Connection, now: float) -> None:
    """Queue the FIN after the data (Linux tcp_close_state, tcp_send_fin) and send what may go."""
    conn.fin_queued = True
    if conn.state is State.ESTABLISHED:
        conn.set_state(State.FIN_WAIT_1, now)
    elif conn.state is State.CLOSE_WAIT:
        conn.set_state(State.LAST_ACK, now)
    conn.tx.run(now)


def close_connection(conn: Connection, now: float) -> None:
    """RFC 9293 §3.10.4 CLOSE; a close with unread data resets (RFC 2525 §2.17)."""
    if conn.closed_by_app:
        return
    conn.closed_by_app = True
    conn.read_shutdown = True
    if conn.state is not State.CLOSED:
        conn.stack.orphan_count_add(1)    # close_now takes it off again
    st = conn.state
    if st in (State.CLOSED, State.LISTEN, State.SYN_SENT):
        conn.close_now(now)
        return
    if len(conn.rcv_buf) or conn.linger_zero:
        conn.mib["TcpExtTCPAbortOnClose" if len(conn.rcv_buf) else "TcpExtTCPAbortOnLinger"] += 1
        if st is not State.TIME_WAIT:
            conn.tx.send_rst(now)
        conn.rcv_buf.discard(len(conn.rcv_buf))
        conn.close_now(now)
        return
    if not conn.write_shutdown:
        conn.write_shutdown = True
        if st in (State.ESTABLISHED, State.CLOSE_WAIT, State.SYN_RECEIVED):
            if st is State.SYN_RECEIVED:
                conn.fin_queued = True
                if not len(conn.snd_buf) and not conn.passive:
                    # RFC 9293 §3.10.4: nothing to send, so send the FIN now and enter
                    # FIN-WAIT-1; with data queued, the FIN waits for ESTABLISHED.
                    conn.set_state(State.FIN_WAIT_1, now)
                    conn.tx.emit_new(now, max(conn.snd_nxt, 1), 0, fin=True)
            else:
                queue_fin(conn, now)
    if conn.state is not State.CLOSED and conn.stack.orphan_count_add(0) > conn.config.max_orphans:
        # Linux tcp_too_many_orphans: past the bound an orphan is reset, not kept.
        conn.mib["TcpExtTCPAbortOnMemory"] += 1
        abort_connection(conn, now)
        return
    conn.reschedule()


def abort_connection(conn: Connection, now: float, error: int = 0) -> None:
    """RFC 9293 §3.10.5 ABORT: send a reset if synchronized, then forget everything;
    ``error`` is what the application's next call reports (0: none)."""
    if error:
        conn.error = error
    if (conn.state in SYNCHRONIZED and conn.state is not State.TIME_WAIT) \
            or conn.state is State.SYN_RECEIVED:
        conn.tx.send_rst(now)
    conn.close_now(now)
