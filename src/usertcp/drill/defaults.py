"""Defaults of packetdrill's harness and the Linux profile the upstream corpus expects.

Data only (values, not upstream text): addresses and MTUs from packetdrill's config.c and the
kernel selftests runner (ksft_runner.sh), the sysctl values ``gtests/net/common/defaults.sh``
sets before each script, and Linux x86_64 constants taken from the uapi/glibc headers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

SysctlValue: TypeAlias = int | str | tuple[int, ...]

# --------------------------------------------------------------------------- addresses


@dataclass(frozen=True, slots=True)
class AddressDefaults:
    """The harness' view: ``local`` is the stack under test, ``remote`` the scripted peer."""

    ip_version: Literal["ipv4", "ipv6"]
    local_ip: str
    remote_ip: str
    gateway_ip: str
    prefix_len: int
    mtu: int
    # MSS the stack advertises on this MTU (MTU - IP header - 20-byte TCP header).
    mss: int


IPV4 = AddressDefaults(
    ip_version="ipv4",
    local_ip="192.168.0.1",  # RFC 1918 space on the tun side
    remote_ip="192.0.2.1",  # TEST-NET-1 (RFC 5737), never a private address
    gateway_ip="192.168.0.1",
    prefix_len=16,  # netmask 255.255.0.0
    mtu=1500,
    mss=1460,
)
IPV6 = AddressDefaults(
    ip_version="ipv6",
    local_ip="fd3d:0a0b:17d6::1",
    remote_ip="fd3d:fa7b:d17d::1",
    gateway_ip="fd3d:0a0b:17d6:8888::1",
    prefix_len=48,
    mtu=1520,  # 20 bytes more than v4 so that the IPv6 MSS is also 1460
    mss=1460,
)
ADDRESS_DEFAULTS: dict[str, AddressDefaults] = {"ipv4": IPV4, "ipv6": IPV6}

DEFAULT_PORT = 8080  # both --bind_port and --connect_port

# -D symbols the runners pass.  TFO_COOKIE is the Linux cookie for the default addresses and the
# defaults.sh key (TFO_COOKIE_ZERO: for an all-zero key); they can also be computed (SipHash).
DEFAULT_DEFINES: dict[str, dict[str, str]] = {
    "ipv4": {
        "TFO_COOKIE": "3021b9d889017eeb",
        "TFO_COOKIE_ZERO": "b7c12350a90dc8f5",
        "CMSG_LEVEL_IP": "SOL_IP",
        "CMSG_TYPE_RECVERR": "IP_RECVERR",
    },
    "ipv6": {
        "TFO_COOKIE": "c1d1e9742a47a9bc",
        "TFO_COOKIE_ZERO": "82af1a8f9a205c34",
        "CMSG_LEVEL_IP": "SOL_IPV6",
        "CMSG_TYPE_RECVERR": "IPV6_RECVERR",
    },
    # IPv4 addresses (the cookies of IPv4), an AF_INET6 socket's control messages
    "ipv4-mapped-ipv6": {
        "TFO_COOKIE": "3021b9d889017eeb",
        "TFO_COOKIE_ZERO": "b7c12350a90dc8f5",
        "CMSG_LEVEL_IP": "SOL_IPV6",
        "CMSG_TYPE_RECVERR": "IPV6_RECVERR",
    },
}

# --------------------------------------------------------------------------- script options

# Every --option packetdrill accepts, and whether it takes a value (config.c).
KNOWN_OPTIONS: dict[str, bool] = {
    "ip_version": True,
    "bind_port": True,
    "code_command": True,
    "code_format": True,
    "code_sockopt": True,
    "connect_port": True,
    "remote_ip": True,
    "local_ip": True,
    "gateway_ip": True,
    "netmask_ip": True,
    "speed": True,
    "mss": True,
    "mtu": True,
    "init_scripts": True,
    "tolerance_usecs": True,
    "tolerance_percent": True,
    "wire_client": False,
    "wire_server": False,
    "wire_server_ip": True,
    "wire_server_at": True,
    "wire_server_port": True,
    "wire_client_dev": True,
    "wire_server_dev": True,
    "so_filename": True,
    "so_flags": True,
    "tcp_ts_ecr_scaled": False,
    "tcp_ts_tick_usecs": True,
    "strict_segments": False,
    "non_fatal": True,
    "dry_run": False,
    "is_anyip": False,
    "send_omit_free": False,
    "debug": False,
    "define": True,
    "verbose": False,
    # usertcp drill extension: TCP-MD5 key for `md5 *` options (0x-prefixed hex or text).
    "md5_key": True,
}

# Defaults of the options a runner for our stack cares about.
OPTION_DEFAULTS: dict[str, int | float | str] = {
    "ip_version": "ipv4",
    "bind_port": DEFAULT_PORT,
    "connect_port": DEFAULT_PORT,
    "tolerance_usecs": 4000,
    "tolerance_percent": 12.5,
    "tcp_ts_tick_usecs": 0,  # 0 = outbound TS val is not checked
    "mtu": 1500,
}

# --------------------------------------------------------------------------- sysctl profile

# What gtests/net/common/defaults.sh establishes (shell arithmetic evaluated).
SYSCTL_DEFAULTS: dict[str, SysctlValue] = {
    "net.ipv4.tcp_rmem": (4096, 540000, 15 * 1024 * 1024),
    "net.ipv4.tcp_wmem": (4096, 256 * 1024, 4194304),
    "net.ipv4.tcp_timestamps": 1,
    "net.ipv4.tcp_syn_retries": 5,
    "net.ipv4.tcp_synack_retries": 5,
    "net.ipv4.tcp_frto": 2,
    "net.ipv4.tcp_sack": 1,
    "net.ipv4.tcp_dsack": 1,
    "net.ipv4.tcp_fack": 0,
    "net.ipv4.tcp_reordering": 3,
    "net.ipv4.tcp_congestion_control": "cubic",
    "net.ipv4.tcp_slow_start_after_idle": 0,
    "net.ipv4.tcp_early_retrans": 4,  # RACK/TLP
    "net.ipv4.tcp_recovery": 1,
    "net.ipv4.tcp_tso_win_divisor": 3,
    "net.ipv4.tcp_ecn": 0,
    "net.ipv4.tcp_ecn_option": 2,
    "net.ipv4.tcp_pacing_ss_ratio": 200,
    "net.ipv4.tcp_pacing_ca_ratio": 120,
    "net.ipv4.tcp_notsent_lowat": 4294967295,
    "net.ipv4.tcp_fastopen": 0x70403,
    "net.ipv4.tcp_fastopen_key": "a1a1a1a1-b2b2b2b2-c3c3c3c3-d4d4d4d4",
    "net.ipv4.tcp_syncookies": 1,
}
# defaults.sh also flushes the TCP metrics cache (no remembered TFO cookies) and puts a plain
# pfifo qdisc on tun0 (no pacing): a fresh stack with no pacing gives the same behaviour.
DEFAULTS_SH_SIDE_EFFECTS: tuple[str, ...] = ("flush tcp_metrics", "pfifo qdisc on tun0 (no pacing)")


def sysctl_name(key: str) -> str:
    """``/proc/sys/net/ipv4/tcp_ecn`` or ``net/ipv4/tcp_ecn`` -> ``net.ipv4.tcp_ecn``."""
    key = key.strip()
    if key.startswith("/proc/sys/"):
        key = key[len("/proc/sys/") :]
    return key.strip("/").replace("/", ".")


def parse_sysctl_value(text: str) -> SysctlValue:
    """A sysctl value as written in a script: ints (decimal or 0x hex), int vectors, or text."""
    text = text.strip().strip("'\"").strip()
    parts = text.split()
    try:
        numbers = tuple(int(p, 0) for p in parts)
    except ValueError:
        return text
    if len(numbers) == 1:
        return numbers[0]
    return numbers if numbers else text


# --------------------------------------------------------------------------- constants

# Linux x86_64 values of the symbolic constants scripts use in system calls.
SYMBOLS: dict[str, int] = {
    "NULL": 0,  # a null pointer argument (syscall_bad_arg/ scripts)
    "ENOMSG": 42,  # ee_errno of a transmit timestamp on the error queue (linux/errqueue.h)
    # The error queue's control messages (linux/errqueue.h, linux/net_tstamp.h).  CMSG_LEVEL_IP and
    # CMSG_TYPE_RECVERR are the family's (SOL_IP/IP_RECVERR here, SOL_IPV6/IPV6_RECVERR on IPv6).
    "CMSG_LEVEL_IP": 0,
    "CMSG_TYPE_RECVERR": 11,
    "SO_EE_ORIGIN_TIMESTAMPING": 4,
    "SO_EE_ORIGIN_ZEROCOPY": 5,
    "SO_EE_CODE_ZEROCOPY_COPIED": 1,
    "SCM_TIMESTAMPING": 37,
    "SCM_TSTAMP_SND": 0,
    "SCM_TSTAMP_SCHED": 1,
    "SCM_TSTAMP_ACK": 2,
    "SOF_TIMESTAMPING_TX_SOFTWARE": 1 << 1,
    "SOF_TIMESTAMPING_SOFTWARE": 1 << 4,
    "SOF_TIMESTAMPING_OPT_ID": 1 << 7,
    "SOF_TIMESTAMPING_TX_SCHED": 1 << 8,
    "SOF_TIMESTAMPING_TX_ACK": 1 << 9,
    "TCP_CM_INQ": 36,  # = TCP_INQ
    # Address families and socket types (bits/socket.h, bits/socket_type.h)
    "AF_UNSPEC": 0,
    "AF_INET": 2,
    "AF_INET6": 10,
    "PF_UNSPEC": 0,
    "PF_INET": 2,
    "PF_INET6": 10,
    "SOCK_STREAM": 1,
    "SOCK_DGRAM": 2,
    "SOCK_RAW": 3,
    "SOCK_NONBLOCK": 0x800,
    "SOCK_CLOEXEC": 0x80000,
    # Protocols and socket option levels (netinet/in.h)
    "IPPROTO_IP": 0,
    "IPPROTO_ICMP": 1,
    "IPPROTO_TCP": 6,
    "IPPROTO_UDP": 17,
    "IPPROTO_IPV6": 41,
    "IPPROTO_ICMPV6": 58,
    "IPPROTO_RAW": 255,
    "SOL_SOCKET": 1,
    "SOL_IP": 0,
    "SOL_TCP": 6,
    "SOL_IPV6": 41,
    "SOL_UDP": 17,
    # SOL_SOCKET options (asm-generic/socket.h; x86_64 uses the *_OLD time variants)
    "SO_DEBUG": 1,
    "SO_REUSEADDR": 2,
    "SO_TYPE": 3,
    "SO_ERROR": 4,
    "SO_DONTROUTE": 5,
    "SO_BROADCAST": 6,
    "SO_SNDBUF": 7,
    "SO_RCVBUF": 8,
    "SO_SNDBUFFORCE": 32,
    "SO_RCVBUFFORCE": 33,
    "SO_KEEPALIVE": 9,
    "SO_OOBINLINE": 10,
    "SO_NO_CHECK": 11,
    "SO_PRIORITY": 12,
    "SO_LINGER": 13,
    "SO_REUSEPORT": 15,
    "SO_RCVLOWAT": 18,
    "SO_SNDLOWAT": 19,
    "SO_RCVTIMEO": 20,
    "SO_SNDTIMEO": 21,
    "SO_BINDTODEVICE": 25,
    "SO_ACCEPTCONN": 30,
    "SO_MARK": 36,
    "SO_PROTOCOL": 38,
    "SO_DOMAIN": 39,
    "SO_TIMESTAMP": 29,
    "SO_TIMESTAMPNS": 35,
    "SO_TIMESTAMPING": 37,
    "SO_MAX_PACING_RATE": 47,
    "SO_INCOMING_CPU": 49,
    "SO_MEMINFO": 55,
    "SO_ZEROCOPY": 60,
    "SO_TXTIME": 61,
    "SO_BUSY_POLL": 46,
    "SO_COOKIE": 57,
    # IPPROTO_TCP options (linux/tcp.h)
    "TCP_NODELAY": 1,
    "TCP_MAXSEG": 2,
    "TCP_CORK": 3,
    "TCP_KEEPIDLE": 4,
    "TCP_KEEPINTVL": 5,
    "TCP_KEEPCNT": 6,
    "TCP_SYNCNT": 7,
    "TCP_LINGER2": 8,
    "TCP_DEFER_ACCEPT": 9,
    "TCP_WINDOW_CLAMP": 10,
    "TCP_INFO": 11,
    "TCP_QUICKACK": 12,
    "TCP_CONGESTION": 13,
    "TCP_MD5SIG": 14,
    "TCP_THIN_LINEAR_TIMEOUTS": 16,
    "TCP_THIN_DUPACK": 17,
    "TCP_USER_TIMEOUT": 18,
    "TCP_REPAIR": 19,
    "TCP_REPAIR_QUEUE": 20,
    "TCP_QUEUE_SEQ": 21,
    "TCP_REPAIR_OPTIONS": 22,
    "TCP_FASTOPEN": 23,
    "TCP_TIMESTAMP": 24,
    "TCP_NOTSENT_LOWAT": 25,
    "TCP_CC_INFO": 26,
    "TCP_SAVE_SYN": 27,
    "TCP_SAVED_SYN": 28,
    "TCP_REPAIR_WINDOW": 29,
    "TCP_FASTOPEN_CONNECT": 30,
    "TCP_ULP": 31,
    "TCP_MD5SIG_EXT": 32,
    "TCP_FASTOPEN_KEY": 33,
    "TCP_FASTOPEN_NO_COOKIE": 34,
    "TCP_ZEROCOPY_RECEIVE": 35,
    "TCP_INQ": 36,
    "TCP_TX_DELAY": 37,
    # IPPROTO_IP / IPPROTO_IPV6 options (linux/in.h, linux/in6.h)
    "IP_TOS": 1,
    "IP_TTL": 2,
    "IP_HDRINCL": 3,
    "IP_OPTIONS": 4,
    "IP_RECVERR": 11,
    "IP_MTU_DISCOVER": 10,
    "IP_MTU": 14,
    "IP_FREEBIND": 15,
    "IP_TRANSPARENT": 19,
    "IP_PMTUDISC_DONT": 0,
    "IP_PMTUDISC_WANT": 1,
    "IP_PMTUDISC_DO": 2,
    "IP_PMTUDISC_PROBE": 3,
    "IPV6_TCLASS": 67,
    "IPV6_RECVERR": 25,
    "IPV6_MTU_DISCOVER": 23,
    "IPV6_MTU": 24,
    "IPV6_V6ONLY": 26,
    "IPV6_UNICAST_HOPS": 16,
    "IPV6_HOPLIMIT": 52,
    "IPV6_RECVTCLASS": 66,
    # send/recv flags (bits/socket.h)
    "MSG_OOB": 1,
    "MSG_PEEK": 2,
    "MSG_DONTROUTE": 4,
    "MSG_CTRUNC": 8,
    "MSG_TRUNC": 32,
    "MSG_DONTWAIT": 64,
    "MSG_EOR": 128,
    "MSG_WAITALL": 0x100,
    "MSG_CONFIRM": 0x800,
    "MSG_ERRQUEUE": 0x2000,
    "MSG_NOSIGNAL": 0x4000,
    "MSG_MORE": 0x8000,
    "MSG_ZEROCOPY": 0x4000000,
    "MSG_FASTOPEN": 0x20000000,
    "MSG_PRELOAD": 0x10000000,  # the listener-preload patch set (include/linux/socket.h)
    "MSG_CMSG_CLOEXEC": 0x40000000,
    # open/fcntl (asm-generic/fcntl.h)
    "O_RDONLY": 0,
    "O_WRONLY": 1,
    "O_RDWR": 2,
    "O_CREAT": 64,
    "O_EXCL": 128,
    "O_TRUNC": 512,
    "O_APPEND": 1024,
    "O_NONBLOCK": 2048,
    "O_NDELAY": 2048,
    "O_CLOEXEC": 524288,
    "F_DUPFD": 0,
    "F_GETFD": 1,
    "F_SETFD": 2,
    "F_GETFL": 3,
    "F_SETFL": 4,
    "FD_CLOEXEC": 1,
    # poll/epoll (asm-generic/poll.h, sys/epoll.h)
    "POLLIN": 1,
    "POLLPRI": 2,
    "POLLOUT": 4,
    "POLLERR": 8,
    "POLLHUP": 16,
    "POLLNVAL": 32,
    "POLLRDNORM": 64,
    "POLLRDBAND": 128,
    "POLLWRNORM": 256,
    "POLLWRBAND": 512,
    "POLLMSG": 1024,
    "POLLRDHUP": 8192,
    "EPOLLIN": 1,
    "EPOLLPRI": 2,
    "EPOLLOUT": 4,
    "EPOLLERR": 8,
    "EPOLLHUP": 16,
    "EPOLLRDNORM": 64,
    "EPOLLRDBAND": 128,
    "EPOLLWRNORM": 0x100,
    "EPOLLWRBAND": 0x200,
    "EPOLLMSG": 0x400,
    "EPOLLRDHUP": 0x2000,
    "EPOLLEXCLUSIVE": 0x10000000,
    "EPOLLONESHOT": 0x40000000,
    "EPOLLET": 0x80000000,
    "EPOLL_CTL_ADD": 1,
    "EPOLL_CTL_DEL": 2,
    "EPOLL_CTL_MOD": 3,
    "EPOLL_CLOEXEC": 0x80000,
    # shutdown(2)
    "SHUT_RD": 0,
    "SHUT_WR": 1,
    "SHUT_RDWR": 2,
    # ioctls (asm-generic/ioctls.h, linux/sockios.h)
    "SIOCINQ": 0x541B,
    "SIOCATMARK": 0x8905,
    "SIOCOUTQ": 0x5411,
    "SIOCOUTQNSD": 0x894B,
    "FIONREAD": 0x541B,
    "FIONBIO": 0x5421,
    # splice(2)
    "SPLICE_F_MOVE": 1,
    "SPLICE_F_NONBLOCK": 2,
    "SPLICE_F_MORE": 4,
}

# Constants whose value we know but whose behaviour a userspace stack does not emulate; a runner
# should skip (not fail) a script that depends on them.
UNSUPPORTED_SYMBOLS: dict[str, str] = {
    "TCP_ZEROCOPY_RECEIVE": "kernel zerocopy receive (mmap)",
    "SO_MEMINFO": "kernel socket memory accounting",
    "TCP_CC_INFO": "kernel congestion-control internals",
    "TCP_REPAIR": "checkpoint/restore of kernel sockets",
    "TCP_REPAIR_QUEUE": "checkpoint/restore of kernel sockets",
    "TCP_REPAIR_OPTIONS": "checkpoint/restore of kernel sockets",
    "TCP_REPAIR_WINDOW": "checkpoint/restore of kernel sockets",
    "TCP_ULP": "kernel upper-layer protocols (kTLS)",
    "SO_BINDTODEVICE": "no network devices in a sans-IO stack",
}

# Names available to %{ }% code besides the tcpi_* fields (linux/tcp.h, netinet/tcp.h).
CODE_CONSTANTS: dict[str, int] = {
    "TCP_INFINITE_SSTHRESH": 0x7FFFFFFF,  # include/net/tcp.h
    "TCP_ESTABLISHED": 1,
    "TCP_SYN_SENT": 2,
    "TCP_SYN_RECV": 3,
    "TCP_FIN_WAIT1": 4,
    "TCP_FIN_WAIT2": 5,
    "TCP_TIME_WAIT": 6,
    "TCP_CLOSE": 7,
    "TCP_CLOSE_WAIT": 8,
    "TCP_LAST_ACK": 9,
    "TCP_LISTEN": 10,
    "TCP_CLOSING": 11,
    "TCP_NEW_SYN_RECV": 12,
    "TCPI_OPT_TIMESTAMPS": 1,
    "TCPI_OPT_SACK": 2,
    "TCPI_OPT_WSCALE": 4,
    "TCPI_OPT_ECN": 8,
    "TCPI_OPT_ECN_SEEN": 16,
    "TCPI_OPT_SYN_DATA": 32,
    "TCP_CA_Open": 0,
    "TCP_CA_Disorder": 1,
    "TCP_CA_CWR": 2,
    "TCP_CA_Recovery": 3,
    "TCP_CA_Loss": 4,
}

# Functions allowed in expressions (packetdrill's grammar has exactly these).
CALLS: frozenset[str] = frozenset({"htons", "inet_addr", "inet6_addr"})

# errno name -> (Linux value, glibc strerror text).
_ERRNO_TABLE: dict[str, tuple[int, str]] = {
    "EPERM": (1, "Operation not permitted"),
    "ENOENT": (2, "No such file or directory"),
    "ESRCH": (3, "No such process"),
    "EINTR": (4, "Interrupted system call"),
    "EIO": (5, "Input/output error"),
    "ENXIO": (6, "No such device or address"),
    "E2BIG": (7, "Argument list too long"),
    "ENOEXEC": (8, "Exec format error"),
    "EBADF": (9, "Bad file descriptor"),
    "ECHILD": (10, "No child processes"),
    "EAGAIN": (11, "Resource temporarily unavailable"),
    "ENOMEM": (12, "Cannot allocate memory"),
    "EACCES": (13, "Permission denied"),
    "EFAULT": (14, "Bad address"),
    "ENOTBLK": (15, "Block device required"),
    "EBUSY": (16, "Device or resource busy"),
    "EEXIST": (17, "File exists"),
    "EXDEV": (18, "Invalid cross-device link"),
    "ENODEV": (19, "No such device"),
    "ENOTDIR": (20, "Not a directory"),
    "EISDIR": (21, "Is a directory"),
    "EINVAL": (22, "Invalid argument"),
    "ENFILE": (23, "Too many open files in system"),
    "EMFILE": (24, "Too many open files"),
    "ENOTTY": (25, "Inappropriate ioctl for device"),
    "ETXTBSY": (26, "Text file busy"),
    "EFBIG": (27, "File too large"),
    "ENOSPC": (28, "No space left on device"),
    "ESPIPE": (29, "Illegal seek"),
    "EROFS": (30, "Read-only file system"),
    "EMLINK": (31, "Too many links"),
    "EPIPE": (32, "Broken pipe"),
    "EDOM": (33, "Numerical argument out of domain"),
    "ERANGE": (34, "Numerical result out of range"),
    "EDEADLK": (35, "Resource deadlock avoided"),
    "ENAMETOOLONG": (36, "File name too long"),
    "ENOLCK": (37, "No locks available"),
    "ENOSYS": (38, "Function not implemented"),
    "ENOTEMPTY": (39, "Directory not empty"),
    "ELOOP": (40, "Too many levels of symbolic links"),
    "ENOMSG": (42, "No message of desired type"),
    "EIDRM": (43, "Identifier removed"),
    "ECHRNG": (44, "Channel number out of range"),
    "EL2NSYNC": (45, "Level 2 not synchronized"),
    "EL3HLT": (46, "Level 3 halted"),
    "EL3RST": (47, "Level 3 reset"),
    "ELNRNG": (48, "Link number out of range"),
    "EUNATCH": (49, "Protocol driver not attached"),
    "ENOCSI": (50, "No CSI structure available"),
    "EL2HLT": (51, "Level 2 halted"),
    "EBADE": (52, "Invalid exchange"),
    "EBADR": (53, "Invalid request descriptor"),
    "EXFULL": (54, "Exchange full"),
    "ENOANO": (55, "No anode"),
    "EBADRQC": (56, "Invalid request code"),
    "EBADSLT": (57, "Invalid slot"),
    "EBFONT": (59, "Bad font file format"),
    "ENOSTR": (60, "Device not a stream"),
    "ENODATA": (61, "No data available"),
    "ETIME": (62, "Timer expired"),
    "ENOSR": (63, "Out of streams resources"),
    "ENONET": (64, "Machine is not on the network"),
    "ENOPKG": (65, "Package not installed"),
    "EREMOTE": (66, "Object is remote"),
    "ENOLINK": (67, "Link has been severed"),
    "EADV": (68, "Advertise error"),
    "ESRMNT": (69, "Srmount error"),
    "ECOMM": (70, "Communication error on send"),
    "EPROTO": (71, "Protocol error"),
    "EMULTIHOP": (72, "Multihop attempted"),
    "EDOTDOT": (73, "RFS specific error"),
    "EBADMSG": (74, "Bad message"),
    "EOVERFLOW": (75, "Value too large for defined data type"),
    "ENOTUNIQ": (76, "Name not unique on network"),
    "EBADFD": (77, "File descriptor in bad state"),
    "EREMCHG": (78, "Remote address changed"),
    "ELIBACC": (79, "Can not access a needed shared library"),
    "ELIBBAD": (80, "Accessing a corrupted shared library"),
    "ELIBSCN": (81, ".lib section in a.out corrupted"),
    "ELIBMAX": (82, "Attempting to link in too many shared libraries"),
    "ELIBEXEC": (83, "Cannot exec a shared library directly"),
    "EILSEQ": (84, "Invalid or incomplete multibyte or wide character"),
    "ERESTART": (85, "Interrupted system call should be restarted"),
    "ESTRPIPE": (86, "Streams pipe error"),
    "EUSERS": (87, "Too many users"),
    "ENOTSOCK": (88, "Socket operation on non-socket"),
    "EDESTADDRREQ": (89, "Destination address required"),
    "EMSGSIZE": (90, "Message too long"),
    "EPROTOTYPE": (91, "Protocol wrong type for socket"),
    "ENOPROTOOPT": (92, "Protocol not available"),
    "EPROTONOSUPPORT": (93, "Protocol not supported"),
    "ESOCKTNOSUPPORT": (94, "Socket type not supported"),
    "EOPNOTSUPP": (95, "Operation not supported"),
    "EPFNOSUPPORT": (96, "Protocol family not supported"),
    "EAFNOSUPPORT": (97, "Address family not supported by protocol"),
    "EADDRINUSE": (98, "Address already in use"),
    "EADDRNOTAVAIL": (99, "Cannot assign requested address"),
    "ENETDOWN": (100, "Network is down"),
    "ENETUNREACH": (101, "Network is unreachable"),
    "ENETRESET": (102, "Network dropped connection on reset"),
    "ECONNABORTED": (103, "Software caused connection abort"),
    "ECONNRESET": (104, "Connection reset by peer"),
    "ENOBUFS": (105, "No buffer space available"),
    "EISCONN": (106, "Transport endpoint is already connected"),
    "ENOTCONN": (107, "Transport endpoint is not connected"),
    "ESHUTDOWN": (108, "Cannot send after transport endpoint shutdown"),
    "ETOOMANYREFS": (109, "Too many references: cannot splice"),
    "ETIMEDOUT": (110, "Connection timed out"),
    "ECONNREFUSED": (111, "Connection refused"),
    "EHOSTDOWN": (112, "Host is down"),
    "EHOSTUNREACH": (113, "No route to host"),
    "EALREADY": (114, "Operation already in progress"),
    "EINPROGRESS": (115, "Operation now in progress"),
    "ESTALE": (116, "Stale file handle"),
    "EUCLEAN": (117, "Structure needs cleaning"),
    "ENOTNAM": (118, "Not a XENIX named type file"),
    "ENAVAIL": (119, "No XENIX semaphores available"),
    "EISNAM": (120, "Is a named type file"),
    "EREMOTEIO": (121, "Remote I/O error"),
    "EDQUOT": (122, "Disk quota exceeded"),
    "ENOMEDIUM": (123, "No medium found"),
    "EMEDIUMTYPE": (124, "Wrong medium type"),
    "ECANCELED": (125, "Operation canceled"),
    "ENOKEY": (126, "Required key not available"),
    "EKEYEXPIRED": (127, "Key has expired"),
    "EKEYREVOKED": (128, "Key has been revoked"),
    "EKEYREJECTED": (129, "Key was rejected by service"),
    "EOWNERDEAD": (130, "Owner died"),
    "ENOTRECOVERABLE": (131, "State not recoverable"),
    "ERFKILL": (132, "Operation not possible due to RF-kill"),
    "EHWPOISON": (133, "Memory page has hardware error"),
    "EWOULDBLOCK": (11, "Resource temporarily unavailable"),
    "EDEADLOCK": (35, "Resource deadlock avoided"),
}
ERRNO: dict[str, int] = {name: value for name, (value, _text) in _ERRNO_TABLE.items()}
STRERROR: dict[str, str] = {name: text for name, (_value, text) in _ERRNO_TABLE.items()}
