"""Opaque TCP payload objects: a store of received or created objects and an
io_uring-style ring that captures stream ranges as objects and sends them.

See :mod:`usertcp.objects.store` (budget, tables, zero copy, compaction) and
:mod:`usertcp.objects.ring` (submission/completion, locking).
"""

from __future__ import annotations

from usertcp.objects.ops import (
    AT_TAIL,
    CQE_F_CONSUMED,
    INSPECT_WAITALL,
    MAX_RANGES,
    SEND_LAST,
    Cqe,
    ObjRange,
    Op,
    Sqe,
)
from usertcp.objects.ring import Ring
from usertcp.objects.store import Store

__all__ = ["AT_TAIL", "CQE_F_CONSUMED", "INSPECT_WAITALL", "MAX_RANGES", "SEND_LAST", "Cqe",
           "ObjRange", "Op", "Ring", "Sqe", "Store"]
