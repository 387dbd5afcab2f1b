"""Stack-wide configuration: the knobs Linux exposes as net.ipv4.tcp_* sysctls.

Defaults are Linux's own (6.x), so that a peer or a packetdrill script written for
Linux sees the behaviour it expects. ``from_sysctls`` maps sysctl names onto fields.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields

from usertcp.tcp.hystart import CubicParams
from usertcp.tcp.route import RouteTable

# net.ipv4.tcp_fastopen bits (include/net/tcp.h).
TFO_CLIENT_ENABLE = 0x1
TFO_SERVER_ENABLE = 0x2
TFO_CLIENT_NO_COOKIE = 0x4
TFO_SERVER_COOKIE_NOT_REQD = 0x200
TFO_SERVER_WO_SOCKOPT1 = 0x400

DEFAULT_TFO_KEY = bytes(16)

# net.ipv4.tcp_ecn (Documentation/networking/ip-sysctl.rst): RFC 3168 ECN.
ECN_OFF = 0            # never request, never accept
ECN_ON = 1             # request on active opens, accept on passive ones
ECN_PASSIVE = 2        # accept when the peer requests (Linux's default)
# Linux >= 6.18 (enum tcp_ecn_mode): Accurate ECN, RFC 9768. All three accept AccECN and
# RFC 3168 ECN on passive opens; they differ in what an active open asks for.
ECN_ACCECN = 3         # request AccECN
ECN_ACCECN_IN_ECN_OUT = 4    # request RFC 3168 ECN
ECN_ACCECN_IN_ONLY = 5       # request nothing


@dataclass(slots=True)
class StackConfig:
    timestamps: bool = True               # tcp_timestamps (RFC 7323)
    sack: bool = True                     # tcp_sack (RFC 2018)
    dsack: bool = True                    # tcp_dsack (RFC 2883)
    window_scaling: bool = True           # tcp_window_scaling (RFC 7323 §2)
    rmem: tuple[int, int, int] = (4096, 131072, 6291456)   # tcp_rmem min/default/max
    wmem: tuple[int, int, int] = (4096, 16384, 4194304)    # tcp_wmem min/default/max
    rmem_max: int = 212992                # net.core.rmem_max: SO_RCVBUF's ceiling (SK_RMEM_MAX)
    wmem_max: int = 212992                # net.core.wmem_max: SO_SNDBUF's ceiling (SK_WMEM_MAX)
    shrink_window: bool = False           # tcp_shrink_window (6.5+): the window may shrink
    moderate_rcvbuf: bool = True          # tcp_moderate_rcvbuf: receive buffer auto-tuning
    comp_sack_delay_ns: int = 1_000_000   # tcp_comp_sack_delay_ns: most a SACK waits (1 ms)
    comp_sack_slack_ns: int = 100_000     # tcp_comp_sack_slack_ns: the hrtimer's slack
    comp_sack_nr: int = 44                # tcp_comp_sack_nr: SACKs compressed at most (0: off)
    congestion_control: str = "cubic"     # tcp_congestion_control
    # tcp_dctcp module parameters (/sys/module/tcp_dctcp/parameters/): the gain of alpha's
    # moving average is 1/2**shift_g (RFC 8257 §3.3: g = 1/16), alpha starts at 1024 (= 1).
    dctcp_shift_g: int = 4
    dctcp_alpha_on_init: int = 1024
    # tcp_cubic module parameters (/sys/module/tcp_cubic/parameters/), HyStart's included.
    cubic: CubicParams = field(default_factory=CubicParams)
    hystart_pp: bool = True               # usertcp: RFC 9406 HyStart++ in "cubic-rfc9438"
    initial_cwnd_segments: int = 10       # RFC 6928
    rto_initial: float = 1.0              # RFC 6298 §2.1
    rto_min: float = 0.2                  # Linux TCP_RTO_MIN
    rto_max: float = 120.0                # Linux TCP_RTO_MAX
    syn_retries: int = 6                  # tcp_syn_retries
    synack_retries: int = 5               # tcp_synack_retries
    retries2: int = 15                    # tcp_retries2
    delack_min: float = 0.040             # Linux TCP_DELACK_MIN / TCP_ATO_MIN
    delack_max: float = 0.200             # TCP_DELACK_MAX
    quickack_segments: int = 16           # TCP_MAX_QUICKACKS
    time_wait: float = 60.0               # 2*MSL (Linux TCP_TIMEWAIT_LEN)
    fin_timeout: float = 60.0             # tcp_fin_timeout for orphaned FIN_WAIT_2
    max_time_wait: int = 262144           # tcp_max_tw_buckets
    keepalive_time: float = 7200.0        # tcp_keepalive_time
    keepalive_intvl: float = 75.0
    keepalive_probes: int = 9
    reordering: int = 3                   # tcp_reordering: DupThresh (RFC 5681/6675)
    rack: bool = True                     # tcp_recovery bit 0: RACK loss detection (RFC 8985)
    tlp: bool = True                      # tcp_early_retrans >= 3: tail loss probes (RFC 8985 §7)
    ecn: int = ECN_PASSIVE                # tcp_ecn: 0 off, 1 request and accept, 2 accept only, 3-5 AccECN
    ecn_option: int = 2                   # tcp_ecn_option: AccECN option 0 never, 1 minimum, 2 full
    ecn_option_beacon: int = 3            # tcp_ecn_option_beacon: AccECN options per RTT at least
    ecn_fallback: bool = True             # tcp_ecn_fallback: a retransmitted SYN drops ECE|CWR
    fastopen: int = TFO_CLIENT_ENABLE     # tcp_fastopen bit mask
    fastopen_key: bytes = DEFAULT_TFO_KEY  # tcp_fastopen_key (primary)
    fastopen_backup_key: bytes | None = None
    fastopen_blackhole_timeout: float = 0.0  # tcp_fastopen_blackhole_timeout_sec (0: off, 5.14+)
    # usertcp option, off as in the MSG_PRELOAD patches (tcp_rtx_synack: TCP_SYNACK_NORMAL):
    # True resends a Fast Open child's preload in every retransmitted SYN-ACK.
    preload_synack_rtx_data: bool = False
    syncookies: int = 1                   # tcp_syncookies
    max_syn_backlog: int = 4096           # tcp_max_syn_backlog
    somaxconn: int = 4096
    challenge_ack_limit: int = (1 << 31) - 1   # tcp_challenge_ack_limit: off (INT_MAX) since Linux 6.0
    invalid_ratelimit: float = 0.5        # tcp_invalid_ratelimit (per-socket out-of-window ACKs)
    mtu: int = 1500
    qdisc: str = "pfifo_fast"             # the link's root qdisc: "fq" paces flows (tcp/pacing.py)
    routes: RouteTable = field(default_factory=RouteTable)   # ip route metrics (tcp/route.py)
    # RFC 4821 packetization-layer PMTU discovery (tcp/mtu_probe.py): tcp_mtu_probing 0 off,
    # 1 after a black hole is detected, 2 always; the search starts at tcp_base_mss.
    mtu_probing: int = 0
    base_mss: int = 1024                  # tcp_base_mss
    probe_threshold: int = 8              # tcp_probe_threshold: stop when the range is narrower
    probe_interval: float = 600.0         # tcp_probe_interval: seconds before searching again
    mtu_probe_floor: int = 48             # tcp_mtu_probe_floor
    retries1: int = 3                     # tcp_retries1: timeouts before black-hole detection
    min_snd_mss: int = 48                 # tcp_min_snd_mss: floor on the peer's MSS (CVE-2019-11479)
    ttl: int = 64
    min_tso_segs: int = 2
    notsent_lowat: int = 0xFFFFFFFF       # tcp_notsent_lowat: unsent bytes above it block writers
    slow_start_after_idle: bool = False   # packetdrill's defaults.sh turns it off
    retrans_collapse: bool = True         # tcp_retrans_collapse: small retransmissions take the next
    abort_on_overflow: bool = False
    reassembly_max_segments: int = 1024
    max_orphans: int = 65536
    mem_limit: int = 256 << 20           # bytes in all send/receive buffers (Linux tcp_mem); 0: none
    header_prediction: bool = True        # the fast path (header-prediction issue)
    md5_fast_path: bool = True
    isn_secret: bytes = field(default_factory=lambda: os.urandom(16))
    ts_secret: bytes = field(default_factory=lambda: os.urandom(16))
    random_ts_offset: bool = True         # tcp_timestamps=1 randomises per connection (Linux >= 4.10)

    @property
    def rcv_wscale(self) -> int:
        """Linux tcp_select_initial_window: enough shift to cover the largest receive space."""
        if not self.window_scaling:
            return 0
        space = self.rmem[2]
        wscale = 0
        while space > 65535 and wscale < 14:
            space >>= 1
            wscale += 1
        return wscale

    def apply_sysctl(self, name: str, value: str) -> bool:
        """Set one ``net.ipv4.tcp_*`` (or modelled ``net.core.*``) sysctl; False if it is not modelled."""
        key = name.replace("/", ".").removeprefix("net.ipv4.")
        value = value.strip()
        handler = _SYSCTLS.get(key)
        if handler is None:
            return False
        return handler(self, value) is not False

    def apply_module_param(self, module: str, name: str, value: str) -> bool:
        """Write ``/sys/module/MODULE/parameters/NAME``; False if it is not modelled.
        PermissionError for a read-only parameter, ValueError for a bad value."""
        if module == "tcp_cubic":
            return self.cubic.set(name, value)
        if module == "tcp_dctcp" and name in ("dctcp_shift_g", "dctcp_alpha_on_init"):
            return self.apply_sysctl(name, value)
        return False


def _int(v: str) -> int:
    return int(v, 0)


def _set_bool(attr: str):  # type: ignore[no-untyped-def]
    def setter(cfg: StackConfig, v: str) -> None:
        setattr(cfg, attr, _int(v) != 0)
    return setter


def _set_int(attr: str):  # type: ignore[no-untyped-def]
    def setter(cfg: StackConfig, v: str) -> None:
        setattr(cfg, attr, _int(v))
    return setter


def _set_mem(attr: str):  # type: ignore[no-untyped-def]
    def setter(cfg: StackConfig, v: str) -> None:
        parts = [int(x) for x in v.replace(",", " ").split()]
        if len(parts) != 3:
            raise ValueError(f"{attr} needs three integers, got {v!r}")
        setattr(cfg, attr, (parts[0], parts[1], parts[2]))
    return setter


def _set_tfo_key(cfg: StackConfig, v: str) -> None:
    keys = [k for k in v.split(",") if k]
    cfg.fastopen_key = parse_tfo_key(keys[0])
    cfg.fastopen_backup_key = parse_tfo_key(keys[1]) if len(keys) > 1 else None


def parse_tfo_key(text: str) -> bytes:
    """The sysctl form a1a1a1a1-b2b2b2b2-...: four u32 words, each stored little-endian."""
    words = text.strip().split("-")
    if len(words) != 4:
        raise ValueError(f"a TFO key is four dash-separated hex words, got {text!r}")
    return b"".join(int(w, 16).to_bytes(4, "little") for w in words)


def _set_ecn(cfg: StackConfig, v: str) -> bool:
    """tcp_ecn: 0-2 are RFC 3168 ECN; Linux >= 6.18 adds 3-5 (AccECN, ``tcp/accecn.py``)."""
    n = _int(v)
    if not 0 <= n <= 5:
        raise ValueError(f"tcp_ecn must be 0..5, got {n}")   # Linux: EINVAL
    cfg.ecn = n
    return True


def _set_mtu_probing(cfg: StackConfig, v: str) -> None:
    n = _int(v)
    if not 0 <= n <= 2:
        raise ValueError(f"tcp_mtu_probing must be 0..2, got {n}")   # Linux: proc_dointvec_minmax
    cfg.mtu_probing = n
def _set_ranged(name: str, top: int) -> Callable[[StackConfig, str], None]:
    """A u8 sysctl with Linux's proc_dou8vec_minmax range 0..top (EINVAL outside)."""
    def setter(cfg: StackConfig, v: str) -> None:
        n = _int(v)
        if not 0 <= n <= top:
            raise ValueError(f"{name} must be 0..{top}, got {n}")
        setattr(cfg, name, n)
    return setter


def _set_cc(cfg: StackConfig, v: str) -> None:
    cfg.congestion_control = v


_SYSCTLS = {
    "tcp_timestamps": _set_bool("timestamps"),
    "tcp_sack": _set_bool("sack"),
    "tcp_dsack": _set_bool("dsack"),
    "tcp_window_scaling": _set_bool("window_scaling"),
    "tcp_rmem": _set_mem("rmem"),
    "tcp_wmem": _set_mem("wmem"),
    "tcp_congestion_control": _set_cc,
    # Module parameters, not sysctls, but scripts and profiles set them the same way.
    "dctcp_shift_g": _set_int("dctcp_shift_g"),
    "dctcp_alpha_on_init": _set_int("dctcp_alpha_on_init"),
    "tcp_syn_retries": _set_int("syn_retries"),
    "tcp_mtu_probing": _set_mtu_probing,
    "tcp_base_mss": _set_int("base_mss"),
    "tcp_probe_threshold": _set_int("probe_threshold"),
    "tcp_probe_interval": lambda c, v: setattr(c, "probe_interval", float(_int(v))),
    "tcp_mtu_probe_floor": _set_int("mtu_probe_floor"),
    "tcp_retries1": _set_int("retries1"),
    "tcp_synack_retries": _set_int("synack_retries"),
    "tcp_retries2": _set_int("retries2"),
    "tcp_ecn": _set_ecn,
    "tcp_ecn_fallback": _set_bool("ecn_fallback"),
    "tcp_ecn_option": _set_ranged("ecn_option", 2),
    "tcp_ecn_option_beacon": _set_ranged("ecn_option_beacon", 3),
    "tcp_fastopen": _set_int("fastopen"),
    "tcp_fastopen_key": _set_tfo_key,
    "tcp_fastopen_blackhole_timeout_sec":
        lambda c, v: setattr(c, "fastopen_blackhole_timeout", float(_int(v))),
    "tcp_syncookies": _set_int("syncookies"),
    "tcp_max_syn_backlog": _set_int("max_syn_backlog"),
    "tcp_reordering": _set_int("reordering"),
    "tcp_recovery": lambda c, v: setattr(c, "rack", bool(_int(v) & 1)),
    "tcp_early_retrans": lambda c, v: setattr(c, "tlp", _int(v) >= 3),
    "tcp_min_tso_segs": _set_int("min_tso_segs"),
    "tcp_min_snd_mss": _set_int("min_snd_mss"),
    "tcp_notsent_lowat": lambda c, v: setattr(c, "notsent_lowat", _int(v) & 0xFFFFFFFF),
    "tcp_slow_start_after_idle": _set_bool("slow_start_after_idle"),
    "tcp_retrans_collapse": _set_bool("retrans_collapse"),
    "tcp_abort_on_overflow": _set_bool("abort_on_overflow"),
    "tcp_challenge_ack_limit": _set_int("challenge_ack_limit"),
    "tcp_keepalive_time": lambda c, v: setattr(c, "keepalive_time", float(_int(v))),
    "tcp_keepalive_intvl": lambda c, v: setattr(c, "keepalive_intvl", float(_int(v))),
    "tcp_keepalive_probes": _set_int("keepalive_probes"),
    "tcp_fin_timeout": lambda c, v: setattr(c, "fin_timeout", float(_int(v))),
    "net.core.rmem_max": _set_int("rmem_max"),
    "net.core.wmem_max": _set_int("wmem_max"),
    "tcp_shrink_window": _set_bool("shrink_window"),
    "tcp_moderate_rcvbuf": _set_bool("moderate_rcvbuf"),
    "tcp_comp_sack_delay_ns": _set_int("comp_sack_delay_ns"),
    "tcp_comp_sack_slack_ns": _set_int("comp_sack_slack_ns"),
    "tcp_comp_sack_nr": _set_int("comp_sack_nr"),
}

CONFIG_FIELDS = tuple(f.name for f in fields(StackConfig))
