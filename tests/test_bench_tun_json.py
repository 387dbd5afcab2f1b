"""``usertcp bench tun --json`` names its rates by their unit: ``MB_per_s`` (10^6 bytes/s)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from netns_helpers import require_netns

pytestmark = pytest.mark.netns


def _keys(obj: Any) -> Iterator[str]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k
            yield from _keys(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _keys(v)


@pytest.mark.timeout(180)
def test_bench_tun_json_says_megabytes_per_second() -> None:
    require_netns()
    # The smallest run: 1 MB each way, no profile, no multi-queue (it makes its own namespaces).
    proc = subprocess.run([sys.executable, "-m", "usertcp", "bench", "tun", "--json", "-o", "size=1000000",
                           "-o", "profile_size=0", "-o", "queues=1"],
                          capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    runs = ["kernel_veth"] + [f"usertcp_{d}_{m}" for d in ("rx", "tx") for m in ("offload", "plain")]
    for run in runs:
        assert res[run]["sha256_ok"] and res[run]["MB_per_s"] > 0, (run, res[run])
    assert not [k for k in _keys(res) if "mbps" in k.lower()], res
