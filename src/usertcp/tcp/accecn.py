"""Accurate ECN (RFC 9768), as Linux 6.18 does it (include/net/tcp_ecn.h, tcp_input.c,
tcp_output.c, tcp_minisocks.c).

One :class:`AccEcn` per connection that asked for or negotiated AccECN (``Connection.accecn``;
None otherwise, so a connection without it pays one ``is None`` test per segment). It owns
every AccECN counter; the handshake, the receive and output paths and the ACK processing
call it through the narrow methods below.

- **Negotiation** (RFC 9768 §3.1, Table 2): a SYN with AE|CWR|ECE asks for AccECN
  (``tcp_ecn=3``); a listener with ``tcp_ecn`` 3..5 answers with a SYN-ACK whose ACE field
  encodes the IP-ECN field its SYN arrived with (``synack_flags``); the client's first ACK
  encodes the SYN-ACK's (``reflector_flags``). A SYN-ACK with 001/101 falls back to RFC 3168,
  000/111 to no ECN (``synack_outcome``).
- **The ACE field**: the 3-bit count of CE-marked packets received (r.cep, offset by 5) on
  every segment after the handshake (``ace``). The sender turns its change into CE packets
  delivered, guarding against wraps with the bytes the ACK delivered (``process_ack``, Linux
  ``__tcp_accecn_process``).
- **The AccECN option**: 24-bit byte counters of ECT(1), CE and ECT(0) payload received
  (``option_fields``), parsed back into the delivered byte counters (``_process_option``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from usertcp.tcp.config import ECN_ACCECN
from usertcp.wire.accecn import FIELD_ECN, FIELD_MASK, accecn_size, encode_with_accecn, parse_accecn
from usertcp.wire.segment import ACK, AE, CWR, ECE, ECN_CE, ECN_ECT0, ECN_ECT1, ECN_NOT_ECT, Segment

if TYPE_CHECKING:
    from usertcp.tcp.config import StackConfig

ACE_FLAGS = AE | CWR | ECE
CEP_INIT_OFFSET = 5             # RFC 9768 §3.2.1: r.cep starts at 5 on the wire
ACE_MASK = 7
ACE_MAX_DELTA = 6               # TCP_ACCECN_ACE_MAX_DELTA: ACK before the field can wrap
E1B_INIT_OFFSET = 1             # RFC 9768 §3.2.3: EE1B and EE0B start at 1, ECEB at 0
E0B_INIT_OFFSET = 1
CEB_INIT_OFFSET = 0
SAFETY_SHIFT = 1                # TCP_ACCECN_SAFETY_SHIFT

# tp->accecn_fail_mode bits (tcp_ecn.h).
ACE_FAIL_SEND = 1
ACE_FAIL_RECV = 2
OPT_FAIL_SEND = 4
OPT_FAIL_RECV = 8

# tp->saw_accecn_opt.
OPT_NOT_SEEN = 0
OPT_EMPTY_SEEN = 1
OPT_COUNTER_SEEN = 2
OPT_FAIL_SEEN = 3

# Outcomes of a SYN-ACK for an AccECN-requesting client (tcp_ecn_rcv_synack).
NEGOTIATED_NONE = 0
NEGOTIATED_RFC3168 = 1
NEGOTIATED_ACCECN = 2

_INIT_OFFSET = (0, E1B_INIT_OFFSET, E0B_INIT_OFFSET, CEB_INIT_OFFSET)   # by IP-ECN codepoint
# The option field (1..3, order 1: ECT(1), CE, ECT(0)) that carries each codepoint's count.
_OPTFIELD = (0, 1, 3, 2)
# ACE of a SYN-ACK for the IP-ECN field of the SYN (RFC 9768 Table 2), as AE/CWR/ECE flags.
_REFLECT = (CWR, CWR | ECE, AE, AE | CWR)
# The IP-ECN field an ACE value of the handshake reports (tcp_accecn_extract_syn_ect).
_ACE_TO_ECN = (ECN_ECT0, ECN_ECT1, ECN_NOT_ECT, ECN_ECT1, ECN_ECT0, ECN_ECT1, ECN_CE, ECN_ECT1)


def ace_of(flags: int) -> int:
    """The 3-bit ACE field of a segment's flags: AE, CWR, ECE (tcp_accecn_ace); the three
    flags are adjacent bits (0x100, 0x80, 0x40)."""
    return (flags >> 6) & ACE_MASK


def ace_flags(ace: int) -> int:
    """The AE/CWR/ECE flags that carry a 3-bit ACE value."""
    return (ace & ACE_MASK) << 6


def syn_requests_accecn(flags: int) -> bool:
    """RFC 9768 §3.1.2 (tcp_accecn_syn_requested): any ACE but 000 and 011 (RFC 3168's
    ECE|CWR) on a SYN asks for AccECN."""
    ace = ace_of(flags)
    return ace != 0 and ace != 3


def reflector_flags(ecn: int) -> int:
    """The ACE flags that encode an IP-ECN field in the handshake (tcp_accecn_reflector_flags)."""
    return _REFLECT[ecn & 3]


def ect_transition_valid(sent: int, received: int) -> bool:
    """tcp_ect_transition_valid: a middlebox may mark CE or swap ECT codepoints, but not
    turn Not-ECT into ECT (or back), nor CE into ECT."""
    if sent == received:
        return True
    if sent == ECN_NOT_ECT or received == ECN_NOT_ECT:
        return False
    return sent != ECN_CE


def ace_delta(ace: int, delivered_ce: int) -> int:
    """CE packets the ACE field reports beyond ``delivered_ce`` (mod 8)."""
    return (ace - CEP_INIT_OFFSET - delivered_ce) & ACE_MASK


def safe_delta(delivered_pkts: int, delta: int) -> int:
    """The largest CE count consistent with the ACE field: every wrap possible within the
    packets delivered (``safe_delta`` of __tcp_accecn_process)."""
    return delivered_pkts - ((delivered_pkts - delta) & ACE_MASK)


def update_bytes(count: int, wire: int, init_offset: int) -> tuple[int, int]:
    """tcp_update_ecn_bytes: the 32-bit counter and the signed delta a 24-bit field gives
    (the difference taken mod 2^24, sign-extended so a stale option moves it back)."""
    delta = (((wire - init_offset) & FIELD_MASK) - count) & FIELD_MASK
    if delta & 0x800000:
        delta -= 0x1000000
    return (count + delta) & 0xFFFFFFFF, delta


def option_init_state(opt: memoryview) -> int:
    """tcp_accecn_option_init: what the first option shows (zeroed EE1B or EE0B: a middlebox
    cleared it, RFC 9768 §3.2.3.2.4)."""
    _order, fields = parse_accecn(opt)
    if not fields:
        return OPT_EMPTY_SEEN
    if fields[0] == 0:
        return OPT_FAIL_SEEN
    if len(fields) < 3:
        return OPT_COUNTER_SEEN
    return OPT_FAIL_SEEN if fields[2] == 0 else OPT_COUNTER_SEEN


def fit_option(required: int, remaining: int, sack_blocks: int, combine_saving: int) -> tuple[int, int, int]:
    """tcp_options_fit_accecn: (fields, bytes charged, SACK blocks kept) for an AccECN option
    of at least ``required`` fields in ``remaining`` option bytes; fields -1 when it does not
    fit. SACK blocks keep their place, but down to two of them make room for the option."""
    if not sack_blocks and remaining >= 12:
        return 3, accecn_size(3, combine_saving), 0    # the usual case: all three fields fit
    rem = remaining
    reduced = 0
    n = 3
    while n >= required:
        size = accecn_size(n, combine_saving)
        if rem >= size:
            if reduced:
                size -= reduced * 8
            return n, size, sack_blocks - reduced
        if n == required and sack_blocks - reduced > 2 and required > 0:
            reduced += 1           # one SACK block less, then try all fields again
            rem += 8
            n = 3
            continue
        n -= 1
    return -1, 0, sack_blocks


class AccEcn:
    """The AccECN state of one connection (Linux tcp_sock's AccECN fields)."""

    __slots__ = (
        "pending", "syn_ect_snt", "syn_ect_rcv", "reflect",
        "received_ce", "received_ce_pending", "received_bytes", "prev_ecnfield", "seen",
        "delivered_ce", "delivered_bytes", "est_ecnfield",
        "minlen", "opt_demand", "opt_tstamp", "fail_mode", "saw_opt", "ts_progress",
        "option_mode", "beacon", "fallback", "ts_last", "ts_seen",
    )

    def __init__(self, *, option_mode: int, beacon: int, fallback: bool) -> None:
        self.pending = True            # TCP_ECN_MODE_PENDING: a SYN asked, no answer yet
        self.syn_ect_snt = 0           # IP-ECN field of our SYN or SYN-ACK
        self.syn_ect_rcv = 0           # IP-ECN field of the peer's SYN or SYN-ACK
        self.reflect = 0               # ACE flags for the handshake's last ACK (0: none)
        self.received_ce = 0           # r.cep: CE-marked packets received
        self.received_ce_pending = 0   # of those, not yet fed back (saturates at 15)
        self.received_bytes = [0, 0, 0]    # r.e1b, r.e0b, r.ceb (by IP-ECN codepoint - 1)
        self.prev_ecnfield = 0
        self.seen = False              # TCP_ECN_SEEN: some ECT or CE packet arrived
        self.delivered_ce = 0          # s.cep: CE-marked packets the peer reported
        self.delivered_bytes = [0, 0, 0]   # s.e1b, s.e0b, s.ceb
        self.est_ecnfield = 0          # codepoint the bytes between options are credited to
        self.minlen = 0                # option fields needed to report what changed
        self.opt_demand = 0            # the next n ACKs carry the option
        self.opt_tstamp = 0.0          # when the option was last sent (beacon)
        self.fail_mode = 0
        self.saw_opt = OPT_NOT_SEEN
        self.ts_progress = False       # FLAG_TS_PROGRESS of the segment being processed
        self.ts_last = 0               # the newest TSval seen (what ts_recent follows)
        self.ts_seen = False
        self.option_mode = option_mode     # tcp_ecn_option
        self.beacon = beacon               # tcp_ecn_option_beacon
        self.fallback = fallback           # tcp_ecn_fallback

    # ------------------------------------------------------------- handshake

    def syn_flags(self, flags: int, retransmission: bool) -> int:
        """ACE flags for our SYN (tcp_ecn_send_syn, tcp_ecn_clear_syn) or SYN-ACK
        (tcp_ecn_make_synack: the SYN's IP-ECN field, RFC 9768 Table 2)."""
        if flags & ACK:
            return reflector_flags(self.syn_ect_rcv)
        if retransmission and self.fallback:
            return 0           # RFC 9768 §3.1.4.1: a retransmitted SYN gives up on ECN
        return ACE_FLAGS

    def synack_option_wanted(self, timeouts: int) -> bool:
        """Does our SYN-ACK carry the option (tcp_synack_options: ``req->num_timeout < 1``,
        in case a middlebox drops SYN-ACKs with unknown options)? ``timeouts`` counts this
        retransmission; reqsk_timer_handler counts it only after inet_rtx_syn_ack, so the
        first retransmission still carries the option and later ones do not, as this
        machine's kernel shows (tools/kernel_accecn_probe.py)."""
        return self.option_mode > 0 and timeouts < 2

    def accept_syn(self, ecn: int) -> None:
        """A listener takes an AccECN SYN (tcp_ecn_create_request / tcp_ecn_rcv_syn)."""
        self.pending = False
        self.syn_ect_rcv = ecn & 3
        self.prev_ecnfield = self.syn_ect_rcv

    def synack_outcome(self, flags: int, ecn: int, opt: memoryview | None) -> int:
        """The SYN-ACK answering our AccECN SYN (tcp_ecn_rcv_synack, RFC 9768 Table 2)."""
        ace = ace_of(flags)
        if ace == 0 or ace == 7:
            return NEGOTIATED_NONE
        if ace == 1 or ace == 5:
            return NEGOTIATED_RFC3168
        self.pending = False
        self.syn_ect_rcv = ecn & 3
        if opt is not None and self.saw_opt < OPT_COUNTER_SEEN:
            self._saw_option(option_init_state(opt))
            self.opt_demand = 2
        if ecn & 3 == ECN_CE and self._syn_feedback_valid(ace):
            self.received_ce += 1
            self.received_ce_pending += 1
        return NEGOTIATED_ACCECN

    def reflect_on_next_ack(self) -> None:
        """The ACK completing our active open reports the SYN-ACK's IP-ECN field instead of
        the counter (tcp_send_ack_reflect_ect)."""
        self.reflect = reflector_flags(self.syn_ect_rcv)

    def third_ack(self, flags: int, pure: bool, ecn: int, plen: int, opt: memoryview | None) -> None:
        """The ACK completing a passive open (tcp_accecn_third_ack, RFC 9768 Table 4; then
        tcp_ecn_openreq_child)."""
        ace = ace_of(flags)
        if ace == 0:
            self.fail_mode |= ACE_FAIL_RECV      # a middlebox cleared the ACE field
        elif ace not in (1, 5, 7) and pure and self._syn_feedback_valid(ace):
            if _ACE_TO_ECN[ace] == ECN_CE and not self.delivered_ce:
                self.delivered_ce += 1
        if opt is not None and self.saw_opt < OPT_COUNTER_SEEN:
            self._saw_option(option_init_state(opt))
        self.opt_demand = 1
        self.received(ecn, plen, 1, False)

    def _syn_feedback_valid(self, ace: int) -> bool:
        """tcp_accecn_validate_syn_feedback: the handshake's ACE may not show an impossible
        change of the IP-ECN field we sent."""
        if not self.fallback:
            return True
        if not ect_transition_valid(self.syn_ect_snt, _ACE_TO_ECN[ace]):
            self.fail_mode |= ACE_FAIL_RECV
            return False
        return True

    def _saw_option(self, state: int) -> None:
        self.saw_opt = state
        if state == OPT_FAIL_SEEN:
            self.fail_mode |= OPT_FAIL_RECV

    # --------------------------------------------------------------- receive

    def on_segment(self, seg: Segment) -> bool:
        """An acceptable segment (Linux tcp_rcv_established step5); True when its data should
        be ACKed at once. Its timestamp is progress (FLAG_TS_PROGRESS) when newer than any
        seen before (what advances ts_recent)."""
        plen = len(seg.payload)
        gso = seg.gso_size
        segs = (plen + gso - 1) // gso if gso and plen else 1
        ts = seg.ts_val
        progress = ts >= 0 and 0 < ((ts - self.ts_last) & 0xFFFFFFFF) < 0x80000000
        if progress or (ts >= 0 and not self.ts_seen):
            self.ts_last = ts
            self.ts_seen = True
        return self.received(seg.tos, plen, segs, progress) and plen > 0

    def received(self, ecn: int, plen: int, segs: int, ts_progress: bool) -> bool:
        """Count one arriving segment's IP-ECN field (tcp_ecn_received_counters); True when
        it should be ACKed at once (the codepoint changed: a change-triggered ACK)."""
        self.ts_progress = ts_progress
        ecn &= 3
        is_ce = ecn == ECN_CE
        if ecn:
            self.seen = True
            if is_ce:
                # The ACE field counts every CE packet, pure ACKs included.
                self.received_ce += segs
                self.received_ce_pending = min(self.received_ce_pending + segs, 15)
            if plen:
                idx = ecn - 1
                old = self.received_bytes[idx]
                new = self.received_bytes[idx] = (old + plen) & 0xFFFFFFFF
                field = _OPTFIELD[ecn]
                if field > self.minlen:
                    self.minlen = field
                if (new ^ old) & 0xFFC00000 and self.opt_demand < 1:
                    self.opt_demand = 1      # an option at least every 2^22 bytes
        edge = self.prev_ecnfield != ecn
        if edge or is_ce:
            self.prev_ecnfield = ecn
            self.opt_demand = 2          # this ACK and the next carry the option
        return edge or self.received_ce_pending >= ACE_MAX_DELTA

    # ---------------------------------------------------------------- output

    def ace(self, flags: int) -> int:
        """ACE flags of an outgoing segment (tcp_accecn_set_ace): the handshake's reflector
        on the first pure ACK after a SYN-ACK, else r.cep + 5."""
        r = self.reflect
        if r:
            self.reflect = 0
            if flags == ACK:
                return r
        self.received_ce_pending = 0
        return ace_flags((self.received_ce + CEP_INIT_OFFSET) & ACE_MASK)

    @property
    def sends_ect(self) -> bool:
        """Our packets are ECT(0) unless the handshake showed a broken path (ACE 000 on the
        3rd ACK, RFC 9768 §3.2.2.5.1)."""
        return not self.fail_mode & ACE_FAIL_RECV

    def option_wanted(self, now: float, srtt: float) -> bool:
        """Does this segment carry the option (tcp_established_options)? Only once the peer
        showed it can see options, in full mode always, else when something changed or the
        beacon is due (tcp_accecn_option_beacon_check)."""
        mode = self.option_mode
        if not mode or not self.saw_opt or self.fail_mode & OPT_FAIL_SEND:
            return False
        if mode >= 2 or self.opt_demand:
            return True
        return bool(self.beacon) and (now - self.opt_tstamp) * self.beacon >= srtt

    def option_fields(self, nfields: int, now: float) -> tuple[int, int, int, int]:
        """(fields, EE1B, ECEB, EE0B) to write, and the bookkeeping of a sent option."""
        b = self.received_bytes
        self.minlen = 0
        self.opt_tstamp = now
        if self.opt_demand:
            self.opt_demand -= 1
        return (nfields, b[0] + E1B_INIT_OFFSET, b[2] + CEB_INIT_OFFSET, b[1] + E0B_INIT_OFFSET)

    def note_syn_sent(self, tos: int) -> None:
        """The IP-ECN field our SYN or SYN-ACK left with (syn_ect_snt), which the peer's
        handshake feedback is checked against."""
        self.syn_ect_snt = tos & 3

    def established_options(self, now: float, srtt: float, ts: tuple[int, int] | None,
                            blocks: list[tuple[int, int]], md5: bool) -> bytes | None:
        """The options of a non-SYN segment with the AccECN option (tcp_established_options:
        SACK blocks first, the option in what is left), or None without it."""
        if self.pending or not self.option_wanted(now, srtt):
            return None
        used = (20 if md5 else 0) + (12 if ts is not None else 0) + (4 + 8 * len(blocks) if blocks else 0)
        n, _size, keep = fit_option(self.minlen, 40 - used, len(blocks), 2 if blocks else 0)
        if n < 0:
            return None
        return encode_with_accecn(ts=ts, accecn=self.option_fields(n, now), sack_blocks=blocks[:keep],
                                  md5=md5)

    def synack_options(self, timeouts: int, *, mss: int, ts: tuple[int, int] | None, sack: bool,
                       wscale: int, md5: bool) -> bytes | None:
        """A SYN-ACK's options with the AccECN option of zero counts (tcp_synack_options,
        synack_ecn_bytes), or None when it is not sent."""
        if self.pending or not self.synack_option_wanted(timeouts):
            return None
        used = ((20 if md5 else 0) + (4 if mss >= 0 else 0) + (12 if ts is not None else 4 if sack else 0)
                + (4 if wscale >= 0 else 0))
        saving = 2 if sack and ts is None else 1 if wscale >= 0 else 0
        n, _size, _keep = fit_option(0, 40 - used, 0, saving)
        if n < 0:
            return None
        fields = (n, E1B_INIT_OFFSET, CEB_INIT_OFFSET, E0B_INIT_OFFSET)
        return encode_with_accecn(mss=mss, ts=ts, sack_permitted=sack, wscale=wscale, accecn=fields, md5=md5)

    # ------------------------------------------------------------------- ACK

    def process_ack(self, ace: int, opt: memoryview | None, delivered_pkts: int, delivered_bytes: int,
                    progress: bool, syn_acked: bool, reliable_counts: bool, mss: int,
                    bytes_sent: int) -> int:
        """__tcp_accecn_process: CE packets newly delivered by this ACK, from the change of
        its ACE field; a change that could have wrapped is resolved with the option's CE
        bytes and the bytes the ACK delivered (RFC 9768 §3.2.2.5.2, Appendix A.2)."""
        if not (progress or self.ts_progress):
            return 0                   # a reordered ACK, or one that tells nothing new
        old_ceb = self.delivered_bytes[2]
        opt_valid = self._process_option(opt, delivered_bytes, bytes_sent)
        if syn_acked:
            return 0                   # the handshake's ACE is not a counter
        delta = ace_delta(ace, self.delivered_ce)
        if delivered_pkts > ACE_MASK:
            delta = self._wrap_guard(delta, delivered_pkts, delivered_bytes, old_ceb, opt_valid,
                                     reliable_counts, mss)
        self.delivered_ce += delta
        return delta

    def _wrap_guard(self, delta: int, pkts: int, dbytes: int, old_ceb: int, opt_valid: bool,
                    reliable_counts: bool, mss: int) -> int:
        """A "large ACK" (more than 7 packets delivered): the ACE field may have wrapped.
        Assume it did as often as it could (safe_delta) unless the option's CE bytes say
        otherwise (false-overflow detection)."""
        safe = safe_delta(pkts, delta)
        if not opt_valid:
            return safe
        d_ceb = (self.delivered_bytes[2] - old_ceb) & 0xFFFFFFFF
        if not d_ceb:
            return delta
        if pkts >= (ACE_MASK + 1) * 2 and reliable_counts:
            if dbytes <= d_ceb:
                return safe
            est = -(-d_ceb * pkts // dbytes)          # DIV_ROUND_UP
            return min(safe, delta + (est & ~ACE_MASK))
        if d_ceb > delta * mss:
            return safe
        if d_ceb < (safe * mss) >> SAFETY_SHIFT:
            return delta
        return safe

    def _process_option(self, opt: memoryview | None, delivered_bytes: int, bytes_sent: int) -> bool:
        """tcp_accecn_process_option: update the delivered byte counters from the option, or
        credit the delivered bytes to the codepoint the last option showed changing. True
        when the CE byte delta can be trusted."""
        if self.fail_mode & OPT_FAIL_RECV:
            return False
        est = self.est_ecnfield
        if opt is None:
            if not self.saw_opt:
                if bytes_sent >= (1 << 23) - 1:
                    self._saw_option(OPT_FAIL_SEEN)   # too late: the counters may have wrapped
                return False
            if est:
                b = self.delivered_bytes
                b[est - 1] = (b[est - 1] + delivered_bytes) & 0xFFFFFFFF
                return True
            return False
        if self.saw_opt < OPT_COUNTER_SEEN:
            self._saw_option(option_init_state(opt))
        order, fields = parse_accecn(opt)
        res = bool(est)
        ambiguous = False
        first_changed = False
        for i, wire in enumerate(fields):
            ecn = FIELD_ECN[order][i]
            b = self.delivered_bytes
            b[ecn - 1], delta = update_bytes(b[ecn - 1], wire, _INIT_OFFSET[ecn])
            if delta < 0:
                res = False
                ambiguous = True
            if delta and ecn != est:
                if not first_changed:
                    self.est_ecnfield = ecn
                    first_changed = True
                else:
                    res = False
                    ambiguous = True
        if ambiguous:
            self.est_ecnfield = 0
        return res


__all__ = [
    "ACE_FAIL_RECV",
    "ACE_FAIL_SEND",
    "NEGOTIATED_ACCECN",
    "NEGOTIATED_NONE",
    "NEGOTIATED_RFC3168",
    "OPT_FAIL_RECV",
    "OPT_FAIL_SEND",
    "AccEcn",
    "ace_delta",
    "ace_flags",
    "ace_of",
    "ect_transition_valid",
    "fit_option",
    "reflector_flags",
    "safe_delta",
    "syn_requests_accecn",
    "update_bytes",
]


def _new(cfg: StackConfig) -> AccEcn:
    return AccEcn(option_mode=cfg.ecn_option, beacon=cfg.ecn_option_beacon, fallback=cfg.ecn_fallback)


def accecn_for_active_open(cfg: StackConfig) -> AccEcn | None:
    """tcp_ecn_send_syn: only ``tcp_ecn=3`` asks for AccECN on an active open."""
    return _new(cfg) if cfg.ecn == ECN_ACCECN else None


def accecn_for_classic_synack(cfg: StackConfig, seg: Segment, syn_tos: int) -> AccEcn | None:
    """Linux 6.18 tcp_ecn_rcv_synack runs for any ECN-setup SYN, and its default case (ACE
    010, 011, 100, 110) does not test tcp_ecn_mode_pending: an RFC 3168 client (``tcp_ecn``
    1 or 4, whose SYN was ``syn_tos``) answered so runs AccECN, as this machine's kernel
    does (tools/kernel_accecn_probe.py). None for the other ACE values."""
    if not seg.flags & ACK or ace_of(seg.flags) in (0, 1, 5, 7):
        return None
    acc = _new(cfg)
    acc.note_syn_sent(syn_tos)
    acc.synack_outcome(seg.flags, seg.ecn, seg.accecn)
    return acc


def accecn_for_syn(seg: Segment, cfg: StackConfig) -> AccEcn | None:
    """tcp_ecn_create_request: a listener with ``tcp_ecn`` 3..5 takes a SYN asking for AccECN."""
    if cfg.ecn < ECN_ACCECN or not syn_requests_accecn(seg.flags):
        return None
    acc = _new(cfg)
    acc.accept_syn(seg.ecn)
    return acc


def settle_accecn(acc: AccEcn, seg: Segment) -> tuple[AccEcn | None, bool]:
    """The answer to our AccECN SYN: a SYN-ACK (tcp_ecn_rcv_synack) or a crossing SYN
    (tcp_ecn_rcv_syn). Returns the AccECN state to keep (None: not negotiated) and whether
    RFC 3168 ECN is in use instead."""
    if seg.flags & ACK:
        outcome = acc.synack_outcome(seg.flags, seg.ecn, seg.accecn)
    elif syn_requests_accecn(seg.flags):
        acc.accept_syn(seg.ecn)
        outcome = NEGOTIATED_ACCECN
    else:
        outcome = NEGOTIATED_RFC3168 if ace_of(seg.flags) == 3 else NEGOTIATED_NONE
    if outcome == NEGOTIATED_ACCECN:
        return acc, False
    return None, outcome == NEGOTIATED_RFC3168


def accecn_info(acc: AccEcn | None, rfc3168_delivered_ce: int = 0) -> dict[str, int]:
    """The AccECN fields of Linux 6.18's struct tcp_info (tcp_get_info): zero without AccECN,
    but ``tcpi_delivered_ce``, Linux's tp->delivered_ce, which RFC 3168 ECN counts too
    (packets delivered by ACKs with ECE)."""
    if acc is None:
        out = dict.fromkeys(_INFO_FIELDS, 0)
        out["tcpi_delivered_ce"] = rfc3168_delivered_ce
        return out
    r, d = acc.received_bytes, acc.delivered_bytes
    return {
        "tcpi_delivered_ce": acc.delivered_ce & 0xFFFFFFFF,
        "tcpi_received_ce": acc.received_ce & 0xFFFFFFFF,
        "tcpi_delivered_e1_bytes": d[0], "tcpi_delivered_e0_bytes": d[1], "tcpi_delivered_ce_bytes": d[2],
        "tcpi_received_e1_bytes": r[0], "tcpi_received_e0_bytes": r[1], "tcpi_received_ce_bytes": r[2],
        "tcpi_accecn_fail_mode": acc.fail_mode,
        "tcpi_accecn_opt_seen": acc.saw_opt,
    }


_INFO_FIELDS = ("tcpi_delivered_ce", "tcpi_received_ce", "tcpi_delivered_e1_bytes", "tcpi_delivered_e0_bytes",
                "tcpi_delivered_ce_bytes", "tcpi_received_e1_bytes", "tcpi_received_e0_bytes",
                "tcpi_received_ce_bytes", "tcpi_accecn_fail_mode", "tcpi_accecn_opt_seen")
