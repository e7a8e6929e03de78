"""Socket helpers every traffic agent shares (run inside a Mininet host's namespace)."""
from __future__ import annotations

import socket

SO_RCVBUFFORCE = 33


def big_receive_buffer(sock: socket.socket, size_bytes: int = 8 << 20) -> None:
    """Give ``sock`` a ``size_bytes`` receive buffer: SO_RCVBUFFORCE (root may exceed
    net.core.rmem_max), else SO_RCVBUF (capped by rmem_max)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, size_bytes)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size_bytes)


def udp_receive_errors() -> dict:
    """This network namespace's UDP receive-side drop counters from /proc/net/snmp
    (``RcvbufErrors``: a full socket buffer; ``InErrors``: every receive error)."""
    with open("/proc/net/snmp") as f:
        rows = [line.split() for line in f if line.startswith("Udp:")]
    d = dict(zip(rows[0][1:], map(int, rows[1][1:])))
    return {"RcvbufErrors": d.get("RcvbufErrors", 0), "InErrors": d.get("InErrors", 0)}
