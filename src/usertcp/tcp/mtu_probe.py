"""The path a connection sends on: its cached route and RFC 4821 MTU probing, as Linux does it.

:class:`PathMtu` is a connection's sk_dst_cache (the route's MTU and advmss, looked up again
after a route change at the next transmission, __sk_dst_check) and its icsk_mtup state
(tcp_output.c ``tcp_mtup_init``, ``tcp_sync_mss``, ``tcp_mtu_probe``,
``tcp_mtu_check_reprobe``; tcp_input.c ``tcp_mtup_probe_success``/``tcp_mtup_probe_failed``;
tcp_timer.c ``tcp_mtu_probing``, black-hole detection). With ``tcp_mtu_probing`` 2 (or 1
after a black hole) the sender keeps its MSS at the bottom of a search range
[search_low, search_high] of MTUs and sends one larger probe segment at the middle of the
range when enough data waits: an ACK that covers it raises search_low (and the MSS), a loss
of it lowers search_high, until the range is narrower than ``tcp_probe_threshold``; after
``tcp_probe_interval`` the search starts again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from usertcp.tcp.route import RouteMetrics
from usertcp.tcp.states import SYNCHRONIZED

if TYPE_CHECKING:
    from usertcp.tcp.connection import Connection

__all__ = ["PathMtu"]


class PathMtu:
    """One connection's route cache and MTU-probing state (icsk_mtup, tp->mtu_probe)."""

    __slots__ = ("conn", "dst_mtu", "enabled", "initialized", "pmtu_cookie", "probe_end", "probe_size",
                 "probe_start", "probe_timestamp", "route", "route_gen", "search_high", "search_low",
                 "transferring")

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.route: RouteMetrics | None = None
        self.route_gen = -1
        self.dst_mtu = 0
        self.refresh_route()
        self.pmtu_cookie = 0           # icsk_pmtu_cookie: the MTU the MSS was computed for
        self.initialized = False       # tcp_mtup_init ran
        self.transferring = False      # tcp_init_transfer ran (the connection is established)
        self.enabled = False
        self.search_high = 0           # MTUs, headers included
        self.search_low = 0
        self.probe_size = 0            # MTU of the probe in flight; 0: none
        self.probe_start = 0           # its offsets (tp->mtu_probe.probe_seq_start/end)
        self.probe_end = 0
        self.probe_timestamp = 0.0

    # -- the route (sk_dst_cache) ------------------------------------------------------

    def refresh_route(self) -> None:
        """Look the route up (again): at creation and, after a route change, at the next
        transmission (ip_queue_xmit -> __sk_dst_check)."""
        c = self.conn
        table = c.config.routes
        self.route = table.lookup(c.remote_ip)
        self.route_gen = table.generation
        route = self.route
        self.dst_mtu = route.mtu if route is not None and route.mtu else c.config.mtu

    def on_transmit(self) -> None:
        """A packet leaves: an obsolete cached route is replaced first."""
        if self.route_gen != self.conn.config.routes.generation:
            self.refresh_route()

    def mtu(self) -> int:
        """dst_mtu(): the route's (or link's) MTU, lowered by PMTU discovery unless locked."""
        c = self.conn
        route = self.route
        if c.pmtu and not (route is not None and route.mtu_locked):
            return min(self.dst_mtu, c.pmtu)
        return self.dst_mtu

    def advmss(self) -> int:
        """dst_metric_advmss(): the route's advmss, else its MTU's (the MSS we advertise)."""
        route = self.route
        if route is not None and route.advmss:
            return route.advmss
        return self.dst_mtu - self._ip_tcp()

    def initcwnd(self) -> int:
        """tcp_init_cwnd(): the route's initcwnd in packets, 0 for the default (TCP_INIT_CWND)."""
        route = self.route
        return route.initcwnd if route is not None else 0

    def _ip_tcp(self) -> int:
        return 60 if self.conn.v6 else 40

    def _options(self) -> int:
        c = self.conn
        return (12 if c.ts_ok else 0) + (20 if c.md5_key is not None else 0)

    def mtu_to_mss(self, mtu: int) -> int:
        """tcp_mtu_to_mss(): payload bytes per packet of this MTU, options excluded."""
        c = self.conn
        mss = min(mtu - self._ip_tcp(), c.peer_mss)
        return max(mss, c.config.min_snd_mss) - self._options()

    def mss_to_mtu(self, mss: int) -> int:
        """tcp_mss_to_mtu()."""
        return mss + self._options() + self._ip_tcp()

    # -- MSS (tcp_sync_mss / tcp_current_mss) ------------------------------------------

    def sync_mss(self, mss: int, mtu: int) -> int:
        """tcp_sync_mss()'s probing part, for the MSS ``mss`` computed for ``mtu``: the search
        never goes above the path MTU, and while probing the MSS stays at search_low's."""
        if not self.initialized and not self.conn.passive:
            # tcp_connect_init(): an active open inits the search before its first sync; a
            # passive child only at tcp_init_transfer, after tcp_v4_syn_recv_sock's sync.
            self.mtup_init(self.conn.stack.now)
        if self.search_high > mtu:
            self.search_high = mtu
        self.pmtu_cookie = mtu
        if self.enabled:
            mss = min(mss, self.mtu_to_mss(self.search_low))
        return mss

    def current_mss(self, now: float) -> None:
        """tcp_current_mss() before a write or a push: the MSS follows a changed route MTU;
        the first time in a synchronized state, tcp_mtup_init (tcp_init_transfer)."""
        c = self.conn
        if not self.transferring:
            if c.state not in SYNCHRONIZED:
                return
            # tcp_init_transfer(): tcp_mtup_init (again, for an active open), tcp_init_cwnd(dst)
            self.transferring = True
            self.mtup_init(now)
            c.cc.set_initial_window(self.initcwnd())
        if self.mtu() != self.pmtu_cookie:
            c.compute_mss()

    def mtup_init(self, now: float) -> None:
        """tcp_mtup_init(): the search range runs from tcp_base_mss to the peer's MSS."""
        c = self.conn
        cfg = c.config
        self.initialized = True
        self.enabled = cfg.mtu_probing > 1
        self.search_high = c.peer_mss + self._ip_tcp()
        self.search_low = self.mss_to_mtu(cfg.base_mss)
        self.probe_size = 0
        if self.enabled:
            self.probe_timestamp = now

    # -- probing (tcp_mtu_probe) -------------------------------------------------------

    def probe(self, now: float) -> int:
        """tcp_mtu_probe(), at the start of tcp_write_xmit: 1 if a probe was sent, 0 if the
        sender should wait for the flight to drain, -1 if it goes on normally."""
        c = self.conn
        cfg = c.config
        rec = c.recovery
        if (not self.enabled or self.probe_size or rec.ca_state != 0 or c.cc.cwnd < 11 * c.mss
                or c.rx.dsack is not None):
            return -1
        probe_size = self.mtu_to_mss((self.search_high + self.search_low) >> 1)
        mss = c.mss
        size_needed = probe_size + (rec.reordering + 1) * mss
        interval = self.search_high - self.search_low
        if probe_size > self.mtu_to_mss(self.search_high) or interval < cfg.probe_threshold:
            self.check_reprobe(now)
            return -1
        nxt = c.snd_nxt
        if c.snd_buf.end + 1 - nxt < size_needed or c.snd_wnd < size_needed:
            return -1
        if nxt + size_needed > c.snd_una + c.snd_wnd:
            return 0
        if c.in_flight + 2 * mss > c.cc.cwnd:
            return -1 if not c.in_flight else 0        # with none in flight, do not stall
        if c.snd_buf.collapse_end(nxt - 1) + 1 - nxt < probe_size:
            return -1          # tcp_can_coalesce_send_queue_head: no MSG_EOR boundary inside
        if not c.tx.emit_new(now, nxt, probe_size, fin=False, probe=True):
            return -1
        # "Decrement cwnd here because we are sending effectively two packets."
        c.cc.add_packets(-1)
        self.probe_size = self.mss_to_mtu(probe_size)
        self.probe_start = nxt
        self.probe_end = nxt + probe_size
        c.mib["UsertcpMtuProbes"] += 1
        return 1

    def check_reprobe(self, now: float) -> None:
        """tcp_mtu_check_reprobe(): after tcp_probe_interval, search again from today's MSS."""
        c = self.conn
        if now - self.probe_timestamp >= c.config.probe_interval:
            self.probe_size = 0
            self.search_high = c.peer_mss + self._ip_tcp()
            self.search_low = self.mss_to_mtu(c.mss)
            self.probe_timestamp = now

    def on_ack(self, snd_una: int) -> None:
        """tcp_clean_rtx_queue: an ACK covering the whole probe is its success."""
        if self.probe_size and snd_una >= self.probe_end:
            self.probe_success()

    def probe_success(self) -> None:
        """tcp_mtup_probe_success(): cwnd keeps its bytes in the larger packets, search_low
        rises to the probe, and the MSS follows (tcp_sync_mss at the cookie's MTU)."""
        c = self.conn
        cc = c.cc
        cc.mtu_probe_rescale(self.mss_to_mtu(c.mss), self.probe_size)
        self.search_low = self.probe_size
        self.probe_size = 0
        c.mib["TcpExtTCPMTUPSuccess"] += 1
        c.compute_mss(self.pmtu_cookie)

    def probe_lost(self, snd_una: int) -> bool:
        """tcp_fastretrans_alert: loss detected with the probe at SND.UNA, outside CWR and
        recovery, is the probe's failure, not congestion: True if so (the caller then
        retransmits it in MSS pieces without reducing cwnd, tcp_simple_retransmit)."""
        c = self.conn
        if not self.probe_size or snd_una != self.probe_start or c.recovery.ca_state >= 2:
            return False
        # tcp_mtup_probe_failed()
        self.search_high = self.probe_size - 1
        self.probe_size = 0
        c.mib["TcpExtTCPMTUPFail"] += 1
        c.cc.add_packets(1)            # restores the reduction of tcp_mtu_probe
        return True

    def black_hole(self, now: float) -> None:
        """tcp_timer.c tcp_mtu_probing(), after tcp_retries1 timeouts: start probing (mode 1),
        or halve the bottom of the search range, down to tcp_base_mss and the floors."""
        c = self.conn
        cfg = c.config
        if not cfg.mtu_probing:
            return
        if not self.initialized:
            self.mtup_init(now)
        if not self.enabled:
            self.enabled = True
            self.probe_timestamp = now
        else:
            mss = self.mtu_to_mss(self.search_low) >> 1
            mss = min(cfg.base_mss, mss)
            mss = max(mss, cfg.mtu_probe_floor, cfg.min_snd_mss)
            self.search_low = self.mss_to_mtu(mss)
        c.mib["UsertcpMtuBlackHoles"] += 1
        c.compute_mss(self.pmtu_cookie or self.mtu())
