"""usertcp: a sans-IO TCP/IP stack in user space."""

import os as _os

__version__ = "0.1.0"

# Proposed Linux flag (the MSG_PRELOAD patch series): data written to a listening socket.
MSG_PRELOAD = 0x10000000
MSG_FASTOPEN = 0x20000000

if _os.environ.get("USERTCP_PURE") == "1":
    # A compiled install keeps its .py sources beside the extension modules; this makes
    # every usertcp module import from those sources (see usertcp/builds.py).
    from usertcp.builds import use_pure_sources

    use_pure_sources()
