"""Application callbacks run guarded: a failing one costs its own connection, never the stack.

``on_readable``, ``on_writable`` and ``on_accept_ready`` are application code called from
inside the stack's packet and timer processing. An exception escaping one of them would
unwind through ``Stack.receive`` or ``Stack.handle_timer`` and end the driver's loop for
every connection. Here it is logged with its traceback, counted (``UsertcpAppCallbackErrors``)
and the connection is queued for a reset, which the stack sends once the event that was
being processed is complete (so no half-processed segment is left behind).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from usertcp.tcp.connection import Connection
    from usertcp.tcp.stack import Listener

log = logging.getLogger("usertcp.app")


def notify(conn: Connection, callback: Callable[[Connection], None]) -> None:
    """Call an application callback on ``conn``; a failure resets ``conn`` only."""
    try:
        callback(conn)
    except Exception:
        log.exception("application callback %r failed on %r: resetting that connection",
                      callback, conn)
        conn.stack.app_failed(conn)


def notify_listener(listener: Listener, conn: Connection) -> None:
    """``on_accept_ready`` for ``conn``'s arrival; a failure resets ``conn`` only."""
    callback = listener.on_accept_ready
    if callback is None:
        return
    try:
        callback(listener)
    except Exception:
        log.exception("accept callback %r failed on %r: resetting that connection", callback, conn)
        conn.stack.app_failed(conn)
