"""Benchmark: what a short round costs beyond its traffic, against an earlier commit in the same run.

    sudo make bench-rounds [BASELINE=ref] [SCENARIO=file]
    (or: sudo .venv/bin/python bench/bench_round_overhead.py [--runs 5] [--rounds 6] [--baseline REF]
         [--scenario FILE])

A study's cells and most live tests are short rounds (a second of traffic or less), so what the
run loop does around the traffic (host settings, the sampler's and the agents' starts, port
counters, path traces, the analysis) sets how many cells a minute holds. Each run is one
``fabriclab run`` of the A/A study's fabric and traffic (2 spines, 2 leaves, 8 hosts, a 300 kB
permutation at 10 Mbit/s) with ``--rounds`` rounds of different seeds; its ``timings.json`` gives
the seconds per round: the run's total minus the fabric's set-up and teardown, over the rounds.
Beside it, each run's set-up (``setup_s``: the fabric, the controller, PFC's and ECN's ports) and
the whole command's wall time (Python's start, the rounds, the analysis and plots, the report).
``--scenario FILE`` runs that scenario as it is instead (its rounds, its plots), e.g. the default
experiment, ``experiments/scenarios/incast.yaml``.

Baseline measured in the same run: the same scenario from a checkout of ``--baseline`` (a git
ref, default ``HEAD~1``; checked out with ``git worktree add`` in a temporary folder, with this
tree's compiled ``build/``), the runs alternating between the two trees, so that the machine's
load falls on both alike. Prints each tree's min / median / max seconds per round and the ratio
of the medians (this tree over the baseline).
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
AA = ROOT / "experiments" / "studies" / "aa.yaml"


def scenario(rounds: int) -> dict:
    """The A/A study's base scenario with ``rounds`` rounds of seeds 1..rounds, short start and tail."""
    base = yaml.safe_load(AA.read_text())["base"]
    base["name"] = "round-overhead"
    base["traffic"].update(start_delay_s=0.2)
    base["measurement"].update(post_s=0.2, plots=False)
    base["rounds"] = [{"name": f"s{i}", "seed": i} for i in range(1, rounds + 1)]
    return base


def one_run(tree: Path, scen: Path, results: Path) -> dict[str, float]:
    """One run from ``tree``: ``{"per round", "set-up", "whole run"}`` in seconds (SystemExit with
    its stderr if it failed)."""
    t0 = time.monotonic()
    p = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-m", "experiments", "run", str(scen),
                        "--results", str(results), "--quiet", "--accept-unfaithful"],
                       cwd=tree, capture_output=True, text=True)
    wall_s = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit(f"{tree}: run failed ({p.returncode}): {p.stderr.strip()[-800:]}")
    (t,) = results.glob("*/timings.json")
    d = json.loads(t.read_text())
    shutil.rmtree(t.parent)
    return {"per round": (d["total_s"] - d["setup_s"] - d["teardown_s"]) / len(d["rounds"]),
            "set-up": d["setup_s"], "whole run": wall_s}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per tree (default 5)")
    ap.add_argument("--rounds", type=int, default=6, help="rounds per run (default 6)")
    ap.add_argument("--baseline", default="HEAD~1", help="git ref of the baseline tree (default HEAD~1)")
    ap.add_argument("--scenario", type=Path, help="run this scenario as it is (--rounds ignored)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fabriclab-bench-") as tmp:
        tmp = Path(tmp)
        scen = tmp / "scenario.yaml"
        scen.write_text(args.scenario.read_text() if args.scenario else yaml.safe_dump(scenario(args.rounds)))
        old = tmp / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(old), args.baseline], cwd=ROOT, check=True)
        try:
            shutil.copytree(ROOT / "build", old / "build")
            times: dict[str, list[dict]] = {"this tree": [], args.baseline: []}
            for i in range(args.runs):
                for name, tree in (("this tree", ROOT), (args.baseline, old)):
                    s = one_run(tree, scen, tmp / "results")
                    times[name].append(s)
                    print(f"run {i + 1}/{args.runs} {name}: " + ", ".join(f"{k} {v:.3f} s" for k, v in s.items()),
                          flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, check=False)
    what = args.scenario or f"{args.rounds} rounds a run"
    for key in ("per round", "set-up", "whole run"):
        print(f"\n{key}, seconds ({what}, {args.runs} runs each; min / median / max):")
        for name, runs in times.items():
            v = [r[key] for r in runs]
            print(f"  {name:<12} {min(v):.3f} / {statistics.median(v):.3f} / {max(v):.3f}")
        ratio = (statistics.median(r[key] for r in times["this tree"])
                 / statistics.median(r[key] for r in times[args.baseline]))
        print(f"  ratio of medians (this tree / {args.baseline}): {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
