"""``usertcp connect``: stdin to the connection, the connection to stdout, half-close at EOF.

In memory against the built-in echo and SMTP servers (subprocess with stdin), and over TUN
against a kernel listener inside a namespace the test creates.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from netns_helpers import PEER, US, namespace_fixture
from usertcp.api.constants import TCP_MD5SIG
from usertcp.net import netns
from usertcp.net.pcap import read_pcap
from usertcp.tcp.md5sig import build_tcp_md5sig

SRC = Path(__file__).resolve().parents[1] / "src"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def connect(*args: str, stdin: bytes, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*prefix, sys.executable, "-m", "usertcp", "connect", *args], input=stdin,
                          capture_output=True, timeout=60, env=_env())


def test_connect_echo_in_memory_with_pcap_md5_fastopen(tmp_path: Path) -> None:
    pcap = tmp_path / "c.pcap"
    data = b"".join(b"line %d\n" % i for i in range(5000))          # ~50 kB, several windows
    p = connect("10.0.0.2", "7", "--pcap", str(pcap), "--md5-key", "s3cret", "--fastopen", stdin=data)
    assert p.returncode == 0, p.stderr
    assert p.stdout == data                     # every byte back, after our half-close
    packets = read_pcap(pcap)
    assert len(packets) > 20
    # TCP-MD5 (option kind 19) signs the segments: look at the first SYN's options.
    syn = packets[0][1]
    ihl = (syn[0] & 0xF) * 4
    doff = (syn[ihl + 12] >> 4) * 4
    assert b"\x13\x12" in syn[ihl + 20: ihl + doff]


def test_connect_smtp_in_memory() -> None:
    p = connect("10.0.0.2", "25", "--memnet-app", "smtp", stdin=b"EHLO me\r\nQUIT\r\n")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.split(b"\r\n")
    assert lines[0].startswith(b"220 ") and lines[-2].startswith(b"221 ")


def test_connect_refused_and_bad_arguments() -> None:
    p = connect("10.0.0.2", "9", "--memnet-app", "none", stdin=b"")     # nothing listens: RST
    assert p.returncode == 1 and b"refused" in p.stderr.lower()
    p = connect("10.0.0.2", "7", "--tun", "ut0", stdin=b"")
    assert p.returncode == 2 and b"--peer-address" in p.stderr


@pytest.fixture
def ns() -> Iterator[str]:
    yield from namespace_fixture()


@pytest.mark.netns
@pytest.mark.parametrize("md5", ["none", "same key", "other key"])
def test_connect_over_tun_to_a_kernel_listener(ns: str, md5: str) -> None:
    # A kernel socket of the namespace (bound to any address: the TUN comes up with connect).
    server = netns.call_in_namespace(ns, socket.create_server, ("0.0.0.0", 7777))
    extra: tuple[str, ...] = ()
    if md5 != "none":
        # The kernel checks our TCP-MD5 signatures (RFC 2385) and drops a SYN signed wrong.
        server.setsockopt(socket.IPPROTO_TCP, TCP_MD5SIG, build_tcp_md5sig(US, b"k3y"))
        extra = ("--md5-key", "k3y" if md5 == "same key" else "wrong", "--timeout", "3")
    received = bytearray()

    def serve() -> None:
        try:
            conn, _ = server.accept()
        except OSError:
            return                           # nobody came (the wrong-key case), or closed
        with conn:
            while data := conn.recv(65536):
                received.extend(data)
                conn.sendall(data.upper())
            # EOF: our half-close arrived; answering then closing ends the client's output.
            conn.sendall(b"BYE\n")

    server.settimeout(15)                    # the thread ends even if no connection comes
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        data = b"hello kernel\n" * 2000
        p = connect("--tun", "ut0", "--peer-address", f"{PEER}/24", "--address", US, PEER, "7777",
                    *extra, stdin=data, prefix=("ip", "netns", "exec", ns))
        if md5 == "other key":
            assert p.returncode == 1 and b"timed out" in p.stderr and p.stdout == b""
            return
        assert p.returncode == 0, p.stderr
        assert p.stdout == data.upper() + b"BYE\n"
        thread.join(10)
        assert bytes(received) == data
    finally:
        server.close()
