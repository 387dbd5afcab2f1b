"""Real servers on UsertcpEventLoop over TUN, against the kernel's curl, openssl s_client and smtplib.

uvicorn (plain and TLS), aiohttp's server (TLS, an upload) and aiosmtpd (greeting preloaded on
the listening socket, STARTTLS) run on a usertcp stack bound to a TUN device inside a namespace
made for the test; the clients are the kernel's own programs, run in that namespace by the
loop's subprocess support (real time: ``loop.time()`` is the monotonic clock on TUN).
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from aiohttp import web
from aiosmtpd.handlers import Sink
from aiosmtpd.smtp import SMTP, Envelope, Session

from netns_helpers import namespace_fixture
from tls_certs import Pki, make_pki
from usertcp import aio
from usertcp.bench.apps import asgi_app, smtp_greeting
from usertcp.net.tun import TunDevice
from usertcp.tcp.stack import Stack

pytestmark = pytest.mark.netns

PEER, US = "10.77.0.1", "10.77.0.2"


@pytest.fixture
def ns() -> Iterator[str]:
    yield from namespace_fixture()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), names=("server.test", "mail.test"), addresses=(US,))


def tun_stack(ns: str) -> tuple[Stack, TunDevice]:
    dev = TunDevice.open("utaio0", netns=ns)
    dev.configure(peer_address=f"{PEER}/24")
    return Stack([US], name="usertcp"), dev


async def run_in_ns(ns: str, *cmd: str, stdin: bytes | None = None,
                    timeout: float = 20) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        "ip", "netns", "exec", ns, *cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


async def uvicorn_on(port: int, pki: Pki | None = None) -> tuple[uvicorn.Server, asyncio.Task[None]]:
    config = uvicorn.Config(asgi_app, host=US, port=port, log_level="warning", lifespan="off", http="h11",
                            ws="none", ssl_certfile=None if pki is None else pki.cert_file,
                            ssl_keyfile=None if pki is None else pki.key_file)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
        if task.done():
            task.result()
    return server, task


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed (make system-deps)")
def test_uvicorn_over_tun_with_kernel_curl(ns: str, pki: Pki) -> None:
    stack, dev = tun_stack(ns)

    async def main() -> tuple[tuple[int, str, str], tuple[int, str, str]]:
        plain, plain_task = await uvicorn_on(8000)
        tls, tls_task = await uvicorn_on(8443, pki)
        # Two URLs in one curl: the second request reuses the connection (keep-alive).
        got_plain = await run_in_ns(ns, "curl", "-sS", "--max-time", "10", "-w", "%{num_connects}\n",
                                    f"http://{US}:8000/hello/a", f"http://{US}:8000/hello/b")
        got_tls = await run_in_ns(ns, "curl", "-sS", "-v", "--max-time", "10", "--tlsv1.3", "--cacert",
                                  str(pki.ca_file), "--resolve", f"server.test:8443:{US}",
                                  "https://server.test:8443/json")
        plain.should_exit = tls.should_exit = True
        await asyncio.gather(plain_task, tls_task)
        return got_plain, got_tls

    try:
        (rc1, out1, err1), (rc2, out2, err2) = aio.run(main(), stack=stack, device=dev)
    finally:
        dev.close()
    assert rc1 == 0, err1
    assert out1 == "hello a\n1\nhello b\n0\n"          # one connect, then a reused connection
    assert rc2 == 0, err2
    assert out2 == '{"path": "/json", "method": "GET"}'
    assert "TLSv1.3" in err2 and "subjectAltName" in err2


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed (make system-deps)")
def test_aiohttp_server_over_tun_with_kernel_curl_and_s_client(ns: str, pki: Pki, tmp_path: Path) -> None:
    """aiohttp's web server (TLS 1.3) over TUN: curl uploads 2 MB and gets its digest back over
    one kept-alive connection; openssl s_client speaks HTTP inside TLS by hand."""
    stack, dev = tun_stack(ns)
    upload = tmp_path / "upload.bin"
    upload.write_bytes(bytes(range(256)) * 8192)

    async def digest(request: web.Request) -> web.Response:
        import hashlib

        body = await request.read()
        return web.Response(text=f"{len(body)} {hashlib.sha256(body).hexdigest()}\n")

    async def hello(request: web.Request) -> web.Response:
        return web.Response(text=f"hello {request.match_info['name']}\n")

    async def main() -> tuple[tuple[int, str, str], tuple[int, str, str]]:
        app = web.Application(client_max_size=4 << 20)
        app.router.add_post("/digest", digest)
        app.router.add_get("/hello/{name}", hello)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, US, 8443, ssl_context=pki.server_context()).start()
        url = "https://server.test:8443"
        common = ("-sS", "--max-time", "20", "--tlsv1.3", "--cacert", str(pki.ca_file), "--resolve",
                  f"server.test:8443:{US}", "-w", "%{num_connects}\n")
        # --next: a POST then a GET, the options given again (--next resets them), one connection.
        got_curl = await run_in_ns(ns, "curl", *common, "--data-binary", f"@{upload}", f"{url}/digest",
                                   "--next", *common, f"{url}/hello/kernel", timeout=30)
        got_s_client = await run_in_ns(
            ns, "openssl", "s_client", "-connect", f"{US}:8443", "-servername", "server.test", "-CAfile",
            str(pki.ca_file), "-verify_return_error", "-tls1_3", "-quiet", "-crlf",
            stdin=b"GET /hello/s_client HTTP/1.1\nHost: server.test\nConnection: close\n\n")
        await runner.cleanup()
        return got_curl, got_s_client

    try:
        (rc, out, err), (rc2, out2, err2) = aio.run(main(), stack=stack, device=dev)
    finally:
        dev.close()
    import hashlib

    want = hashlib.sha256(upload.read_bytes()).hexdigest()
    assert rc == 0, err
    # The GET reused the POST's connection (it made 0 connects).
    assert out.split("\n")[:4] == [f"{len(upload.read_bytes())} {want}", "1", "hello kernel", "0"]
    assert rc2 == 0, err2
    assert out2.startswith("HTTP/1.1 200 OK") and out2.rstrip().endswith("hello s_client")


class Collect(Sink):
    def __init__(self) -> None:
        self.messages: list[bytes] = []

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.content if isinstance(envelope.content, bytes) else str(envelope.content).encode()
        self.messages.append(content)
        return "250 OK"


KERNEL_SMTPLIB = """
import smtplib, ssl, sys
ctx = ssl.create_default_context(cafile=sys.argv[2])
with smtplib.SMTP(sys.argv[1], 25, timeout=10) as s:
    print(s.ehlo()[0], s.starttls(context=ctx)[0], s.sock.version())
    s.sendmail("a@kernel.test", ["b@mail.test"], b"Subject: over TUN\\r\\n\\r\\nhello\\r\\n")
"""


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed (make system-deps)")
def test_aiosmtpd_preloaded_over_tun_with_openssl_and_smtplib(ns: str, pki: Pki, tmp_path: Path) -> None:
    stack, dev = tun_stack(ns)
    handler = Collect()
    script = tmp_path / "smtp_client.py"
    script.write_text(KERNEL_SMTPLIB)

    async def main() -> tuple[tuple[int, str, str], tuple[int, str, str], tuple[int, str, str]]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, aio.UsertcpEventLoop)
        lsock = loop.socket()
        lsock.bind((US, 25))
        lsock.listen(64)
        tls = pki.server_context()
        server = await loop.create_server(
            lambda: SMTP(handler, hostname="mail.test", tls_context=tls), sock=lsock, start_serving=False)
        assert isinstance(server, aio.Server)
        # aiosmtpd unmodified: its own greeting is the preload's repeat, not sent twice.
        server.preload(smtp_greeting("mail.test"), app_sends_it=True)
        await server.start_serving()
        # The kernel's nc-like read of the banner alone: it comes from the stack, unasked.
        banner = await run_in_ns(ns, sys.executable, "-c",
                                 "import socket,sys; s=socket.create_connection((sys.argv[1], 25), 5);"
                                 "print(s.recv(200).decode().strip())", US)
        s_client = await run_in_ns(ns, "openssl", "s_client", "-starttls", "smtp", "-connect", f"{US}:25",
                                   "-CAfile", str(pki.ca_file), "-verify_hostname", "mail.test",
                                   "-verify_return_error", "-tls1_3", "-crlf", "-brief", "-ign_eof",
                                   stdin=b"QUIT\n")
        smtplib_run = await run_in_ns(ns, sys.executable, str(script), US, str(pki.ca_file))
        server.close()
        # s_client and smtplib read the greeting once, then talked: aiosmtpd's own copy matched.
        assert server.preload_repeats["matched"] >= 2 and server.preload_repeats["mismatched"] == 0
        return banner, s_client, smtplib_run

    try:
        banner, (rc, out, err), (rc2, out2, err2) = aio.run(main(), stack=stack, device=dev)
    finally:
        dev.close()
    assert banner[0] == 0 and banner[1].strip() == smtp_greeting("mail.test").decode().strip()
    assert rc == 0, err
    assert "Protocol version: TLSv1.3" in err and "Verification: OK" in err
    assert "221" in out                                  # QUIT answered inside TLS
    assert rc2 == 0, err2
    assert out2.split() == ["250", "220", "TLSv1.3"]
    assert handler.messages and b"hello" in handler.messages[0]
