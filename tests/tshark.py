"""Test helper: ask tshark whether a capture holds malformed or badly checksummed packets.

Not a test module. Tests using it should skip when ``HAVE_TSHARK`` is false
(``pytest.mark.skipif(not HAVE_TSHARK, ...)``).
"""

from __future__ import annotations

import os
import shutil
import subprocess

TSHARK = shutil.which("tshark")
HAVE_TSHARK = TSHARK is not None

# Wireshark's PI_ERROR; warnings (retransmission, lost segment, ...) are not problems here.
_SEVERITY_ERROR = 0x00800000
# Field separators that can't occur in expert messages (which contain commas).
_SEP = "\x1e"
_AGG = "\x1f"

_CHECKSUM_PREFS = ("-o", "ip.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE")


def _run(args: list[str]) -> str:
    if TSHARK is None:
        raise RuntimeError("tshark is not installed")
    proc = subprocess.run([TSHARK, "-n", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "LC_ALL": "C"})
    if proc.returncode != 0:
        raise RuntimeError(f"tshark failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def tshark_problems(path: str | os.PathLike[str]) -> list[str]:
    """One line per frame with a malformed-packet or error-severity expert item
    (bad IP/TCP checksum, bogus lengths, ...): ``"frame N: message; message"``."""
    out = _run(["-r", os.fspath(path), *_CHECKSUM_PREFS,
                "-Y", "_ws.malformed || _ws.expert.severity >= error",
                "-T", "fields", "-E", f"separator={_SEP}", "-E", f"aggregator={_AGG}",
                "-E", "occurrence=a",
                "-e", "frame.number", "-e", "_ws.expert.severity", "-e", "_ws.expert.message",
                "-e", "_ws.malformed"])
    problems: list[str] = []
    for line in out.split("\n"):   # not splitlines(): it also splits on \x1e/\x1f
        if not line.strip():
            continue
        frame, severities, messages, malformed = [*line.split(_SEP), "", "", ""][:4]
        sev = severities.split(_AGG) if severities else []
        msg = messages.split(_AGG) if messages else []
        # severity and message come one per expert item, in the same order.
        errors = [m for s, m in zip(sev, msg, strict=False) if s and int(s, 0) >= _SEVERITY_ERROR]
        if malformed and not any("Malformed" in m for m in errors):
            errors.append("Malformed Packet")
        problems.append(f"frame {frame}: " + "; ".join(errors or ["(error)"]))
    return problems


def tshark_count(path: str | os.PathLike[str]) -> int:
    """How many frames tshark reads from the capture."""
    out = _run(["-r", os.fspath(path), "-T", "fields", "-e", "frame.number"])
    return sum(1 for line in out.splitlines() if line.strip())
