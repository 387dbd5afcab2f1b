"""packetdrill's command line and script options, resolved into the settings of one run.

packetdrill reads the ``--name[=value]`` options at the top of a script, then its own command
line, which wins (run.c parse_and_finalize_config: "command line options overwrite options in
script"), then fills in the addresses of the IP version (config.c finalize_config).  This
module does the same for our runner: :func:`parse_argv` reads packetdrill's argument syntax
(``--name=value``, ``--name value``, ``-D NAME=VALUE``, ``-v``), :func:`resolve` merges script
and command-line options into :class:`Settings`.  Every option packetdrill accepts is either
used, or ignored with a note in the result when it only concerns packetdrill's own plumbing
(``--wire_*`` remote mode, ``--so_filename`` stack plug-ins, ``--speed`` of the TUN device,
``--send_omit_free``, the ``--code_*`` Python invocation: the runner is the stack's harness
and runs ``%{ }%`` blocks in process).

Address families: a run's family comes from ``--ip_version`` (or the caller's choice); when
the script itself pins addresses of the other family and the family was not given as a
packetdrill option, the run follows the script (``ran over ipv4``).  Addresses that disagree
with an explicit ``--ip_version`` or with each other are a script error, as packetdrill's
"bad IPv6 address" is.

:data:`KSFT_ARGS` are the per-family options of the kernel's selftest runner
(tools/testing/selftests/net/packetdrill/ksft_runner.sh) and :func:`ksft_families` its rule
for which families a script runs in (a name containing ``ipv4``/``ipv6`` runs in that one).
:data:`RUN_ALL_ARGS` and :func:`run_all_families` are the same for packetdrill's own corpus
runner (gtests/net/packetdrill/run_all.py): its addresses and ``-D`` symbols, and its rule (a
name ending in ``v6.pkt`` runs over IPv6 only, one ending in ``v4.pkt`` over IPv4 only).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from usertcp.drill import timing
from usertcp.drill.defaults import ADDRESS_DEFAULTS, DEFAULT_PORT, KNOWN_OPTIONS
from usertcp.drill.outcome import ScriptFail

__all__ = ["KSFT_ARGS", "MAPPED", "RUN_ALL_ARGS", "Invocation", "Settings", "ksft_families", "parse_argv",
           "resolve", "run_all_families"]

# Options that only steer packetdrill's own machinery; the note says why they change nothing here.
IGNORED_OPTIONS: dict[str, str] = {
    "wire_client": "remote (wire) mode: the runner drives the stack in process",
    "wire_server": "remote (wire) mode: the runner drives the stack in process",
    "wire_server_ip": "remote (wire) mode: the runner drives the stack in process",
    "wire_server_at": "remote (wire) mode: the runner drives the stack in process",
    "wire_server_port": "remote (wire) mode: the runner drives the stack in process",
    "wire_client_dev": "remote (wire) mode: the runner drives the stack in process",
    "wire_server_dev": "remote (wire) mode: the runner drives the stack in process",
    "so_filename": "a stack plug-in: the runner is usertcp's own harness",
    "so_flags": "a stack plug-in: the runner is usertcp's own harness",
    "speed": "the TUN device's link speed: no qdisc here paces by it",
    "send_omit_free": "packet buffer management of packetdrill's TUN writer",
    "code_command": "%{ }% blocks run in process, not through a Python command",
    "code_format": "%{ }% blocks run in process, not through a Python command",
    "code_sockopt": "tcp_info comes from the connection itself",
    "init_scripts": "no init scripts: the stack is configured by the script's own commands",
    "is_anyip": "no local routing table: the stack owns its addresses",
    "debug": "packetdrill's debug log",
    "non_fatal": "every mismatch stops the run",
}

# ksft_runner.sh: per-family arguments of the kernel's packetdrill selftests.
KSFT_ARGS: dict[str, list[str]] = {
    "ipv4": ["--ip_version=ipv4", "--local_ip=192.168.0.1", "--gateway_ip=192.168.0.1",
             "--netmask_ip=255.255.0.0", "--remote_ip=192.0.2.1",
             "-D", "CMSG_LEVEL_IP=SOL_IP", "-D", "CMSG_TYPE_RECVERR=IP_RECVERR"],
    "ipv6": ["--ip_version=ipv6", "--mtu=1520", "--local_ip=fd3d:0a0b:17d6::1",
             "--gateway_ip=fd3d:0a0b:17d6:8888::1", "--remote_ip=fd3d:fa7b:d17d::1",
             "-D", "CMSG_LEVEL_IP=SOL_IPV6", "-D", "CMSG_TYPE_RECVERR=IPV6_RECVERR"],
}  # fmt: skip


def ksft_families(name: str) -> list[str]:
    """The families ksft_runner.sh runs a script in: only the one its file name names."""
    if "ipv4" in name:
        return ["ipv4"]
    if "ipv6" in name:
        return ["ipv6"]
    return ["ipv4", "ipv6"]


MAPPED = "ipv4-mapped-ipv6"

# run_all.py (packetdrill's corpus runner): per-family arguments.
RUN_ALL_ARGS: dict[str, list[str]] = {
    "ipv4": ["--send_omit_free", "--ip_version=ipv4", "--local_ip=192.168.0.2",
             "--gateway_ip=192.168.0.1", "--netmask_ip=255.255.0.0", "--remote_ip=192.0.2.1",
             "-D", "TFO_COOKIE=de4f234f0f433a55",
             "-D", "CMSG_LEVEL_IP=SOL_IP", "-D", "CMSG_TYPE_RECVERR=IP_RECVERR"],
    "ipv6": ["--send_omit_free", "--ip_version=ipv6", "--mtu=1520", "--local_ip=fd3d:fa7b:d17d::0",
             "--gateway_ip=fd3d:fa7b:d17d:8888::0", "--remote_ip=2001:DB8::1",
             "-D", "TFO_COOKIE=6aa6ae70c288023b",
             "-D", "CMSG_LEVEL_IP=SOL_IPV6", "-D", "CMSG_TYPE_RECVERR=IPV6_RECVERR"],
    MAPPED: ["--send_omit_free", "--ip_version=ipv4-mapped-ipv6", "--local_ip=192.168.0.2",
             "--gateway_ip=192.168.0.1", "--netmask_ip=255.255.0.0", "--remote_ip=192.0.2.1",
             "-D", "TFO_COOKIE=de4f234f0f433a55",
             "-D", "CMSG_LEVEL_IP=SOL_IPV6", "-D", "CMSG_TYPE_RECVERR=IPV6_RECVERR"],
}  # fmt: skip


def run_all_families(name: str) -> list[str]:
    """The families run_all.py runs a script in (StartTests): IPv4 and IPv4-mapped IPv6 unless
    the name ends in ``v6.pkt``, IPv6 unless it ends in ``v4.pkt``."""
    v4 = [] if name.endswith("v6.pkt") else ["ipv4", MAPPED]
    return v4 + ([] if name.endswith("v4.pkt") else ["ipv6"])


@dataclass
class Invocation:
    """A packetdrill command line: options (name -> value, "" for flags), -D defines, scripts."""

    options: dict[str, str] = field(default_factory=dict)
    defines: dict[str, str] = field(default_factory=dict)
    paths: list[str] = field(default_factory=list)


def _define(inv: Invocation, text: str) -> None:
    name, sep, val = text.partition("=")
    if not name or not sep:
        raise ValueError(f"-D expects NAME=VALUE, got {text!r}")
    inv.defines[name] = val


def parse_argv(argv: list[str]) -> Invocation:
    """packetdrill's getopt_long syntax; ValueError for an unknown or malformed option."""
    inv = Invocation()
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg in ("-D", "--define"):
            if i >= len(argv):
                raise ValueError(f"{arg} needs NAME=VALUE")
            _define(inv, argv[i])
            i += 1
        elif arg.startswith("-D") and not arg.startswith("--"):
            _define(inv, arg[2:])
        elif arg in ("-v", "--verbose"):
            inv.options["verbose"] = ""
        elif arg.startswith("--"):
            name, eq, val = arg[2:].partition("=")
            takes = KNOWN_OPTIONS.get(name)
            if takes is None:
                raise ValueError(f"unknown option --{name}")
            if takes and not eq:
                if i >= len(argv):
                    raise ValueError(f"option --{name} requires a value")
                val = argv[i]
                i += 1
            elif not takes and eq:
                raise ValueError(f"option --{name} takes no value")
            if name == "define":
                _define(inv, val)
            else:
                inv.options[name] = val
        else:
            inv.paths.append(arg)
    return inv


@dataclass
class Settings:
    """Everything a run takes from options (script first, command line over it)."""

    ip_version: str
    local_ip: str
    remote_ip: str
    bind_port: int = DEFAULT_PORT
    connect_port: int = DEFAULT_PORT
    tol_us: int = timing.DEFAULT_TOLERANCE_USECS
    tol_pct: float = timing.DEFAULT_TOLERANCE_PERCENT
    ts_tick: int = 0
    ts_ecr_scaled: bool = False
    strict_segments: bool = False
    md5_key: bytes | None = None
    mtu: int | None = None
    mss: int = 0          # --mss: inbound packets above it arrive as GRO packets of this gso_size
    dry_run: bool = False
    mapped: bool = False  # --ip_version=ipv4-mapped-ipv6: AF_INET6 sockets, IPv4 on the wire
    notes: list[str] = field(default_factory=list)


def _parse_key(text: str) -> bytes:
    """``--md5_key``: ``0x`` + hex digits, else the literal text (quotes stripped)."""
    text = text.strip().strip('"')
    if text.lower().startswith("0x"):
        return bytes.fromhex(text[2:])
    return text.encode()


def _int(opts: dict[str, str], name: str, default: int, low: int = 0, high: int = 1 << 31) -> int:
    if name not in opts:
        return default
    try:
        val = int(opts[name], 0)
    except ValueError:
        raise ScriptFail(None, f"script error: --{name}={opts[name]} is not an integer") from None
    if not low <= val <= high:
        raise ScriptFail(None, f"script error: --{name}={val} out of range ({low}..{high})")
    return val


def _family(opts: dict[str, str], name: str) -> int | None:
    if name not in opts:
        return None
    try:
        return ipaddress.ip_address(opts[name].strip()).version
    except ValueError:
        raise ScriptFail(None, f"script error: --{name}={opts[name]} is not an IP address") from None


def _choose_family(opts: dict[str, str], wanted: str, explicit: bool) -> tuple[str, str | None]:
    """(ip version, note): the caller's family, or the one the script's addresses pin.
    ipv4-mapped-ipv6 takes IPv4 addresses only."""
    label = wanted
    if wanted == MAPPED:
        wanted, explicit = "ipv4", True
    if wanted not in ADDRESS_DEFAULTS:
        raise ScriptFail(None, f"script error: bad --ip_version={wanted}")
    pinned = {_family(opts, "local_ip"), _family(opts, "remote_ip")} - {None}
    if len(pinned) > 1:
        raise ScriptFail(None, "script error: --local_ip and --remote_ip are of different address families")
    if not pinned or pinned == {4 if wanted == "ipv4" else 6}:
        return wanted, None
    if explicit:
        raise ScriptFail(None, f"script error: the addresses are IPv{pinned.pop()}, the run is {label} "
                         "(packetdrill: bad address)")  # fmt: skip
    family = "ipv4" if pinned == {4} else "ipv6"
    return family, f"ran over {family}: the script pins its addresses"


def resolve(script_opts: dict[str, str], cmdline: dict[str, str], ip_version: str,
            tolerance_usecs: int | None = None) -> Settings:
    """Merge script and command-line options (the command line wins) into run settings."""
    opts = {**script_opts, **cmdline}
    explicit = "ip_version" in cmdline
    wanted = opts.get("ip_version", ip_version)
    # ipv4-mapped-ipv6 (packetdrill's third family): IPv4 addresses and packets, AF_INET6
    # sockets; Linux runs such a socket with the IPv4 af_ops (tcp_v6_connect: ipv6_mapped).
    mapped = wanted == MAPPED
    family, note = _choose_family(opts, wanted, explicit)
    addr = ADDRESS_DEFAULTS[family]
    local, remote = opts.get("local_ip", addr.local_ip), opts.get("remote_ip", addr.remote_ip)
    st = Settings(family, local.strip(), remote.strip(), mapped=mapped)
    for name in ("gateway_ip", "netmask_ip"):
        _family(opts, name)          # checked like packetdrill does; no routing is modelled
    st.bind_port = _int(opts, "bind_port", DEFAULT_PORT, 0, 65535)
    st.connect_port = _int(opts, "connect_port", DEFAULT_PORT, 0, 65535)
    st.tol_us = tolerance_usecs if tolerance_usecs is not None else _int(opts, "tolerance_usecs", st.tol_us)
    if "tolerance_percent" in opts:
        try:
            st.tol_pct = float(opts["tolerance_percent"])
        except ValueError:
            bad = opts["tolerance_percent"]
            raise ScriptFail(None, f"script error: bad --tolerance_percent={bad}") from None
    st.ts_tick = _int(opts, "tcp_ts_tick_usecs", 0)
    st.ts_ecr_scaled = "tcp_ts_ecr_scaled" in opts
    st.strict_segments = "strict_segments" in opts
    st.md5_key = _parse_key(opts["md5_key"]) if "md5_key" in opts else None
    st.mtu = _int(opts, "mtu", 0, 68, 65535) if "mtu" in opts else None
    st.mss = _int(opts, "mss", 0, 1, 65535)
    st.dry_run = "dry_run" in opts
    if note is not None:
        st.notes.append(note)
    st.notes += [f"--{name} ignored: {why}" for name, why in IGNORED_OPTIONS.items() if name in opts]
    return st
