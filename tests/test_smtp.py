"""The SMTP app: protocol unit tests, a preloaded greeting in virtual time, smtplib end to end."""

from __future__ import annotations

import io
import smtplib
import threading
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from usertcp.api import sockets as us
from usertcp.apps.smtp import SmtpServer, SmtpSession
from usertcp.net.driver import RealTimeDriver, VirtualTimeDriver
from usertcp.net.memnet import LinkConfig, Network
from usertcp.tcp import fastopen
from usertcp.tcp.config import StackConfig
from usertcp.tcp.stack import Stack

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

A, B = "10.0.0.1", "10.0.0.2"
D = TypeVar("D", VirtualTimeDriver, RealTimeDriver)


def test_session_dialogue_and_dot_unstuffing() -> None:
    s = SmtpSession("mx.test")
    assert s.greeting() == b"220 mx.test ESMTP usertcp\r\n"
    assert s.feed(b"MAIL FROM:<a@x>\r\n").startswith(b"503")
    reply = s.feed(b"EHLO client.test\r\n")
    assert reply.startswith(b"250-mx.test") and reply.endswith(b"250 8BITMIME\r\n")
    assert s.feed(b"RCPT TO:<b@y>\r\n").startswith(b"503")
    # Pipelined (RFC 2920), split at an odd place.
    part1 = s.feed(b"MAIL FROM:<a@x> SIZE=10\r\nRCPT TO:<b@y>\r\nRCPT TO:<c@z>\r\nDA")
    assert part1 == b"250 2.1.0 Ok\r\n250 2.1.5 Ok\r\n250 2.1.5 Ok\r\n"
    assert s.feed(b"TA\r\n").startswith(b"354")
    assert s.feed(b"Subject: t\r\n\r\n..leading dot\r\nplain\r\n.\r\n") == b"250 2.0.0 Ok: queued as 1\r\n"
    msg = s.messages[0]
    assert (msg.mail_from, msg.rcpt_to) == ("a@x", ["b@y", "c@z"])
    assert msg.data == b"Subject: t\r\n\r\n.leading dot\r\nplain\r\n"
    assert s.feed(b"MAIL FROM:<d@x>\r\nRSET\r\nRCPT TO:<e@y>\r\n") == \
        b"250 2.1.0 Ok\r\n250 2.0.0 Ok\r\n503 5.5.1 Error: need MAIL command\r\n"
    assert s.feed(b"NOOP\r\nFOO\r\n") == b"250 2.0.0 Ok\r\n500 5.5.2 Error: command not recognized\r\n"
    assert s.feed(b"QUIT\r\nNOOP\r\n") == b"221 2.0.0 Bye\r\n" and s.closed


def test_messages_in_progress_are_bounded_server_wide_and_per_message() -> None:
    """Issue 20 point 1, the apps' own backlogs: sessions share a pool of message bytes held
    while DATA arrives; a message that does not fit is refused at its end with 452 (RFC 5321
    §4.2.5) and its bytes freed, one past MAX_MESSAGE with 552 (§4.5.3.1.10: before, it was
    accepted cut short)."""
    from usertcp.apps.smtp import MAX_MESSAGE, DataPool

    pool = DataPool(1000)
    a, b = SmtpSession("h", pool=pool), SmtpSession("h", pool=pool)
    start = b"HELO x\r\nMAIL FROM:<a@x>\r\nRCPT TO:<b@y>\r\nDATA\r\n"
    for s in (a, b):
        assert s.feed(start).endswith(b"354 End data with <CR><LF>.<CR><LF>\r\n")
    a.feed(b"x" * 798 + b"\r\n")                    # a holds 800 of the 1000
    assert pool.used == 800
    assert b.feed(b"y" * 298 + b"\r\n.\r\n") == b"452 4.3.1 Insufficient system storage\r\n"
    assert pool.used == 800 and pool.refused == 1 and not b.messages
    assert a.feed(b".\r\n").startswith(b"250") and pool.used == 0
    assert b.feed(b"MAIL FROM:<a@x>\r\nRCPT TO:<b@y>\r\nDATA\r\nyy\r\n.\r\n").endswith(b"queued as 1\r\n")
    c = SmtpSession("h", pool=DataPool(2 * MAX_MESSAGE))
    c.feed(start)
    line = b"z" * 998 + b"\r\n"
    replies = b"".join(c.feed(line) for _ in range(MAX_MESSAGE // len(line) + 2))
    assert replies == b"" and c.pool is not None and c.pool.used == 0
    assert c.feed(b".\r\n") == b"552 5.3.4 Message size exceeds fixed maximum message size\r\n"
    assert not c.messages
    c.feed(b"MAIL FROM:<a@x>\r\nRCPT TO:<b@y>\r\nDATA\r\n" + line)
    c.discard()                                       # the connection went away mid-DATA
    assert c.pool.used == 0


def _world(driver_cls: type[D], cfg: StackConfig | None = None) -> tuple[D, us.Host, us.Host]:
    net = Network(seed=1)
    sa, sb = Stack([A], cfg, name="client"), Stack([B], cfg, name="server")
    net.connect(net.add_host(sa, [A]), net.add_host(sb, [B]), LinkConfig(delay=0.005))
    drv = driver_cls(net)
    return drv, us.Host(sa, drv), us.Host(sb, drv)


@pytest.mark.parametrize("tfo", [False, True])
def test_greeting_arrives_without_the_server_waking(tfo: bool) -> None:
    cfg = StackConfig(fastopen=0x3) if tfo else None
    drv, client_host, server_host = _world(VirtualTimeDriver, cfg)
    srv = SmtpServer(server_host, (B, 25), fastopen_qlen=8 if tfo else 0)
    greeting = b"220 usertcp.test ESMTP usertcp\r\n"
    times = []
    for _ in range(2 if tfo else 1):               # with TFO: cookie request, then the cookie
        conn = client_host.stack.create_connection(B, 25)
        t0 = drv.now()
        if tfo:
            fastopen.tfo_connect(conn, b"", t0)
        else:
            client_host.stack.connect(conn, t0)
        assert drv.run_until(lambda c=conn: c.readable_bytes >= len(greeting), 5)  # type: ignore[misc]
        assert conn.recv(100, drv.now()) == greeting
        times.append(drv.now() - t0)
    assert srv.wakeups == 0                        # the application never ran
    assert times[-1] == pytest.approx(0.010 if tfo else 0.020)
    # Now let the server work: a pipelined dialogue.
    conn.send(b"HELO me\r\nQUIT\r\n", drv.now())
    drv.kick()
    replies = b""
    for _ in range(20):
        srv.poll(0.05)
        replies += conn.recv(1000, drv.now())
        if b"221" in replies:
            break
    assert replies == b"250 usertcp.test\r\n221 2.0.0 Bye\r\n"


class _SockReader(io.RawIOBase):
    def __init__(self, sock: us.Socket) -> None:
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, b: WriteableBuffer) -> int:
        return self._sock.recv_into(memoryview(b).cast("B"))


class _SmtplibSocket:
    """What smtplib needs from a socket: sendall, makefile('rb'), close."""

    def __init__(self, sock: us.Socket) -> None:
        self.sock = sock

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)

    def makefile(self, mode: str = "rb") -> io.BufferedReader:
        return io.BufferedReader(_SockReader(self.sock))

    def close(self) -> None:
        self.sock.close()


def test_smtplib_sends_a_message() -> None:
    drv, client_host, server_host = _world(RealTimeDriver)
    with drv:
        srv = SmtpServer(server_host, (B, 25))
        thread = threading.Thread(target=srv.serve, daemon=True)
        thread.start()

        class SMTP(smtplib.SMTP):
            def _get_socket(self, host: str, port: int, timeout: float) -> Any:  # a duck, not a socket.socket
                return _SmtplibSocket(us.create_connection((host, port), timeout, host=client_host))

        body = "Subject: hello\r\n\r\nline one\r\n.starts with a dot\r\n..two dots\r\nbye\r\n"
        try:
            with SMTP(B, 25, timeout=10) as client:
                code, _ = client.ehlo("client.test")
                assert code == 250 and client.has_extn("pipelining")
                refused = client.sendmail("alice@a.test", ["bob@b.test", "carol@c.test"], body)
                assert refused == {}
                assert client.noop()[0] == 250
                assert client.rset()[0] == 250
        finally:
            srv.stop()
            thread.join(5)
            srv.close()
    assert len(srv.messages) == 1
    msg = srv.messages[0]
    assert msg.mail_from == "alice@a.test" and msg.rcpt_to == ["bob@b.test", "carol@c.test"]
    assert msg.helo == "client.test"
    assert msg.data == body.encode()               # smtplib dot-stuffed, we unstuffed


def test_pipelining_client_that_never_reads_cannot_grow_the_reply_backlog() -> None:
    """Issue 20 point 1, the apps' own backlogs: a client that pipelines NOOPs (RFC 2920) and
    never reads its replies. Once a session's replies pass MAX_REPLY_BACKLOG the server stops
    reading it (counted) instead of growing them; reading on, the client gets every reply."""
    from usertcp.apps.smtp import MAX_REPLY_BACKLOG

    drv, client_host, server_host = _world(VirtualTimeDriver)
    srv = SmtpServer(server_host, (B, 25))
    conn = client_host.stack.create_connection(B, 25)
    client_host.stack.connect(conn, drv.now())
    assert drv.run_until(lambda: conn.send_space > 0, 5)
    chunk = b"NOOP\r\n" * 10000
    sent = 0
    peak = 0
    for _ in range(100):                                  # 60 KB offered per round, no reads
        sent += conn.send(chunk[:conn.send_space - conn.send_space % 6], drv.now())
        drv.kick()
        srv.poll(0.01)
        peak = max([peak, *(len(out) for _, out in srv.sessions.values())])
    assert srv.reply_backlog_full > 0
    assert peak < MAX_REPLY_BACKLOG + 100, peak            # one reply past it at most
    assert sent // 6 * 14 > 4 * MAX_REPLY_BACKLOG          # ...far less than was asked for
    got = bytearray()
    want = sent // 6 * len(b"250 2.0.0 Ok\r\n") + len(b"220 usertcp.test ESMTP usertcp\r\n")
    for _ in range(2000):
        got += conn.recv(1 << 20, drv.now())
        drv.kick()
        srv.poll(0.01)
        if len(got) >= want:
            break
    assert len(got) == want and got.count(b"250 2.0.0 Ok\r\n") == sent // 6
    srv.close()
