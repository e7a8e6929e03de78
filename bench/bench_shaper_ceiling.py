"""Benchmark: is every port's shaper a ceiling, and does it keep its line busy?

    sudo make bench-shaper      (or: .venv/bin/python bench/bench_shaper_ceiling.py [--runs R]
                                 [--burst-bytes B ...] [--load] [--keep DIR])

Runs R rounds of each of two cases (one fabric per case and bucket, the rounds identical) on a 1-spine, 1-leaf, 3-host Spine-Leaf at 10 Mbit/s (and the
long flows also at 100 Mbit/s), each with the shaper's default bucket and with every bucket
given by ``--burst-bytes``:

- ``blocks``: an incast of 2 senders x 4 KB blocks to h1 (40 blocks, persistent connections),
  the short-flow case where a port runs ahead of its line after every idle spell;
- ``long``: 2 senders x about 3 s of TCP to h1 (together 3 s of the line), the backlogged case where a small bucket can lose line
  time to late dequeue timers.

For the bottleneck port (leaf1-eth1, toward h1) it prints, per case and bucket, min/median/max
over the runs of: the lead (the most the port ran ahead of its line over any window of frames,
idle gaps included: microseconds and frame times), the share of backlogged gaps within 10% of a
frame time, and the rate achieved while backlogged. ``--load`` runs a busy loop on every core
beside each run (the CPU-load calibration). Needs root; each run takes the fabric lock
(/tmp/fabriclab-fabric.lock) for itself only. Also prints, over every port of the runs, the
most a port's lead exceeded its bucket's time (the rounding the ceiling check tolerates).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from common.units import shaper_burst_bytes  # noqa: E402

#: The fabric lock every run takes (only for itself: other users of the machine wait on it).
LOCK = "/tmp/fabriclab-fabric.lock"

BASE = """name: shaper-ceiling-{case}
description: the shaper's ceiling, {case}
seed: 1
topology: {{kind: spineleaf, spines: 1, leaves: 1, hosts_per_leaf: 3, host_rate_mbps: {rate}, uplink_rate_mbps: {rate}}}
{queues}
traffic:
  pattern: incast
  receiver: h1
  senders: 2
{traffic}
rounds:
{rounds}
"""
TRAFFIC = {"blocks": "  incast_mode: blocks\n  block_bytes: 4096\n  blocks: 40\n  start_delay_s: 0.5\n  timeout_s: 60",
           "long": "  response_bytes: {long_bytes}"}


def _spin(stop):
    while not stop.is_set():
        pass


def run_case(case: str, rate: int, burst: int | None, runs: int, out: Path) -> list[dict]:
    """One fabric, ``runs`` identical rounds (each its own measurement); per round the bottleneck's
    figures and the most any port's lead exceeded its bucket."""
    sc = out / f"{case}-{rate}-{burst}.yaml"
    queues = f"queues: {{burst_bytes: {burst}}}" if burst else ""
    sc.write_text(BASE.format(case=case, rate=rate, queues=queues,
                              traffic=TRAFFIC[case].format(long_bytes=int(rate * 1e6 * 3 / 8 / 2)),
                              rounds="\n".join(f"  - name: r{i}" for i in range(runs))))
    res = Path(tempfile.mkdtemp(prefix="res-", dir=out))
    p = subprocess.run(["flock", "-o", LOCK, sys.executable, "-m", "experiments", "run", str(sc), "--results",
                        str(res), "--accept-unfaithful", "--quiet"], cwd=ROOT, capture_output=True, text=True)
    rounds = sorted(res.glob("**/round.json"))
    if p.returncode != 0 or len(rounds) != runs:
        raise SystemExit(f"run of {sc.name} failed (exit {p.returncode}, {len(rounds)} rounds): {p.stderr[-2000:]}")
    out_rows = []
    for rj in rounds:
        ports = json.loads(rj.read_text())["features"]["fidelity"]["serialisation"]
        b = ports["leaf1-eth1"]
        excess = {i: f["lead_us"] - 1e6 * 8 * (burst or shaper_burst_bytes(f["rate_mbps"] * 1e6)) / (f["rate_mbps"] * 1e6)
                  for i, f in ports.items()}
        worst = max(excess, key=excess.get)
        out_rows.append({"lead_us": b["lead_us"], "within": b["within_10pct"], "rate_share": b["rate_share_backlogged"],
                         "gaps": b["backlogged_gaps"], "window": b.get("lead_window"), "excess_us": excess[worst],
                         "excess_port": worst, "requeued": sum(f.get("requeued", 0) for f in ports.values()),
                         "folder": str(rj.parent)})
    return out_rows


def main() -> int:
    """Run the cases and print min/median/max per case and bucket."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--burst-bytes", type=int, nargs="*", default=[])
    ap.add_argument("--cases", nargs="*", default=["blocks-10", "long-10", "long-100"])
    ap.add_argument("--load", action="store_true", help="a busy loop on every core beside each run")
    ap.add_argument("--json", type=Path, help="also write every run's figures here")
    ap.add_argument("--keep", type=Path, help="keep the runs' results folders under this folder")
    a = ap.parse_args()
    stop = multiprocessing.Event()
    spinners = []
    if a.load:
        spinners = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(os.cpu_count())]
        for s in spinners:
            s.start()
    allres = {}
    try:
        with tempfile.TemporaryDirectory(prefix="fl-shaper-") as tmp0:
            tmp = a.keep or tmp0
            if a.keep:
                a.keep.mkdir(parents=True, exist_ok=True)
            for case_rate in a.cases:
                case, rate = case_rate.split("-")
                for burst in [None, *a.burst_bytes]:
                    runs = run_case(case, int(rate), burst, a.runs, Path(tmp))
                    allres[f"{case_rate} burst={burst or 'default'}"] = runs
                    frame_us = 1514 * 8 / int(rate)

                    def mmm(key, scale=1.0, fmt=".3f"):
                        v = [r[key] * scale for r in runs if r[key] is not None]
                        return "-" if not v else "/".join(format(x, fmt) for x in (min(v), statistics.median(v), max(v)))
                    print(f"{case_rate:10s} burst={str(burst or 'default'):7s} runs={a.runs}"
                          f"{' load' if a.load else ''}: lead us {mmm('lead_us', fmt='.1f')} "
                          f"(frames {mmm('lead_us', 1 / frame_us)}); within 10% {mmm('within', fmt='.4f')}; "
                          f"rate share {mmm('rate_share', fmt='.4f')}; gaps {mmm('gaps', fmt='.0f')}; any port's lead "
                          f"beyond its bucket us {mmm('excess_us', fmt='.1f')}; requeued dequeues {mmm('requeued', fmt='.0f')}",
                          flush=True)
    finally:
        stop.set()
        for s in spinners:
            s.join()
    if a.json:
        a.json.write_text(json.dumps(allres, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
