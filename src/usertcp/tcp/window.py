"""The receive window a connection starts with, as Linux chooses it (tcp_select_initial_window).

Linux offers half its receive buffer as window (tcp_full_space: tcp_win_from_space at the
default scaling ratio of 50 %), rounded down to whole segments, at most 64 KB before the
handshake has shown the peer scales windows; the window scale covers the largest buffer the
socket could grow to (tcp_rmem[2], net.core.rmem_max), unless SO_RCVBUF locked the buffer:
then the window is clamped to that buffer's space and the scale only covers it
(tcp_openreq_init_rwin / tcp_connect_init: ``Receive.init_window`` applies it to a connection).
Measured against this machine's kernel by
``tools/kernel_receive_probe.py`` (SYN-ACK window and scale for several SO_RCVBUF values).
"""

from __future__ import annotations

from typing import Final

__all__ = ["RMEM_MAX", "TCP_MAX_WSCALE", "TS_OPTION_SPACE", "select_initial_window", "win_from_space"]

TCP_MAX_WSCALE: Final = 14            # RFC 7323 §2.3
U16_MAX: Final = 0xFFFF
RMEM_MAX: Final = 212992              # net.core.rmem_max default (x86-64)
TS_OPTION_SPACE: Final = 12           # TCPOLEN_TSTAMP_ALIGNED


def win_from_space(space: int) -> int:
    """Linux tcp_win_from_space at TCP_DEFAULT_SCALING_RATIO: half the buffer is window."""
    return space // 2


def select_initial_window(space: int, mss: int, window_clamp: int, wscale_ok: bool,
                          rmem2: int) -> tuple[int, int, int]:
    """Linux tcp_select_initial_window: (rcv_wnd, window_clamp, rcv_wscale).

    ``space`` is the full window space of the buffer, ``window_clamp`` 0 for none.
    """
    if window_clamp == 0:
        window_clamp = U16_MAX << TCP_MAX_WSCALE
    space = min(window_clamp, max(space, 0))
    if space > mss:
        space -= space % mss          # quantize the offer to whole segments
    rcv_wnd = min(space, U16_MAX)
    wscale = 0
    if wscale_ok:
        scale_space = min(max(space, rmem2, RMEM_MAX), window_clamp)
        wscale = min(max(scale_space.bit_length() - 1 - 15, 0), TCP_MAX_WSCALE)
    return rcv_wnd, min(U16_MAX << wscale, window_clamp), wscale
