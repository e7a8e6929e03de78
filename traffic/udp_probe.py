"""Constant-rate UDP probes with per-packet timestamps and ECN codepoints
(run inside Mininet hosts with popen): the measurement behind the ECN
marking tests.

``python -m traffic.udp_probe recv PORT DEADLINE_S OUT.json [IDLE_S]``
    prints READY, records every datagram until DEADLINE_S seconds pass or
    IDLE_S (default 1) seconds pass without one after the first measured (not warm-up) one: ``{"packets": [[flow, seq,
    t_send_ns, t_recv_ns, ecn, length_bytes], ...]}``. ``t_recv_ns`` is the
    kernel's receive timestamp (SO_TIMESTAMPNS), ``ecn`` the IP ECN field of
    the arriving packet (IP_RECVTOS), ``length_bytes`` the Ethernet frame's length.
``python -m traffic.udp_probe send DST_IP PORT RATE_MBPS PACKETS FRAME_BYTES TOS FLOW START_AT_UNIX_S [WARMUP [SPORT]]``
    prints READY, sends WARMUP packets (default 0) at a quarter of the rate,
    flagged with :data:`WARMUP_FLAG` in their flow field (so the switches'
    flow caches hold this 5-tuple before the measurement: on Open vSwitch's
    kernel datapath a flow's first packets go up to ovs-vswitchd, tens of
    milliseconds under an emulated CPU), waits until START_AT, then sends PACKETS datagrams whose
    Ethernet frames are FRAME_BYTES long, paced at RATE_MBPS (of frames) on
    the monotonic clock, every one with IP TOS byte TOS (2 = ECT(0) on every
    packet, the first included: case T4), through one socket (bound to source port SPORT when
    given: the 5-tuple, and so the ECMP path, is then the caller's choice). Each payload
    carries (flow, seq, t_send_ns). Prints ``sent N achieved_mbps X``.

All hosts of a Mininet fabric share one kernel clock, so t_recv - t_send is
the one-way delay; its excess over the idle path's is the queueing delay.
"""
from __future__ import annotations

import json
import socket
import struct
import sys
import time

HEADER = struct.Struct("!IIQ")     # flow, seq, t_send_ns
#: Set in the flow field of warm-up packets.
WARMUP_FLAG = 0x80000000
ETH_IP_UDP_BYTES = 14 + 20 + 8
SO_TIMESTAMPNS = 35
IP_RECVTOS = 13


def recv(port: int, deadline_s: float, out: str, idle_s: float = 1.0) -> None:
    """Record every datagram on ``port`` (see the module docstring)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 2**20)
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    s.setsockopt(socket.IPPROTO_IP, IP_RECVTOS, 1)
    s.bind(("0.0.0.0", port))
    s.settimeout(0.2)
    print("READY", flush=True)
    end = time.monotonic() + deadline_s
    last = None
    rows = []
    while time.monotonic() < end and (last is None or time.monotonic() - last < idle_s):
        try:
            data, anc, _flags, _addr = s.recvmsg(65536, 256)
        except socket.timeout:
            continue
        t_recv = time.time_ns()
        ecn = -1
        for level, typ, val in anc:
            if level == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS:
                sec, nsec = struct.unpack("=qq", val[:16])
                t_recv = sec * 10**9 + nsec
            elif level == socket.IPPROTO_IP and typ == socket.IP_TOS:
                ecn = val[0] & 3
        if len(data) >= HEADER.size:
            flow, seq, t_send = HEADER.unpack_from(data)
            rows.append([flow, seq, t_send, t_recv, ecn, len(data) + ETH_IP_UDP_BYTES])
            if not flow & WARMUP_FLAG:      # the idle timeout starts with the measured packets
                last = time.monotonic()
    with open(out, "w") as f:
        json.dump({"packets": rows}, f)


def send(dst: str, port: int, rate_mbps: float, packets: int, frame_bytes: int, tos: int, flow: int,
         start_at: float, warmup: int = 0, sport: int = 0) -> None:
    """Send ``packets`` frames of ``frame_bytes`` at ``rate_mbps`` with TOS ``tos``, from source port
    ``sport`` (0: the kernel's choice) (see the module docstring)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
    if sport:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", sport))
    to = (dst, port)          # not connected: a sender whose link is down (a flap) keeps going
    payload = bytearray(frame_bytes - ETH_IP_UDP_BYTES)
    gap_s = frame_bytes * 8 / (rate_mbps * 1e6)
    print("READY", flush=True)
    for seq in range(warmup):
        HEADER.pack_into(payload, 0, flow | WARMUP_FLAG, seq, time.time_ns())
        try:
            s.sendto(payload, to)
        except OSError:
            pass
        time.sleep(4 * gap_s)
    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)
    t0 = time.monotonic()
    due = t0
    sent = 0
    for seq in range(packets):
        while True:
            now = time.monotonic()
            left = due - now
            if left <= 0:
                break
            if left > 0.0003:
                time.sleep(left - 0.0002)
        # catch up only gently: no two packets leave closer than 0.6 gaps, so a sender run at up to
        # 60% of its host link never queues in its own NIC (that delay would not be the switch's)
        due = max(due + gap_s, now + 0.6 * gap_s)
        HEADER.pack_into(payload, 0, flow, seq, time.time_ns())
        try:
            s.sendto(payload, to)
            sent += 1
        except OSError as e:   # a full host queue (ENOBUFS): counted, never silent
            print(f"send error seq {seq}: {e}", file=sys.stderr)
    wall = time.monotonic() - t0
    achieved = sent * frame_bytes * 8 / wall / 1e6 if wall > 0 else 0.0
    print(f"sent {sent} achieved_mbps {achieved:.3f}", flush=True)


def main(argv: list[str]) -> int:
    """CLI entry (see the module docstring); exit 2 on bad arguments."""
    try:
        if argv[0] == "recv":
            recv(int(argv[1]), float(argv[2]), argv[3], float(argv[4]) if len(argv) > 4 else 1.0)
        elif argv[0] == "send":
            send(argv[1], int(argv[2]), float(argv[3]), int(argv[4]), int(argv[5]), int(argv[6]), int(argv[7]),
                 float(argv[8]), int(argv[9]) if len(argv) > 9 else 0, int(argv[10]) if len(argv) > 10 else 0)
        else:
            raise ValueError(argv[0])
    except (IndexError, ValueError) as e:
        print(f"usage: see python -m traffic.udp_probe's docstring ({e})", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
