"""What a drill run returns, and the two ways a script stops early (fail / skip)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["RunOptions", "ScriptFail", "ScriptResult", "ScriptSkip", "Status"]

Status = Literal["passed", "failed", "skipped"]


@dataclass
class RunOptions:
    ip_version: str = "ipv4"  # "ipv4" | "ipv6"
    defines: dict[str, str] = field(default_factory=dict)
    tolerance_usecs: int | None = None  # overrides the script's --tolerance_usecs
    verbose: bool = False
    # packetdrill command-line options (name -> value, "" for a flag): they win over the
    # script's own (usertcp.drill.cmdline)
    options: dict[str, str] = field(default_factory=dict)


@dataclass
class ScriptResult:
    path: str
    status: Status
    line: int | None = None
    reason: str = ""
    ip_version: str = "ipv4"
    details: list[str] = field(default_factory=list)  # diff / log lines
    virtual_time: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "status": self.status, "line": self.line, "reason": self.reason,
                "ip_version": self.ip_version}  # fmt: skip


class ScriptFail(Exception):
    """The stack did not behave as the script expects (or the script is wrong): it fails."""

    def __init__(self, line: int | None, reason: str, details: list[str] | None = None) -> None:
        super().__init__(reason)
        self.line = line
        self.reason = reason
        self.details = details or []


class ScriptSkip(Exception):
    """The script needs something the runner does not model: it is skipped with the reason."""

    def __init__(self, line: int | None, reason: str) -> None:
        super().__init__(reason)
        self.line = line
        self.reason = reason
