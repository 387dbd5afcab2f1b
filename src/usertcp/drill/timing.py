"""packetdrill's timing rules as pure functions (no clock, no I/O).

All times are seconds on the *script clock*: 0 is the first event (which must be at time 0).
Internally everything is compared in whole microseconds, as packetdrill does, so float noise
cannot flip a boundary case.

Rules (packetdrill run.c / run_system_call.c):

* **Anchor.** A relative time (``+x``, ``*``, ``+a~+b``) is added to the *actual* time at which
  the runner reaches the event, i.e. when the previous event has completed (a sniffed packet
  arrived, a syscall returned).  Exception: an inbound packet that follows an inbound packet is
  anchored on the previous packet's *expected* time, so consecutive injections do not drift by
  the processing overhead.  Absolute times are not anchored.  After a *blocking* syscall
  packetdrill moves on as soon as the call blocks, so the next event's ``now`` is the call's
  start, not its return (``+0...0.2 accept`` then ``+.1 < S`` injects the SYN at +0.1).
* **Blocking syscalls** ``+a...b``: the expected return time ``b`` uses the same anchor as ``a``
  (only when ``a`` is relative).
* **Tolerance** = max(``tolerance_usecs``, ``tolerance_percent`` % of the gap between this
  event's expected time and the previous event's expected time); defaults 4000 us and 12.5 %
  (``--tolerance_usecs``, ``--tolerance_percent``).  For a blocking call's return the gap is its
  own start-to-end time.  The first event has no previous one: the fixed tolerance applies.
* ``*`` matches any time; a range ``a~b`` accepts ``[a - tol, b + tol]``.
"""

from __future__ import annotations

from dataclasses import dataclass

from usertcp.drill.ast import CodeEvent, CommandEvent, Event, PacketEvent, Script, SyscallEvent, TimeKind

DEFAULT_TOLERANCE_USECS = 4000
DEFAULT_TOLERANCE_PERCENT = 12.5

__all__ = [
    "DEFAULT_TOLERANCE_PERCENT",
    "DEFAULT_TOLERANCE_USECS",
    "Expected",
    "anchor_for",
    "check_first_event",
    "check_order",
    "check_return_time",
    "check_time",
    "describe",
    "resolve",
    "tolerance",
]


def _us(seconds: float) -> int:
    return round(seconds * 1_000_000)


def _s(usecs: int) -> float:
    return usecs / 1_000_000


@dataclass(frozen=True, slots=True)
class Expected:
    """An event's expectation resolved onto the script clock."""

    kind: TimeKind
    start: float
    end: float | None = None  # upper bound of a range
    block_end: float | None = None  # when a blocking syscall must return
    anchor: float = 0.0  # what relative offsets were added to (0 for absolute times)


def describe(event: Event) -> str:
    """packetdrill's wording for what is being timed."""
    if isinstance(event, PacketEvent):
        return "inbound packet" if event.inbound else "outbound packet"
    if isinstance(event, SyscallEvent):
        return "system call start"
    if isinstance(event, CommandEvent):
        return "command"
    if isinstance(event, CodeEvent):
        return "data collection for code"
    return "event"


def _inbound(event: Event | None) -> bool:
    return isinstance(event, PacketEvent) and event.inbound


def anchor_for(
    event: Event, *, now: float, last_event: Event | None = None, last_expected: float | None = None
) -> float:
    """The time a relative event's offset is added to (see the module docstring)."""
    if last_expected is not None and _inbound(last_event) and _inbound(event):
        return last_expected
    return now


def resolve(
    event: Event, *, now: float, last_event: Event | None = None, last_expected: float | None = None
) -> Expected:
    """Resolve ``event``'s time spec.

    ``now``: the actual script-clock time at which the runner reaches this event;
    ``last_event`` / ``last_expected``: the previous event and its resolved expected start.
    """
    spec = event.time
    if spec.kind == "absolute" or (spec.kind == "range" and not spec.relative):
        return Expected(spec.kind, spec.start, spec.end, spec.block_end, 0.0)
    anchor_us = _us(anchor_for(event, now=now, last_event=last_event, last_expected=last_expected))
    start = _s(anchor_us + _us(spec.start))
    end = None if spec.end is None else _s(anchor_us + _us(spec.end))
    block_end = None
    if spec.block_end is not None:
        block_end = _s(anchor_us + _us(spec.block_end)) if spec.kind == "relative" else spec.block_end
    return Expected(spec.kind, start, end, block_end, _s(anchor_us))


def tolerance(
    gap: float,
    tolerance_usecs: int = DEFAULT_TOLERANCE_USECS,
    tolerance_percent: float = DEFAULT_TOLERANCE_PERCENT,
) -> float:
    """Allowed deviation (seconds) for an event expected ``gap`` seconds after the previous one."""
    # C assigns the product to a long: truncation toward zero, in microseconds.
    dynamic = int(tolerance_percent / 100.0 * _us(gap))
    return _s(max(tolerance_usecs, dynamic))


def _check(
    what: str,
    line: int,
    kind: TimeKind,
    start_us: int,
    end_us: int | None,
    actual_us: int,
    tol_us: int,
    anchor_us: int,
) -> str | None:
    if kind == "any":
        return None
    if kind == "range":
        assert end_us is not None
        if start_us - tol_us <= actual_us <= end_us + tol_us:
            return None
        if anchor_us:
            return (
                f"line {line}: timing error: expected {what} in relative time range "
                f"+{_s(start_us - anchor_us):.6f}~+{_s(end_us - anchor_us):.6f} sec but it happened "
                f"at {_s(actual_us - anchor_us):+.6f} sec (tolerance {_s(tol_us):.6f} sec)"
            )
        return (
            f"line {line}: timing error: expected {what} in time range {_s(start_us):.6f}~"
            f"{_s(end_us):.6f} sec but it happened at {_s(actual_us):.6f} sec "
            f"(tolerance {_s(tol_us):.6f} sec)"
        )
    if abs(actual_us - start_us) <= tol_us:
        return None
    return (
        f"line {line}: timing error: expected {what} at {_s(start_us):.6f} sec but it happened at "
        f"{_s(actual_us):.6f} sec ({_s(actual_us - start_us):+.6f}); tolerance {_s(tol_us):.6f} sec"
    )


def check_time(
    event: Event,
    expected_start: float,
    expected_end: float | None,
    actual: float,
    *,
    last_expected: float | None = None,
    anchor: float = 0.0,
    tolerance_usecs: int = DEFAULT_TOLERANCE_USECS,
    tolerance_percent: float = DEFAULT_TOLERANCE_PERCENT,
) -> str | None:
    """None if ``event`` happening at ``actual`` matches its resolved time, else a message.

    ``expected_end`` is the upper bound for ranges (ignored otherwise); ``last_expected`` the
    previous event's expected start (None for the first event: fixed tolerance only);
    ``anchor`` only improves the wording of relative-range errors.
    """
    kind = event.time.kind
    if kind == "range" and expected_end is None:
        raise ValueError("a range event needs expected_end")
    if last_expected is None:
        tol_us = tolerance_usecs
    else:
        tol_us = _us(tolerance(expected_start - last_expected, tolerance_usecs, tolerance_percent))
    end_us = None if expected_end is None else _us(expected_end)
    anchor_us = _us(anchor) if event.time.relative else 0
    return _check(
        describe(event), event.line, kind, _us(expected_start), end_us, _us(actual), tol_us, anchor_us
    )


def check_return_time(
    event: SyscallEvent,
    expected: Expected,
    actual_end: float,
    *,
    tolerance_usecs: int = DEFAULT_TOLERANCE_USECS,
    tolerance_percent: float = DEFAULT_TOLERANCE_PERCENT,
) -> str | None:
    """Check when a blocking syscall returned against ``expected.block_end``."""
    if expected.block_end is None:
        raise ValueError(f"line {event.line}: {event.name}() is not a blocking call")
    tol = tolerance(expected.block_end - expected.start, tolerance_usecs, tolerance_percent)
    return _check(
        "system call return", event.line, "absolute", _us(expected.block_end), None, _us(actual_end),
        _us(tol), 0,
    )  # fmt: skip


def check_first_event(script: Script) -> str | None:
    """packetdrill requires the first event to be at time 0 (absolute 0 or ``+0``)."""
    if not script.events:
        return f"{script.path}: script has no events"
    first = script.events[0]
    if _us(first.time.start) == 0:
        return None
    return f"{script.path}:{first.line}: first event should be at time 0"


def check_order(last_event: Event, event: Event) -> str | None:
    """packetdrill rejects an absolute time earlier than the previous absolute time."""
    prev, cur = last_event.time, event.time
    absolute = ("absolute", "range")
    if (
        prev.kind in absolute
        and cur.kind in absolute
        and not (prev.relative or cur.relative)
        and _us(cur.start) < _us(prev.start)
    ):
        return (
            f"line {event.line}: time goes backward in script from {prev.start:.6f} sec "
            f"to {cur.start:.6f} sec"
        )
    return None
