"""``progress(iterable, total, label)``: a rich progress bar on a terminal, plain lines otherwise.

Plain lines go to stderr (stdout stays clean for ``--json``), about ten per run:
``label: 30/100 (30%)``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TextIO, TypeVar

from usertcp.extras import available

T = TypeVar("T")


def progress(iterable: Iterable[T], total: int | None = None, label: str = "working", *,
             tty: bool | None = None, stream: TextIO | None = None) -> Iterator[T]:
    """Yield the items of ``iterable`` while showing progress.

    ``tty`` forces the mode (default: whether stdout is a terminal); ``stream`` is where
    plain lines go (default stderr).
    """
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    if tty is None:
        tty = sys.stdout.isatty()
    if tty and available("rich"):     # plain lines without the [cli] extra
        from rich.progress import Progress

        with Progress(transient=False) as bar:
            task = bar.add_task(label, total=total)
            for item in iterable:
                yield item
                bar.advance(task)
        return
    out = stream if stream is not None else sys.stderr
    step = max(1, (total or 0) // 10)
    n = 0
    for item in iterable:
        yield item
        n += 1
        if total:
            if n % step == 0 or n == total:
                print(f"{label}: {n}/{total} ({100 * n // total}%)", file=out, flush=True)
        elif n % 100 == 0:
            print(f"{label}: {n}", file=out, flush=True)
    if not total or n != total:
        print(f"{label}: done, {n} items", file=out, flush=True)
