"""Script fragments the drill tests share."""

from __future__ import annotations


def passive_open(*, mss: int = 1000, ack_delay: str = "+.1") -> str:
    """A passive open in packetdrill's default form (no timestamps), as the prefix of a small
    script: the peer offers ``mss``, and its ACK of the SYN-ACK comes ``ack_delay`` later."""
    return f"""\
    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
   +0 setsockopt(3, SOL_SOCKET, SO_REUSEADDR, [1], 4) = 0
   +0 bind(3, ..., ...) = 0
   +0 listen(3, 1) = 0
   +0 < S 0:0(0) win 32792 <mss {mss},sackOK,nop,nop,nop,wscale 7>
   +0 > S. 0:0(0) ack 1 <mss 1460,nop,nop,sackOK,nop,wscale 8>
{ack_delay:>5} < . 1:1(0) ack 1 win 257
   +0 accept(3, ..., ...) = 4
"""
