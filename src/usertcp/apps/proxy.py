"""A forwarding proxy on the object ring: parse the header, forward the body as an object.

One :class:`Forwarder` moves messages from a source connection to a destination
connection; a bidirectional proxy is two of them. Per message: INSPECT copies the
header out (the only bytes the proxy reads), DISCARD drops the header's range,
RECV_OBJECT turns the body into an object, and OBJ_SEND sends the (possibly
rewritten) header as the prefix and the body by reference with SEND_LAST, so the
body is never copied into the proxy.

Framings: ``"length"`` - a 4-byte big-endian body length, then the body;
``"http"`` - an HTTP/1.1 message whose body length is ``Content-Length`` (no
chunked encoding; a message without the header has no body).
"""

from __future__ import annotations

import errno
import itertools
from collections.abc import Callable
from typing import Literal

from usertcp.objects.ops import INSPECT_WAITALL, SEND_LAST, Cqe
from usertcp.objects.ring import Ring
from usertcp.objects.store import Store

Framing = Literal["length", "http"]
MAX_HEADER = 16384
# Messages forwarded and not yet handed to the destination's TCP. A destination that never
# reads would otherwise let the source's messages pile up as objects in the store, whose
# budget every forwarder on it shares; past this the next message is read only once a send
# has completed (counted in ``held``).
MAX_SENDS_IN_FLIGHT = 16

_H_INSPECT, _H_DISCARD, _H_BODY, _H_SEND, _H_COLLECT = range(5)


class ProxyError(Exception):
    pass


def parse_http_header(data: bytes) -> tuple[int, int] | None:
    """(header length incl. the blank line, Content-Length) or None if incomplete."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        if len(data) > MAX_HEADER:
            raise ProxyError("HTTP header too long")
        return None
    head = data[:end + 4]
    clen = 0
    for line in head.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep and name.strip().lower() == b"content-length":
            try:
                clen = int(value.strip())
            except ValueError as e:
                raise ProxyError("bad Content-Length") from e
            if clen < 0:
                raise ProxyError("bad Content-Length")
        elif sep and name.strip().lower() == b"transfer-encoding":
            raise ProxyError("chunked bodies are not supported")
    return end + 4, clen


class Forwarder:
    """Forward framed messages from ``src`` to ``dst`` through ``ring``.

    ``src``/``dst`` are Connections or usertcp sockets. ``rewrite(header) -> header``
    may change the header (it is application memory anyway). Drive it with
    :meth:`poll` (or :meth:`handle` for each CQE of a ring it shares).
    """

    __slots__ = ("store", "ring", "src", "dst", "framing", "rewrite", "sid", "pos", "messages",
                 "body_bytes", "error", "eof", "held", "_ud", "_tags", "_header", "_blen", "_sends",
                 "_held_next")

    def __init__(self, store: Store, ring: Ring, src: object, dst: object, framing: Framing = "length",
                 *, rewrite: Callable[[bytes], bytes] | None = None) -> None:
        self.store = store
        self.ring = ring
        self.src = src
        self.dst = dst
        self.framing = framing
        self.rewrite = rewrite
        self.sid = -1
        self.pos = 0                 # stream offset of the next message
        self.messages = 0
        self.body_bytes = 0
        self.error = 0               # errno that stopped the forwarder, 0 if none
        self.eof = False
        self._ud = itertools.count(1 << 40)   # user_data tags, unlikely to clash on a shared ring
        self._tags: dict[int, int] = {}
        self._header = b""
        self._blen = 0
        self._sends = 0              # OBJ_SENDs not yet completed
        self.held = 0                # times the next message waited for a send to complete
        self._held_next = False
        self._submit(_H_COLLECT, lambda ud: ring.prep_collect(src, ud))

    @property
    def done(self) -> bool:
        return (self.eof or bool(self.error)) and self._sends == 0

    def _submit(self, kind: int, prep: Callable[[int], bool]) -> None:
        ud = next(self._ud)
        self._tags[ud] = kind
        if not prep(ud):
            self.ring.submit()       # SQ full: flush it and retry once
            prep(ud)
        self.ring.submit()

    def _inspect(self, want: int, waitall: bool) -> None:
        self._submit(_H_INSPECT, lambda ud: self.ring.prep_inspect(
            self.sid, self.pos, want, ud, flags=INSPECT_WAITALL if waitall else 0))

    def poll(self) -> int:
        """Handle every completion on the ring that belongs to this forwarder."""
        n = 0
        for cqe in self.ring.reap():
            if self.handle(cqe):
                n += 1
        return n

    def handle(self, cqe: Cqe) -> bool:
        kind = self._tags.pop(cqe.user_data, None)
        if kind is None:
            return False
        try:
            self._handle(kind, cqe)
        except ProxyError:
            self._stop(errno.EPROTO)
        return True

    def _stop(self, err: int) -> None:
        if not self.error:
            self.error = err
        if self.sid >= 0:
            self._submit(-1, lambda ud: self.ring.prep_detach(self.sid, ud))
            self.sid = -1

    def _handle(self, kind: int, cqe: Cqe) -> None:
        res = cqe.res
        if kind == -1:
            return
        if kind == _H_SEND:
            self._sends -= 1
            if res < 0:
                self._stop(-res)
            elif self._held_next and not self.error:
                self._held_next = False
                self._next_message()
            return
        if res < 0:
            self._stop(-res)
            return
        if kind == _H_COLLECT:
            self.sid = res
            self._next_message()
        elif kind == _H_INSPECT:
            data = cqe.data or b""
            if not data:
                self.eof = True      # the source closed between messages
                self._stop(0)
                return
            self._on_header(data)
        elif kind == _H_BODY:
            self._forward(res)

    def _on_header(self, data: bytes) -> None:
        if self.framing == "length":
            if len(data) < 4:
                raise ProxyError("truncated length prefix")
            hlen, blen = 4, int.from_bytes(data[:4], "big")
        else:
            parsed = parse_http_header(data)
            if parsed is None:
                # Incomplete: wait for at least one more byte than we have.
                self._inspect(len(data) + 1, True)
                return
            hlen, blen = parsed
        header = data[:hlen]
        if self.rewrite is not None:
            header = self.rewrite(header)
        self._header = header
        self._blen = blen
        ring, sid, pos = self.ring, self.sid, self.pos
        self._submit(_H_DISCARD, lambda ud: ring.prep_discard(sid, hlen, ud, offset=pos))
        self.pos = pos + hlen + blen
        if blen:
            self._submit(_H_BODY, lambda ud: ring.prep_recv_object(sid, pos + hlen, blen, ud))
        else:
            self._forward(0)

    def _forward(self, handle: int) -> None:
        header = self._header
        rs: list[tuple[int, int, int]] = [(handle, 0, self._blen)] if handle else []
        self._sends += 1
        self._submit(_H_SEND, lambda ud: self.ring.prep_obj_send(
            self.dst, rs, ud, prefix=header, flags=SEND_LAST if handle else 0))
        self.messages += 1
        self.body_bytes += rs[0][2] if rs else 0
        if self._sends >= MAX_SENDS_IN_FLIGHT:
            self._held_next = True       # read on when a send completes (_handle)
            self.held += 1
            return
        self._next_message()

    def _next_message(self) -> None:
        self._inspect(4 if self.framing == "length" else MAX_HEADER, self.framing == "length")


def pump(ring: Ring, forwarders: list[Forwarder]) -> int:
    """Dispatch every ready completion of a ring shared by several forwarders."""
    n = 0
    for cqe in ring.reap():
        for f in forwarders:
            if f.handle(cqe):
                n += 1
                break
    return n
