"""``tcp_info`` for a connection: Linux's ``struct tcp_info`` fields under their tcpi_* names."""

from __future__ import annotations

from typing import TYPE_CHECKING

from usertcp.tcp.recovery import ECN_OK, ECN_SEEN

if TYPE_CHECKING:
    from usertcp.tcp.connection import Connection

# tcpi_options bits (include/uapi/linux/tcp.h).
TCPI_OPT_TIMESTAMPS = 1
TCPI_OPT_SACK = 2
TCPI_OPT_WSCALE = 4
TCPI_OPT_ECN = 8
TCPI_OPT_ECN_SEEN = 16
TCPI_OPT_SYN_DATA = 32


def tcp_info(conn: Connection, now: float | None = None) -> dict[str, int]:
    """A Linux ``struct tcp_info``-like view (field names as tcpi_*), at ``now`` (the time
    of the stack's last event by default)."""
    if now is None:
        now = conn.stack.now
    rtt = conn.rtt
    mss = max(conn.mss, 1)
    opts = 0
    if conn.ts_ok:
        opts |= TCPI_OPT_TIMESTAMPS
    if conn.sack_ok:
        opts |= TCPI_OPT_SACK
    if conn.ws_ok:
        opts |= TCPI_OPT_WSCALE
    if conn.ecn_flags & ECN_OK:
        opts |= TCPI_OPT_ECN
    if conn.ecn_flags & ECN_SEEN:
        opts |= TCPI_OPT_ECN_SEEN
    if conn.syn_data_acked:
        opts |= TCPI_OPT_SYN_DATA
    out = {
        "tcpi_state": int(conn.state),
        "tcpi_ca_state": conn.recovery.ca_state,
        "tcpi_retransmits": conn.timers.retransmits,
        "tcpi_probes": conn.timers.probes_out,
        "tcpi_backoff": rtt.backoff,
        "tcpi_options": opts,
        "tcpi_snd_wscale": conn.snd_wscale,
        "tcpi_rcv_wscale": conn.rcv_wscale,
        "tcpi_rto": int(rtt.timeout * 1e6),
        "tcpi_ato": int(conn.rx.ato * 1e6),                  # icsk_ack.ato (tcp/receive.py)
        "tcpi_last_data_recv": int((now - conn.rx.lrcvtime) * 1000),     # jiffies_to_msecs
        "tcpi_snd_mss": conn.mss,
        "tcpi_rcv_mss": conn.rcv_mss,
        "tcpi_unacked": (conn.snd_nxt - conn.snd_una + mss - 1) // mss,
        "tcpi_sacked": (conn.recovery.sacked_bytes + mss - 1) // mss,
        "tcpi_lost": (conn.recovery.lost_bytes + mss - 1) // mss,
        "tcpi_retrans": (conn.recovery.retrans_bytes + mss - 1) // mss,
        "tcpi_pmtu": conn.pmtu or conn.config.mtu,
        "tcpi_advmss": (min(conn.stack.mtu_mss(conn.v6), conn.user_mss or 65535)
                        - (12 if conn.ts_ok else 0)),
        "tcpi_snd_ssthresh": min(conn.cc.ssthresh // mss, 0x7FFFFFFF),
        "tcpi_snd_cwnd": conn.cc.cwnd // mss,
        "tcpi_total_retrans": conn.total_retrans,
        "tcpi_segs_out": conn.segs_out,
        "tcpi_segs_in": conn.segs_in,
        "tcpi_data_segs_in": conn.data_segs_in,
        "tcpi_data_segs_out": conn.data_segs_out,
        "tcpi_bytes_acked": conn.bytes_acked,
        "tcpi_bytes_received": conn.bytes_received,
        "tcpi_delivered": conn.delivered_segs,
        "tcpi_notsent_bytes": conn.unsent_bytes,
        "tcpi_snd_wnd": conn.snd_wnd,
        "tcpi_reordering": conn.recovery.reordering,
        "tcpi_rcv_space": conn.rcvbuf_limit,
    }
    out.update(rtt.as_info())
    return out
