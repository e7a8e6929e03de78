#!/usr/bin/env python3
"""The labelled set of the forwarding verdict: run every scenario of experiments/fidelity-set (or
read runs already made), label each round, and print a Markdown table of each round's verdict
beside its label, with the false-alarm and missed-alarm counts (docs/how-it-works.md, "The
forwarding verdict", holds one).

Labels, from what the traffic could do, not from the check:
- ``short-*``: responses of a few kB (a handshake, slow start and an RTT of idle per flow) cannot
  fill a link whatever forwards them: not forwarding-limited, whatever share of the model they
  carried. A verdict of "limited" is a false alarm.
- ``long-*`` and ``perm-*``: flows that last seconds fill their links unless the emulation stops
  them: a round below 0.9 of the model is limited by the emulation (a verdict that names no
  resource is a missed alarm), one at or above it is not (a verdict of "limited" is a false alarm).

Usage (root, a fabric per scenario; about 4 minutes on a quiet 2-core machine):
    sudo .venv/bin/python scripts/fidelity_set.py --results /tmp/fidelity-set
    .venv/bin/python scripts/fidelity_set.py --read /tmp/fidelity-set      # tabulate runs made before
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SET = REPO / "experiments" / "fidelity-set"
SHARE = 0.9


def label(scenario: str, share: float | None) -> bool | None:
    """True when the round is limited by the emulation by construction (see the module docstring),
    None when it cannot be labelled (no share)."""
    if scenario.startswith("short-"):
        return False
    if share is None:
        return None
    return share < SHARE


def rounds_of(run_dir: Path) -> list[tuple[str, dict]]:
    """``(round name, summary)`` of a run folder (one round: the folder itself)."""
    nested = sorted(run_dir.glob("rounds/*/summary.json"))
    files = nested or [run_dir / "summary.json"]
    return [(f.parent.name if nested else "-", json.loads(f.read_text())) for f in files if f.exists()]


def rows(results: Path) -> list[dict]:
    """One row per round of every run folder under ``results``."""
    out = []
    for run in sorted(p for p in results.iterdir() if p.is_dir()):
        scen = run.name.split("-", 1)[1] if "-" in run.name else run.name
        for rnd, s in rounds_of(run):
            f = (s.get("fidelity") or {}).get("forwarding") or {}
            ev = f.get("evidence") or {}
            cpu = (s.get("fidelity") or {}).get("cpu") or {}
            share = f.get("share")
            out.append({"scenario": scen, "round": rnd, "share": share, "label": label(scen, share),
                        "checked": f.get("checked"), "limited": f.get("forwarding_limited"),
                        "by": f.get("limited_by"),
                        "thread_median": ev.get("forwarding_thread_cores_median"),
                        "thread_wait": ev.get("forwarding_thread_wait_cores_median"),
                        "short": ev.get("seconds_short_of_cpu"),
                        "needed": ev.get("seconds_needed"),
                        "idle_min": (cpu.get("idle_cores") or {}).get("min")})
    return out


def table(rs: list[dict]) -> str:
    """The Markdown table and the error counts."""
    def fmt(x, p=2):
        return "-" if x is None else (f"{x:.{p}f}" if isinstance(x, float) else str(x))
    lines = ["| scenario | round | share of model | label | verdict | limited by | forwarding thread, median cores "
             "| waiting, median cores | seconds short of CPU / needed | idle cores, min |", "|---|---|---|---|---|---|---|---|---|---|"]
    fp = fn = 0
    for r in rs:
        lab = {True: "limited", False: "not limited", None: "?"}[r["label"]]
        ver = "not checked" if r["checked"] is False else ("limited" if r["limited"] else "not limited")
        fp += bool(r["label"] is False and r["limited"])
        fn += bool(r["label"] is True and not r["limited"])
        lines.append(f"| {r['scenario']} | {r['round']} | {fmt(r['share'])} | {lab} | {ver} | {r['by'] or '-'} | "
                     f"{fmt(r['thread_median'])} | {fmt(r['thread_wait'])} | {fmt(r['short'])} / {fmt(r['needed'])} | "
                     f"{fmt(r['idle_min'])} |")
    neg = sum(r["label"] is False for r in rs)
    pos = sum(r["label"] is True for r in rs)
    lines.append("")
    lines.append(f"{len(rs)} rounds: {pos} labelled limited, {neg} not; false alarms {fp} of {neg}, "
                 f"missed alarms {fn} of {pos}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--results", type=Path, help="run every scenario of the set into this folder, then tabulate")
    g.add_argument("--read", type=Path, help="tabulate the runs already in this folder")
    ap.add_argument("--only", default="", help="comma-separated scenario names (default: all)")
    a = ap.parse_args(argv)
    if a.results:
        a.results.mkdir(parents=True, exist_ok=True)
        want = {x for x in a.only.split(",") if x}
        for f in sorted(SET.glob("*.yaml")):
            if want and f.stem not in want:
                continue
            p = subprocess.run([sys.executable, "-m", "experiments", "run", str(f), "--results", str(a.results),
                                "--quiet"], cwd=REPO)
            print(f"{f.stem}: exit {p.returncode}", file=sys.stderr)
    print(table(rows(a.results or a.read)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
