"""Write docs/api.md, the API reference, from the usertcp package's docstrings.

Usage: ``python tools/gen_api_docs.py`` (rewrite docs/api.md) or ``--check`` (exit 1 if it
is out of date; tests/test_docs.py runs the same comparison).

Every module of the package is imported (``__main__`` excepted). A module's public names
are its ``__all__``, else the classes and functions defined in it whose names do not
start with ``_``. For a class: its signature, docstring, and its own public methods and
properties. Output is deterministic: sorted modules, source order of members, memory
addresses scrubbed from default values.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TypeAlias

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docs" / "api.md"
PACKAGE = "usertcp"
_ADDR = re.compile(r" at 0x[0-9a-fA-F]+")
_SKIP = {"usertcp.__main__"}

Documented: TypeAlias = Callable[..., object]   # a public class or function


def module_names() -> list[str]:
    pkg = importlib.import_module(PACKAGE)
    names = [PACKAGE]
    for info in pkgutil.walk_packages(pkg.__path__, PACKAGE + "."):
        if info.name not in _SKIP:
            names.append(info.name)
    return sorted(names)


_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):`~?([^`]+)`")


def _doc(obj: object) -> str:
    """The object's own docstring, with reST roles and ``literals`` turned into Markdown code."""
    raw = obj.__dict__.get("__doc__") if isinstance(obj, type) else getattr(obj, "__doc__", None)
    if not isinstance(raw, str):
        return ""
    return _ROLE.sub(r"``\1``", inspect.cleandoc(raw)).replace("``", "`")


def _annotation(a: object) -> str:
    if isinstance(a, str):
        return a
    if isinstance(a, type):
        return a.__qualname__ if a.__module__ == "builtins" else f"{a.__module__}.{a.__qualname__}"
    return _ADDR.sub("", repr(a)).replace("typing.", "")


def signature(obj: Documented) -> str:
    """``(a: int, *, b: str = 'x') -> bool`` with annotations exactly as written in the source."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    parts: list[str] = []
    kw_only_marked = False
    prev_kind = None
    for p in sig.parameters.values():
        if p.kind is p.KEYWORD_ONLY and not kw_only_marked:
            parts.append("*")
            kw_only_marked = True
        if prev_kind is p.POSITIONAL_ONLY and p.kind is not p.POSITIONAL_ONLY:
            parts.append("/")
        prefix = "*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else ""
        if p.kind is p.VAR_POSITIONAL:
            kw_only_marked = True
        text = prefix + p.name
        if p.annotation is not p.empty:
            text += f": {_annotation(p.annotation)}"
        if p.default is not p.empty:
            text += f" = {_ADDR.sub('', repr(p.default))}"
        parts.append(text)
        prev_kind = p.kind
    if prev_kind is inspect.Parameter.POSITIONAL_ONLY:
        parts.append("/")
    out = f"({', '.join(parts)})"
    if sig.return_annotation is not sig.empty and not inspect.isclass(obj):
        out += f" -> {_annotation(sig.return_annotation)}"
    return out


def _public(mod: ModuleType) -> list[tuple[str, Documented]]:
    explicit = getattr(mod, "__all__", None)
    members: list[tuple[str, Documented]] = []
    if explicit is not None:
        for name in explicit:
            obj = getattr(mod, name, None)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                members.append((name, obj))
        return members
    for name, obj in vars(mod).items():
        if name.startswith("_") or not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        if getattr(obj, "__module__", None) == mod.__name__:
            members.append((name, obj))
    return members


def _class_members(cls: type) -> list[tuple[str, Documented | property]]:
    """Public methods and properties of ``cls`` and of the private package classes it extends."""
    out: list[tuple[str, Documented | property]] = []
    seen: set[str] = set()
    owners = [cls] + [b for b in cls.__mro__[1:]
                      if b.__name__.startswith("_") and b.__module__.startswith(PACKAGE + ".")]
    for name, obj in ((n, o) for owner in owners for n, o in owner.__dict__.items()):
        if name.startswith("_") or name in seen:
            continue
        seen.add(name)
        if isinstance(obj, (staticmethod, classmethod)):
            out.append((name, obj.__func__))
        elif inspect.isfunction(obj) or isinstance(obj, property):
            out.append((name, obj))
    return out


def _render_class(name: str, cls: type, lines: list[str]) -> None:
    bases = [b.__name__ for b in cls.__bases__ if b is not object]
    head = f"class {name}" + (f"({', '.join(bases)})" if bases else "")
    init = cls.__dict__.get("__init__")
    sig = signature(cls) if init is not None or not bases else ""
    lines += [f"### `{head}`", ""]
    if sig:
        lines += ["```python", f"{name}{sig}", "```", ""]
    doc = _doc(cls)
    if doc:
        lines += [doc, ""]
    for mname, member in _class_members(cls):
        if isinstance(member, property):
            lines.append(f"- **`{mname}`** *(property)*" + (f": {_first_para(_doc(member.fget))}"
                                                            if member.fget is not None and _doc(member.fget)
                                                            else ""))
        else:
            mdoc = _doc(member)
            lines.append(f"- **`{mname}{signature(member)}`**" + (f": {_first_para(mdoc)}" if mdoc else ""))
    if _class_members(cls):
        lines.append("")


def _first_para(doc: str) -> str:
    return " ".join(doc.split("\n\n", 1)[0].split())


def render() -> str:
    lines = ["# API reference", "",
             "<!-- Generated by tools/gen_api_docs.py from the docstrings; do not edit by hand. -->",
             "", "Modules:", ""]
    names = module_names()
    lines += [f"- [`{n}`](#{n.replace('.', '')})" for n in names]
    lines.append("")
    for modname in names:
        lines += [f"## {modname}", ""]
        try:
            mod = importlib.import_module(modname)
        except Exception as e:    # an optional dependency is missing: say so, deterministically
            lines += [f"*Not importable here ({type(e).__name__}).*", ""]
            continue
        doc = _doc(mod)
        if doc:
            lines += [doc, ""]
        for name, obj in _public(mod):
            if inspect.isclass(obj):
                _render_class(name, obj, lines)
            else:
                lines += [f"### `{name}{signature(obj)}`", ""]
                fdoc = _doc(obj)
                if fdoc:
                    lines += [fdoc, ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/api.md is out of date")
    parser.add_argument("-o", "--output", type=Path, default=OUTPUT, help="file to write (%(default)s)")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run python tools/gen_api_docs.py", file=sys.stderr)
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
