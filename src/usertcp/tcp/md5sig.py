"""TCP-MD5 signature keys (RFC 2385), configured as Linux's ``TCP_MD5SIG`` does.

Keys are per socket and per peer address (with a prefix length, Linux's
``TCP_MD5SIG_EXT`` + ``TCP_MD5SIG_FLAG_PREFIX``). ``parse_tcp_md5sig`` reads the
exact bytes of ``struct tcp_md5sig`` (include/uapi/linux/tcp.h), so the same
option value configures a Linux socket and a usertcp socket.
"""

from __future__ import annotations

import errno
import ipaddress
import socket as _socket
import struct

TCP_MD5SIG = 14
TCP_MD5SIG_EXT = 32
TCP_MD5SIG_FLAG_PREFIX = 0x1
TCP_MD5SIG_FLAG_IFINDEX = 0x2
TCP_MD5SIG_MAXKEYLEN = 80

# struct tcp_md5sig: sockaddr_storage (128) | u8 flags | u8 prefixlen | u16 keylen | int ifindex | u8 key[80]
_S_MD5SIG = struct.Struct("=128sBBHi80s")
MD5SIG_SIZE = _S_MD5SIG.size      # 216
_S_SIN = struct.Struct("!2xH4s")   # after the native-order family: port, address
_S_SIN6 = struct.Struct("!2xHI16sI")


class Md5Keys:
    """Keys by peer prefix; the longest matching prefix wins (Linux tcp_md5_do_lookup)."""

    __slots__ = ("_keys",)

    def __init__(self) -> None:
        self._keys: list[tuple[int, int, int, bytes]] = []   # (version, network int, prefixlen, key)

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, address: str | bytes, key: bytes, prefixlen: int | None = None) -> None:
        addr = ipaddress.ip_address(address)
        bits = 32 if addr.version == 4 else 128
        plen = bits if prefixlen is None else prefixlen
        if not 0 <= plen <= bits:
            raise OSError(errno.EINVAL, f"prefix length {plen} out of range")
        if not 0 < len(key) <= TCP_MD5SIG_MAXKEYLEN:
            raise OSError(errno.EINVAL, "an MD5 key has 1..80 bytes")
        net = int(addr) >> (bits - plen) << (bits - plen) if plen else 0
        self.delete(address, plen)
        self._keys.append((addr.version, net, plen, bytes(key)))

    def delete(self, address: str | bytes, prefixlen: int | None = None) -> bool:
        addr = ipaddress.ip_address(address)
        bits = 32 if addr.version == 4 else 128
        plen = bits if prefixlen is None else prefixlen
        net = int(addr) >> (bits - plen) << (bits - plen) if plen else 0
        before = len(self._keys)
        self._keys = [k for k in self._keys if not (k[0] == addr.version and k[1] == net and k[2] == plen)]
        return len(self._keys) != before

    def lookup(self, peer: bytes) -> bytes | None:
        if not self._keys:
            return None
        version = 4 if len(peer) == 4 else 6
        bits = 32 if version == 4 else 128
        value = int.from_bytes(peer, "big")
        best: tuple[int, bytes] | None = None
        for v, net, plen, key in self._keys:
            if v != version:
                continue
            masked = value >> (bits - plen) << (bits - plen) if plen else 0
            if masked == net and (best is None or plen > best[0]):
                best = (plen, key)
        return best[1] if best else None


def parse_tcp_md5sig(value: bytes, *, ext: bool = False) -> tuple[str, int | None, bytes]:
    """Decode ``struct tcp_md5sig``: (peer address, prefix length or None, key; b"" = delete)."""
    if len(value) < MD5SIG_SIZE:
        raise OSError(errno.EINVAL, f"struct tcp_md5sig is {MD5SIG_SIZE} bytes, got {len(value)}")
    ss, flags, prefixlen, keylen, _ifindex, key = _S_MD5SIG.unpack_from(value)
    family = int.from_bytes(ss[:2], "little")
    if family == _socket.AF_INET:
        _port, raw = _S_SIN.unpack_from(ss)
        addr = str(ipaddress.IPv4Address(raw))
        bits = 32
    elif family == _socket.AF_INET6:
        _port, _flow, raw6, _scope = _S_SIN6.unpack_from(ss)
        addr = str(ipaddress.IPv6Address(raw6))
        bits = 128
    else:
        raise OSError(errno.EINVAL, f"address family {family} in tcp_md5sig")
    if keylen > TCP_MD5SIG_MAXKEYLEN:
        raise OSError(errno.EINVAL, "key longer than TCP_MD5SIG_MAXKEYLEN")
    plen: int | None = None
    if ext and flags & TCP_MD5SIG_FLAG_PREFIX:
        if prefixlen > bits:
            raise OSError(errno.EINVAL, "prefix length too long")
        plen = prefixlen
    return addr, plen, bytes(key[:keylen])


def build_tcp_md5sig(address: str, key: bytes, prefixlen: int | None = None) -> bytes:
    """The option value Linux expects (usable with a real kernel socket too)."""
    addr = ipaddress.ip_address(address)
    if addr.version == 4:
        ss = struct.pack("=H", _socket.AF_INET) + struct.pack("!H4s", 0, addr.packed)
    else:
        ss = struct.pack("=H", _socket.AF_INET6) + struct.pack("!HI16sI", 0, 0, addr.packed, 0)
    flags = TCP_MD5SIG_FLAG_PREFIX if prefixlen is not None else 0
    return _S_MD5SIG.pack(ss.ljust(128, b"\0"), flags, prefixlen or 0, len(key), 0, key.ljust(80, b"\0"))
