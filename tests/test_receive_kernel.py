"""The receive side against this machine's kernel over TUN (in a namespace the test creates):
the kernel answers the same inbound segments as the corpus script, and usertcp must answer
them as the kernel did (whichever way that is), so a KNOWN entry that blames the script's age
is checked, not asserted.

ts_recent/invalid_ack.pkt: a FIN whose ACK is beyond SND.NXT with a high TS val, then data.
Before Linux commit 42726ec644cb ("tcp: send a challenge ACK on SEG.ACK > SND.NXT", 2026,
backported to the stable series; this machine's 6.18.44 has it) tcp_ack() dropped such a
segment silently, as the corpus script expects; since then it sends a challenge ACK (RFC 5961
§5.2, RFC 9293 §3.10.7.4).
Either way tcp_replace_ts_recent is not reached: the TS ecr stays the old TS val.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from netns_helpers import PEER, TCP_ACK, TCP_FIN, TCP_SYN, US, PacketReader, Tcp, build_tcp, namespace_fixture
from usertcp.drill.parser import parse_script
from usertcp.drill.runner import RunOptions, run_script
from usertcp.net import netns
from usertcp.net.tun import TunDevice
from usertcp.wire.segment import TxPacket

PORT = 8080
CORPUS = next((p for p in (Path(__file__).resolve().parents[2] / "shared" / "packetdrill",
                           Path("/work/shared/packetdrill")) if p.is_dir()), None)
INVALID_ACK = "gtests/net/tcp/ts_recent/invalid_ack.pkt"
# the script's SYN: mss 1000, sackOK, TS val 100 (no window scale)
SYN_OPTS = struct.pack("!BBH", 2, 4, 1000) + bytes([4, 2, 8, 10]) + struct.pack("!II", 100, 0)


@pytest.fixture
def ns() -> Iterator[str]:
    yield from namespace_fixture()


@dataclass
class Answer:
    """How the kernel answered the bad segment: None (silence) or (ACK relative to our ISN+1,
    TS ecr); and the TS ecr of its ACK of the data that followed."""

    challenge: tuple[int, int] | None
    data_ecr: int


def _ts(seg: Tcp) -> tuple[int, int]:
    raw = seg.option(8)
    assert raw is not None, "the kernel sent no timestamp"
    val, ecr = struct.unpack("!II", raw)
    return val, ecr


def _kernel_answers(ns: str) -> Answer:
    """Replay invalid_ack.pkt's inbound segments to the kernel's listener."""
    def listen() -> socket.socket:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((PEER, PORT))
        s.listen(1)
        return s

    dev = TunDevice.open("utrk0", netns=ns)
    try:
        dev.configure(peer_address=f"{PEER}/24", mtu=1500)
        lst = netns.call_in_namespace(ns, listen)
        try:
            return _replay(dev, lst)
        finally:
            lst.close()
    finally:
        dev.close()


def _replay(dev: TunDevice, lst: socket.socket) -> Answer:
    rd = PacketReader(dev.read_batch, dev.fd)
    sport, isn = 41234, 1000

    def send(seq: int, ack: int, flags: int, tsval: int, ecr: int, payload: bytes = b"",
             opts: bytes | None = None) -> None:
        ts = bytes([1, 1, 8, 10]) + struct.pack("!II", tsval, ecr)
        hdr, data = build_tcp(US, PEER, sport, PORT, seq, ack, flags, window=20000,
                              options=ts if opts is None else opts, payload=payload)
        dev.write(TxPacket(hdr, [data] if data else []))

    def reply(timeout: float) -> Tcp | None:
        try:
            return rd.next(lambda s, p, ok: s.dport == sport, timeout)[0]
        except TimeoutError:
            return None

    send(isn, 0, TCP_SYN, 100, 0, opts=SYN_OPTS)
    synack = reply(5.0)
    assert synack is not None and synack.flags == TCP_SYN | TCP_ACK, "no SYN-ACK"
    kts = _ts(synack)[0]
    una = synack.seq + 1
    send(isn + 1, una, TCP_ACK, 200, kts)
    child, _ = lst.accept()
    send(isn + 1, una + 9998, TCP_ACK | TCP_FIN, 200000, kts)          # ACK beyond SND.NXT
    bad = reply(0.5)
    challenge = None if bad is None else ((bad.ack - isn - 1) & 0xFFFFFFFF, _ts(bad)[1])
    send(isn + 1, una, TCP_ACK, 201, kts, payload=b"x" * 1000)
    data_ack = reply(5.0)
    child.close()
    assert data_ack is not None and data_ack.ack == isn + 1001, "the data was not acknowledged"
    return Answer(challenge, _ts(data_ack)[1])


@pytest.mark.netns
@pytest.mark.skipif(CORPUS is None, reason="packetdrill corpus not found")
def test_ack_beyond_snd_nxt_is_answered_as_the_kernel_answers(ns: str) -> None:
    assert CORPUS is not None
    kernel = _kernel_answers(ns)
    assert kernel.data_ecr == 201                       # ts_recent never took the bad TS val
    text = (CORPUS / INVALID_ACK).read_text()
    bad_line = "   +0 < F. 1:1(0) ack 9999 win 20000 <nop,nop,TS val 200000 ecr 100>\n"
    assert bad_line in text
    if kernel.challenge is not None:
        ack, ecr = kernel.challenge
        assert (ack, ecr) == (0, 200)                   # a challenge ACK that kept ts_recent
        text = text.replace(bad_line, bad_line + "   +0 > . 1:1(0) ack 1 <nop,nop,TS val 200 ecr 200>\n")
    for version in ("ipv4", "ipv6"):
        res = run_script(parse_script(text, path=str(CORPUS / INVALID_ACK)), RunOptions(ip_version=version))
        assert res.status == "passed", f"[{version}] line {res.line}: {res.reason}\n" + "\n".join(res.details)
