"""``usertcp bench apps``: real asyncio servers on usertcp over TUN against the same on the kernel.

Needs root, /dev/net/tun and the test extras (uvicorn, aiosmtpd). Everything runs in network
namespaces made here and removed afterwards. One namespace holds the load generator; the
server under test is a subprocess (``python -m usertcp.bench.apps serve ...``) either

* **usertcp**: uvicorn on a :class:`usertcp.aio.UsertcpEventLoop` whose stack runs on a TUN
  device in the load generator's namespace, or
* **kernel**: the same uvicorn app on the standard asyncio loop, in a second namespace
  joined by a veth pair (so both servers sit one network device away from the client).

HTTP/1.1 requests per second come from ``wrk`` (Debian package ``wrk``) when it is
installed, else from a bounded Python load generator (``generator`` says which), for
``duration`` seconds each, with keep-alive (``connections`` connections) and without
(``Connection: close``, one request per connection). ``ratio_*`` is usertcp's rate over the
kernel's, measured in the same run. ``profile`` is a cProfile summary (top functions by own
time) of a separate, profiled keep-alive run of the usertcp server: profiling slows it, so
it is not the measured run.

The connection setup rate (connect, read the banner, close) is measured against an SMTP
server (aiosmtpd) on usertcp over TUN, once with the greeting sent by the application after
accept and once preloaded on the listening socket (MSG_PRELOAD), from a Python client that
keeps ``setup_concurrency`` connections in flight for ``duration`` seconds.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, AnyStr

from aiosmtpd.smtp import SMTP
from aiosmtpd.smtp import __ident__ as smtp_ident

DEV = "utapps0"
PEER, US = "10.78.0.1", "10.78.0.2"            # kernel side of the TUN, usertcp's address
VETH_CLIENT, VETH_SERVER = "10.78.1.1", "10.78.1.2"
HTTP_PORT, SMTP_PORT = 8000, 2525
SMTP_HOSTNAME = "mail.bench.test"

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


# ----------------------------------------------------------------------------- the apps


async def asgi_app(scope: Scope, receive: Receive, send: Send) -> None:
    """A small ASGI app: ``/hello/NAME``, ``/json`` and ``/echo`` (the request body back)."""
    if scope["type"] != "http":
        return
    path: str = scope["path"]
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    if path.startswith("/hello/"):
        payload, ctype = f"hello {path[7:]}\n".encode(), b"text/plain"
    elif path == "/json":
        payload, ctype = json.dumps({"path": path, "method": scope["method"]}).encode(), b"application/json"
    elif path == "/echo":
        payload, ctype = body, b"application/octet-stream"
    else:
        payload, ctype = b"hello, world\n", b"text/plain"
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", ctype), (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})


def smtp_greeting(hostname: str) -> bytes:
    """The greeting aiosmtpd sends (``220 HOST IDENT``), as bytes to preload on the listener."""
    return f"220 {hostname} {smtp_ident}\r\n".encode()


class PreloadedSMTP(SMTP):
    """aiosmtpd's SMTP server when the listening socket already sent its greeting.

    With MSG_PRELOAD the stack sends the greeting right after the handshake, so the
    application must not send it again (as the seed's patched Exim does not). This is
    aiosmtpd unmodified except for that first reply, dropped in its public ``push``.
    """

    _greeting_skipped = False

    async def push(self, status: AnyStr) -> None:
        if not self._greeting_skipped:
            self._greeting_skipped = True
            text = status.decode() if isinstance(status, bytes) else status
            if text.startswith("220 "):
                return
        await super().push(status)
