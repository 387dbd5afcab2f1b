"""Optional dependencies: which ``pip install 'usertcp[EXTRA]'`` provides what.

The TCP/IP stack needs only the standard library. ``tun`` (pyroute2) configures TUN
devices and network namespaces, ``cli`` (rich) draws tables and progress bars on a
terminal (plain text without it), ``plot`` (matplotlib) draws traces. A missing one is
reported as :class:`MissingExtra`: one line naming the extra, never a traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

# top-level module -> the extra that installs it (pyproject.toml [project.optional-dependencies])
EXTRAS: dict[str, str] = {"pyroute2": "tun", "rich": "cli", "matplotlib": "plot"}


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message says which extra to install."""


def missing_extra(exc: ImportError, feature: str) -> MissingExtra | None:
    """The one-line error for ``exc`` if it is a missing optional dependency, else None."""
    if isinstance(exc, MissingExtra):
        return exc
    top = (exc.name or "").partition(".")[0]
    extra = EXTRAS.get(top)
    if extra is None:
        return None
    return MissingExtra(f"{feature} needs {top}, which is not installed: pip install 'usertcp[{extra}]'",
                        name=top)


def require(module: str, feature: str) -> ModuleType:
    """Import ``module`` (an optional dependency) or raise :class:`MissingExtra` naming its extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        err = missing_extra(exc, feature)
        if err is None:
            raise
        raise err from None


def available(module: str) -> bool:
    """Whether an optional dependency can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
