"""Packaging as a library user meets it: ranges not pins, optional extras with one-line errors,
imports that pull in only what they use, a wheel with its licence, a core that needs nothing.

The installed-wheel test builds the wheel offline (setuptools from the test extra), installs
it with no dependency at all into a fresh venv, and runs ``usertcp demo`` there.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
OPTIONAL = ("pyroute2", "rich", "matplotlib")


def _python(code: str, *, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def _requirement_name(req: str) -> str:
    m = re.match(r"^[A-Za-z0-9_.\-]+", req)
    assert m, req
    return m.group(0).lower().replace("_", "-")


def test_runtime_dependencies_are_ranges_and_the_pins_live_in_constraints() -> None:
    project = PYPROJECT["project"]
    reqs = list(project["dependencies"]) + [r for rs in project["optional-dependencies"].values() for r in rs]
    assert reqs and not [r for r in reqs if "==" in r], "pyproject.toml pins exact versions"
    extras = project["optional-dependencies"]
    assert {"tun", "cli", "plot", "test"} <= set(extras)
    assert [_requirement_name(r) for r in extras["tun"]] == ["pyroute2"]
    assert [_requirement_name(r) for r in extras["cli"]] == ["rich"]
    assert [_requirement_name(r) for r in extras["plot"]] == ["matplotlib"]
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.lower().replace("_", "-")] = version
    for req in extras["test"] + extras["tun"] + extras["cli"] + extras["plot"]:
        name = _requirement_name(req)
        if name != "usertcp":
            assert pins.get(name), f"{name} has no exact version in constraints.txt"
    makefile = (ROOT / "Makefile").read_text()
    assert "-c $(CONSTRAINTS)" in makefile and "CONSTRAINTS := constraints.txt" in makefile
    assert "PYTHON  ?= python3" in makefile        # PYTHON=python3.12 make test


def test_library_imports_do_not_pull_in_optional_dependencies() -> None:
    code = ("import sys, usertcp.aio, usertcp.socket, usertcp.tcp.stack, usertcp.testing, usertcp.obs\n"
            f"print(sorted(m for m in {OPTIONAL!r} if m in sys.modules))")
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout


@pytest.mark.parametrize(("blocked", "argv", "extra"), [
    ("matplotlib", ["trace", "-o", "{tmp}/t.jsonl", "--plot", "{tmp}/t.png"], "plot"),
    ("matplotlib", ["plot", "{tmp}/none.jsonl", "-o", "{tmp}/t.png"], "plot"),
])
def test_a_missing_extra_is_one_line_naming_it(tmp_path: Path, blocked: str, argv: list[str],
                                                 extra: str) -> None:
    args = [a.format(tmp=tmp_path) for a in argv]
    (tmp_path / "none.jsonl").write_text("")
    code = (f"import sys; sys.modules[{blocked!r}] = None\n"
            f"from usertcp.cli import main; sys.exit(main({args!r}))")
    proc = _python(code)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"usertcp[{extra}]" in lines[0] and blocked in lines[0], proc.stderr
    assert not (tmp_path / "t.png").exists()


def test_terminal_output_works_without_rich() -> None:
    code = ("import sys; sys.modules['rich'] = None\n"
            "from usertcp.cli import main\n"
            "assert main(['demo', '--bytes', '50k']) == 0\n"
            "assert main(['nstat', '--size', '100k', 'InSegs']) == 0\n")
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    assert "OK: checksums match" in proc.stdout and "TcpInSegs" in proc.stdout, proc.stdout


@pytest.mark.timeout(240)
def test_installed_wheel_runs_the_demo_with_no_dependencies(tmp_path: Path) -> None:
    """``pip install .`` into a fresh venv (no pyroute2, rich or matplotlib), then ``usertcp demo``;
    the wheel carries the MIT licence; a missing extra is named in one line."""
    wheels = tmp_path / "wheels"
    # The pure wheel: compiling with mypyc takes minutes (make's ``compiled`` target builds it).
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "--no-index", "-w", str(wheels), str(ROOT)], capture_output=True, text=True,
                           timeout=120, env={**os.environ, "USERTCP_PURE": "1"})
    assert build.returncode == 0, build.stderr
    (wheel,) = wheels.glob("usertcp-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        licence = next(n for n in names if n.endswith("licenses/LICENSE"))
        assert z.read(licence).decode().startswith("MIT License")
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: MIT" in meta and "Classifier: Typing :: Typed" in meta
    assert not re.search(r"^Requires-Dist: [^;]*$", meta, re.M), "a dependency outside the extras"
    assert not re.search(r"^Project-URL: .*(pypi|registry|npmjs)", meta, re.M | re.I)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    py = venv / "bin" / "python"
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps",
                              "--no-index", str(wheel)], capture_output=True, text=True, timeout=120)
    assert install.returncode == 0, install.stderr
    check = subprocess.run([str(py), "-c", "import importlib.util as u; print([m for m in "
                            f"{OPTIONAL!r} if u.find_spec(m)])"], capture_output=True, text=True, timeout=60)
    assert check.stdout.strip() == "[]", check.stdout      # really nothing but the stdlib
    demo = subprocess.run([str(venv / "bin" / "usertcp"), "demo", "--bytes", "200k"], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert demo.returncode == 0 and "OK: checksums match" in demo.stdout, (demo.stdout, demo.stderr)
    plot = subprocess.run([str(venv / "bin" / "usertcp"), "trace", "-o", "t.jsonl", "--plot", "t.png"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert plot.returncode == 2 and plot.stderr.count("\n") == 1 and "usertcp[plot]" in plot.stderr, \
        plot.stderr
    # Checked before any TUN device is made, so this creates nothing.
    serve = subprocess.run([str(venv / "bin" / "usertcp"), "serve", "--tun", "utcp-none", "--address",
                            "10.77.0.2", "--peer-address", "10.77.0.1/24", "--app", "echo"],
                           capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert serve.returncode == 2 and serve.stderr.count("\n") == 1 and "usertcp[tun]" in serve.stderr, \
        serve.stderr
