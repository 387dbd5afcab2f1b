"""Observability: ``ss``/``nstat`` views of a stack, a stats file, JSON-lines traces, plots.

* :mod:`usertcp.obs.ss` - :func:`ss_rows`/:func:`format_ss`: connections like ``ss -ti``.
* :mod:`usertcp.obs.counters` - :func:`nstat`/:func:`format_nstat`: counters with Linux names.
* :mod:`usertcp.obs.stats` - the ``--stats-file`` JSON format a running stack can write.
* :mod:`usertcp.obs.trace` - :class:`JsonLinesTracer` (``stack.tracer``) and :class:`Sampler`.
* :mod:`usertcp.obs.plot` - sequence/time and cwnd/time graphs to PNG (matplotlib).
* :mod:`usertcp.obs.progress` - a progress bar on a terminal, plain lines otherwise.
"""

from __future__ import annotations

from usertcp.obs.counters import format_nstat, nstat
from usertcp.obs.progress import progress
from usertcp.obs.ss import format_ss, ss_rows
from usertcp.obs.stats import StatsFileWriter, read_stats_file, stats_snapshot, write_stats_file
from usertcp.obs.trace import JsonLinesTracer, Sampler, conn_id, read_trace

__all__ = [
    "JsonLinesTracer", "Sampler", "StatsFileWriter", "conn_id", "format_nstat", "format_ss", "nstat",
    "progress", "read_stats_file", "read_trace", "ss_rows", "stats_snapshot", "write_stats_file",
]
