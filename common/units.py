"""Sizes every layer shares (pure constants; nothing here touches the machine or a scenario)."""

#: A full-size Ethernet frame as a veth and the shapers count it: 1500 B MTU + 14 B header.
FRAME_BYTES = 1514

#: Bytes a TCP segment carries besides its payload on the wire as the shapers count them:
#: Ethernet header 14 + IPv4 20 + TCP 20 + the timestamp option 12 (a 1448-byte segment in a
#: 1514-byte frame).
TCP_FRAME_OVERHEAD_BYTES = 66


def tcp_wire_bytes(payload_bytes: int, mss_bytes: int = FRAME_BYTES - TCP_FRAME_OVERHEAD_BYTES) -> int:
    """The bytes on the wire (Ethernet frames without preamble or FCS, as the shapers count them)
    of ``payload_bytes`` of one TCP connection's data cut into segments of at most ``mss_bytes``
    (default 1448: a 1500-byte MTU with timestamps); 0 for no payload. Handshake, ACKs and
    retransmissions are not counted.

    Raises:
        ValueError: ``payload_bytes`` negative or ``mss_bytes`` not positive.
    """
    if payload_bytes < 0 or mss_bytes <= 0:
        raise ValueError(f"payload_bytes must be >= 0 and mss_bytes > 0, got {payload_bytes}, {mss_bytes}")
    return payload_bytes + -(-payload_bytes // mss_bytes) * TCP_FRAME_OVERHEAD_BYTES

#: How late the port shaper's timer may fire without costing the line time: the shaper's bucket
#: holds what the line sends in this long (see :func:`shaper_burst_bytes`;
#: controller.timers.shaper_slack_s says why it is not the machine's measured timer lateness).
SHAPER_SLACK_S = 100e-6


def shaper_burst_bytes(rate_bps: float, slack_s: float = SHAPER_SLACK_S) -> int:
    """The port shaper's (HTB's) burst for a line of ``rate_bps``: the bytes the line sends in
    ``slack_s`` (default :data:`SHAPER_SLACK_S`, what controller.timers.shaper_slack_s gives), at
    least a tenth of a frame, at most one frame.

    HTB sends while its bucket is not negative and then charges the frame, so after an idle spell
    a bucket of B bytes lets the next frame follow the first (B / rate) seconds early: at most one
    frame ensures no two full frames ever leave back to back, and a port never runs ahead of its
    line by more than B. A bucket also absorbs a dequeue timer that fires late, up to B / rate,
    without losing line time. Measured on this machine kind (one TCP flow, 3 s, through one HTB
    port with single-frame packets, idle and with both cores busy): with B = 1 byte a 100 Mbit/s
    port sent 0.88 of its rate while backlogged; with this rule (1250 B there) 0.9997-0.9999, and
    the gaps between dequeues were within 10% of one frame time for 99.6-99.8% of frames at
    10 Mbit/s, 98.7-98.8% at 50, 97.5% at 100.

    Under qemu's software emulation (the VM lane) a 10 Mbit/s port sent 0.96 of its rate with
    this rule and 0.98 with a one-frame bucket (one flow, idle VM): the emulated CPU is short there.

    Raises:
        ValueError: ``rate_bps`` or ``slack_s`` not positive.
    """
    if not rate_bps > 0 or not slack_s > 0:
        raise ValueError(f"rate_bps and slack_s must be > 0, got {rate_bps}, {slack_s}")
    return int(min(FRAME_BYTES, max(FRAME_BYTES // 10, round(rate_bps * slack_s / 8))))


#: Upper bound of the kernel's truesize (the memory a socket is charged) for one full-size
#: frame, in bytes: what a frame held in a send buffer costs.
FRAME_TRUESIZE_BYTES = 4096
