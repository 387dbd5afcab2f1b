"""usertcp: a sans-IO TCP/IP stack in user space."""

import os as _os

__version__ = "0.1.0"

# Proposed Linux flag (the MSG_PRELOAD patch series): data written to a listening socket.
MSG_PRELOAD = 0x10000000
# usertcp's own IPPROTO_TCP option (no Linux counterpart): setsockopt replaces the listener's
# preload (empty clears it), getsockopt reads it. MSG_PRELOAD writes append, as in the patch.
TCP_PRELOAD = 0x5550
MSG_FASTOPEN = 0x20000000

if _os.environ.get("USERTCP_PURE") == "1":
    # A compiled install keeps its .py sources beside the extension modules; this makes
    # every usertcp module import from those sources (see usertcp/builds.py).
    from usertcp.builds import use_pure_sources

    use_pure_sources()
