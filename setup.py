"""Build hook: compile the per-packet modules with mypyc, as mypy and black ship themselves.

Everything else (metadata, packages) lives in pyproject.toml. The same sources are the
pure-Python build; this file only adds extension modules, and only when all of these hold:

* the command builds something (a wheel, ``build``/``build_ext``), not metadata;
* it is not an editable install, unless ``USERTCP_COMPILE=1``: a development tree stays
  pure by default, so a stale compiled module never hides an edit;
* ``USERTCP_PURE`` is not ``1``;
* a C compiler and the Python headers are present.

If the C compilation itself fails, the build warns and ships pure Python. At run time
``USERTCP_PURE=1`` makes an installed compiled build import its pure sources instead
(see ``usertcp/__init__.py``); ``usertcp --version`` says which build runs.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"

# The one list of compiled modules: globs over the per-packet packages, so modules
# added to these packages are compiled without editing this file.
COMPILED_GLOBS = [
    "usertcp/wire/*.py",
    "usertcp/tcp/*.py",
    "usertcp/net/memnet.py",
    "usertcp/net/driver.py",
    "usertcp/objects/store.py",
    "usertcp/objects/ring.py",
]
# Modules matched above that stay interpreted, each with the reason.
EXCLUDED: dict[str, str] = {
    "usertcp/tcp/invariants.py": "a checker for tests, off the packet path; InvariantViolation subclasses "
                                 "AssertionError, which mypyc cannot compile as a native class",
}

_BUILD_COMMANDS = {"bdist_wheel", "build", "build_ext", "install", "develop", "editable_wheel"}


def compiled_sources() -> list[str]:
    """The .py files to compile, relative to this directory (src/usertcp/...)."""
    found = sorted({p for g in COMPILED_GLOBS for p in SRC.glob(g)})
    unknown = set(EXCLUDED) - {p.relative_to(SRC).as_posix() for p in found}
    if unknown:
        raise SystemExit(f"setup.py: EXCLUDED names modules that no glob matches: {sorted(unknown)}")
    return [p.relative_to(HERE).as_posix() for p in found if p.relative_to(SRC).as_posix() not in EXCLUDED]


def _have_compiler() -> bool:
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    include = sysconfig.get_paths()["include"]
    return shutil.which(cc) is not None and Path(include, "Python.h").exists()


def _why_pure() -> str | None:
    """None to compile, else the reason this build stays pure Python."""
    if os.environ.get("USERTCP_PURE") == "1":
        return "USERTCP_PURE=1"
    commands = set(sys.argv[1:])
    if not commands & _BUILD_COMMANDS:
        return ""                       # metadata only (egg_info, dist_info, sdist): say nothing
    if commands & {"editable_wheel", "develop"} and os.environ.get("USERTCP_COMPILE") != "1":
        return "editable install (set USERTCP_COMPILE=1 to compile it)"
    if not _have_compiler():
        return "no C compiler or Python headers"
    return None


class OptionalBuildExt(build_ext):
    """Builds the mypyc extensions; on a compiler error, warns and leaves the build pure."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # distutils CompileError/LinkError and friends
            self._remove_outputs()
            print(f"usertcp: compiling with mypyc failed ({e}); installing pure Python", file=sys.stderr)

    def _remove_outputs(self) -> None:
        for ext in self.extensions:
            for path in (Path(self.get_ext_fullpath(ext.name)),
                         Path(self.build_lib) / self.get_ext_filename(ext.name)):
                path.unlink(missing_ok=True)


def _extensions() -> dict[str, Any]:
    reason = _why_pure()
    if reason is not None:
        if reason:
            print(f"usertcp: building pure Python ({reason})", file=sys.stderr)
        return {}
    from mypyc.build import mypycify

    sources = compiled_sources()
    print(f"usertcp: compiling {len(sources)} modules with mypyc", file=sys.stderr)
    # mypy reads its options from pyproject.toml ([tool.mypy]); opt_level 3 as mypy's own build.
    # multi_file: one C file per module, so an edit recompiles that module only (and -j works).
    ext_modules = mypycify(sources, opt_level="3", multi_file=True)
    return {"ext_modules": ext_modules, "cmdclass": {"build_ext": OptionalBuildExt}}


setup(**_extensions())
