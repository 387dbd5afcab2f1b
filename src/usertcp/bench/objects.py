"""``usertcp bench objects``: CPU per GB of payload objects against copying I/O.

Two stacks on the in-memory network (no loss, 0.1 ms delay) in virtual time, in this one
process, over two kinds of link, side by side in one run:

* ``mss``: MSS-sized packets (1500-byte MTU), the default link of the fidelity tests;
* ``offload``: a loopback/virtio-like link with TSO and GRO (``LinkConfig.offload``):
  the stacks emit and take up to 64 KiB packets, checksums are trusted. This is where
  the per-byte costs the objects remove are not drowned in per-packet interpretation.

``build`` says which build ran (pure Python or compiled by mypyc, see setup.py): the copy the
objects avoid is a larger share of a compiled segment's cost.

CPU is ``time.process_time()`` charged to the host that spends it: each stack sits
behind a metering endpoint (segment input, timers, output), and the application's own
calls on a host (recv, ring submissions and completions, send) are metered on that host.
The in-memory link is not charged to either host: it stands for the NIC's DMA or the
loopback hand-over; joining a packet's header and payload parts into bytes happens
there (``link_cpu_s_per_gb`` reports everything outside both hosts). So "receiver CPU per
GB" is the receiving host, stack plus application, per GB delivered, like the design's
whole-host CPU; only the ratios compare with it (Python against a kernel).

Figures per link:
  receiver_cpu_s_per_gb.{recv,capture,discard} - 64 KiB writes; the receiver calls
      recv_into() a 64 KiB buffer / captures every 64 KiB as an object (then frees it) /
      DISCARDs every 64 KiB.
  sender_cpu_s_per_gb.{copy,zerocopy,objsend}[size] - one buffer or one object per request:
      send() from a bytearray (the stack must copy it), send(MSG_ZEROCOPY) of it (pinned
      until its completion, reaped from the error queue) and OBJ_SEND of an object created
      once (references only).
  ranges_1k_cpu_s_per_gb.{1,8} - 1 KiB object sends, 1 or 8 ranges per request.
Besides: ``paced`` (the sender writes 64 KiB at a fixed rate, so every write arrives
alone), ``bandwidth_limited`` (an offload link of 10 Gbit/s: the receiver sees the path's
rate, not the sender's bursts), and ``tun`` (usertcp receiving over a TUN device with
offloads from a kernel sender in a network namespace, real time; needs root).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from usertcp import builds
from usertcp.net.driver import VirtualTimeDriver
from usertcp.net.memnet import LinkConfig, Network
from usertcp.objects import AT_TAIL, Ring, Store
from usertcp.tcp.connection import Connection
from usertcp.tcp.stack import Stack
from usertcp.tcp.zerocopy import ZerocopySend
from usertcp.wire.segment import Buffer, TxPacket

KiB = 1024
MiB = 1 << 20
SEND_SIZES = (1 * KiB, 4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, 1 * MiB)
LINKS: dict[str, LinkConfig] = {
    "mss": LinkConfig(delay=0.0001),
    "offload": LinkConfig(delay=0.0001, offload=True),
}
PACED_BPS = 2e9                      # the paced sender's application rate
LIMITED = LinkConfig(delay=0.0001, offload=True, bandwidth_bps=10e9, queue_limit=4096)

# Published figures (development kernels, virtio-net, whole-host CPU per GB, full speed).
ANCHORS: dict[str, Any] = {
    "receive_64k_capture_vs_recv_pct_cheaper": 31,
    "receive_64k_discard_vs_recv_pct_cheaper": 57,
    "receive_64k_16gbit_path_capture_discard_pct_cheaper": [15, 53],
    "receive_paced_capture_vs_recv_within_pct": 21,
    "send_objsend_vs_copy_pct_cheaper_from_16k": [40, 57],
    "send_1k_8_ranges_vs_1_times_cheaper": 3.6,
    "send_objsend_vs_msg_zerocopy_pct_cheaper": [12, 48],
}
MSG_ZEROCOPY = ("sender_cpu_s_per_gb.zerocopy: send(MSG_ZEROCOPY) of a mutable buffer, pinned by "
                "reference until its completion (usertcp.tcp.zerocopy), completions reaped from the error "
                "queue; every usertcp link copies the payload when the packet leaves, as Linux's tun does "
                "(SO_EE_CODE_ZEROCOPY_COPIED)")

_pt = time.process_time


class _Metered:
    """An endpoint wrapper that charges the stack's CPU to its host. ``ledger[0]`` sums what
    every metered endpoint of the bed charged, so that an application call that triggers
    stack work (a kick flushes both hosts) does not count that work a second time."""

    __slots__ = ("inner", "cpu", "ledger")

    def __init__(self, inner: Stack, ledger: list[float]) -> None:
        self.inner = inner
        self.cpu = 0.0
        self.ledger = ledger

    def receive(self, packet: Buffer, now: float, *, checksum_verified: bool = False) -> None:
        t = _pt()
        self.inner.receive(packet, now, checksum_verified=checksum_verified)
        dt = _pt() - t
        self.cpu += dt
        self.ledger[0] += dt

    def datagrams_to_send(self) -> list[TxPacket]:
        t = _pt()
        out = self.inner.datagrams_to_send()
        dt = _pt() - t
        self.cpu += dt
        self.ledger[0] += dt
        return out

    def get_timer(self) -> float | None:
        return self.inner.get_timer()

    def handle_timer(self, now: float) -> None:
        t = _pt()
        self.inner.handle_timer(now)
        dt = _pt() - t
        self.cpu += dt
        self.ledger[0] += dt

    # What an offload link sets on the stack it serves (memnet duck-types a Stack).
    @property
    def gso_max_size(self) -> int:
        return self.inner.gso_max_size

    @gso_max_size.setter
    def gso_max_size(self, v: int) -> None:
        self.inner.gso_max_size = v

    @property
    def tx_csum_offload(self) -> bool:
        return self.inner.tx_csum_offload

    @tx_csum_offload.setter
    def tx_csum_offload(self, v: bool) -> None:
        self.inner.tx_csum_offload = v


class _Bed:
    """Sender stack a, receiver stack b, one connection a -> b over ``link``."""

    def __init__(self, link: LinkConfig) -> None:
        self.net = Network(seed=1)
        self.a, self.b = Stack(["10.0.0.1"], name="tx"), Stack(["10.0.0.2"], name="rx")
        self.ledger = [0.0]
        self.ma, self.mb = _Metered(self.a, self.ledger), _Metered(self.b, self.ledger)
        ha = self.net.add_host(self.ma, ["10.0.0.1"])
        hb = self.net.add_host(self.mb, ["10.0.0.2"])
        self.link = self.net.connect(ha, hb, link)
        self.drv = VirtualTimeDriver(self.net)
        lst = self.b.listen(80)
        self.tx = self.a.create_connection("10.0.0.2", 80)
        self.a.connect(self.tx, 0.0)
        self.drv.kick()
        assert self.drv.run_until(lambda: bool(lst.accept_queue), 5)
        rx = lst.accept()
        assert rx is not None
        self.rx: Connection = rx
        self.app_tx = 0.0
        self.app_rx = 0.0
        self.t0 = _pt()

    def run(self, step: Callable[[], bool], what: str) -> None:
        self.t0 = _pt()
        self.ma.cpu = self.mb.cpu = self.app_tx = self.app_rx = 0.0
        if not self.drv.run_until(step, 1e6):
            raise RuntimeError(f"benchmark {what} stalled")
        self.total = _pt() - self.t0

    def mark(self) -> tuple[float, float]:
        return _pt(), self.ledger[0]

    def own(self, mark: tuple[float, float]) -> float:
        """CPU since ``mark`` minus what the metered stacks charged meanwhile."""
        return (_pt() - mark[0]) - (self.ledger[0] - mark[1])

    @property
    def cpu_tx(self) -> float:
        return self.ma.cpu + self.app_tx

    @property
    def cpu_rx(self) -> float:
        return self.mb.cpu + self.app_rx

    @property
    def cpu_link(self) -> float:
        """Everything outside both hosts: the link (packets becoming bytes) and the driver."""
        return max(self.total - self.cpu_tx - self.cpu_rx, 0.0)


def _bulk_sender(bed: _Bed, total: int, chunk: bytes, paced_bps: float | None) -> Callable[[], None]:
    """The same 64 KiB bytes object every write (taken by reference: no sender copy); with
    ``paced_bps``, one write per ``len(chunk) * 8 / paced_bps`` seconds."""
    sent = [0]
    next_at = [0.0]
    tx = bed.tx
    gap = len(chunk) * 8 / paced_bps if paced_bps else 0.0

    def step() -> None:
        mk = bed.mark()
        now = bed.drv.now()
        while sent[0] < total and tx.send_space > 0 and now >= next_at[0]:
            left = total - sent[0]
            n = tx.send(chunk if left >= len(chunk) else chunk[:left], now)
            if not n:
                break
            sent[0] += n
            if gap:
                next_at[0] = now + gap
            if n < len(chunk):
                break
        bed.drv.kick()
        bed.app_tx += bed.own(mk)

    return step


def _receiver(mode: str, bed: _Bed, total: int, write: int,
              compact_ratio: float = 0.0) -> tuple[Callable[[], bool], list[int]]:
    """The receiving application for ``mode``; returns its step and its byte counter."""
    rx = bed.rx
    got = [0]
    if mode == "recv":
        buf = memoryview(bytearray(write))

        def step() -> bool:
            if rx.readable_bytes >= min(write, total - got[0]):
                mk = bed.mark()
                while rx.readable_bytes:
                    got[0] += rx.recv_into(buf, bed.drv.now())
                bed.drv.kick()
                bed.app_rx += bed.own(mk)
            return got[0] >= total
        return step, got
    store = Store(8 * MiB, driver=bed.drv, compact_ratio=compact_ratio)
    ring = Ring(store)
    ring.prep_collect(rx, 0)
    ring.submit()
    sid = ring.reap()[0].res
    inflight = [0]
    issued = [0]

    def refill() -> None:
        while inflight[0] < 4 and issued[0] < total:
            n = min(write, total - issued[0])
            if mode == "capture":
                ring.prep_recv_object(sid, AT_TAIL, n, n)   # user_data: the length asked for
            else:
                ring.prep_discard(sid, n, 0)
            issued[0] += n
            inflight[0] += 1
        ring.submit()

    refill()

    def ring_step() -> bool:
        # Reap until the ring is quiet: a refill's operations may complete at once on bytes
        # already buffered, and the driver checks this step only after an event (an idle
        # link has none, and the receiver sends no window update for every pass).
        while ring.cq_ready:
            mk = bed.mark()
            for c in ring.reap():
                inflight[0] -= 1
                if c.res < 0:
                    raise RuntimeError(f"{mode}: completion {c}")
                if mode == "capture" and c.user_data:
                    got[0] += c.user_data
                    ring.prep_free(c.res, 0)
                    inflight[0] += 1       # the FREE's own completion
                elif mode == "discard":
                    got[0] += c.res
            refill()
            bed.app_rx += bed.own(mk)
        return got[0] >= total
    return ring_step, got


def receive(mode: str, total: int, link: LinkConfig, *, write: int = 64 * KiB,
            paced_bps: float | None = None, compact_ratio: float = 0.0) -> dict[str, float]:
    """Receiver-host CPU seconds per GB for ``mode`` in recv/capture/discard. ``compact_ratio``
    is the store's: 0 keeps every captured fragment by reference (the whole buffer charged)."""
    bed = _Bed(link)
    send = _bulk_sender(bed, total, bytes(write), paced_bps)
    rstep, got = _receiver(mode, bed, total, write, compact_ratio)

    def step() -> bool:
        send()
        return rstep()

    if paced_bps:
        _run_paced(bed, step, write * 8 / paced_bps, f"receive {mode}")
    else:
        bed.run(step, f"receive {mode}")
    st = bed.link.ab.stats
    return {"cpu_s_per_gb": bed.cpu_rx / total * 1e9, "link_cpu_s_per_gb": bed.cpu_link / total * 1e9,
            "packets": st.delivered, "bytes_per_packet": st.bytes_delivered / max(st.delivered, 1),
            "got": got[0]}


def _run_paced(bed: _Bed, step: Callable[[], bool], gap: float, what: str) -> None:
    """Advance virtual time in steps of the write gap so the paced sender writes on time."""
    bed.t0 = _pt()
    bed.ma.cpu = bed.mb.cpu = bed.app_tx = bed.app_rx = 0.0
    deadline = bed.drv.now() + 1e4
    while not step():
        if bed.drv.now() > deadline:
            raise RuntimeError(f"benchmark {what} stalled")
        bed.drv.run_until(step, gap)
    bed.total = _pt() - bed.t0


def _drain_receiver(bed: _Bed) -> Callable[[], int]:
    rx = bed.rx
    got = [0]
    buf = memoryview(bytearray(1 << 22))

    def step() -> int:
        while rx.readable_bytes:
            got[0] += rx.recv_into(buf, bed.drv.now())
            bed.drv.kick()
        return got[0]

    return step


def send(mode: str, size: int, total: int, link: LinkConfig, ranges: int = 1) -> float:
    """Sender-host CPU seconds per GB: ``copy`` send(), ``zerocopy`` send(MSG_ZEROCOPY) (the
    buffer pinned until its completion, which the application reaps) or ``objsend`` OBJ_SEND."""
    bed = _Bed(link)
    drain = _drain_receiver(bed)
    tx = bed.tx
    total = max(total // (size * ranges), 1) * size * ranges
    if mode in ("copy", "zerocopy"):
        view = memoryview(bytearray(size))
        state = {"sent": 0, "off": 0}
        pinned = mode == "zerocopy"     # MSG_ZEROCOPY: the buffer is kept by reference

        def step() -> bool:
            if (state["sent"] < total and tx.send_space > 0) or (pinned and tx.errqueue):
                mk = bed.mark()
                while state["sent"] < total and tx.send_space > 0:
                    # copy: the stack copies (a mutable buffer); zerocopy: it pins the buffer
                    # as the socket layer's send(MSG_ZEROCOPY): the call takes a notification id
                    zc = ZerocopySend(tx) if pinned else None
                    n = tx.send(view[state["off"]:], bed.drv.now(), pinned=pinned)
                    if zc is not None:
                        zc.finish(tx)
                    if not n:
                        break
                    state["sent"] += n
                    state["off"] = (state["off"] + n) % size
                if pinned and tx.errqueue is not None:
                    while tx.errqueue.pop() is not None:   # the completions, as recvmsg(MSG_ERRQUEUE)
                        pass
                bed.drv.kick()
                bed.app_tx += bed.own(mk)
            return drain() >= total
    else:
        store = Store(64 * MiB, driver=bed.drv)
        ring = Ring(store, sq_entries=4096)
        ring.prep_create(bytes(size * ranges), 0)
        ring.submit()
        h = ring.reap()[0].res
        vec = [(h, i * size, size) for i in range(ranges)]
        per = size * ranges
        queue_limit = max(2, (512 * KiB) // per)   # keep the socket buffer full, no more
        st = {"issued": 0, "inflight": 0}

        def step() -> bool:
            if (st["inflight"] < queue_limit and st["issued"] < total) or ring.cq_ready:
                mk = bed.mark()
                st["inflight"] -= len(ring.reap())
                while st["inflight"] < queue_limit and st["issued"] < total:
                    ring.prep_obj_send(tx, vec, 1)
                    st["issued"] += per
                    st["inflight"] += 1
                ring.submit()
                bed.app_tx += bed.own(mk)
            return drain() >= total
    bed.run(step, f"send {mode} {size}")
    return bed.cpu_tx / total * 1e9


# ------------------------------------------------------------------ TUN, kernel sender

_KERNEL_SENDER = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=60)
chunk, n = bytes(int(sys.argv[4])), int(sys.argv[3])
while n > 0:
    k = min(n, len(chunk))
    s.sendall(chunk[:k] if k < len(chunk) else chunk)
    n -= k
s.shutdown(socket.SHUT_WR)
s.recv(1)
s.close()
"""


def tun_receive(mode: str, total: int, *, write: int = 64 * KiB, timeout: float = 120.0) -> dict[str, Any]:
    """usertcp receives ``total`` bytes over a TUN device with offloads from a kernel sender
    (another process, in a namespace made here): this process's CPU per GB (driver thread
    and application), wall-clock rate."""
    from usertcp.net import netns
    from usertcp.net.tun import TunDevice, TunDriver

    peer, us = "10.77.0.1", "10.77.0.2"
    with netns.namespace("utcpo") as ns:
        dev = TunDevice.open("utobj0", offload=True, netns=ns)
        try:
            dev.configure(peer_address=f"{peer}/24")
            stack = Stack([us], name="tun-rx")
            stack.gso_max_size = 65535 - 60 - 60 - 40     # what `usertcp serve` sets with offloads
            stack.tx_csum_offload = True
            drv = TunDriver(stack, dev)
            with drv.lock:
                lst = stack.listen(5001)
            drv.start()
            sender = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", _KERNEL_SENDER,
                                       us, "5001", str(total), str(write)])
            try:
                if not drv.wait_until(lambda: bool(lst.accept_queue), 10):
                    raise RuntimeError("the kernel sender did not connect")
                with drv.lock:
                    conn = lst.accept()
                assert conn is not None
                t0, w0 = _pt(), time.monotonic()
                got = _tun_consume(mode, drv, conn, total, write, timeout)
                cpu, wall = _pt() - t0, time.monotonic() - w0
                with drv.lock:
                    conn.close(drv.now())
                drv.kick()
            finally:
                sender.wait(30)
                drv.close()
        finally:
            dev.close()
    return {"cpu_s_per_gb": cpu / total * 1e9, "mb_per_s": round(total / wall / 1e6, 1), "got": got}


def _tun_consume(mode: str, drv: Any, conn: Connection, total: int, write: int, timeout: float) -> int:
    got = 0
    deadline = time.monotonic() + timeout
    if mode == "recv":
        buf = memoryview(bytearray(write))
        while got < total and time.monotonic() < deadline:
            drv.wait_until(lambda: conn.readable_bytes > 0 or conn.fin_received, 1.0)
            with drv.lock:
                while conn.readable_bytes:
                    got += conn.recv_into(buf, drv.now())
            drv.kick()
        return got
    store = Store(8 * MiB, driver=drv, compact_ratio=0)
    ring = Ring(store)
    ring.prep_collect(conn, 0)
    sid = ring.submit_and_wait(1, 5)[0].res
    issued = inflight = 0
    while got < total and time.monotonic() < deadline:
        while inflight < 4 and issued < total:
            n = min(write, total - issued)
            if mode == "capture":
                ring.prep_recv_object(sid, AT_TAIL, n, n)
            else:
                ring.prep_discard(sid, n, 0)
            issued += n
            inflight += 1
        for c in ring.submit_and_wait(1, 1.0):
            inflight -= 1
            if c.res < 0:
                raise RuntimeError(f"{mode} over TUN: {c}")
            if mode == "capture" and c.user_data:
                got += c.user_data
                ring.prep_free(c.res, 0)
                inflight += 1
            elif mode == "discard":
                got += c.res
    store.close()
    return got


def tun_available() -> str | None:
    """None if the TUN comparison can run here, else why not."""
    if os.geteuid() != 0:
        return "needs root"
    if not os.path.exists("/dev/net/tun"):
        return "no /dev/net/tun"
    return None


# ----------------------------------------------------------------------------- the run


def _pct_cheaper(ours: float, base: float) -> float:
    return round((1 - ours / base) * 100, 1) if base else 0.0


def _best(fn: Callable[[], float], repeat: int) -> float:
    return round(min(fn() for _ in range(max(repeat, 1))), 3)


def _receive_set(total: int, link: LinkConfig, repeat: int, paced_bps: float | None = None) -> dict[str, Any]:
    cpu: dict[str, float] = {}
    pkts: dict[str, float] = {}
    link_cpu: dict[str, float] = {}
    for m in ("recv", "capture", "discard"):
        runs = [receive(m, total, link, paced_bps=paced_bps) for _ in range(max(repeat, 1))]
        r = min(runs, key=lambda x: x["cpu_s_per_gb"])
        if r["got"] != total:
            raise RuntimeError(f"receive {m}: {r['got']} of {total} bytes")
        cpu[m] = round(r["cpu_s_per_gb"], 3)
        link_cpu[m] = round(r["link_cpu_s_per_gb"], 3)
        pkts[m] = round(r["bytes_per_packet"])
    return {"receiver_cpu_s_per_gb": cpu, "link_cpu_s_per_gb": link_cpu, "bytes_per_data_packet": pkts,
            "capture_vs_recv_pct_cheaper": _pct_cheaper(cpu["capture"], cpu["recv"]),
            "discard_vs_recv_pct_cheaper": _pct_cheaper(cpu["discard"], cpu["recv"])}


def _send_set(send_total: int, ranges_total: int, link: LinkConfig, repeat: int) -> dict[str, Any]:
    snd: dict[str, dict[str, float]] = {"copy": {}, "zerocopy": {}, "objsend": {}}
    for size in SEND_SIZES:
        label = f"{size // KiB}KiB" if size < MiB else "1MiB"
        for m in snd:
            snd[m][label] = _best(lambda m=m, size=size: send(m, size, send_total, link), repeat)  # type: ignore[misc]
    rng = {str(r): _best(lambda r=r: send("objsend", KiB, ranges_total, link, ranges=r), repeat)  # type: ignore[misc]
           for r in (1, 8)}
    return {"sender_cpu_s_per_gb": snd, "ranges_1k_cpu_s_per_gb": rng,
            "objsend_vs_copy_pct_cheaper": {k: _pct_cheaper(snd["objsend"][k], snd["copy"][k])
                                            for k in snd["copy"]},
            "objsend_vs_zerocopy_pct_cheaper": {k: _pct_cheaper(snd["objsend"][k], snd["zerocopy"][k])
                                                for k in snd["copy"]},
            "1k_8_ranges_vs_1_times_cheaper": round(rng["1"] / rng["8"], 2) if rng["8"] else 0.0}


def run(*, total: int = 32 * MiB, send_total: int = 16 * MiB, ranges_total: int = 8 * MiB,
        repeat: int = 1, tun: bool = True, tun_total: int = 256 * MiB) -> dict[str, Any]:
    """Every figure of the issue in one run; ``repeat`` takes the best of N runs each."""
    t0 = time.perf_counter()
    links: dict[str, Any] = {}
    for name, cfg in LINKS.items():
        links[name] = {**_receive_set(total, cfg, repeat), **_send_set(send_total, ranges_total, cfg, repeat)}
    paced = _receive_set(total, LINKS["offload"], repeat, paced_bps=PACED_BPS)
    limited = _receive_set(total, LIMITED, repeat)
    why_not = tun_available() if tun else "not requested"
    tun_res: dict[str, Any]
    if why_not is None:
        try:
            runs = {m: tun_receive(m, tun_total) for m in ("recv", "capture", "discard")}
            cpu = {m: round(r["cpu_s_per_gb"], 3) for m, r in runs.items()}
            tun_res = {"receiver_cpu_s_per_gb": cpu, "mb_per_s": {m: r["mb_per_s"] for m, r in runs.items()},
                       "capture_vs_recv_pct_cheaper": _pct_cheaper(cpu["capture"], cpu["recv"]),
                       "discard_vs_recv_pct_cheaper": _pct_cheaper(cpu["discard"], cpu["recv"]),
                       "bytes": tun_total}
        except (OSError, RuntimeError) as exc:
            tun_res = {"skipped": f"{type(exc).__name__}: {exc}"}
    else:
        tun_res = {"skipped": why_not}
    off = links["offload"]
    return {
        "what": "CPU seconds per GB of payload (time.process_time), charged to the host that "
                "spends it: its stack (input, timers, output) plus the application's calls on it; "
                "two stacks in one process, virtual time, lossless links (mss: 1500-byte packets; "
                "offload: TSO/GRO packets up to 64 KiB, as loopback or virtio). The link (packets "
                "becoming bytes) is charged to neither host. tun: this process (driver thread and "
                "application) receiving from a kernel sender over TUN with offloads, real time. "
                "Compare ratios with the anchors, not absolute numbers.",
        "build": builds.current(),     # pure Python or compiled (mypyc): usertcp --version
        "bytes": {"receive": total, "send_per_size": send_total, "ranges": ranges_total},
        "links": links,
        "paced": {"rate_bps": PACED_BPS, "link": "offload", **paced},
        "bandwidth_limited": {"bandwidth_bps": LIMITED.bandwidth_bps, "link": "offload", **limited},
        "tun_offload_kernel_sender": tun_res,
        "msg_zerocopy": MSG_ZEROCOPY,
        "ours_offload": {
            "receive_64k_capture_vs_recv_pct_cheaper": off["capture_vs_recv_pct_cheaper"],
            "receive_64k_discard_vs_recv_pct_cheaper": off["discard_vs_recv_pct_cheaper"],
            "send_objsend_vs_copy_pct_cheaper": off["objsend_vs_copy_pct_cheaper"],
            "send_objsend_vs_msg_zerocopy_pct_cheaper": off["objsend_vs_zerocopy_pct_cheaper"],
            "send_1k_8_ranges_vs_1_times_cheaper": off["1k_8_ranges_vs_1_times_cheaper"],
        },
        "anchors": ANCHORS,
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def profile(mode: str, total: int = 32 * MiB, link: str = "offload", top: int = 20) -> str:
    """cProfile of one receive run (``recv``/``capture``/``discard``) or one send run
    (``copy``/``objsend`` at 64 KiB): the functions by own time."""
    pr = cProfile.Profile()
    pr.enable()
    if mode in ("copy", "objsend"):
        send(mode, 64 * KiB, total, LINKS[link])
    else:
        receive(mode, total, LINKS[link])
    pr.disable()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def _table(r: dict[str, Any]) -> str:
    a = r["anchors"]
    lines = []
    for name, lk in r["links"].items():
        rc = lk["receiver_cpu_s_per_gb"]
        lines += [f"[{name} link] receiver, 64 KiB writes (CPU s/GB): "
                  + ", ".join(f"{k} {v}" for k, v in rc.items()),
                  f"  capture vs recv: {lk['capture_vs_recv_pct_cheaper']}% cheaper "
                  f"(anchor {a['receive_64k_capture_vs_recv_pct_cheaper']}%); discard vs recv: "
                  f"{lk['discard_vs_recv_pct_cheaper']}% "
                  f"(anchor {a['receive_64k_discard_vs_recv_pct_cheaper']}%)",
                  "  sender (CPU s/GB)      copy  zerocopy   objsend   objsend cheaper than copy (anchor "
                  "40-57% from 16 KiB), than zerocopy (anchor 12-48%)"]
        snd = lk["sender_cpu_s_per_gb"]
        for k in snd["copy"]:
            lines.append(f"  {k:>6} {snd['copy'][k]:>14} {snd['zerocopy'][k]:>9} {snd['objsend'][k]:>9}   "
                         f"{lk['objsend_vs_copy_pct_cheaper'][k]}%, "
                         f"{lk['objsend_vs_zerocopy_pct_cheaper'][k]}%")
        rg = lk["ranges_1k_cpu_s_per_gb"]
        lines.append(f"  1 KiB object sends: 1 range {rg['1']}, 8 ranges {rg['8']} CPU s/GB: "
                     f"{lk['1k_8_ranges_vs_1_times_cheaper']}x cheaper (anchor "
                     f"{a['send_1k_8_ranges_vs_1_times_cheaper']}x)")
    for key in ("paced", "bandwidth_limited"):
        p = r[key]
        lines.append(f"[{key}] receiver CPU s/GB {p['receiver_cpu_s_per_gb']}: capture "
                     f"{p['capture_vs_recv_pct_cheaper']}%, "
                     f"discard {p['discard_vs_recv_pct_cheaper']}% cheaper")
    t = r["tun_offload_kernel_sender"]
    lines.append(f"[tun, kernel sender] {t}")
    lines.append(f"MSG_ZEROCOPY: {r['msg_zerocopy']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="usertcp bench objects", description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--mib", type=int, default=32, help="MiB per receive run (send runs: half)")
    p.add_argument("--repeat", type=int, default=1, help="best of N runs per figure")
    p.add_argument("--no-tun", action="store_true", help="skip the TUN run (needs root)")
    p.add_argument("--tun-mib", type=int, default=256, help="MiB per TUN receive run")
    p.add_argument("--profile", choices=("recv", "capture", "discard", "copy", "objsend"),
                   help="print a profile of one run on the offload link instead")
    ns = p.parse_args(argv)
    if ns.profile:
        print(profile(ns.profile, ns.mib * MiB))
        return 0
    r = run(total=ns.mib * MiB, send_total=max(ns.mib // 2, 1) * MiB,
            ranges_total=max(ns.mib // 4, 1) * MiB, repeat=ns.repeat, tun=not ns.no_tun,
            tun_total=ns.tun_mib * MiB)
    print(json.dumps(r, indent=2) if ns.json else _table(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
