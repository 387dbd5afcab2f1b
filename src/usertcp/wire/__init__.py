"""Wire format: IPv4/IPv6 and TCP headers, TCP options, the Internet checksum.

Nothing here keeps state between packets. Parsing never raises anything but
:class:`DropPacket`, which names the counter the stack increments.
"""
