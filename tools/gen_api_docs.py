"""Write docs/api.md, the API reference, from the usertcp package's source files.

Usage: ``python tools/gen_api_docs.py`` (rewrite docs/api.md) or ``--check`` (exit 1 if it
is out of date; tests/test_docs.py runs the same comparison).

The sources are read with :mod:`ast`, never imported: the compiled build (mypyc) keeps no
docstrings or signatures at run time, and the reference must not depend on which build
runs. Every public module of ``src/usertcp`` is documented (``__main__`` excepted). A module's
public names are its ``__all__`` (names it imports are followed to their definition),
else the classes and functions defined in it whose names do not start with ``_``. For a
class: its constructor signature, docstring, and its own public methods and properties
(and those of the private package classes it extends). Signatures, annotations and
default values are shown as written in the source. Output is deterministic: sorted
modules, source order of members.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docs" / "api.md"
PACKAGE = "usertcp"
SOURCE = ROOT / "src" / PACKAGE
_SKIP = {"usertcp.__main__"}
Def = ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
Function = ast.FunctionDef | ast.AsyncFunctionDef


def module_names() -> list[str]:
    names = []
    for path in SOURCE.rglob("*.py"):
        parts = list(path.relative_to(SOURCE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if name not in _SKIP and not parts[-1].startswith("_"):      # private modules: not API
            names.append(name)
    return sorted(names)


_TREES: dict[str, ast.Module] = {}


def _tree(module: str) -> ast.Module | None:
    """The parsed source of ``module`` (a package's ``__init__.py``), or None if not ours."""
    if module not in _TREES:
        base = SOURCE.parent.joinpath(*module.split("."))
        path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if not module.startswith(PACKAGE) or not path.exists():
            return None
        _TREES[module] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return _TREES[module]


def _is_package(module: str) -> bool:
    return SOURCE.parent.joinpath(*module.split(".")).is_dir()


def _resolve(module: str, name: str, depth: int = 0) -> Def | None:
    """The class or function ``name`` refers to in ``module``: defined there, or imported from
    another package module (followed to its definition)."""
    tree = _tree(module)
    if tree is None or depth > 8:
        return None
    for node in tree.body:
        if isinstance(node, Def) and node.name == name:
            return node
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) != name:
                    continue
                source = node.module or ""
                if node.level:
                    parts = module.split(".")
                    keep = len(parts) - node.level + (1 if _is_package(module) else 0)
                    source = ".".join(parts[:keep] + ([source] if source else []))
                return _resolve(source, alias.name, depth + 1)
    return None


_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):`~?([^`]+)`")


def _doc(node: ast.Module | Def) -> str:
    """The node's own docstring, with reST roles and ``literals`` turned into Markdown code."""
    raw = ast.get_docstring(node, clean=True)
    if not raw:
        return ""
    return _ROLE.sub(r"``\1``", inspect.cleandoc(raw)).replace("``", "`")


def _param(arg: ast.arg, default: ast.expr | None, prefix: str = "") -> str:
    text = prefix + arg.arg
    if arg.annotation is not None:
        text += f": {ast.unparse(arg.annotation)}"
    if default is not None:
        text += f" = {ast.unparse(default)}"
    return text


def signature(fn: ast.FunctionDef | ast.AsyncFunctionDef, *, drop_first: bool = False,
              returns: bool = True) -> str:
    """``(a: int, *, b: str = 'x') -> bool`` exactly as written in the source."""
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    parts = [_param(arg, d) for arg, d in zip(positional, defaults, strict=True)]
    if a.posonlyargs:
        parts.insert(len(a.posonlyargs), "/")
    if drop_first and positional:
        parts.pop(0)
    if a.vararg is not None:
        parts.append(_param(a.vararg, None, "*"))
    elif a.kwonlyargs:
        parts.append("*")
    parts += [_param(arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
    if a.kwarg is not None:
        parts.append(_param(a.kwarg, None, "**"))
    out = f"({', '.join(parts)})"
    if returns and fn.returns is not None:
        out += f" -> {ast.unparse(fn.returns)}"
    return out


def _decorators(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    return {ast.unparse(d).split("(")[0] for d in fn.decorator_list}


def _public(module: str, tree: ast.Module) -> list[tuple[str, Def]]:
    explicit: list[str] | None = None
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
                explicit = [e.value for e in getattr(node.value, "elts", [])
                            if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    if explicit is not None:
        found = [(name, _resolve(module, name)) for name in explicit]
        return [(name, node) for name, node in found if node is not None]
    return [(node.name, node) for node in tree.body
            if isinstance(node, Def) and not node.name.startswith("_")]


def _base_name(base: ast.expr) -> str:
    """``Generic[T]`` -> ``Generic``, ``asyncio.Transport`` -> ``Transport``."""
    while isinstance(base, ast.Subscript):
        base = base.value
    return ast.unparse(base).rsplit(".", 1)[-1]


def _class_members(module: str, cls: ast.ClassDef) -> list[tuple[str, Function]]:
    """Public methods and properties of ``cls`` and of the private package classes it extends."""
    owners = [cls]
    for base in cls.bases:
        name = _base_name(base)
        if name.startswith("_"):
            node = _resolve(module, name)
            if isinstance(node, ast.ClassDef):
                owners.append(node)
    out: list[tuple[str, Function]] = []
    seen: set[str] = set()
    for owner in owners:
        for member in owner.body:
            if not isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if member.name.startswith("_") or member.name in seen:
                continue
            seen.add(member.name)
            out.append((member.name, member))
    return out


_FIELD_CLASSES = {"dataclass", "dataclasses.dataclass"}
_FIELD_BASES = {"NamedTuple"}


def _constructor(cls: ast.ClassDef) -> str:
    """The class's call signature: its ``__init__``, or the fields of a dataclass/NamedTuple."""
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            return signature(node, drop_first=True, returns=False)
    decorators = {ast.unparse(d).split("(")[0] for d in cls.decorator_list}
    if decorators & _FIELD_CLASSES or {_base_name(b) for b in cls.bases} & _FIELD_BASES:
        fields = []
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                    and not ast.unparse(node.annotation).startswith(("ClassVar", "typing.ClassVar")):
                arg = ast.arg(node.target.id, node.annotation)
                fields.append(_param(arg, node.value))
        return f"({', '.join(fields)})"
    return "" if cls.bases else "()"


def _render_class(module: str, name: str, cls: ast.ClassDef, lines: list[str]) -> None:
    bases = [_base_name(b) for b in cls.bases if _base_name(b) != "object"]
    head = f"class {name}" + (f"({', '.join(bases)})" if bases else "")
    sig = _constructor(cls)
    lines += [f"### `{head}`", ""]
    if sig:
        lines += ["```python", f"{name}{sig}", "```", ""]
    doc = _doc(cls)
    if doc:
        lines += [doc, ""]
    members = _class_members(module, cls)
    for mname, member in members:
        decorators = _decorators(member)
        mdoc = _doc(member)
        if "property" in decorators or "functools.cached_property" in decorators or \
                "cached_property" in decorators:
            lines.append(f"- **`{mname}`** *(property)*" + (f": {_first_para(mdoc)}" if mdoc else ""))
        else:
            lines.append(f"- **`{mname}{signature(member)}`**" + (f": {_first_para(mdoc)}" if mdoc else ""))
    if members:
        lines.append("")


def _first_para(doc: str) -> str:
    return " ".join(doc.split("\n\n", 1)[0].split())


def render() -> str:
    lines = ["# API reference", "",
             "<!-- Generated by tools/gen_api_docs.py from the sources; do not edit by hand. -->",
             "", "Modules:", ""]
    names = module_names()
    lines += [f"- [`{n}`](#{n.replace('.', '')})" for n in names]
    lines.append("")
    for modname in names:
        lines += [f"## {modname}", ""]
        tree = _tree(modname)
        assert tree is not None
        doc = _doc(tree)
        if doc:
            lines += [doc, ""]
        for name, node in _public(modname, tree):
            if isinstance(node, ast.ClassDef):
                _render_class(modname, name, node, lines)
            else:
                lines += [f"### `{name}{signature(node)}`", ""]
                fdoc = _doc(node)
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
