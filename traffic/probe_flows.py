"""One TCP flow at a time, each from a chosen source port: for watching which
path ECMP gives each 5-tuple (run inside Mininet hosts with popen).

``python -m traffic.probe_flows sink PORT DEADLINE_S``
    accepts connections on PORT, reads each to EOF, closes it; prints READY
    once listening; exits after DEADLINE_S seconds.
``python -m traffic.probe_flows source DST_IP PORT``
    prints READY, then for every stdin line ``SPORT BYTES`` opens one TCP
    connection from source port SPORT, sends BYTES, half-closes, waits for the
    sink's close (so every data packet has arrived), and prints
    ``done SPORT`` (or ``error SPORT <reason>``). Ends at stdin EOF.
"""
from __future__ import annotations

import socket
import sys
import threading
import time


def sink(port: int, deadline_s: float) -> None:
    """Accept and drain connections on ``port`` until ``deadline_s`` seconds have passed."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(128)
    srv.settimeout(0.5)
    print("READY", flush=True)
    end = time.monotonic() + deadline_s

    def drain(c: socket.socket) -> None:
        with c:
            while c.recv(65536):
                pass
    while time.monotonic() < end:
        try:
            c, _ = srv.accept()
        except socket.timeout:
            continue
        threading.Thread(target=drain, args=(c,), daemon=True).start()


def one_flow(dst_ip: str, port: int, sport: int, nbytes: int, timeout_s: float = 20.0) -> None:
    """Send ``nbytes`` on a new TCP connection from ``sport``; return once the sink has closed.

    Raises:
        OSError: bind/connect/send failed or timed out.
    """
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.settimeout(timeout_s)
        s.bind(("0.0.0.0", sport))
        s.connect((dst_ip, port))
        s.sendall(b"\0" * nbytes)
        s.shutdown(socket.SHUT_WR)
        while s.recv(4096):
            pass


def source(dst_ip: str, port: int) -> None:
    """Run :func:`one_flow` for every ``SPORT BYTES`` line on stdin (see module doc)."""
    print("READY", flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        sport, nbytes = (int(x) for x in line.split())
        try:
            one_flow(dst_ip, port, sport, nbytes)
            print(f"done {sport}", flush=True)
        except OSError as e:
            print(f"error {sport} {e}", flush=True)


def main(argv: list[str]) -> int:
    """Command line entry (see module doc); exit 2 on bad arguments."""
    if len(argv) == 3 and argv[0] == "sink":
        sink(int(argv[1]), float(argv[2]))
        return 0
    if len(argv) == 3 and argv[0] == "source":
        source(argv[1], int(argv[2]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
