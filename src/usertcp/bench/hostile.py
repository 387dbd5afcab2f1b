"""``usertcp bench hostile``: availability and per-ACK cost under hostile peers (issue 20).

Method: (1) SACK cost: a server stack sends a flight of N pieces to a peer that announced
MSS 48 (the CVE-2019-11477/11478 setting) over a TSO link, with as much again waiting in the
send buffer. The same flight is fed K ACKs of one kind, each reporting four more MSS
delivered: ordinary cumulative ACKs; the ACKs of an honest receiver that lost the first
piece (one SACK block growing); or attack ACKs (four crafted blocks: new single pieces that
cut records, the same large blocks again, or both). Only ``Stack.receive`` is timed, in
thread CPU time, including what each ACK clocks out; cost per ACK and attack over the
honest kinds, per N.
(2) Availability: one echo server stack, legitimate clients (another stack) that each connect,
send a request, read the echo and close, back to back for a fixed wall-clock span, while an
attacker on a third address floods SYNs, hoards the server's memory with zero-window readers,
or storms one bulk download with SACKs; every packet in both directions goes through one FIFO
(the server's input queue), all in this process on wall-clock time. Completed legitimate
connections and their latency, per attack, side by side with the same run without attack.
"""

from __future__ import annotations

import ipaddress
import time
from typing import Any

from usertcp.tcp.config import StackConfig
from usertcp.tcp.connection import Connection
from usertcp.tcp.stack import Stack
from usertcp.wire.packet import build_packet, parse_packet
from usertcp.wire.segment import ACK, SYN
from usertcp.wire.tcp import encode_options

SERVER = "10.20.0.1"
ATTACKER = "10.20.0.66"
CLIENT = "10.20.0.2"
PORT = 7
MASK = 0xFFFFFFFF
TSO_MAX = 65535 - 60 - 60 - 40      # as the offload links (memnet OFFLOAD_GSO_MAX_SIZE)


class RawPeer:
    """A hand-driven remote end: builds packets to a stack, reads what the stack sends."""

    __slots__ = ("ip", "isn", "local_isn", "port", "rcv_nxt", "server_ip", "server_port", "stack")

    def __init__(self, stack: Stack, ip: str, port: int, server: str, server_port: int,
                 isn: int = 1_000_000) -> None:
        self.stack = stack
        self.ip = ipaddress.ip_address(ip).packed
        self.server_ip = ipaddress.ip_address(server).packed
        self.port = port
        self.server_port = server_port
        self.isn = isn
        self.local_isn = 0
        self.rcv_nxt = 0

    def packet(self, flags: int, seq: int, ack: int, *, win: int = 65535, options: bytes = b"",
               payload: bytes = b"") -> bytes:
        """Raw IP bytes; ``seq`` relative to this peer's ISN, ``ack`` an absolute number."""
        pkt = build_packet(src=self.ip, dst=self.server_ip, sport=self.port, dport=self.server_port,
                           seq=(self.isn + seq) & MASK, ack=ack & MASK, flags=flags, window=win,
                           options=options, payload=[payload] if payload else [])
        return pkt.tobytes()

    def handshake(self, now: float, options: bytes) -> Connection:
        """SYN with ``options``, the stack's SYN-ACK, the final ACK; the accepted connection."""
        st = self.stack
        st.receive(self.packet(SYN, 0, 0, options=options), now)
        for out in st.datagrams_to_send():
            seg = parse_packet(out.tobytes())
            if seg.flags & SYN and seg.dport == self.port:
                self.local_isn = seg.seq
        st.receive(self.packet(ACK, 1, self.local_isn + 1), now)
        st.datagrams_to_send()
        key = (self.server_ip, self.server_port, self.ip, self.port)
        return st.connections[key]


# ------------------------------------------------------------------------ (1) SACK cost


def _loaded_sender(pieces: int) -> tuple[Stack, RawPeer, Connection, float]:
    """A connection with ``pieces`` MSS-48 pieces in flight in a few TSO records."""
    sndbuf = max(pieces * 48 * 2, 1 << 16)
    st = Stack([SERVER], StackConfig(wmem=(4096, sndbuf, sndbuf), isn_secret=b"i" * 16,
                                     ts_secret=b"t" * 16), name="sender")
    st.gso_max_size = TSO_MAX
    st.listen(PORT)
    peer = RawPeer(st, ATTACKER, 40000, SERVER, PORT)
    now = 1.0
    conn = peer.handshake(now, encode_options(mss=48, sack_permitted=True, wscale=7))
    data = bytes(sndbuf)
    for _ in range(1000):                       # slow start to a window of ``pieces``
        if conn.cc.cwnd >= pieces * conn.mss and conn.snd_una == conn.snd_max:
            break
        if conn.cc.cwnd < pieces * conn.mss:
            conn.send(data[:conn.send_space], now)
        st.datagrams_to_send()
        now += 0.01
        st.receive(peer.packet(ACK, 1, conn.iss + conn.snd_max, win=65535), now)
        st.datagrams_to_send()
    else:
        raise RuntimeError("the warm-up did not open the window")
    conn.send(data[:pieces * conn.mss], now)
    st.datagrams_to_send()
    conn.send(data[:conn.send_space], now)     # more waits: every ACK that frees room clocks it out
    st.datagrams_to_send()
    return st, peer, conn, now + 0.001


def _sack_blocks(pattern: str, conn: Connection, una: int, i: int, pieces: int) -> list[tuple[int, int]]:
    """The four blocks of attack ACK number ``i`` (absolute sequence numbers)."""
    mss = conn.mss
    base = conn.iss + una
    if pattern == "split":
        # One MSS out of every two, four new ones per ACK: each cuts a record twice.
        first = 1 + 8 * i
        return [(base + (first + 2 * k) * mss, base + (first + 2 * k + 1) * mss) for k in range(4)]
    if pattern == "span":
        # The same large blocks again and again: the whole flight but the first MSS, in four.
        q = max((pieces - 1) // 4, 1)
        return [(base + (1 + k * q) * mss, base + (1 + (k + 1) * q) * mss) for k in range(4)]
    # "mixed": two new single pieces (splits) and two blocks over everything SACKed so far.
    first = 1 + 4 * i
    far = base + (first + 3) * mss
    return [(base + first * mss, base + (first + 1) * mss),
            (base + (first + 2) * mss, base + (first + 3) * mss),
            (base + mss, far), (base + mss, far)]


def _time_acks(pieces: int, acks: int, pattern: str) -> float:
    """Mean seconds per ACK: ``acks`` ACKs of one kind fed to a freshly loaded sender."""
    st, peer, conn, now = _loaded_sender(pieces)
    una = conn.snd_una
    packets = []
    for i in range(acks):
        if pattern == "ordinary":
            packets.append(peer.packet(ACK, 1, conn.iss + una + 4 * (i + 1) * conn.mss))
        elif pattern == "recovery":
            top = conn.iss + una + (1 + 4 * (i + 1)) * conn.mss
            block = ((conn.iss + una + conn.mss) & MASK, top & MASK)
            packets.append(peer.packet(ACK, 1, conn.iss + una, options=encode_options(sack_blocks=[block])))
        else:
            blocks = [(a & MASK, b & MASK) for a, b in _sack_blocks(pattern, conn, una, i, pieces)]
            packets.append(peer.packet(ACK, 1, conn.iss + una, options=encode_options(sack_blocks=blocks)))
    spent = 0.0
    for pkt in packets:
        t0 = time.thread_time()
        st.receive(pkt, now)
        spent += time.thread_time() - t0
        st.datagrams_to_send()
        now += 1e-5
    return spent / max(acks, 1)


def sack_cost(queue_lengths: tuple[int, ...] = (100, 1000, 10000), acks: int = 200,
              repeat: int = 3) -> dict[str, Any]:
    """Per queue length: microseconds per ordinary ACK and per attack ACK of each pattern."""
    out: dict[str, Any] = {}
    worst = worst_rec = 0.0
    for n in queue_lengths:
        k = max(min(acks, n // 10), 4)
        row: dict[str, float] = {}
        for pattern in ("ordinary", "recovery", "split", "span", "mixed"):
            row[f"{pattern}_us"] = round(min(_time_acks(n, k, pattern) for _ in range(repeat)) * 1e6, 2)
        for pattern in ("split", "span", "mixed"):
            for base in ("ordinary", "recovery"):
                ratio = row[f"{pattern}_us"] / row[f"{base}_us"] if row[f"{base}_us"] else 0.0
                row[f"{pattern}_over_{base}"] = round(ratio, 2)
            worst = max(worst, row[f"{pattern}_over_ordinary"])
            worst_rec = max(worst_rec, row[f"{pattern}_over_recovery"])
        row["acks"] = k
        out[str(n)] = row
    out["worst_over_ordinary"] = round(worst, 2)
    out["worst_over_recovery"] = round(worst_rec, 2)
    return out


def run(span: float = 3.0, clients: int = 4, acks: int = 200, repeat: int = 3,
        queue_lengths: str = "100,1000,10000", **_: Any) -> dict[str, Any]:
    method = __doc__.split("\n\n")[1].replace("\n", " ") if __doc__ else ""
    lengths = tuple(int(x) for x in str(queue_lengths).split(",") if x)
    out: dict[str, Any] = {"method": method}
    out["sack_cost"] = sack_cost(lengths, acks, repeat)
    out["goal"] = "attack ACK <= 3x an ordinary ACK at every queue length"
    out["goal_met"] = out["sack_cost"]["worst_ratio"] <= 3.0
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
