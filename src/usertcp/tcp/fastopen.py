"""TCP Fast Open (RFC 7413, both sides) and listener preload (the proposed MSG_PRELOAD).

The Stack calls the methods of ``stack.hooks`` at a few points of the handshake;
:func:`install` puts a :class:`FastOpen` there (wrapping any hooks object already
installed, to which it forwards the methods it does not own). Per-connection state
lives in ``conn.tfo`` (a :class:`TfoState`).

Server (net/ipv4/tcp_fastopen.c tcp_try_fastopen, tcp_minisocks.c tcp_check_req):
- A listener's preload is an immutable ``bytes``; the child takes it by reference as the
  head of its send buffer (the snapshot), so application writes follow it. One snapshot
  rule for every path, as the patch series: a request without Fast Open takes its copy
  when its child is created at the 3rd ACK (patch 2 copies in tcp_create_openreq_child),
  the SYN-cookie path included; a Fast Open child, created at the SYN, takes it then.
- Only the first SYN-ACK of a Fast Open child carries data (patch 3 adds it to
  TCP_SYNACK_FASTOPEN); retransmitted SYN-ACKs, on the timer or for a retransmitted SYN,
  are tcp_rtx_synack's TCP_SYNACK_NORMAL: no data. The data stays outstanding and the
  3rd ACK's ack point decides what is resent (patch 5). ``StackConfig.
  preload_synack_rtx_data`` (off by default) resends it in every SYN-ACK instead
  (measured in ``usertcp bench preload``).
- A TFO child (valid cookie, or cookie not required) acks the SYN's data at once,
  goes to the accept queue in SYN-RECEIVED, and carries as much of the preload in its
  SYN-ACK as the peer's MSS (less the SYN-ACK options, RFC 6691), the peer's SYN
  window and the initial window allow. The rest follows the 3rd ACK.
- A 3rd ACK anywhere in ISN+1 .. ISN+1+len is accepted (the SYN-RECEIVED check in
  Connection compares against snd_max). If it leaves SYN-ACK data unacknowledged,
  the child goes back to the ACK point and sends the rest again at once (the patch's
  "mark the rtx head lost" + "trim the linear skb"), without a congestion response,
  like Linux's tcp_non_congestion_loss_retransmit on the client side.

Client: ``tcp/fastopen_client.py`` (``FastOpen.client``); the hooks below hand it the
connections whose ``conn.tfo`` is a ``ClientTfo``.

What the socket layer calls:
- listener: ``Listener.append_preload(data, now)`` (send(MSG_PRELOAD): writes append),
  ``Listener.set_preload(data, now)`` (setsockopt TCP_PRELOAD: replace or clear); assigning
  ``Listener.fastopen_qlen`` (setsockopt TCP_FASTOPEN); ``Listener.set_fastopen_key``
  (TCP_FASTOPEN_KEY, 16 or 32 bytes); ``Listener.fastopen_no_cookie`` (TCP_FASTOPEN_NO_COOKIE).
- client: ``tfo_connect(conn, data, now)`` instead of ``stack.connect(conn, now)`` for
  sendto(MSG_FASTOPEN) and for the first write after connect() with
  TCP_FASTOPEN_CONNECT (``defer_connect`` tells whether Linux would defer the SYN:
  if not, it connects at once, i.e. ``tfo_connect(conn, b"", now)``); it returns the
  bytes the SYN carries, as Linux's fo->copied.
- A TFO child may send in SYN-RECEIVED: after ``conn.send`` on a connection in a SYN
  state, call ``conn.output(now)`` (Connection.send only transmits when synchronized).
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

from usertcp.tcp.appguard import notify_listener
from usertcp.tcp.config import (
    TFO_SERVER_COOKIE_NOT_REQD,
    TFO_SERVER_ENABLE,
)
from usertcp.tcp.connection import State
from usertcp.tcp.cookies import tfo_cookie
from usertcp.tcp.fastopen_client import ActiveFastOpen, ClientTfo, CookieEntry, client_enabled
from usertcp.wire.segment import FIN, Buffer, Segment
from usertcp.wire.tcp import MAX_OPTIONS_LEN, options_length

if TYPE_CHECKING:
    from usertcp.tcp.connection import Connection
    from usertcp.tcp.host import ConnectionHost, FeatureHooks
    from usertcp.tcp.stack import Listener

__all__ = ["PRELOAD_MAX", "CookieEntry", "FastOpen", "TfoState", "defer_connect", "flush_metrics", "install",
           "tfo_connect"]

# Documented limit of one listener preload (EMSGSIZE beyond). The patch limits it to one
# linear skb; here it is a plain bytes object that the SYN-ACK and the following data
# segments slice, so it may span several segments.
PRELOAD_MAX = 65536


class TfoState:
    """Per-connection fast-open / preload state (``conn.tfo``)."""

    __slots__ = ("client", "cookie_exp", "cookie_out", "preload_len", "queued", "synack_data", "synack_sent")

    def __init__(self, *, client: bool) -> None:
        self.client = client
        # Server side.
        self.preload_len = 0             # bytes of the listener's snapshot at the head of snd_buf
        self.synack_data = 0             # of which the SYN-ACK carries this many
        self.synack_sent = False         # the first (data-carrying) SYN-ACK has gone out
        self.cookie_out: bytes | None = None   # cookie option for the SYN-ACK
        self.cookie_exp = False          # echo the experimental form the client used
        self.queued = False              # TFO child put in the accept queue at SYN time


class FastOpen:
    """The hooks object: fast open and preload for one stack."""

    def __init__(self, stack: ConnectionHost, inner: FeatureHooks | None = None) -> None:
        self.stack = stack
        self.inner = inner               # a previously installed hooks object
        self.client = ActiveFastOpen(stack)   # the client side (tcp/fastopen_client.py)

    # ---------------------------------------------- hooks we do not own: defaults

    def accept_segment(self, conn: Connection, seg: Segment, now: float) -> bool:
        return True if self.inner is None else bool(self.inner.accept_segment(conn, seg, now))

    def accept_listener_segment(self, listener: Listener, seg: Segment, now: float) -> bool:
        return True if self.inner is None else bool(self.inner.accept_listener_segment(listener, seg, now))

    def may_send_reset(self, seg: Segment) -> bool:
        return True if self.inner is None else bool(self.inner.may_send_reset(seg))

    # ------------------------------------------------------------- SYN options

    def fastopen_syn_option(self, conn: Connection, synack: bool, peer: Segment | None
                            ) -> tuple[bytes | None, bool]:
        st = conn.tfo
        if isinstance(st, ClientTfo):
            return (None, False) if synack else self.client.syn_option(conn, st)
        if not isinstance(st, TfoState):
            return None, False
        cookie, exp = (st.cookie_out, st.cookie_exp) if synack else (None, False)
        if cookie is not None and not _option_fits(conn, synack, cookie, exp):
            return None, False
        return cookie, exp

    # ------------------------------------------------------------------ server

    def on_passive_syn(self, conn: Connection, seg: Segment, now: float) -> None:
        """A SYN reached a listener: decide fast open (tcp_try_fastopen). A Fast Open child
        takes its preload snapshot now; a plain request's child at the 3rd ACK."""
        lst = conn.listener
        if lst is None:
            return
        child, cookie_out = self._try_fastopen(lst, conn, seg)
        preload = lst.preload if child else b""
        if not preload and not child and cookie_out is None:
            return
        st = TfoState(client=False)
        conn.handshake.attach_fastopen(st)
        st.cookie_out = cookie_out
        st.cookie_exp = seg.fastopen_exp
        if preload:
            self.take_preload(conn, st, preload)
        if not child:
            return
        mib = conn.mib
        mib["TcpExtTCPFastOpenPassive"] += 1
        # tcp_fastopen_add_skb: the SYN's data (and FIN) is received now and acked in the SYN-ACK.
        conn.handshake.accept_syn_data(seg.payload, bool(seg.flags & FIN))
        if preload:
            # RFC 6691 / RFC 9293 §3.7.1: the peer's MSS excludes TCP options, so the SYN-ACK's
            # options come out of it; then the peer's (unscaled) SYN window and our IW.
            opt_len = len(conn.tx.syn_options(now, True, None))
            mss = min(conn.peer_mss, conn.stack.mtu_mss(conn.v6)) - opt_len
            if conn.user_mss:
                mss = min(mss, conn.user_mss - opt_len)
            st.synack_data = max(min(st.preload_len, mss, conn.snd_wnd, conn.cc.cwnd), 0)
        # tcp_fastopen_create_child: the child is accepted before the 3rd ACK.
        lst.embryonic.discard(conn)
        lst.tfo_children.add(conn)
        lst.accept_queue.append(conn)
        st.queued = True
        notify_listener(lst, conn)

    @staticmethod
    def take_preload(conn: Connection, st: TfoState, preload: bytes) -> None:
        """The snapshot: the listener's immutable bytes object, by reference, at the head of
        the child's send buffer (patch 2: the listener's write queue copied to the child)."""
        conn.queue_views([preload])
        st.preload_len = len(preload)

    def _try_fastopen(self, lst: Listener, conn: Connection, seg: Segment) -> tuple[bool, bytes | None]:
        """(fast open child?, cookie to put in the SYN-ACK) as Linux's tcp_try_fastopen decides."""
        cfg = conn.config
        mib = conn.mib
        foc = seg.fastopen                # None: no option; b"": cookie request
        syn_data = bool(len(seg.payload)) or bool(seg.flags & FIN)
        if foc is not None and not foc:
            mib["TcpExtTCPFastOpenCookieReqd"] += 1
        if not (cfg.fastopen & TFO_SERVER_ENABLE) or not (syn_data or foc is not None) \
                or not self._queue_check(lst):
            return False, None            # plain 3WHS, no cookie at all
        if lst.fastopen_no_cookie or cfg.fastopen & TFO_SERVER_COOKIE_NOT_REQD:
            return True, None
        if foc is None:
            # Commit 531c94a: a SYN without the option gets no cookie.
            return False, None
        primary, backup = lst.fastopen_keys()
        valid = tfo_cookie(primary, conn.remote_ip, conn.local_ip)
        if not foc:
            return False, valid
        if foc == valid:
            return True, None             # valid primary cookie: none in the SYN-ACK
        if backup is not None and foc == tfo_cookie(backup, conn.remote_ip, conn.local_ip):
            mib["TcpExtTCPFastOpenPassiveAltKey"] += 1
            return True, valid            # backup key: accept, and hand out a fresh primary cookie
        mib["TcpExtTCPFastOpenPassiveFail"] += 1
        return False, valid

    @staticmethod
    def _queue_check(lst: Listener) -> bool:
        """tcp_fastopen_queue_check: max_qlen 0 disables; a full queue overflows."""
        max_qlen = lst.fastopen_max_qlen
        if max_qlen == 0:
            return False
        if lst.fastopen_pending >= max_qlen:
            lst.stack.counters["TcpExtTCPFastOpenListenOverflow"] += 1
            return False
        return True

    def syn_payload(self, conn: Connection) -> list[memoryview]:
        st = conn.tfo
        if isinstance(st, ClientTfo):
            return self.client.syn_payload(conn, st)
        if isinstance(st, TfoState):
            return self._synack_payload(conn, st)
        return []

    @staticmethod
    def _synack_payload(conn: Connection, st: TfoState) -> list[memoryview]:
        """Only the first SYN-ACK of a Fast Open child carries the preload (patch 3 adds it to
        TCP_SYNACK_FASTOPEN; tcp_rtx_synack sends TCP_SYNACK_NORMAL, for the RTO and for a
        retransmitted SYN alike), unless ``preload_synack_rtx_data`` is set."""
        if conn.state is not State.SYN_RECEIVED or not st.synack_data:
            return []
        if st.synack_sent and not conn.config.preload_synack_rtx_data:
            return []
        st.synack_sent = True
        return conn.snd_buf.views(0, st.synack_data)

    def syn_rto(self, conn: Connection, now: float) -> None:
        st = conn.tfo
        if isinstance(st, ClientTfo):
            self.client.syn_resent(st)    # the retransmitted SYN is the data-less SYN skb

    def write_timeout(self, conn: Connection, expired: bool, now: float) -> None:
        """tcp_write_timeout: blackhole detection for Fast Open connections."""
        st = conn.tfo
        if isinstance(st, ClientTfo):
            self.client.write_timeout(conn, st, expired, now)

    def on_destroy(self, conn: Connection, now: float) -> None:
        """tcp_v4_destroy_sock / tcp_disconnect: the blackhole check of a closing connection."""
        st = conn.tfo
        if isinstance(st, ClientTfo):
            self.client.on_destroy(conn, st, now)

    def syn_state_output(self, conn: Connection, now: float) -> None:
        """Linux lets a TFO child send in SYN_RECV (tcp_sendmsg: tcp_passive_fastopen)."""
        st = conn.tfo
        if not isinstance(st, TfoState) or st.client or not st.queued:
            return
        if conn.state is not State.SYN_RECEIVED or conn.snd_max < 1:
            return                        # the SYN-ACK goes first
        # Only once the application wrote: the preload's remainder otherwise waits for the 3rd ACK.
        if conn.snd_buf.end > st.preload_len and conn.snd_nxt <= conn.snd_buf.end:
            conn.tx.send_new_data(now)

    def on_established_passive(self, conn: Connection, now: float, ack_off: int) -> bool:
        """The 3rd ACK: a plain request's child takes the preload now; SYN-ACK data the ACK
        leaves unacknowledged is resent. True if the child was queued at SYN time (TFO)."""
        st = conn.tfo
        if isinstance(st, TfoState) and st.client:
            return False
        if not isinstance(st, TfoState) or not st.queued:
            self._preload_at_third_ack(conn, st if isinstance(st, TfoState) else None)
            return False
        end = 1 + st.synack_data
        if st.synack_data and 0 < ack_off < end:
            # Patches 5/6: the data in the SYN-ACK was not (all) taken; go back to the ACK
            # point (the head is trimmed by the ACK) and send the rest now, not at the RTO.
            conn.handshake.rewind_syn_data(ack_off)
            conn.mib["UsertcpSynAckDataRetrans"] += 1
        return st.queued

    def _preload_at_third_ack(self, conn: Connection, st: TfoState | None) -> None:
        """tcp_create_openreq_child (patch 2): the child of a plain or SYN-cookie request is
        created at the 3rd ACK and copies the listener's preload as it is then."""
        lst = conn.listener
        if lst is None or lst.closed or not lst.preload:
            return
        if st is None:
            st = TfoState(client=False)
            conn.handshake.attach_fastopen(st)
        self.take_preload(conn, st, lst.preload)

    # ------------------------------------------------------------------ client

    def on_synack(self, conn: Connection, seg: Segment, now: float) -> None:
        """tcp_rcv_fastopen_synack (tcp/fastopen_client.py)."""
        st = conn.tfo
        if isinstance(st, ClientTfo):
            self.client.on_synack(conn, st, seg, now)


def _option_fits(conn: Connection, synack: bool, cookie: bytes, exp: bool) -> bool:
    """tcp_synack_options / tcp_syn_options: the cookie only if the 40 option bytes have room.

    Mirrors the option set of Connection.tx.syn_options (MD5 alone takes 20 bytes).
    """
    cfg = conn.config
    if synack:
        ts, sack, ws = conn.ts_ok, conn.sack_ok, conn.ws_ok
    else:
        ts, sack, ws = cfg.timestamps, cfg.sack, cfg.window_scaling
    need = options_length(mss=0, ts=ts, sack_permitted=sack, wscale=conn.rcv_wscale if ws else -1,
                          fastopen=cookie, fastopen_exp=exp, md5=conn.md5_key is not None)
    return need <= MAX_OPTIONS_LEN


def install(stack: ConnectionHost) -> FastOpen:
    """Put a FastOpen in ``stack.hooks`` (idempotent); an existing hooks object is wrapped."""
    hooks = stack.hooks
    if isinstance(hooks, FastOpen):
        return hooks
    fo = FastOpen(stack, hooks)
    stack.hooks = fo
    return fo


def flush_metrics(stack: ConnectionHost) -> None:
    """``ip tcp_metrics flush``: forget every server's cookie and MSS (tcp_metrics_flush_all)."""
    hooks = stack.hooks
    if isinstance(hooks, FastOpen):
        hooks.client.cache.flush()


def defer_connect(conn: Connection, now: float, *, no_cookie: bool = False) -> bool:
    """connect() on a TCP_FASTOPEN_CONNECT socket: True if Linux would send nothing yet (the SYN
    leaves with the first write, carrying its data); see ActiveFastOpen.defer_connect."""
    return install(conn.stack).client.defer_connect(conn, now, no_cookie=no_cookie)


def tfo_connect(conn: Connection, data: Buffer | None, now: float, *, no_cookie: bool = False) -> int:
    """Active open with Fast Open (sendto(MSG_FASTOPEN), or the first write of a deferred
    TCP_FASTOPEN_CONNECT): the SYN carries what it may of ``data`` (a cached cookie, or no
    cookie needed) or a cookie request; returns the bytes it carries, which the caller
    counts as written (the rest is the caller's to send once connected, as Linux's
    tcp_sendmsg_locked does). EOPNOTSUPP if the client bit of ``tcp_fastopen`` is off. ``data``
    None is user memory that cannot be read (a C caller's bad pointer): the SYN falls back to a
    cookie request, as when Linux's copy into the SYN fails."""
    stack = conn.stack
    if not client_enabled(stack):
        raise OSError(errno.EOPNOTSUPP, "TCP Fast Open (client) is disabled: net.ipv4.tcp_fastopen & 1")
    return install(stack).client.send_syn_data(conn, data, now, no_cookie=no_cookie)
