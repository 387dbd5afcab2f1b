"""The public socket API, shaped like Python's :mod:`socket`::

    from usertcp import socket as usocket
    s = usocket.socket(usocket.AF_INET, usocket.SOCK_STREAM, host=h)

See :mod:`usertcp.api.sockets` for the semantics (blocking model, deviations).
"""

from __future__ import annotations

from usertcp.api.calls import *  # noqa: F403 - this module *is* the re-export
from usertcp.api.calls import __all__ as _calls_all
from usertcp.api.constants import *  # noqa: F403
from usertcp.api.constants import __all__ as _constants_all
from usertcp.api.sockets import *  # noqa: F403
from usertcp.api.sockets import __all__ as _sockets_all

__all__ = sorted(set(_calls_all) | set(_constants_all) | set(_sockets_all))
