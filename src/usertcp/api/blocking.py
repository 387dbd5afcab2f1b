"""The blocking model of usertcp sockets: try an operation under the driver's lock; if it would
block, wait for it to become possible (``driver.wait_until``), within the socket's timeout.

A virtual-time driver runs the whole simulation inside that wait, so timeouts are virtual
seconds; a wait nothing in the simulation can ever end raises ``OSError(EDEADLK)`` rather than
hang. A real-time driver sleeps the calling thread until its I/O thread makes it possible.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import Final, TypeVar

from usertcp.api.constants import os_error
from usertcp.api.host import SocketDriver
from usertcp.api.readiness import mirrors_exist, sync_driver

__all__ = ["BLOCK", "Blocked", "run_blocking"]

_T = TypeVar("_T")
# Re-attempts allowed after ``wait_until`` said "ready" without the clock moving: a guard
# against a ready predicate that disagrees with its operation, which would spin forever.
_MAX_SPURIOUS: Final = 1000


class Blocked:
    """Returned by an operation's attempt when it would block."""


BLOCK: Final = Blocked()


def run_blocking(driver: SocketDriver, attempt: Callable[[float], _T | Blocked], ready: Callable[[], bool],
                 timeout: float | None, *, eagain: int = errno.EAGAIN) -> _T:
    """Run ``attempt(now)`` under the lock until it stops returning :data:`BLOCK`.

    ``ready()`` must be true exactly when ``attempt`` would no longer block. ``timeout`` 0.0
    is non-blocking (``BlockingIOError(eagain)``), None waits for ever, else ``TimeoutError``.
    """
    deadline: float | None = None
    spurious = 0
    last_now = -1.0
    while True:
        with driver.lock:
            now = driver.now()
            result = attempt(now)
        if not isinstance(result, Blocked):
            return result
        if timeout == 0.0:
            raise BlockingIOError(eagain, os.strerror(eagain))
        if now == last_now:
            spurious += 1
            if spurious > _MAX_SPURIOUS:
                raise RuntimeError("usertcp socket: ready() and the operation disagree (bug)")
        else:
            spurious = 0
        last_now = now
        remaining: float | None = None
        if timeout is not None:
            if deadline is None:
                deadline = now + timeout
            remaining = deadline - now
            if remaining <= 0:
                raise TimeoutError("timed out")
        woke = driver.wait_until(ready, remaining)
        if mirrors_exist():
            sync_driver(driver)      # the driver ran: every socket's eventfds catch up
        if not woke:
            if remaining is None:
                raise os_error(errno.EDEADLK, "blocking call can never complete: the driver has no "
                                              "event left (single-threaded virtual time? use "
                                              "non-blocking sockets and usertcp.selectors)")
            raise TimeoutError("timed out")
