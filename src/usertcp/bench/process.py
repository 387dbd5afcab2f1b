"""A benchmark's server subprocess inside a network namespace: started, awaited, stopped.

``bench tun`` runs ``usertcp serve`` and ``bench apps`` its own server entry point this way:
``ip netns exec NS python -m ...``, with this process's usertcp first on ``PYTHONPATH``
(the same build: :func:`usertcp_env`), stderr to a temporary file (a pipe nobody reads
could fill up and block the server), and a ``ready`` line on stdout once it listens.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def usertcp_env(*, pure: bool = False) -> dict[str, str]:
    """This environment with this process's usertcp first on PYTHONPATH; ``pure`` runs its pure
    sources (``USERTCP_PURE=1``, usertcp/builds.py), else whatever build it has."""
    src = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("USERTCP_PURE", None)
    if pure:
        env["USERTCP_PURE"] = "1"
    return env


class NamespaceProcess:
    """``python -m MODULE ARGS`` in namespace ``ns``, running once it printed a ``ready`` line.

    ``stop_by_stdin``: :meth:`stop` closes its stdin (the server watches it), else it sends
    SIGTERM. A server that does not say ready within ``timeout`` seconds is stopped and a
    RuntimeError carries its stderr.
    """

    def __init__(self, ns: str, module: str, *args: str, timeout: float = 30.0, pure: bool = False,
                 stop_by_stdin: bool = False) -> None:
        self._err = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed in stop()
        self.stderr = ""
        self.proc = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-m", module, *args],
                                     stdin=subprocess.PIPE if stop_by_stdin else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=self._err, bufsize=0,
                                     env=usertcp_env(pure=pure))
        if not self._wait_ready(timeout):
            self.stop()
            raise RuntimeError(f"{module} {' '.join(args[:4])} did not start: {self.stderr[-2000:]}")

    def _wait_ready(self, timeout: float) -> bool:
        """Read stdout (unbuffered: nothing hides from select) until a line starts with ``ready``."""
        stdout = self.proc.stdout
        assert stdout is not None
        deadline = time.monotonic() + timeout
        seen = b""
        with selectors.DefaultSelector() as sel:
            sel.register(stdout, selectors.EVENT_READ)
            while (left := deadline - time.monotonic()) > 0:
                if not sel.select(left):
                    return False
                chunk = os.read(stdout.fileno(), 4096)
                if not chunk:
                    return False                # it exited
                seen += chunk
                if any(line.startswith(b"ready") for line in seen.split(b"\n")[:-1]):
                    return True
        return False

    def stop(self) -> int:
        """Stop it (stdin closed or SIGTERM; SIGKILL after 30 s); its exit status. ``stderr``
        holds what it wrote there."""
        if self.proc.poll() is None:
            if self.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    self.proc.stdin.close()
            else:
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if not self._err.closed:
            self._err.seek(0)
            self.stderr = self._err.read()
            self._err.close()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode
