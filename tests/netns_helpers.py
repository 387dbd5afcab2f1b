"""Test-only helpers around namespaces: skip logic, a namespace fixture body, hand-built TCP/IPv4.

Nothing here touches the host namespace: every packet is built for 10.77.0.0/24 inside a
namespace the test created.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import struct
import subprocess
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

import usertcp
from usertcp import socket as usocket
from usertcp.net import netns
from usertcp.net.endpoint import Endpoint
from usertcp.net.pcap import PcapWriter
from usertcp.net.tun import TunDevice, TunDriver
from usertcp.tcp.stack import Stack

# Where the tests imported usertcp from (src/, or the compiled build's directory): the
# usertcp subprocesses run the same build.
USERTCP_PATH = os.path.dirname(os.path.dirname(os.path.abspath(usertcp.__file__)))


def subprocess_env() -> dict[str, str]:
    """The environment for a usertcp subprocess: this process's, with the same usertcp first."""
    return {**os.environ, "PYTHONPATH": USERTCP_PATH + os.pathsep + os.environ.get("PYTHONPATH", "")}

PEER = "10.77.0.1"  # the kernel's address on the TUN
US = "10.77.0.2"  # the address the test (or our stack) plays

TCP_FIN, TCP_SYN, TCP_RST, TCP_PSH, TCP_ACK = 0x01, 0x02, 0x04, 0x08, 0x10


def require_netns() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    if not os.path.exists("/dev/net/tun"):
        pytest.skip("no /dev/net/tun")


def namespace_fixture() -> Iterator[str]:
    """Body for a pytest fixture: a fresh namespace, removed (and checked gone) afterwards."""
    require_netns()
    try:
        name = netns.create_namespace("utcp")
    except OSError as exc:
        pytest.skip(f"cannot create network namespaces: {exc}")
    try:
        yield name
    finally:
        netns.remove_namespace(name)
        assert name not in netns.list_namespaces()


@contextlib.contextmanager
def tun_host(ns: str, ifname: str, peer_cidr: str, stack: Stack, *, pcap: Path | None = None,
             endpoint: Endpoint | None = None, offload: bool | None = None) -> Iterator[usocket.Host]:
    """TUN device ``ifname`` in namespace ``ns`` (kernel side ``peer_cidr``), ``stack`` on it
    through a running TunDriver (``endpoint`` in front of the stack if given; every packet
    into ``pcap`` if given): the socket API on that stack, for the ``with`` block."""
    dev = TunDevice.open(ifname, offload=offload, netns=ns)
    try:
        dev.configure(peer_address=peer_cidr)
        with contextlib.ExitStack() as resources:
            writer = resources.enter_context(PcapWriter(pcap)) if pcap is not None else None
            drv = TunDriver(endpoint or stack, dev, pcap=writer)
            drv.start()
            try:
                yield usocket.Host(stack, drv, name=stack.name)
            finally:
                drv.stop()
    finally:
        dev.close()


def csum_fold(total: int) -> int:
    total = total % 0xFFFF
    return total or 0xFFFF


def pseudo_sum(src: bytes, dst: bytes, tcp_len: int) -> int:
    """Folded, non-inverted IPv4 pseudo-header sum (what CHECKSUM_PARTIAL leaves in the field)."""
    return csum_fold(int.from_bytes(src + dst + struct.pack("!BBH", 0, 6, tcp_len), "big"))


def inet_sum(data: bytes) -> int:
    return int.from_bytes(data, "big") << (8 * (len(data) & 1))


def ip_checksum(header: bytes) -> int:
    return (~csum_fold(inet_sum(header))) & 0xFFFF


@dataclass
class Tcp:
    src: str
    dst: str
    sport: int
    dport: int
    seq: int
    ack: int
    flags: int
    window: int
    options: bytes
    payload: bytes
    checksum: int
    total_len: int

    def option(self, kind: int) -> bytes | None:
        i, opts = 0, self.options
        while i < len(opts):
            k = opts[i]
            if k == 0:
                break
            if k == 1:
                i += 1
                continue
            length = opts[i + 1]
            if k == kind:
                return opts[i + 2 : i + length]
            i += length
        return None


def parse(packet: bytes | bytearray | memoryview) -> Tcp | None:
    """An IPv4/TCP packet, or None for anything else (the kernel's IPv6 chatter)."""
    pkt = bytes(packet)
    if len(pkt) < 40 or pkt[0] >> 4 != 4 or pkt[9] != 6:
        return None
    ihl = (pkt[0] & 0xF) * 4
    total = struct.unpack_from("!H", pkt, 2)[0]
    sport, dport, seq, ack, off, flags, window, csum = struct.unpack_from("!HHIIBBHH", pkt, ihl)
    doff = (off >> 4) * 4
    return Tcp(socket.inet_ntoa(pkt[12:16]), socket.inet_ntoa(pkt[16:20]), sport, dport, seq, ack,
               flags, window, pkt[ihl + 20 : ihl + doff], pkt[ihl + doff : total], csum, total)


def tcp_checksum_ok(packet: bytes | memoryview) -> bool:
    pkt = bytes(packet)
    ihl = (pkt[0] & 0xF) * 4
    total = struct.unpack_from("!H", pkt, 2)[0]
    seg = pkt[ihl:total]
    return (int.from_bytes(pkt[12:20], "big") + 6 + len(seg) + inet_sum(seg)) % 0xFFFF == 0


def build_tcp(src: str, dst: str, sport: int, dport: int, seq: int, ack: int, flags: int, *,
              window: int = 65535, options: bytes = b"", payload: bytes = b"", partial: bool = False,
              ip_id: int = 1) -> tuple[bytes, bytes]:
    """(IP+TCP header, payload). ``partial`` leaves only the pseudo-header sum in the TCP checksum."""
    assert len(options) % 4 == 0
    s, d = socket.inet_aton(src), socket.inet_aton(dst)
    tcp_len = 20 + len(options) + len(payload)
    tcph = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
                       (20 + len(options)) // 4 << 4, flags, window, 0, 0) + options
    if partial:
        csum = pseudo_sum(s, d, tcp_len)
    else:
        csum = (~csum_fold(int.from_bytes(s + d, "big") + 6 + tcp_len + inet_sum(tcph + payload))) & 0xFFFF
    tcph = tcph[:16] + struct.pack("!H", csum) + tcph[18:]
    iph = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + tcp_len, ip_id, 0x4000, 64, 6, 0, s, d)
    iph = iph[:10] + struct.pack("!H", ip_checksum(iph)) + iph[12:]
    return iph + tcph, payload


class PacketReader:
    """Reads a device in batches and hands out TCP packets one at a time (none lost between calls)."""

    def __init__(self, read: Callable[[], list[tuple[memoryview, bool]]], fd: int) -> None:
        self.read = read
        self.fd = fd
        self.pending: deque[tuple[memoryview, bool]] = deque()

    def next(self, pred: Callable[[Tcp, memoryview, bool], bool], timeout: float = 5.0
             ) -> tuple[Tcp, memoryview, bool]:
        """The next TCP packet satisfying ``pred``; packets before it that do not are dropped."""
        deadline = time.monotonic() + timeout
        while True:
            while self.pending:
                pkt, verified = self.pending.popleft()
                seg = parse(pkt)
                if seg is not None and pred(seg, pkt, verified):
                    return seg, pkt, verified
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("expected packet did not arrive")
            select.select([self.fd], [], [], left)
            self.pending.extend(self.read())


def probe_session(name: str, body: Callable[[TunDevice, PacketReader, str], None], *, offload: bool = False,
                  sysctls: Sequence[str] = ()) -> None:
    """Run ``body(device, reader, namespace)`` with a TUN device inside a fresh namespace (its
    kernel the peer under test, the ``sysctls`` applied there); everything is removed after.
    The kernel probes in ``tools/`` check usertcp's model of Linux against this machine."""
    ns = netns.create_namespace(name)
    try:
        dev = TunDevice.open("ut0", offload=offload, netns=ns)
        try:
            dev.configure(peer_address=f"{PEER}/24", mtu=1500)
            for s in sysctls:
                subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-q", s], check=True)
            body(dev, PacketReader(dev.read_batch, dev.fd), ns)
        finally:
            dev.close()
    finally:
        netns.remove_namespace(ns)


def wait_socket_error(sock: socket.socket, timeout: float = 5.0) -> int:
    """Wait until a non-blocking connect finishes; return SO_ERROR."""
    _, w, _ = select.select([], [sock], [], timeout)
    assert w, "connect did not finish"
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)


# -- `usertcp serve` as a subprocess in a namespace (tests/test_kernel_interop.py) -------------------


def serve_command() -> list[str]:
    """``python -m usertcp serve`` once the CLI registers it, else the module's own entry point."""
    import sys

    from usertcp import cli

    if "serve" in cli.COMMANDS:
        return [sys.executable, "-m", "usertcp", "serve"]
    return [sys.executable, "-m", "usertcp.apps.serve"]


class ServeProcess:
    """``ip netns exec NS python -m usertcp serve ARGS``: started, waited for its ``ready`` line,
    and stopped with SIGTERM (SIGKILL after ``stop_timeout``) on exit, even on failure."""

    def __init__(self, ns: str, *args: str, ready_timeout: float = 20.0, stop_timeout: float = 15.0) -> None:
        import subprocess
        import threading

        self.ns = ns
        self.args = list(args)
        self.stop_timeout = stop_timeout
        self.ready: list[str] = []
        self.stdout: list[str] = []
        self.stderr = ""
        self.returncode: int | None = None
        env = subprocess_env()
        # `ip netns exec` execs the command: the pid is python's, so signals reach serve itself.
        self.proc = subprocess.Popen(["ip", "netns", "exec", ns, *serve_command(), *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self._ready = threading.Event()
        self._err_chunks: list[str] = []
        self._t_out = threading.Thread(target=self._read_stdout, daemon=True)
        self._t_err = threading.Thread(target=self._read_stderr, daemon=True)
        self._t_out.start()
        self._t_err.start()
        if not self._ready.wait(ready_timeout) or not self.ready:
            self.stop()
            raise RuntimeError(f"serve did not get ready (rc={self.returncode}): {self.stderr[-3000:]}")

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.stdout.append(line)
            if line.startswith("ready "):
                self.ready.append(line.split()[1])
                self._ready.set()
        self._ready.set()    # EOF: died before (or after) ready

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._err_chunks.append(line)

    def stop(self) -> int:
        import signal
        import subprocess

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._t_out.join(5)
        self._t_err.join(5)
        self.stderr = "".join(self._err_chunks)
        self.returncode = self.proc.returncode
        return self.returncode

    def __enter__(self) -> ServeProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
