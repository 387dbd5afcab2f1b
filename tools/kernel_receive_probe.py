"""How does *this machine's* Linux kernel receive?  The evidence behind issue 15's receive side.

Run as root: ``.venv/bin/python tools/kernel_receive_probe.py``.  Each probe makes its own
network namespace with a TUN device, makes the kernel a TCP server (it listens on 10.77.0.1)
and plays a hand-driven client from 10.77.0.2 (inside the namespace only).  It prints:

* the SYN-ACK's window and window scale for several tcp_rmem / SO_RCVBUF settings
  (tcp_select_initial_window);
* whether the kernel answers an ACK of data it never sent (SEG.ACK > SND.NXT) with a
  challenge ACK, and whether that segment's TS val updated ts_recent (tcp_replace_ts_recent);
* when a lone FIN in ESTABLISHED is ACKed (tcp_fin, delayed or not);
* tcpi_rcv_mss after segments of several sizes (tcp_measure_rcv_mss);
* the window of every ACK while a receiver that does not read fills up, scaled and unscaled,
  beside what tcp/window.py computes from the kernel's own truesize (SO_MEMINFO) and buffer
  size: tcp_select_window, tcp_grow_window, the scaling ratio, tcpi_rcv_ssthresh;
* SO_RCVBUF / SO_SNDBUF and their FORCE variants against net.core.rmem_max / wmem_max,
  beside usertcp's SocketOptions;
* net.ipv4.tcp_shrink_window on and off: does the right edge move left, is data past a
  shrunk edge or at a zero window taken, and the zero-window counters;
* SACK compression: ACKs for ten out-of-order segments, their times, TcpExtTCPAckCompressed,
  with tcp_comp_sack_nr at its default and at 0;
* the SYN-ACK of a SYN cookie (tcp_syncookies=2): window and scale for several SO_RCVBUF.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from netns_helpers import PEER, TCP_ACK, TCP_FIN, TCP_SYN, US, PacketReader, Tcp, build_tcp, probe_session
from usertcp.net import netns
from usertcp.net.tun import TunDevice
from usertcp.wire.segment import TxPacket

TCP_INFO = 11
PORT = 8080
# the client's SYN options: mss 1460, sackOK, TS, nop, wscale 7
SYN_OPTS = (struct.pack("!BBH", 2, 4, 1460) + bytes([4, 2, 8, 10]) + struct.pack("!II", 100, 0)
            + bytes([1, 3, 3, 7]))


class Client:
    """Our side of one connection to the kernel's listener."""

    def __init__(self, dev: TunDevice, rd: PacketReader, sport: int) -> None:
        self.dev, self.rd, self.sport = dev, rd, sport
        self.seq = 1000
        self.ack = 0
        self.tsval = 100

    def send(self, flags: int, payload: bytes = b"", *, ack: int | None = None, tsval: int | None = None,
             options: bytes | None = None) -> None:
        ts = struct.pack("!BBBBII", 1, 1, 8, 10, self.tsval if tsval is None else tsval, self.peer_ts)
        hdr, data = build_tcp(US, PEER, self.sport, PORT, self.seq, self.ack if ack is None else ack, flags,
                              window=502, options=ts if options is None else options, payload=payload)
        self.dev.write(TxPacket(hdr, [data] if data else []))
        self.seq += len(payload) + (1 if flags & (TCP_SYN | TCP_FIN) else 0)

    def expect(self, timeout: float = 2.0) -> tuple[Tcp, float] | None:
        start = time.monotonic()
        try:
            seg, _, _ = self.rd.next(lambda s, p, ok: s.dport == self.sport, timeout)
        except TimeoutError:
            return None
        ts = seg.option(8)
        if ts is not None:
            self.peer_ts = struct.unpack("!I", ts[:4])[0]
        return seg, time.monotonic() - start

    peer_ts = 0

    def handshake(self, syn_opts: bytes = SYN_OPTS) -> Tcp:
        self.send(TCP_SYN, options=syn_opts)
        got = self.expect()
        assert got is not None, "no SYN-ACK"
        synack = got[0]
        self.ack = synack.seq + 1
        self.tsval += 1
        self.send(TCP_ACK)
        return synack


def _listen(ns: str, rcvbuf: int | None) -> socket.socket:
    def make() -> socket.socket:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if rcvbuf is not None:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.bind((PEER, PORT))
        s.listen(8)
        return s

    return netns.call_in_namespace(ns, make)


def synack_windows(dev: TunDevice, rd: PacketReader, ns: str) -> None:
    for i, rcvbuf in enumerate((None, 1000, 10000, 65536, 100000, 1 << 20)):
        lst = _listen(ns, rcvbuf)
        c = Client(dev, rd, 40000 + i)
        synack = c.handshake()
        wscale = synack.option(3)
        print(f"  SO_RCVBUF {rcvbuf}: SYN-ACK win {synack.window} wscale {wscale[0] if wscale else None}")
        lst.close()


def invalid_ack_and_lone_fin(dev: TunDevice, rd: PacketReader, ns: str) -> None:
    lst = _listen(ns, None)
    c = Client(dev, rd, 41000)
    synack = c.handshake()
    child, _ = lst.accept()
    c.tsval = 200000
    c.send(TCP_ACK | TCP_FIN, ack=synack.seq + 9999)
    c.seq -= 1                                # the FIN was dropped: the next segment reuses it
    got = c.expect(0.5)
    if got is None:
        print("  ACK > SND.NXT: dropped silently")
    else:
        seg, _ = got
        ecr = struct.unpack("!II", seg.option(8) or bytes(8))[1]
        print(f"  ACK > SND.NXT: answered, ack {seg.ack - c.seq + 0} (relative), TS ecr {ecr} "
              f"({'ts_recent not updated' if ecr != 200000 else 'ts_recent updated'})")
    c.tsval = 201
    c.send(TCP_ACK, b"x" * 1000)
    got = c.expect()
    print(f"  data after it: ACK {'for all' if got and got[0].ack == c.seq else got}")
    child.recv(2000)
    time.sleep(0.3)                           # out of quick-ACK territory? no: a fresh idle moment
    c.tsval = 300
    c.send(TCP_ACK | TCP_FIN)
    got = c.expect()
    print(f"  lone FIN in ESTABLISHED: ACKed after {got[1] * 1000:.1f} ms" if got else "  lone FIN: no ACK")
    child.close()
    lst.close()


def lone_fin_cases(dev: TunDevice, rd: PacketReader, ns: str) -> None:
    """A FIN right after the handshake, and one after the server wrote data we ACKed."""
    lst = _listen(ns, None)
    c = Client(dev, rd, 43000)
    c.handshake()
    child, _ = lst.accept()
    time.sleep(0.01)
    c.send(TCP_ACK | TCP_FIN)
    got = c.expect()
    print(f"  FIN right after the handshake: ACKed after {got[1] * 1000:.1f} ms" if got else "  no ACK")
    child.close()
    c2 = Client(dev, rd, 43001)
    synack = c2.handshake()
    child2, _ = lst.accept()
    child2.send(b"z" * 1000)
    got = c2.expect()
    assert got is not None
    c2.send(TCP_ACK, ack=synack.seq + 1001)
    time.sleep(0.01)
    c2.send(TCP_ACK | TCP_FIN, ack=synack.seq + 1001)
    got = c2.expect()
    print(f"  FIN after the server's data was ACKed: ACKed after {got[1] * 1000:.1f} ms"
          if got else "  no ACK")
    child2.close()
    c3 = Client(dev, rd, 43002)
    synack = c3.handshake()
    child3, _ = lst.accept()
    time.sleep(0.01)
    c3.send(TCP_ACK | 0x08, b"EHLO x\r\n")
    c3.expect()
    child3.recv(100)
    time.sleep(0.01)
    child3.send(b"250 ok\r\n")
    c3.expect()
    time.sleep(0.02)
    c3.send(TCP_ACK, ack=synack.seq + 9)
    time.sleep(0.01)
    c3.send(TCP_ACK | TCP_FIN, ack=synack.seq + 9)
    got = c3.expect()
    print(f"  FIN after a request and its reply: ACKed after {got[1] * 1000:.1f} ms" if got else "  no ACK")
    child3.close()
    lst.close()


def out_of_window(dev: TunDevice, rd: PacketReader, ns: str) -> None:
    """SO_RCVBUF 1000 (a 1152-byte window): a segment across the right edge, one beyond it,
    then data and a bare FIN at a zero window."""
    lst = _listen(ns, 1000)
    c = Client(dev, rd, 44000)
    synack = c.handshake()
    child, _ = lst.accept()
    base = synack.seq + 1
    c.send(TCP_ACK, b"a" * 2000, ack=base)
    got = c.expect(0.5)
    print(f"  2000 bytes into a {synack.window}-byte window: " +
          (f"ACK {got[0].ack - (c.seq - 2000)} of them, win {got[0].window}" if got else "no answer"))
    c.seq -= 2000
    c.seq += got[0].ack - c.seq if got else 0
    c.send(TCP_ACK, b"b" * 100, ack=base)
    c.seq += 5000
    c.send(TCP_ACK, b"c" * 100, ack=base)
    got = c.expect(0.5)
    answer = f"ACK {got[0].ack - (c.seq - 5200)}" if got else "no answer"
    print(f"  100 bytes 5000 beyond the window: {answer}")
    c.seq -= 5100
    for _ in range(20):                       # fill the buffer until the window closes
        c.send(TCP_ACK, b"d" * 500, ack=base)
        got = c.expect(0.5)
        if got is None:
            break
        c.seq = got[0].ack
        if got[0].window == 0:
            break
    closed = bool(got and got[0].window == 0)
    print(f"  window closed: {closed} at ack +{(got[0].ack - synack.ack) if got else '?'}")
    c.send(TCP_ACK, b"e" * 100, ack=base)
    got = c.expect(0.5)
    print(f"  100 bytes at a zero window: ACK {'+0 (dropped)' if got and got[0].ack == c.seq - 100 else got}")
    c.seq -= 100
    c.send(TCP_ACK | TCP_FIN, ack=base)
    got = c.expect(0.5)
    verdict = "accepted (its ACK covers it)" if got and got[0].ack == c.seq else "not accepted"
    detail = f" (ACK {got[0].ack - c.seq + 1} past the FIN's seq, win {got[0].window})" if got else ""
    print(f"  a bare FIN at a zero window: {verdict}{detail}")
    child.close()
    lst.close()


def delack_after_timer(dev: TunDevice, rd: PacketReader, ns: str) -> None:
    """tests/drill/delayed-ack.pkt's pattern: is the segment after an interactive delayed ACK
    acknowledged at once (the timer left interactive mode: tcp_delack_timer_handler)?"""
    lst = _listen(ns, None)
    c = Client(dev, rd, 45000)
    synack = c.handshake()
    child, _ = lst.accept()
    base = synack.seq + 1
    time.sleep(0.01)
    c.send(TCP_ACK | 0x08, b"q" * 10, ack=base)
    got = c.expect()
    print(f"  first 10 bytes: ACKed after {got[1] * 1000:.1f} ms" if got else "  no ACK")
    child.send(b"r" * 10)
    c.expect()
    time.sleep(0.01)
    c.send(TCP_ACK | 0x08, b"s" * 10, ack=base + 10)
    got = c.expect()
    print(f"  10 bytes after our reply: ACKed after {got[1] * 1000:.1f} ms" if got else "  no ACK")
    child.recv(100)
    time.sleep(0.01)
    c.send(TCP_ACK, b"t" * 1000, ack=base + 10)
    got = c.expect(0.3)
    print(f"  then 1000 bytes: ACKed after {got[1] * 1000:.1f} ms" if got else "  then 1000 bytes: no ACK")
    child.close()
    lst.close()


def rcv_mss(dev: TunDevice, rd: PacketReader, ns: str) -> None:
    lst = _listen(ns, None)
    c = Client(dev, rd, 42000)
    c.handshake()
    child, _ = lst.accept()

    def info() -> int:
        raw = child.getsockopt(socket.IPPROTO_TCP, TCP_INFO, 232)
        return int(struct.unpack_from("I", raw, 20)[0])   # tcpi_rcv_mss: 8 bytes, rto, ato, snd_mss

    print(f"  after the handshake: tcpi_rcv_mss {info()}")
    psh = TCP_ACK | 0x08
    for size, flags in ((1000, TCP_ACK), (700, TCP_ACK), (700, TCP_ACK), (100, psh), (100, psh)):
        c.send(flags, b"y" * size)
        c.expect(0.3)
        print(f"  after a {size}-byte segment{' (PSH)' if flags & 0x08 else ''}: tcpi_rcv_mss {info()}")
    child.close()
    lst.close()


# -- the window after the handshake (tcp/window.py) ---------------------------------------------

SO_MEMINFO = 55
SYN_OPTS_NO_WS = (struct.pack("!BBH", 2, 4, 1460) + bytes([4, 2, 8, 10]) + struct.pack("!II", 100, 0))


def _sysctl_int(ns: str, name: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-n", name], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def _tcp_state(child: socket.socket) -> tuple[int, int, int]:
    """(tcpi_rcv_ssthresh, sk_rmem_alloc, sk_rcvbuf) of the kernel's socket."""
    raw = child.getsockopt(socket.IPPROTO_TCP, TCP_INFO, 104)
    mem = struct.unpack("9I", child.getsockopt(socket.SOL_SOCKET, SO_MEMINFO, 36))
    return int(struct.unpack_from("I", raw, 64)[0]), mem[0], mem[1]


class WindowModel:
    """The kernel's receive-window state, advanced with tcp/window.py's functions (the same
    arithmetic usertcp's Receive runs), fed only what the kernel's memory accounting shows:
    each segment's truesize and the buffer size (SO_MEMINFO)."""

    def __init__(self, rcvbuf: int, mss: int, advmss: int, ws_ok: bool, rmem2: int, rmem_max: int) -> None:
        from usertcp.tcp.window import initial_window, win_from_space
        self.rcvbuf, self.advmss, self.rmem2 = rcvbuf, advmss, rmem2
        self.rcv_wnd, clamp, self.ws = initial_window(rcvbuf, False, 0, mss, ws_ok, rmem2, rmem_max)
        self.ratio, self.rcv_mss, self.rmem = 128, 536, 0
        self.ssthresh = self.rcv_wnd
        maxwin = win_from_space(rcvbuf)                  # tcp_init_buffer_space
        clamp = maxwin if clamp >= maxwin else clamp
        if clamp > 2 * advmss and clamp + advmss > maxwin:
            clamp = max(2 * advmss, maxwin - advmss)
        self.clamp = clamp
        self.ssthresh = min(self.ssthresh, clamp)
        self.right = self.rcv_wnd                        # rcv_adv - rcv_nxt, from rcv_nxt = 0
        self.nxt = 0

    def segment(self, length: int, truesize: int, rcvbuf: int) -> int:
        """One in-order segment arrives (not read): the window of the ACK it earns."""
        from usertcp.tcp.window import grow_increment, scaling_ratio, win_from_space
        self.rcvbuf = rcvbuf
        if length >= self.rcv_mss:                      # tcp_measure_rcv_mss
            if length != self.rcv_mss:
                ratio = scaling_ratio(length, truesize)
                if ratio != self.ratio:
                    self.ratio = ratio
                    new = max(1152, win_from_space(self.rcvbuf, ratio))   # tcp_set_window_clamp
                    if new < self.clamp:
                        self.ssthresh = min(self.ssthresh, new)
                    elif new > self.clamp:
                        self.ssthresh = max(min(self.rcv_wnd, new), self.ssthresh)
                    self.clamp = new
            self.rcv_mss = min(length, self.advmss)
        self.rmem += truesize
        self.nxt += length
        if length >= 128:                               # tcp_grow_window
            space = win_from_space(self.rcvbuf - self.rmem, self.ratio)
            room = min(self.clamp, space) - self.ssthresh
            if room > 0:
                incr = grow_increment(length, truesize, self.ratio, self.ssthresh, self.rmem2, self.rcv_mss,
                                      self.advmss)
                self.ssthresh += min(room, incr)
        return self.window()

    def read_all(self, rcvbuf: int) -> int:
        self.rmem, self.rcvbuf = 0, rcvbuf
        return self.window()

    def window(self) -> int:
        """tcp_select_window, never shrinking."""
        from usertcp.tcp.window import select_window, win_from_space
        allowed = win_from_space(self.rcvbuf, self.ratio)
        free = win_from_space(self.rcvbuf - self.rmem, self.ratio)
        new = select_window(free, allowed, min(self.clamp, allowed), self.ssthresh, self.ws, self.rcv_mss,
                            self.rcv_wnd, False)
        cur = self.right - self.nxt
        unit = 1 << self.ws
        if new < cur:
            new = (cur + unit - 1) & -unit
        self.rcv_wnd = new
        self.right = self.nxt + new
        return min(new, 0xFFFF << self.ws)


def window_growth(dev: TunDevice, rd: PacketReader, ns: str, *, sizes: list[int], wscale: bool,
                  port: int) -> tuple[int, int]:
    """Send ``sizes`` in order to a kernel that does not read, then read all: compare each ACK's
    window (and tcpi_rcv_ssthresh) with WindowModel's. Returns (matching ACKs, ACKs)."""
    lst = _listen(ns, None)
    c = Client(dev, rd, port)
    synack = c.handshake(SYN_OPTS if wscale else SYN_OPTS_NO_WS)
    child, _ = lst.accept()
    ws_opt = synack.option(3)
    ws = ws_opt[0] if ws_opt else 0
    rmem2 = _sysctl_int(ns, "net.ipv4.tcp_rmem")[2]
    rmem_max = int(Path("/proc/sys/net/core/rmem_max").read_text())
    _, rmem, rcvbuf = _tcp_state(child)
    model = WindowModel(rcvbuf, 1448, 1448, wscale, rmem2, rmem_max)
    ok = total = 0
    shown = 0
    for size in sizes:
        c.send(TCP_ACK, b"w" * size, ack=synack.seq + 1)
        got = c.expect(0.5)
        ssthresh, now_rmem, rcvbuf = _tcp_state(child)
        truesize = now_rmem - rmem
        want = model.segment(size, truesize, rcvbuf)
        rmem = now_rmem
        if got is None:
            print(f"    {size} bytes: no ACK")
            continue
        win = got[0].window << ws
        total += 1
        same = win == want and ssthresh == model.ssthresh
        ok += same
        if not same or shown < 6:
            shown += 1
            print(f"    {size:5} bytes (truesize {truesize}): kernel win {win} "
                  f"rcv_ssthresh {ssthresh}; model win {want} rcv_ssthresh {model.ssthresh}"
                  f"{'' if same else '  <-- differs'}")
    child.setblocking(False)
    while True:
        try:
            if not child.recv(1 << 20):
                break
        except BlockingIOError:
            break
    got = c.expect(0.5)
    _, _, rcvbuf = _tcp_state(child)
    want = model.read_all(rcvbuf)
    if got is not None:
        total += 1
        ok += (got[0].window << ws) == want
        print(f"    after reading it all: kernel win {got[0].window << ws}, model {want}")
    else:
        print("    after reading it all: no window update")
    print(f"  {ok} of {total} ACKs as tcp/window.py predicts (scaling ratio {model.ratio}, wscale {ws})")
    child.close()
    lst.close()
    return ok, total


def window_after_handshake(dev: TunDevice, rd: PacketReader, ns: str) -> None:
    print(" scaled (wscale offered), full-sized segments, the reader asleep:")
    window_growth(dev, rd, ns, sizes=[1448] * 60, wscale=True, port=46000)
    print(" scaled, mixed sizes:")
    window_growth(dev, rd, ns, sizes=[4, 1000, 1448, 700, 1448, 200, 1448, 1448, 100] * 4, wscale=True,
                  port=46001)
    print(" unscaled (no window scale in the SYN):")
    window_growth(dev, rd, ns, sizes=[4] + [1000] * 20 + [1448] * 40, wscale=False, port=46002)


def buffer_options() -> None:
    """SO_RCVBUF / SO_SNDBUF against net.core.rmem_max / wmem_max, and the FORCE variants (as
    root), compared with usertcp's SocketOptions under the same ceilings (sk_setsockopt)."""
    from usertcp.api.sockopts import SocketOptions
    from usertcp.tcp.config import StackConfig
    rmem_max = int(Path("/proc/sys/net/core/rmem_max").read_text())
    wmem_max = int(Path("/proc/sys/net/core/wmem_max").read_text())
    cfg = StackConfig(rmem_max=rmem_max, wmem_max=wmem_max)
    print(f"  net.core.rmem_max {rmem_max}, wmem_max {wmem_max}")
    ok = total = 0
    for name, opt in (("SO_RCVBUF", 8), ("SO_RCVBUFFORCE", 33), ("SO_SNDBUF", 7), ("SO_SNDBUFFORCE", 32)):
        get = 8 if "RCV" in name else 7
        for value in (1, 1000, 100_000, 3 * rmem_max, -5):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, opt, value)
            kernel = s.getsockopt(socket.SOL_SOCKET, get)
            s.close()
            ours = SocketOptions(cfg)
            ours.set(socket.SOL_SOCKET, opt, value, conn=None, listener=None)
            model = ours.get(socket.SOL_SOCKET, get, conn=None, listener=None)
            total += 1
            ok += kernel == model
            mark = "" if kernel == model else "  <-- differs"
            print(f"    {name} {value}: kernel {kernel}, usertcp {model}{mark}")
    print(f"  {ok} of {total} as usertcp")


def shrink_window(dev: TunDevice, rd: PacketReader, ns: str) -> None:
    """net.ipv4.tcp_shrink_window=1: fill a receiver that does not read; does the right edge
    move left, and is data the old window allowed (past the new edge) accepted?"""
    lst = _listen(ns, None)
    c = Client(dev, rd, 47000)
    synack = c.handshake()
    child, _ = lst.accept()
    ws_opt = synack.option(3)
    ws = ws_opt[0] if ws_opt else 0
    base = synack.seq + 1
    right = c.seq + synack.window
    shrank = None
    wins = []
    for _ in range(120):
        c.send(TCP_ACK, b"s" * 1448, ack=base)
        got = c.expect(0.5)
        if got is None:
            break
        edge = got[0].ack + (got[0].window << ws)
        wins.append(got[0].window << ws)
        c.seq = got[0].ack
        if edge < right and shrank is None and edge - c.seq >= 0:
            shrank = (right, edge, got[0].ack)
            # out of order, past the new right edge but inside the old one
            c.seq = edge + 10
            c.send(TCP_ACK, b"u" * 10, ack=base)
            back = c.expect(0.5)
            sack = back[0].option(5) if back else None
            print(f"  10 bytes past the shrunk edge, within the old one: "
                  f"{'SACKed (queued)' if sack else 'not SACKed (dropped)'}")
            c.seq = got[0].ack
        right = max(right, edge)
        if got[0].window == 0:
            break
    print(f"  windows: {wins[:4]} ... {wins[-4:]}")
    if shrank is None:
        print("  the right edge never moved left")
    else:
        old, new, at = shrank
        print(f"  the right edge moved left: {old - at} -> {new - at} past RCV.NXT")
    nxt = c.seq
    c.send(TCP_ACK, b"t" * 100, ack=base)
    got = c.expect(0.5)
    verdict = "accepted" if got and got[0].ack == nxt + 100 else "dropped"
    print(f"  100 bytes at RCV.NXT after the window closed: {verdict}"
          f" (ack +{(got[0].ack - nxt) if got else '?'}, win {(got[0].window << ws) if got else '?'})")
    names = ("TcpExtTCPWantZeroWindowAdv", "TcpExtTCPToZeroWindowAdv", "TcpExtTCPFromZeroWindowAdv",
             "TcpExtTCPZeroWindowDrop")
    print("  " + " ".join(f"{n}={_netstat(ns, n)}" for n in names))
    child.close()
    lst.close()


def cookie_synack(dev: TunDevice, rd: PacketReader, ns: str) -> None:
    """net.ipv4.tcp_syncookies=2 (always): the cookie SYN-ACK's window and scale for several
    SO_RCVBUF values, beside usertcp's (tcp/window.py initial_window, as tcp/syncookies.py)."""
    from usertcp.tcp.window import initial_window
    rmem = _sysctl_int(ns, "net.ipv4.tcp_rmem")
    rmem_max = int(Path("/proc/sys/net/core/rmem_max").read_text())
    for i, rcvbuf in enumerate((None, 1000, 65536, 1 << 20)):
        lst = _listen(ns, rcvbuf)
        c = Client(dev, rd, 48000 + i)
        synack = c.handshake()
        wscale = synack.option(3)
        buf = rmem[1] if rcvbuf is None else max(2 * min(rcvbuf, rmem_max), 2304)
        win, _, ws = initial_window(buf, rcvbuf is not None, 0, 1448, True, rmem[2], rmem_max)
        same = synack.window == win and (wscale[0] if wscale else None) == ws
        kernel_ws = wscale[0] if wscale else None
        print(f"  SO_RCVBUF {rcvbuf}: cookie SYN-ACK win {synack.window} wscale {kernel_ws};"
              f" usertcp win {win} wscale {ws}{'' if same else '  <-- differs'}")
        lst.close()


def _netstat(ns: str, name: str) -> int:
    """One TcpExt counter of the namespace (/proc/net/netstat)."""
    lines = subprocess.run(["ip", "netns", "exec", ns, "cat", "/proc/net/netstat"], capture_output=True,
                           text=True).stdout.splitlines()
    for head, vals in zip(lines[::2], lines[1::2], strict=False):
        if head.startswith("TcpExt:"):
            row = dict(zip(head.split(), vals.split(), strict=False))
            return int(row.get(name.removeprefix("TcpExt"), 0))
    return 0


def sack_compression(dev: TunDevice, rd: PacketReader, ns: str) -> None:
    """Out-of-order data at a receiver that has an RTT estimate (20 ms, from data it sent) and
    has left quick-ACK mode (its window fully open: tcp_grow_window no longer asks for quick
    ACKs): how many ACKs come back, when, and TcpExtTCPAckCompressed. Then half the hole is
    filled and ten more arrive: in 2 of 5 runs the fill's ACK counted among the three
    duplicates sent at once (3 ACKs, then one per timer, as usertcp does); in 3 of 5 all eleven
    were ACKed at once, nothing compressed (not explained yet)."""
    lst = _listen(ns, 65536)                 # locked: no auto-tuning, rcv_ssthresh reaches its clamp
    c = Client(dev, rd, 49000)
    synack = c.handshake()
    child, _ = lst.accept()
    base = synack.seq + 1
    for i in range(3):                       # the kernel sends, we ACK 20 ms later: srtt ~ 20 ms
        child.send(b"k" * 100)
        c.expect()
        time.sleep(0.02)
        c.send(TCP_ACK, ack=base + 100 * (i + 1))
    base += 300
    child.setblocking(False)
    for _ in range(40):                      # in order, read: quick-ACK mode ends, the window opens
        c.send(TCP_ACK, b"i" * 1448, ack=base)
        c.expect(0.05)
        with contextlib.suppress(BlockingIOError):
            child.recv(1 << 16)
    while c.expect(0.1) is not None:
        pass
    before = _netstat(ns, "TcpExtTCPAckCompressed")
    hole = c.seq
    c.seq += 2 * 1448                        # a two-segment hole
    start = time.monotonic()
    for _ in range(10):                      # ten out-of-order segments, back to back
        c.send(TCP_ACK, b"o" * 1448, ack=base)
    acks = []
    while c.expect(0.05) is not None:
        acks.append(time.monotonic() - start)
    print(f"  10 out-of-order segments sent back to back: {len(acks)} ACKs, at "
          + ", ".join(f"{t * 1000:.2f}" for t in acks) + " ms")
    print(f"  TcpExtTCPAckCompressed +{_netstat(ns, 'TcpExtTCPAckCompressed') - before}")
    after_burst = c.seq
    c.seq = hole                             # fill half the hole, then ten more out of order
    c.send(TCP_ACK, b"h" * 1448, ack=base)
    c.seq = after_burst
    start = time.monotonic()
    for _ in range(10):
        c.send(TCP_ACK, b"p" * 1448, ack=base)
    acks = []
    while c.expect(0.05) is not None:
        acks.append(time.monotonic() - start)
    print(f"  half the hole filled, then 10 more: {len(acks)} ACKs, at "
          + ", ".join(f"{t * 1000:.2f}" for t in acks) + " ms"
          + f"; TcpExtTCPAckCompressed now +{_netstat(ns, 'TcpExtTCPAckCompressed') - before}")
    child.close()
    lst.close()


if __name__ == "__main__":
    print(f"kernel {subprocess.run(['uname', '-r'], capture_output=True, text=True).stdout.strip()}")
    print("SYN-ACK window and scale (tcp_rmem 4096 540000 15728640, as defaults.sh):")
    probe_session("rcvprobe", synack_windows, sysctls=["net.ipv4.tcp_rmem=4096 540000 15728640"])
    print("SYN-ACK window and scale (tcp_rmem 4096 131072 6291456, Linux's default):")
    probe_session("rcvprobe", synack_windows, sysctls=["net.ipv4.tcp_rmem=4096 131072 6291456"])
    print("invalid ACK, ts_recent, lone FIN:")
    probe_session("rcvprobe", invalid_ack_and_lone_fin)
    print("lone FIN, other cases:")
    probe_session("rcvprobe", lone_fin_cases)
    print("out-of-window data, zero window:")
    probe_session("rcvprobe", out_of_window)
    print("delayed ACK, then the next segment:")
    probe_session("rcvprobe", delack_after_timer)
    print("tcpi_rcv_mss:")
    probe_session("rcvprobe", rcv_mss)
    print("the window after the handshake (tcp_select_window, tcp_grow_window, scaling_ratio):")
    probe_session("rcvprobe", window_after_handshake)
    print("SO_RCVBUF / SO_SNDBUF and their FORCE variants (sk_setsockopt):")
    buffer_options()
    print("tcp_shrink_window=1, the reader asleep:")
    probe_session("rcvprobe", shrink_window, sysctls=["net.ipv4.tcp_shrink_window=1"])
    print("tcp_shrink_window=0 (the default), the same:")
    probe_session("rcvprobe", shrink_window)
    print("SACK compression (tcp_comp_sack_*), defaults:")
    probe_session("rcvprobe", sack_compression)
    print("SACK compression off (tcp_comp_sack_nr=0):")
    probe_session("rcvprobe", sack_compression, sysctls=["net.ipv4.tcp_comp_sack_nr=0"])
    print("SYN-cookie SYN-ACKs (tcp_syncookies=2):")
    probe_session("rcvprobe", cookie_synack, sysctls=["net.ipv4.tcp_syncookies=2"])
