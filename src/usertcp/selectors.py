"""A :class:`selectors.BaseSelector` for usertcp sockets that runs their driver while it waits.

``selectors.DefaultSelector`` works on usertcp sockets too (``fileno()`` is an eventfd that
mirrors readiness, see :mod:`usertcp.api.readiness`) when a real-time driver runs the stack;
:class:`UsertcpSelector` is the one to use in virtual time: its wait *is* the simulation
(``driver.wait_until``), so ``select(60)`` with nothing to do moves the virtual clock 60 s at
once. It also reports true writability (the eventfd behind ``fileno()`` mirrors reading only).
"""

from __future__ import annotations

import errno
import selectors
from typing import Any

from usertcp.api.constants import os_error
from usertcp.api.host import check_timeout
from usertcp.api.readiness import socket_for_fd
from usertcp.api.socket_core import SocketCore

__all__ = ["UsertcpSelector"]


class UsertcpSelector(selectors._BaseSelectorImpl):
    """Selects among usertcp sockets (or objects whose ``fileno()`` is one's); all must be run
    by one driver. Registering anything else raises ValueError."""

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        key = super().register(fileobj, events, data)
        sock = socket_for_fd(key.fd)
        if sock is None:
            super().unregister(fileobj)
            raise ValueError(f"{fileobj!r} is not a usertcp socket")
        keys = [k for k in self.get_map().values() if k is not key]
        if keys and _socket_of(keys[0]).host.driver is not sock.host.driver:
            super().unregister(fileobj)
            raise ValueError("UsertcpSelector: all sockets must be run by the same driver")
        return key

    def _ready(self) -> list[tuple[selectors.SelectorKey, int]]:
        out = []
        for key in list(self.get_map().values()):
            sock = socket_for_fd(key.fd)
            if sock is None:
                continue            # closed since it was registered (epoll forgets it too)
            events = 0
            if key.events & selectors.EVENT_READ and sock.poll_readable():
                events |= selectors.EVENT_READ
            if key.events & selectors.EVENT_WRITE and sock.poll_writable():
                events |= selectors.EVENT_WRITE
            if events:
                out.append((key, events))
        return out

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        tmo = None if timeout is None else max(check_timeout(max(timeout, 0.0)) or 0.0, 0.0)
        keys = list(self.get_map().values())
        if not keys:
            return []
        drv = _socket_of(keys[0]).host.driver
        with drv.lock:
            ready = self._ready()
        if ready or tmo == 0.0:
            return ready
        woke = drv.wait_until(lambda: bool(self._ready()), tmo)
        hosts = {id(s.host): s.host for k in keys if (s := socket_for_fd(k.fd)) is not None}
        for host in hosts.values():
            host.readiness.sync()          # the simulation ran: every mirrored fd catches up
        if not woke and tmo is None:
            raise os_error(errno.EDEADLK, "select() can never return: the driver has no event left")
        with drv.lock:
            return self._ready()


def _socket_of(key: selectors.SelectorKey) -> SocketCore:
    sock = socket_for_fd(key.fd)
    if sock is None:
        raise ValueError(f"{key.fileobj!r} is no longer an open usertcp socket")
    return sock
