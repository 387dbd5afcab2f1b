"""The drill environment's shell reading: defaults.sh from the script's directory, comments,
arithmetic, ``||`` alternatives and nstat's options (usertcp.drill.profile)."""

from __future__ import annotations

from pathlib import Path

import pytest

from usertcp.drill.profile import CommandError, Environment, Unsupported, linux_config, shell_lines
from usertcp.tcp.config import StackConfig
from usertcp.tcp.stack import Stack


def _env(script_dir: Path | None = None) -> Environment:
    return Environment(linux_config(), lambda: None, script_dir)


def test_shell_lines_comments_arithmetic_and_sequences() -> None:
    text = 'sysctl -q net.ipv4.tcp_rmem="4096 $((2*1024)) $((15*1024*1024))"  # sizes\n' \
           "# a whole-line comment\n" \
           "sysctl -q a=1; sysctl -q b=2 && true\n"
    assert shell_lines(text) == [
        'sysctl -q net.ipv4.tcp_rmem="4096 2048 15728640"',
        "sysctl -q a=1",
        "sysctl -q b=2",
        "true",
    ]
    # '#' inside quotes or inside a word is not a comment
    assert shell_lines("echo 'a # b' x#y") == ["echo 'a # b' x#y"]


def test_trailing_comment_on_a_sysctl() -> None:
    env = _env()
    env.run("sysctl -q net.ipv4.tcp_syn_retries=2    # fewer retries")
    assert env.config.syn_retries == 2


def test_defaults_sh_is_read_from_the_script_directory(tmp_path: Path) -> None:
    common = tmp_path / "common"
    common.mkdir()
    (common / "defaults.sh").write_text(
        "#!/bin/bash\n# our own profile\nsysctl -q net.ipv4.tcp_syn_retries=3\n"
        'sysctl -q net.ipv4.tcp_rmem="4096 $((64*1024)) 1048576"\n'
        "ip tcp_metrics flush all > /dev/null 2>&1\n"
    )
    # a git symlink stored as its target's path, one directory down
    sub = tmp_path / "tcp" / "common"
    sub.mkdir(parents=True)
    (sub / "defaults.sh").write_text("../../common/defaults.sh")
    scripts = tmp_path / "tcp" / "inq"
    scripts.mkdir()
    env = _env(scripts)
    env.run("../common/defaults.sh")
    assert env.config.syn_retries == 3
    assert env.config.rmem == (4096, 65536, 1048576)


def test_defaults_sh_missing_falls_back_to_the_builtin_profile(tmp_path: Path) -> None:
    env = Environment(StackConfig(), lambda: None, tmp_path)
    env.run("../common/defaults.sh")
    assert env.config.syn_retries == 5 and env.config.rmem == (4096, 540000, 15 * 1024 * 1024)


def test_or_runs_the_alternative_when_the_first_command_fails() -> None:
    env = _env()
    env.run("sysctl -q net.ipv4.no_such_knob=1 &> /dev/null || sysctl -q net.ipv4.tcp_syn_retries=1")
    assert env.config.syn_retries == 1
    with pytest.raises(Unsupported):
        env.run("sysctl -q net.ipv4.no_such_knob=1 || frobnicate")


def test_nstat_history_options() -> None:
    stack = Stack(["192.0.2.1"], linux_config())
    env = Environment(stack.config, lambda: stack)
    table = stack.counters.table
    table["TcpExtTCPHPHits"] += 3
    env.run("nstat -n")                          # history updated, nothing printed
    table["TcpExtTCPHPHits"] += 1
    env.run("nstat -s | grep TcpExtTCPHPHits")   # delta 1 shown, history kept
    env.run("nstat | grep TcpExtTCPHPHits")      # still 1 since the last update
    with pytest.raises(CommandError):
        env.run("nstat | grep TcpExtTCPHPHits")  # no change since: grep finds nothing
    env.run("nstat -az | grep TcpExtTCPHPHits")  # absolute, zeros included
    with pytest.raises(Unsupported):
        env.run("nstat -x")


def test_bad_arithmetic_is_unsupported() -> None:
    with pytest.raises(Unsupported):
        _env().run("sysctl -q net.ipv4.tcp_syn_retries=$((os.system(1)))")
