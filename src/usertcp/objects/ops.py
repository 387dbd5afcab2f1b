"""Opcodes, flags and the submission/completion entries of the object ring.

The layout follows io_uring: a submission (:class:`Sqe`) names an operation and
carries an opaque ``user_data``; its completion (:class:`Cqe`) returns that
``user_data`` with ``res`` (>= 0 on success, a negative errno on failure) and
``flags``. Copy-out operations (INSPECT, READ_OBJECT) also return the bytes in
``Cqe.data`` (the analogue of the extended CQE32), or write them into the
caller's ``Sqe.buf`` when one is given.
"""

from __future__ import annotations

from enum import IntEnum

from usertcp.wire.segment import Buffer


class Op(IntEnum):
    NOP = 0
    COLLECT = 1        # attach a connected socket; res = stream id
    DETACH = 2         # release the receive claim; undecided bytes become readable again
    INSPECT = 3        # copy stream bytes out (headers); res = bytes copied
    RECV_OBJECT = 4    # a stream range becomes an object; res = handle
    DISCARD = 5        # drop a stream range without copying; res = bytes dropped
    READ_OBJECT = 6    # copy object bytes out; res = bytes copied
    FREE = 7           # release a handle; res = 0
    CREATE = 8         # an object from application memory; res = handle
    OBJ_SEND = 9       # send object ranges with prefix/suffix; res = bytes queued to TCP
    COMPACT = 10       # copy an object into dense backing, same handle; res = bytes copied


# Sqe.flags
SEND_LAST = 1 << 0         # OBJ_SEND gives up every handle it names
INSPECT_WAITALL = 1 << 1   # INSPECT waits for the whole length, not just >= 1 byte

# Cqe.flags
CQE_F_CONSUMED = 1 << 0    # ownership of the handle(s) moved: the handle is no longer valid

# Sqe.offset for stream operations: start right after the last range already decided
# (captured or discarded) on that stream, so a parser can work through it sequentially.
AT_TAIL = -1

# A vectored OBJ_SEND names at most this many (handle, offset, length) ranges.
MAX_RANGES = 1024

ObjRange = tuple[int, int, int]   # (handle, offset, length)


class Sqe:
    """One submission. Unused fields keep their defaults."""

    __slots__ = ("opcode", "user_data", "target", "handle", "offset", "length", "data",
                 "ranges", "prefix", "suffix", "flags", "buf")

    def __init__(self, opcode: Op, user_data: int = 0, *, target: object = None, handle: int = 0,
                 offset: int = 0, length: int = 0, data: Buffer | None = None,
                 ranges: list[ObjRange] | None = None, prefix: Buffer = b"", suffix: Buffer = b"",
                 flags: int = 0, buf: memoryview | bytearray | None = None) -> None:
        self.opcode = opcode
        self.user_data = user_data
        self.target = target      # a Connection/socket (COLLECT, OBJ_SEND) or a stream id (int)
        self.handle = handle
        self.offset = offset
        self.length = length
        self.data = data          # CREATE payload
        self.ranges = ranges      # OBJ_SEND vector
        self.prefix = prefix
        self.suffix = suffix
        self.flags = flags
        self.buf = buf            # optional destination for INSPECT / READ_OBJECT

    def __repr__(self) -> str:
        return f"<Sqe {self.opcode.name} ud={self.user_data}>"


class Cqe:
    """One completion."""

    __slots__ = ("user_data", "res", "flags", "data")

    def __init__(self, user_data: int, res: int, flags: int = 0, data: bytes | None = None) -> None:
        self.user_data = user_data
        self.res = res
        self.flags = flags
        self.data = data

    def __repr__(self) -> str:
        return f"<Cqe ud={self.user_data} res={self.res} flags={self.flags:#x}>"
