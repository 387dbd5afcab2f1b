"""The upstream packetdrill corpus (read from ../shared/packetdrill at test time, never copied).

Every script runs over IPv4 and IPv6 in virtual time.  ``KNOWN`` pins each script that does
not pass today, with its line and a fragment of the reason: a script that passes must keep
passing (a regression fails), a pinned one must fail or skip for the pinned reason, and a
pinned script that starts passing is reported (warning) so the table gets updated.  The
acceptance bar of the runner issue (>= 90 % pass, <= 10 % skipped) is its own test.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from usertcp.drill.runner import RunOptions, ScriptResult, run_file

ROOT = Path(__file__).resolve().parents[1]
_CANDIDATES = (ROOT.parent / "shared" / "packetdrill", Path("/work/shared/packetdrill"))
CORPUS = next((p for p in _CANDIDATES if p.is_dir()), None)
VERSIONS = ("ipv4", "ipv6")
# fastopen/server/icmp-*.pkt are templates over the symbol CODE ("Send an ICMP unreachable
# (code=CODE)"): packetdrill itself rejects them ("bad ICMP code CODE") unless run with
# -D CODE=<name>.  We run them with each family's host-unreachable code (RFC 792 code 1,
# RFC 4443 code 3 "address unreachable"); tests/test_icmp.py runs them with other codes.
TEMPLATE_DEFINES = {"ipv4": {"CODE": "host_unreachable"}, "ipv6": {"CODE": "address_unreachable"}}

# relative path -> (status, line, reason fragment), for both IPv4 and IPv6 unless the key ends
# in "@ipv4" / "@ipv6" (the script behaves differently over the two families).
# Why each remaining entry fails (details in issue 3's note):
# - fr-4pkt-fack-last-mss: expects a HZ=250 kernel's RACK timer (25 ms -> 7 jiffies + 2 = 36 ms);
#   the sack-shift-* scripts expect HZ=1000 (27 ms), which we give.
# - icmp-baseline@ipv6: with CODE=address_unreachable Linux keeps the request socket (not fatal
#   in icmpv6_err_convert), so no reset follows, as here; see test_icmp.py for the other codes.
# - https_client: the kernel this runs on (6.18, tools/kernel_psh_probe.py) does not set that PSH
#   either; the two other PSH entries: Linux 6.18 marks PSH on every multi-segment TSO packet,
#   which our segmentation does not model yet.
KNOWN: dict[str, tuple[str, int | None, str]] = {
    'gtests/net/tcp/fast_retransmit/fr-4pkt-fack-last-mss.pkt':
        ('failed', 27, 'timing error: expected outbound packet at 0.240000 sec but i'),
    'gtests/net/tcp/fastopen/server/client-ack-dropped-then-recovery-ms-timestamps.pkt':
        ('failed', 33, 'outbound packet differs: flags (expected P., actual .)'),
    'gtests/net/tcp/fastopen/server/icmp-baseline.pkt@ipv6':
        ('failed', 20, 'timed out waiting for outbound packet: expected > R 1:1(0) ('),
    'gtests/net/tcp/nagle/https_client.pkt':
        ('failed', 32, 'outbound packet differs: flags (expected P., actual .)'),
    'gtests/net/tcp/sack/sack-route-refresh-ip-tos.pkt':
        ('failed', 35, 'outbound packet differs: flags (expected P., actual .)'),
}  # fmt: skip

pytestmark = pytest.mark.skipif(
    CORPUS is None, reason="packetdrill corpus not found at ../shared/packetdrill or /work/shared/packetdrill"
)


@pytest.fixture(scope="module")
def results() -> dict[tuple[str, str], ScriptResult]:
    assert CORPUS is not None
    out = {}
    for path in sorted(CORPUS.rglob("*.pkt")):
        rel = path.relative_to(CORPUS).as_posix()
        for version in VERSIONS:
            out[(rel, version)] = run_file(path, RunOptions(ip_version=version,
                                                            defines=TEMPLATE_DEFINES[version]))
    return out


def _describe(res: ScriptResult) -> str:
    return f"{res.path} [{res.ip_version}] {res.status} at line {res.line}: {res.reason}\n" + "\n".join(
        res.details
    )


def test_corpus_is_complete(results: dict[tuple[str, str], ScriptResult]) -> None:
    assert len(results) == 2 * len({rel for rel, _ in results}) >= 100
    stale = sorted({k.partition("@")[0] for k in KNOWN} - {rel for rel, _ in results})
    assert not stale, f"KNOWN names scripts that are not in the corpus: {stale}"


def test_corpus_matches_known_table(results: dict[tuple[str, str], ScriptResult]) -> None:
    regressions = []
    fixed = []
    for (rel, version), res in sorted(results.items()):
        known = KNOWN.get(f"{rel}@{version}", KNOWN.get(rel))
        if known is None:
            if res.status != "passed":
                regressions.append(_describe(res))
            continue
        status, line, fragment = known
        if res.status == "passed":
            fixed.append(f"{rel} [{res.ip_version}] now passes: remove it from KNOWN")
        elif res.status == status == "failed" and (res.line or 0) > (line or 0):
            fixed.append(f"{rel} [{res.ip_version}] gets past line {line} (now {res.line}): update KNOWN")
        elif res.status != status or res.line != line or fragment not in res.reason:
            regressions.append(f"pinned as {status} at line {line} ({fragment!r}), now:\n" + _describe(res))
    for note in fixed:
        warnings.warn(note, stacklevel=1)
    assert not regressions, "\n\n".join(regressions)


def test_corpus_acceptance_bar(results: dict[tuple[str, str], ScriptResult]) -> None:
    total = len(results)
    passed = sum(r.status == "passed" for r in results.values())
    skipped = sum(r.status == "skipped" for r in results.values())
    assert skipped <= 0.10 * total, f"{skipped}/{total} skipped (> 10 %)"
    assert passed >= 0.90 * total, f"only {passed}/{total} passed (< 90 %); see KNOWN for the reasons"


if __name__ == "__main__":  # print a fresh KNOWN table: python tests/test_drill_corpus.py
    assert CORPUS is not None, "corpus not found"
    seen: dict[str, tuple[str, int | None, str]] = {}
    for _path in sorted(CORPUS.rglob("*.pkt")):
        _rel = _path.relative_to(CORPUS).as_posix()
        _per: dict[str, tuple[str, int | None, str] | None] = {}
        for _version in VERSIONS:
            _res = run_file(_path, RunOptions(ip_version=_version, defines=TEMPLATE_DEFINES[_version]))
            _per[_version] = None if _res.status == "passed" else (_res.status, _res.line, _res.reason[:60])
        if _per["ipv4"] == _per["ipv6"]:
            if _per["ipv4"] is not None:
                seen[_rel] = _per["ipv4"]
        else:
            for _version, _entry in _per.items():
                if _entry is not None:
                    seen[f"{_rel}@{_version}"] = _entry
    for _rel, _entry in seen.items():
        print(f"    {_rel!r}:\n        {_entry!r},")
