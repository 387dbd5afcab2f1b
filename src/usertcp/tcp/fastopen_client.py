"""The TCP Fast Open client (RFC 7413 §3-4.1), as Linux does it.

Linux sources modelled, function by function:

- ``tcp_metrics.c`` tcp_fastopen_cache_get/_set: a per-destination cache holds the server's
  cookie, its MSS, whether to try the experimental option (kind 254) next, and SYN losses
  (negative caching). :class:`CookieCache`, one per stack (Linux: per network namespace).
  Linux 6.x only records the losses (``ip tcp_metrics`` shows them); the per-destination
  back-off of 2012 gave way to the namespace-wide blackhole pause below, and so here.
- ``tcp_fastopen.c`` tcp_fastopen_cookie_check: may a SYN carry data? Yes with a cached cookie,
  or in cookie-less mode (``tcp_fastopen`` bit 0x4, ``TCP_FASTOPEN_NO_COOKIE``); never while
  active TFO is paused by blackhole detection (tcp_fastopen_active_should_disable). Otherwise
  the SYN carries a cookie request (an empty option).
- ``tcp_fastopen.c`` tcp_fastopen_defer_connect: connect() on a ``TCP_FASTOPEN_CONNECT``
  socket with a usable cookie sends nothing; the SYN leaves with the first write.
- ``tcp_output.c`` tcp_send_syn_data: the SYN carries at most the path MSS (bounded by the
  cached MSS and TCP_MAXSEG) less the whole 40-byte option space (middleboxes add options),
  and at most what the caller wrote; the caller is told how much went (``copied``). The
  data is a separate skb: retransmitted SYNs carry neither data nor the Fast Open option.
- ``tcp_input.c`` tcp_rcv_fastopen_synack: cache what the SYN-ACK says (cookie, MSS, try the
  experimental option next time, SYN loss), retransmit SYN data it did not acknowledge
  without a congestion response, set TCPI_OPT_SYN_DATA only if all of it was acknowledged.
- ``tcp_fastopen.c`` tcp_fastopen_active_detect_blackhole / tcp_fastopen_active_disable:
  a Fast Open connection that times out twice (or gives up) pauses active TFO for
  ``tcp_fastopen_blackhole_timeout_sec``, doubling per repeat up to 2^6 times.

Sans-IO: every entry point takes ``now``. The stack's hooks object (``tcp/fastopen.py``)
calls :class:`ActiveFastOpen` for connections whose ``conn.tfo`` is a :class:`ClientTfo`.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

from usertcp.tcp.config import TFO_CLIENT_ENABLE, TFO_CLIENT_NO_COOKIE
from usertcp.tcp.states import State
from usertcp.wire.tcp import MAX_OPTIONS_LEN, options_length

if TYPE_CHECKING:
    from usertcp.tcp.connection import Connection
    from usertcp.tcp.host import ConnectionHost
    from usertcp.wire.segment import Buffer, Segment

__all__ = [
    "TFO_COOKIE_UNAVAILABLE",
    "TFO_DATA_NOT_ACKED",
    "TFO_SYN_RETRANSMITTED",
    "ActiveFastOpen",
    "ClientTfo",
    "CookieCache",
    "CookieEntry",
]

# tcpi_fastopen_client_fail (include/uapi/linux/tcp.h enum tcp_fastopen_client_fail).
TFO_COOKIE_UNAVAILABLE = 1
TFO_DATA_NOT_ACKED = 2
TFO_SYN_RETRANSMITTED = 3

# tcp_fastopen_active_should_disable: the pause doubles per repeat, up to 2^6 times.
_BLACKHOLE_MAX_SHIFT = 6


class CookieEntry:
    """Linux struct tcp_fastopen_metrics: what the client knows about one server."""

    __slots__ = ("cookie", "exp", "last_syn_loss", "mss", "syn_loss", "try_exp")

    def __init__(self, cookie: bytes | None = None, *, exp: bool = False, mss: int = 0) -> None:
        self.cookie = cookie             # 4..16 bytes, or None (Linux cookie.len <= 0)
        self.exp = exp                   # the cookie came in the experimental option
        self.mss = mss                   # the server's MSS from its last SYN-ACK (0: unknown)
        self.try_exp = 0                 # 1: ask with the experimental option next; 2: back to RFC
        self.syn_loss = 0                # consecutive SYN-data losses (negative caching)
        self.last_syn_loss = 0.0


class CookieCache:
    """The Fast Open part of Linux's tcp_metrics, keyed by server address, and the namespace's
    blackhole state (tfo_active_disable_times / _stamp)."""

    __slots__ = ("disable_stamp", "disable_times", "entries")

    def __init__(self) -> None:
        self.entries: dict[bytes, CookieEntry] = {}
        self.disable_times = 0
        self.disable_stamp = 0.0

    def get(self, remote_ip: bytes) -> CookieEntry | None:
        return self.entries.get(remote_ip)

    def flush(self) -> None:
        """``ip tcp_metrics flush``: forget every destination (not the blackhole state)."""
        self.entries.clear()

    def store(self, remote_ip: bytes, mss: int, cookie: bytes | None, exp: bool, *,
              syn_lost: bool, try_exp: int, now: float) -> None:
        """tcp_fastopen_cache_set: a new MSS and a valid cookie replace the old ones; the
        experimental-option hint only moves forward while no cookie is known."""
        entry = self.entries.get(remote_ip)
        if entry is None:
            entry = self.entries[remote_ip] = CookieEntry()
        if mss:
            entry.mss = mss
        if cookie:
            entry.cookie = cookie
            entry.exp = exp
        elif try_exp > entry.try_exp and entry.cookie is None and not entry.exp:
            entry.try_exp = try_exp
        if syn_lost:
            entry.syn_loss += 1
            entry.last_syn_loss = now
        else:
            entry.syn_loss = 0

    def should_disable(self, conn: Connection, st: ClientTfo | None, now: float) -> bool:
        """tcp_fastopen_active_should_disable: is active TFO paused after a blackhole?"""
        timeout = conn.config.fastopen_blackhole_timeout
        if not timeout or not self.disable_times:
            return False
        multiplier = 1 << min(self.disable_times - 1, _BLACKHOLE_MAX_SHIFT)
        if now < self.disable_stamp + multiplier * timeout:
            return True
        if st is not None:
            st.check_blackhole = True    # a success from here on ends the pause (ofo check)
        return False

    def disable(self, conn: Connection, now: float) -> None:
        """tcp_fastopen_active_disable: pause active TFO in this namespace."""
        if not conn.config.fastopen_blackhole_timeout:
            return
        self.disable_stamp = now
        self.disable_times += 1
        conn.mib["TcpExtTCPFastOpenBlackhole"] += 1


class ClientTfo:
    """Per-connection active Fast Open state (``conn.tfo``): Linux's tp->fastopen_req and the
    tp->syn_fastopen* / syn_data bits."""

    __slots__ = ("check_blackhole", "client_fail", "cookie", "copied", "exp", "first_sent",
                 "mss_clamp", "syn_data", "syn_fastopen", "syn_fastopen_exp")

    def __init__(self, cookie: bytes | None, exp: bool, mss_clamp: int) -> None:
        self.cookie = cookie            # option of the first SYN: None none, b"" a request
        self.exp = exp                  # ... in the experimental form (kind 254)
        self.mss_clamp = mss_clamp      # tp->rx_opt.mss_clamp before the SYN-ACK
        self.copied = 0                 # data bytes in the first SYN (fo->copied)
        self.first_sent = False         # the first SYN left: later SYNs are plain
        self.syn_fastopen = False       # the first SYN carried the option
        self.syn_fastopen_exp = False
        self.syn_data = False           # ... and data
        self.check_blackhole = False    # tp->syn_fastopen_ch
        self.client_fail = 0            # tcpi_fastopen_client_fail


class ActiveFastOpen:
    """The client side of the stack's Fast Open hooks."""

    __slots__ = ("cache", "stack")

    def __init__(self, stack: ConnectionHost) -> None:
        self.stack = stack
        self.cache = CookieCache()

    # ------------------------------------------------------------ socket calls

    def cookie_check(self, conn: Connection, st: ClientTfo | None, now: float, no_cookie: bool
                     ) -> tuple[bool, bytes | None, bool, int]:
        """tcp_fastopen_cookie_check: (may the SYN carry data, its option, experimental form,
        cached MSS or 0). The option is None (none), b"" (a request) or the cookie."""
        entry = self.cache.get(conn.remote_ip)
        mss = entry.mss if entry is not None else 0
        cookie = entry.cookie if entry is not None else None
        exp = entry is not None and (entry.exp if cookie is not None else entry.try_exp == 1)
        if self.cache.should_disable(conn, st, now):
            return False, None, False, mss
        if no_cookie or conn.config.fastopen & TFO_CLIENT_NO_COOKIE:
            # tcp_fastopen_no_cookie: the sysctl bit or the socket's TCP_FASTOPEN_NO_COOKIE.
            return True, None, False, mss
        if cookie is not None:
            return True, cookie, exp, mss
        return False, b"", exp, mss

    def defer_connect(self, conn: Connection, now: float, *, no_cookie: bool = False) -> bool:
        """tcp_fastopen_defer_connect, for connect() on a TCP_FASTOPEN_CONNECT socket: True if
        the SYN waits for the first write (the SYN could carry data); otherwise the caller
        connects at once with ``send_syn_data(conn, b"", now)`` (a cookie request)."""
        return self.cookie_check(conn, None, now, no_cookie)[0]

    def send_syn_data(self, conn: Connection, data: Buffer | None, now: float, *,
                      no_cookie: bool = False) -> int:
        """tcp_connect with a Fast Open request (tcp_send_syn_data): queue what the SYN may
        carry of ``data`` and send the SYN; returns the bytes it carries (fo->copied). ``data``
        None is unreadable user memory: the copy fails and the SYN asks for a cookie instead."""
        if conn.state is not State.CLOSED:
            raise OSError(errno.EISCONN, "already connected")
        st = ClientTfo(None, False, self.advmss(conn))
        conn.handshake.attach_fastopen(st)
        ok, cookie, exp, mss = self.cookie_check(conn, st, now, no_cookie)
        st.cookie, st.exp = cookie, exp
        if mss:
            st.mss_clamp = mss                    # tcp_fastopen_cache_get
        if not ok:
            st.client_fail = TFO_COOKIE_UNAVAILABLE
        elif data is None:
            if cookie:
                st.cookie = b""                   # the copy failed: tcp_send_syn_data's fallback
        else:
            if conn.user_mss and conn.user_mss < st.mss_clamp:
                st.mss_clamp = conn.user_mss      # tcp_mss_clamp
            # __tcp_mtu_to_mss bounded by mss_clamp, less MAX_TCP_OPTION_SPACE.
            space = max(min(self.path_mss(conn), st.mss_clamp), 48) - MAX_OPTIONS_LEN
            space = max(min(space, len(data), conn.send_space), 0)
            if space:
                # The data is an skb of its own, with PSH, already in the retransmit queue
                # (tcp_send_syn_data): later writes start a new skb.
                conn.queue_views([bytes(memoryview(data)[:space])])
                conn.snd_buf.send_packet(0, space)
            st.copied = space
        self.stack.connect(conn, now)
        return st.copied

    # --------------------------------------------------------------- SYN hooks

    def syn_option(self, conn: Connection, st: ClientTfo) -> tuple[bytes | None, bool]:
        """tcp_syn_options: the option goes in the first SYN only if the 40 bytes have room."""
        if st.cookie is None:
            return None, False
        cfg = conn.config
        need = options_length(mss=0, ts=cfg.timestamps, sack_permitted=cfg.sack,
                              wscale=conn.rcv_wscale if cfg.window_scaling else -1,
                              fastopen=st.cookie, fastopen_exp=st.exp, md5=conn.md5_key is not None)
        if need > MAX_OPTIONS_LEN:
            return None, False
        st.syn_fastopen = True
        st.syn_fastopen_exp = st.exp
        return st.cookie, st.exp

    def syn_payload(self, conn: Connection, st: ClientTfo) -> list[memoryview]:
        """The first SYN carries the copied data; the SYN skb left in the queue has none."""
        if st.first_sent or conn.state is not State.SYN_SENT:
            return []
        st.first_sent = True
        st.syn_data = st.copied > 0
        return conn.snd_buf.views(0, st.copied) if st.copied else []

    @staticmethod
    def syn_resent(st: ClientTfo) -> None:
        """A SYN retransmission (RTO, or a path MTU report: tcp_simple_retransmit) resends the
        pure SYN: ``fo->cookie.len = -1`` was set once the first SYN left."""
        st.first_sent = True
        st.cookie = None

    def write_timeout(self, conn: Connection, st: ClientTfo, expired: bool, now: float) -> None:
        """tcp_fastopen_active_detect_blackhole, from tcp_write_timeout: the third timeout in a
        row (or giving up) of a Fast Open connection pauses active TFO."""
        timeouts = conn.timers.retransmits if conn.is_synchronized else conn.syn_retries
        if (st.syn_fastopen or st.syn_data or conn.syn_data_acked) \
                and (timeouts == 2 or (timeouts < 2 and expired)):
            self.cache.disable(conn, now)
            conn.mib["TcpExtTCPFastOpenActiveFail"] += 1

    def on_destroy(self, conn: Connection, st: ClientTfo, now: float) -> None:
        """tcp_fastopen_active_disable_ofo_check: a Fast Open connection that got nothing but an
        out-of-order FIN met a middlebox eating data: pause. One that received data after a
        pause ended (syn_fastopen_ch) shows the path is fine: forget past blackholes."""
        if not st.syn_fastopen:
            return
        if not conn.data_segs_in:
            if not conn.ooo.empty and not conn.ooo.bytes_queued:
                self.cache.disable(conn, now)
        elif st.check_blackhole and self.cache.disable_times and conn.remote_ip != conn.local_ip:
            self.cache.disable_times = 0        # (not over loopback, as Linux)

    def on_synack(self, conn: Connection, st: ClientTfo, seg: Segment, now: float) -> None:
        """tcp_rcv_fastopen_synack, after tcp_ack() took the acknowledged part of the SYN data."""
        if not (st.syn_fastopen or st.syn_data):
            return
        # The MSS to cache: the SYN-ACK's own option (not TCP_MAXSEG's clamp of it); with none,
        # mss_clamp is still what the SYN assumed (unless TCP_MAXSEG set it: nothing cached).
        mss = seg.mss if seg.mss > 0 else (0 if conn.user_mss else st.mss_clamp)
        cookie = seg.fastopen or None
        exp = seg.fastopen_exp
        unacked = st.syn_data and conn.snd_una < 1 + st.copied
        syn_drop = False
        try_exp = 0
        if not st.syn_fastopen:
            cookie = None                 # an unsolicited cookie is ignored
        elif conn.total_retrans:
            # The SYN timed out and this SYN-ACK has no cookie and does not cover the data:
            # presumably only the plain retransmitted SYN got through (negative caching).
            syn_drop = cookie is None and unacked
        elif cookie is None and not st.syn_data:
            # A cookie request went unanswered: try the other option form next time.
            try_exp = 2 if st.syn_fastopen_exp else 1
        self.cache.store(conn.remote_ip, mss, cookie, exp, syn_lost=syn_drop, try_exp=try_exp, now=now)
        if unacked:
            st.client_fail = TFO_SYN_RETRANSMITTED if conn.total_retrans else TFO_DATA_NOT_ACKED
            # tcp_mark_skb_lost on the data's skb + tcp_non_congestion_loss_retransmit: it is
            # retransmitted now (tcpi_retrans, total_retrans, TcpRetransSegs), no cwnd cut.
            rec = conn.recovery
            for r in rec.rtx:
                rec.mark_lost(r)
            rec.non_congestion_loss()
            conn.mib["TcpExtTCPFastOpenActiveFail"] += 1
            return
        if st.syn_data:
            conn.mib["TcpExtTCPFastOpenActive"] += 1
            # tcpi_options TCPI_OPT_SYN_DATA; the SYN and its data count as one delivery (the
            # SYN's, counted on OPENED): take back what the ACK counted for the data.
            mss = max(conn.mss, 1)
            conn.handshake.note_syn_data_acked(max(1, (st.copied + mss - 1) // mss))

    # ---------------------------------------------------------------- helpers

    @staticmethod
    def advmss(conn: Connection) -> int:
        """tp->advmss: the route's MSS, less for TCP_MAXSEG."""
        mss = conn.stack.mtu_mss(conn.v6)
        return min(mss, conn.user_mss) if conn.user_mss else mss

    @staticmethod
    def path_mss(conn: Connection) -> int:
        """__tcp_mtu_to_mss of the path MTU (the link's, or a smaller PMTU learnt)."""
        mss = conn.stack.mtu_mss(conn.v6)
        if conn.pmtu:
            mss = min(mss, conn.pmtu - (60 if conn.v6 else 40))
        return mss


def client_enabled(stack: ConnectionHost) -> bool:
    """net.ipv4.tcp_fastopen bit 0x1: sendto(MSG_FASTOPEN) and TCP_FASTOPEN_CONNECT work."""
    return bool(stack.config.fastopen & TFO_CLIENT_ENABLE)
