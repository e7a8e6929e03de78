"""RoCEv2 sender speed (issue 7): packets/s of one sender process with 1 KB payloads.

Three ways to put RoCEv2 frames (Ether / IPv4 / UDP 4791 / BTH / 1024 B / ICRC)
on one interface, measured in the same run, alternating, ``--runs`` times each,
for ``--seconds`` each:

- ``scapy_sendp``: the plain scapy loop, one ``sendp(Ether()/IP()/UDP()/BTH(psn=i)/payload)``
  per packet (scapy builds the frame and opens and binds a packet socket per call: case T5; the bind alone
  took ~16 ms here).
- ``scapy_sendp_count``: for context, scapy at its best without a socket of one's own: one packet
  built once, sent by ``sendp(pkt, count=N)`` (one socket, the same frame each time: no PSNs).
- ``fabriclab``: traffic.roce's sender QP (the agent's own code path): go-back-N
  requester, frame template patched per PSN with its ICRC, token bucket (set far
  above what the CPU can send), one persistent AF_PACKET socket; a cumulative ACK
  every 16 packets is fed back in-process, as the responder would send it.
- ``prebuilt_ceiling``: one constant prebuilt frame sent in a bare loop on the same kind of socket:
  what the socket and the kernel cost alone.

The interface is a veth pair made for the run (recorded, removed at the end, also
after a crash: experiments.state). Prints medians, the ratio fabriclab / sendp and
the targets (at least 100x sendp and at least 100,000 packets/s).

``sudo .venv/bin/python bench/bench_roce_sender.py [--runs 3] [--seconds 3]``
"""
from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from common import roce  # noqa: E402
from experiments import probe  # noqa: E402
from experiments.state import RunState  # noqa: E402
from traffic.roce import SenderQp  # noqa: E402

IF_A, IF_B = "flbench-roce0", "flbench-roce1"
PAYLOAD_BYTES = 1024
TARGET_RATIO, TARGET_PPS = 100, 100_000
SRC = {"mac": "02:00:00:00:aa:01", "ip": "10.254.0.1"}
PEER = {"mac": "02:00:00:00:aa:02", "ip": "10.254.0.2", "qpn": 0x22}


def make_veth() -> None:
    from pyroute2 import IPRoute
    with IPRoute() as ip:
        ip.link("add", ifname=IF_A, kind="veth", peer=IF_B)
        for name in (IF_A, IF_B):
            ip.link("set", index=ip.link_lookup(ifname=name)[0], state="up")


def tx_socket() -> socket.socket:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    s.bind((IF_A, 0))
    return s


def scapy_sendp(seconds: float) -> float:
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.sendrecv import sendp
    payload = bytes(PAYLOAD_BYTES)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        sendp(Ether(src=SRC["mac"], dst=PEER["mac"]) / IP(src=SRC["ip"], dst=PEER["ip"], tos=(26 << 2) | 2) /
              UDP(sport=49152, dport=4791, chksum=0) / BTH(opcode=1, dqpn=PEER["qpn"], psn=n) / payload,
              iface=IF_A, verbose=False)
        n += 1
    return n / (time.perf_counter() - t0)


def scapy_sendp_count(seconds: float) -> float:
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.sendrecv import sendp
    pkt = (Ether(src=SRC["mac"], dst=PEER["mac"]) / IP(src=SRC["ip"], dst=PEER["ip"], tos=(26 << 2) | 2) /
           UDP(sport=49152, dport=4791, chksum=0) / BTH(opcode=1, dqpn=PEER["qpn"]) / bytes(PAYLOAD_BYTES))
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        sendp(pkt, iface=IF_A, count=200, verbose=False)
        n += 200
    return n / (time.perf_counter() - t0)


def fabriclab_sender(seconds: float) -> tuple[float, dict]:
    job = {"line_rate_mbps": 1e6, "mode": "none", "rate_mbps": 1e6, "dscp": 26, "mtu_bytes": PAYLOAD_BYTES}
    flow = {"flow_id": 0, "qpn": 0x11, "udp_sport": 49152, "peer": PEER, "duration_s": seconds + 1,
            "message_bytes": 256 * PAYLOAD_BYTES}
    tx = tx_socket()
    tx.setblocking(False)
    q = SenderQp(flow, job, SRC["mac"], SRC["ip"])
    q.start(time.monotonic(), time.time() - time.monotonic())
    t0 = time.perf_counter()
    acked = 0
    while time.perf_counter() - t0 < seconds:
        q.post_due(time.monotonic())
        q.pump(tx, 16)
        sent = q.stats["packets_sent"]
        if sent - acked >= 16:                       # the responder's coalesced ACK
            q.req.on_ack(q.req.highest_sent_psn, time.monotonic())
            acked = sent
    dt = time.perf_counter() - t0
    tx.close()
    return q.stats["packets_sent"] / dt, {k: q.stats[k] for k in ("blocked_sends", "host_queue_full")}


def prebuilt_ceiling(seconds: float) -> float:
    frame = roce.FrameTemplate(roce.Endpoint(SRC["mac"], SRC["ip"], 49152, 0x11),
                               roce.Endpoint(PEER["mac"], PEER["ip"], 0, PEER["qpn"]), (26 << 2) | 2).frame(
        roce.SEND_MIDDLE, 0, False, PAYLOAD_BYTES)
    tx = tx_socket()
    send = tx.send
    n, t0 = 0, time.perf_counter()
    while True:
        for _ in range(1000):
            send(frame)
        n += 1000
        if time.perf_counter() - t0 >= seconds:
            break
    dt = time.perf_counter() - t0
    tx.close()
    return n / dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args()
    env = probe.probe()
    res = {"scapy_sendp": [], "scapy_sendp_count": [], "fabriclab": [], "prebuilt_ceiling": [], "pushback": []}
    with RunState("bench-roce") as st:
        st.claim([], [IF_A, IF_B])
        make_veth()
        for i in range(a.runs):
            res["scapy_sendp"].append(scapy_sendp(min(a.seconds, 2.0)))
            res["scapy_sendp_count"].append(scapy_sendp_count(min(a.seconds, 2.0)))
            pps, push = fabriclab_sender(a.seconds)
            res["fabriclab"].append(pps)
            res["pushback"].append(push)
            res["prebuilt_ceiling"].append(prebuilt_ceiling(a.seconds))
            print(f"run {i + 1}: scapy sendp {res['scapy_sendp'][-1]:,.0f} pkt/s (count=200: "
                  f"{res['scapy_sendp_count'][-1]:,.0f}), fabriclab sender "
                  f"{pps:,.0f} pkt/s ({push}), prebuilt ceiling {res['prebuilt_ceiling'][-1]:,.0f} pkt/s", flush=True)
    med = {k: statistics.median(v) for k, v in res.items() if k != "pushback"}
    ratio = med["fabriclab"] / med["scapy_sendp"]
    out = {"kernel": env["kernel"], "payload_bytes": PAYLOAD_BYTES,
           "frame_bytes": PAYLOAD_BYTES + roce.OVERHEAD_BYTES, "runs": res,
           "median_pps": med, "ratio_fabriclab_to_sendp": ratio,
           "ratio_fabriclab_to_sendp_count": med["fabriclab"] / med["scapy_sendp_count"],
           "fraction_of_prebuilt_ceiling": med["fabriclab"] / med["prebuilt_ceiling"],
           "target": {"ratio": TARGET_RATIO, "pps": TARGET_PPS},
           "target_met": ratio >= TARGET_RATIO and med["fabriclab"] >= TARGET_PPS}
    print(json.dumps(out, indent=1))
    print(f"median: fabriclab {med['fabriclab']:,.0f} pkt/s = {ratio:.0f}x scapy's sendp loop ({med['scapy_sendp']:,.0f}; "
          f"{out['ratio_fabriclab_to_sendp_count']:.0f}x sendp(count=200): {med['scapy_sendp_count']:,.0f}); "
          f"{out['fraction_of_prebuilt_ceiling']:.0%} of a bare prebuilt-frame loop ({med['prebuilt_ceiling']:,.0f}); "
          f"targets >= {TARGET_RATIO}x and >= {TARGET_PPS:,} pkt/s: {'met' if out['target_met'] else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
