"""Cost of the ECN marker: forwarding throughput of a switch port with the marker on vs off.

One leaf, two hosts, links shaped at 1000 Mbit/s so that the forwarding
path itself (not the shaper) is the limit; iperf3 TCP from h1 to h2 for
--seconds, alternating marker off / on --runs times each on the same fabric.
The marker is this machine's: the BPF classifier (attached to every switch
port with a step profile whose K sits just under the buffer, so it runs its
full per-packet path) or, where the kernel has sch_red, RED (ecn, nodrop)
in place of the FIFO. Prints per-run figures, the medians and the ratio
on/off (issue 5's target: at least 0.90).

``sudo .venv/bin/python bench/bench_ecn_marker.py [--runs 3] [--seconds 4]``
"""
from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experiments import probe  # noqa: E402
from common.ecn import EcnProfile  # noqa: E402
from experiments.scenario import FRAME_BYTES  # noqa: E402
from experiments.state import RunState  # noqa: E402
from controller.dataplane import tcqdisc  # noqa: E402
from experiments.fabric import LiveFabric  # noqa: E402
from topologies.spineleaf import SpineLeaf  # noqa: E402

RATE_MBPS = 1000
BUFFER_PACKETS = 100


def iperf(lf, seconds: float) -> float:
    """Throughput h1 -> h2 in Mbit/s (iperf3 receiver side)."""
    srv = lf.host("h2").popen(["iperf3", "-s", "-1", "-J"], stdout=-1, stderr=-1, text=True)
    time.sleep(0.5)
    cli = lf.host("h1").popen(["iperf3", "-c", lf.fabric.node("h2").ip, "-t", str(seconds), "-J"],
                              stdout=-1, stderr=-1, text=True)
    out, err = cli.communicate(timeout=seconds + 30)
    srv.communicate(timeout=30)
    if cli.returncode != 0:
        raise RuntimeError(f"iperf3 failed: {err or out[-500:]}")
    return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args()
    env = probe.probe()
    kind = "red" if env["qdiscs"].get("red") else "bpf"
    fabric = SpineLeaf(spines=1, leaves=1, hosts_per_leaf=2, host_rate_mbps=RATE_MBPS,
                       uplink_rate_mbps=RATE_MBPS).build()
    ports = [p["intf"] for s in fabric.to_map()["switches"] for p in s["ports"] if p["peer"].startswith("h")]
    buf = BUFFER_PACKETS * FRAME_BYTES
    prof = EcnProfile("step", k_bytes=buf - 2 * FRAME_BYTES)
    queue = tcqdisc.PortQueue(RATE_MBPS, buffer_packets=BUFFER_PACKETS)
    rows = {"off": [], "on": []}
    with tempfile.TemporaryDirectory(prefix="fabriclab-bench-ecn-") as tmp, RunState("bench-ecn") as st, \
            LiveFabric(fabric, Path(tmp), st, datapath=env["datapath"], switch_queue=lambda r: queue,
                       host_queue=lambda r: tcqdisc.PortQueue(r, buffer_packets=1000)) as lf:
        marker = None
        if kind == "bpf":
            from controller.ecn.marker import BpfEcnMarker
            marker = BpfEcnMarker.load()

        def on():
            for intf in ports:
                if marker is not None:
                    marker.attach(intf)
                    marker.configure(socket.if_nametoindex(intf), prof, RATE_MBPS * 1e6, buf, queue.burst_bytes,
                                     reset=True)
                else:
                    tcqdisc.install_red(intf, RATE_MBPS * 1e6, buf, prof)

        def off():
            for intf in ports:
                if marker is not None:
                    marker.detach(intf)
                else:
                    tcqdisc.install_fifo_leaf(intf, queue.fifo_kind, queue.fifo_limit)

        iperf(lf, 1.0)    # warm-up: ARP, OVS flow cache
        for i in range(args.runs):
            for state, apply in (("off", off), ("on", on)):
                apply()
                rows[state].append(iperf(lf, args.seconds))
                print(f"run {i + 1} marker {state}: {rows[state][-1]:.1f} Mbit/s", flush=True)
        off()
        counters = None
        if marker is not None:
            counters = {intf: marker.read(socket.if_nametoindex(intf)) for intf in ports}
            marker.close()
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"\nmarker: {kind} ({env['datapath']} datapath, kernel {env['kernel']}); {len(ports)} ports, "
          f"links shaped at {RATE_MBPS} Mbit/s; median of {args.runs} x {args.seconds:g} s iperf3 runs each")
    print(f"  forwarding throughput, marker off: {med['off']:.1f} Mbit/s")
    print(f"  forwarding throughput, marker on:  {med['on']:.1f} Mbit/s")
    print(f"  ratio on/off: {med['on'] / med['off']:.3f}  (target >= 0.90)")
    if counters:
        print(f"  packets through the marker in the last 'on' run: "
              f"{sum(c['packets'] for c in counters.values() if c)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
