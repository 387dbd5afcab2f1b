"""``tcp_info`` for a connection: Linux's ``struct tcp_info`` fields under their tcpi_* names."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from usertcp.tcp.accecn import accecn_info
from usertcp.tcp.fastopen_client import ClientTfo
from usertcp.tcp.recovery import ECN_OK, ECN_SEEN

if TYPE_CHECKING:
    from usertcp.tcp.connection import Connection

# tcpi_options bits (include/uapi/linux/tcp.h).
TCPI_OPT_TIMESTAMPS: Final = 1
TCPI_OPT_SACK: Final = 2
TCPI_OPT_WSCALE: Final = 4
TCPI_OPT_ECN: Final = 8
TCPI_OPT_ECN_SEEN: Final = 16
TCPI_OPT_SYN_DATA: Final = 32

# Linux enum tcp_chrono: what the sender is limited by, the higher the stronger.
CHRONO_NONE, CHRONO_BUSY, CHRONO_RWND_LIMITED, CHRONO_SNDBUF_LIMITED = 0, 1, 2, 3


class Chrono:
    """Linux tcp_chrono_start/stop/set: time spent sending (busy), and within it limited
    by the receive window or the send buffer; tcp_info reports them in µs."""

    __slots__ = ("kind", "since", "stats")

    def __init__(self) -> None:
        self.kind = CHRONO_NONE
        self.since = 0.0
        self.stats = [0.0, 0.0, 0.0]     # seconds in BUSY, RWND_LIMITED, SNDBUF_LIMITED

    def _set(self, kind: int, now: float) -> None:
        if self.kind > CHRONO_NONE:
            self.stats[self.kind - 1] += now - self.since
        self.since = now
        self.kind = kind

    def start(self, kind: int, now: float) -> None:
        """tcp_chrono_start(): a stronger limit takes over."""
        if kind > self.kind:
            self._set(kind, now)

    def stop(self, kind: int, now: float, queues_empty: bool) -> None:
        """tcp_chrono_stop(): nothing left to send ends the busy period; else back to busy."""
        if queues_empty:
            self._set(CHRONO_NONE, now)
        elif kind == self.kind:
            self._set(CHRONO_BUSY, now)

    def info(self, now: float) -> dict[str, int]:
        """tcp_get_info_chrono_stats(): busy time counts every limited period too."""
        stats = list(self.stats)
        if self.kind > CHRONO_NONE:
            stats[self.kind - 1] += max(now - self.since, 0.0)
        us = [round(t * 1e6) for t in stats]
        return {"tcpi_busy_time": sum(us), "tcpi_rwnd_limited": us[1], "tcpi_sndbuf_limited": us[2]}


def _options(conn: Connection) -> int:
    """tcpi_options: what the handshake negotiated (Linux TCPI_OPT_*)."""
    opts = 0
    if conn.ts_ok:
        opts |= TCPI_OPT_TIMESTAMPS
    if conn.sack_ok:
        opts |= TCPI_OPT_SACK
    if conn.ws_ok:
        opts |= TCPI_OPT_WSCALE
    acc = conn.accecn
    if conn.ecn_flags & ECN_OK or acc is not None:
        # tcp_ecn_mode_any(): RFC 3168, AccECN, or an AccECN SYN pending (Linux 6.18 tcp_get_info)
        opts |= TCPI_OPT_ECN
    if conn.ecn_flags & ECN_SEEN or (acc is not None and acc.seen):
        opts |= TCPI_OPT_ECN_SEEN       # AccECN sets TCP_ECN_SEEN too
    if conn.syn_data_acked:
        opts |= TCPI_OPT_SYN_DATA
    return opts


def tcp_info(conn: Connection, now: float | None = None) -> dict[str, int]:
    """A Linux ``struct tcp_info``-like view (field names as tcpi_*), at ``now`` (default:
    the time of the stack's last event)."""
    if now is None:
        now = conn.stack.now
    rtt = conn.rtt
    mss = max(conn.mss, 1)
    out = {
        "tcpi_state": int(conn.state),
        "tcpi_ca_state": conn.recovery.ca_state,
        "tcpi_retransmits": conn.timers.retransmits,
        "tcpi_probes": conn.timers.probes_out,
        "tcpi_backoff": rtt.backoff,
        "tcpi_options": _options(conn),
        "tcpi_snd_wscale": conn.snd_wscale,
        "tcpi_rcv_wscale": conn.rcv_wscale,
        "tcpi_rto": int(rtt.timeout * 1e6),
        "tcpi_ato": int(conn.rx.ato * 1e6),                  # icsk_ack.ato (tcp/receive.py)
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
        "tcpi_reord_seen": conn.recovery.reord_seen,
        "tcpi_rcv_space": conn.rx.drs.space,         # rcvq_space.space (tcp/autotune.py)
        "tcpi_rcv_rtt": conn.rx.drs.rtt_us >> 3,
        "tcpi_rcv_ssthresh": conn.rcv_ssthresh,
        "tcpi_rcv_wnd": conn.rx.rcv_wnd,
        # Why active Fast Open did not deliver the SYN's data (TFO_* of tcp/fastopen_client.py).
        "tcpi_fastopen_client_fail": conn.tfo.client_fail if isinstance(conn.tfo, ClientTfo) else 0,
    }
    out.update(rtt.as_info())
    out.update(accecn_info(conn.accecn, conn.recovery.delivered_ce))
    out.update(_times_and_rates(conn, now))
    return out


def _times_and_rates(conn: Connection, now: float) -> dict[str, int]:
    """The sender's chrono times, byte totals and pacing rate, and the times since data
    last left and arrived."""
    out: dict[str, int] = {}
    tx = conn.tx
    out.update(tx.chrono.info(now), tcpi_bytes_sent=tx.bytes_sent, tcpi_bytes_retrans=tx.bytes_retrans)
    out["tcpi_pacing_rate"] = tx.pacing_rate()
    out["tcpi_max_pacing_rate"] = (1 << 64) - 1     # no SO_MAX_PACING_RATE: unlimited (~0ULL)
    # Milliseconds since data last left (jiffies_to_msecs(now - lsndtime)).
    sent = tx.data_sent_time
    out["tcpi_last_data_sent"] = max(int((now - sent) * 1000), 0) if sent >= 0 else 0
    # Linux jiffies_to_msecs(now - icsk_ack.lrcvtime): the last data received, or the
    # establishment (tcp_finish_connect, tcp_create_openreq_child) before any.
    lrcv = conn.rx.lrcvtime if conn.rx.lrcvtime >= 0 else conn.last_rcv_time
    out["tcpi_last_data_recv"] = max(int((now - lrcv) * 1000), 0)
    return out
