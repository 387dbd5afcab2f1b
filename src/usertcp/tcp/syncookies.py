"""SYN cookies (RFC 4987 §3.6), as Linux's net/ipv4/syncookies.c builds and checks them.

When a listener's SYN queue is full (``tcp_syncookies=1``) or always (``=2``), a SYN gets a
stateless SYN-ACK whose ISN encodes what the handshake must remember; nothing is stored.
The 3rd ACK (ACK number = cookie + 1) is checked and the connection is rebuilt from it.

The cookie (secure_tcp_syn_cookie / check_tcp_syn_cookie)::

    ISN = H(saddr, daddr, sport, dport, 0, key0) + client_ISN + (count << 24)
          + ((H(saddr, daddr, sport, dport, count, key1) + mss_index) & 0xFFFFFF)

with ``count`` a minute counter (tcp_cookie_time) and a cookie valid for
MAX_SYNCOOKIE_AGE = 2 counts. ``mss_index`` picks the largest entry of a table of common
MSS values not above the peer's (msstab / msstab6). With timestamps the SYN-ACK's TSval
carries the options in its low 6 bits (cookie_init_timestamp; decoded from the echoed
TSecr by cookie_timestamp_decode): bits 0-3 the peer's window scale (0xF: none), bit 4
SACK-permitted, bit 5 ECN (the SYN set ECN up: the cookie SYN-ACK carries ECE). Without
timestamps the cookie SYN-ACK offers neither window scaling, SACK nor ECN (tcp_conn_request
clears them).
H is SipHash-2-4 (Linux: siphash_4u32) under two keys derived from the stack's ISN secret.

Linux also only accepts a cookie ACK if the listener overflowed within the last
TCP_SYNCOOKIE_VALID (2 minutes, tcp_synq_no_recent_overflow); any other ACK to a listener
is answered with a reset as before.

Fast open and preload (design decision):
- Linux never does TFO for a cookie SYN (tcp_conn_request skips tcp_try_fastopen when
  want_cookie): no TFO option, the SYN's data is not acknowledged, and the client sends it
  again after the handshake (our client does that, fastopen.FastOpen.on_synack). A cookie
  SYN-ACK never carries data and is never retransmitted (it is stateless).
- Deviation, so that TFO keeps working under a flood: a SYN carrying a *valid* TFO cookie
  proves its source address (RFC 7413 §4.1.2), so it bypasses the full SYN queue and is
  handled by the normal path, bounded by the TFO queue (fastopen_max_qlen, RFC 7413 §5.1:
  the limit on pending TFO connections). Cookie-less TFO modes (TFO_SERVER_COOKIE_NOT_REQD,
  TCP_FASTOPEN_NO_COOKIE) do not bypass: anyone can send such SYNs.
- A cookie-validated connection gets the listener's preload by the rule of every request
  without Fast Open (fastopen.FastOpen.on_established_passive): the snapshot is taken when
  the child is created at the 3rd ACK and sent right after the ACK is processed.
"""

from __future__ import annotations

import enum
import struct
from functools import lru_cache
from typing import TYPE_CHECKING

from usertcp.tcp.config import TFO_SERVER_ENABLE
from usertcp.tcp.connection import Connection, State
from usertcp.tcp.cookies import tfo_cookie
from usertcp.tcp.handshake import ecn_syn_acceptable
from usertcp.tcp.siphash import siphash24
from usertcp.tcp.window import TS_OPTION_SPACE, initial_window
from usertcp.wire.packet import build_packet
from usertcp.wire.segment import ACK, ECE, FIN, SYN, Segment
from usertcp.wire.tcp import encode_options

if TYPE_CHECKING:
    from usertcp.tcp.stack import Listener, Stack

__all__ = [
    "COOKIEBITS",
    "MAX_SYNCOOKIE_AGE",
    "MSS_TABLE_V4",
    "MSS_TABLE_V6",
    "SynVerdict",
    "check_cookie",
    "cookie_ack",
    "cookie_ts_decode",
    "cookie_ts_ecn",
    "cookie_ts_encode",
    "make_cookie",
    "on_syn_overflow",
    "syn_queue_limit",
]

COOKIEBITS = 24                                  # upper 8 bits: the minute counter
COOKIEMASK = (1 << COOKIEBITS) - 1
MAX_SYNCOOKIE_AGE = 2                            # counts a cookie stays valid
SYNCOOKIE_PERIOD = 60.0                          # tcp_cookie_time: jiffies / (60 * HZ)
SYNCOOKIE_VALID = 2 * 60.0                       # TCP_SYNCOOKIE_VALID: overflow "recent" window
MSS_TABLE_V4 = (536, 1300, 1440, 1460)           # msstab
MSS_TABLE_V6 = (1280 - 60, 1480 - 60, 1500 - 60, 9000 - 60)   # msstab6
TSBITS = 6
TSMASK = (1 << TSBITS) - 1
TS_OPT_WSCALE_MASK = 0xF
TS_OPT_SACK = 1 << 4
TS_OPT_ECN = 1 << 5
_M32 = 0xFFFFFFFF
_PORTS = struct.Struct("!HHI")



class SynVerdict(enum.Enum):
    """What ``_listen_syn`` does with a SYN that found the SYN queue full."""

    HANDLED = 1     # a cookie SYN-ACK went out
    ACCEPT = 2      # create the child as usual (a valid TFO cookie; see the module docstring)
    DROP = 3        # count it and drop it (tcp_syncookies=0)


@lru_cache(maxsize=16)
def _keys(secret: bytes) -> tuple[bytes, bytes]:
    """syncookie_secret[2]: two SipHash keys derived from the stack's per-boot ISN secret."""
    return (siphash24(secret, b"syncookie-0").to_bytes(8, "little")
            + siphash24(secret, b"syncookie-1").to_bytes(8, "little"),
            siphash24(secret, b"syncookie-2").to_bytes(8, "little")
            + siphash24(secret, b"syncookie-3").to_bytes(8, "little"))


def _hash(key: bytes, saddr: bytes, daddr: bytes, sport: int, dport: int, count: int) -> int:
    """cookie_hash(): SipHash of the 4-tuple and the counter, 32 bits."""
    return siphash24(key, saddr + daddr + _PORTS.pack(sport, dport, count & _M32)) & _M32


def cookie_time(now: float) -> int:
    """tcp_cookie_time(): the minute counter."""
    return int(now // SYNCOOKIE_PERIOD) & _M32


def mss_index(mss: int, v6: bool) -> int:
    """The largest table entry not above the peer's MSS (index 0 if none is)."""
    table = MSS_TABLE_V6 if v6 else MSS_TABLE_V4
    for i in range(len(table) - 1, 0, -1):
        if mss >= table[i]:
            return i
    return 0


def make_cookie(secret: bytes, saddr: bytes, daddr: bytes, sport: int, dport: int, sseq: int,
                data: int, now: float) -> int:
    """secure_tcp_syn_cookie(): the ISN for a SYN from saddr:sport with ISN ``sseq``."""
    k0, k1 = _keys(secret)
    count = cookie_time(now)
    return (_hash(k0, saddr, daddr, sport, dport, 0) + sseq + (count << COOKIEBITS)
            + ((_hash(k1, saddr, daddr, sport, dport, count) + data) & COOKIEMASK)) & _M32


def check_cookie(secret: bytes, cookie: int, saddr: bytes, daddr: bytes, sport: int, dport: int,
                 sseq: int, now: float) -> int:
    """check_tcp_syn_cookie(): the encoded data (< 2**24), or -1 if the cookie is too old."""
    k0, k1 = _keys(secret)
    count = cookie_time(now)
    cookie = (cookie - _hash(k0, saddr, daddr, sport, dport, 0) - sseq) & _M32
    diff = (count - (cookie >> COOKIEBITS)) & (_M32 >> COOKIEBITS)
    if diff >= MAX_SYNCOOKIE_AGE:
        return -1
    return (cookie - _hash(k1, saddr, daddr, sport, dport, count - diff)) & COOKIEMASK


def cookie_ts_encode(now_ms: int, wscale: int, sack: bool, ecn: bool = False) -> int:
    """cookie_init_timestamp(): a TSval <= now whose low 6 bits hold the options."""
    options = wscale if wscale >= 0 else TS_OPT_WSCALE_MASK
    if sack:
        options |= TS_OPT_SACK
    if ecn:
        options |= TS_OPT_ECN
    ts = ((now_ms & _M32) >> TSBITS) << TSBITS | options
    if ts > now_ms & _M32:
        ts -= 1 << TSBITS
    return ts & _M32


def cookie_ts_decode(options: int) -> tuple[int, bool]:
    """cookie_timestamp_decode(): (peer window scale or -1, SACK-permitted)."""
    wscale = options & TS_OPT_WSCALE_MASK
    return (-1 if wscale == TS_OPT_WSCALE_MASK else wscale), bool(options & TS_OPT_SACK)


def cookie_ts_ecn(options: int) -> bool:
    """cookie_ecn_ok(): the SYN had set ECN up (bit 5 of the echoed TSval's options)."""
    return bool(options & TS_OPT_ECN)


def syn_queue_limit(stack: Stack, listener: Listener) -> int:
    """The SYN (request) queue bound ``_listen_syn`` enforces for ``listener``."""
    return min(stack.config.max_syn_backlog, max(listener.backlog, 128) * 2)


def _ts_off(stack: Stack, local: bytes, remote: bytes) -> int:
    """Stack.ts_offset without a connection (secure_tcp_ts_off)."""
    cfg = stack.config
    if not cfg.random_ts_offset:
        return 0
    return siphash24(cfg.ts_secret, local + remote) & _M32


def _valid_tfo_syn(listener: Listener, seg: Segment) -> bool:
    """A TFO SYN (data or FIN) with a valid server cookie and room in the TFO queue."""
    foc = seg.fastopen
    if not foc or not (len(seg.payload) or seg.flags & FIN):
        return False
    if not listener.stack.config.fastopen & TFO_SERVER_ENABLE or listener.fastopen_max_qlen == 0:
        return False
    if listener.fastopen_pending >= listener.fastopen_max_qlen:
        return False
    primary, backup = listener.fastopen_keys()
    if foc == tfo_cookie(primary, seg.src, seg.dst):
        return True
    return backup is not None and foc == tfo_cookie(backup, seg.src, seg.dst)


def on_syn_overflow(stack: Stack, listener: Listener, seg: Segment, now: float) -> SynVerdict:
    """A SYN found the SYN queue full (or tcp_syncookies=2): cookie, TFO bypass or drop.

    Linux tcp_conn_request -> tcp_syn_flood_action (TCPReqQFullDoCookies / TCPReqQFullDrop),
    cookie_v4_init_sequence (SyncookiesSent, tcp_synq_overflow), tcp_make_synack.
    """
    cfg = stack.config
    mib = stack.counters
    if _valid_tfo_syn(listener, seg):
        mib["UsertcpSynCookieTfoBypass"] += 1
        return SynVerdict.ACCEPT
    if not cfg.syncookies:
        mib["TcpExtTCPReqQFullDrop"] += 1
        return SynVerdict.DROP
    mib["TcpExtTCPReqQFullDoCookies"] += 1
    v6 = len(seg.src) == 16
    peer_mss = seg.mss if seg.mss > 0 else (1220 if v6 else 536)
    idx = mss_index(peer_mss, v6)
    local, remote = seg.dst, seg.src
    isn = make_cookie(cfg.isn_secret, remote, local, seg.sport, seg.dport, seg.seq, idx, now)
    # The SYN-ACK's options, as Connection.tx.syn_options(synack=True) would choose them.
    opts = listener.options
    ts_ok = cfg.timestamps and seg.ts_val >= 0
    ts = None
    ws_ok = sack_ok = ecn_ok = False
    if ts_ok:
        ws_ok = cfg.window_scaling and seg.wscale >= 0
        sack_ok = cfg.sack and seg.sack_permitted
        ecn_ok = ecn_syn_acceptable(seg, cfg)    # tcp_ecn_create_request; only with TS
        raw = cookie_ts_encode(int(now * 1000), min(seg.wscale, 14) if ws_ok else -1, sack_ok, ecn_ok)
        ts = ((raw + _ts_off(stack, local, remote)) & _M32, seg.ts_val)
    mss = stack.mtu_mss(v6)
    user_mss = int(opts.get("user_mss", 0))
    if user_mss:
        mss = min(mss, user_mss)
    md5_key = listener.md5_keys.lookup(remote) if listener.md5_keys is not None else None
    # The window and scale of the SYN-ACK every request gets (tcp_openreq_init_rwin), from
    # the listener's buffer: the same rule as a connection's first window (tcp/window.py).
    window, _, rcv_wscale = initial_window(int(opts.get("rcvbuf_limit", cfg.rmem[1])),
                                           bool(opts.get("rcvbuf_locked", False)), 0,
                                           mss - (TS_OPTION_SPACE if ts_ok else 0),
                                           ws_ok, cfg.rmem[2], cfg.rmem_max)
    options = encode_options(mss=mss, ts=ts, sack_permitted=sack_ok, wscale=rcv_wscale if ws_ok else -1,
                             md5=md5_key is not None)
    pkt = build_packet(src=local, dst=remote, sport=seg.dport, dport=seg.sport, seq=isn,
                       ack=(seg.seq + 1) & _M32, flags=SYN | ACK | (ECE if ecn_ok else 0),
                       window=window, options=options,
                       ttl=cfg.ttl, md5_key=md5_key, csum_partial=stack.tx_csum_offload)
    listener.note_synq_overflow(now)
    mib["TcpExtSyncookiesSent"] += 1
    mib["TcpOutSegs"] += 1
    stack.output(pkt)
    return SynVerdict.HANDLED


def cookie_ack(stack: Stack, listener: Listener, seg: Segment, now: float) -> bool:
    """An ACK reached a listener: True if it was a valid cookie (connection made) or dropped.

    False sends the caller on to the reset (RFC 9293 §3.10.7.2). Linux cookie_v4_check:
    only with tcp_syncookies on, a plain ACK (no SYN/RST) and a recent overflow; a bad
    cookie counts SyncookiesFailed and is reset, a full accept queue drops the ACK.
    """
    cfg = stack.config
    if not cfg.syncookies or seg.flags & SYN:
        return False
    last = listener.synq_overflow_time
    if last is None or now - last > SYNCOOKIE_VALID:
        return False
    mib = stack.counters
    local, remote = seg.dst, seg.src
    v6 = len(remote) == 16
    sseq = (seg.seq - 1) & _M32
    cookie = (seg.ack - 1) & _M32
    idx = check_cookie(cfg.isn_secret, cookie, remote, local, seg.sport, seg.dport, sseq, now)
    table = MSS_TABLE_V6 if v6 else MSS_TABLE_V4
    if not 0 <= idx < len(table):
        mib["TcpExtSyncookiesFailed"] += 1
        return False
    ts_ok = seg.ts_val >= 0
    wscale, sack, ecn = -1, False, False
    ts_off = 0
    if ts_ok:
        if not cfg.timestamps:
            mib["TcpExtSyncookiesFailed"] += 1
            return False
        ts_off = _ts_off(stack, local, remote)
        options = (seg.ts_ecr - ts_off) & TSMASK
        wscale, sack = cookie_ts_decode(options)
        ecn = cookie_ts_ecn(options) and cfg.ecn != 0    # cookie_ecn_ok
        if (sack and not cfg.sack) or (wscale >= 0 and not cfg.window_scaling):
            mib["TcpExtSyncookiesFailed"] += 1
            return False
    mib["TcpExtSyncookiesRecv"] += 1
    if len(listener.accept_queue) >= listener.backlog:
        # tcp_get_cookie_sock -> syn_recv_sock: sk_acceptq_is_full -> drop (ListenOverflows).
        mib["TcpExtListenOverflows"] += 1
        mib["TcpExtListenDrops"] += 1
        return True
    conn = _rebuild(stack, listener, seg, table[idx], wscale, sack, ts_off, ecn, now)
    # The ACK itself now takes the normal path: SYN-RECEIVED -> ESTABLISHED, accept queue,
    # its data, and the preload going out.
    stack.segment_arrives(seg, now)
    if conn.state is State.SYN_RECEIVED:
        conn.close_now(now)        # not acceptable after all: leave nothing behind
    return True


def _rebuild(stack: Stack, listener: Listener, seg: Segment, peer_mss: int, wscale: int, sack: bool,
             ts_off: int, ecn: bool, now: float) -> Connection:
    """The child as Handshake.start_passive_open would have left it after its SYN-ACK.

    Linux cookie_v4_check -> cookie_tcp_reqsk_alloc / tcp_get_cookie_sock; the peer's SYN
    window is unknown, the 3rd ACK's window replaces it (Handshake.establish_passive).
    """
    conn = stack.new_child(listener, seg)
    conn.handshake.open_from_cookie(listener, seg, peer_mss, wscale, sack, ts_off, ecn, now)
    stack.connections[conn.key] = conn
    return conn
