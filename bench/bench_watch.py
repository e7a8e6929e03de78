"""Benchmark: the cost of the checks that watch every round, on the default fabric.

    sudo make bench-watch        (or: .venv/bin/python bench/bench_watch.py [--reads N] [--runs R])

On the default scenario's fabric (40 shaped switch ports, 24 hosts) it times, per read: the
watcher's qdisc-tree read of every switch port and host NIC (controller.dataplane.tcqdisc.QdiscTrees,
once a second in a round; one dump in the root namespace and one in each host's) and the CPU-headroom reading (experiments.features.cpu.read_times, once a second), beside
the queue sampler's counter read of the same ports (controller.qstats.QdiscStatsReader, 200 times
a second), measured in the same run: CPU milliseconds per read (median of the runs) and the ratio
of each to the sampler's read, and what each costs per second of a round in % of one core.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def per_read_ms(fn, reads: int) -> float:
    """CPU milliseconds per call of ``fn`` over ``reads`` calls."""
    c0 = time.process_time()
    for _ in range(reads):
        fn()
    return (time.process_time() - c0) / reads * 1e3


def main() -> int:
    """Bring the default fabric up, time the reads, print medians and ratios."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reads", type=int, default=50)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    from controller import qstats
    from controller.dataplane import ovsctl, tcqdisc
    from experiments import probe
    from experiments.fabric import LiveFabric
    from experiments.features import cpu
    from experiments.plan import build_fabric
    from experiments.scenario import load_scenario
    from experiments.state import RunState
    sc = load_scenario(ROOT / "experiments/scenarios/incast.yaml")
    fab = build_fabric(sc)
    res: dict[str, list[float]] = {"sampler_read": [], "qdisc_trees": [], "cpu_reading": []}
    with tempfile.TemporaryDirectory(prefix="fabriclab-bench-") as tmp, RunState("bench-watch") as st:
        with LiveFabric(fab, Path(tmp), st, datapath=probe.probe()["datapath"],
                        switch_queue=lambda r: tcqdisc.PortQueue(r, buffer_packets=100)) as lf:
            ports = lf.fabric.switch_interfaces()
            nics = {h["intf"]: lf.host(h["name"]).pid for h in fab.to_map()["hosts"]}
            trees = tcqdisc.QdiscTrees(ports, nics)
            sampler = qstats.QdiscStatsReader(qstats.ifindexes_for(ports))
            pids = {"ovs-vswitchd": ovsctl.ovs_vswitchd_pid(), "controller": lf.controller.pid,
                    "runner": os.getpid()}
            try:
                for _ in range(a.runs):
                    res["sampler_read"].append(per_read_ms(sampler.read, a.reads))
                    res["qdisc_trees"].append(per_read_ms(trees, a.reads))
                    res["cpu_reading"].append(per_read_ms(lambda: cpu.read_times(pids), a.reads))
            finally:
                sampler.close()
                trees.close()
    base = statistics.median(res["sampler_read"])
    print(f"default fabric, {len(ports)} switch ports, {len(nics)} host NICs; {a.runs} runs of {a.reads} reads; CPU ms per read, "
          "min / median / max")
    for name, hz in (("sampler_read", 200), ("qdisc_trees", 1), ("cpu_reading", 1)):
        v = res[name]
        med = statistics.median(v)
        print(f"  {name:13s} {min(v):7.3f} / {med:7.3f} / {max(v):7.3f} ms; x{med / base:6.1f} the sampler's read; "
              f"at {hz} Hz {med * hz / 10:.2f}% of one core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
