"""Bulk transfer between two stacks in virtual time, timed in process CPU seconds.

Virtual time makes the network free: what is measured is the stack (both ends,
plus the in-memory links and the event loop), which is what a pure-Python TCP
spends per segment. The raw Connection API is used, not sockets, so the socket
layer's overhead is not counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from usertcp.net.driver import VirtualTimeDriver
from usertcp.net.memnet import LinkConfig, Network
from usertcp.tcp.connection import Connection
from usertcp.tcp.stack import Stack

_CHUNK = 1 << 18


def run(size: int = 20_000_000, loss: float = 0.0, delay: float = 0.001, bandwidth_bps: float = 100e6,
        seed: int = 1) -> dict[str, float | int]:
    """Send ``size`` bytes a -> b; returns rates per CPU second and per data segment."""
    if size <= 0:
        raise ValueError("size must be > 0")
    if not 0.0 <= loss < 1.0:
        raise ValueError("loss must be in [0, 1)")
    net = Network(seed=seed)
    a, b = Stack(["10.0.0.1"], name="a"), Stack(["10.0.0.2"], name="b")
    ha, hb = net.add_host(a, ["10.0.0.1"]), net.add_host(b, ["10.0.0.2"])
    net.connect(ha, hb, LinkConfig(delay=delay, bandwidth_bps=bandwidth_bps, loss=loss))
    drv = VirtualTimeDriver(net)
    payload = bytes(_CHUNK)      # content doesn't matter; bytes go by reference
    cpu0 = time.process_time()
    lst = b.listen(5001)
    c = a.create_connection("10.0.0.2", 5001)
    a.connect(c, drv.now())
    if not drv.run_until(lambda: bool(lst.accept_queue), 30):
        raise RuntimeError("handshake did not complete")
    s = lst.accept()
    assert s is not None
    sent = received = 0
    while received < size:
        if sent < size and c.send_space > 0:
            n = c.send(payload if size - sent >= _CHUNK else payload[:size - sent], drv.now())
            sent += n
            if sent == size:
                c.close(drv.now())
            drv.kick()
        if s.readable_bytes:
            received += len(s.recv(1 << 22, drv.now()))
            drv.kick()
            continue
        if not drv.run_until(_progress(c, s, sent < size), 120):
            raise RuntimeError(f"transfer stalled at {received}/{size} bytes")
    cpu = time.process_time() - cpu0
    info = c.info()
    segs = max(int(info["tcpi_data_segs_out"]), 1)
    return {
        "bytes": size,
        "bytes_per_s": size / cpu if cpu > 0 else float("inf"),
        "us_per_segment": cpu * 1e6 / segs,
        "segments": segs,
        "retransmits": a.counters["TcpRetransSegs"],
        "cpu_s": cpu,
        "virtual_s": drv.now(),
        "goodput_bps": size * 8 / drv.now() if drv.now() > 0 else 0.0,
        "events": drv.events,
    }


def _progress(c: Connection, s: Connection, sending: bool) -> Callable[[], bool]:
    """The sender has room (while it still has data) or the receiver has something to read."""
    return lambda: s.readable_bytes > 0 or (sending and c.send_space > 0)


if __name__ == "__main__":
    for k, v in run().items():
        print(f"{k:>15}: {v:,.3f}" if isinstance(v, float) else f"{k:>15}: {v:,}")
