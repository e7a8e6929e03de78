"""Socket helpers every traffic agent shares (run inside a Mininet host's namespace)."""
from __future__ import annotations

import socket
import time

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


def wait_until(t_unix_s: float) -> None:
    """Sleep until the absolute time ``t_unix_s`` (Unix seconds; returns at once if past)."""
    while True:
        d = t_unix_s - time.time()
        if d <= 0:
            return
        time.sleep(d if d < 0.05 else d - 0.01)


def tcp_active_opens() -> int:
    """This network namespace's ``Tcp: ActiveOpens`` from /proc/net/snmp: connections it has
    started (SYNs sent by connect(), first transmissions only), since the namespace was made."""
    with open("/proc/net/snmp") as f:
        rows = [line.split() for line in f if line.startswith("Tcp:")]
    return int(dict(zip(rows[0][1:], rows[1][1:]))["ActiveOpens"])
