"""``usertcp bench objects``: CPU per GB of payload objects against copying I/O.

Two stacks on the in-memory network (no loss, no bandwidth limit, 0.1 ms delay) in
virtual time, in this one process. CPU is ``time.process_time()`` charged to the
host that spends it: each stack sits behind a metering endpoint (segment input,
timers, and output up to the packet becoming bytes, the copy where it leaves the
process), and the application's own calls on a host (recv, ring submissions and
completions, send) are metered on that host. The simulated links themselves are
not charged to either host. So "receiver CPU per GB" is the whole receiving host,
stack plus application, per GB delivered, like the anchors' whole-host CPU; it is
not comparable in absolute terms (Python against a kernel), only as ratios.

Figures:
  receiver_cpu_s_per_gb.{recv,capture,discard} - 64 KiB writes; the receiver calls
      recv_into() a 64 KiB buffer / captures every 64 KiB as an object (then frees
      it) / DISCARDs every 64 KiB.
  sender_cpu_s_per_gb.{copy,objsend}[size] - one buffer or one object per request:
      send() from a bytearray (the stack must copy it) against OBJ_SEND of an object
      created once (references only).
  ranges_1k_cpu_s_per_gb.{1,8} - 1 KiB object sends, 1 or 8 ranges per request.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from usertcp.net.driver import VirtualTimeDriver
from usertcp.net.memnet import LinkConfig, Network
from usertcp.objects import AT_TAIL, Ring, Store
from usertcp.tcp.connection import Connection
from usertcp.tcp.stack import Stack
from usertcp.wire.segment import Buffer, TxPacket

KiB = 1024
MiB = 1 << 20
SEND_SIZES = (1 * KiB, 4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, 1 * MiB)

# Published figures (development kernels, virtio-net, whole-host CPU per GB, full speed).
ANCHORS: dict[str, Any] = {
    "receive_64k_capture_vs_recv_pct_cheaper": 31,
    "receive_64k_discard_vs_recv_pct_cheaper": 57,
    "send_objsend_vs_copy_pct_cheaper_from_16k": [40, 57],
    "send_1k_8_ranges_vs_1_times_cheaper": 3.6,
}

_pt = time.process_time


class _Metered:
    """An endpoint wrapper that charges the stack's CPU to its host."""

    __slots__ = ("inner", "cpu")

    def __init__(self, inner: Stack) -> None:
        self.inner = inner
        self.cpu = 0.0

    def receive(self, packet: Buffer, now: float, *, checksum_verified: bool = False) -> None:
        t = _pt()
        self.inner.receive(packet, now, checksum_verified=checksum_verified)
        self.cpu += _pt() - t

    def datagrams_to_send(self) -> list[TxPacket]:
        t = _pt()
        out = self.inner.datagrams_to_send()
        # Join here so the copy out of the process is charged to the sender; the network
        # then takes the bytes as they are.
        res: list[Any] = [p.tobytes() for p in out]
        self.cpu += _pt() - t
        return res

    def get_timer(self) -> float | None:
        return self.inner.get_timer()

    def handle_timer(self, now: float) -> None:
        t = _pt()
        self.inner.handle_timer(now)
        self.cpu += _pt() - t


class _Bed:
    """Sender stack a, receiver stack b, one connection a -> b."""

    def __init__(self) -> None:
        self.net = Network(seed=1)
        self.a, self.b = Stack(["10.0.0.1"], name="tx"), Stack(["10.0.0.2"], name="rx")
        self.ma, self.mb = _Metered(self.a), _Metered(self.b)
        ha = self.net.add_host(self.ma, ["10.0.0.1"])
        hb = self.net.add_host(self.mb, ["10.0.0.2"])
        self.net.connect(ha, hb, LinkConfig(delay=0.0001))
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

    def run(self, step: Callable[[], bool], what: str) -> None:
        if not self.drv.run_until(step, 1e6):
            raise RuntimeError(f"benchmark {what} stalled")

    @property
    def cpu_tx(self) -> float:
        return self.ma.cpu + self.app_tx

    @property
    def cpu_rx(self) -> float:
        return self.mb.cpu + self.app_rx


def _bulk_sender(bed: _Bed, total: int, chunk: bytes) -> Callable[[], None]:
    """The same 64 KiB bytes object every write (taken by reference: no sender copy)."""
    state = {"sent": 0}
    tx = bed.tx

    def step() -> None:
        t = _pt()
        while state["sent"] < total and tx.send_space > 0:
            n = tx.send(chunk if total - state["sent"] >= len(chunk) else chunk[:total - state["sent"]],
                        bed.drv.now())
            if not n:
                break
            state["sent"] += n
            if n < len(chunk):
                break
        bed.drv.kick()
        bed.app_tx += _pt() - t

    return step


def receive(mode: str, total: int, write: int = 64 * KiB) -> float:
    """Receiver-host CPU seconds per GB for ``mode`` in recv/capture/discard."""
    bed = _Bed()
    send = _bulk_sender(bed, total, bytes(write))
    rx = bed.rx
    got = [0]
    if mode == "recv":
        buf = memoryview(bytearray(write))

        def step() -> bool:
            send()
            if rx.readable_bytes >= min(write, total - got[0]):
                t = _pt()
                while rx.readable_bytes:
                    got[0] += rx.recv_into(buf, bed.drv.now())
                bed.drv.kick()
                bed.app_rx += _pt() - t
            return got[0] >= total
    else:
        store = Store(8 * MiB, driver=bed.drv, compact_ratio=0)
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
                    ring.prep_recv_object(sid, AT_TAIL, n, 1)
                else:
                    ring.prep_discard(sid, n, 2)
                issued[0] += n
                inflight[0] += 1
            ring.submit()

        refill()

        def step() -> bool:
            send()
            if ring.cq_ready:
                t = _pt()
                for c in ring.reap():
                    inflight[0] -= 1
                    if c.user_data == 1:
                        got[0] += store._objects[c.res].length
                        ring.prep_free(c.res, 3)
                        inflight[0] += 1       # the FREE's own completion
                    elif c.user_data == 2:
                        got[0] += c.res
                refill()
                bed.app_rx += _pt() - t
            return got[0] >= total
    bed.run(step, f"receive {mode}")
    return bed.cpu_rx / total * 1e9


def _drain_receiver(bed: _Bed) -> Callable[[], int]:
    rx = bed.rx
    got = [0]

    def step() -> int:
        if rx.readable_bytes:
            got[0] += len(rx.recv(1 << 22, bed.drv.now()))
            bed.drv.kick()
        return got[0]

    return step


def send(mode: str, size: int, total: int, ranges: int = 1) -> float:
    """Sender-host CPU seconds per GB: ``copy`` send() or ``objsend`` OBJ_SEND."""
    bed = _Bed()
    drain = _drain_receiver(bed)
    tx = bed.tx
    total = max(total // (size * ranges), 1) * size * ranges
    if mode == "copy":
        buf = bytearray(size)
        view = memoryview(buf)
        state = {"sent": 0, "off": 0}

        def step() -> bool:
            if state["sent"] < total and tx.send_space > 0:
                t = _pt()
                while state["sent"] < total and tx.send_space > 0:
                    n = tx.send(view[state["off"]:], bed.drv.now())   # copies: a mutable buffer
                    state["sent"] += n
                    state["off"] = (state["off"] + n) % size
                bed.drv.kick()
                bed.app_tx += _pt() - t
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
        state = {"issued": 0, "inflight": 0}

        def step() -> bool:
            if (state["inflight"] < queue_limit and state["issued"] < total) or ring.cq_ready:
                t = _pt()
                state["inflight"] -= len(ring.reap())
                while state["inflight"] < queue_limit and state["issued"] < total:
                    ring.prep_obj_send(tx, vec, 1)
                    state["issued"] += per
                    state["inflight"] += 1
                ring.submit()
                bed.app_tx += _pt() - t
            return drain() >= total
    bed.run(step, f"send {mode} {size}")
    return bed.cpu_tx / total * 1e9


def _pct_cheaper(ours: float, base: float) -> float:
    return round((1 - ours / base) * 100, 1) if base else 0.0


def run(*, total: int = 32 * MiB, send_total: int = 16 * MiB, ranges_total: int = 8 * MiB,
        repeat: int = 1) -> dict[str, Any]:
    """Every figure of the issue in one run; ``repeat`` takes the best of N runs each."""
    def best(fn: Callable[[], float]) -> float:
        return round(min(fn() for _ in range(max(repeat, 1))), 3)

    t0 = time.perf_counter()
    rcv = {m: best(lambda m=m: receive(m, total)) for m in ("recv", "capture", "discard")}  # type: ignore[misc]
    snd: dict[str, dict[str, float]] = {"copy": {}, "objsend": {}}
    for size in SEND_SIZES:
        label = f"{size // KiB}KiB" if size < MiB else "1MiB"
        for m in ("copy", "objsend"):
            snd[m][label] = best(lambda m=m, size=size: send(m, size, send_total))  # type: ignore[misc]
    rng = {str(r): best(lambda r=r: send("objsend", KiB, ranges_total, ranges=r)) for r in (1, 8)}  # type: ignore[misc]
    ours = {
        "receive_64k_capture_vs_recv_pct_cheaper": _pct_cheaper(rcv["capture"], rcv["recv"]),
        "receive_64k_discard_vs_recv_pct_cheaper": _pct_cheaper(rcv["discard"], rcv["recv"]),
        "send_objsend_vs_copy_pct_cheaper": {k: _pct_cheaper(snd["objsend"][k], snd["copy"][k])
                                             for k in snd["copy"]},
        "send_1k_8_ranges_vs_1_times_cheaper": round(rng["1"] / rng["8"], 2) if rng["8"] else 0.0,
    }
    return {
        "what": "CPU seconds per GB of payload (time.process_time), charged to the host that "
                "spends it: its stack (input, timers, output up to the packet becoming bytes) plus "
                "the application's calls on it; two stacks in one process, virtual time, lossless "
                "link. Compare ratios with the anchors, not absolute numbers.",
        "bytes": {"receive": total, "send_per_size": send_total, "ranges": ranges_total},
        "receiver_cpu_s_per_gb": rcv,
        "sender_cpu_s_per_gb": snd,
        "ranges_1k_cpu_s_per_gb": rng,
        "ours": ours,
        "note": "In CPython a segment costs ~10-15 us of interpretation while copying its 1448 "
                "bytes costs ~0.1 us, so the copy that objects remove is a few percent of a host's "
                "CPU here, not the large share it is in a kernel; per-request ring overhead "
                "(entries, completions, the collector's per-segment hook) is not amortised as "
                "well either. Our ratios therefore sit below the anchors; they are measured, "
                "not scaled.",
        "anchors": ANCHORS,
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def _table(r: dict[str, Any]) -> str:
    o, a = r["ours"], r["anchors"]
    rc = r["receiver_cpu_s_per_gb"]
    lines = ["receiver, 64 KiB writes (CPU s/GB): " + ", ".join(f"{k} {v}" for k, v in rc.items()),
             f"  capture vs recv: {o['receive_64k_capture_vs_recv_pct_cheaper']}% cheaper "
             f"(anchor {a['receive_64k_capture_vs_recv_pct_cheaper']}%)",
             f"  discard vs recv: {o['receive_64k_discard_vs_recv_pct_cheaper']}% cheaper "
             f"(anchor {a['receive_64k_discard_vs_recv_pct_cheaper']}%)",
             "sender (CPU s/GB)        copy   objsend   objsend cheaper (anchor 40-57% from 16 KiB)"]
    for k in r["sender_cpu_s_per_gb"]["copy"]:
        snd = r["sender_cpu_s_per_gb"]
        lines.append(f"  {k:>6} {snd['copy'][k]:>14} {snd['objsend'][k]:>9}   "
                     f"{o['send_objsend_vs_copy_pct_cheaper'][k]}%")
    rg = r["ranges_1k_cpu_s_per_gb"]
    lines.append(f"1 KiB object sends: 1 range {rg['1']}, 8 ranges {rg['8']} CPU s/GB: "
                 f"{o['send_1k_8_ranges_vs_1_times_cheaper']}x cheaper (anchor "
                 f"{a['send_1k_8_ranges_vs_1_times_cheaper']}x)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="usertcp bench objects", description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--mib", type=int, default=32, help="MiB per receive run (send runs: half)")
    p.add_argument("--repeat", type=int, default=1, help="best of N runs per figure")
    ns = p.parse_args(argv)
    r = run(total=ns.mib * MiB, send_total=max(ns.mib // 2, 1) * MiB,
            ranges_total=max(ns.mib // 4, 1) * MiB, repeat=ns.repeat)
    print(json.dumps(r, indent=2) if ns.json else _table(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
