"""The receive window, as Linux chooses it: the first one and every one after the handshake.

Linux offers a share of its receive buffer as window: ``tcp_win_from_space`` scales buffer
space (counted in skb truesize) by the connection's ``scaling_ratio``, the payload/truesize
ratio it measured on full-sized segments (tcp_measure_rcv_mss; 50 % until then). The first
window (tcp_select_initial_window) is that share of the whole buffer, rounded down to whole
segments, at most 64 KB before the handshake has shown the peer scales windows; the window
scale covers the largest buffer the socket could grow to (tcp_rmem[2], net.core.rmem_max),
unless SO_RCVBUF locked the buffer: then the window is clamped to that buffer's space and the
scale only covers it (tcp_openreq_init_rwin / tcp_connect_init: ``Receive.init_window``).

After the handshake every segment's window comes from ``select_window`` (__tcp_select_window):
the free space, at most ``rcv_ssthresh`` (which ``grow_increment`` opens as data arrives,
tcp_grow_window), rounded up to the scale unit; zero once the free space falls below a segment
or 1/16 of the buffer. ``Receive.select_window`` (tcp_select_window) never lets the right edge
move left unless ``net.ipv4.tcp_shrink_window`` allows it.

Measured against this machine's kernel by ``tools/kernel_receive_probe.py``: the SYN-ACK window
and scale for several SO_RCVBUF values, and the window of every ACK while a receiver that does
not read fills up, predicted from the kernel's own truesize and scaling ratio.

Every function here is integer arithmetic on its arguments: the per-ACK path calls it.
"""

from __future__ import annotations

from typing import Final

__all__ = ["DEFAULT_SCALING_RATIO", "RMEM_MAX", "SOCK_MIN_RCVBUF", "TCP_MAX_WSCALE", "TS_OPTION_SPACE",
           "WMEM_MAX", "grow_increment", "initial_window", "scaling_ratio", "select_initial_window",
           "select_window", "space_from_win", "win_from_space"]

TCP_MAX_WSCALE: Final = 14            # RFC 7323 §2.3
U16_MAX: Final = 0xFFFF
RMEM_MAX: Final = 212992              # net.core.rmem_max default (x86-64: SK_RMEM_MAX)
WMEM_MAX: Final = 212992              # net.core.wmem_max default (SK_WMEM_MAX)
SOCK_MIN_RCVBUF: Final = 2304   # Linux SOCK_MIN_RCVBUF on x86-64 (2048 + sizeof(struct sk_buff), doubled)
TS_OPTION_SPACE: Final = 12           # TCPOLEN_TSTAMP_ALIGNED
RMEM_TO_WIN_SCALE: Final = 8          # Linux TCP_RMEM_TO_WIN_SCALE
DEFAULT_SCALING_RATIO: Final = 1 << (RMEM_TO_WIN_SCALE - 1)   # TCP_DEFAULT_SCALING_RATIO: half the buffer


def win_from_space(space: int, ratio: int = DEFAULT_SCALING_RATIO) -> int:
    """Linux __tcp_win_from_space: the window ``space`` bytes of buffer (truesize) hold."""
    return (space * ratio) >> RMEM_TO_WIN_SCALE


def space_from_win(win: int, ratio: int) -> int:
    """Linux __tcp_space_from_win: the buffer (truesize) a window of ``win`` bytes needs."""
    return (win << RMEM_TO_WIN_SCALE) // ratio


def scaling_ratio(length: int, truesize: int) -> int:
    """Linux tcp_measure_rcv_mss: payload per buffer byte of a full-sized segment, in 1/256
    (a u8 there: at least 1, at most 255)."""
    ratio = (length << RMEM_TO_WIN_SCALE) // truesize if truesize > 0 else DEFAULT_SCALING_RATIO
    return min(max(ratio, 1), 255)


def select_initial_window(space: int, mss: int, window_clamp: int, wscale_ok: bool,
                          rmem2: int, rmem_max: int = RMEM_MAX) -> tuple[int, int, int]:
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
        scale_space = min(max(space, rmem2, rmem_max), window_clamp)
        wscale = min(max(scale_space.bit_length() - 1 - 15, 0), TCP_MAX_WSCALE)
    return rcv_wnd, min(U16_MAX << wscale, window_clamp), wscale


def initial_window(rcvbuf: int, locked: bool, window_clamp: int, mss: int, wscale_ok: bool, rmem2: int,
                   rmem_max: int) -> tuple[int, int, int]:
    """The first window of a buffer of ``rcvbuf`` bytes: (rcv_wnd, window_clamp, rcv_wscale).

    As tcp_openreq_init_rwin / tcp_connect_init / cookie_v4_check: a buffer the user locked
    (SO_RCVBUF) also clamps the window to its space, and the scale then covers only that.
    """
    full = win_from_space(rcvbuf)                 # tcp_full_space at the default ratio
    if locked and (window_clamp == 0 or window_clamp > full):
        window_clamp = full
    return select_initial_window(full, mss, window_clamp, wscale_ok, rmem2, rmem_max)


def select_window(free_space: int, allowed_space: int, full_space: int, rcv_ssthresh: int, wscale: int,
                  mss: int, rcv_wnd: int, shrink: bool) -> int:
    """Linux __tcp_select_window, its arithmetic: the window to offer now (unscaled bytes).

    ``free_space`` is tcp_space (the window the unused buffer holds), ``allowed_space``
    tcp_full_space (the whole buffer's), ``full_space`` that bounded by window_clamp;
    ``rcv_wnd`` the window offered last. The caller does what Linux does beside it when the
    free space is below half (quick-ACKs end; under memory pressure rcv_ssthresh drops first).
    ``shrink``: net.ipv4.tcp_shrink_window with a window scale in use.
    """
    if mss > full_space:
        mss = full_space
        if mss <= 0:
            return 0
    unit = 1 << wscale
    if shrink:
        # The offer is always a multiple of the scale unit; rounded down, it may shrink.
        free_space &= -unit
        if free_space < full_space >> 1 and (free_space < allowed_space >> 4 or free_space < mss
                                             or free_space < unit):
            return 0
        if free_space > rcv_ssthresh:
            # rcv_ssthresh is no hard limit (sk_rcvbuf is): round it up
            free_space = (rcv_ssthresh + unit - 1) & -unit
        return free_space
    if free_space < full_space >> 1:
        # Move to a zero window rather than let tcp_clamp_window grow the buffer: below a
        # segment, or below 1/16 of the buffer (with a large window the segment test comes late).
        free_space &= -unit
        if free_space < allowed_space >> 4 or free_space < mss:
            return 0
    if free_space > rcv_ssthresh:
        free_space = rcv_ssthresh
    if wscale:
        # Offer enough that scaling does not round it away (ALIGN up to the unit).
        return (free_space + unit - 1) & -unit
    # Unscaled: a whole number of segments, kept while within one segment of the free space
    # (saves the division), or the whole free space once it is much more than the offer.
    window = rcv_wnd
    if window <= free_space - mss or window > free_space:
        return free_space - free_space % mss
    if mss == full_space and free_space > window + (full_space >> 1):
        return free_space
    return window


def grow_increment(length: int, truesize: int, ratio: int, rcv_ssthresh: int, rmem2: int, rcv_mss: int,
                   advmss: int) -> int:
    """Linux tcp_grow_window's step (before the room limit): how far a segment of ``length``
    payload bytes in ``truesize`` buffer bytes opens rcv_ssthresh; 0 if its overhead is too
    large for the buffer it would need (__tcp_grow_window)."""
    if (truesize * ratio) >> RMEM_TO_WIN_SCALE <= length:
        incr = 2 * advmss
    else:
        incr = 0
        half = ((truesize * ratio) >> RMEM_TO_WIN_SCALE) >> 1
        window = ((rmem2 * ratio) >> RMEM_TO_WIN_SCALE) >> 1
        while rcv_ssthresh <= window:
            if half <= length:
                incr = 2 * rcv_mss
                break
            half >>= 1
            window >>= 1
    if incr:
        incr = max(incr, 2 * length)
    return incr
