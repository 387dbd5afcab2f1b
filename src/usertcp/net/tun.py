"""The Linux TUN link: a device fd with optional virtio-net offloads, and a real-time driver.

Device
    :meth:`TunDevice.open` opens ``/dev/net/tun`` with ``IFF_TUN | IFF_NO_PI``. With
    offloads it adds ``IFF_VNET_HDR`` and ``TUNSETOFFLOAD(TUN_F_CSUM | TSO4 | TSO6)``: every
    packet then carries a 10-byte ``struct virtio_net_hdr``. We set ``TUNSETVNETLE`` so the
    header is little-endian on every host (legacy TUN otherwise uses native order), which
    is what ``'<BBHHHH'`` decodes. A non-persistent TUN disappears when its last fd closes,
    which is how :meth:`TunDevice.close` removes it. Addresses and routes go through
    netlink (pyroute2) *inside the device's own namespace* (``TUNGETDEVNETNS``), never
    the caller's.

Inbound offloads
    With ``TUN_F_CSUM`` the kernel hands us its own packets as CHECKSUM_PARTIAL
    (``NEEDS_CSUM``): the TCP checksum field holds only the pseudo-header sum, so such a
    packet is reported with ``checksum_verified=True`` and the stack must not verify it.
    With TSO the kernel sends GSO super-packets (one IP packet up to 64 KiB, several MSS of
    payload); the stack takes them as one large segment, so ``hdr_len``/``gso_size`` are
    not needed (and ``hdr_len`` is unreliable anyway, as wireguard-go notes).

Read buffers
    The stack may keep references to received payload (out-of-order queue, receive
    buffer), so a packet must never alias memory that the next read overwrites: that
    rules out handing out views of one reused buffer, or rotating a few of them. Measured
    on this machine, reading from a TUN inside a namespace (1400 B / 8900 B packets, per
    packet, syscall included):

    * ``os.read(fd, 65545)``: 0.64 / 0.88 us. CPython allocates an uninitialised 64 KiB
      bytes, the kernel copies the packet straight into it, and CPython shrinks it in
      place (realloc), so the packet is a right-sized, immutable ``bytes`` and no copy is
      made in user space; 20000 retained 1400-byte packets cost 29 MB, not 1.3 GB.
    * ``os.readv`` into a preallocated header + 64 KiB buffer, then ``bytes(view[:n])``:
      1.06 / 1.42 us (one extra memcpy and more Python calls).
    * a fresh zeroed ``bytearray(65545)`` per read: 11.9 / 10.1 us, and each retained
      small packet would pin 64 KiB.

    So reads use ``os.read``; the vnet header is the first 10 bytes of the same object and
    the packet is a memoryview past it.

Outbound
    :meth:`TunDevice.write` is one gather ``os.writev([vnet_hdr, header, *payload])``; a
    TxPacket asking for GSO becomes one super-packet that the kernel segments. Without
    offloads a ``csum_partial`` packet gets its checksum finished in software and a GSO
    packet is refused (ValueError): the stack must check ``device.offload`` first.

Multi-queue
    ``multi_queue=True`` opens the device with ``IFF_MULTI_QUEUE``; :meth:`TunDevice.open_queue`
    attaches more fds. The design is **one stack (Endpoint + TunDriver) per queue**, no
    sharing: the kernel hashes each flow to a queue (``tun_automq_select_queue``) and
    learns the queue of a flow from the queue we *write* it on (``tun_flow_update``), so a
    connection a stack opens and writes on its own queue comes back to that queue. Flows
    the kernel starts (a SYN to a listener) land by hash, so every queue's stack needs the
    same listeners.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import ipaddress
import logging
import os
import select
import selectors
import struct
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Protocol, TypeVar

from usertcp.net.endpoint import Endpoint
from usertcp.tcp.stack import Stack
from usertcp.wire.segment import Buffer, TxPacket

log = logging.getLogger(__name__)

# /usr/include/linux/if_tun.h; _IOW('T', n, int) = 0x40045400 | n, _IOR = 0x80045400 | n (x86_64/arm64).
TUNSETIFF = 0x400454CA
TUNSETPERSIST = 0x400454CB
TUNGETFEATURES = 0x800454CF
TUNSETOFFLOAD = 0x400454D0
TUNGETIFF = 0x800454D2
TUNGETVNETHDRSZ = 0x800454D7
TUNSETVNETHDRSZ = 0x400454D8
TUNSETQUEUE = 0x400454D9
TUNSETVNETLE = 0x400454DC
TUNGETDEVNETNS = 0x54E3  # _IO('T', 227), Linux >= 5.2

IFF_TUN = 0x0001
IFF_MULTI_QUEUE = 0x0100
IFF_PERSIST = 0x0800
IFF_NO_PI = 0x1000
IFF_VNET_HDR = 0x4000

TUN_F_CSUM = 0x01
TUN_F_TSO4 = 0x02
TUN_F_TSO6 = 0x04

# /usr/include/linux/virtio_net.h
VIRTIO_NET_HDR_F_NEEDS_CSUM = 1
VIRTIO_NET_HDR_F_DATA_VALID = 2
VIRTIO_NET_HDR_GSO_NONE = 0
VIRTIO_NET_HDR_GSO_TCPV4 = 1
VIRTIO_NET_HDR_GSO_TCPV6 = 4
VIRTIO_NET_HDR_GSO_ECN = 0x80   # the TCP header has CWR set: only the first segment keeps it

VNET_HDR = struct.Struct("<BBHHHH")  # flags, gso_type, hdr_len, gso_size, csum_start, csum_offset
VNET_HDR_LEN = VNET_HDR.size  # 10
_IFREQ = struct.Struct("16sH22x")  # struct ifreq: name + flags, 40 bytes
_ZERO_VNET = bytes(VNET_HDR_LEN)
_MAX_PACKET = 65535
_TCP_CSUM_OFFSET = 16
_IOV_MAX = 1024

_T = TypeVar("_T")
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def _ip_header_len(header: Buffer) -> int:
    version = header[0] >> 4
    if version == 4:
        return (header[0] & 0x0F) * 4
    if version == 6:
        return 40  # we emit no extension headers
    raise ValueError(f"not an IP packet (version {version})")


def _needs_csum_header(iph: int) -> bytes:
    return VNET_HDR.pack(VIRTIO_NET_HDR_F_NEEDS_CSUM, VIRTIO_NET_HDR_GSO_NONE, 0, 0, iph, _TCP_CSUM_OFFSET)


# The header of a CHECKSUM_PARTIAL packet depends only on the IP header length: built once.
_NEEDS_CSUM_V4 = _needs_csum_header(20)
_NEEDS_CSUM_V6 = _needs_csum_header(40)


def vnet_header_for(packet: TxPacket) -> bytes:
    """The virtio_net_hdr that tells the kernel what to finish for ``packet`` (offload mode)."""
    header = packet.header
    if packet.gso_size > 0 and sum(len(p) for p in packet.payload) > packet.gso_size:
        iph = _ip_header_len(header)
        gso_type = VIRTIO_NET_HDR_GSO_TCPV4 if header[0] >> 4 == 4 else VIRTIO_NET_HDR_GSO_TCPV6
        if header[iph + 13] & 0x80:
            # RFC 3168 §6.1.2 CWR on a super-segment: Linux SKB_GSO_TCP_ECN (tcp_gso_segment
            # clears CWR on every segment but the first).
            gso_type |= VIRTIO_NET_HDR_GSO_ECN
        # The kernel needs CHECKSUM_PARTIAL for TSO: header carries the pseudo-header sum.
        return VNET_HDR.pack(VIRTIO_NET_HDR_F_NEEDS_CSUM, gso_type, len(header), packet.gso_size,
                             iph, _TCP_CSUM_OFFSET)
    if packet.csum_partial:
        return _needs_csum_vnet(header)
    return _ZERO_VNET


def _needs_csum_vnet(header: Buffer) -> bytes:
    first = header[0]
    if first == 0x45:                    # IPv4 without options: what the stack sends
        return _NEEDS_CSUM_V4
    if first >> 4 == 6:
        return _NEEDS_CSUM_V6
    return _needs_csum_header(_ip_header_len(header))


def _complete_checksum(packet: TxPacket) -> TxPacket:
    """Plain mode cannot take CHECKSUM_PARTIAL: finish the TCP checksum in software.

    The checksum field holds the folded pseudo-header sum, so the one's-complement sum of
    the TCP header and payload with that field in place, inverted, is the checksum. Each
    part's big integer is weighted by 256**(bytes after it), and 256**2 == 1 (mod 0xFFFF),
    so only the parity of what follows matters (the odd total is padded with one zero).
    """
    header = packet.header
    iph = _ip_header_len(header)
    parts: list[Buffer] = [memoryview(header)[iph:], *packet.payload]
    total = sum(len(p) for p in parts)
    acc = 0
    after = total + (total & 1)
    for part in parts:
        after -= len(part)
        acc += int.from_bytes(part, "big") << (8 * (after & 1))
    csum = (~(acc % 0xFFFF)) & 0xFFFF
    new = bytearray(header)
    struct.pack_into("!H", new, iph + _TCP_CSUM_OFFSET, csum)
    return TxPacket(bytes(new), packet.payload, 0, False)


class TunDevice:
    """One queue (fd) of a TUN device; see the module docstring for offloads and buffers."""

    def __init__(self, name: str, fd: int, *, offload: bool, multi_queue: bool, persistent: bool,
                 netns: str | None) -> None:
        self.name = name
        self.fd = fd
        self.offload = offload
        self.vnet_hdr_len = VNET_HDR_LEN if offload else 0
        self.multi_queue = multi_queue
        self.persistent = persistent  # attached to a pre-existing persistent device: close() keeps it
        self.netns = netns
        self.mtu = 1500
        self.write_timeout = 5.0
        self.stats: dict[str, int] = {
            "rx_packets": 0, "rx_bytes": 0, "rx_needs_csum": 0, "rx_data_valid": 0, "rx_gso": 0,
            "rx_largest": 0, "tx_packets": 0, "tx_bytes": 0, "tx_gso": 0, "tx_eagain": 0,
        }

    # -- opening -------------------------------------------------------------------------------

    @classmethod
    def open(cls, name: str, *, offload: bool | None = None, multi_queue: bool = False,
             netns: str | None = None) -> TunDevice:
        """Open (create) TUN device ``name``; ``offload`` None tries offloads and falls back.

        ``netns`` opens it inside that namespace (the device lives there for good).
        """
        if netns is not None:
            from usertcp.net import netns as _netns  # pyroute2: imported only when used

            dev = _netns.call_in_namespace(netns, cls.open, name, offload=offload, multi_queue=multi_queue)
            dev.netns = netns
            return dev
        if offload is None:
            try:
                return cls._open(name, True, multi_queue, netns)
            except OSError as exc:
                if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTTY, errno.EPERM):
                    raise
                log.info("TUN offloads refused (%s); using plain mode", exc)
                return cls._open(name, False, multi_queue, netns)
        return cls._open(name, offload, multi_queue, netns)

    @classmethod
    def _open(cls, name: str, offload: bool, multi_queue: bool, netns: str | None) -> TunDevice:
        raw = name.encode()
        if not raw or len(raw) >= 16:
            raise ValueError(f"bad interface name {name!r}")
        flags = IFF_TUN | IFF_NO_PI | (IFF_VNET_HDR if offload else 0)
        if multi_queue:
            flags |= IFF_MULTI_QUEUE
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            res = fcntl.ioctl(fd, TUNSETIFF, _IFREQ.pack(raw, flags))
            actual = _IFREQ.unpack(res)[0].rstrip(b"\0").decode()
            got = _IFREQ.unpack(fcntl.ioctl(fd, TUNGETIFF, bytes(_IFREQ.size)))[1]
            if offload:
                fcntl.ioctl(fd, TUNSETVNETHDRSZ, struct.pack("i", VNET_HDR_LEN))
                # Little-endian header fields on every host, so '<' is always right.
                fcntl.ioctl(fd, TUNSETVNETLE, struct.pack("i", 1))
                fcntl.ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6)
        except BaseException:
            os.close(fd)
            raise
        return cls(actual, fd, offload=offload, multi_queue=multi_queue,
                   persistent=bool(got & IFF_PERSIST), netns=netns)

    def open_queue(self) -> TunDevice:
        """Attach one more queue (fd) to this multi-queue device, with the same offloads."""
        if not self.multi_queue:
            raise ValueError("device was not opened with multi_queue=True")
        return self._in_device_ns(self._open, self.name, self.offload, True, self.netns)

    def _in_device_ns(self, fn: Callable[..., _T], *args: object) -> _T:
        """Run ``fn`` in the device's namespace: netlink and TUNSETIFF look names up there."""
        from usertcp.net import netns as _netns  # pyroute2: imported only when a device is used

        try:
            nsfd = fcntl.ioctl(self.fd, TUNGETDEVNETNS)
        except OSError:
            if self.netns is None:
                return fn(*args)
            return _netns.call_in_namespace(self.netns, fn, *args)
        try:
            return _netns.call_in_namespace(nsfd, fn, *args)
        finally:
            os.close(nsfd)

    # -- configuration (netlink) ---------------------------------------------------------------

    def configure(self, *, peer_address: str, mtu: int = 1500, up: bool = True,
                  extra_routes: Sequence[str] = (), txqueuelen: int | None = None) -> None:
        """Give the kernel side of the device ``peer_address`` (CIDR, v4 or v6) and bring it up.

        The prefix route makes the kernel send the rest of the subnet into the device;
        ``extra_routes`` (CIDRs) are routed into it as well.
        """
        iface = ipaddress.ip_interface(peer_address)
        routes = [ipaddress.ip_network(r, strict=False) for r in extra_routes]
        self._in_device_ns(self._configure, iface, mtu, up, routes, txqueuelen)
        self.mtu = mtu

    def _configure(self, iface: ipaddress.IPv4Interface | ipaddress.IPv6Interface, mtu: int, up: bool,
                   routes: list[IpNetwork], txqueuelen: int | None) -> None:
        from pyroute2 import IPRoute

        with IPRoute() as ipr:
            found = ipr.link_lookup(ifname=self.name)
            if not found:
                raise OSError(errno.ENODEV, f"no device {self.name}")
            idx = found[0]
            link: dict[str, object] = {"mtu": mtu}
            if txqueuelen is not None:
                link["txqlen"] = txqueuelen
            ipr.link("set", index=idx, **link)
            addr: dict[str, object] = {"address": str(iface.ip), "prefixlen": iface.network.prefixlen}
            if iface.version == 6:
                addr["flags"] = 0x02  # IFA_F_NODAD: usable at once, no DAD delay
            ipr.addr("replace", index=idx, **addr)
            if up:
                ipr.link("set", index=idx, state="up")
            for net in routes:
                ipr.route("replace", dst=str(net), oif=idx)

    # -- I/O -----------------------------------------------------------------------------------

    def fileno(self) -> int:
        return self.fd

    @property
    def closed(self) -> bool:
        return self.fd < 0

    def read_batch(self, max_packets: int = 64) -> list[tuple[memoryview, bool]]:
        """Read up to ``max_packets`` packets, stopping at EAGAIN: [(IP packet, checksum_verified)].

        Each packet is a view of its own ``bytes`` object, valid forever (module docstring).
        """
        return [(packet, verified) for packet, verified, _ in self.read_segments(max_packets)]

    def read_segments(self, max_packets: int = 64) -> list[tuple[memoryview, bool, int]]:
        """:meth:`read_batch` with each packet's GRO segment size: [(packet, verified, gso_size)].

        ``gso_size`` is the vnet header's for a GSO packet (the kernel's TSO super-packet,
        several segments of that size: what ``Stack.receive(gso_size=)`` takes as a GRO
        aggregate, Linux tcp_gro_receive), else 0.
        """
        out: list[tuple[memoryview, bool, int]] = []
        append = out.append
        fd, hlen, size = self.fd, self.vnet_hdr_len, _MAX_PACKET + self.vnet_hdr_len
        read = os.read
        nbytes = needs_csum = data_valid = gso = largest = 0
        while len(out) < max_packets:
            try:
                data = read(fd, size)
            except BlockingIOError:
                break
            except InterruptedError:
                continue
            n = len(data) - hlen
            if n <= 0:
                continue
            if hlen:
                flags = data[0]
                verified = True
                if flags & VIRTIO_NET_HDR_F_NEEDS_CSUM:
                    needs_csum += 1
                elif flags & VIRTIO_NET_HDR_F_DATA_VALID:
                    data_valid += 1
                else:
                    verified = False
                if data[1] != VIRTIO_NET_HDR_GSO_NONE:
                    gso += 1
                    append((memoryview(data)[hlen:], verified, data[4] | (data[5] << 8)))
                else:
                    append((memoryview(data)[hlen:], verified, 0))
            else:
                append((memoryview(data), False, 0))
            nbytes += n
            if n > largest:
                largest = n
        if out:
            stats = self.stats
            stats["rx_packets"] += len(out)
            stats["rx_bytes"] += nbytes
            stats["rx_needs_csum"] += needs_csum
            stats["rx_data_valid"] += data_valid
            stats["rx_gso"] += gso
            if largest > stats["rx_largest"]:
                stats["rx_largest"] = largest
        return out

    def read_vnet(self) -> tuple[tuple[int, int, int, int, int, int], memoryview] | None:
        """One packet with its decoded virtio_net_hdr (offload mode; for tests and tracing)."""
        if not self.vnet_hdr_len:
            raise ValueError("plain mode has no vnet header")
        try:
            data = os.read(self.fd, _MAX_PACKET + VNET_HDR_LEN)
        except BlockingIOError:
            return None
        hdr: tuple[int, int, int, int, int, int] = VNET_HDR.unpack_from(data)
        return hdr, memoryview(data)[VNET_HDR_LEN:]

    def _iov(self, packet: TxPacket | Buffer) -> list[Buffer]:
        if not isinstance(packet, TxPacket):
            return [_ZERO_VNET, packet] if self.vnet_hdr_len else [packet]
        if self.vnet_hdr_len:
            if packet.gso_size > 0:
                vhdr = vnet_header_for(packet)
                if vhdr[1] != VIRTIO_NET_HDR_GSO_NONE:
                    self.stats["tx_gso"] += 1
            elif packet.csum_partial:
                vhdr = _needs_csum_vnet(packet.header)
            else:
                vhdr = _ZERO_VNET
            iov: list[Buffer] = [vhdr, packet.header]
        else:
            if packet.gso_size > 0 and sum(len(p) for p in packet.payload) > packet.gso_size:
                raise ValueError("GSO packet on a TUN without offloads (check device.offload)")
            if packet.csum_partial:
                packet = _complete_checksum(packet)
            iov = [packet.header]
        payload = packet.payload
        if len(payload) > _IOV_MAX - len(iov):
            keep = _IOV_MAX - len(iov) - 1
            iov.extend(payload[:keep])
            iov.append(b"".join(payload[keep:]))
        else:
            iov.extend(payload)
        return iov

    def write(self, packet: TxPacket | Buffer) -> None:
        """Write one packet (a TxPacket, or a raw IP packet) with one gather write.

        EAGAIN (device queue full) is counted in ``stats["tx_eagain"]`` and retried after
        waiting for POLLOUT; after ``write_timeout`` seconds a TimeoutError is raised.
        """
        n = self._writev(self._iov(packet))
        self.stats["tx_packets"] += 1
        self.stats["tx_bytes"] += n - self.vnet_hdr_len

    def _writev(self, iov: list[Buffer]) -> int:
        deadline: float | None = None
        while True:
            try:
                return os.writev(self.fd, iov)
            except BlockingIOError:
                self.stats["tx_eagain"] += 1
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.write_timeout
                elif now >= deadline:
                    raise TimeoutError(errno.EAGAIN, f"{self.name}: TUN write queue stayed full") from None
                poller = select.poll()
                poller.register(self.fd, select.POLLOUT)
                poller.poll(min(100.0, (deadline - now) * 1000))
            except InterruptedError:
                continue

    def write_batch(self, packets: Iterable[TxPacket | Buffer]) -> int:
        """Write every packet (stops at the first error, which is raised); returns the count."""
        count = 0
        for packet in packets:
            self.write(packet)
            count += 1
        return count

    def write_packets(self, packets: Sequence[TxPacket | Buffer]) -> tuple[int, int, list[Exception]]:
        """Write every packet, one gather write each, and go on past a refused one.

        Returns (packets written, IP bytes written, the errors: OSError or ValueError, one
        per packet not written): :meth:`write` for many packets, EAGAIN waited out as there,
        with one stats update for all.
        """
        fd, hlen = self.fd, self.vnet_hdr_len
        writev, iov_of = os.writev, self._iov
        sent = nbytes = 0
        errors: list[Exception] = []
        for packet in packets:
            try:
                iov = iov_of(packet)
                try:
                    n = writev(fd, iov)
                except (BlockingIOError, InterruptedError):
                    n = self._writev(iov)      # waits for room, or raises TimeoutError
            except (OSError, ValueError) as exc:
                errors.append(exc)
                continue
            sent += 1
            nbytes += n - hlen
        self.stats["tx_packets"] += sent
        self.stats["tx_bytes"] += nbytes
        return sent, nbytes, errors

    def close(self) -> None:
        """Close this queue; the device vanishes with its last fd unless it is persistent."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def __enter__(self) -> TunDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "offload" if self.offload else "plain"
        return f"<TunDevice {self.name} fd={self.fd} {mode} mtu={self.mtu}>"


# -- the real-time driver --------------------------------------------------------------------------


class PacketSink(Protocol):
    """What TunDriver needs from a pcap writer (usertcp.net.pcap.PcapWriter fits)."""

    def write(self, packet: Buffer | TxPacket, timestamp: float) -> object: ...


class TunDriver:
    """Runs one Endpoint on one TUN queue in real time; implements the ``Driver`` protocol.

    The loop sleeps in ``selectors`` until the TUN fd is readable, ``kick()`` writes the
    eventfd, or the endpoint's timer is due; it never polls. Each wake-up reads one batch
    (up to ``max_batch`` packets, outside the lock), then under ``lock`` feeds them to the
    endpoint, runs due timers, writes everything the endpoint wants to send, and notifies
    ``wait_until`` waiters.
    """

    def __init__(self, endpoint: Endpoint, device: TunDevice, *, pcap: PacketSink | None = None,
                 max_batch: int = 64, clock: Callable[[], float] = time.monotonic) -> None:
        self.endpoint = endpoint
        self.device = device
        self.pcap = pcap
        self.max_batch = max_batch
        self._clock = clock
        self._rlock = threading.RLock()
        # Typed as the Driver protocol declares it (a mutable protocol attribute is invariant).
        self.lock: AbstractContextManager[object] = self._rlock
        self._cond = threading.Condition(self._rlock)
        self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop_thread: int | None = None  # ident of the thread inside run_forever
        self._stepping = False
        self.error: BaseException | None = None
        self.stats: dict[str, int] = {
            "rx_packets": 0, "rx_bytes": 0, "tx_packets": 0, "tx_bytes": 0, "tx_errors": 0,
            "wakeups": 0, "batches": 0, "max_batch": 0, "timers": 0, "kicks": 0,
        }

    # -- Driver protocol -----------------------------------------------------------------------

    def now(self) -> float:
        return self._clock()

    def kick(self) -> None:
        """Send what became ready now, and make the loop re-arm its timer."""
        with self.lock:
            self.stats["kicks"] += 1
            # Inside the loop's own step (an app callback from receive): the loop flushes after.
            if not (self._stepping and threading.get_ident() == self._loop_thread):
                self._flush()
        self._wakeup()

    def wait_until(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """Block until ``predicate()`` (evaluated under ``lock``) holds; False on timeout or stop."""
        if threading.get_ident() == self._loop_thread:
            # The loop cannot wait for itself: it would never run the step that satisfies it.
            raise RuntimeError("wait_until called from the TunDriver loop thread")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not predicate():
                if self._stop.is_set() or self.error is not None:
                    return predicate()
                if deadline is None:
                    self._cond.wait()
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return predicate()
                    self._cond.wait(left)
            return True

    # -- running ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Run the loop in a background (daemon) thread."""
        if self._thread is not None:
            raise RuntimeError("driver already started")
        self._thread = threading.Thread(target=self.run_forever, name=f"utcp-tun-{self.device.name}",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the loop to end and wait for the background thread (if any)."""
        self._stop.set()
        self._wakeup()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError("TunDriver thread did not stop")
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        """Stop and release the wake-up fd (the device stays the caller's)."""
        self.stop()
        if self._wake >= 0:
            fd, self._wake = self._wake, -1
            os.close(fd)

    def run_forever(self) -> None:
        """The loop; returns after ``stop()``. Exceptions are kept in ``error`` and re-raised."""
        self._loop_thread = threading.get_ident()
        sel = selectors.DefaultSelector()
        dev_fd = self.device.fileno()
        sel.register(dev_fd, selectors.EVENT_READ)
        sel.register(self._wake, selectors.EVENT_READ)
        try:
            with self.lock:
                self._flush()
            while not self._stop.is_set():
                with self.lock:
                    deadline = self.endpoint.get_timer()
                timeout = None if deadline is None else max(0.0, deadline - self.now())
                events = sel.select(timeout)
                self.stats["wakeups"] += 1
                readable = False
                for key, _ in events:
                    if key.fd == dev_fd:
                        readable = True
                    else:
                        with contextlib.suppress(BlockingIOError):
                            os.eventfd_read(self._wake)
                self._step(self.device.read_segments(self.max_batch) if readable else [])
        except BaseException as exc:
            self.error = exc
            log.exception("TunDriver loop failed")
            raise
        finally:
            sel.close()
            self._loop_thread = None
            with self._cond:
                self._cond.notify_all()

    def _step(self, batch: list[tuple[memoryview, bool, int]]) -> None:
        stats = self.stats
        with self.lock:
            self._stepping = True
            try:
                now = self.now()
                if batch:
                    stats["batches"] += 1
                    if len(batch) > stats["max_batch"]:
                        stats["max_batch"] = len(batch)
                    stats["rx_packets"] += len(batch)
                    receive_batch(self.endpoint, batch, now, self.pcap, stats)
                deadline = self.endpoint.get_timer()
                if deadline is not None and deadline <= self.now():
                    stats["timers"] += 1
                    self.endpoint.handle_timer(self.now())
            finally:
                self._stepping = False
            self._flush()
            self._cond.notify_all()

    def _flush(self) -> None:
        """Write everything the endpoint has queued (caller holds ``lock``)."""
        flush_to_device(self.endpoint, self.device, self.pcap, self.stats)

    def _wakeup(self) -> None:
        if self._wake >= 0:
            with contextlib.suppress(BlockingIOError, OSError):
                os.eventfd_write(self._wake, 1)


def receive_batch(endpoint: Endpoint, batch: list[tuple[memoryview, bool, int]], now: float,
                  pcap: PacketSink | None, stats: dict[str, int]) -> None:
    """Hand what :meth:`TunDevice.read_segments` read to ``endpoint`` at ``now`` (and to ``pcap``).

    Shared by both TUN drivers. A Stack gets each packet's GRO segment size, as Linux's
    tcp_gro_receive aggregate carries gso_size to TCP; wrappers (impairment, meters)
    implement only the plain Endpoint protocol and take a GRO packet as one large segment.
    """
    if pcap is not None:
        wall = time.time()            # pcap timestamps are wall-clock time
        for packet, _, _ in batch:
            pcap.write(packet, wall)
    nbytes = 0
    if isinstance(endpoint, Stack):
        stack_receive = endpoint.receive
        for packet, verified, gso_size in batch:
            nbytes += len(packet)
            stack_receive(packet, now, checksum_verified=verified, gso_size=gso_size)
    else:
        receive = endpoint.receive
        for packet, verified, _ in batch:
            nbytes += len(packet)
            receive(packet, now, checksum_verified=verified)
    stats["rx_bytes"] = stats.get("rx_bytes", 0) + nbytes


def flush_to_device(endpoint: Endpoint, device: TunDevice, pcap: PacketSink | None,
                    stats: dict[str, int]) -> None:
    """Write what ``endpoint`` has queued to ``device`` (and ``pcap``), counting errors.

    Shared by the threaded :class:`TunDriver` and the asyncio TUN driver. A failed write
    is counted and logged, never silent, and one bad packet must not kill the link.
    """
    # No Stack.tx_refuse here: a write to the TUN fd injects the packet into the kernel's
    # receive path, which has no queue that refuses it (a full backlog drops it silently),
    # and the write happens after the stack's call returned; EAGAIN (the tun socket's
    # sndbuf) is waited out in TunDevice.write.
    packets = endpoint.datagrams_to_send()
    if not packets:
        return
    if pcap is not None:
        wall = time.time()
        for packet in packets:
            pcap.write(packet, wall)
    sent, nbytes, errors = device.write_packets(packets)
    for exc in errors:
        log.warning("TUN write failed on %s: %s", device.name, exc)
    if errors:
        stats["tx_errors"] = stats.get("tx_errors", 0) + len(errors)
    stats["tx_packets"] = stats.get("tx_packets", 0) + sent
    stats["tx_bytes"] = stats.get("tx_bytes", 0) + nbytes
