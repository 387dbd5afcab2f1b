"""The documentation: every example runs, the API reference is current, the pages say what they must.

Examples: every ```python block of docs/*.md (``python no-test`` blocks are skipped) and
README.md's blocks marked ``python test``. The blocks of one page run in order in one
namespace, so a page can build on its earlier examples.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
_FENCE = re.compile(r"^```(\S*)[ \t]*(.*)$")


def python_blocks(text: str, *, marked_only: bool = False) -> list[tuple[int, str]]:
    """(first line number, code) of the ```python blocks of a Markdown text."""
    blocks: list[tuple[int, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m or not m.group(1):
            i += 1
            continue
        lang, info = m.group(1), m.group(2).split()
        start = i + 1
        i = start
        while i < len(lines) and not lines[i].startswith("```"):
            i += 1
        wanted = lang == "python" and "no-test" not in info and (not marked_only or "test" in info)
        if wanted:
            blocks.append((start + 1, "\n".join(lines[start:i]) + "\n"))
        i += 1
    return blocks


def test_block_extraction() -> None:
    text = "a\n```python\nx = 1\n```\n```\nnot python\n```\n```python no-test\nboom\n```\n" \
           "```python test\ny = 2\n```\n"
    assert python_blocks(text) == [(3, "x = 1\n"), (12, "y = 2\n")]
    assert python_blocks(text, marked_only=True) == [(12, "y = 2\n")]


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.glob("*.md") if p.name != "api.md")


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.name)
def test_doc_examples_run(page: Path) -> None:
    _run_blocks(page, python_blocks(page.read_text(encoding="utf-8")))


def test_readme_marked_examples_run() -> None:
    readme = ROOT / "README.md"
    blocks = python_blocks(readme.read_text(encoding="utf-8"), marked_only=True)
    if not blocks:
        pytest.skip("README.md marks no example with ```python test")
    _run_blocks(readme, blocks)


def _run_blocks(page: Path, blocks: list[tuple[int, str]]) -> None:
    namespace: dict[str, object] = {"__name__": f"doc_{page.stem}"}
    for line, code in blocks:
        # Line numbers in tracebacks point into the Markdown file.
        compiled = compile("\n" * (line - 1) + code, str(page), "exec")
        exec(compiled, namespace)


def test_every_page_has_examples_and_required_topics() -> None:
    pages = {p.name: p.read_text(encoding="utf-8") for p in _pages()}
    for name in ("architecture.md", "tun.md", "asyncio.md", "observability.md"):
        assert python_blocks(pages[name]), f"{name} has no runnable example"
    arch = pages["architecture.md"]
    for step in ("wire.parse_packet", "Stack.segment_arrives", "_fast_receive", "RecvBuffer",
                 "SendBuffer", "datagrams_to_send"):
        assert step in arch, step
    tun = pages["tun.md"]
    for topic in ("ip netns", "usertcp serve", "offload", "TUN_F_CSUM"):
        assert topic in tun, topic
    diff = pages["differences-from-linux-patches.md"]
    assert "(differences-from-linux-patches.md)" in (DOCS / "index.md").read_text(encoding="utf-8")
    for topic in ("TCP_PRELOAD", "preload_synack_rtx_data", "EINVAL", "md5_fast_path", "TCP_SYNACK_NORMAL",
                  "tcp_create_openreq_child", "syn_to_first_client_data_us", "instr", "request/response",
                  "fork"):
        assert topic in diff, topic


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_api_docs", ROOT / "tools" / "gen_api_docs.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_api_docs", mod)
    spec.loader.exec_module(mod)
    return mod


def test_api_reference_is_up_to_date() -> None:
    gen = _generator()
    expected = gen.render()
    current = (DOCS / "api.md").read_text(encoding="utf-8")
    assert current == expected, "docs/api.md is out of date: run python tools/gen_api_docs.py"


def test_api_reference_covers_the_public_api() -> None:
    gen = _generator()
    text = gen.render()
    for heading in ("## usertcp.aio", "## usertcp.obs.ss", "## usertcp.tcp.stack"):
        assert heading in text
    for api in ("open_connection(host: str, port: int, *, stack: Stack", "class UsertcpTransport(Transport)",
                "format_ss(source: Stack | Sequence[dict[str, Any]], *, info: bool = True, "
                "width: int | None = None) -> str"):
        assert api in text, api
    assert " at 0x" not in text                      # deterministic
