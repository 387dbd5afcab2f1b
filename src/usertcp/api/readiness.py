"""Readiness of usertcp sockets: ``select``, and real descriptors that mirror it.

A usertcp socket has no kernel object, so ``fileno()`` hands out an **eventfd** whose
readability mirrors the socket's: readable exactly when ``recv``/``accept`` would not block.
A second eventfd mirrors writability (it is *readable* when ``send`` would not block), for
event loops that wait for readability only (trio's ``wait_readable``). The descriptors exist
only once asked for, and close with the socket.

Who keeps them in step: every socket call re-syncs its own socket; every usertcp wait
(a blocking call, :func:`select`, :class:`usertcp.selectors.UsertcpSelector`) re-syncs all
those its driver runs, once it has run the driver; and for a threaded driver (real-time, TUN)
a watcher thread re-syncs them after every batch of events, so ``selectors.DefaultSelector``,
``socketserver`` and trio can wait on them from any thread. With a virtual-time driver only
usertcp's own waits move time: a standard selector sees what the last usertcp wait left (and
sleeps in real time while the simulation stands still), so wait with
:class:`~usertcp.selectors.UsertcpSelector`, or run trio with
:class:`usertcp.triosocket.VirtualClock`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from usertcp.api.constants import os_error
from usertcp.api.host import SocketDriver, check_timeout
from usertcp.net.driver import VirtualTimeDriver

if TYPE_CHECKING:
    from usertcp.api.socket_core import SocketCore

__all__ = ["ReadinessMirror", "mirrors_exist", "select", "socket_for_fd", "sync_driver"]

# Every live mirrored descriptor -> its socket: how a selector finds the socket behind an fd.
_SOCKETS_BY_FD: dict[int, SocketCore] = {}
_REGISTRY_LOCK = threading.Lock()


def socket_for_fd(fd: int) -> SocketCore | None:
    """The usertcp socket whose ``fileno()`` is ``fd`` (None: not one of ours)."""
    return _SOCKETS_BY_FD.get(fd)


def mirrors_exist() -> bool:
    """Whether any socket has handed out descriptors (else there is nothing to sync)."""
    return bool(_SOCKETS_BY_FD)


def sync_driver(driver: SocketDriver) -> bool:
    """Re-sync the descriptors of every socket ``driver`` runs (all its hosts); True on a change.

    What an event loop that runs a virtual-time driver itself calls after moving it
    (:class:`usertcp.triosocket.VirtualClock`).
    """
    with _REGISTRY_LOCK:
        socks = list(_SOCKETS_BY_FD.values())
    changed = False
    for host in {id(s.host): s.host for s in socks if s.host.driver is driver}.values():
        changed |= host.readiness.sync()
    return changed


class _Pair:
    """The two eventfds of one socket and the readiness each currently shows."""

    __slots__ = ("read_fd", "readable", "write_fd", "writable")

    def __init__(self) -> None:
        flags = os.EFD_NONBLOCK | os.EFD_CLOEXEC
        self.read_fd = os.eventfd(0, flags)
        self.write_fd = os.eventfd(0, flags)
        self.readable = False
        self.writable = False


def _show(fd: int, was: bool, now: bool) -> None:
    if now and not was:
        os.eventfd_write(fd, 1)
    elif was and not now:
        with contextlib.suppress(BlockingIOError):   # already drained
            os.eventfd_read(fd)


class ReadinessMirror:
    """The eventfds of one host's sockets, kept in step with the sockets' readiness."""

    def __init__(self, driver: SocketDriver) -> None:
        self._driver = driver
        self._pairs: dict[SocketCore, _Pair] = {}
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None

    def fds(self, sock: SocketCore) -> tuple[int, int]:
        """(readable fd, writable fd) of ``sock``, created on first use."""
        with self._lock:
            pair = self._pairs.get(sock)
            if pair is None:
                pair = self._pairs[sock] = _Pair()
                with _REGISTRY_LOCK:
                    _SOCKETS_BY_FD[pair.read_fd] = sock
                self._start_watcher()
        self.sync_socket(sock)
        return pair.read_fd, pair.write_fd

    def has(self, sock: SocketCore) -> bool:
        return sock in self._pairs

    def sync_socket(self, sock: SocketCore) -> bool:
        """Bring ``sock``'s descriptors in step; True when one of them changed."""
        pair = self._pairs.get(sock)
        if pair is None:
            return False
        with self._driver.lock, self._lock:
            readable, writable = sock.poll_readiness()
            changed = (readable, writable) != (pair.readable, pair.writable)
            _show(pair.read_fd, pair.readable, readable)
            _show(pair.write_fd, pair.writable, writable)
            pair.readable, pair.writable = readable, writable
        return changed

    def sync(self) -> bool:
        """Re-sync every socket; True when any descriptor changed."""
        changed = False
        for sock in list(self._pairs):
            changed |= self.sync_socket(sock)
        return changed


    def discard(self, sock: SocketCore) -> None:
        """Close ``sock``'s descriptors (the socket is closing)."""
        with self._lock:
            pair = self._pairs.pop(sock, None)
        if pair is None:
            return
        with _REGISTRY_LOCK:
            _SOCKETS_BY_FD.pop(pair.read_fd, None)
        os.close(pair.read_fd)
        os.close(pair.write_fd)
        if not self._pairs:
            self._driver.kick()          # lets the watcher see it has nothing left to do

    def _start_watcher(self) -> None:
        if isinstance(self._driver, VirtualTimeDriver):
            return            # only usertcp's own waits move virtual time: nothing to watch
        if self._watcher is not None and self._watcher.is_alive():
            return
        self._watcher = threading.Thread(target=self._watch, name="usertcp-readiness", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        # A threaded driver's wait_until (RealTimeDriver, TunDriver) evaluates the predicate
        # after each batch of events: the one place to see every state change without a hook
        # in the driver.
        def step() -> bool:
            self.sync()
            return not self._pairs

        try:
            self._driver.wait_until(step, None)
        except RuntimeError:
            return       # the driver stopped


def select(rlist: Iterable[SocketCore], wlist: Iterable[SocketCore], xlist: Iterable[SocketCore],
           timeout: float | None = None) -> tuple[list[SocketCore], list[SocketCore], list[SocketCore]]:
    """``select.select`` for usertcp sockets, run by their driver.

    A socket is readable when ``recv``/``accept`` would not block, writable when ``send``
    would not block (a finished or failed ``connect`` included). ``xlist`` never reports
    anything (no urgent data). All sockets must share one driver; in virtual time, the wait
    runs the simulation.
    """
    rs, ws, xs = list(rlist), list(wlist), list(xlist)
    socks: Sequence[SocketCore] = rs + ws + xs
    if not socks:
        raise ValueError("select() needs at least one socket")
    drv = socks[0].host.driver
    if any(s.host.driver is not drv for s in socks):
        raise ValueError("select(): all sockets must be run by the same driver")
    tmo = check_timeout(timeout)

    def poll() -> tuple[list[SocketCore], list[SocketCore], list[SocketCore]]:
        return [s for s in rs if s.poll_readable()], [s for s in ws if s.poll_writable()], []

    with drv.lock:
        got = poll()
    if got[0] or got[1] or tmo == 0.0:
        return got

    def ready() -> bool:
        return any(s.poll_readable() for s in rs) or any(s.poll_writable() for s in ws)

    woke = drv.wait_until(ready, tmo)
    if mirrors_exist():                    # the simulation ran: every mirrored fd catches up
        sync_driver(drv)
    if not woke and tmo is None:
        raise os_error(errno.EDEADLK, "select() can never return: the driver has no event left")
    with drv.lock:
        return poll()
