"""The urgent mark of the receive side, as Linux keeps it (RFC 9293 §3.8.5, RFC 6093).

Linux keeps one urgent byte per connection (``tp->urg_seq``, ``tp->urg_data``), not a stream
of urgent data:

- ``tcp_urg``/``tcp_check_urg`` (tcp_input.c): a segment with URG names the urgent byte
  (the pointer minus one: the BSD reading, ``tcp_stdurg`` = 0). A pointer into data already
  read, or below RCV.NXT, or not past the one we hold is ignored; otherwise the mark moves
  there (``TCP_URG_NOTYET``) and, once that byte has arrived, it is held with the mark
  (``TCP_URG_VALID | byte``). A new mark while the old byte is unread at the read head (not
  SO_OOBINLINE) consumes the old byte first. Header prediction is off while a mark is held.
- ``tcp_recvmsg_locked``: a read stops at the mark once it has copied something; at the
  mark the urgent byte is skipped (it is out of band) unless SO_OOBINLINE; once the read head
  has passed the mark the mark is gone. ``MSG_OOB`` reads the held byte (``tcp_recv_urg``).
- ``__tcp_read_sock`` (splice, sendfile's receive side): stops at the mark; at the mark it
  moves nothing.
- ``tcp_poll``: POLLPRI while the byte is held; a lone urgent byte at the read head does not
  make the socket readable (unless SO_OOBINLINE). ``SIOCATMARK``: the read head is at the mark.

Positions are data-byte indices (0 for the first byte after the SYN); the read head is what
was received in order less what is still queued.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING, Final

from usertcp.wire.segment import URG

if TYPE_CHECKING:
    from usertcp.tcp.connection import Connection
    from usertcp.wire.segment import Segment

__all__ = ["URG_NOTYET", "URG_READ", "URG_VALID", "Urgent"]

# tp->urg_data states (include/net/tcp.h), the low byte holding the urgent byte.
URG_VALID: Final = 0x0100
URG_NOTYET: Final = 0x0200
URG_READ: Final = 0x0400


class Urgent:
    """One connection's urgent mark (Linux tp->urg_data, tp->urg_seq) and SO_OOBINLINE."""

    __slots__ = ("data", "index", "inline")

    def __init__(self) -> None:
        self.data = 0          # 0, or URG_NOTYET / URG_VALID|byte / URG_READ
        self.index = 0         # data index of the urgent byte
        self.inline = False    # SO_OOBINLINE: the urgent byte stays in the stream

    def set_inline(self, inline: bool) -> None:
        """SO_OOBINLINE."""
        self.inline = inline

    @property
    def held(self) -> bool:
        return self.data != 0

    # ------------------------------------------------------------------ arrival

    def on_segment(self, conn: Connection, seg: Segment, seg_off: int) -> None:
        """tcp_urg(), before the segment's data is queued (RFC 9293 §3.10.7.4 sixth step)."""
        if seg.flags & URG:
            self._check_urg(conn, seg, seg_off)
        if self.data == URG_NOTYET:
            at = self.index - (seg_off - 1)        # the urgent byte's place in this segment
            payload = seg.payload
            if 0 <= at < len(payload):
                self.data = URG_VALID | payload[at]

    def _check_urg(self, conn: Connection, seg: Segment, seg_off: int) -> None:
        """tcp_check_urg(): take a new urgent pointer."""
        ptr = seg.urg_ptr
        if ptr:
            ptr -= 1                               # sysctl tcp_stdurg = 0 (BSD semantics)
        index = seg_off - 1 + ptr
        head = read_head(conn)
        if head > index:
            return                                 # already seen and read
        if index < conn.rcv_nxt - 1:
            return                                 # below RCV.NXT: not replayed
        if self.data and index <= self.index:
            return                                 # no newer pointer
        conn.mib["UsertcpUrgentMarks"] += 1        # sk_send_sigurg()
        if self.index == head and self.data and not self.inline and conn.readable_bytes:
            conn.rcv_buf.discard(1)                # the old urgent byte at the head goes
        self.data = URG_NOTYET
        self.index = index

    # ------------------------------------------------------------------ reading

    def recv(self, conn: Connection, n: int) -> bytes:
        """tcp_recvmsg_locked's walk with a mark held: stop at the mark once something was
        copied, skip the urgent byte there (unless inline), drop the mark once passed."""
        out = bytearray()
        buf = conn.rcv_buf
        while len(out) < n and len(buf) and self.data:
            head = read_head(conn)
            if self.index == head and out:
                break
            take = min(n - len(out), len(buf))
            off = self.index - head
            if 0 <= off < take:
                if off == 0:
                    if not self.inline:
                        buf.discard(1)             # urg_hole: the byte is out of band
                        self._passed(conn)
                        continue
                else:
                    take = off
            out += buf.read(take)
            self._passed(conn)
        if len(out) < n and len(buf) and not self.data:
            out += buf.read(n - len(out))
        return bytes(out)

    def read_sock_limit(self, conn: Connection, n: int) -> int:
        """__tcp_read_sock(): how much of ``n`` may move before the mark (0 at the mark)."""
        if not self.data:
            return n
        off = self.index - read_head(conn)
        return off if 0 <= off < n else n

    def recv_oob(self, conn: Connection, peek: bool, size: int) -> bytes:
        """tcp_recv_urg(): what a MSG_OOB read of ``size`` bytes returns: the held urgent
        byte, or nothing at the end of stream or for a zero-length read (which still takes
        the byte: Linux sets MSG_TRUNC). OSError EINVAL with no urgent data (or inline),
        EAGAIN before it arrived (never blocks)."""
        if self.inline or not self.data or self.data == URG_READ:
            raise OSError(errno.EINVAL, "no out-of-band data")
        if self.data & URG_VALID:
            byte = self.data & 0xFF
            if not peek:
                self.data = URG_READ
            return bytes((byte,)) if size else b""
        if conn.fin_received or conn.read_shutdown:
            return b""
        raise OSError(errno.EAGAIN, "the urgent byte has not arrived yet")

    def _passed(self, conn: Connection) -> None:
        if self.data and read_head(conn) > self.index:
            self.data = 0                          # tcp_recvmsg: after(copied_seq, urg_seq)

    # ------------------------------------------------------------------ state

    def at_mark(self, conn: Connection) -> bool:
        """SIOCATMARK: a mark is held and the read head is at it."""
        return bool(self.data) and self.index == read_head(conn)

    def readable(self, conn: Connection) -> int:
        """Bytes that make the socket readable (tcp_stream_is_readable's target: a lone
        urgent byte at the read head does not count unless inline)."""
        n = conn.readable_bytes
        if n and not self.inline and self.at_mark(conn):
            n -= 1
        return n

    @property
    def pollpri(self) -> bool:
        """tcp_poll: EPOLLPRI while the urgent byte is held."""
        return bool(self.data & URG_VALID)


def read_head(conn: Connection) -> int:
    """Data index of the next byte a read returns (Linux tp->copied_seq)."""
    return conn.bytes_received - conn.readable_bytes
