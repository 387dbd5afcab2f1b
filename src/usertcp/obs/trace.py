"""JSON-lines event traces, in the spirit of qlog: one ``{"time", "name", "data"}`` per line.

* :class:`JsonLinesTracer` writes events; assign it to ``stack.tracer`` (or call
  :meth:`JsonLinesTracer.attach`, which also tags each event with ``"stack"``). The core
  emits its own decisions (``data`` always has ``conn``): ``tcp:state_updated`` (``old``,
  ``new``), ``tcp:packet_lost`` (``rel_seq``, ``end``, ``trigger`` rack|sack|reno),
  ``tcp:retransmit`` (``rel_seq``, ``end``, ``tx_count``, ``reason`` fast|rto|probe),
  ``tcp:congestion_state`` (``old``, ``new``, ``trigger``), ``tcp:cwnd`` (``cwnd``,
  ``ssthresh``, ``bytes_in_flight``, ``smoothed_rtt``, ``rto``) and ``tcp:rto_fired``
  (``backoff``, ``rto``). Per-packet events come from the link, below.
* :class:`Sampler` derives, until the core traces them itself, the events a
  sequence/cwnd plot needs, by tapping in-memory links and sampling ``conn.info()``:

  - ``transport:packet_sent`` / ``transport:packet_received``: ``conn`` (sender's
    ``local-remote`` id, as in ``tcp:state_updated``), ``link``, ``seq``/``ack`` (raw),
    ``rel_seq``/``rel_ack`` (relative to each side's ISN), ``len``, ``flags``
    (``"SAFRP"`` letters), ``window`` (scaled), ``sack`` (relative blocks),
    ``retransmission`` (sent only: the segment ends at or below the highest one sent).
  - ``recovery:metrics_updated`` (when a value changed): ``conn``, ``cwnd``,
    ``ssthresh`` (bytes; null while infinite), ``bytes_in_flight``, ``smoothed_rtt``,
    ``rtt_variance``, ``min_rtt``, ``rto`` (ms), ``snd_una``/``snd_nxt`` (relative),
    ``total_retrans``, ``lost`` (segments), ``ca_state``.
  - ``recovery:congestion_state_updated``: ``conn``, ``old``, ``new`` (Open, Disorder,
    CWR, Recovery, Loss); ``recovery:packet_lost``: ``conn``, ``lost`` (segments
    marked lost now), ``total_retrans``.

Times are seconds on the stack/driver clock.
"""

from __future__ import annotations

import argparse
import io
import json
import os
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, TextIO

from usertcp.cli import parse_size
from usertcp.net.memnet import LinkDirection, Network
from usertcp.tcp.congestion import INFINITE_SSTHRESH
from usertcp.tcp.connection import Connection
from usertcp.tcp.stack import Stack
from usertcp.wire.packet import parse_packet
from usertcp.wire.segment import ACK, FIN, PSH, RST, SYN, DropPacket

Event = dict[str, Any]
_Key = tuple[bytes, int, bytes, int]
Sink = Callable[[Event], None]
CA_STATES = ("Open", "Disorder", "CWR", "Recovery", "Loss")
_FLAG_LETTERS = ((SYN, "S"), (ACK, "A"), (FIN, "F"), (RST, "R"), (PSH, "P"))


def conn_id(local_ip: bytes, local_port: int, remote_ip: bytes, remote_port: int) -> str:
    """The connection id the core's trace uses: ``"10.0.0.1:32768-10.0.0.2:80"``."""
    return f"{Stack.fmt_addr(local_ip)}:{local_port}-{Stack.fmt_addr(remote_ip)}:{remote_port}"


class JsonLinesTracer:
    """A ``stack.tracer`` that writes each event as one JSON line.

    ``target``: a path (opened, and closed by :meth:`close`) or a text file object
    (left open). ``flush=True`` flushes after every event (for ``tail -f``).
    """

    def __init__(self, target: str | os.PathLike[str] | TextIO, *, flush: bool = False) -> None:
        if isinstance(target, (str, os.PathLike)):
            self._file: TextIO = open(target, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
            self._owns = True
        else:
            self._file = target
            self._owns = False
        self._flush = flush
        self.count = 0

    def __call__(self, event: Event) -> None:
        self._file.write(json.dumps(event, separators=(",", ":"), default=str) + "\n")
        self.count += 1
        if self._flush:
            self._file.flush()

    write = __call__

    def attach(self, stack: Stack) -> None:
        """``stack.tracer = `` this tracer, adding ``"stack": stack.name`` to each event."""
        stack.tracer = _Tagged(self, stack.name)

    def close(self) -> None:
        if self._file.closed:
            return
        self._file.flush()
        if self._owns:
            self._file.close()

    def __enter__(self) -> JsonLinesTracer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class _Tagged:
    __slots__ = ("sink", "name")

    def __init__(self, sink: Sink, name: str) -> None:
        self.sink = sink
        self.name = name

    def __call__(self, event: Event) -> None:
        event["stack"] = self.name
        self.sink(event)


def read_trace(source: str | os.PathLike[str] | TextIO | Iterable[str]) -> list[Event]:
    """Every event of a JSON-lines trace (blank lines skipped; ValueError names a bad line)."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, encoding="utf-8") as f:
            return list(_parse_lines(f))
    return list(_parse_lines(source))


def _parse_lines(lines: Iterable[str] | io.TextIOBase) -> Iterator[Event]:
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        try:
            ev = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"trace line {n}: not JSON ({e})") from None
        if not isinstance(ev, dict) or "name" not in ev:
            raise ValueError(f"trace line {n}: not an event object")
        yield ev


def _flags(f: int) -> str:
    return "".join(letter for bit, letter in _FLAG_LETTERS if f & bit)


class _Flow:
    """One direction of one connection as seen on the wire."""

    __slots__ = ("isn", "high", "wscale")

    def __init__(self, isn: int) -> None:
        self.isn = isn
        self.high = 0          # highest relative sequence end sent
        self.wscale = -1       # the window scale this sender announced in its SYN


class Sampler:
    """Derives packet and recovery events (see the module docstring) and sends them to ``sink``.

    ``network``: tap every link of an in-memory network (packets, plus a metrics sample
    of the sending connection at each packet it sends). For other links (TUN) call
    :meth:`sample` periodically with the stack.
    """

    def __init__(self, sink: Sink, *, network: Network | None = None, received: bool = True) -> None:
        self.sink = sink
        self.received = received
        self._flows: dict[_Key, _Flow] = {}
        self._last: dict[int, tuple[Any, ...]] = {}
        self._removers: list[Callable[[], None]] = []
        if network is not None:
            self.attach(network)

    def attach(self, network: Network) -> None:
        self._removers.append(network.add_tap(self._on_send, where="send"))
        if self.received:
            self._removers.append(network.add_tap(self._on_deliver, where="deliver"))

    def detach(self) -> None:
        for remove in self._removers:
            remove()
        self._removers.clear()

    # -- metrics -----------------------------------------------------------------------

    def sample(self, stack: Stack, now: float) -> int:
        """Sample every connection of ``stack``; returns how many events were written."""
        return sum(self.sample_connection(c, now) for c in list(stack.connections.values()))

    def sample_connection(self, conn: Connection, now: float) -> int:
        rtt = conn.rtt
        ms = 1000.0
        cc = conn.cc
        info = conn.info()
        cid = conn_id(conn.local_ip, conn.local_port, conn.remote_ip, conn.remote_port)
        data: dict[str, Any] = {
            "conn": cid,
            "cwnd": cc.cwnd,
            "ssthresh": None if cc.ssthresh >= INFINITE_SSTHRESH else cc.ssthresh,
            "bytes_in_flight": conn.in_flight,
            "smoothed_rtt": None if rtt.srtt is None else rtt.srtt * ms,
            "rtt_variance": None if rtt.srtt is None else rtt.rttvar * ms,
            "min_rtt": None if rtt.min_rtt is None else rtt.min_rtt * ms,
            "rto": rtt.timeout * ms,
            "snd_una": conn.snd_una,
            "snd_nxt": conn.snd_nxt,
            "total_retrans": conn.total_retrans,
            "lost": info["tcpi_lost"],
            "ca_state": CA_STATES[ca] if 0 <= (ca := conn.recovery.ca_state) < 5 else str(ca),
        }
        key = tuple(data.values())
        last = self._last.get(id(conn))
        if last == key:
            return 0
        self._last[id(conn)] = key
        n = 0
        if last is not None:
            names = list(data)
            old_ca = last[names.index("ca_state")]
            if old_ca != data["ca_state"]:
                self.sink({"time": now, "name": "recovery:congestion_state_updated",
                           "data": {"conn": cid, "old": old_ca, "new": data["ca_state"]}})
                n += 1
            old_lost = last[names.index("lost")]
            if data["lost"] > old_lost:
                self.sink({"time": now, "name": "recovery:packet_lost",
                           "data": {"conn": cid, "lost": data["lost"] - old_lost,
                                    "total_retrans": data["total_retrans"]}})
                n += 1
        self.sink({"time": now, "name": "recovery:metrics_updated", "data": data})
        return n + 1

    # -- packets -----------------------------------------------------------------------

    def _packet(self, data: bytes, d: LinkDirection, sent: bool) -> tuple[Event, _Key] | None:
        try:
            seg = parse_packet(data, verify_checksum=False)
        except DropPacket:
            return None
        key = (seg.src, seg.sport, seg.dst, seg.dport)
        rkey = (seg.dst, seg.dport, seg.src, seg.sport)
        flows = self._flows
        flow = flows.get(key)
        if flow is None or (seg.flags & SYN and sent and flow.isn != seg.seq):
            flow = flows[key] = _Flow(seg.seq)
        if seg.flags & SYN:
            flow.wscale = seg.wscale
        peer = flows.get(rkey)
        rel_seq = (seg.seq - flow.isn) & 0xFFFFFFFF
        rel_ack = (seg.ack - peer.isn) & 0xFFFFFFFF if peer is not None and seg.flags & ACK else None
        length = len(seg.payload)
        window = seg.window
        if not seg.flags & SYN and peer is not None and flow.wscale >= 0 and peer.wscale >= 0:
            window <<= flow.wscale
        ev: Event = {"conn": conn_id(*key), "link": d.name, "seq": seg.seq, "ack": seg.ack,
                     "rel_seq": rel_seq, "rel_ack": rel_ack, "len": length, "flags": _flags(seg.flags),
                     "window": window}
        if seg.sack_blocks and peer is not None:
            ev["sack"] = [[(left - peer.isn) & 0xFFFFFFFF, (right - peer.isn) & 0xFFFFFFFF]
                          for left, right in seg.sack_blocks]
        if sent:
            end = rel_seq + length + (1 if seg.flags & (SYN | FIN) else 0)
            ev["retransmission"] = end <= flow.high and (length > 0 or bool(seg.flags & (SYN | FIN)))
            flow.high = max(flow.high, end)
        return ev, key

    def _on_send(self, data: bytes, now: float, d: LinkDirection) -> None:
        got = self._packet(data, d, True)
        if got is None:
            return
        ev, key = got
        self.sink({"time": now, "name": "transport:packet_sent", "data": ev})
        stack = d.src.endpoint
        if isinstance(stack, Stack):
            conn = stack.connections.get(key)
            if conn is not None:
                self.sample_connection(conn, now)

    def _on_deliver(self, data: bytes, now: float, d: LinkDirection) -> None:
        got = self._packet(data, d, False)
        if got is not None:
            self.sink({"time": now, "name": "transport:packet_received", "data": got[0]})


# ----------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Run a short in-memory transfer (virtual time, with loss) and write its "
                          "JSON-lines event trace: the core's tcp:state_updated events plus the "
                          "Sampler's packet and recovery events. Plot it with 'usertcp plot'.")
    parser.add_argument("-o", "--output", required=True, metavar="TRACE.jsonl", help="trace file to write")
    parser.add_argument("--pcap", metavar="FILE.pcap", help="also capture every packet (LINKTYPE_RAW)")
    parser.add_argument("--plot", metavar="OUT.png", help="also draw the trace (needs matplotlib)")
    parser.add_argument("--size", type=parse_size, default=500_000,
                        help="bytes to transfer (%(default)s; 5M, 64Ki... allowed)")
    parser.add_argument("--loss", type=float, default=0.02, help="packet loss probability (%(default)s)")
    parser.add_argument("--delay", type=float, default=0.005, help="one-way delay, seconds (%(default)s)")
    parser.add_argument("--bandwidth", type=float, default=20e6, help="link rate, bit/s (%(default)s)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (%(default)s)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def cli(args: argparse.Namespace) -> int:
    from usertcp.net.pcap import PcapWriter
    from usertcp.obs.scenario import run_transfer

    if args.plot:       # before the run: a missing matplotlib is one line, not a late traceback
        from usertcp.extras import require

        require("matplotlib", "usertcp trace --plot")

    tracer = JsonLinesTracer(args.output)
    pcap = PcapWriter(args.pcap) if args.pcap else None

    def setup(net: Network, client: Stack, server: Stack) -> None:
        tracer.attach(client)
        tracer.attach(server)
        Sampler(tracer, network=net)
        if pcap is not None:
            net.attach_pcap(pcap)

    try:
        tr = run_transfer(size=args.size, loss=args.loss, seed=args.seed, delay=args.delay,
                          bandwidth_bps=args.bandwidth, setup=setup)
    finally:
        tracer.close()
        if pcap is not None:
            pcap.close()
    summary: dict[str, Any] = {"trace": args.output, "events": tracer.count, "ok": tr.done,
                               "bytes": tr.received,
                               # The transfer and its FIN exchange, not the 60 s TIME_WAIT after it
                               # (the plot's time axis ends there too).
                               "duration_s": round(tr.finished_at, 6),
                               "retransmissions": tr.client.counters["TcpRetransSegs"],
                               "pcap": args.pcap, "plot": args.plot}
    if args.plot:
        from usertcp.obs.plot import plot_trace

        plot_trace(args.output, args.plot)
    if args.json:
        print(json.dumps(summary))
    else:
        for k, v in summary.items():
            print(f"{k}: {v}")
    return 0 if tr.done else 1
