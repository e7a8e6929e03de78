"""A lab's expected outcomes over seeds, for the teacher's guide (labs/TEACHERS.md).

    sudo .venv/bin/python scripts/lab_outcomes.py --lab 4 --seeds 5 [--out DIR]

Runs each of the lab's runs once per seed (1..N: the scenario's seed, and its rounds' own
seeds shifted, experiments.labs.base.Lab.reseed) as a student runs them (``fabriclab run``, or
``fabriclab compare`` for a lab whose run is a comparison), one fabric at a time,
then reads each seed's figures with the lab's own checker and prints, per question, the
expected answer's minimum, median and maximum over the seeds (a choice: how often each answer
was right), how often another seed's right answer passes this seed's check (``copy_pass``: near
0, the question needs the student's own run; near 1, the model or a classmate's run answers
it), and each run's wall time, and which rounds failed a fidelity check (a CPU-starved machine:
they are kept, as a student's would be, and named). Everything goes to DIR (default
``results/lab-outcomes-<lab>-<time>``), with ``outcomes.json``. A lab whose run is neither a
plain ``fabriclab run`` nor a ``fabriclab compare`` (lab 6's troubleshooting) is refused: its
outcomes are the seeds' faults.
Exit 0, 1 when a run failed, 2 on bad arguments.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from experiments.labs import LABS  # noqa: E402
from experiments.labs.base import find_runs  # noqa: E402

#: the sub-commands of a lab's runs this script repeats (Lab.command: ``sudo fabriclab VERB FILE ...``)
VERBS = ("run", "compare")


def verb_of(command: str) -> str | None:
    """The fabriclab sub-command of a lab's command line (``sudo fabriclab compare FILE --results
    DIR`` -> ``compare``), or None when it is not one this script repeats (:data:`VERBS`)."""
    words = command.split()
    return words[2] if len(words) > 2 and words[:2] == ["sudo", "fabriclab"] and words[2] in VERBS else None


def main(argv=None) -> int:
    """Run the lab over the seeds and print its outcomes (module docstring)."""
    ap = argparse.ArgumentParser(prog="lab_outcomes.py")
    ap.add_argument("--lab", type=int, required=True)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    if a.lab not in LABS or a.seeds < 1:
        print(f"lab_outcomes: --lab one of {sorted(LABS)}, --seeds at least 1", file=sys.stderr)
        return 2
    lab = LABS[a.lab]()
    if any(verb_of(lab.command(n)) is None for n in lab.RUNS):
        print(f"lab_outcomes: lab {a.lab}'s runs are not plain runs or comparisons (its outcomes are its seeds' own)",
              file=sys.stderr)
        return 2
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(a.out or REPO / "results" / f"lab-outcomes-{a.lab}-{stamp}")
    out.mkdir(parents=True, exist_ok=True)
    per_seed, bands, flagged, times = [], [], [], {n: [] for n in lab.RUNS}
    for seed in range(1, a.seeds + 1):
        folder = out / f"seed{seed}"
        for name, path in lab.RUNS.items():
            data = lab.reseed(name, yaml.safe_load((REPO / path).read_text()), seed)
            scenario = out / f"{name}-seed{seed}.yaml"
            scenario.write_text(yaml.safe_dump(data, sort_keys=False))
            t0 = time.monotonic()
            p = subprocess.run([sys.executable, "-m", "experiments", verb_of(lab.command(name)), str(scenario),
                                "--results", str(folder), "--quiet", "--accept-unfaithful"], cwd=REPO)
            times[name].append(time.monotonic() - t0)
            if p.returncode != 0:
                print(f"lab_outcomes: {name} seed {seed} failed (exit {p.returncode})", file=sys.stderr)
                return 1
        fig = lab.measure(find_runs(folder, lab.RUNS))
        unfaithful = [str(p.parent.relative_to(folder)) for p in sorted(folder.rglob("summary.json"))
                      if "agents" not in p.parts and not json.loads(p.read_text()).get("fidelity", {}).get("ok", True)]
        flagged.append(unfaithful)
        if unfaithful:
            print(f"seed {seed}: rounds that failed a fidelity check (kept, and counted): {', '.join(unfaithful)}")
        per_seed.append(fig.values)
        bands.append(fig.bands)
        print(f"seed {seed}: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, (int, float)) else f"{k} {v}"
                                            for k, v in fig.values.items()), flush=True)
    rows = []
    for q in lab.QUESTIONS:
        vals = [v[q.id] for v in per_seed if q.id in v]
        pairs = [(i, j) for i in range(len(per_seed)) for j in range(len(per_seed)) if i != j]
        if q.kind == "number":
            passes = [per_seed[j][q.id] in bands[i][q.id] for i, j in pairs]
            rows.append({"id": q.id, "prompt": q.prompt, "unit": q.unit, "min": min(vals),
                         "median": statistics.median(vals), "max": max(vals),
                         "copy_pass": sum(passes) / len(passes) if passes else None})
        else:
            passes = [str(per_seed[j][q.id]).lower() == str(per_seed[i][q.id]).lower() for i, j in pairs]
            rows.append({"id": q.id, "prompt": q.prompt, "answers": dict(Counter(vals)),
                         "copy_pass": sum(passes) / len(passes) if passes else None})
    doc = {"lab": a.lab, "seeds": a.seeds, "questions": rows, "per_seed": per_seed, "unfaithful_rounds": flagged,
           "run_s": {n: {"min": min(t), "median": statistics.median(t), "max": max(t)} for n, t in times.items()}}
    (out / "outcomes.json").write_text(json.dumps(doc, indent=1, default=float))
    print(f"\nlab {a.lab} over {a.seeds} seeds (min / median / max):")
    for r in rows:
        cp = "-" if r["copy_pass"] is None else f"{r['copy_pass']:.2f}"
        if "median" in r:
            print(f"  {r['id']} ({r['unit']}): {r['min']:.4g} / {r['median']:.4g} / {r['max']:.4g}; copy_pass {cp}")
        else:
            print(f"  {r['id']}: " + ", ".join(f"{k} x{n}" for k, n in r["answers"].items()) + f"; copy_pass {cp}")
    for n, t in doc["run_s"].items():
        print(f"  run {n}: {t['min']:.0f} / {t['median']:.0f} / {t['max']:.0f} s")
    print(f"outcomes.json in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
