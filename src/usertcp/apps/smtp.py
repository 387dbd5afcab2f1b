"""A small SMTP server (RFC 5321) on the usertcp socket API, with a preloaded greeting.

The ``220`` greeting is written once to the listening socket with ``MSG_PRELOAD``,
so the stack sends it on every connection by itself: after the 3rd ACK, or inside
the SYN-ACK for a TCP Fast Open client with a valid cookie. The application only
wakes up when the client has something to say.

Enough of the protocol for ``smtplib``: EHLO/HELO, MAIL FROM, RCPT TO, DATA (with
dot-unstuffing, RFC 5321 §4.5.2), RSET, NOOP, QUIT. Messages are kept in
``SmtpServer.messages``. :class:`SmtpSession` is the sans-IO protocol; the server
runs sessions over non-blocking sockets and ``usertcp.api.sockets.select``, so it
works with either driver (call :meth:`SmtpServer.poll` in a loop, or
:meth:`SmtpServer.serve` on a thread with the real-time driver).
"""

from __future__ import annotations

import errno
import re
import threading
from dataclasses import dataclass, field

from usertcp.api import sockets
from usertcp.api.sockets import Host, Socket

__all__ = ["DataPool", "Message", "SmtpServer", "SmtpSession", "greeting_line"]

MAX_COMMAND_LINE = 512     # RFC 5321 §4.5.3.1.4, CRLF included
MAX_TEXT_LINE = 1000       # §4.5.3.1.6
MAX_MESSAGE = 10 * 1024 * 1024
# Reply bytes one session may have waiting to be sent. A pipelining client (RFC 2920) that
# never reads its replies would otherwise grow them without bound (and EHLO answers 8 bytes
# with 80): past this the session's lines wait unprocessed and the session is not read until
# the replies drain, as a server whose write blocks stops reading; counted in
# ``SmtpServer.reply_backlog_full``.
MAX_REPLY_BACKLOG = 64 << 10
# Message bytes all sessions of one server may hold while their DATA is still arriving: each
# message is bounded by MAX_MESSAGE, but many sessions in DATA at once would not be. Past it a
# message is refused at its end with 452 (RFC 5321 §4.2.5), counted in ``DataPool.refused``.
MAX_DATA_IN_PROGRESS = 64 << 20
_PATH = re.compile(r"^\s*<([^<>]*)>(.*)$")
_REPLY_CODE = re.compile(rb"^[2-5][0-9][0-9](?:[ -]|$)")


def greeting_line(text: bytes) -> bytes:
    """``text`` as an SMTP greeting (RFC 5321 §4.2): every line ends in CRLF (a bare LF
    becomes one, a missing one is added), and ``220 `` goes in front when the text has
    no reply code. A client such as smtplib reads the greeting up to its CRLF: without it,
    it waits forever."""
    lines = text.replace(b"\r\n", b"\n").rstrip(b"\n").split(b"\n")
    if not _REPLY_CODE.match(lines[0]):
        lines[0] = b"220 " + lines[0]
    return b"".join(line + b"\r\n" for line in lines)


class DataPool:
    """Message bytes a server's sessions hold while DATA arrives (MAX_DATA_IN_PROGRESS)."""

    __slots__ = ("limit", "refused", "used")

    def __init__(self, limit: int = MAX_DATA_IN_PROGRESS) -> None:
        self.limit = limit
        self.used = 0
        self.refused = 0        # messages refused with 452 because the pool was full

    def take(self, n: int) -> bool:
        if self.used + n > self.limit:
            return False
        self.used += n
        return True


@dataclass
class Message:
    mail_from: str
    rcpt_to: list[str]
    data: bytes                # the message as received, dot-unstuffed, lines CRLF-terminated
    helo: str = ""


@dataclass
class SmtpSession:
    """One SMTP conversation: ``feed(bytes) -> bytes`` of replies; ``closed`` after QUIT."""

    hostname: str
    messages: list[Message] = field(default_factory=list)
    helo: str = ""
    mail_from: str | None = None
    rcpt_to: list[str] = field(default_factory=list)
    in_data: bool = False
    closed: bool = False
    pool: DataPool | None = None   # shared by a server's sessions
    _buf: bytearray = field(default_factory=bytearray)
    _data: bytearray = field(default_factory=bytearray)
    _refuse: bytes = b""           # the reply for "." when the message could not be kept

    def greeting(self) -> bytes:
        return f"220 {self.hostname} ESMTP usertcp\r\n".encode()

    def feed(self, data: bytes, room: int = 1 << 62) -> bytes:
        """Take received bytes, return the replies to send (pipelining is fine, RFC 2920).
        Once ``room`` bytes of replies are out, later lines wait in the session
        (:attr:`waiting`) for a later ``feed(b"", room)``."""
        self._buf += data
        out: list[bytes] = []
        size = 0
        while not self.closed and size < room:
            end = self._buf.find(b"\n")
            if end < 0:
                limit = MAX_TEXT_LINE if self.in_data else MAX_COMMAND_LINE
                if len(self._buf) > limit:
                    self._buf.clear()
                    out.append(b"500 5.5.0 Line too long\r\n")
                break
            line = bytes(self._buf[:end + 1])
            del self._buf[:end + 1]
            reply = self._data_line(line) if self.in_data else self._command(line)
            out.append(reply)
            size += len(reply)
        return b"".join(out)

    @property
    def waiting(self) -> bool:
        """A complete line waits to be processed: :meth:`feed` ran out of ``room``."""
        return not self.closed and b"\n" in self._buf

    def _data_line(self, line: bytes) -> bytes:
        body = line.rstrip(b"\r\n")
        if body == b".":
            self.in_data = False
            refuse = self._refuse
            if not refuse:
                msg = Message(self.mail_from or "", list(self.rcpt_to), bytes(self._data), self.helo)
                self.messages.append(msg)
            self._reset()
            return refuse or f"250 2.0.0 Ok: queued as {len(self.messages)}\r\n".encode()
        if body.startswith(b"."):
            body = body[1:]                # RFC 5321 §4.5.2 transparency
        if self._refuse:
            return b""                     # read on to the end; refused at "."
        n = len(body) + 2
        if len(self._data) + n > MAX_MESSAGE:
            self._refuse = b"552 5.3.4 Message size exceeds fixed maximum message size\r\n"   # §4.5.3.1.10
        elif self.pool is not None and not self.pool.take(n):
            self._refuse = b"452 4.3.1 Insufficient system storage\r\n"   # §4.2.5
            self.pool.refused += 1
        else:
            self._data += body + b"\r\n"
            return b""
        self._release()
        return b""

    def _release(self) -> None:
        """Give the message bytes held back to the pool and drop them."""
        if self.pool is not None:
            self.pool.used -= len(self._data)
        self._data = bytearray()

    def _reset(self) -> None:
        self.mail_from = None
        self.rcpt_to = []
        self._release()
        self._refuse = b""

    def discard(self) -> None:
        """The connection is gone: a message still arriving is dropped, its bytes freed."""
        self.in_data = False
        self._reset()

    def _command(self, line: bytes) -> bytes:
        if len(line) > MAX_COMMAND_LINE:
            return b"500 5.5.0 Line too long\r\n"
        text = line.decode("ascii", "replace").rstrip("\r\n")
        verb, _, arg = text.partition(" ")
        verb = verb.upper()
        if verb == "EHLO":
            if not arg.strip():
                return b"501 5.5.4 Syntax: EHLO hostname\r\n"
            self.helo = arg.strip()
            self._reset()
            return (f"250-{self.hostname} Hello {self.helo}\r\n"
                    f"250-PIPELINING\r\n250-SIZE {MAX_MESSAGE}\r\n250 8BITMIME\r\n").encode()
        if verb == "HELO":
            if not arg.strip():
                return b"501 5.5.4 Syntax: HELO hostname\r\n"
            self.helo = arg.strip()
            self._reset()
            return f"250 {self.hostname}\r\n".encode()
        if verb == "MAIL":
            if not self.helo:
                return b"503 5.5.1 Error: send HELO/EHLO first\r\n"
            if self.mail_from is not None:
                return b"503 5.5.1 Error: nested MAIL command\r\n"
            path = _path(arg, "FROM:")
            if path is None:
                return b"501 5.5.4 Syntax: MAIL FROM:<address>\r\n"
            self.mail_from = path
            return b"250 2.1.0 Ok\r\n"
        if verb == "RCPT":
            if self.mail_from is None:
                return b"503 5.5.1 Error: need MAIL command\r\n"
            path = _path(arg, "TO:")
            if not path:
                return b"501 5.5.4 Syntax: RCPT TO:<address>\r\n"
            self.rcpt_to.append(path)
            return b"250 2.1.5 Ok\r\n"
        if verb == "DATA":
            if arg.strip():
                return b"501 5.5.4 Syntax: DATA\r\n"
            if not self.rcpt_to:
                return b"503 5.5.1 Error: need RCPT command\r\n"
            self.in_data = True
            return b"354 End data with <CR><LF>.<CR><LF>\r\n"
        if verb == "RSET":
            self._reset()
            return b"250 2.0.0 Ok\r\n"
        if verb == "NOOP":
            return b"250 2.0.0 Ok\r\n"
        if verb == "QUIT":
            self.closed = True
            return b"221 2.0.0 Bye\r\n"
        if verb == "VRFY":
            return b"252 2.0.0 Cannot VRFY user\r\n"
        return b"500 5.5.2 Error: command not recognized\r\n"


def _path(arg: str, keyword: str) -> str | None:
    """The address of ``FROM:<a>`` / ``TO:<a>``; ESMTP parameters after it are ignored."""
    if arg[:len(keyword)].upper() != keyword:
        return None
    m = _PATH.match(arg[len(keyword):])
    return None if m is None else m.group(1)


class SmtpServer:
    """SMTP over non-blocking usertcp sockets; the greeting is preloaded on the listener."""

    def __init__(self, host: Host, address: tuple[str, int], *, hostname: str = "usertcp.test",
                 preload: bool = True, fastopen_qlen: int = 0) -> None:
        self.host = host
        self.hostname = hostname
        self.preload = preload
        self.messages: list[Message] = []
        self.wakeups = 0                   # poll rounds that found work
        self.reply_backlog_full = 0        # reads held back: a session's replies were not taken
        self.data_pool = DataPool()        # message bytes of every session still in DATA
        self.sock = host.socket()
        self.sock.setblocking(False)
        self.sock.bind(address)
        self.sock.listen(128)
        lst = self.sock.listener
        if fastopen_qlen and lst is not None:
            lst.fastopen_qlen = fastopen_qlen  # what setsockopt(TCP_FASTOPEN) maps to
        self.sessions: dict[Socket, tuple[SmtpSession, bytearray]] = {}
        if preload:
            self.sock.send(self._session().greeting(), sockets.MSG_PRELOAD)
        self._stop = threading.Event()

    def _session(self) -> SmtpSession:
        return SmtpSession(self.hostname, self.messages, pool=self.data_pool)

    def poll(self, timeout: float | None) -> bool:
        """One select() round: accept, read, reply. False if nothing was ready."""
        rlist = [self.sock, *(s for s, (session, out) in self.sessions.items()
                              if len(out) < MAX_REPLY_BACKLOG and not session.waiting)]
        wlist = [s for s, (_, out) in self.sessions.items() if out]
        r, w, _ = sockets.select(rlist, wlist, [], timeout)
        if not r and not w:
            return False
        self.wakeups += 1
        if self.sock in r:
            self._accept()
        for s in r:
            if s is not self.sock and s in self.sessions:
                self._read(s)
        for s in w:
            if s in self.sessions:
                self._flush(s)
        return True

    def _accept(self) -> None:
        while True:
            try:
                child, _addr = self.sock.accept()
            except BlockingIOError:
                return
            child.setblocking(False)
            out = bytearray()
            if not self.preload:
                out += self._session().greeting()   # the classic accept-then-send
            self.sessions[child] = (self._session(), out)
            self._flush(child)

    def _read(self, s: Socket) -> None:
        session, out = self.sessions[s]
        try:
            data = s.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            self._drop(s)
            return
        if not data:
            self._drop(s)
            return
        out += session.feed(data, MAX_REPLY_BACKLOG - len(out))
        self._flush(s)
        if s in self.sessions and (session.waiting or len(out) >= MAX_REPLY_BACKLOG):
            self.reply_backlog_full += 1       # not read again until the replies drain

    def _flush(self, s: Socket) -> None:
        session, out = self.sessions[s]
        try:
            while True:
                while out:
                    n = s.send(bytes(out))
                    del out[:n]
                if not session.waiting:
                    break
                out += session.feed(b"", MAX_REPLY_BACKLOG)   # the lines held back
        except BlockingIOError:
            return
        except OSError as e:
            if e.errno not in (errno.EPIPE, errno.ECONNRESET):
                raise
            self._drop(s)
            return
        if session.closed:
            self._drop(s)

    def _drop(self, s: Socket) -> None:
        entry = self.sessions.pop(s, None)
        if entry is not None:
            entry[0].discard()
        s.close()

    def serve(self, interval: float = 0.05) -> None:
        """Poll until :meth:`stop` (for a thread with the real-time driver)."""
        while not self._stop.is_set():
            self.poll(interval)

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        for s in list(self.sessions):
            self._drop(s)
        self.sock.close()
