"""An invariant checker for a stack's connection state, run after every event in fuzz mode.

``check_invariants(stack)`` raises :class:`InvariantViolation` (an AssertionError) naming
the broken rule and the connection. ``CheckedEndpoint(stack)`` is an Endpoint (the memnet /
driver protocol) that runs the check after every ``receive`` and ``handle_timer``.

The rules (offsets as in Connection: the SYN is offset 0, data byte k is offset k + 1):
- sequence space: SND.UNA <= SND.NXT <= SND.MAX <= end of data + FIN (RFC 9293 §3.3.1);
  a synchronized connection has its SYN acknowledged; acknowledged data is released.
- retransmission queue: records sorted, disjoint, non-empty, within [SND.UNA, SND.MAX];
  ``sacked_bytes``/``lost_bytes``/``retrans_bytes`` equal their recomputation from it
  (RFC 6675 §4 scoreboard; Linux sacked_out/lost_out/retrans_out); a SACKed record is
  neither lost nor in flight as a retransmission.
- receive side: the receive buffer's size is the sum of its chunks; the reassembly queue
  is within its segment and byte limits, its byte count is exact, and it holds nothing at
  or below RCV.NXT; what is held fits the buffer we advertised.
- timers: the deadline the stack knows equals the connection's next deadline and is in
  the stack's heap; data outstanding => a retransmission (or probe) timer is armed
  (RFC 6298 §5.1); TIME-WAIT => its 2 MSL timer runs.
- stack: every table entry is live and keyed by its 4-tuple; ``time_wait_count`` and
  TcpCurrEstab match the table; TIME-WAIT within ``max_time_wait``.
- ECN: the per-connection ECN flags only when ECN was negotiated (RFC 3168 §6.1.1); the
  CWR congestion state only with its reduction window (Linux high_seq) not yet acked.
- listeners: the SYN queue within its bound and only SYN-RECEIVED entries that are in the
  table; the accept queue within the backlog plus what the SYN queue can complete.
"""

from __future__ import annotations

from itertools import pairwise
from typing import TYPE_CHECKING

from usertcp.tcp.connection import SYNCHRONIZED, Connection, State
from usertcp.tcp.recovery import CA_CWR, ECN_OK, INF
from usertcp.wire.segment import Buffer, TxPacket

if TYPE_CHECKING:
    from usertcp.tcp.stack import Stack

__all__ = ["CheckedEndpoint", "InvariantViolation", "check_connection", "check_invariants"]


class InvariantViolation(AssertionError):
    """A broken invariant: ``rule`` names it, the message says where."""

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(f"{rule}: {detail}")
        self.rule = rule


def _fail(rule: str, conn: object, detail: str) -> None:
    raise InvariantViolation(rule, f"{conn!r} {detail}")


def check_connection(c: Connection, heap: set[tuple[int, float]] | None = None) -> None:
    """The per-connection rules; ``heap`` is the set of (id(conn), deadline) the stack holds."""
    st = c.state
    if not isinstance(st, State):
        _fail("state", c, f"state {st!r} is not a State")
    if not c.snd_una <= c.snd_nxt <= c.snd_max:
        _fail("snd-order", c, f"snd_una={c.snd_una} snd_nxt={c.snd_nxt} snd_max={c.snd_max}")
    buf = c.snd_buf
    if c.snd_max > buf.end + 2:
        _fail("snd-max-beyond-data", c, f"snd_max={c.snd_max} data end={buf.end}")
    if buf.start > max(c.snd_una - 1, 0):
        _fail("snd-buf-released-unacked", c, f"buffer start={buf.start} snd_una={c.snd_una}")
    # The skb layout behind sk_wmem_queued: ascending starts that cover the queued bytes.
    skbs = buf.skb_starts()
    if (bool(skbs) != bool(len(buf)) or any(a >= b for a, b in pairwise(skbs))
            or (skbs and not (skbs[0] <= buf.start and skbs[-1] < buf.end))):
        _fail("snd-skb-layout", c, f"skbs from {skbs[:4]}... over [{buf.start},{buf.end})")
    if st in SYNCHRONIZED and c.snd_una < 1:
        _fail("syn-unacked", c, "synchronized with the SYN not acknowledged")
    if (st is State.SYN_SENT or st is State.SYN_RECEIVED) and c.snd_una != 0:
        _fail("syn-state-una", c, f"snd_una={c.snd_una} in {st.name}")
    _check_scoreboard(c)
    _check_receive_side(c)
    _check_timers_and_ecn(c, heap)


def _check_scoreboard(c: Connection) -> None:
    """The retransmission queue and the scoreboard counts (RFC 6675 §4)."""
    # Retransmission queue and the scoreboard.
    sacked = lost = retrans = 0
    prev_end = c.snd_una
    for r in c.recovery.rtx:
        if not (r.start < r.end and r.start >= prev_end and r.end <= c.snd_max):
            _fail("rtx-order", c, f"record [{r.start},{r.end}) after {prev_end}, snd_max={c.snd_max}")
        prev_end = r.end
        n = r.end - r.start
        if r.sacked:
            if r.lost or r.retrans:
                _fail("rtx-sacked-flags", c, f"record [{r.start},{r.end}) sacked and lost={r.lost} "
                      f"retrans={r.retrans}")
            sacked += n
        else:
            if r.lost:
                lost += n
            if r.retrans:
                retrans += n
    rec = c.recovery
    if (sacked, lost, retrans) != (rec.sacked_bytes, rec.lost_bytes, rec.retrans_bytes):
        _fail("scoreboard", c, f"counters sacked/lost/retrans={rec.sacked_bytes}/{rec.lost_bytes}/"
              f"{rec.retrans_bytes}, recomputed {sacked}/{lost}/{retrans}")


def _check_receive_side(c: Connection) -> None:
    """The receive buffer, the reassembly queue and RCV.NXT."""
    st = c.state
    # Receive side.
    rb = c.rcv_buf
    if rb.size != sum(len(x) for x in rb.chunks()):
        _fail("rcv-buf-size", c, f"size={rb.size} chunks={sum(len(x) for x in rb.chunks())}")
    q = c.ooo
    if len(q) > q.max_segments or q.bytes_queued > q.max_bytes:
        _fail("ooo-bound", c, f"{len(q)} segments / {q.bytes_queued} bytes over "
              f"{q.max_segments} / {q.max_bytes}")
    held = q.held_bytes()
    if held != q.bytes_queued:
        _fail("ooo-bytes", c, f"bytes_queued={q.bytes_queued} recomputed {held}")
    ahead = q.first_offset_from((c.irs + c.rcv_nxt) & 0xFFFFFFFF)
    if ahead is not None and ahead <= 0:
        _fail("ooo-below-rcv-nxt", c, f"a chunk starts {-ahead} bytes at or below rcv_nxt")
    if st in SYNCHRONIZED or st is State.SYN_RECEIVED:
        if c.rcv_nxt < 1:
            _fail("rcv-nxt", c, f"rcv_nxt={c.rcv_nxt}")
        slack = 1 << c.rcv_wscale
        if q.bytes_queued and c.rcv_nxt + q.bytes_queued > c.rcv_adv + slack:
            _fail("ooo-beyond-window", c, f"{q.bytes_queued} bytes queued past rcv_adv={c.rcv_adv}")


def _check_timers_and_ecn(c: Connection, heap: set[tuple[int, float]] | None) -> None:
    """The armed timers and the ECN/CWR state."""
    st = c.state
    # Timers.
    if st is not State.CLOSED:
        want = c.next_deadline()
        if c.timer_deadline != want:
            _fail("timer-stale", c, f"stack deadline {c.timer_deadline}, next deadline {want}")
        if want != INF and heap is not None and (id(c), want) not in heap:
            _fail("timer-not-queued", c, f"deadline {want} is not in the stack's timer heap")
        if c.snd_max > c.snd_una and st is not State.TIME_WAIT \
                and min(c.timers.rto_deadline, c.timers.tlp_deadline, c.timers.probe_deadline) == INF:
            _fail("rto-not-armed", c, f"{c.snd_max - c.snd_una} sequence numbers outstanding, no timer")
        if st is State.TIME_WAIT and c.timers.time_wait_deadline == INF:
            _fail("time-wait-timer", c, "TIME-WAIT without its 2 MSL timer")
    if c.cc.cwnd <= 0 or c.mss <= 0:
        _fail("cwnd-mss", c, f"cwnd={c.cc.cwnd} mss={c.mss}")
    if c.ecn_flags and not c.ecn_flags & ECN_OK:
        _fail("ecn-flags", c, f"ecn_flags={c.ecn_flags:#x} without ECN negotiated")
    if c.recovery.ca_state == CA_CWR and c.snd_una > c.recovery.recover:
        _fail("cwr-window", c, f"CWR state with snd_una={c.snd_una} past its window end {c.recovery.recover}")

def check_invariants(stack: Stack) -> None:
    """Every rule of the module docstring, for every connection and listener of ``stack``."""
    heap = {(id(conn), deadline) for deadline, conn in stack.timer_entries()}
    tw = estab = 0
    for key, c in stack.connections.items():
        if c.key != key:
            _fail("table-key", c, f"stored under {key!r}")
        if c.state is State.CLOSED:
            _fail("table-closed", c, "a CLOSED connection is still in the table")
        check_connection(c, heap)
        tw += c.was_time_wait
        estab += c.state is State.ESTABLISHED or c.state is State.CLOSE_WAIT
    if tw != stack.time_wait_count:
        _fail("time-wait-count", stack, f"time_wait_count={stack.time_wait_count}, table has {tw}")
    if tw > stack.config.max_time_wait:
        _fail("time-wait-bound", stack, f"{tw} TIME-WAIT > max_time_wait={stack.config.max_time_wait}")
    if estab != stack.counters["TcpCurrEstab"]:
        _fail("curr-estab", stack, f"TcpCurrEstab={stack.counters['TcpCurrEstab']}, table has {estab}")
    for lst in stack.listeners.values():
        limit = min(stack.config.max_syn_backlog, max(lst.backlog, 128) * 2)
        if len(lst.embryonic) > limit:
            _fail("syn-queue-bound", lst, f"{len(lst.embryonic)} embryonic > {limit}")
        for c in lst.embryonic:
            if c.state is not State.SYN_RECEIVED or stack.connections.get(c.key) is not c:
                _fail("syn-queue-entry", c, "in the SYN queue but not a live SYN-RECEIVED child")
        if len(lst.accept_queue) > lst.backlog + limit:
            _fail("accept-queue-bound", lst, f"{len(lst.accept_queue)} queued > backlog {lst.backlog} "
                  f"+ SYN queue {limit}")


class CheckedEndpoint:
    """An Endpoint wrapper: ``check_invariants`` after every receive and timer (fuzz mode)."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.checks = 0

    def receive(self, packet: Buffer, now: float, *, checksum_verified: bool = False) -> None:
        self.stack.receive(packet, now, checksum_verified=checksum_verified)
        self.check()

    def handle_timer(self, now: float) -> None:
        self.stack.handle_timer(now)
        self.check()

    def datagrams_to_send(self) -> list[TxPacket]:
        return self.stack.datagrams_to_send()

    def get_timer(self) -> float | None:
        return self.stack.get_timer()

    def check(self) -> None:
        self.checks += 1
        check_invariants(self.stack)
