"""A kernel congestion control that asks for Accurate ECN, loaded as BPF struct_ops (test only).

Linux 6.18 caps ``net.ipv4.tcp_ecn`` at 2, but its AccECN negotiation is already there for
congestion controls that need it: ``tcp_ecn_send_syn`` asks for AccECN when
``tcp_ca_needs_accecn(sk)``, and ``tcp_ecn_create_request`` accepts an AccECN SYN when the
listener's controller has ``TCP_CONG_NEEDS_ACCECN`` (include/net/tcp.h, in ``TCP_CONG_MASK``
so a BPF controller may set it: ``bpf_tcp_ca_init_member``). This module registers such a
controller, Reno underneath (the kernel's own ``tcp_reno_*`` kfuncs), with nothing but the
``bpf(2)`` system call: the vmlinux BTF gives the type ids and member offsets, the three
programs are a handful of hand-assembled instructions. The registration is a BPF link, so it
ends when the returned object is closed (or the process exits); a kernel socket picks the
controller with ``setsockopt(TCP_CONGESTION, name)``. No traffic, no namespace state.
"""

from __future__ import annotations

import ctypes
import os
import struct
from dataclasses import dataclass

_SYS_BPF = 321                                   # x86_64
_BTF_PATH = "/sys/kernel/btf/vmlinux"
TCP_CONG_NEEDS_ACCECN = 1 << 2                   # include/net/tcp.h (Linux 6.18)
_BPF_F_LINK = 1 << 13

# Bytes after the fixed btf_type of each BTF kind (include/uapi/linux/btf.h): (per-kind, per-vlen).
_KIND_EXTRA = {1: (4, 0), 2: (0, 0), 3: (12, 0), 4: (0, 12), 5: (0, 12), 6: (0, 8), 7: (0, 0),
               8: (0, 0), 9: (0, 0), 10: (0, 0), 11: (0, 0), 12: (0, 0), 13: (0, 8), 14: (4, 0),
               15: (0, 12), 16: (0, 0), 17: (4, 0), 18: (0, 0), 19: (0, 12)}
_STRUCT, _ENUM, _FUNC, _ENUM64 = 4, 6, 12, 19


class BpfError(OSError):
    """A bpf(2) call failed (the verifier's log, when there is one, in the message)."""


@dataclass(frozen=True, slots=True)
class _Type:
    kind: int
    name: str
    size: int
    members: tuple[tuple[str, int, int], ...]          # (name, type id, bit offset) or enum (name, value, 0)


class Btf:
    """The kernel's BTF, just enough of it: types by name, struct members, enum values."""

    def __init__(self, path: str = _BTF_PATH) -> None:
        with open(path, "rb") as f:
            data = f.read()
        magic, _ver, _flags, hdr_len, type_off, type_len, str_off, _str_len = struct.unpack_from(
            "<HBBIIIII", data, 0)
        if magic != 0xEB9F:
            raise BpfError(f"{path}: not little-endian BTF")
        strings = hdr_len + str_off

        def name_at(off: int) -> str:
            end = data.index(b"\0", strings + off)
            return data[strings + off:end].decode()

        self.types: list[_Type | None] = [None]
        self.by_name: dict[tuple[int, str], int] = {}
        pos, end = hdr_len + type_off, hdr_len + type_off + type_len
        while pos < end:
            name_off, info, size = struct.unpack_from("<III", data, pos)
            kind, vlen, kflag = (info >> 24) & 0x1F, info & 0xFFFF, info >> 31
            fixed, per = _KIND_EXTRA[kind]
            pos += 12 + fixed
            members: list[tuple[str, int, int]] = []
            if kind in (4, 5):
                for _ in range(vlen):
                    m_name, m_type, m_off = struct.unpack_from("<III", data, pos + 12 * len(members))
                    members.append((name_at(m_name), m_type, m_off & 0xFFFFFF if kflag else m_off))
            elif kind == _ENUM:
                for i in range(vlen):
                    m_name, val = struct.unpack_from("<Ii", data, pos + 8 * i)
                    members.append((name_at(m_name), val, 0))
            pos += per * vlen
            name = name_at(name_off) if name_off else ""
            self.types.append(_Type(kind, name, size, tuple(members)))
            if name:
                self.by_name.setdefault((kind, name), len(self.types) - 1)

    def find(self, kind: int, name: str) -> int:
        try:
            return self.by_name[(kind, name)]
        except KeyError:
            raise BpfError(f"no BTF type {name!r} (kind {kind}) in this kernel") from None

    def struct(self, name: str) -> _Type:
        t = self.types[self.find(_STRUCT, name)]
        assert t is not None
        return t

    def enum_value(self, enum: str, name: str) -> int:
        t = self.types[self.find(_ENUM, enum)]
        assert t is not None
        return next(v for n, v, _ in t.members if n == name)


def _bpf(cmd: int, attr: bytearray) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    buf = (ctypes.c_char * len(attr)).from_buffer(attr)
    ret = libc.syscall(_SYS_BPF, cmd, buf, len(attr))
    if ret < 0:
        err = ctypes.get_errno()
        raise BpfError(err, f"bpf cmd {cmd}: {os.strerror(err)}")
    return int(ret)


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


_LDX_DW, _CALL, _MOV64_K, _EXIT = 0x79, 0x85, 0xB7, 0x95
_PSEUDO_KFUNC_CALL = 2


def _kfunc_program(kfunc_id: int, nargs: int, returns_value: bool) -> bytes:
    """Load ``nargs`` u64 arguments from the struct_ops context into r1..rN, call the kfunc,
    return its value (or 0)."""
    code = b"".join(_insn(_LDX_DW, dst=r, src=1, off=8 * (r - 1)) for r in range(nargs, 0, -1))
    code += _insn(_CALL, src=_PSEUDO_KFUNC_CALL, imm=kfunc_id)
    if not returns_value:
        code += _insn(_MOV64_K, dst=0, imm=0)
    return code + _insn(_EXIT)


class AccEcnCongestionControl:
    """Registers a Reno congestion control with ``TCP_CONG_NEEDS_ACCECN`` under ``name``
    until :meth:`close`."""

    def __init__(self, name: str) -> None:
        if len(name) >= 16:
            raise ValueError("TCP_CA_NAME_MAX is 16")
        self.name = name
        self._fds: list[int] = []
        try:
            self._register(Btf())
        except BaseException:
            self.close()
            raise

    def _register(self, btf: Btf) -> None:
        ops = btf.struct("tcp_congestion_ops")
        ops_id = btf.find(_STRUCT, "tcp_congestion_ops")
        value = btf.struct("bpf_struct_ops_tcp_congestion_ops")
        value_id = btf.find(_STRUCT, "bpf_struct_ops_tcp_congestion_ops")
        data_off = next(off for n, _, off in value.members if n == "data") // 8
        members = {n: (i, off // 8) for i, (n, _, off) in enumerate(ops.members)}
        prog_type = btf.enum_value("bpf_prog_type", "BPF_PROG_TYPE_STRUCT_OPS")
        map_type = btf.enum_value("bpf_map_type", "BPF_MAP_TYPE_STRUCT_OPS")
        attach = btf.enum_value("bpf_attach_type", "BPF_STRUCT_OPS")
        cmd = {n: btf.enum_value("bpf_cmd", n) for n in
               ("BPF_MAP_CREATE", "BPF_MAP_UPDATE_ELEM", "BPF_PROG_LOAD", "BPF_LINK_CREATE")}
        cmd_btf_load = btf.enum_value("bpf_cmd", "BPF_BTF_LOAD")

        val = bytearray(value.size)
        struct.pack_into("<I", val, data_off + members["flags"][1], TCP_CONG_NEEDS_ACCECN)
        name_b = self.name.encode()
        val[data_off + members["name"][1]:data_off + members["name"][1] + len(name_b)] = name_b
        for member, kfunc, nargs, returns in (("ssthresh", "tcp_reno_ssthresh", 1, True),
                                              ("undo_cwnd", "tcp_reno_undo_cwnd", 1, True),
                                              ("cong_avoid", "tcp_reno_cong_avoid", 3, False)):
            index, off = members[member]
            fd = self._load(cmd["BPF_PROG_LOAD"], prog_type, ops_id, index, member,
                            _kfunc_program(btf.find(_FUNC, kfunc), nargs, returns))
            struct.pack_into("<Q", val, data_off + off, fd)

        btf_fd = self._load_btf(cmd_btf_load)
        attr = bytearray(128)
        struct.pack_into("<IIIII", attr, 0, map_type, 4, value.size, 1, _BPF_F_LINK)
        struct.pack_into("<I", attr, 48, btf_fd)                    # btf_fd: map_create wants one
        attr[28:28 + len(name_b[:15])] = name_b[:15]
        struct.pack_into("<I", attr, 60, value_id)                  # btf_vmlinux_value_type_id
        map_fd = _bpf(cmd["BPF_MAP_CREATE"], attr)
        self._fds.append(map_fd)

        key = (ctypes.c_char * 4).from_buffer(bytearray(4))
        vbuf = (ctypes.c_char * len(val)).from_buffer(val)
        attr = bytearray(128)
        struct.pack_into("<IIQQQ", attr, 0, map_fd, 0, ctypes.addressof(key), ctypes.addressof(vbuf), 0)
        _bpf(cmd["BPF_MAP_UPDATE_ELEM"], attr)

        attr = bytearray(128)
        struct.pack_into("<IIII", attr, 0, map_fd, 0, attach, 0)
        self._fds.append(_bpf(cmd["BPF_LINK_CREATE"], attr))        # registered from here on

    def _load_btf(self, load_cmd: int) -> int:
        """A minimal program BTF (one ``int``): a struct_ops map must name one (map_create's
        btf_get_by_fd), though nothing in it is used."""
        strings = b"\0int\0"
        types = struct.pack("<IIII", 1, 1 << 24, 4, (1 << 24) | 32)
        blob = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(types), len(types), len(strings))
        buf = (ctypes.c_char * (len(blob) + len(types) + len(strings))).from_buffer(
            bytearray(blob + types + strings))
        attr = bytearray(128)
        struct.pack_into("<QQI", attr, 0, ctypes.addressof(buf), 0, len(buf))
        fd = _bpf(load_cmd, attr)
        self._fds.append(fd)
        return fd

    def _load(self, load_cmd: int, prog_type: int, ops_id: int, index: int, name: str,
              code: bytes) -> int:
        insns = (ctypes.c_char * len(code)).from_buffer(bytearray(code))
        lic = ctypes.create_string_buffer(b"GPL")
        log = ctypes.create_string_buffer(65536)
        attr = bytearray(160)
        struct.pack_into("<IIQQIIQ", attr, 0, prog_type, len(code) // 8, ctypes.addressof(insns),
                         ctypes.addressof(lic), 1, len(log), ctypes.addressof(log))
        attr[48:48 + len(name[:15])] = name[:15].encode()
        struct.pack_into("<I", attr, 68, index)                      # expected_attach_type: member
        struct.pack_into("<I", attr, 108, ops_id)                    # attach_btf_id
        try:
            fd = _bpf(load_cmd, attr)
        except BpfError as exc:
            raise BpfError(exc.errno, f"loading {name}: {exc.strerror}\n{log.value.decode()}") from None
        self._fds.append(fd)
        return fd

    def close(self) -> None:
        for fd in reversed(self._fds):
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> AccEcnCongestionControl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
