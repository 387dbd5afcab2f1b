"""TCP Fast Open cookies (RFC 7413, Linux's SipHash construction) and RFC 6528 ISNs."""

from __future__ import annotations

import re

from usertcp.tcp.siphash import siphash24

__all__ = [
    "IsnGenerator",
    "parse_tfo_key_sysctl",
    "parse_tfo_keys_sysctl",
    "tfo_cookie",
    "tfo_key_sysctl_format",
]

TFO_KEY_LEN = 16
_KEY_RE = re.compile(r"^\s*([0-9a-fA-F]{1,8})-([0-9a-fA-F]{1,8})-([0-9a-fA-F]{1,8})-([0-9a-fA-F]{1,8})\s*$")


def tfo_cookie(key: bytes, client_ip: bytes, server_ip: bytes) -> bytes:
    """The 8-byte cookie Linux's server hands to ``client_ip`` (tcp_fastopen.c).

    __tcp_fastopen_cookie_gen_cipher() hashes the SYN's saddr||daddr (contiguous in the
    IP header: 8 bytes for IPv4, 32 for IPv6) with SipHash-2-4 keyed by the raw 16-byte
    TFO key, and stores the 64-bit result with cpu_to_le64().  RFC 7413 §4.1.2 leaves
    the algorithm to the server; this one makes us interoperate with Linux peers and
    packetdrill scripts.
    """
    if len(key) != TFO_KEY_LEN:
        raise ValueError("TFO key must be 16 bytes")
    if len(client_ip) not in (4, 16) or len(server_ip) != len(client_ip):
        raise ValueError("addresses must both be IPv4 (4 bytes) or both IPv6 (16 bytes)")
    return siphash24(key, client_ip + server_ip).to_bytes(8, "little")


def parse_tfo_keys_sysctl(text: str) -> tuple[bytes, ...]:
    """Parse net.ipv4.tcp_fastopen_key: "w-w-w-w" or "primary,backup" (Linux >= 5.2).

    Linux (proc_tcp_fastopen_key) sscanf()s four hex u32 words per key and stores each
    with cpu_to_le32(), so "a0bf63f7-..." becomes the bytes f7 63 bf a0 ...; this is the
    same 16 bytes that setsockopt(TCP_FASTOPEN_KEY) takes.
    """
    parts = text.strip().split(",")
    if not 1 <= len(parts) <= 2:
        raise ValueError("expected one key or primary,backup")
    keys: list[bytes] = []
    for part in parts:
        m = _KEY_RE.match(part)
        if m is None:
            raise ValueError(f"malformed TFO key {part!r}")
        keys.append(b"".join(int(w, 16).to_bytes(4, "little") for w in m.groups()))
    return tuple(keys)


def parse_tfo_key_sysctl(text: str) -> bytes:
    """The primary key of a tcp_fastopen_key sysctl string (see parse_tfo_keys_sysctl)."""
    return parse_tfo_keys_sysctl(text)[0]


def tfo_key_sysctl_format(key: bytes, backup: bytes | None = None) -> str:
    """Format like reading /proc/sys/net/ipv4/tcp_fastopen_key ("%08x-%08x-%08x-%08x[,...]")."""
    out = []
    for k in (key,) if backup is None else (key, backup):
        if len(k) != TFO_KEY_LEN:
            raise ValueError("TFO key must be 16 bytes")
        out.append("-".join(f"{int.from_bytes(k[i : i + 4], 'little'):08x}" for i in range(0, 16, 4)))
    return ",".join(out)


class IsnGenerator:
    """RFC 6528 §3 initial sequence numbers: ISN = M + F(localip, localport, remoteip, remoteport, key).

    M is a 4 µs timer (RFC 9293 §3.4.1 / RFC 6528 §3) derived from ``now``; F is the low
    32 bits of SipHash-2-4 over the 4-tuple (ports big-endian, as on the wire).
    """

    __slots__ = ("_secret",)

    def __init__(self, secret: bytes) -> None:
        if len(secret) != 16:
            raise ValueError("ISN secret must be 16 bytes")
        self._secret = bytes(secret)

    def isn(self, local_ip: bytes, local_port: int, remote_ip: bytes, remote_port: int, now: float) -> int:
        msg = b"".join(
            (bytes(local_ip), local_port.to_bytes(2, "big"), bytes(remote_ip), remote_port.to_bytes(2, "big"))
        )
        f = siphash24(self._secret, msg) & 0xFFFFFFFF
        m = int(now * 250_000)
        return (m + f) & 0xFFFFFFFF
