"""Benchmark: the default experiment's wall time split into set-up, traffic and
teardown, and the queue sampler's achieved rate and CPU cost.

    sudo make bench            (or: .venv/bin/python bench/bench_experiment.py [--runs N])

Prints medians over the runs. Baseline measured in the same run: the same
whole-fabric qdisc dump decoded by pyroute2 (``IPRoute.get_qdiscs``), the
library route the sampler replaces, with the ratio of achievable dumps/s.
Targets (issue 2): whole default experiment under 60 s; sampler >= 200 Hz on
every switch port using < 25% of one core.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def dump_rate(names: list[str], seconds: float = 2.0) -> tuple[float, float]:
    """Back-to-back dumps/s of the fast reader and of pyroute2 on the same interfaces."""
    from pyroute2 import IPRoute

    from controller.qstats import QdiscStatsReader, ifindexes_for
    idx = ifindexes_for(names)
    r = QdiscStatsReader(idx)
    n, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < seconds:
        r.read()
        n += 1
    fast = n / (time.monotonic() - t0)
    r.close()
    with IPRoute() as ipr:
        n, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < seconds:
            ipr.get_qdiscs()
            n += 1
        slow = n / (time.monotonic() - t0)
    return fast, slow


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scenario", default=str(ROOT / "experiments/scenarios/incast.yaml"))
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="fabriclab-bench-") as tmp:
        for i in range(args.runs):
            t0 = time.monotonic()
            p = subprocess.run([sys.executable, "-m", "experiments", "run", args.scenario, "--results", tmp, "--quiet"],
                               cwd=ROOT, capture_output=True, text=True)
            wall = time.monotonic() - t0
            if p.returncode != 0:
                print(p.stderr, file=sys.stderr)
                return 1
            out = sorted(Path(tmp).iterdir())[-1]
            # a scenario with rounds (the default: drop-tail then ECN) has one summary per round
            dirs = [out / r["folder"] for r in json.loads((out / "rounds.json").read_text())["rounds"]] \
                if (out / "rounds.json").exists() else [out]
            sums = [json.loads((d / "summary.json").read_text()) for d in dirs]
            s = sums[0]
            t = json.loads((out / "timings.json").read_text())     # the run's phases (seconds)
            traffic_s = sum(x["timings_s"]["traffic_s"] for x in sums)
            rows.append({"wall_s": wall, "setup_s": t["setup_s"], "traffic_s": traffic_s,
                         "teardown_s": t["teardown_s"],
                         "analysis_plots_s": wall - t["setup_s"] - t["reachability_s"] - traffic_s - t["teardown_s"],
                         "sampler_hz": s["sampler"]["achieved_hz"], "ports": s["sampler"]["interfaces"],
                         "sampler_cpu_pct": 100 * s["sampler"]["cpu_fraction_of_one_core"]})
            print(f"run {i + 1}: " + ", ".join(f"{k}={v:.2f}" for k, v in rows[-1].items()), flush=True)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(f"\nmedian of {len(rows)} runs of {Path(args.scenario).name} (traffic: all rounds together):")
    print(f"  whole experiment (process start to exit): {med['wall_s']:.1f} s  (target < 60 s)")
    print(f"    set-up {med['setup_s']:.1f} s | traffic {med['traffic_s']:.1f} s | teardown {med['teardown_s']:.1f} s"
          f" | analysis+plots+start-up {med['analysis_plots_s']:.1f} s")
    print(f"  sampler: {med['sampler_hz']:.0f} Hz on each of {med['ports']:.0f} switch ports, "
          f"{med['sampler_cpu_pct']:.1f}% of one core  (target >= 200 Hz, < 25%)")
    # Baseline in the same run: dump rate on a fabric-sized set of shaped veths
    names = [f"flbench{i}" for i in range(40)]
    try:
        for n in names:
            subprocess.run(["ip", "link", "add", n, "type", "veth", "peer", "name", n + "p"], check=True)
            subprocess.run(["tc", "qdisc", "add", "dev", n, "root", "handle", "1:", "htb", "default", "1"], check=True)
            subprocess.run(["tc", "class", "add", "dev", n, "parent", "1:", "classid", "1:1", "htb", "rate", "10mbit"],
                           check=True)
            subprocess.run(["tc", "qdisc", "add", "dev", n, "parent", "1:1", "handle", "10:", "pfifo", "limit", "100"],
                           check=True)
        fast, slow = dump_rate(names)
        print(f"  max dump rate, 40 shaped ports: fabriclab reader {fast:.0f}/s vs pyroute2 get_qdiscs {slow:.0f}/s "
              f"(ratio {fast / slow:.1f}x)")
    finally:
        for n in names:
            subprocess.run(["ip", "link", "del", n], capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
