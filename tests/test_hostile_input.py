"""Hostile input a listener or a stack must not answer or die of (issue 20 points 4-7).

- martian sources (ip_route_input_slow, ip6_rcv_core): no SYN-ACK, reset or echo reply to
  a broadcast, multicast, unspecified, loopback or own address, and each drop counted;
- SYN+FIN and SYN-less segments to a listener are discarded (tcp_rcv_state_process in
  LISTEN, SKB_DROP_REASON_TCP_FLAGS);
- the challenge-ACK budget is no side channel (CVE-2016-5696): no shared limit by default
  (Linux >= 6.0), a random per-second budget where one is set;
- an application callback that raises resets its own connection, never the stack.
"""

from __future__ import annotations

import errno
import ipaddress

import pytest
from scapy.layers.inet import ICMP, IP
from scapy.layers.inet6 import ICMPv6EchoRequest, IPv6

from peer import LOCAL, REMOTE, ScriptedPeer
from usertcp.tcp.challenge import ChallengeAckBudget
from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import Connection, State
from usertcp.tcp.stack import Stack
from usertcp.wire.packet import build_packet
from usertcp.wire.segment import ACK, FIN, PSH, RST, SYN
from usertcp.wire.tcp import encode_options

LOCAL6 = "fd00::1"
MARTIANS4 = ["255.255.255.255", "224.0.0.1", "239.1.2.3", "0.0.0.0", "0.1.2.3", "127.0.0.1", LOCAL]
MARTIANS6 = ["ff02::1", "::", "::1", LOCAL6]


def packed(addr: str) -> bytes:
    return ipaddress.ip_address(addr).packed


def syn_from(src: str, dst: str, flags: int = SYN, payload: bytes = b"") -> bytes:
    return build_packet(src=packed(src), dst=packed(dst), sport=40000, dport=8080, seq=1000, ack=0,
                        flags=flags, window=65535, options=encode_options(mss=1460),
                        payload=[payload] if payload else []).tobytes()


def echo_from(src: str, dst: str) -> bytes:
    if ":" in src:
        return bytes(IPv6(src=src, dst=dst) / ICMPv6EchoRequest(id=1, seq=1, data=b"x"))
    return bytes(IP(src=src, dst=dst) / ICMP(type=8, id=1, seq=1) / b"x")


def listening_stack() -> Stack:
    st = Stack([LOCAL, LOCAL6])
    st.listen(8080)
    return st


@pytest.mark.parametrize("src", MARTIANS4 + MARTIANS6)
def test_martian_sources_get_no_answer_and_are_counted(src: str) -> None:
    st = listening_stack()
    dst = LOCAL6 if ":" in src else LOCAL
    st.receive(syn_from(src, dst), 0.0)                     # would get a SYN-ACK
    st.receive(syn_from(src, dst, ACK), 0.0)                # would get a RST
    st.receive(syn_from(src, dst, SYN | ACK), 0.0)          # would get a RST too
    st.receive(echo_from(src, dst), 0.0)                    # would get an echo reply
    assert st.datagrams_to_send() == []
    assert st.counters["UsertcpInMartianSrc"] == 4 and not st.connections
    if ":" in src:
        assert st.counters["Ip6InHdrErrors"] == 4


def test_ordinary_and_loopback_sources_are_still_answered() -> None:
    st = listening_stack()
    st.receive(syn_from(REMOTE, LOCAL), 0.0)
    st.receive(syn_from("fd00::2", LOCAL6), 0.0)
    st.receive(echo_from(REMOTE, LOCAL), 0.0)
    assert len(st.datagrams_to_send()) == 3
    # A stack on the loopback address talks to itself (Linux: the loopback device).
    lo = Stack(["127.0.0.1"])
    lo.listen(8080)
    lo.receive(syn_from("127.0.0.1", "127.0.0.1"), 0.0)
    assert len(lo.datagrams_to_send()) == 1
    assert st.counters["UsertcpInMartianSrc"] == lo.counters["UsertcpInMartianSrc"] == 0


@pytest.mark.parametrize(("flags", "payload"), [(SYN | FIN, b""), (SYN | FIN, b"data"),
                                                (SYN | FIN | PSH, b"data"), (FIN, b""), (0, b""),
                                                (PSH, b"data")])
def test_listener_discards_syn_fin_and_synless_segments(flags: int, payload: bytes) -> None:
    st = listening_stack()
    st.receive(syn_from(REMOTE, LOCAL, flags, payload), 0.0)
    assert st.datagrams_to_send() == [] and not st.connections
    assert st.counters["SKB_DROP_REASON_TCP_FLAGS"] == 1
    st.receive(syn_from(REMOTE, LOCAL, RST), 0.0)
    assert st.counters["SKB_DROP_REASON_TCP_RESET"] == 1
    st.receive(syn_from(REMOTE, LOCAL), 0.0)                # a plain SYN still opens
    assert len(st.datagrams_to_send()) == 1


def test_syn_with_rst_is_judged_as_linux_does() -> None:
    """SYN and RST together is no header error (before: TcpInErrs at the parser): Linux
    takes the RST first. A listener discards it (SKB_DROP_REASON_TCP_RESET), a closed port
    does not answer it, an established connection is reset by it at RCV.NXT
    (tcp_validate_incoming, step 2), and a request in SYN-RECEIVED does not take it for a
    retransmitted SYN (tcp_check_req: "flg == TCP_FLAG_SYN")."""
    st = listening_stack()
    st.receive(syn_from(REMOTE, LOCAL, SYN | RST), 0.0)
    st.receive(syn_from(REMOTE, LOCAL, SYN | FIN | RST), 0.0)
    assert st.datagrams_to_send() == [] and not st.connections
    assert st.counters["SKB_DROP_REASON_TCP_RESET"] == 2 and st.counters["TcpInErrs"] == 0
    closed = Stack([LOCAL])
    closed.receive(syn_from(REMOTE, LOCAL, SYN | RST), 0.0)
    assert closed.datagrams_to_send() == []

    p = ScriptedPeer()
    conn = p.passive_open()
    p.drain()
    p.send("SR", 1, 1)                                 # at RCV.NXT: a reset
    assert conn.state is State.CLOSED and conn.error == errno.ECONNRESET
    p.expect_nothing()

    q = ScriptedPeer()
    q.listen()
    q.send("S", 0)
    q.expect("S.", 0, 1)
    q.send("SR", 0)                                    # not a retransmitted SYN: no SYN-ACK
    assert not [s for s in q.drain() if s.seg.flags & SYN]


# ---------------------------------------------------------------- challenge ACKs


def established(p: ScriptedPeer) -> Connection:
    return p.passive_open()


def test_no_shared_challenge_ack_limit_by_default() -> None:
    """CVE-2016-5696: with a shared per-second budget an attacker spends it on its own
    connection and learns from a missing challenge ACK what another connection did. Linux
    >= 6.0 has none by default; only the per-socket tcp_invalid_ratelimit remains."""
    cfg = StackConfig(invalid_ratelimit=0.0)
    attacker = ScriptedPeer(cfg, peer_port=40001)
    established(attacker)
    victim = ScriptedPeer(cfg, peer_port=40002)
    victim.stack = attacker.stack                   # two connections on one stack
    victim.listener = attacker.listener
    established(victim)
    attacker.drain()
    for _ in range(1500):                           # in-window RSTs: each gets a challenge ACK
        attacker.send("R", 5, None)
    assert len(attacker.drain()) == 1500
    victim.send("R", 5, None)
    assert len(victim.drain()) == 1, "the victim's challenge ACK must not depend on the attacker's"
    assert attacker.stack.counters["UsertcpChallengeACKBudgetSpent"] == 0


def test_a_configured_challenge_ack_limit_is_randomised_per_second() -> None:
    """Where tcp_challenge_ack_limit is set, each second's budget is drawn from
    [limit/2, limit*3/2) (Linux tcp_send_challenge_ack), so its exact size leaks nothing."""
    budget = ChallengeAckBudget(b"k" * 16)
    sizes = []
    for second in range(200):
        n = 0
        while budget.allow(second + 0.5, 10):
            n += 1
        sizes.append(n)
    assert min(sizes) >= 5 and max(sizes) <= 14 and len(set(sizes)) >= 5
    assert budget.allow(999.0, (1 << 31) - 1)        # INT_MAX: no shared limit
    assert StackConfig().challenge_ack_limit == (1 << 31) - 1
    assert not ChallengeAckBudget(b"").allow(0.0, 0)


# ---------------------------------------------------------------- application callbacks


def test_a_raising_callback_resets_only_its_connection() -> None:
    p = ScriptedPeer()
    bad = p.passive_open()
    other = ScriptedPeer(peer_port=40009)
    other.stack = p.stack
    other.listener = p.listener
    good = other.passive_open()
    p.drain()
    other.drain()

    def explode(conn: Connection) -> None:
        raise RuntimeError("application bug")

    seen: list[bytes] = []
    bad.on_readable = explode
    good.on_readable = lambda conn: seen.append(conn.recv(100, p.now))
    p.send(".", 1, 1, payload=b"hello")             # must not raise out of Stack.receive
    assert bad.state is State.CLOSED and bad.error == errno.ECONNABORTED
    assert p.stack.counters["UsertcpAppCallbackErrors"] == 1
    assert any(s.seg.flags & RST for s in p.drain())
    other.send(".", 1, 1, payload=b"still here")
    assert seen == [b"still here"] and good.state is State.ESTABLISHED


def test_a_raising_accept_callback_resets_the_new_connection_only() -> None:
    p = ScriptedPeer()
    lst = p.listen()

    def explode(_lst: object) -> None:
        raise ValueError("accept handler bug")

    lst.on_accept_ready = explode
    p.send("S", 0)
    p.expect("S.", 0, 1)
    p.send(".", 1, 1)                                  # completes: on_accept_ready raises
    assert p.stack.counters["UsertcpAppCallbackErrors"] == 1
    assert any(s.seg.flags & RST for s in p.drain())
    lst.on_accept_ready = None
    dead = lst.accept()                                # queued, reset: accept() reports it
    assert dead is not None and dead.state is State.CLOSED and dead.error == errno.ECONNABORTED
    p2 = ScriptedPeer(peer_port=40010)
    p2.stack, p2.listener = p.stack, lst
    assert p2.passive_open().state is State.ESTABLISHED
