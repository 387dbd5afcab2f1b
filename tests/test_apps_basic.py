"""usertcp.apps.basic's source app with and without the digest of what it sends."""

from __future__ import annotations

import hashlib

import pytest

from usertcp.apps.basic import BasicServer, ConnReport, pattern
from usertcp.net.driver import VirtualTimeDriver
from usertcp.net.memnet import LinkConfig, Network
from usertcp.tcp.stack import Stack

A, B = "10.0.0.1", "10.0.0.2"


@pytest.mark.parametrize("tx_digest", [True, False])
def test_source_reports_its_digest_unless_told_not_to(tx_digest: bool) -> None:
    net = Network(seed=1)
    client, server = Stack([A], name="client"), Stack([B], name="server")
    net.connect(net.add_host(client, [A]), net.add_host(server, [B]), LinkConfig(delay=0.001))
    drv = VirtualTimeDriver(net)
    reports: list[ConnReport] = []
    size = 300_000
    BasicServer("source", server.listen(19), lambda: server.now, source_bytes=size,
                on_report=reports.append, tx_digest=tx_digest)
    conn = client.create_connection(B, 19)
    client.connect(conn, drv.now())
    got = bytearray()

    def drained() -> bool:
        if conn.readable_bytes:
            got.extend(conn.recv(conn.readable_bytes, drv.now()))
        return conn.fin_received and not conn.readable_bytes

    assert drv.run_until(drained, timeout=60)
    conn.close(drv.now())
    assert drv.run_until(lambda: bool(reports), timeout=60)
    assert bytes(got) == pattern(size)                     # the bytes are the same either way
    (r,) = reports
    assert r.tx_bytes == size
    assert r.tx_sha256 == (hashlib.sha256(pattern(size)).hexdigest() if tx_digest else "")
