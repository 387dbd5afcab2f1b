"""Unmodified third-party asyncio software on usertcp, in virtual time on a lossy, delayed link.

uvicorn (an ASGI app), aiohttp (server and client), httpx (AsyncClient) and aiosmtpd (with
its greeting preloaded on the listening socket, then STARTTLS) run on a
:class:`usertcp.aio.UsertcpEventLoop` over the in-memory network. The link loses, delays
and jitters packets, so TCP's recovery runs under each of them; virtual time makes the
retransmission timeouts cost nothing.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
import uvicorn
from aiohttp import web
from aiosmtpd.handlers import Sink
from aiosmtpd.smtp import SMTP, Envelope, Session

from tls_certs import Pki, make_pki
from usertcp import aio
from usertcp import socket as usocket
from usertcp.bench.apps import asgi_app, smtp_greeting
from usertcp.net.memnet import LinkConfig, Network
from usertcp.tcp.config import StackConfig
from usertcp.tcp.stack import Stack

CLIENT, SERVER = "10.0.0.1", "10.0.0.2"
LOSSY = LinkConfig(delay=0.02, loss=0.03, jitter=0.005, reorder=0.02)


def lossy_world(seed: int = 5) -> tuple[Network, Stack, Stack]:
    net = Network(seed=seed)
    cfg = StackConfig(isn_secret=b"i" * 16, ts_secret=b"t" * 16)
    client, server = Stack([CLIENT], cfg, name="client"), Stack([SERVER], cfg, name="server")
    net.connect(net.add_host(client, [CLIENT], "client"), net.add_host(server, [SERVER], "server"), LOSSY)
    return net, client, server


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), names=("server.test", "mail.test"))


async def start_uvicorn(host: str, port: int) -> tuple[uvicorn.Server, asyncio.Task[None]]:
    config = uvicorn.Config(asgi_app, host=host, port=port, log_level="warning", lifespan="off",
                            http="h11", ws="none", date_header=False)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
        if task.done():
            task.result()
    return server, task


def test_uvicorn_with_httpx_and_aiohttp_clients() -> None:
    net, client, _server = lossy_world()

    async def main() -> tuple[list[Any], dict[str, Any], float]:
        server, task = await start_uvicorn(SERVER, 8000)
        results: list[Any] = []
        async with httpx.AsyncClient(base_url="http://web.test:8000") as hc:
            for i in range(5):                          # keep-alive: one connection
                r = await hc.get(f"/hello/{i}")
                results.append((r.status_code, r.text))
            big = await hc.post("/echo", content=bytes(range(256)) * 1000)
            results.append(len(big.content))
        async with aiohttp.ClientSession() as session, session.get("http://web.test:8000/json") as resp:
            body = await resp.json()
        server.should_exit = True
        await task
        return results, body, asyncio.get_running_loop().time()

    results, body, now = aio.run(main(), net, hosts={"web.test": SERVER})
    assert results[:5] == [(200, f"hello {i}\n") for i in range(5)]
    assert results[5] == 256_000
    assert body == {"path": "/json", "method": "GET"}
    assert client.counters.get("TcpRetransSegs", 0) > 0, "the lossy link should have cost retransmissions"
    assert now > 1.0          # virtual seconds: retransmission timeouts ran without real waiting


def test_aiohttp_server_and_client() -> None:
    net, _client, _server = lossy_world(seed=9)

    async def handle(request: web.Request) -> web.StreamResponse:
        data = await request.read()
        return web.json_response({"len": len(data), "peer": request.transport.get_extra_info("peername")[0]
                                  if request.transport else None})

    async def main() -> list[dict[str, Any]]:
        app = web.Application()
        app.router.add_post("/upload", handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, SERVER, 8080)
        await site.start()
        out = []
        async with aiohttp.ClientSession() as session:
            for size in (0, 10, 300_000):
                async with session.post("http://api.test:8080/upload", data=b"z" * size) as resp:
                    assert resp.status == 200
                    out.append(await resp.json())
        await runner.cleanup()
        return out

    out = aio.run(main(), net, hosts={"api.test": SERVER})
    assert out == [{"len": n, "peer": CLIENT} for n in (0, 10, 300_000)]


class Collect(Sink):
    def __init__(self) -> None:
        self.messages: list[tuple[str, list[str], bytes]] = []

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.content if isinstance(envelope.content, bytes) else str(envelope.content).encode()
        self.messages.append((str(envelope.mail_from), list(envelope.rcpt_tos), content))
        return "250 OK"


async def smtp_reply(reader: asyncio.StreamReader) -> tuple[int, list[bytes]]:
    lines = []
    while True:
        line = await reader.readline()
        lines.append(line)
        if line[3:4] != b"-":
            return int(line[:3]), lines


def test_aiosmtpd_preloaded_greeting_then_starttls(pki: Pki) -> None:
    net, _client, server_stack = lossy_world(seed=3)
    handler = Collect()

    async def main() -> tuple[bytes, float, list[bytes], list[bytes], str | None]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, aio.UsertcpEventLoop)
        hostname = "mail.test"
        lsock = loop.socket(stack=server_stack)
        lsock.bind((SERVER, 25))
        lsock.listen(64)
        greeting = smtp_greeting(hostname)
        lsock.send(greeting, usocket.MSG_PRELOAD)          # the stack sends it after the 3rd ACK
        server = await loop.create_server(
            lambda: SMTP(handler, hostname=hostname, tls_context=pki.server_context()), sock=lsock)
        # aiosmtpd unmodified still writes its greeting: the transport takes it as the preload's
        # repeat (checked byte for byte) instead of sending it twice.
        assert isinstance(server, aio.Server)
        server.preload(greeting, app_sends_it=True)
        t0 = loop.time()
        reader, writer = await asyncio.open_connection("mail.test", 25)
        banner = await reader.readline()
        banner_after = loop.time() - t0
        writer.write(b"EHLO client.test\r\n")
        code, ehlo = await smtp_reply(reader)
        assert code == 250
        writer.write(b"STARTTLS\r\n")
        assert (await smtp_reply(reader))[0] == 220
        await writer.start_tls(pki.client_context(), server_hostname="mail.test")
        writer.write(b"EHLO client.test\r\n")
        code, ehlo_tls = await smtp_reply(reader)
        for cmd, want in ((b"MAIL FROM:<a@client.test>", 250), (b"RCPT TO:<b@mail.test>", 250),
                          (b"DATA", 354)):
            writer.write(cmd + b"\r\n")
            assert (await smtp_reply(reader))[0] == want, cmd
        writer.write(b"Subject: hi\r\n\r\n" + b"line of text\r\n" * 2000 + b".\r\n")
        assert (await smtp_reply(reader))[0] == 250
        writer.write(b"QUIT\r\n")
        assert (await smtp_reply(reader))[0] == 221
        ssl_obj = writer.get_extra_info("ssl_object")
        writer.close()
        server.close()
        assert server.preload_repeats == {"matched": 1, "mismatched": 0}
        return banner, banner_after, ehlo, ehlo_tls, ssl_obj.version() if ssl_obj else None

    banner, banner_after, ehlo, ehlo_tls, version = aio.run(main(), net, hosts={"mail.test": SERVER})
    assert banner == smtp_greeting("mail.test")
    assert banner.startswith(b"220 mail.test ")
    assert any(b"STARTTLS" in line for line in ehlo) and not any(b"STARTTLS" in line for line in ehlo_tls)
    assert version == "TLSv1.3"
    assert len(handler.messages) == 1
    mail_from, rcpts, content = handler.messages[0]
    assert (mail_from, rcpts) == ("a@client.test", ["b@mail.test"])
    assert content.count(b"line of text") == 2000
    # The banner came with the handshake's completion: one round trip plus the link's jitter
    # (40 ms RTT here), unless a loss on the way made TCP retransmit.
    assert banner_after < 0.2 or _server_retransmitted(server_stack)


def _server_retransmitted(stack: Stack) -> bool:
    return stack.counters.get("TcpRetransSegs", 0) > 0


def test_uvicorn_json_payload_reproducible(tmp_path: Path) -> None:
    """The same seed gives the same transcript for a real uvicorn + httpx exchange."""

    def once() -> list[str]:
        net, _c, _s = lossy_world(seed=21)
        log: list[str] = []
        net.add_tap(lambda data, now, _d: log.append(f"{now:.9f} {data.hex()}"))

        async def main() -> None:
            server, task = await start_uvicorn(SERVER, 8000)
            async with httpx.AsyncClient() as hc:
                r = await hc.post(f"http://{SERVER}:8000/echo", content=json.dumps({"k": list(range(500))}))
                assert r.status_code == 200
            server.should_exit = True
            await task

        aio.run(main(), net)
        return log

    first, second = once(), once()
    assert len(first) > 10 and first == second
