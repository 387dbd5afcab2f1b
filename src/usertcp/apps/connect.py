"""``usertcp connect ADDR PORT``: a netcat-like client on a usertcp stack.

Standard input goes to the connection, the connection to standard output; at end of input the
client half-closes (``shutdown(SHUT_WR)``) and keeps printing until the peer closes.

Two networks: by default the in-memory one (real time), where ``--memnet-app`` puts a built-in
server (echo, or SMTP with a preloaded greeting) on a second in-memory host at ADDR; with
``--tun DEV`` a TUN device created in the current network namespace (run it under
``ip netns exec NS``, as ``usertcp serve``), the kernel at ``--peer-address`` (CIDR) and usertcp
at ``--address``: ADDR is then any peer the kernel routes to. Options: ``--fastopen``
(TCP_FASTOPEN_CONNECT; in memory the built-in server has Fast Open on too), ``--md5-key``
(TCP-MD5; in memory on both ends), ``--pcap FILE`` (every packet usertcp sends and gets).
"""

from __future__ import annotations

import argparse
import sys
import threading
from contextlib import ExitStack
from typing import BinaryIO

from usertcp import socket as us
from usertcp.apps.basic import BasicServer
from usertcp.apps.serve import GSO_MAX
from usertcp.apps.smtp import SmtpServer
from usertcp.net.driver import RealTimeDriver
from usertcp.net.memnet import LinkConfig, Network
from usertcp.net.pcap import PcapWriter
from usertcp.net.tun import TunDevice, TunDriver
from usertcp.tcp.config import StackConfig
from usertcp.tcp.md5sig import Md5Keys
from usertcp.tcp.stack import Stack

__all__ = ["add_arguments", "cli"]

_CHUNK = 65536


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("address", metavar="ADDR", help="the peer's IP address")
    parser.add_argument("port", metavar="PORT", type=int, help="the peer's TCP port")
    parser.add_argument("--memnet-app", choices=("echo", "smtp", "none"), default="echo",
                        help="in memory: the built-in server on the peer host (default: echo; "
                             "none: nothing listens)")
    parser.add_argument("--delay", type=float, default=0.001, help="in memory: one-way link delay, s")
    parser.add_argument("--tun", default=None, metavar="DEV",
                        help="use TUN device DEV (created here) instead of the in-memory network")
    parser.add_argument("--peer-address", default=None, metavar="CIDR",
                        help="with --tun: the kernel side's address, e.g. 10.77.0.1/24")
    parser.add_argument("--local", "--address", dest="local", default=None, metavar="IP",
                        help="this end's address (default in memory: 10.0.0.1, or fd00::1 for IPv6)")
    parser.add_argument("--fastopen", action="store_true", help="connect with TCP Fast Open")
    parser.add_argument("--md5-key", default=None, metavar="KEY", help="sign segments with TCP-MD5")
    parser.add_argument("--pcap", default=None, metavar="FILE.pcap", help="capture every packet")
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="give up if the connection makes no progress this long (seconds)")


def _pump_out(sock: us.Socket, out: BinaryIO, failed: list[BaseException]) -> None:
    try:
        while data := sock.recv(_CHUNK):
            out.write(data)
            out.flush()
    except OSError as e:
        failed.append(e)


def run(args: argparse.Namespace, stdin: BinaryIO, stdout: BinaryIO) -> int:
    remote = args.address
    key = args.md5_key.encode() if args.md5_key is not None else None
    with ExitStack() as stack:
        try:
            host = _tun_host(args, stack) if args.tun else _memnet_host(args, key, stack)
        except (OSError, ValueError) as e:
            print(f"usertcp connect: {e}", file=sys.stderr)
            return 2
        sock = host.socket(us.AF_INET6 if ":" in remote else us.AF_INET)
        sock.settimeout(args.timeout)
        if args.fastopen:
            sock.setsockopt(us.IPPROTO_TCP, us.TCP_FASTOPEN_CONNECT, 1)
        if key is not None:
            sock.add_md5_key(remote, key)
        try:
            sock.connect((remote, args.port))
        except OSError as e:
            print(f"usertcp connect: {remote} port {args.port}: {e.strerror or e}", file=sys.stderr)
            return 1
        return _relay(sock, stdin, stdout, args.timeout)
    return 0


def _relay(sock: us.Socket, stdin: BinaryIO, stdout: BinaryIO, timeout: float) -> int:
    """stdin -> connection (half-close at EOF), connection -> stdout until the peer closes."""
    failed: list[BaseException] = []
    reader = threading.Thread(target=_pump_out, args=(sock, stdout, failed), daemon=True)
    reader.start()
    try:
        while data := stdin.read1(_CHUNK) if hasattr(stdin, "read1") else stdin.read(_CHUNK):
            sock.sendall(data)
        sock.shutdown(us.SHUT_WR)          # netcat -N: half-close at end of input
    except OSError as e:
        failed.append(e)
    reader.join(timeout)
    sock.close()
    if failed:
        print(f"usertcp connect: {failed[0]}", file=sys.stderr)
        return 1
    return 0


def _memnet_host(args: argparse.Namespace, key: bytes | None, stack: ExitStack) -> us.Host:
    remote = args.address
    local = args.local or ("fd00::1" if ":" in remote else "10.0.0.1")
    cfg = StackConfig(fastopen=0x3) if args.fastopen else None
    net = Network(seed=1)
    client, server = Stack([local], cfg, name="client"), Stack([remote], cfg, name="server")
    link = net.connect(net.add_host(client, [local]), net.add_host(server, [remote]),
                       LinkConfig(delay=args.delay))
    drv = RealTimeDriver(net)
    if args.pcap:
        net.attach_pcap(stack.enter_context(PcapWriter(args.pcap)), link)
    stack.enter_context(drv)
    _start_app(args, us.Host(server, drv, name="server"), drv, key, local, stack)
    return us.Host(client, drv, name="client")


def _tun_host(args: argparse.Namespace, stack: ExitStack) -> us.Host:
    if not args.peer_address or not args.local:
        raise ValueError("--tun needs --peer-address CIDR (the kernel side) and --address IP (ours)")
    device = stack.enter_context(TunDevice.open(args.tun))
    device.configure(peer_address=args.peer_address)
    cfg = StackConfig(fastopen=0x1) if args.fastopen else None    # client side of Fast Open
    st = Stack([args.local], cfg, name="connect")
    if device.offload:
        st.gso_max_size = GSO_MAX
        st.tx_csum_offload = True
    pcap = stack.enter_context(PcapWriter(args.pcap)) if args.pcap else None
    drv = TunDriver(st, device, pcap=pcap)
    drv.start()
    stack.callback(drv.stop)
    return us.Host(st, drv, name="connect")


def _start_app(args: argparse.Namespace, host: us.Host, drv: RealTimeDriver, key: bytes | None,
               client_ip: str, stack: ExitStack) -> None:
    """The built-in server on the peer host, with the same Fast Open / TCP-MD5 settings."""
    if args.memnet_app == "none":
        return
    if args.memnet_app == "smtp":
        smtp = SmtpServer(host, (args.address, args.port), fastopen_qlen=8 if args.fastopen else 0)
        if key is not None:
            smtp.sock.add_md5_key(client_ip, key)
        thread = threading.Thread(target=smtp.serve, daemon=True)
        thread.start()
        stack.callback(smtp.close)
        stack.callback(thread.join, 5.0)
        stack.callback(smtp.stop)
        return
    with drv.lock:
        lst = host.stack.listen(args.port, address=None)
        if args.fastopen:
            lst.fastopen_qlen = 8
        if key is not None:
            keys = Md5Keys()
            keys.add(client_ip, key)
            lst.md5_keys = keys
        BasicServer("echo", lst, drv.now)


def cli(args: argparse.Namespace) -> int:
    return run(args, sys.stdin.buffer, sys.stdout.buffer)
