"""Who a socket event wakes, and with which poll key (Linux ``sk->sk_wq`` and its callbacks).

Linux wakes a socket's wait queue from a few callbacks, each with a *key*: the poll bits the
event may have changed. A sleeping reader or writer re-checks its condition; an epoll item
(``ep_poll_callback``) joins its instance's ready list when the key meets the events it asked
for (a key of 0 meets every item). Sans-IO: the connection only calls the entries it holds; the
drill shim's epoll and the socket API register entries.
"""

from __future__ import annotations

from typing import Final

# include/uapi/linux/eventpoll.h (the POLL* values of the same bits are equal).
EPOLLIN: Final = 0x001
EPOLLPRI: Final = 0x002
EPOLLOUT: Final = 0x004
EPOLLERR: Final = 0x008
EPOLLHUP: Final = 0x010
EPOLLRDNORM: Final = 0x040
EPOLLRDBAND: Final = 0x080
EPOLLWRNORM: Final = 0x100
EPOLLWRBAND: Final = 0x200
EPOLLRDHUP: Final = 0x2000

# The keys of the wake-ups (net/core/sock.c, net/core/stream.c).
KEY_READABLE: Final = EPOLLIN | EPOLLPRI | EPOLLRDNORM | EPOLLRDBAND   # sock_def_readable
KEY_WRITABLE: Final = EPOLLOUT | EPOLLWRNORM | EPOLLWRBAND             # sk_stream_write_space
KEY_ERROR: Final = EPOLLERR                                           # sock_def_error_report
KEY_ANY: Final = 0                       # sock_def_wakeup (sk_state_change): every waiter
