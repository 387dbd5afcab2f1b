"""Martian addresses beyond the sources of issue 20 point 4, and Linux's drop reasons for
each: IPv4 ip_route_input_slow (martian source and destination), IPv6 ip6_rcv_core (RFC 4291
§2.5.3 loopback, §2.7 multicast) and tcp_v6_conn_request (IPv4-mapped sources)."""

from __future__ import annotations

import ipaddress

import pytest

from usertcp.tcp.stack import Stack
from usertcp.wire.packet import build_packet
from usertcp.wire.segment import SYN
from usertcp.wire.tcp import encode_options

LOCAL4 = "10.0.0.1"
LOCAL6 = "fd00::1"


def syn(src: str, dst: str) -> bytes:
    return build_packet(src=ipaddress.ip_address(src).packed, dst=ipaddress.ip_address(dst).packed,
                        sport=40000, dport=8080, seq=1000, ack=0, flags=SYN, window=65535,
                        options=encode_options(mss=1400)).tobytes()


def listening(*addresses: str) -> Stack:
    st = Stack(list(addresses))
    st.listen(8080)
    return st


@pytest.mark.parametrize(("src", "reason"), [
    ("224.0.0.1", "SKB_DROP_REASON_IP_INVALID_SOURCE"),
    ("255.255.255.255", "SKB_DROP_REASON_IP_INVALID_SOURCE"),
    ("0.1.2.3", "SKB_DROP_REASON_IP_INVALID_SOURCE"),
    ("127.0.0.1", "SKB_DROP_REASON_IP_LOCALNET"),
    (LOCAL4, "SKB_DROP_REASON_IP_LOCAL_SOURCE"),
    ("ff02::1", "SKB_DROP_REASON_IP_INHDR"),
    ("::1", "SKB_DROP_REASON_IP_INHDR"),
    (LOCAL6, "SKB_DROP_REASON_IP_INHDR"),
])
def test_martian_sources_are_counted_under_linux_drop_reasons(src: str, reason: str) -> None:
    st = listening(LOCAL4, LOCAL6)
    st.receive(syn(src, LOCAL6 if ":" in src else LOCAL4), 0.0)
    assert st.datagrams_to_send() == []
    assert st.counters[reason] == 1 and st.counters["UsertcpInMartianSrc"] == 1


def test_ipv4_mapped_source_gets_no_syn_ack() -> None:
    # tcp_v6_conn_request: an IPv4-mapped source never appears on an IPv6 wire.
    st = listening(LOCAL6)
    st.receive(syn("::ffff:192.0.2.7", LOCAL6), 0.0)
    assert st.datagrams_to_send() == [] and not st.connections
    assert st.counters["Ip6InHdrErrors"] == 1


@pytest.mark.parametrize(("src", "dst"), [("10.0.0.2", "127.0.0.1"), ("fd00::2", "::1")])
def test_loopback_destination_from_outside_is_martian(src: str, dst: str) -> None:
    # ip_route_input_slow martian_destination (in_martian_dst, IP_LOCALNET); ip6_rcv_core
    # drops a packet to ::1 that did not come from ::1 (RFC 4291 §2.5.3).
    st = listening(LOCAL4, LOCAL6, "127.0.0.1", "::1")
    st.receive(syn(src, dst), 0.0)
    assert st.datagrams_to_send() == [] and not st.connections
    assert st.counters["UsertcpInMartianDst"] == 1
    # Loopback to loopback is the loopback device's own traffic: answered.
    st.receive(syn(dst, dst), 0.0)
    assert len(st.datagrams_to_send()) == 1
