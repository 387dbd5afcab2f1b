"""Which build runs: the pure-Python sources, or the per-packet modules compiled by mypyc.

setup.py compiles a list of modules into extension modules installed beside their
sources. Import prefers an extension module; ``USERTCP_PURE=1`` (read when ``usertcp``
is first imported) installs :class:`_SourceFinder` so the same install runs its pure
sources instead, which is how a benchmark runs both builds from one install.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import EXTENSION_SUFFIXES, SOURCE_SUFFIXES, FileFinder, ModuleSpec, SourceFileLoader
from pathlib import Path
from types import ModuleType

_PACKAGE_DIR = Path(__file__).resolve().parent


class _SourceFinder(MetaPathFinder):
    """Finds usertcp's submodules among the .py sources only, never extension modules."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if not fullname.startswith("usertcp.") or path is None:
            return None
        for entry in path:
            spec = FileFinder(entry, (SourceFileLoader, SOURCE_SUFFIXES)).find_spec(fullname)
            if spec is not None:
                return spec
        return None


def use_pure_sources() -> None:
    """Import every usertcp module from its .py source from now on."""
    if not any(isinstance(f, _SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder())


def compiled_modules() -> list[str]:
    """The usertcp modules installed as extension modules (whether or not they are used)."""
    found = []
    for path in _PACKAGE_DIR.rglob("*"):
        suffix = next((s for s in EXTENSION_SUFFIXES if path.name.endswith(s)), None)
        if suffix is None:
            continue
        parts = path.relative_to(_PACKAGE_DIR.parent).as_posix()[: -len(suffix)].split("/")
        if parts[-1] == "__init__":
            parts.pop()
        found.append(".".join(parts))
    return sorted(found)


def _loads_extension(module: str) -> bool:
    spec = importlib.util.find_spec(module)
    return spec is not None and spec.origin is not None and spec.origin.endswith(tuple(EXTENSION_SUFFIXES))


def current() -> str:
    """``"compiled"`` if the compiled modules are the ones imported, else ``"pure"``."""
    modules = compiled_modules()
    return "compiled" if modules and all(_loads_extension(m) for m in modules) else "pure"


def describe() -> str:
    """One line for ``usertcp --version``: which build runs, and why when it is pure."""
    modules = compiled_modules()
    if not modules:
        return "pure Python (no compiled modules installed)"
    used = [m for m in modules if _loads_extension(m)]
    if len(used) == len(modules):
        return f"compiled (mypyc: {len(modules)} modules are extension modules)"
    if not used:
        return f"pure Python (USERTCP_PURE=1: {len(modules)} compiled modules installed, not used)"
    return f"mixed: {len(used)} of {len(modules)} compiled modules in use"
