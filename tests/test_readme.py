"""README.md says what a newcomer needs: the two commands first, how to use usertcp as a
library, what it does not do, and what the drill example's failures are (its examples run
in tests/test_docs.py)."""

from __future__ import annotations

import re
from pathlib import Path

import test_drill_corpus as corpus

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.M | re.S)
    assert m, f"README has no '## {title}' section"
    return m.group(1)


def test_the_first_lines_are_the_two_commands() -> None:
    assert README.startswith("# usertcp\n\n```\nmake demo\nmake test\n```\n")


def test_library_section() -> None:
    lib = _section("Use it as a library")
    for needed in ("pip install usertcp", "'usertcp[tun]'", "'usertcp[cli]'", "'usertcp[plot]'",
                   "Python 3.11", "PYTHON=python3.12", "usertcp.testing.pair()", "```python test",
                   "no UDP", "no DNS", "L3 endpoint", "CHANGELOG.md", "MIT"):
        assert needed in lib, needed
    assert "from usertcp.testing import pair" in lib


def test_drill_example_is_explained_with_todays_numbers() -> None:
    assert "usertcp drill tests/drill ../shared/packetdrill" in README
    assert "tests/test_drill_corpus.py" in README and "`KNOWN`" in README
    assert "https://github.com/google/packetdrill" in README
    # The figures quoted are the pinned table's: runs minus pinned failures and skips.
    runs = 2 * corpus.CORPUS_SCRIPTS
    pinned = sum(1 if "@" in key else 2 for key in corpus.KNOWN)
    assert f"{corpus.CORPUS_SCRIPTS} TCP scripts" in README
    assert f"{runs - pinned} of the {runs} runs pass today" in README


def test_changelog_and_licence_exist() -> None:
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert changelog.startswith("# Changelog") and "## 0.1.0" in changelog
