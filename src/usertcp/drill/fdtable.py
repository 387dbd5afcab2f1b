"""The drill shim's file descriptor numbers: the kernel's and the script's.

The kernel gives a new file the lowest free descriptor (``fs/file.c`` alloc_fd; the shim's
process holds 0-2, so from 3), whatever the script expects.  packetdrill never asks for a
number: a call that makes a descriptor (socket, accept, epoll_create, open, pipe) passes its
check with any descriptor (``run_system_call.c`` end_syscall's CHECK_FD), and from then on the
script's number names the live one (``struct fd_state`` script_fd -> live_fd).  A script
number whose descriptor is open may name a newer one: packetdrill searches its list newest
first, so the newest wins and the older file stays open, out of the script's reach until the
newer one is closed (find_by_script_fd skips closed entries).

A script number that names nothing maps to no descriptor (-1): the calls fail with EBADF, as
the kernel answers a closed descriptor (packetdrill itself stops with "unable to find fd with
script fd N"; the shim's own tests use the errno).
"""

from __future__ import annotations

__all__ = ["FIRST_FD", "ScriptFds"]

FIRST_FD = 3          # 0-2 are stdin, stdout, stderr


class ScriptFds:
    """packetdrill's map of script fd numbers to live descriptors (newest last)."""

    __slots__ = ("_live", "_names")

    def __init__(self) -> None:
        self._live: dict[int, list[int]] = {}   # script fd -> live fds, newest last
        self._names: dict[int, int] = {}        # live fd -> its script fd

    def live(self, script_fd: int) -> int:
        """The live descriptor the script's number names, -1 for none."""
        stack = self._live.get(script_fd)
        return stack[-1] if stack else -1

    def name(self, live_fd: int, script_fd: int) -> None:
        """A new descriptor takes the script's number (the newest one with it wins)."""
        self._live.setdefault(script_fd, []).append(live_fd)
        self._names[live_fd] = script_fd

    def forget(self, live_fd: int) -> None:
        """The descriptor was closed: its script number names the previous one again."""
        script_fd = self._names.pop(live_fd, None)
        if script_fd is None:
            return
        stack = self._live[script_fd]
        stack.remove(live_fd)
        if not stack:
            del self._live[script_fd]

