"""Throw-away network namespaces for TUN tests and the CLI, through pyroute2.

Everything that creates interfaces or sends packets must run inside a namespace made
here and removed afterwards, so nothing reaches the host's interfaces or routes.

Two ways to run code inside a namespace:

* :func:`call_in_namespace` runs a function in a fresh *thread* that ``setns()``\\ s
  into the namespace. ``setns(CLONE_NEWNET)`` only moves the calling thread, and every
  fd created there (the TUN fd, netlink and TCP sockets) stays bound to that namespace
  for its whole life, so the objects can be used from any thread afterwards. The
  thread ends right after, so no thread of ours is ever left in the wrong namespace.
  This is what :mod:`usertcp.net.tun` and the tests use.
* :func:`run_in_namespace` forks a child that ``setns()``\\ s and returns the pickled
  result through a pipe: full isolation (also for code that reads the process-wide
  state), at the price of fork in a possibly multi-threaded parent, so ``fn`` should be
  simple and must not rely on locks held by other threads.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import pickle
import re
import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from pyroute2 import IPRoute
from pyroute2 import netns as _pr_netns

T = TypeVar("T")

CLONE_NEWNET = 0x40000000
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# net.* sysctls: only these are per-namespace, and we also check we are not in the init namespace.
_SYSCTL_RE = re.compile(r"^net[./][A-Za-z0-9_./-]+$")

_libc: ctypes.CDLL | None = None


def _get_libc() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    return _libc


def setns_fd(fd: int) -> None:
    """Move the calling *thread* into the network namespace behind ``fd`` (Python 3.11 has no os.setns)."""
    if _get_libc().setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def namespace_path(name: str) -> str:
    if not _NAME_RE.match(name):
        raise ValueError(f"bad namespace name {name!r}")
    return os.path.join(_pr_netns.NETNS_RUN_DIR, name)


def list_namespaces() -> list[str]:
    return sorted(_pr_netns.listnetns())


def create_namespace(prefix: str = "utcp") -> str:
    """Create a new named namespace ``<prefix>-<random>`` and return its name."""
    for _ in range(8):
        name = f"{prefix}-{secrets.token_hex(4)}"
        namespace_path(name)  # validates the prefix
        if name in _pr_netns.listnetns():
            continue
        _pr_netns.create(name)
        if name not in _pr_netns.listnetns():
            raise OSError(f"namespace {name} was not created")
        # lo is down in a new namespace; loopback tests expect it up.
        call_in_namespace(name, _set_lo_up)
        return name
    raise OSError("could not pick a free namespace name")


def _set_lo_up() -> None:
    with IPRoute() as ipr:
        idx = ipr.link_lookup(ifname="lo")
        if idx:
            ipr.link("set", index=idx[0], state="up")


def remove_namespace(name: str) -> None:
    """Remove a namespace made by :func:`create_namespace`; a missing one is not an error.

    The kernel frees the namespace (and destroys its interfaces) once the last fd and
    thread in it are gone; unmounting the name is what makes it disappear from lists.
    """
    path = namespace_path(name)
    if os.path.exists(path):
        _pr_netns.remove(name)


@contextlib.contextmanager
def namespace(prefix: str = "utcp") -> Iterator[str]:
    """A namespace that exists for the ``with`` body and is removed even on failure."""
    name = create_namespace(prefix)
    try:
        yield name
    finally:
        remove_namespace(name)


def _open_ns(ns: str | int) -> tuple[int, bool]:
    """An fd for ``ns`` (a name made here or an already open namespace fd) and whether we own it."""
    if isinstance(ns, int):
        return ns, False
    return os.open(namespace_path(ns), os.O_RDONLY | os.O_CLOEXEC), True


def call_in_namespace(ns: str | int, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``fn(*args, **kwargs)`` in a new thread inside namespace ``ns``; return or re-raise.

    ``ns`` is a namespace name or an open namespace fd (e.g. from TUNGETDEVNETNS).
    """
    nsfd, owned = _open_ns(ns)
    result: list[T] = []
    error: list[BaseException] = []

    def body() -> None:
        try:
            setns_fd(nsfd)
            # Be sure before running anything: fn may create devices or send packets.
            if os.stat("/proc/thread-self/ns/net").st_ino != os.fstat(nsfd).st_ino:
                raise OSError(f"setns into {ns!r} did not take effect")
            result.append(fn(*args, **kwargs))
        except BaseException as exc:
            error.append(exc)

    try:
        t = threading.Thread(target=body, name="utcp-netns", daemon=True)
        t.start()
        t.join()
    finally:
        if owned:
            os.close(nsfd)
    if error:
        raise error[0]
    return result[0]


def run_in_namespace(ns: str, fn: Callable[..., T], *args: Any) -> T:
    """Fork a child that enters ``ns``, runs ``fn(*args)`` and sends back the pickled result.

    Exceptions are pickled too and re-raised here. The child leaves with ``os._exit`` so
    it never runs the parent's atexit handlers or pytest's teardown.
    """
    nsfd, _ = _open_ns(ns)
    r, w = os.pipe()
    try:
        pid = os.fork()
    except BaseException:
        os.close(r)
        os.close(w)
        os.close(nsfd)
        raise
    if pid == 0:  # child
        code = 0
        try:
            os.close(r)
            try:
                setns_fd(nsfd)
                payload = pickle.dumps((True, fn(*args)))
            except BaseException as exc:
                payload = pickle.dumps((False, exc))
            with os.fdopen(w, "wb") as f:
                f.write(payload)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    os.close(nsfd)
    try:
        with os.fdopen(r, "rb") as f:
            data = f.read()
    finally:
        os.waitpid(pid, 0)
    if not data:
        raise ChildProcessError(f"child in namespace {ns} died without a result")
    ok, value = pickle.loads(data)
    if not ok:
        raise value
    result: T = value
    return result


def _veth_add(name: str, peer: str, peer_ns: str, address: str, prefixlen: int) -> None:
    with IPRoute() as ipr:
        ipr.link("add", ifname=name, kind="veth", peer=peer)
        ia = ipr.link_lookup(ifname=name)[0]
        ib = ipr.link_lookup(ifname=peer)[0]
        ipr.link("set", index=ib, net_ns_fd=peer_ns)
        ipr.addr("add", index=ia, address=address, prefixlen=prefixlen)
        ipr.link("set", index=ia, state="up")


def _link_up(name: str, address: str, prefixlen: int) -> None:
    with IPRoute() as ipr:
        index = ipr.link_lookup(ifname=name)[0]
        ipr.addr("add", index=index, address=address, prefixlen=prefixlen)
        ipr.link("set", index=index, state="up")


def connect_veth(ns_a: str, ns_b: str, name: str, address_a: str, address_b: str,
                 prefixlen: int = 24) -> None:
    """A veth pair ``name``0 in ``ns_a`` and ``name``1 in ``ns_b``, addressed and up (the
    kernel-to-kernel reference path of the benchmarks)."""
    call_in_namespace(ns_a, _veth_add, f"{name}0", f"{name}1", ns_b, address_a, prefixlen)
    call_in_namespace(ns_b, _link_up, f"{name}1", address_b, prefixlen)


def _sysctl_path(key: str) -> str:
    if not _SYSCTL_RE.match(key) or ".." in key:
        raise ValueError(f"only net.* sysctls are per-namespace, refusing {key!r}")
    return "/proc/sys/" + key.replace(".", "/")


def _write_sysctl(caller_ns_ino: int, key: str, value: str) -> None:
    # /proc/sys/net resolves against the namespace of the opening thread: never the caller's own.
    if os.stat("/proc/thread-self/ns/net").st_ino == caller_ns_ino:
        raise RuntimeError("refusing to change sysctls of the caller's own network namespace")
    with open(_sysctl_path(key), "w") as f:
        f.write(value)


def _read_sysctl(key: str) -> str:
    with open(_sysctl_path(key)) as f:
        return f.read().strip()


def set_sysctl(ns: str, key: str, value: str | int) -> None:
    """Set a per-namespace sysctl such as ``net.ipv4.tcp_sack`` inside namespace ``ns``."""
    _sysctl_path(key)  # validate before entering
    caller = os.stat("/proc/thread-self/ns/net").st_ino
    call_in_namespace(ns, _write_sysctl, caller, key, str(value))


def get_sysctl(ns: str, key: str) -> str:
    return call_in_namespace(ns, _read_sysctl, key)


class NetemUnavailable(OSError):
    """The running kernel has no netem qdisc."""


def _netem(dev: str, kwargs: dict[str, Any]) -> None:
    with IPRoute() as ipr:
        found = ipr.link_lookup(ifname=dev)
        if not found:
            raise OSError(f"no device {dev}")
        try:
            ipr.tc("replace", "netem", index=found[0], handle="1:", **kwargs)
        except Exception as exc:
            if getattr(exc, "code", None) == errno.ENOENT:  # the kernel does not know the qdisc kind
                raise NetemUnavailable("netem qdisc not in this kernel (CONFIG_NET_SCH_NETEM)") from exc
            raise


def add_netem(ns: str, dev: str, *, loss: float = 0.0, reorder: float = 0.0, delay_ms: float = 0.0,
              jitter_ms: float = 0.0, duplicate: float = 0.0, limit: int = 1000) -> None:
    """Put a netem root qdisc on ``dev`` in ``ns`` (percentages, milliseconds), via pyroute2.

    netem shapes *egress* only: on a TUN device that is the kernel-to-stack direction.
    Reordering needs a delay (netem sends the reordered packets early), so a 10 ms delay
    is implied when ``reorder`` is set without one.
    """
    if reorder and not delay_ms:
        delay_ms = 10.0
    kwargs: dict[str, Any] = {"limit": limit}
    if loss:
        kwargs["loss"] = loss
    if delay_ms:
        kwargs["delay"] = int(delay_ms * 1000)  # pyroute2 takes microseconds
    if jitter_ms:
        kwargs["jitter"] = int(jitter_ms * 1000)
    if duplicate:
        kwargs["duplicate"] = duplicate
    if reorder:
        kwargs["prob_reorder"] = reorder
    call_in_namespace(ns, _netem, dev, kwargs)


def _del_qdisc(dev: str) -> None:
    with IPRoute() as ipr:
        found = ipr.link_lookup(ifname=dev)
        if found:
            with contextlib.suppress(Exception):
                ipr.tc("del", index=found[0], handle="1:")


def remove_netem(ns: str, dev: str) -> None:
    call_in_namespace(ns, _del_qdisc, dev)
