"""usertcp.api.sockopts: the one home of socket-option semantics (socket API and drill shim)."""

from __future__ import annotations

import errno
import struct

import pytest

from usertcp.api import constants as c
from usertcp.api.sockopts import Effect, SocketOptions, take_error
from usertcp.tcp.config import StackConfig
from usertcp.tcp.stack import Stack


def _opts() -> tuple[SocketOptions, Stack]:
    stack = Stack(["10.0.0.1"], StackConfig(), name="t")
    return SocketOptions(stack.config), stack


def test_buffers_doubled_clamped_and_reported() -> None:
    o, _ = _opts()
    assert o.set(c.SOL_SOCKET, c.SO_SNDBUF, 10000, conn=None, listener=None) is Effect.NONE
    assert o.get(c.SOL_SOCKET, c.SO_SNDBUF, conn=None, listener=None) == 20000
    o.set(c.SOL_SOCKET, c.SO_SNDBUF, 1, conn=None, listener=None)
    assert o.get(c.SOL_SOCKET, c.SO_SNDBUF, conn=None, listener=None) == 4608     # SOCK_MIN_SNDBUF
    o.set(c.SOL_SOCKET, c.SO_RCVBUF, struct.pack("i", 50000), conn=None, listener=None)
    assert o.get(c.SOL_SOCKET, c.SO_RCVBUF, conn=None, listener=None) == 100000
    assert o.conn_attrs["rcvbuf_limit"] == 100000 and o.conn_attrs["sndbuf_locked"]


@pytest.mark.parametrize(("level", "name", "value", "err"), [
    (c.IPPROTO_TCP, c.TCP_MAXSEG, 10, errno.EINVAL),
    (c.IPPROTO_TCP, c.TCP_KEEPIDLE, 0, errno.EINVAL),
    (c.IPPROTO_TCP, c.TCP_KEEPCNT, 128, errno.EINVAL),          # MAX_TCP_KEEPCNT = 127
    (c.IPPROTO_TCP, c.TCP_USER_TIMEOUT, -1, errno.EINVAL),
    (c.IPPROTO_TCP, c.TCP_INQ, 2, errno.EINVAL),
    (c.IPPROTO_TCP, c.TCP_FASTOPEN_KEY, b"short", errno.EINVAL),
    (c.IPPROTO_TCP, c.TCP_CONGESTION, b"nope", errno.ENOENT),
    (c.IPPROTO_TCP, c.TCP_INFO, 1, errno.ENOPROTOOPT),
    (c.IPPROTO_TCP, 999, 1, errno.ENOPROTOOPT),
    (c.IPPROTO_IP, c.IP_MTU_DISCOVER, 6, errno.EINVAL),
    (c.SOL_SOCKET, c.SO_TYPE, 1, errno.ENOPROTOOPT),
    (77, 1, 1, errno.ENOPROTOOPT),
    (c.SOL_SOCKET, c.SO_KEEPALIVE, b"\x01", errno.EINVAL),      # an int needs 4 bytes
])
def test_bad_values_get_linux_errnos(level: int, name: int, value: object, err: int) -> None:
    o, _ = _opts()
    with pytest.raises(OSError) as ei:
        o.set(level, name, value, conn=None, listener=None)
    assert ei.value.errno == err


def test_listener_options_reach_children_and_effects() -> None:
    o, stack = _opts()
    o.set(c.IPPROTO_TCP, c.TCP_NODELAY, 1, conn=None, listener=None)
    o.set(c.IPPROTO_IP, c.IP_TOS, 0xB9, conn=None, listener=None)       # ECN bits are TCP's
    o.set(c.SOL_SOCKET, c.SO_REUSEADDR, 1, conn=None, listener=None)
    o.set(c.IPPROTO_TCP, c.TCP_INQ, 1, conn=None, listener=None)
    lst = stack.listen(80)
    o.apply_to_listener(lst)
    assert lst.options["nodelay"] is True and lst.options["tos"] == 0xB8
    child = o.inherit()                          # sk_clone_lock: what accept() starts from
    assert child.reuseaddr and child.recv_inq and child.conn_attrs == o.conn_attrs
    conn = stack.create_connection("10.0.0.2", 80)
    child.apply_to_connection(conn)
    assert conn.nodelay and conn.tos == 0xB8
    # On a live connection: uncork/nodelay may push data, other attributes re-plan timers.
    assert child.set(c.IPPROTO_TCP, c.TCP_CORK, 1, conn=conn, listener=None) is Effect.ATTR
    assert child.set(c.IPPROTO_TCP, c.TCP_CORK, 0, conn=conn, listener=None) is Effect.PUSH
    assert child.set(c.IPPROTO_TCP, c.TCP_NODELAY, 1, conn=conn, listener=None) is Effect.PUSH
    assert child.set(c.SOL_SOCKET, c.SO_KEEPALIVE, 1, conn=conn, listener=None) is Effect.ATTR
    assert child.get(c.SOL_SOCKET, c.SO_KEEPALIVE, conn=conn, listener=None) == 1


def test_pending_error_reported_once() -> None:
    o, stack = _opts()
    conn = stack.create_connection("10.0.0.2", 80)
    conn.error = errno.ECONNREFUSED
    assert o.get(c.SOL_SOCKET, c.SO_ERROR, conn=conn, listener=None) == errno.ECONNREFUSED
    assert o.get(c.SOL_SOCKET, c.SO_ERROR, conn=conn, listener=None) == 0
    conn.error = errno.ETIMEDOUT
    assert take_error(conn) == errno.ETIMEDOUT and conn.error == 0
    o.error = errno.EHOSTUNREACH                # a failed connect whose connection is gone
    assert o.get(c.SOL_SOCKET, c.SO_ERROR, conn=None, listener=None) == errno.EHOSTUNREACH
    assert o.get(c.SOL_SOCKET, c.SO_ERROR, conn=None, listener=None) == 0


def test_md5_keys_add_and_delete() -> None:
    o, stack = _opts()
    lst = stack.listen(179)
    o.set_md5_key("10.0.0.2", b"key", None, conn=None, listener=lst)
    assert lst.md5_keys is o.md5_keys and o.md5_keys is not None
    assert o.md5_keys.lookup(bytes([10, 0, 0, 2])) == b"key"
    o.set_md5_key("10.0.0.2", b"", None, conn=None, listener=lst)          # empty key: delete
    with pytest.raises(OSError) as ei:                                      # Linux: ENOENT
        o.set_md5_key("10.0.0.2", b"", None, conn=None, listener=lst)
    assert ei.value.errno == errno.ENOENT
