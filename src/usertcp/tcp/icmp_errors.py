"""TCP's reaction to ICMP errors (RFC 9293 §3.9.1 / RFC 1122 §4.2.3.9, RFC 5927), as Linux's
tcp_v4_err / tcp_v6_err do it, plus echo replies.

- The quoted segment names the connection; its sequence number must lie in
  [SND.UNA, SND.NXT] (RFC 5927 §4.1, Linux ``between(seq, snd_una, snd_nxt)``), otherwise
  the message is ignored and counted in TcpExtOutOfWindowIcmps.
- A request socket (an embryonic passive child) is dropped only by errors Linux treats as
  fatal for it (tcp_req_err), and only when the quote carries its ISN.
- In SYN-SENT and SYN-RECEIVED (simultaneous open, a fast-open child not yet accepted) an
  error aborts the connection (hard error, Linux tcp_done); in synchronized states it is a
  soft error (reported instead of ETIMEDOUT if the connection later times out), or a hard
  one with IP_RECVERR / IPV6_RECVERR.
- Fragmentation needed / Packet Too Big lower the path MTU (RFC 1191, RFC 8201) and the
  segments now too large are retransmitted at once (Linux tcp_simple_retransmit).
- Net or host unreachable for the segment at SND.UNA undoes one RTO backoff (RFC 6069).
- Source quench is ignored (RFC 6633).
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

from usertcp.tcp.fastopen_client import ClientTfo
from usertcp.wire import icmp
from usertcp.wire.icmp import IcmpMessage

from .connection import State
from .output import IP_PMTUDISC_DO, IP_PMTUDISC_PROBE, IP_PMTUDISC_WANT

if TYPE_CHECKING:
    from .connection import Connection
    from .stack import Stack

# Linux icmp_err_convert[]: ICMPv4 unreachable code -> (errno, fatal); TCP uses the errno only.
UNREACH4: tuple[tuple[int, bool], ...] = (
    (errno.ENETUNREACH, False),    # 0 net unreachable
    (errno.EHOSTUNREACH, False),   # 1 host unreachable
    (errno.ENOPROTOOPT, True),     # 2 protocol unreachable
    (errno.ECONNREFUSED, True),    # 3 port unreachable
    (errno.EMSGSIZE, False),       # 4 fragmentation needed
    (errno.EOPNOTSUPP, False),     # 5 source route failed
    (errno.ENETUNREACH, True),     # 6 net unknown
    (errno.EHOSTDOWN, True),       # 7 host unknown
    (errno.ENONET, True),          # 8 source host isolated
    (errno.ENETUNREACH, True),     # 9 net administratively prohibited
    (errno.EHOSTUNREACH, True),    # 10 host administratively prohibited
    (errno.ENETUNREACH, False),    # 11 net unreachable for TOS
    (errno.EHOSTUNREACH, False),   # 12 host unreachable for TOS
    (errno.EHOSTUNREACH, True),    # 13 communication administratively prohibited
    (errno.EHOSTUNREACH, True),    # 14 host precedence violation
    (errno.EHOSTUNREACH, True),    # 15 precedence cutoff
)
# Linux icmpv6_err_convert tab_unreach[]: ICMPv6 unreachable code -> (errno, fatal: drops a
# request socket, tcp_v6_err -> tcp_req_err).
UNREACH6: tuple[tuple[int, bool], ...] = (
    (errno.ENETUNREACH, False),    # 0 no route to destination
    (errno.EACCES, True),          # 1 administratively prohibited
    (errno.EHOSTUNREACH, False),   # 2 beyond scope of source address
    (errno.EHOSTUNREACH, False),   # 3 address unreachable
    (errno.ECONNREFUSED, True),    # 4 port unreachable
    (errno.EACCES, True),          # 5 source address failed ingress/egress policy
    (errno.EACCES, True),          # 6 reject route to destination
)

MIN_PMTU4 = 552           # Linux ip_rt_min_pmtu (512 + 20 + 20): smaller reports are raised
MIN_MTU6 = icmp.MIN_MTU6   # RFC 8200 §5: IPv6 never goes below this

_COUNTERS4 = {icmp.ICMP_DEST_UNREACH: "IcmpInDestUnreachs", icmp.ICMP_TIME_EXCEEDED: "IcmpInTimeExcds",
              icmp.ICMP_PARAMETERPROB: "IcmpInParmProbs", icmp.ICMP_SOURCE_QUENCH: "IcmpInSrcQuenchs",
              icmp.ICMP_REDIRECT: "IcmpInRedirects", icmp.ICMP_ECHO: "IcmpInEchos",
              icmp.ICMP_ECHOREPLY: "IcmpInEchoReps"}
_COUNTERS6 = {icmp.ICMPV6_DEST_UNREACH: "Icmp6InDestUnreachs", icmp.ICMPV6_PKT_TOOBIG: "Icmp6InPktTooBigs",
              icmp.ICMPV6_TIME_EXCEED: "Icmp6InTimeExcds", icmp.ICMPV6_PARAMPROB: "Icmp6InParmProblems",
              icmp.ICMPV6_ECHO_REQUEST: "Icmp6InEchos", icmp.ICMPV6_ECHO_REPLY: "Icmp6InEchoReplies"}


def icmp_arrives(stack: Stack, msg: IcmpMessage, now: float) -> None:
    """One validated ICMP/ICMPv6 message addressed to this host."""
    mib = stack.counters
    v6 = msg.ip_version == 6
    mib["Icmp6InMsgs" if v6 else "IcmpInMsgs"] += 1
    name = (_COUNTERS6 if v6 else _COUNTERS4).get(msg.type)
    if name is not None:
        mib[name] += 1
    if msg.type == (icmp.ICMPV6_ECHO_REQUEST if v6 else icmp.ICMP_ECHO):
        stack.output(icmp.build_echo_reply(msg))
        mib["Icmp6OutMsgs" if v6 else "IcmpOutMsgs"] += 1
        mib["Icmp6OutEchoReplies" if v6 else "IcmpOutEchoReps"] += 1
        return
    if not msg.is_error or msg.quoted_protocol != 6:
        return            # not about TCP (or informational): nothing for us to do
    err, fatal, pmtu = _classify(msg)
    if err == 0 and pmtu == 0:
        return            # source quench (RFC 6633), redirects, unknown codes: ignored
    key = (msg.quoted_src, msg.quoted_sport, msg.quoted_dst, msg.quoted_dport)
    conn = stack.connections.get(key)
    if conn is None or conn.state is State.CLOSED:
        # Linux: no socket for the quote counts an ICMP input error.
        mib["Icmp6InErrors" if v6 else "IcmpInErrors"] += 1
        return
    if conn.state is State.TIME_WAIT:
        return
    seq_off = conn.snd_off(msg.quoted_seq)
    fastopen = _fastopen_pending(conn)
    if conn.state is State.SYN_RECEIVED and conn.passive and not fastopen:
        # Linux tcp_req_err: a request socket only checks the quote against its ISN.
        if seq_off != 0:
            mib["TcpExtOutOfWindowIcmps"] += 1
        elif fatal:
            stack.forget_embryonic(conn)
            mib["TcpExtListenDrops"] += 1
            conn.close_now(now)          # no reset: the peer is unreachable anyway
        return
    # Linux: a fast-open child's window starts at its ISN (the SYN-ACK may be unacknowledged).
    low = 0 if fastopen else conn.snd_una
    if not low <= seq_off <= conn.snd_nxt:
        mib["TcpExtOutOfWindowIcmps"] += 1
        return
    if pmtu:
        mtu_reduced(conn, pmtu, now)
        return
    if _rto_revert_allowed(msg) and seq_off == conn.snd_una and not fastopen:
        rto_revert(conn, now)
    if conn.state is State.SYN_SENT or (conn.state is State.SYN_RECEIVED and not conn.accepted):
        # Hard error during the handshake (Linux tcp_v4_err: sk_err, then tcp_done); a
        # fast-open child stays in the accept queue and reports it there.
        conn.fail(err, now)
        return
    conn.icmp_error(err)


def _classify(msg: IcmpMessage) -> tuple[int, bool, int]:
    """(errno, fatal for a request socket, reported MTU or 0) as Linux maps the message."""
    t, code = msg.type, msg.code
    if msg.ip_version == 4:
        # tcp_v4_err -> tcp_req_err(abort): net/host unreachable, parameter problem and time
        # exceeded drop a request socket; the other codes leave it to its SYN-ACK timer.
        if t == icmp.ICMP_DEST_UNREACH:
            if code == icmp.ICMP_FRAG_NEEDED:
                return 0, False, max(msg.info & 0xFFFF, MIN_PMTU4)
            if code >= len(UNREACH4):
                return 0, False, 0
            return UNREACH4[code][0], code in (icmp.ICMP_NET_UNREACH, icmp.ICMP_HOST_UNREACH), 0
        if t == icmp.ICMP_PARAMETERPROB:
            return errno.EPROTO, True, 0
        if t == icmp.ICMP_TIME_EXCEEDED:
            return errno.EHOSTUNREACH, True, 0
        return 0, False, 0
    if t == icmp.ICMPV6_PKT_TOOBIG:
        # RFC 8201 §4: a report below the IPv6 minimum MTU is ignored (Linux tcp_v6_err).
        return (0, False, msg.info) if msg.info >= MIN_MTU6 else (0, False, 0)
    if t == icmp.ICMPV6_DEST_UNREACH:
        if code < len(UNREACH6):
            err, fatal = UNREACH6[code]
            return err, fatal, 0
        return errno.EPROTO, True, 0
    if t == icmp.ICMPV6_PARAMPROB:
        return errno.EPROTO, True, 0
    if t == icmp.ICMPV6_TIME_EXCEED:
        return errno.EHOSTUNREACH, False, 0
    return 0, False, 0


def _rto_revert_allowed(msg: IcmpMessage) -> bool:
    """RFC 6069 §4: only "destination unreachable, net or host" (v6: no route) may undo."""
    if msg.ip_version == 4:
        return msg.type == icmp.ICMP_DEST_UNREACH and msg.code in (icmp.ICMP_NET_UNREACH,
                                                                   icmp.ICMP_HOST_UNREACH)
    return msg.type == icmp.ICMPV6_DEST_UNREACH and msg.code == icmp.ICMPV6_NOROUTE


def rto_revert(conn: Connection, now: float) -> None:
    """RFC 6069 §4 (Linux tcp_ld_RTO_revert): the RTO was lengthened by backoff while the path
    was down, and a router says so: undo one doubling and re-arm from the head's send time."""
    if conn.timers.rto_revert(now):
        conn.mib["UsertcpRtoReverted"] += 1
        conn.reschedule()


def mtu_reduced(conn: Connection, mtu: int, now: float) -> None:
    """RFC 1191 §6.3 / RFC 8201 §5.2 (Linux tcp_v4_mtu_reduced): a smaller path MTU lowers the
    MSS, and what was sent larger is lost: retransmit it now, without a congestion response."""
    if conn.state in (State.CLOSED, State.LISTEN):
        return
    if conn.pmtudisc not in (IP_PMTUDISC_WANT, IP_PMTUDISC_DO, IP_PMTUDISC_PROBE):
        return            # IP_PMTUDISC_DONT / INTERFACE / OMIT: the socket ignores reports
    old_mss = conn.mss
    if not conn.pmtu_reduced(mtu):
        return
    conn.mib["UsertcpPmtuReductions"] += 1
    st = conn.tfo
    if conn.state is State.SYN_SENT and isinstance(st, ClientTfo) and st.syn_data:
        # tcp_simple_retransmit (commit c31b70c9968f): the Fast Open SYN-data was too big, so
        # it is lost: resend the SYN now, plain (no data, no cookie), with the smaller MSS.
        conn.timers.count_syn_retrans()
        conn.stack.syn_rto(conn, now)
        conn.tx.send_syn(now)
        conn.reschedule()
        return
    if conn.mss < old_mss and conn.recovery.mark_oversized_lost():
        conn.output(now)                  # the retransmission arms the RTO if it is not running
        conn.reschedule()


def _fastopen_pending(conn: Connection) -> bool:
    """A fast-open child whose SYN-ACK is not yet acknowledged (Linux tp->fastopen_rsk)."""
    lst = conn.listener
    return conn.state is State.SYN_RECEIVED and lst is not None and conn in lst.tfo_children


__all__ = ["icmp_arrives", "mtu_reduced", "rto_revert"]
