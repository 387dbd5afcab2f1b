"""usertcp: a sans-IO TCP/IP stack in user space."""

__version__ = "0.1.0"

# Proposed Linux flag (the MSG_PRELOAD patch series): data written to a listening socket.
MSG_PRELOAD = 0x10000000
MSG_FASTOPEN = 0x20000000
