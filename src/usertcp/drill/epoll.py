"""epoll in the drill shim: ``epoll_create``/``epoll_create1``/``epoll_ctl``/``epoll_wait``, as
Linux ``fs/eventpoll.c`` does them over TCP sockets.

An item waits on its socket's wait queue (``Connection.wait_entries``): a wake-up whose key
meets the item's events (or carries no key) puts the item on its instance's ready list
(``ep_poll_callback``); a disabled one-shot item ignores wake-ups. ``epoll_wait`` takes the
ready list, polls each item (``ep_item_poll``: the socket's ``tcp_poll`` mask, here
:meth:`Syscalls.revents`, masked with the item's events), reports those with events, disarms a
one-shot item (``EPOLLONESHOT``), and puts a level-triggered one back on the list (no
``EPOLLET``). ``EPOLL_CTL_ADD``/``MOD`` always add EPOLLERR|EPOLLHUP and poll the item once
(``ep_insert``/``ep_modify``), so an item that is ready already is on the list at once.
``EPOLLEXCLUSIVE`` only changes which of several waiters wake (one epoll instance per socket
here), but its rules are checked (ADD only, not with EPOLLONESHOT, only the allowed events).

Items of sockets without a connection yet (or listeners) have no wait queue to join: they are
polled at every ``epoll_wait`` (level behaviour). An item whose fd was closed is dropped, as
Linux's ``eventpoll_release`` does on the last close.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING, Final

from usertcp.drill.ast import Expr, Int, List, Struct
from usertcp.drill.defaults import SYMBOLS
from usertcp.drill.profile import Unsupported
from usertcp.drill.sysargs import value
from usertcp.drill.sysbase import Mismatch, Sock, SyscallGen, SysError

if TYPE_CHECKING:
    from usertcp.drill.syscalls import Syscalls
    from usertcp.tcp.connection import Connection

__all__ = ["Epoll", "EpollCalls"]

S = SYMBOLS
EPOLLET: Final = S["EPOLLET"]
EPOLLONESHOT: Final = S["EPOLLONESHOT"]
EPOLLEXCLUSIVE: Final = S["EPOLLEXCLUSIVE"]
EPOLLWAKEUP: Final = 1 << 29
EP_PRIVATE_BITS: Final = EPOLLWAKEUP | EPOLLONESHOT | EPOLLET | EPOLLEXCLUSIVE
EPOLLEXCLUSIVE_OK_BITS: Final = (S["EPOLLIN"] | S["EPOLLOUT"] | S["EPOLLERR"] | S["EPOLLHUP"] | EPOLLWAKEUP
                                 | EPOLLET | EPOLLEXCLUSIVE)
_DATA_FIELDS: Final = ("fd", "ptr", "u32", "u64")


class _Item:
    """One epitem: the watched socket, its events and data, and whether it is on the ready list."""

    __slots__ = ("conn", "data", "epoll", "events", "fd", "linked", "sock")

    def __init__(self, epoll: Epoll, fd: int, sock: Sock, events: int, data: int) -> None:
        self.epoll = epoll
        self.fd = fd
        self.sock = sock
        self.events = events
        self.data = data
        self.linked = False
        self.conn: Connection | None = None     # the connection whose wait queue we joined

    def wake(self, key: int) -> None:
        """ep_poll_callback(): join the ready list unless disabled or the key misses our events."""
        if not self.events & ~EP_PRIVATE_BITS:
            return
        if key and not key & self.events:
            return
        self.epoll.link(self)

    def attach(self) -> None:
        """Join the socket's wait queue once it has a connection."""
        conn = self.sock.conn
        if conn is self.conn:
            return
        self.detach()
        if conn is not None:
            conn.wait_entries.append(self.wake)
            self.conn = conn

    def detach(self) -> None:
        if self.conn is not None:
            entries = self.conn.wait_entries
            for i, entry in enumerate(entries):
                if entry == self.wake:
                    del entries[i]
                    break
            self.conn = None


class Epoll:
    """One epoll instance (struct eventpoll): its items and its ready list."""

    __slots__ = ("items", "ready")

    def __init__(self) -> None:
        self.items: dict[int, _Item] = {}
        self.ready: list[_Item] = []

    def link(self, item: _Item) -> None:
        if not item.linked:
            item.linked = True
            self.ready.append(item)

    def remove(self, fd: int) -> None:
        item = self.items.pop(fd)
        item.detach()
        if item.linked:
            item.linked = False
            self.ready.remove(item)

    def close(self) -> None:
        for fd in list(self.items):
            self.remove(fd)


class EpollCalls:
    """The epoll system calls of one shim; epoll instances live in ``Syscalls.files``."""

    def __init__(self, sys: Syscalls) -> None:
        self.sys = sys

    def _epoll(self, expr: Expr) -> Epoll:
        fd = self.sys.live_fd(expr)
        obj = self.sys.files.get(fd)
        if isinstance(obj, Epoll):
            return obj
        raise SysError(errno.EINVAL if obj is not None or fd in self.sys.fds else errno.EBADF)

    def sys_epoll_create(self, args: list[Expr]) -> SyscallGen:
        if value(args[0]) <= 0:
            raise SysError(errno.EINVAL)      # the size hint must be positive
        return self.sys.new_file(Epoll())
        yield  # pragma: no cover

    def sys_epoll_create1(self, args: list[Expr]) -> SyscallGen:
        if value(args[0]) & ~S["EPOLL_CLOEXEC"]:
            raise SysError(errno.EINVAL)
        return self.sys.new_file(Epoll())
        yield  # pragma: no cover

    def sys_epoll_ctl(self, args: list[Expr]) -> SyscallGen:
        ep = self._epoll(args[0])
        op = value(args[1])
        fd = self.sys.live_fd(args[2])            # items are keyed by live descriptor
        sock = self.sys.fds.get(fd)
        if sock is None:
            raise SysError(errno.EINVAL if fd in self.sys.files else errno.EBADF)   # epoll of epoll: no
        events, data = 0, value(args[2])
        if op != S["EPOLL_CTL_DEL"]:
            ev = args[3]
            if not isinstance(ev, Struct):
                raise Unsupported("epoll_ctl() needs an {events=..., fd=...} event")
            events = value(ev.get("events") or Int(0, "0")) & 0xFFFFFFFF
            for name in _DATA_FIELDS:
                field = ev.get(name)
                if field is not None:
                    data = value(field)
            if events & EPOLLEXCLUSIVE and (events & ~EPOLLEXCLUSIVE_OK_BITS or op != S["EPOLL_CTL_ADD"]):
                raise SysError(errno.EINVAL)   # do_epoll_ctl: EXCLUSIVE only on ADD, few events
        item = ep.items.get(fd)
        if op == S["EPOLL_CTL_ADD"]:
            if item is not None:
                raise SysError(errno.EEXIST)
            item = ep.items[fd] = _Item(ep, fd, sock, events | S["EPOLLERR"] | S["EPOLLHUP"], data)
            item.attach()
            self._poll_once(item)                      # ep_insert
        elif op == S["EPOLL_CTL_MOD"]:
            if item is None:
                raise SysError(errno.ENOENT)
            if item.events & EPOLLEXCLUSIVE:
                raise SysError(errno.EINVAL)
            item.events = events | S["EPOLLERR"] | S["EPOLLHUP"]
            item.data = data
            item.attach()
            self._poll_once(item)                      # ep_modify
        elif op == S["EPOLL_CTL_DEL"]:
            if item is None:
                raise SysError(errno.ENOENT)
            ep.remove(fd)
        else:
            raise SysError(errno.EINVAL)
        return 0
        yield  # pragma: no cover

    def _poll_once(self, item: _Item) -> None:
        if self._mask(item):
            item.epoll.link(item)

    def _mask(self, item: _Item) -> int:
        """ep_item_poll(): the socket's poll mask, limited to the item's events."""
        return self.sys.revents(item.sock, item.events & ~EP_PRIVATE_BITS) & item.events

    def _collect(self, ep: Epoll, maxevents: int) -> list[tuple[int, int]]:
        """ep_send_events(): report up to ``maxevents`` ready items (events, data)."""
        # Items of closed fds go (eventpoll_release); sockets without a wait queue are polled.
        for fd, item in list(ep.items.items()):
            if self.sys.fds.get(fd) is not item.sock:
                ep.remove(fd)
                continue
            item.attach()
            if item.conn is None and item.events & ~EP_PRIVATE_BITS:
                self._poll_once(item)
        out: list[tuple[int, int]] = []
        taken, ep.ready = ep.ready, []
        for i, item in enumerate(taken):
            if len(out) >= maxevents:
                ep.ready.extend(taken[i:])          # the rest stays ready
                break
            item.linked = False
            revents = self._mask(item)
            if not revents:
                continue
            out.append((revents, item.data))
            if item.events & EPOLLONESHOT:
                item.events &= EP_PRIVATE_BITS      # disarmed until EPOLL_CTL_MOD
            elif not item.events & EPOLLET:
                ep.link(item)                       # level-triggered: check again next time
        return out

    def sys_epoll_wait(self, args: list[Expr]) -> SyscallGen:
        ep = self._epoll(args[0])
        maxevents = value(args[2])
        if maxevents <= 0:
            raise SysError(errno.EINVAL)
        timeout_ms = value(args[3])
        now = self.sys.host.now()
        deadline = None if timeout_ms < 0 else now + timeout_ms / 1000.0
        while True:
            got = self._collect(ep, maxevents)
            if got or (deadline is not None and self.sys.host.now() >= deadline):
                _check_events(args[1], got)
                return len(got)
            yield deadline

    sys_epoll_pwait = sys_epoll_wait


def _check_events(want: Expr, got: list[tuple[int, int]]) -> None:
    """The script's expected events: one struct, or a list of them (the reported ones only)."""
    expected = want.items if isinstance(want, List) else [want]
    for i, (events, data) in enumerate(got):
        if i >= len(expected) or not isinstance(expected[i], Struct):
            break
        exp = expected[i]
        assert isinstance(exp, Struct)
        ev = exp.get("events")
        if ev is not None and value(ev) & 0xFFFFFFFF != events:
            raise Mismatch(f"epoll_wait() event {i}: expected events {value(ev) & 0xFFFFFFFF:#x}, "
                           f"actual {events:#x}")
        for name in _DATA_FIELDS:
            field = exp.get(name)
            if field is not None and value(field) != data:
                raise Mismatch(f"epoll_wait() event {i}: expected {name} {value(field)}, actual {data}")
