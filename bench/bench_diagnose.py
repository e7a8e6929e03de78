"""Time to diagnosis: the troubleshooter (experiments.diagnose) on hidden seeded faults, on a
Fat-Tree k=4 and k=6 at the default 10 Mbit/s, with the probe rounds against ceil(log2) of the
directed links and whether each verdict matched the hidden fault.

The baseline, measured in the same run on each fabric, is the same procedure on the healthy
fabric (no fault: the survey, which clears every link, and nothing to bisect): the ratio is what
finding a fault costs over a clean bill of health, and how that grows with k beside the number
of links. A healthy fabric on which anything is blamed fails the bench.

``sudo .venv/bin/python bench/bench_diagnose.py [--seeds 0,1,2,3,4] [--k 4,6]``
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experiments import diagnose  # noqa: E402
from experiments.scenario import validate  # noqa: E402


def main() -> int:
    """Run the diagnoses and print the table; exit 1 when a verdict did not match."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2,3,4", help="hidden faults' seeds (5 in a row cover every kind)")
    ap.add_argument("--k", default="4,6", help="Fat-Tree sizes")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    out = Path(tempfile.mkdtemp(prefix="fabriclab-bench-diagnose-"))
    bad = 0
    summary = []
    for k in (int(x) for x in args.k.split(",")):
        sc = validate({"name": f"bench-diagnose-k{k}", "topology": {"kind": "fattree", "k": k},
                       "queues": {"buffer_packets": 100}})
        _dir, healthy = diagnose.diagnose(sc, out, quiet=True)
        blamed = healthy["verdict"]["culprit"]
        bad += blamed is not None
        print(f"k={k} healthy fabric: {healthy['probe_rounds']} probe rounds, {healthy['seconds']:.1f} s, "
              f"verdict {healthy['verdict']['kind']}" + (f" at {blamed} (WRONG)" if blamed else ""), flush=True)
        times, rounds = [], []
        for seed in seeds:
            _dir, rec = diagnose.diagnose(sc, out, inject="random", seed=seed, quiet=True)
            bad += not rec["matched"]
            times.append(rec["seconds"])
            rounds.append(rec["probe_rounds"])
            print(f"k={k} seed {seed}: {rec['truth_description']}: verdict {rec['verdict']['kind']} at "
                  f"{rec['verdict']['culprit']} ({'match' if rec['matched'] else 'NO MATCH'}); "
                  f"{rec['probe_rounds']} probe rounds ({rec['step2']['bisection_rounds']} bisecting; "
                  f"ceil(log2 {rec['step2']['directed_links']}) = {rec['step2']['log2_links']}), "
                  f"{rec['seconds']:.1f} s", flush=True)
        base = healthy["seconds"]
        summary.append((k, statistics.median(times), min(times), max(times), statistics.median(rounds), base))
    print("\nk  time to diagnosis s (median, min-max)  probe rounds (median)  healthy check s (baseline)  ratio")
    for k, med, lo, hi, r, base in summary:
        print(f"{k:<2} {med:6.1f} ({lo:.1f}-{hi:.1f}){'':19} {r:5.1f}{'':17} {base:5.1f}{'':21} {med / base:5.2f}")
    if len(summary) > 1:
        print(f"growth k={summary[-1][0]} / k={summary[0][0]}: {summary[-1][1] / summary[0][1]:.2f}x the time")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
