"""SO_TIMESTAMPING transmit timestamps for TCP (Linux ``sock_set_timestamping``, ``tcp_tx_timestamp``,
``__skb_tstamp_tx``, ``tcp_ack_tstamp``).

A write with timestamping on marks its last byte (``tcp_tx_timestamp``: the key of the tail skb
of the write queue, when the write's end is still unsent; a later write that extends that skb
moves the mark to its own end). When the segment holding a marked byte leaves, it yields an
SCM_TSTAMP_SCHED entry (``SOF_TIMESTAMPING_TX_SCHED``: entering the queueing layer) and an
SCM_TSTAMP_SND entry (``SOF_TIMESTAMPING_TX_SOFTWARE``: the driver sending it; the two are the
same instant here, no qdisc holds packets), again on each retransmission of it; when the byte
is acknowledged, an SCM_TSTAMP_ACK entry (``SOF_TIMESTAMPING_TX_ACK``). With
``SOF_TIMESTAMPING_OPT_ID`` each entry carries the byte's key: its sequence number minus the
one at the time the option was set (``sk_tskey``: SND.UNA, or the write sequence with
``SOF_TIMESTAMPING_OPT_ID_TCP``). The time is reported (SCM_TIMESTAMPING ``ts[0]``) when
``SOF_TIMESTAMPING_SOFTWARE`` is set at read time. With ``SOF_TIMESTAMPING_OPT_STATS`` each entry
carries the connection's statistics at that instant (:func:`opt_stats`, Linux
``tcp_get_timestamping_opt_stats``), read as an SCM_TIMESTAMPING_OPT_STATS message.
"""

from __future__ import annotations

import errno
from collections import deque
from typing import TYPE_CHECKING, Final

from usertcp.tcp.info import tcp_info
from usertcp.tcp.states import State
from usertcp.wire import opt_stats as nla

if TYPE_CHECKING:
    from usertcp.tcp.connection import Connection
    from usertcp.tcp.errqueue import ErrorQueue

__all__ = [
    "SCM_TSTAMP_ACK",
    "SCM_TSTAMP_SCHED",
    "SCM_TSTAMP_SND",
    "SOF_TIMESTAMPING_MASK",
    "TxTimestamps",
    "opt_stats",
    "recv_timestamps",
    "set_timestamping",
]

# include/uapi/linux/net_tstamp.h
SOF_TIMESTAMPING_TX_HARDWARE: Final = 1 << 0
SOF_TIMESTAMPING_TX_SOFTWARE: Final = 1 << 1
SOF_TIMESTAMPING_RX_HARDWARE: Final = 1 << 2
SOF_TIMESTAMPING_RX_SOFTWARE: Final = 1 << 3
SOF_TIMESTAMPING_SOFTWARE: Final = 1 << 4
SOF_TIMESTAMPING_OPT_ID: Final = 1 << 7
SOF_TIMESTAMPING_TX_SCHED: Final = 1 << 8
SOF_TIMESTAMPING_TX_ACK: Final = 1 << 9
SOF_TIMESTAMPING_OPT_TSONLY: Final = 1 << 11
SOF_TIMESTAMPING_OPT_STATS: Final = 1 << 12
SOF_TIMESTAMPING_BIND_PHC: Final = 1 << 15
SOF_TIMESTAMPING_OPT_ID_TCP: Final = 1 << 16
SOF_TIMESTAMPING_OPT_RX_FILTER: Final = 1 << 17
SOF_TIMESTAMPING_MASK: Final = (SOF_TIMESTAMPING_OPT_RX_FILTER << 1) - 1
SOF_TIMESTAMPING_TX_RECORD_MASK: Final = (SOF_TIMESTAMPING_TX_HARDWARE | SOF_TIMESTAMPING_TX_SOFTWARE
                                          | SOF_TIMESTAMPING_TX_SCHED | SOF_TIMESTAMPING_TX_ACK)
# include/uapi/asm-generic/socket.h: the receive timestamp messages (64-bit "old" layouts).
SO_TIMESTAMP_OLD: Final = 29          # SCM_TIMESTAMP: struct timeval
SO_TIMESTAMPNS_OLD: Final = 35        # SCM_TIMESTAMPNS: struct timespec
SCM_TIMESTAMPING_KIND: Final = 37     # SCM_TIMESTAMPING: struct scm_timestamping (ts[0] software)
# include/uapi/linux/errqueue.h: ee_info of a timestamping entry.
SCM_TSTAMP_SND: Final = 0
SCM_TSTAMP_SCHED: Final = 1
SCM_TSTAMP_ACK: Final = 2


class TxTimestamps:
    """The SO_TIMESTAMPING state of one socket: its flags, key base and marked bytes."""

    __slots__ = ("_edt", "_sent", "_to_send", "flags", "key_base")

    def __init__(self) -> None:
        self.flags = 0
        self.key_base = 0               # sk_tskey, a stream offset (0: the first data byte)
        self._to_send: deque[int] = deque()   # marked bytes not yet transmitted (stream offsets)
        # Marked bytes transmitted, until acknowledged: (byte, skb length, ACK timestamp wanted).
        self._sent: deque[tuple[int, int, bool]] = deque()
        self._edt: dict[int, float] = {}      # marked byte -> its skb's last send (skb_mstamp_ns)

    @property
    def report_software(self) -> bool:
        """Reads report the software time (SOF_TIMESTAMPING_SOFTWARE)."""
        return bool(self.flags & SOF_TIMESTAMPING_SOFTWARE)

    @property
    def tsonly(self) -> bool:
        """Entries carry no copy of the data (SOF_TIMESTAMPING_OPT_TSONLY)."""
        return bool(self.flags & SOF_TIMESTAMPING_OPT_TSONLY)

    def mark_write(self, conn: Connection) -> None:
        """tcp_tx_timestamp() at the end of a write that queued data: mark the last byte of
        the tail skb, if that skb is still unsent (in the write queue)."""
        if not self.flags & SOF_TIMESTAMPING_TX_RECORD_MASK:
            return
        buf = conn.snd_buf
        last = buf.end - 1
        if last < buf.start or last + 1 < conn.snd_max:   # empty, or the byte already left
            return
        starts = buf.skb_starts()
        tail_start = starts[-1] if starts else buf.start
        pending = self._to_send
        while pending and pending[-1] >= tail_start:
            pending.pop()               # shinfo->tskey of the same skb is overwritten
        pending.append(last)

    def _key(self, byte: int) -> int:
        return byte - self.key_base if self.flags & SOF_TIMESTAMPING_OPT_ID else 0

    def on_sent(self, queue: ErrorQueue, start: int, end: int, now: float) -> None:
        """Stream bytes [start, end) left: a marked byte among them is timestamped, on its
        first transmission and on each retransmission (the skb's tx_flags go with every clone;
        this machine's kernel timestamps a tail loss probe again)."""
        length = 0 if self.tsonly else end - start
        for byte, _length, _ack in self._sent:       # retransmitted marks (sorted by byte)
            if byte >= end:
                break
            if byte >= start:
                self._edt[byte] = now
                self._stamp_tx(queue, byte, now, length)
        pending = self._to_send
        while pending and pending[0] < end:
            byte = pending.popleft()
            self._edt[byte] = now
            self._stamp_tx(queue, byte, now, length)
            self._sent.append((byte, length, bool(self.flags & SOF_TIMESTAMPING_TX_ACK)))

    def _stats(self, queue: ErrorQueue, now: float, edt: float, ttl: int = -1) -> bytes | None:
        """__skb_tstamp_tx(): with OPT_STATS (and OPT_TSONLY) the entry carries the stats."""
        if not self.flags & SOF_TIMESTAMPING_OPT_STATS or not self.tsonly:
            return None
        return opt_stats(queue.conn, now, edt, ttl)

    def _stamp_tx(self, queue: ErrorQueue, byte: int, now: float, length: int) -> None:
        if self.flags & SOF_TIMESTAMPING_TX_SCHED:      # __dev_queue_xmit
            queue.push_timestamp(SCM_TSTAMP_SCHED, self._key(byte), now, length, self._stats(queue, now, now))
        if self.flags & SOF_TIMESTAMPING_TX_SOFTWARE:   # skb_tx_timestamp in the driver
            queue.push_timestamp(SCM_TSTAMP_SND, self._key(byte), now, length, self._stats(queue, now, now))

    def on_acked(self, queue: ErrorQueue, upto: int, now: float) -> None:
        """tcp_ack_tstamp(): a marked byte is acknowledged (its skb leaves the rtx queue)."""
        sent = self._sent
        while sent and sent[0][0] < upto:
            byte, length, want_ack = sent.popleft()
            edt = self._edt.pop(byte, now)
            if want_ack:                                   # tcb->txstamp_ack
                queue.push_timestamp(SCM_TSTAMP_ACK, self._key(byte), now, length,
                                     self._stats(queue, now, edt, queue.ack_ttl))


def set_timestamping(conn: Connection | None, state: TxTimestamps, flags: int) -> None:
    """sock_set_timestamping(): validate ``flags`` (OSError EINVAL as Linux) and apply them."""
    if flags & ~SOF_TIMESTAMPING_MASK or flags < 0:
        raise OSError(errno.EINVAL, f"SO_TIMESTAMPING flags {flags:#x} out of range")
    if flags & SOF_TIMESTAMPING_OPT_ID_TCP and not flags & SOF_TIMESTAMPING_OPT_ID:
        raise OSError(errno.EINVAL, "SOF_TIMESTAMPING_OPT_ID_TCP needs SOF_TIMESTAMPING_OPT_ID")
    if flags & SOF_TIMESTAMPING_OPT_ID and not state.flags & SOF_TIMESTAMPING_OPT_ID:
        if conn is None or conn.state in (State.CLOSED, State.LISTEN):
            raise OSError(errno.EINVAL, "SOF_TIMESTAMPING_OPT_ID on a TCP socket needs a connection")
        if flags & SOF_TIMESTAMPING_OPT_ID_TCP:
            state.key_base = conn.snd_buf.end                 # write_seq
        else:
            state.key_base = max(conn.snd_una - 1, 0)         # snd_una, as a data offset
    if flags & SOF_TIMESTAMPING_OPT_STATS and not flags & SOF_TIMESTAMPING_OPT_TSONLY:
        raise OSError(errno.EINVAL, "SOF_TIMESTAMPING_OPT_STATS needs SOF_TIMESTAMPING_OPT_TSONLY")
    if flags & SOF_TIMESTAMPING_BIND_PHC:
        raise OSError(errno.EINVAL, "no PTP hardware clock to bind to")
    state.flags = flags


def opt_stats(conn: Connection, now: float, edt: float, ttl: int = -1) -> bytes:
    """Linux tcp_get_timestamping_opt_stats(): the connection's counters at ``now`` as the
    SCM_TIMESTAMPING_OPT_STATS payload (``wire/opt_stats.py``). ``edt`` is the send time of
    the timestamped skb (TCP_NLA_EDT, ns on the caller's clock); ``ttl`` that of the ACK that
    acknowledged it (TCP_NLA_TTL, only on ACK timestamps). Not modelled, so 0 here: the
    delivery rate and its app-limited bit (no rate sampler), DSACK duplicates, and the
    rehash counters (no flow-label/txhash rethinking)."""
    info = tcp_info(conn, now)
    values = {
        nla.TCP_NLA_BUSY: info["tcpi_busy_time"],
        nla.TCP_NLA_RWND_LIMITED: info["tcpi_rwnd_limited"],
        nla.TCP_NLA_SNDBUF_LIMITED: info["tcpi_sndbuf_limited"],
        nla.TCP_NLA_DATA_SEGS_OUT: info["tcpi_data_segs_out"],
        nla.TCP_NLA_TOTAL_RETRANS: info["tcpi_total_retrans"],
        nla.TCP_NLA_PACING_RATE: info["tcpi_pacing_rate"],
        nla.TCP_NLA_DELIVERY_RATE: info.get("tcpi_delivery_rate", 0),
        nla.TCP_NLA_SND_CWND: info["tcpi_snd_cwnd"],
        nla.TCP_NLA_REORDERING: info["tcpi_reordering"],
        nla.TCP_NLA_MIN_RTT: info["tcpi_min_rtt"],
        nla.TCP_NLA_RECUR_RETRANS: info["tcpi_retransmits"],
        nla.TCP_NLA_DELIVERY_RATE_APP_LMT: info.get("tcpi_delivery_rate_app_limited", 0),
        nla.TCP_NLA_SND_SSTHRESH: info["tcpi_snd_ssthresh"],
        nla.TCP_NLA_DELIVERED: info["tcpi_delivered"],
        nla.TCP_NLA_DELIVERED_CE: info.get("tcpi_delivered_ce", 0),
        nla.TCP_NLA_SNDQ_SIZE: max(conn.snd_buf.end + 1 - conn.snd_una, 0),   # write_seq - snd_una
        nla.TCP_NLA_CA_STATE: info["tcpi_ca_state"],
        nla.TCP_NLA_BYTES_SENT: info["tcpi_bytes_sent"],
        nla.TCP_NLA_BYTES_RETRANS: info["tcpi_bytes_retrans"],
        nla.TCP_NLA_DSACK_DUPS: info.get("tcpi_dsack_dups", 0),
        nla.TCP_NLA_REORD_SEEN: info["tcpi_reord_seen"],
        nla.TCP_NLA_SRTT: info["tcpi_rtt"],
        nla.TCP_NLA_TIMEOUT_REHASH: 0,
        nla.TCP_NLA_BYTES_NOTSENT: info["tcpi_notsent_bytes"],
        nla.TCP_NLA_EDT: int(edt * 1e9),
        nla.TCP_NLA_REHASH: 0,
    }
    if ttl >= 0:
        values[nla.TCP_NLA_TTL] = ttl
    return nla.encode_opt_stats(values)


def recv_timestamps(stamp: float, rcvtstamp: bool, rcvtstampns: bool, tsflags: int) -> list[int]:
    """Linux tcp_recv_timestamp(): the SOL_SOCKET messages a read reports for the arrival time
    ``stamp`` of the last skb it took from (-1: that skb had none, nothing is reported), in
    order: SO_TIMESTAMP_OLD or SO_TIMESTAMPNS_OLD (SOCK_RCVTSTAMP[NS]), then SCM_TIMESTAMPING
    with the software time when SOF_TIMESTAMPING_SOFTWARE is set and receive reports are not
    filtered out (SOF_TIMESTAMPING_RX_SOFTWARE, or no SOF_TIMESTAMPING_OPT_RX_FILTER)."""
    out: list[int] = []
    if stamp < 0:
        return out
    if rcvtstamp:
        out.append(SO_TIMESTAMPNS_OLD if rcvtstampns else SO_TIMESTAMP_OLD)
    if tsflags & SOF_TIMESTAMPING_SOFTWARE and (
            tsflags & SOF_TIMESTAMPING_RX_SOFTWARE or not tsflags & SOF_TIMESTAMPING_OPT_RX_FILTER):
        out.append(SCM_TIMESTAMPING_KIND)
    return out
