"""``python -m usertcp``: the same as the ``usertcp`` command."""

from __future__ import annotations

import sys

from usertcp.cli import main

if __name__ == "__main__":
    sys.exit(main())
