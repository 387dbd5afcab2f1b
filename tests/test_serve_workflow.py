"""``usertcp serve`` as docs/tun.md uses it: stats file while serving, ss/nstat on it, a clean
exit on SIGTERM, an SMTP greeting smtplib accepts, and complete checksums in an offload pcap.

Each test runs serve in its own namespace (tests/netns_helpers.py) and is bounded.
"""

from __future__ import annotations

import json
import smtplib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from netns_helpers import ServeProcess, namespace_fixture
from tshark import HAVE_TSHARK, tshark_count, tshark_problems
from usertcp.cli import main as usertcp_main
from usertcp.net import netns

pytestmark = pytest.mark.netns

DEV = "ut0"
PEER, US = "10.77.0.1", "10.77.0.2"


@pytest.fixture
def ns() -> Iterator[str]:
    yield from namespace_fixture()


def _serve(ns: str, app: str, *extra: str) -> ServeProcess:
    return ServeProcess(ns, "--tun", DEV, "--address", US, "--peer-address", f"{PEER}/24", "--app", app,
                        "--quiet", *extra)


def _wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def _connections(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    doc = json.loads(path.read_text())        # never half-written: the writer renames
    return [c for s in doc.get("stacks", []) for c in s.get("connections", [])]


def _connect(ns: str, port: int, rcvbuf: int = 0) -> socket.socket:
    def make() -> socket.socket:
        s = socket.socket()
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(10)
        s.connect((US, port))
        return s

    return netns.call_in_namespace(ns, make)


@pytest.mark.timeout(90)
def test_stats_file_is_written_while_serving_and_read_by_ss_and_nstat(
        ns: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stats = tmp_path / "stats.json"
    with _serve(ns, "echo", "--stats-file", str(stats), "--stats-interval", "0.1") as srv:
        s = _connect(ns, 7)
        try:
            s.sendall(b"hello")
            assert s.recv(100) == b"hello"
            _wait_for(lambda: any(c["state"] == "ESTAB" for c in _connections(stats)))
            assert usertcp_main(["ss", "--stats-file", str(stats)]) == 0
            out = capsys.readouterr().out
            assert "# stack serve-q0" in out and "LISTEN" in out, out
            estab = [line for line in out.splitlines() if line.startswith("ESTAB")]
            assert len(estab) == 1 and f"{US}:7" in estab[0] and f"{PEER}:" in estab[0], out
            assert "bytes_received:5" in out, out                     # the tcp_info line
            assert usertcp_main(["nstat", "--stats-file", str(stats), "PassiveOpens"]) == 0
            out = capsys.readouterr().out
            assert "TcpPassiveOpens" in out and out.split()[-1] == "1", out
        finally:
            s.close()
        assert srv.stop() == 0, srv.stderr
    final = json.loads(stats.read_text())
    assert final["counters"]["TcpPassiveOpens"] == 1 and final["per_queue"][0]["queue"] == 0


@pytest.mark.timeout(90)
def test_sigterm_closes_every_connection_fin_or_rst(ns: str, tmp_path: Path) -> None:
    """An idle connection gets a FIN; one whose data the app has not read gets a RST (as Linux
    closes a process's sockets at exit); serve exits 0 right after."""
    stats = tmp_path / "stats.json"
    with _serve(ns, "echo", "--stats-file", str(stats), "--stats-interval", "0.1",
                "--rcvbuf", "64Ki", "--sndbuf", "64Ki") as srv:
        idle = _connect(ns, 7)
        idle.sendall(b"ping")
        assert idle.recv(100) == b"ping"
        # A client that sends and never reads: echo stops reading once 1 MiB waits to be
        # echoed, so data stays unread in usertcp's receive buffer.
        flood = _connect(ns, 7, rcvbuf=4096)
        errors: list[BaseException] = []

        def send_forever() -> None:
            try:
                while True:
                    flood.sendall(bytes(65536))
            except OSError as e:
                errors.append(e)

        sender = threading.Thread(target=send_forever, daemon=True)
        sender.start()
        _wait_for(lambda: any(c["recv_q"] > 0 for c in _connections(stats)), 30)
        t0 = time.monotonic()
        assert srv.stop() == 0, srv.stderr
        assert time.monotonic() - t0 < 10
        idle.settimeout(5)
        assert idle.recv(100) == b""                   # FIN
        sender.join(10)
        flood.settimeout(5)
        try:
            while flood.recv(1 << 20):
                pass
        except ConnectionResetError as e:
            errors.append(e)
        # Linux reports the reset (ECONNRESET) once, to whichever call comes first: the
        # blocked sendall or the recv; after it the socket reads as EOF.
        assert any(isinstance(e, ConnectionResetError) for e in errors), errors
        idle.close()
        flood.close()
    counters = json.loads(stats.read_text())["counters"]
    assert counters.get("TcpExtTCPAbortOnClose", 0) == 1, counters


@pytest.mark.timeout(60)
@pytest.mark.parametrize("preload", ["220 hi", "hi there"])
def test_smtplib_gets_the_preloaded_greeting(ns: str, preload: str) -> None:
    with _serve(ns, "smtp", "--preload", preload) as srv:
        def talk() -> tuple[tuple[int, bytes], int]:
            with smtplib.SMTP(timeout=10) as client:
                greeting = client.connect(US, 25)
                code = client.ehlo("kernel.test")[0]
                return greeting, code

        greeting, ehlo = netns.call_in_namespace(ns, talk)
        assert srv.stop() == 0, srv.stderr
    assert greeting == (220, preload.removeprefix("220 ").encode()) and ehlo == 250


@pytest.mark.timeout(60)
def test_empty_preload_makes_smtp_greet_after_accept(ns: str) -> None:
    """``--preload ''`` is bench preload's baseline: no preload, the app's own greeting,
    sent after accept (not an empty ``220`` line preloaded)."""
    with _serve(ns, "smtp", "--preload", "") as srv:
        def talk() -> tuple[int, bytes]:
            with smtplib.SMTP(timeout=10) as client:
                return client.connect(US, 25)

        greeting = netns.call_in_namespace(ns, talk)
        assert srv.stop() == 0, srv.stderr
    assert greeting[0] == 220 and greeting[1].startswith(b"usertcp.test"), greeting


@pytest.mark.timeout(90)
@pytest.mark.skipif(not HAVE_TSHARK, reason="tshark not installed (make system-deps)")
def test_offload_pcap_has_complete_tcp_checksums(ns: str, tmp_path: Path) -> None:
    pcap = tmp_path / "offload.pcap"
    with _serve(ns, "echo", "--offload", "--pcap", str(pcap)) as srv:
        def talk() -> bytes:
            with socket.create_connection((US, 7), timeout=10) as s:
                s.sendall(bytes(300_000))
                s.shutdown(socket.SHUT_WR)
                got = b""
                while chunk := s.recv(1 << 20):
                    got += chunk
                return got

        assert netns.call_in_namespace(ns, talk) == bytes(300_000)
        assert srv.stop() == 0, srv.stderr
    assert tshark_count(pcap) > 10
    assert tshark_problems(pcap) == []
