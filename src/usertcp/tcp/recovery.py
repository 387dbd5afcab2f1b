"""Loss recovery: the SACK scoreboard and what it decides (RFC 6675, RFC 8985, RFC 6937).

The scoreboard is the retransmission queue of :class:`SentSegment` records with its
SACKed/lost/retransmitted byte counts (Linux sacked_out/lost_out/retrans_out). Loss is
detected by RACK (RFC 8985, Linux's default for SACK peers), by DupThresh (RFC 6675
IsLost) without RACK, or by duplicate ACKs without SACK (RFC 5681/6582 NewReno). Recovery
reduces the window with PRR (RFC 6937); an ECN echo reduces it once per window (RFC 3168
§6.1.2, Linux's CWR state).
"""

from __future__ import annotations

# Linux congestion-avoidance states for tcpi_ca_state.
CA_OPEN, CA_DISORDER, CA_CWR, CA_RECOVERY, CA_LOSS = 0, 1, 2, 3, 4

# Linux tp->ecn_flags (include/net/tcp.h).
ECN_OK = 0x1           # negotiated in the handshake
ECN_QUEUE_CWR = 0x2    # cwnd was reduced: set CWR on the next new data segment
ECN_DEMAND_CWR = 0x4   # a CE mark arrived: set ECE on every segment until the peer's CWR
ECN_SEEN = 0x8         # an ECT or CE segment arrived


class SentSegment:
    """One transmitted range [start, end) of sequence offsets awaiting acknowledgement."""

    __slots__ = ("end", "fin", "first_tx", "lost", "retrans", "sacked", "start", "tx_count", "tx_time")

    def __init__(self, start: int, end: int, fin: bool, now: float) -> None:
        self.start = start
        self.end = end
        self.fin = fin
        self.tx_time = now
        self.first_tx = now
        self.tx_count = 1
        self.retrans = False
        self.sacked = False
        self.lost = False
