"""``usertcp bench apps``: argument bounds, the fallback load generators and the profile summary.

The benchmark itself (namespaces, wrk, timings) runs as ``usertcp bench apps --json``; here only
its parts that can be checked without timing anything.
"""

from __future__ import annotations

import asyncio
import cProfile
import os

import pytest

from usertcp.bench import apps


@pytest.mark.parametrize("bad", [{"duration": 0}, {"duration": 31}, {"connections": 0},
                                 {"setup_rounds": 9}, {"rounds": 0}, {"generator": "ab"}])
def test_run_rejects_unbounded_or_bad_arguments(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        apps.run(**bad)  # type: ignore[arg-type]


def test_python_load_generators_count_what_they_did() -> None:
    """The fallback HTTP generator and the setup client against a kernel asyncio server on loopback."""

    async def http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
        writer.close()

    async def banner(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(apps.smtp_greeting("x"))
        writer.close()

    async def main() -> tuple[dict[str, object], dict[str, object], dict[str, object]]:
        s1 = await asyncio.start_server(http, "127.0.0.1", 0)
        s2 = await asyncio.start_server(banner, "127.0.0.1", 0)
        p1, p2 = s1.sockets[0].getsockname()[1], s2.sockets[0].getsockname()[1]
        ka = await apps._http_client("127.0.0.1", p1, 0.2, 2, True)
        close = await apps._http_client("127.0.0.1", p1, 0.2, 2, False)
        setup = await apps._setup_client("127.0.0.1", p2, 0.2, 2)
        s1.close()
        s2.close()
        return ka, close, setup

    ka, close, setup = asyncio.run(main())
    for r in (ka, close):
        assert r["errors"] == 0 and isinstance(r["requests"], int) and r["requests"] > 0
    assert setup["errors"] == 0 and isinstance(setup["connections"], int) and setup["connections"] > 0


def test_profile_summary_groups_by_area() -> None:
    prof = cProfile.Profile()
    prof.enable()
    sorted(range(10_000), key=lambda i: -i)
    apps.smtp_greeting("x")
    prof.disable()
    summary = apps._profile_summary(prof, 5)
    assert len(summary["top"]) <= 5
    assert abs(sum(summary["by_area"].values()) - 1.0) < 0.01


def test_profile_charges_builtins_to_their_callers_and_syscalls_apart() -> None:
    """A built-in called from the TCP core is the core's time; a TUN write is a system call."""
    code = compile("def core_work():\n    return sorted(range(200_000), key=abs)\n",
                   "/site/usertcp/tcp/fake.py", "exec")
    space: dict[str, object] = {}
    exec(code, space)
    core_work = space["core_work"]
    r, w = os.pipe()
    prof = cProfile.Profile()
    prof.enable()
    core_work()  # type: ignore[operator]
    os.write(w, b"x")
    prof.disable()
    os.close(r)
    os.close(w)
    summary = apps._profile_summary(prof, 5)
    by_area = summary["by_area"]
    assert by_area["usertcp.tcp (TCP core)"] > 0.5          # sorted() and abs() called from the core
    assert by_area.get("builtins and other", 0) < 0.2
    assert any(area.startswith("system calls") for area in by_area)
    assert summary["usertcp_share"] == by_area["usertcp.tcp (TCP core)"]
