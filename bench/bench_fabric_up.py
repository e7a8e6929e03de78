"""Benchmark: fabric bring-up and teardown per phase, and how each phase grows with the ports.

    sudo make bench-fabric       (or: .venv/bin/python bench/bench_fabric_up.py [--runs N]
                                  [--shapes ...] [--no-pingall])

For each shape (default: Fat-Tree k=4, 6, 8 and Spine-Leaf 4x8) it starts the controller and
Mininet, waits until every switch is configured, shapes every port (offloads off, HTB + FIFO),
probes every ordered host pair with ICMP (experiments.reach) until all answer, then tears down.
It prints each run as it ends, then per shape the median of every phase (controller, Mininet
build, OVS bridges and ports, switches configured, port queues, reachability, teardown) with the
time per port, and at the end each phase's growth exponent b in time ~ ports^b, fitted over the
shapes by least squares on log-log (b = 1: linear in the ports).

Baseline measured in the same run, on the smallest shape only: Mininet's own ``pingAll`` on the
live fabric against the reachability probe (ratio of their times); ``--no-pingall`` skips it.
SIGTERM and SIGINT tear the fabric down (the run record is cleared) and exit 143 / 130.
Targets: Fat-Tree k=8 (128 hosts, 80 switches, 768 ports) reachable in under 30 s and torn down
in under 10 s on 2 cores; time per port within 1.5x from k=4 to k=8.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHAPES = {
    "fattree-k4": ("fattree", {"k": 4}),
    "fattree-k6": ("fattree", {"k": 6}),
    "fattree-k8": ("fattree", {"k": 8}),
    "spineleaf-4x8": ("spineleaf", {"spines": 4, "leaves": 8, "hosts_per_leaf": 4}),
}
#: Printed phases: (label, key of LiveFabric.timings_s or of the run's own figures).
PHASES = (("controller", "controller_s"), ("mininet build", "mininet_build_s"), ("ovs", "ovs_s"),
          ("switches configured", "switch_connect_s"), ("port queues", "ports_s"), ("reachability", "reach_s"),
          ("up in all", "up_to_reachable_s"), ("teardown", "teardown_s"))


def build(shape: str):
    """The pure fabric for a shape name of :data:`SHAPES`."""
    from topologies.fattree import FatTree
    from topologies.spineleaf import SpineLeaf
    kind, kw = SHAPES[shape]
    return (FatTree if kind == "fattree" else SpineLeaf)(**kw).build()


def one_run(shape: str, pingall: bool) -> dict:
    """Bring ``shape`` up to all-pairs reachable once and tear it down; return its phase times (s),
    ``ports`` (interfaces), ``hosts``, ``switches``, ``pairs``, ``unreached``, ``datapath``."""
    from controller.dataplane.tcqdisc import PortQueue
    from experiments import probe, reach
    from experiments.fabric import LiveFabric
    from experiments.state import RunState, describe_report
    fab = build(shape)
    datapath = probe.probe()["datapath"]
    out = {}
    with tempfile.TemporaryDirectory(prefix="fabriclab-bench-") as tmp, RunState(f"bench-{shape}") as st:
        if st.stale_report:    # a killed earlier run's leftovers: removed before the clock starts
            print(f"  removed state of an earlier run first: {describe_report(st.stale_report)}", flush=True)
        t0 = time.monotonic()
        lf = LiveFabric(fab, Path(tmp), st, datapath=datapath, connect_timeout_s=300,
                        switch_queue=lambda r: PortQueue(r, buffer_packets=100))
        with lf:
            t1 = time.monotonic()
            res = reach.all_pairs(reach.live_fabric_hosts(lf), timeout_s=120)
            out["reach_s"] = time.monotonic() - t1
            out["up_to_reachable_s"] = time.monotonic() - t0
            out["pairs"], out["unreached"], out["probe_rounds"] = res.pairs, len(res.missing), res.rounds
            if pingall:
                print(f"  {shape}: Mininet pingAll over {len(fab.hosts) * (len(fab.hosts) - 1)} pairs ...", flush=True)
                t2 = time.monotonic()
                out["mininet_pingall_loss_pct"] = lf.net.pingAll(timeout=2)
                out["mininet_pingall_s"] = time.monotonic() - t2
            t_down = time.monotonic()
        out["teardown_s"] = time.monotonic() - t_down
        out.update(lf.timings_s)
    out["ports"] = len(fab.interface_names())
    out["hosts"], out["switches"] = len(fab.hosts), len(fab.switches)
    out["datapath"] = datapath
    return out


def growth_exponent(ports: list[int], times_s: list[float]) -> float | None:
    """Least-squares slope b of log(time) on log(ports) (time ~ ports^b); None with fewer than two
    distinct port counts or a time that is not positive."""
    if len(set(ports)) < 2 or any(t <= 0 for t in times_s):
        return None
    from scipy.stats import linregress
    return float(linregress([math.log(p) for p in ports], [math.log(t) for t in times_s]).slope)


def main() -> int:
    """Run the benchmark and print per-run lines, per-shape medians and growth exponents; exit 1
    if some pair was never reachable, 143/130 when stopped by SIGTERM/SIGINT (fabric torn down)."""
    from experiments.live import signals_unwind
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per shape (median printed); default 3")
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--no-pingall", action="store_true", help="skip the pingAll baseline on the smallest shape")
    args = ap.parse_args()
    bad = False
    fits: dict[str, tuple[list[int], list[float]]] = {key: ([], []) for _, key in PHASES}
    smallest = min(args.shapes, key=lambda s: len(build(s).interface_names()))
    with signals_unwind():
        for shape in args.shapes:
            runs = []
            for i in range(args.runs):
                r = one_run(shape, pingall=(shape == smallest and i == 0 and not args.no_pingall))
                runs.append(r)
                print(f"  {shape} run {i + 1}/{args.runs}: up {r['up_to_reachable_s']:.1f} s, "
                      f"teardown {r['teardown_s']:.1f} s", flush=True)
            med = {k: statistics.median(r[k] for r in runs if k in r) for k in runs[0]
                   if isinstance(runs[0][k], (int, float))}
            bad |= any(r["unreached"] for r in runs)
            ports = runs[0]["ports"]
            parts = ", ".join(f"{label} {med[key]:.2f} s ({1000 * med[key] / ports:.1f} ms/port)"
                              for label, key in PHASES if key in med)
            print(f"{shape}: {runs[0]['hosts']} hosts, {runs[0]['switches']} switches, {ports} ports, "
                  f"datapath={runs[0]['datapath']}, median of {len(runs)}: {parts}; all {int(med['pairs'])} pairs "
                  f"reachable, unreached pairs (worst run) {max(r['unreached'] for r in runs)}", flush=True)
            print(f"  teardown: bridges {med.get('teardown_bridges_s', 0):.2f} s, links {med.get('teardown_links_s', 0):.2f} s, "
                  f"hosts {med.get('teardown_hosts_s', 0):.2f} s", flush=True)
            if "mininet_pingall_s" in med:
                print(f"  baseline on {shape}: Mininet pingAll {med['mininet_pingall_s']:.2f} s "
                      f"(loss {med['mininet_pingall_loss_pct']:.0f}%) vs reach {med['reach_s']:.2f} s: "
                      f"{med['mininet_pingall_s'] / med['reach_s']:.1f}x", flush=True)
            for _, key in PHASES:
                if key in med:
                    fits[key][0].append(ports)
                    fits[key][1].append(med[key])
        exps = [(label, growth_exponent(*fits[key])) for label, key in PHASES]
        if any(b is not None for _, b in exps):
            print("growth exponent b (time ~ ports^b) over " + ", ".join(args.shapes) + ": "
                  + ", ".join(f"{label} {b:.2f}" for label, b in exps if b is not None), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
