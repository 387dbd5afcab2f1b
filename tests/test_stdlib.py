"""The standard library over usertcp sockets: makefile, selectors, http.client, smtplib,
socketserver/http.server, sendmsg/recvmsg, sendfile, dup, name lookup.

Virtual time where one thread can run both ends (the echo app runs inside the simulation);
the stdlib servers block in their own thread, so those tests use the real-time driver on the
in-memory network (sub-millisecond links: fast).
"""

from __future__ import annotations

import errno
import functools
import http.client
import http.server
import io
import selectors
import smtplib
import socket as pysocket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from usertcp import socket as us
from usertcp.apps.basic import BasicServer
from usertcp.apps.smtp import SmtpServer
from usertcp.net.driver import RealTimeDriver, VirtualTimeDriver
from usertcp.net.memnet import LinkConfig, Network
from usertcp.selectors import UsertcpSelector
from usertcp.tcp.stack import Stack

A, B = "10.0.0.1", "10.0.0.2"


@dataclass
class World:
    driver: VirtualTimeDriver | RealTimeDriver
    a: us.Host
    b: us.Host


def _world(realtime: bool) -> World:
    net = Network(seed=3)
    sa, sb = Stack([A], name="a"), Stack([B], name="b")
    net.connect(net.add_host(sa, [A]), net.add_host(sb, [B]), LinkConfig(delay=0.0002 if realtime else 0.01))
    drv: VirtualTimeDriver | RealTimeDriver = RealTimeDriver(net) if realtime else VirtualTimeDriver(net)
    return World(drv, us.Host(sa, drv, name="a"), us.Host(sb, drv, name="b"))


@pytest.fixture
def vw() -> World:
    return _world(False)


@pytest.fixture
def rw() -> Iterator[World]:
    w = _world(True)
    assert isinstance(w.driver, RealTimeDriver)
    with w.driver:
        yield w


def _echo(w: World, port: int = 7) -> BasicServer:
    stack = w.b.stack
    return BasicServer("echo", stack.listen(port), w.driver.now)


# ---------------------------------------------------------------- virtual time


def test_makefile_lines_over_echo_in_virtual_time(vw: World) -> None:
    _echo(vw)
    c = us.create_connection((B, 7), host=vw.a)
    f = c.makefile("rwb")
    f.write(b"hello\r\nworld\r\n")
    f.flush()
    assert f.readline() == b"hello\r\n" and f.readline() == b"world\r\n"
    text = c.makefile("r", encoding="ascii", newline="")
    c.sendall(b"third\r\n")
    assert text.readline() == "third\r\n"
    c.close()                       # files still open: the socket stays usable (as CPython)
    c.sendall(b"x\n")
    assert f.readline() == b"x\n"
    f.close()
    text.close()                    # the last file: now the socket really closes
    with pytest.raises(OSError) as ei:
        c.send(b"y")
    assert ei.value.errno == errno.EBADF


def test_makefile_timeout_and_modes(vw: World) -> None:
    _echo(vw)
    c = us.create_connection((B, 7), timeout=2.0, host=vw.a)
    f = c.makefile("rb")
    t0 = vw.driver.now()
    with pytest.raises(TimeoutError):
        f.read1(10)
    assert vw.driver.now() - t0 == pytest.approx(2.0)     # virtual seconds
    with pytest.raises(ValueError):
        c.makefile("rx")
    with pytest.raises(ValueError):
        c.makefile("r", buffering=0)
    assert isinstance(c.makefile("rb", buffering=0), pysocket.SocketIO)


def test_selector_runs_the_simulation(vw: World) -> None:
    srv = us.create_server((B, 80), host=vw.b)
    srv.setblocking(False)
    sel = UsertcpSelector()
    sel.register(srv, selectors.EVENT_READ, "listener")
    t0 = vw.driver.now()
    assert sel.select(60) == []                     # nothing happens: 60 virtual seconds pass
    assert vw.driver.now() - t0 == pytest.approx(60)
    c = vw.a.socket()
    c.setblocking(False)
    assert c.connect_ex((B, 80)) == errno.EINPROGRESS
    sel.register(c, selectors.EVENT_WRITE, "client")
    assert [(key.data, ev) for key, ev in sel.select(5)] == [("client", selectors.EVENT_WRITE)]
    sel.modify(c, selectors.EVENT_READ, "client")   # connected: now wait for the server side
    assert [(key.data, ev) for key, ev in sel.select(5)] == [("listener", selectors.EVENT_READ)]
    child, _ = srv.accept()
    child.setblocking(False)
    sel.register(child, selectors.EVENT_READ, "child")
    c.send(b"ping")
    ready = [key.data for key, _ev in sel.select(5)]
    assert "child" in ready and child.recv(10) == b"ping"
    # Not a usertcp socket: refused.
    r, w_ = pysocket.socketpair()
    with pytest.raises(ValueError):
        sel.register(r, selectors.EVENT_READ)
    r.close()
    w_.close()
    sel.close()


def test_fileno_is_a_real_descriptor_mirroring_readiness(vw: World) -> None:
    _echo(vw)
    c = us.create_connection((B, 7), host=vw.a)
    fd = c.fileno()
    std = selectors.DefaultSelector()              # the kernel's epoll on the eventfd
    std.register(fd, selectors.EVENT_READ)
    assert std.select(0) == []
    c.sendall(b"abc")
    UsertcpSelector_ = UsertcpSelector()
    UsertcpSelector_.register(c, selectors.EVENT_READ)
    assert UsertcpSelector_.select(1)               # the simulation ran; the echo is back
    assert [k.fd for k, _ in std.select(0)] == [fd]  # and the kernel sees the eventfd readable
    assert c.recv(10) == b"abc"
    assert std.select(0) == []                      # drained: no longer readable
    UsertcpSelector_.close()
    std.close()
    c.close()
    assert c.fileno() == -1


def test_sendmsg_recvmsg_sendfile_dup(vw: World) -> None:
    _echo(vw)
    c = us.create_connection((B, 7), host=vw.a)
    assert c.sendmsg([b"ab", bytearray(b"cd"), memoryview(b"ef")]) == 6
    data, anc, flags, addr = c.recvmsg(100, 64)
    while len(data) < 6:
        more, anc, flags, addr = c.recvmsg(100)
        data += more
    assert (data, anc, flags, addr) == (b"abcdef", [], 0, None)
    with pytest.raises(OSError) as ei:               # Linux sock_cmsg_send: unknown SOL_SOCKET cmsg
        c.sendmsg([b"x"], [(us.SOL_SOCKET, 1, b"\0" * 4)])
    assert ei.value.errno == errno.EINVAL
    f = io.BytesIO(b"0123456789" * 1000)
    assert c.sendfile(f, offset=5, count=100) == 100 and f.tell() == 105
    b1, b2 = bytearray(60), bytearray(60)
    got = 0
    while got < 100:
        n, _, _, _ = c.recvmsg_into([memoryview(b1)[got:] if got < 60 else memoryview(b2)[got - 60:]])
        got += n
    assert bytes(b1 + b2)[:100] == (b"0123456789" * 11)[5:105]
    d = c.dup()
    c.close()                                       # the dup keeps the connection open
    d.sendall(b"still")
    assert d.recv(10) == b"still"
    d.close()
    with pytest.raises(OSError) as ei:
        d.recv(1)
    assert ei.value.errno == errno.EBADF
    nb = vw.a.socket()
    nb.setblocking(False)
    with pytest.raises(ValueError):
        nb.sendfile(io.BytesIO(b"x"))
    with pytest.raises(TypeError):                  # as CPython's _check_sendfile_params
        c2 = us.create_connection((B, 7), host=vw.a)
        c2.sendfile(io.BytesIO(b"x"), count=1.5)    # type: ignore[arg-type]


def test_names_resolve_through_the_host_table(vw: World) -> None:
    _echo(vw)
    vw.a.add_name("echo.test", B)
    c = vw.a.socket()
    c.connect(("echo.test", 7))
    assert c.getpeername() == (B, 7)
    with pytest.raises(pysocket.gaierror) as ei:
        vw.a.socket().connect(("nowhere.invalid", 7))
    assert ei.value.errno == pysocket.EAI_NONAME
    with us.use_host(vw.a):
        assert us.getaddrinfo("echo.test", "7") == [(us.AF_INET, us.SOCK_STREAM, us.IPPROTO_TCP, "", (B, 7))]
        assert us.gethostbyname("echo.test") == B
        with pytest.raises(pysocket.gaierror):
            us.getaddrinfo("echo.test", "smtp")        # no service names
        with pytest.raises(pysocket.gaierror):
            us.getaddrinfo("echo.test", 7, us.AF_INET6)
        with pytest.raises(OSError, match="Int or String expected"):   # as CPython
            us.getaddrinfo("echo.test", 7.5)   # type: ignore[arg-type]


class _InSimulationServer:
    """A line-protocol server that runs inside the simulation (stack callbacks, as
    usertcp.apps.basic), so a blocking stdlib client can be tested in virtual time on one thread.

    ``session()`` makes a sans-IO session: ``feed(bytes) -> bytes`` and ``closed``.
    """

    def __init__(self, w: World, port: int, session: Callable[[], Any], greeting: bytes = b"") -> None:
        self.now = w.driver.now
        self.session = session
        self.sessions: dict[Any, Any] = {}
        lst = w.b.stack.listen(port)
        if greeting:
            lst.set_preload(greeting, self.now())       # MSG_PRELOAD: the stack sends it
        lst.on_accept_ready = self._accept
        self.pending: dict[Any, bytes] = {}

    def _accept(self, lst: Any) -> None:
        while (conn := lst.accept()) is not None:
            self.sessions[conn] = self.session()
            conn.on_readable = self._readable
            conn.on_writable = self._flush

    def _readable(self, conn: Any) -> None:
        sess = self.sessions[conn]
        data = conn.recv(65536, self.now())
        if data:
            self.pending[conn] = self.pending.get(conn, b"") + sess.feed(data)
        self._flush(conn)
        if (sess.closed or conn.fin_received) and not self.pending.get(conn) and not conn.closed_by_app:
            conn.close(self.now())

    def _flush(self, conn: Any) -> None:
        out = self.pending.get(conn, b"")
        if out:
            n = conn.send(out, self.now())
            self.pending[conn] = out[n:]


class _HttpSession:
    """HTTP/1.1 keep-alive GET responder (enough for http.client)."""

    def __init__(self) -> None:
        self.buf = b""
        self.closed = False

    def feed(self, data: bytes) -> bytes:
        self.buf += data
        out = b""
        while b"\r\n\r\n" in self.buf:
            head, self.buf = self.buf.split(b"\r\n\r\n", 1)
            path = head.split(b" ")[1]
            body = b"virtual " + path
            out += b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        return out


def test_http_client_in_virtual_time(vw: World, monkeypatch: pytest.MonkeyPatch) -> None:
    _InSimulationServer(vw, 80, _HttpSession)
    monkeypatch.setattr(http.client, "socket", us)
    with us.use_host(vw.a):
        conn = http.client.HTTPConnection(B, 80, timeout=30)
        t0 = vw.driver.now()
        for path in ("/one", "/two"):
            conn.request("GET", path)
            assert conn.getresponse().read() == b"virtual " + path.encode()
        conn.close()
    # Virtual seconds: handshake + two request/response round trips over a 10 ms link.
    assert vw.driver.now() - t0 == pytest.approx(0.06, abs=0.005)


def test_smtplib_in_virtual_time_with_a_preloaded_greeting(vw: World,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from usertcp.apps.smtp import SmtpSession

    sessions: list[SmtpSession] = []

    def new_session() -> SmtpSession:
        sessions.append(SmtpSession("mx.test"))
        return sessions[-1]

    _InSimulationServer(vw, 25, new_session, greeting=SmtpSession("mx.test").greeting())
    monkeypatch.setattr(smtplib, "socket", us)
    with us.use_host(vw.a), smtplib.SMTP(B, 25, local_hostname="client.test", timeout=30) as smtp:
        assert smtp.ehlo()[0] == 250
        smtp.sendmail("a@x.test", ["b@y.test"], "Subject: v\r\n\r\nvirtual time\r\n")
    assert sessions[0].messages[0].data == b"Subject: v\r\n\r\nvirtual time\r\n"


# ---------------------------------------------------------------- real-time driver, stdlib servers


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = f"hello {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class UsertcpTCPServer(socketserver.TCPServer):
    """socketserver's TCPServer on a usertcp socket (its socket factory is the module's)."""

    def __init__(self, host: us.Host, address: tuple[str, int],
                 handler: type[socketserver.BaseRequestHandler]) -> None:
        super().__init__(address, handler, bind_and_activate=False)
        self.socket.close()                          # the kernel socket TCPServer made
        self.socket = host.socket()                  # type: ignore[assignment]
        self.server_bind()
        self.server_activate()


class UsertcpThreadingHTTPServer(socketserver.ThreadingMixIn, UsertcpTCPServer, http.server.HTTPServer):
    """http.server's ThreadingHTTPServer (a thread per connection) on a usertcp socket."""

    daemon_threads = True


def test_http_client_against_socketserver_http(rw: World, monkeypatch: pytest.MonkeyPatch) -> None:
    server = UsertcpThreadingHTTPServer(rw.b, (B, 8080), _Handler)
    assert server.server_name == B                   # HTTPServer.server_bind ran on our socket
    # serve_forever waits with selectors.PollSelector on the eventfd: the real mirror at work.
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        monkeypatch.setattr(http.client, "socket", us)   # http.client's socket factory
        with us.use_host(rw.a):
            conn = http.client.HTTPConnection(B, 8080, timeout=5)
            for path in ("/a", "/b"):                 # keep-alive: two requests, one connection
                conn.request("GET", path)
                resp = conn.getresponse()
                assert resp.status == 200 and resp.read() == f"hello {path}".encode()
            conn.close()
            # Two clients at once: one server thread each.
            first, second = http.client.HTTPConnection(B, 8080, timeout=5), \
                http.client.HTTPConnection(B, 8080, timeout=5)
            first.request("GET", "/1")
            second.request("GET", "/2")
            assert second.getresponse().read() == b"hello /2"
            assert first.getresponse().read() == b"hello /1"
            first.close()
            second.close()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_smtplib_with_the_usertcp_smtp_app(rw: World, monkeypatch: pytest.MonkeyPatch) -> None:
    srv = SmtpServer(rw.b, (B, 25))
    thread = threading.Thread(target=srv.serve, daemon=True)
    thread.start()
    try:
        monkeypatch.setattr(smtplib, "socket", us)
        with us.use_host(rw.a), smtplib.SMTP(B, 25, local_hostname="client.test", timeout=5) as smtp:
            smtp.sendmail("a@x.test", ["b@y.test"], "Subject: hi\r\n\r\n.dot\r\nbody\r\n")
    finally:
        srv.stop()
        thread.join(5)
        srv.close()
    assert srv.messages[0].data == b"Subject: hi\r\n\r\n.dot\r\nbody\r\n"


def test_socketserver_stream_handler(rw: World) -> None:
    class Upper(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            for line in self.rfile:
                self.wfile.write(line.upper())

    server = UsertcpTCPServer(rw.b, (B, 9000), Upper)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        c = us.create_connection((B, 9000), timeout=5, host=rw.a)
        f = c.makefile("rwb")
        f.write(b"one\ntwo\n")
        f.flush()
        assert f.readline() == b"ONE\n" and f.readline() == b"TWO\n"
        c.shutdown(us.SHUT_WR)                       # the handler's loop ends at EOF
        assert f.read() == b""
        f.close()
        c.close()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


# ---------------------------------------------------------------- errnos and results: usertcp vs the kernel


def _outcome(fn: Callable[[], object]) -> object:
    try:
        result = fn()
    except OSError as e:
        return (type(e).__name__, errno.errorcode.get(e.errno or 0, e.errno))
    return result


def _misuse(new: Callable[[], Any], server: tuple[str, int], local: str) -> list[tuple[str, object]]:
    """The same calls on a fresh socket API: what each returns or raises."""
    out: list[tuple[str, object]] = []
    s = new()
    out.append(("recv unconnected", _outcome(lambda: s.recv(1))))
    out.append(("send unconnected", _outcome(lambda: s.send(b"x"))))
    out.append(("getpeername unconnected", _outcome(s.getpeername)))
    out.append(("accept not listening", _outcome(s.accept)))
    out.append(("setsockopt unknown", _outcome(lambda: s.setsockopt(us.IPPROTO_TCP, 999, 1))))
    out.append(("SO_TYPE", _outcome(lambda: s.getsockopt(us.SOL_SOCKET, us.SO_TYPE))))
    out.append(("SO_ERROR", _outcome(lambda: s.getsockopt(us.SOL_SOCKET, us.SO_ERROR))))
    out.append(("connect", _outcome(lambda: s.connect(server))))
    out.append(("connect again", _outcome(lambda: s.connect(server))))
    out.append(("bind connected", _outcome(lambda: s.bind((local, 0)))))
    out.append(("listen connected", _outcome(lambda: s.listen(1))))
    out.append(("sendmsg", _outcome(lambda: s.sendmsg([b"ab", b"cd"]))))
    out.append(("recvmsg", _outcome(lambda: s.recvmsg(4, 0, us.MSG_WAITALL))))
    peek = us.MSG_PEEK | us.MSG_WAITALL
    out.append(("recvmsg peek", _outcome(lambda: (s.send(b"xy"), s.recvmsg(2, 0, peek)))))
    out.append(("recv after peek", _outcome(lambda: s.recv(2, us.MSG_WAITALL))))
    out.append(("nonblocking recv", _outcome(lambda: s.recv(1, us.MSG_DONTWAIT))))
    out.append(("shutdown SHUT_WR", _outcome(lambda: s.shutdown(us.SHUT_WR))))
    out.append(("send after SHUT_WR", _outcome(lambda: s.send(b"x"))))
    out.append(("recv EOF", _outcome(lambda: s.recv(10))))
    out.append(("shutdown bad how", _outcome(lambda: s.shutdown(7))))
    s.close()
    out.append(("fileno closed", s.fileno()))
    out.append(("recv closed", _outcome(lambda: s.recv(1))))
    out.append(("send closed", _outcome(lambda: s.send(b"x"))))
    out.append(("getsockname closed", _outcome(s.getsockname)))
    out.append(("close twice", _outcome(s.close)))
    u = new()
    # Linux inet_shutdown: ENOTCONN, but the bit stays: once connected, send is EPIPE.
    out.append(("shutdown unconnected", _outcome(lambda: u.shutdown(us.SHUT_WR))))
    out.append(("connect after shutdown", _outcome(lambda: u.connect(server))))
    out.append(("send after early shutdown", _outcome(lambda: u.send(b"x"))))
    u.close()
    b = new()
    b.bind((local, 0))
    out.append(("bind twice", _outcome(lambda: b.bind((local, 0)))))
    b.listen(1)
    out.append(("connect listening", _outcome(lambda: b.connect(server))))
    out.append(("recv listening", _outcome(lambda: b.recv(1))))
    b.close()
    return out


def _kernel_echo() -> tuple[pysocket.socket, threading.Thread]:
    srv = pysocket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            while data := conn.recv(100):
                conn.sendall(data)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return srv, t


def test_misuse_matches_the_kernel(vw: World) -> None:
    srv, thread = _kernel_echo()
    try:
        kernel = _misuse(lambda: pysocket.socket(pysocket.AF_INET, pysocket.SOCK_STREAM),
                         srv.getsockname(), "127.0.0.1")
    finally:
        srv.close()
        thread.join(5)
    _echo(vw)
    ours = _misuse(lambda: vw.a.socket(), (B, 7), A)
    assert ours == kernel


class _Ftp(socketserver.StreamRequestHandler):
    """Just enough of an FTP server (RFC 959, passive mode) for ftplib's retr/stor/nlst."""

    files: dict[str, bytes] = {}
    host: us.Host

    def _reply(self, line: str) -> None:
        self.wfile.write(line.encode() + b"\r\n")

    def handle(self) -> None:
        self._reply("220 usertcp ftp")
        data_srv: Any = None
        for raw in self.rfile:
            cmd, _, arg = raw.decode().strip().partition(" ")
            cmd = cmd.upper()
            if cmd == "USER":
                self._reply("331 password please")
            elif cmd == "PASS":
                self._reply("230 logged in")
            elif cmd == "TYPE":
                self._reply("200 type set")
            elif cmd == "PASV":
                data_srv = us.create_server((B, 0), host=self.host)
                port = data_srv.getsockname()[1]
                self._reply(f"227 Entering Passive Mode ({B.replace('.', ',')},{port >> 8},{port & 255})")
            elif cmd in ("RETR", "STOR", "NLST") and data_srv is not None:
                self._reply("150 opening data connection")
                conn, _ = data_srv.accept()
                if cmd == "RETR":
                    conn.sendall(self.files[arg])
                elif cmd == "NLST":
                    conn.sendall("".join(f"{n}\r\n" for n in sorted(self.files)).encode())
                else:
                    chunks = []
                    while chunk := conn.recv(65536):
                        chunks.append(chunk)
                    self.files[arg] = b"".join(chunks)
                conn.close()
                data_srv.close()
                data_srv = None
                self._reply("226 transfer complete")
            elif cmd == "QUIT":
                self._reply("221 bye")
                return
            else:
                self._reply("502 not implemented")


def test_ftplib_passive_transfers(rw: World, monkeypatch: pytest.MonkeyPatch) -> None:
    import ftplib

    class Handler(_Ftp):
        files = {"hello.txt": b"hello over usertcp\r\n" * 500}
        host = rw.b

    server = UsertcpTCPServer(rw.b, (B, 2121), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        monkeypatch.setattr(ftplib, "socket", us)
        with us.use_host(rw.a), ftplib.FTP() as ftp:
            ftp.connect(B, 2121, timeout=5)        # the default timeout: CPython's sentinel
            ftp.login("u", "p")
            got = bytearray()
            ftp.retrbinary("RETR hello.txt", got.extend)
            assert bytes(got) == Handler.files["hello.txt"]
            ftp.storbinary("STOR up.bin", io.BytesIO(bytes(range(256)) * 400))
            assert Handler.files["up.bin"] == bytes(range(256)) * 400
            assert ftp.nlst() == ["hello.txt", "up.bin"]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_create_connection_default_timeout_and_names(rw: World, monkeypatch: pytest.MonkeyPatch) -> None:
    server = UsertcpTCPServer(rw.b, (B, 8081), _Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        monkeypatch.setattr(http.client, "socket", us)
        rw.a.add_name("web.test", "fd00::99", B)   # the first address is unreachable: try the next
        with us.use_host(rw.a):
            conn = http.client.HTTPConnection("web.test", 8081)      # no timeout: the sentinel
            conn.request("GET", "/x")
            assert conn.getresponse().read() == b"hello /x"
            conn.close()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _inq_reads(sock: Any, wait_all_arrived: Callable[[], object]) -> list[object]:
    """TCP_INQ on, the peer sent b"abcdef" and closed: what each recvmsg reports."""
    sock.setsockopt(us.IPPROTO_TCP, us.TCP_INQ, 1)
    out: list[object] = [sock.getsockopt(us.IPPROTO_TCP, us.TCP_INQ)]
    wait_all_arrived()
    for size, anc in ((2, 64), (1, 20), (1, 18), (1, 12), (0, 0), (10, 24), (10, 24)):
        out.append(_outcome(functools.partial(sock.recvmsg, size, anc)))
    buf = bytearray(4)
    out.append(_outcome(lambda: sock.recvmsg_into([buf], 64)))
    out.append(_outcome(lambda: sock.setsockopt(us.IPPROTO_TCP, us.TCP_INQ, 2)))
    return out


def test_tcp_inq_cmsg_matches_the_kernel(vw: World) -> None:
    srv = pysocket.create_server(("127.0.0.1", 0))
    k = pysocket.create_connection(srv.getsockname())
    peer, _ = srv.accept()
    peer.sendall(b"abcdef")
    peer.close()
    kernel = _inq_reads(k, lambda: time.sleep(0.05))
    k.close()
    srv.close()

    ours_srv = us.create_server((B, 80), host=vw.b)
    c = us.create_connection((B, 80), host=vw.a)
    child, _ = ours_srv.accept()
    child.sendall(b"abcdef")
    child.close()
    conn = c.connection
    assert conn is not None
    drv = vw.driver
    assert isinstance(drv, VirtualTimeDriver)
    ours = _inq_reads(c, lambda: drv.run_until(lambda: conn.fin_received, 5))
    assert ours == kernel


def test_socketserver_handle_request_in_virtual_time(vw: World) -> None:
    """One thread, virtual time: the client's blocking calls run the simulation, and the
    listener's eventfd (polled by socketserver's own PollSelector) follows."""

    class Echo(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            self.wfile.write(b"echo: " + self.rfile.readline())

    server = UsertcpTCPServer(vw.b, (B, 7070), Echo)
    server.timeout = 0.0
    listening_fd = server.fileno()           # the eventfd socketserver's PollSelector polls
    c = us.create_connection((B, 7070), host=vw.a)
    c.sendall(b"hi\n")                       # queued before the server runs: no deadlock
    std = selectors.DefaultSelector()
    std.register(listening_fd, selectors.EVENT_READ)
    assert std.select(0) == []               # the 3rd ACK has not reached the server yet
    c.settimeout(0.1)
    with pytest.raises(TimeoutError):        # a usertcp wait: runs the simulation 0.1 s ...
        c.recv(1)
    assert [k.fd for k, _ in std.select(0)] == [listening_fd]   # ... and syncs every eventfd
    std.close()
    server.handle_request()                  # selectors.PollSelector on the eventfd
    c.setblocking(True)
    assert c.makefile("rb").readline() == b"echo: hi\n"
    server.server_close()
    c.close()
