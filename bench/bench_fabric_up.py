"""Benchmark: time from nothing to all-pairs reachable, per fabric shape.

    sudo make bench-fabric       (or: .venv/bin/python bench/bench_fabric_up.py [--runs N] [--shapes ...])

For each shape (default: Fat-Tree k=4, 6, 8 and Spine-Leaf 4x8) it starts the
controller and Mininet, waits until every switch is configured, shapes every
port (offloads off, HTB + FIFO), then probes every ordered host pair with ICMP
(experiments.reach) until all answer; then tears down. Prints the median of
the runs per phase. Baseline measured in the same run, on the smallest shape:
Mininet's own ``pingAll`` on the live fabric, against the reachability probe
(ratio of their times). Targets (issue 4): k=4 under 10 s; k=8 (128 hosts,
80 switches) under 90 s on 2 cores.
"""
from __future__ import annotations

import argparse
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


def build(shape: str):
    """The pure fabric for a shape name of :data:`SHAPES`."""
    from topologies.fattree import FatTree
    from topologies.spineleaf import SpineLeaf
    kind, kw = SHAPES[shape]
    return (FatTree if kind == "fattree" else SpineLeaf)(**kw).build()


def one_run(shape: str, baseline: bool) -> dict:
    """Bring ``shape`` up to all-pairs reachable once; return its phase times (s)."""
    from experiments import probe
    from experiments.state import RunState
    from controller.dataplane import PortQueue
    from experiments import reach
    from experiments.fabric import LiveFabric
    fab = build(shape)
    datapath = probe.probe()["datapath"]
    out = {}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fabriclab-bench-") as tmp, RunState(f"bench-{shape}") as st:
        with LiveFabric(fab, Path(tmp), st, datapath=datapath, connect_timeout_s=300,
                        switch_queue=lambda r: PortQueue(r, buffer_packets=100)) as lf:
            out.update(lf.timings_s)
            t1 = time.monotonic()
            res = reach.all_pairs(reach.live_fabric_hosts(lf), timeout_s=120)
            out["reach_s"] = time.monotonic() - t1
            out["up_to_reachable_s"] = time.monotonic() - t0
            out["pairs"], out["unreached"], out["probe_rounds"] = res.pairs, len(res.missing), res.rounds
            if baseline:
                t2 = time.monotonic()
                loss = lf.net.pingAll(timeout=2)
                out["mininet_pingall_s"] = time.monotonic() - t2
                out["mininet_pingall_loss_pct"] = loss
            t_down = time.monotonic()
        out["teardown_s"] = time.monotonic() - t_down
    out["hosts"], out["switches"] = len(fab.hosts), len(fab.switches)
    out["datapath"] = datapath
    return out


def main() -> int:
    """Run the benchmark and print medians; exit 1 if some pair was never reachable."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per shape (median printed); default 3")
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    args = ap.parse_args()
    bad = False
    for n, shape in enumerate(args.shapes):
        runs = [one_run(shape, baseline=(n == 0)) for _ in range(args.runs)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0] if isinstance(runs[0][k], (int, float))}
        bad |= any(r["unreached"] for r in runs)
        print(f"{shape}: {runs[0]['hosts']} hosts, {runs[0]['switches']} switches, datapath={runs[0]['datapath']}, "
              f"median of {len(runs)}: nothing -> all {int(med['pairs'])} pairs reachable in "
              f"{med['up_to_reachable_s']:.1f} s (controller {med['controller_s']:.1f}, mininet {med['mininet_s']:.1f}, "
              f"switches configured {med['switch_connect_s']:.1f}, ports {med.get('ports_s', 0):.1f}, "
              f"reach {med['reach_s']:.2f}); teardown {med['teardown_s']:.1f} s; "
              f"unreached pairs (worst run) {max(r['unreached'] for r in runs)}", flush=True)
        if "mininet_pingall_s" in med:
            print(f"  baseline on {shape}: Mininet pingAll {med['mininet_pingall_s']:.2f} s "
                  f"(loss {med['mininet_pingall_loss_pct']:.0f}%) vs reach {med['reach_s']:.2f} s: "
                  f"{med['mininet_pingall_s'] / med['reach_s']:.1f}x", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
