"""``mypyc_attr`` and ``i64`` for the compiled build, with no runtime dependency.

mypyc reads ``@mypyc_attr(...)`` on a class at compile time (``native_class=False`` for a
subclass of a builtin exception it cannot compile natively, ``allow_interpreted_subclasses``
for a compiled base an interpreted class extends). mypy_extensions comes with mypy, which
the compiled build needs anyway; an install without it (the pure-Python wheel, no
dependencies) gets this do-nothing decorator, as the attributes only inform mypyc.

``i64`` annotates a local or argument as a native 64-bit C integer under mypyc (plain
``int`` arithmetic on values beyond 2**62 goes through boxed Python longs there, slower
than the interpreter); without mypyc it is ``int``. Only for values that always fit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")

try:
    from mypy_extensions import i64, mypyc_attr
except ImportError:
    i64 = int  # type: ignore[misc]

    def mypyc_attr(*attrs: str, **kwattrs: object) -> Callable[[_T], _T]:
        """The decorator without mypyc: leaves the class as it is."""
        return lambda cls: cls


__all__ = ["i64", "mypyc_attr"]
