"""TCP Fast Open (RFC 7413, both sides) and listener preload (the proposed MSG_PRELOAD).

The Stack calls the methods of ``stack.hooks`` at a few points of the handshake;
:func:`install` puts a :class:`FastOpen` there (wrapping any hooks object already
installed, to which it forwards the methods it does not own). Per-connection state
lives in ``conn.tfo`` (a :class:`TfoState`).

Server (net/ipv4/tcp_fastopen.c tcp_try_fastopen, tcp_minisocks.c tcp_check_req):
- A listener's preload is an immutable ``bytes``; at SYN time the child takes it by
  reference as the head of its send buffer (the snapshot), so application writes
  follow it and a later ``set_preload`` only affects later SYNs.
- A TFO child (valid cookie, or cookie not required) acks the SYN's data at once,
  goes to the accept queue in SYN-RECEIVED, and carries as much of the preload in its
  SYN-ACK as the peer's MSS (less the SYN-ACK options, RFC 6691), the peer's SYN
  window and the initial window allow. The rest follows the 3rd ACK.
- A 3rd ACK anywhere in ISN+1 .. ISN+1+len is accepted (the SYN-RECEIVED check in
  Connection compares against snd_max). If it leaves SYN-ACK data unacknowledged,
  the child goes back to the ACK point and sends the rest again at once (the patch's
  "mark the rtx head lost" + "trim the linear skb"), without a congestion response,
  like Linux's tcp_non_congestion_loss_retransmit on the client side.

Client (tcp_output.c tcp_send_syn_data, tcp_input.c tcp_rcv_fastopen_synack):
- A cookie cache per server address (``FastOpen.cookie_cache``). First contact sends
  a cookie request (empty option); with a cookie cached the SYN carries data.
- SYN retransmissions carry no data (Linux retransmits the data-less SYN skb).
- If the SYN-ACK acknowledges only part of the SYN data, the rest is sent again as
  soon as the connection is established; if the server ignores TFO the data simply
  follows the handshake.

What the socket layer calls:
- listener: ``Listener.set_preload(data, now)`` (send(MSG_PRELOAD)); assigning
  ``Listener.fastopen_qlen`` (setsockopt TCP_FASTOPEN); ``Listener.set_fastopen_key``
  (TCP_FASTOPEN_KEY, 16 or 32 bytes); ``Listener.fastopen_no_cookie`` (TCP_FASTOPEN_NO_COOKIE).
- client: ``tfo_connect(conn, data, now)`` instead of ``stack.connect(conn, now)`` for
  sendto(MSG_FASTOPEN) and for the first write after connect() with
  TCP_FASTOPEN_CONNECT (``cookie_cached`` tells whether Linux would defer the SYN:
  without a cookie it connects at once, i.e. ``tfo_connect(conn, b"", now)``).
- A TFO child may send in SYN-RECEIVED: after ``conn.send`` on a connection in a SYN
  state, call ``conn.output(now)`` (Connection.send only transmits when synchronized).
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import TYPE_CHECKING

from usertcp.tcp.config import (
    TFO_CLIENT_ENABLE,
    TFO_CLIENT_NO_COOKIE,
    TFO_SERVER_COOKIE_NOT_REQD,
    TFO_SERVER_ENABLE,
)
from usertcp.tcp.connection import State
from usertcp.tcp.cookies import tfo_cookie
from usertcp.wire.segment import FIN, Buffer, Segment
from usertcp.wire.tcp import MAX_OPTIONS_LEN, options_length

if TYPE_CHECKING:
    from usertcp.tcp.connection import Connection
    from usertcp.tcp.host import ConnectionHost, FeatureHooks
    from usertcp.tcp.stack import Listener

__all__ = ["PRELOAD_MAX", "CookieEntry", "FastOpen", "TfoState", "cookie_cached", "install", "tfo_connect"]

# Documented limit of one listener preload (EMSGSIZE beyond). The patch limits it to one
# linear skb; here it is a plain bytes object that the SYN-ACK and the following data
# segments slice, so it may span several segments.
PRELOAD_MAX = 65536


class TfoState:
    """Per-connection fast-open / preload state (``conn.tfo``)."""

    __slots__ = ("client", "cookie_exp", "cookie_out", "data_ok", "preload_len", "queued", "requested",
                 "syn_cookie", "syn_data", "syn_data_dropped", "synack_data")

    def __init__(self, *, client: bool) -> None:
        self.client = client
        # Server side.
        self.preload_len = 0             # bytes of the listener's snapshot at the head of snd_buf
        self.synack_data = 0             # of which the SYN-ACK carries this many
        self.cookie_out: bytes | None = None   # cookie option for the SYN-ACK
        self.cookie_exp = False          # echo the experimental form the client used
        self.queued = False              # TFO child put in the accept queue at SYN time
        # Client side.
        self.syn_cookie: bytes | None = None   # b"" = cookie request, None = no option
        self.data_ok = False             # the SYN may carry data (cookie cached / no-cookie mode)
        self.syn_data = -1               # data bytes in the first SYN (-1: not sent yet)
        self.syn_data_dropped = False    # retransmitted SYNs carry no data
        self.requested = False


@dataclass
class CookieEntry:
    """Linux tcp_fastopen_cache (tcp_metrics): what we know about one server."""

    cookie: bytes | None = None
    exp: bool = False                    # the server answered in the experimental form
    mss: int = 0
    syn_loss: int = 0


class FastOpen:
    """The hooks object: fast open and preload for one stack."""

    def __init__(self, stack: ConnectionHost, inner: FeatureHooks | None = None) -> None:
        self.stack = stack
        self.inner = inner               # a previously installed hooks object
        self.cookie_cache: dict[bytes, CookieEntry] = {}

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
        if not isinstance(st, TfoState):
            return None, False
        if st.client:
            cookie, exp = (None, False) if synack else (st.syn_cookie, st.cookie_exp)
        else:
            cookie, exp = (st.cookie_out, st.cookie_exp) if synack else (None, False)
        if cookie is not None and not _option_fits(conn, synack, cookie, exp):
            return None, False
        return cookie, exp

    # ------------------------------------------------------------------ server

    def on_passive_syn(self, conn: Connection, seg: Segment, now: float) -> None:
        """A SYN reached a listener: snapshot the preload, decide fast open (tcp_try_fastopen)."""
        lst = conn.listener
        if lst is None:
            return
        preload = lst.preload
        child, cookie_out = self._try_fastopen(lst, conn, seg)
        if not preload and not child and cookie_out is None:
            return
        st = TfoState(client=False)
        conn.handshake.attach_fastopen(st)
        st.cookie_out = cookie_out
        st.cookie_exp = seg.fastopen_exp
        if preload:
            # The immutable snapshot: the listener's bytes object, by reference.
            conn.queue_views([preload])
            st.preload_len = len(preload)
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
        if lst.on_accept_ready is not None:
            lst.on_accept_ready(lst)

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
        if not isinstance(st, TfoState):
            return []
        if not st.client:
            if conn.state is State.SYN_RECEIVED and st.synack_data:
                return conn.snd_buf.views(0, st.synack_data)
            return []
        if conn.state is not State.SYN_SENT or not st.data_ok or st.syn_data_dropped:
            return []
        if st.syn_data < 0:
            # tcp_send_syn_data: the data must fit in one segment with the SYN's options.
            # Linux: the MTU's MSS less the whole option space, and the server's cached MSS
            # less this SYN's options (RFC 6691).
            entry = self.cookie_cache.get(conn.remote_ip)
            space = conn.stack.mtu_mss(conn.v6) - MAX_OPTIONS_LEN
            if entry is not None and entry.mss:
                space = min(space, entry.mss - len(conn.tx.syn_options(conn.stack.now, False, None)))
            st.syn_data = max(min(len(conn.snd_buf), space), 0)
        return conn.snd_buf.views(0, st.syn_data) if st.syn_data else []

    def syn_rto(self, conn: Connection, now: float) -> None:
        st = conn.tfo
        if isinstance(st, TfoState) and st.client and st.syn_data > 0:
            st.syn_data_dropped = True    # the retransmitted SYN is the data-less SYN skb

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
        """The 3rd ACK: resend SYN-ACK data it leaves unacknowledged. True if queued at SYN time."""
        st = conn.tfo
        if not isinstance(st, TfoState) or st.client:
            return False
        end = 1 + st.synack_data
        if st.synack_data and 0 < ack_off < end:
            # Patches 5/6: the data in the SYN-ACK was not (all) taken; go back to the ACK
            # point (the head is trimmed by the ACK) and send the rest now, not at the RTO.
            conn.handshake.rewind_syn_data(ack_off)
            conn.mib["UsertcpSynAckDataRetrans"] += 1
        return st.queued

    # ------------------------------------------------------------------ client

    def on_synack(self, conn: Connection, seg: Segment, now: float) -> None:
        """tcp_rcv_fastopen_synack: cache the cookie, resend SYN data not acknowledged."""
        st = conn.tfo
        if not isinstance(st, TfoState) or not st.client:
            return
        entry = self.cookie_cache.setdefault(conn.remote_ip, CookieEntry())
        if seg.mss > 0:
            entry.mss = seg.mss
        if seg.fastopen:
            entry.cookie = bytes(seg.fastopen)
            entry.exp = seg.fastopen_exp
        mib = conn.mib
        if st.syn_data_dropped and seg.fastopen is None:
            entry.syn_loss += 1           # Linux: SYN timed out, no cookie: note a SYN loss
        if st.syn_data > 0:
            if conn.snd_una < 1 + st.syn_data:
                conn.handshake.rewind_syn_data(conn.snd_una)
                mib["TcpExtTCPFastOpenActiveFail"] += 1
            else:
                conn.handshake.note_syn_data_acked()   # tcpi_options TCPI_OPT_SYN_DATA
                mib["TcpExtTCPFastOpenActive"] += 1


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


def cookie_cached(stack: ConnectionHost, remote_ip: bytes) -> bool:
    """Whether a TCP_FASTOPEN_CONNECT socket would defer its SYN to the first write."""
    cfg = stack.config
    if not cfg.fastopen & TFO_CLIENT_ENABLE:
        return False
    if cfg.fastopen & TFO_CLIENT_NO_COOKIE:
        return True
    hooks = stack.hooks
    entry = hooks.cookie_cache.get(remote_ip) if isinstance(hooks, FastOpen) else None
    return entry is not None and entry.cookie is not None


def tfo_connect(conn: Connection, data: Buffer, now: float) -> int:
    """Active open with fast open: queue ``data`` and send the SYN; returns the bytes queued.

    With a cached cookie (or TFO_CLIENT_NO_COOKIE) the SYN carries as much of the data as
    fits; otherwise it carries a cookie request and the data follows the handshake. With
    the client bit off this is a plain connect with data queued.
    """
    stack = conn.stack
    if conn.state is not State.CLOSED:
        raise OSError(errno.EISCONN, "already connected")
    hooks = install(stack)
    n = min(len(data), conn.send_space)
    if n:
        conn.queue_views([bytes(memoryview(data)[:n])])
    cfg = stack.config
    if cfg.fastopen & TFO_CLIENT_ENABLE:
        st = TfoState(client=True)
        entry = hooks.cookie_cache.get(conn.remote_ip)
        if cfg.fastopen & TFO_CLIENT_NO_COOKIE:
            st.data_ok = True             # no option at all (tcp_fastopen_cookie_check)
        elif entry is not None and entry.cookie is not None:
            st.syn_cookie = entry.cookie
            st.cookie_exp = entry.exp
            st.data_ok = True
        else:
            st.syn_cookie = b""
            st.requested = True
        conn.handshake.attach_fastopen(st)
    stack.connect(conn, now)
    return n
