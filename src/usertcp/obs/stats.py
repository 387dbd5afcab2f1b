"""The stats file: a JSON snapshot of one stack that ``usertcp ss``/``nstat --stats-file`` read.

Format (one JSON object, UTF-8, rewritten atomically: temp file + ``os.replace``)::

    {
      "format": "usertcp-stats",      # constant
      "version": 1,
      "stack": "server",              # Stack.name
      "addresses": ["10.0.0.2"],
      "time": 12.5,                   # the stack's clock (driver.now()) at the snapshot
      "wall_time": 1767225600.0,      # time.time() at the snapshot
      "counters": {"TcpInSegs": 10},  # nstat names -> value (non-zero ones)
      "connections": [ {...}, ... ]   # ss_rows(stack): listeners first, then connections
    }

A file may instead hold ``{"format": "usertcp-stats", "version": 1, "stacks": [snapshot, ...]}``
for several stacks. Only ``counters`` is required: the bare ``{"counters": {...},
"connections": [...]}`` is accepted, and readers ignore keys they do not know.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from typing import Any

from usertcp.obs.counters import nstat
from usertcp.obs.ss import ss_rows
from usertcp.tcp.stack import Stack

FORMAT = "usertcp-stats"
VERSION = 1


def stats_snapshot(stack: Stack, *, now: float | None = None) -> dict[str, Any]:
    """The snapshot object for ``stack`` (see the module docstring)."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "stack": stack.name,
        "addresses": [stack.fmt_addr(a) for a in stack.addresses],
        "time": stack.now if now is None else now,
        "wall_time": time.time(),
        "counters": nstat(stack),
        "connections": ss_rows(stack),
    }


def write_stats_file(path: str | os.PathLike[str], *stacks: Stack, now: float | None = None) -> None:
    """Atomically (re)write ``path`` with a snapshot of one stack (or several)."""
    if not stacks:
        raise ValueError("write_stats_file needs at least one stack")
    snaps = [stats_snapshot(s, now=now) for s in stacks]
    obj: dict[str, Any] = snaps[0] if len(snaps) == 1 else {"format": FORMAT, "version": VERSION,
                                                            "stacks": snaps}
    write_json_atomically(path, obj)


def write_json_atomically(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as JSON to a temporary file next to ``path``, then rename it over ``path``:
    a reader sees the old file or the new one, never half of one."""
    directory = os.path.dirname(os.fspath(path)) or "."
    fd, tmp = tempfile.mkstemp(prefix=".stats-", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_stats_file(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The snapshots in a stats file (a list even for one stack); ValueError if it is not one."""
    with open(path, encoding="utf-8") as f:
        try:
            obj = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{os.fspath(path)}: not JSON ({e})") from None
    # The bare form {"counters": {...}, "connections": [...]} (no "format" key) is accepted too.
    if not isinstance(obj, dict) or obj.get("format", FORMAT) != FORMAT \
            or ("stacks" not in obj and not isinstance(obj.get("counters"), dict)):
        raise ValueError(f"{os.fspath(path)}: not a usertcp stats file")
    if obj.get("version", 0) > VERSION:
        raise ValueError(f"{os.fspath(path)}: stats format version {obj['version']} is newer than {VERSION}")
    snaps = obj.get("stacks", [obj])
    for s in snaps:
        s.setdefault("counters", {})
        s.setdefault("connections", [])
    return list(snaps)


class StatsFileWriter:
    """Rewrites a stats file at most every ``interval`` seconds; for long-running stacks.

    Call ``maybe_write(now)`` from the driver loop (cheap when not due); ``write(now)``
    forces one. ``usertcp serve --stats-file PATH`` is meant to use it.
    """

    def __init__(self, path: str | os.PathLike[str], *stacks: Stack, interval: float = 1.0) -> None:
        self.path = path
        self.stacks = stacks
        self.interval = interval
        self._next = float("-inf")
        self.writes = 0

    def maybe_write(self, now: float) -> bool:
        if now < self._next:
            return False
        self.write(now)
        return True

    def write(self, now: float | None = None) -> None:
        write_stats_file(self.path, *self.stacks, now=now)
        self.writes += 1
        if now is not None:
            self._next = now + self.interval
