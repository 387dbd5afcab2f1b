"""usertcp.drill: packetdrill script front end (parser, AST, timing rules, Linux defaults)."""

from __future__ import annotations

from usertcp.drill.lexer import ScriptSyntaxError
from usertcp.drill.parser import parse_file, parse_script

__all__ = ["ScriptSyntaxError", "parse_file", "parse_script"]
