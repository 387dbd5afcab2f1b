"""Who a socket event wakes, and with which poll key (Linux ``sk->sk_wq`` and its callbacks).

Linux wakes a socket's wait queue from a few callbacks, each with a *key*: the poll bits the
event may have changed. A sleeping reader or writer re-checks its condition; an epoll item
(``ep_poll_callback``) joins its instance's ready list when the key meets the events it asked
for (a key of 0 meets every item). Sans-IO: the connection only calls the entries it holds; the
drill shim's epoll and the socket API register entries. Writability also depends on
TCP_NOTSENT_LOWAT (:func:`notsent_below_lowat`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from usertcp.tcp.connection import Connection

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


def notsent_below_lowat(conn: Connection, wake: int) -> bool:
    """Linux tcp_stream_memory_free(): ``(notsent_bytes << wake) < tcp_notsent_lowat()`` in u32
    arithmetic, ``wake`` 1 for writability (__sk_stream_is_writeable), 0 for a write opening an
    skb; TCP_NOTSENT_LOWAT, when set, overrides the tcp_notsent_lowat sysctl."""
    lowat = conn.notsent_lowat or conn.config.notsent_lowat
    notsent = conn.snd_buf.end + 1 - max(conn.snd_nxt, conn.snd_max)    # write_seq - snd_nxt
    return notsent <= 0 or ((notsent << wake) & 0xFFFFFFFF) < lowat
