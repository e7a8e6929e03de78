"""Rounds on disk: a round's folder and raw record, its analysis (the workload's summary, each
feature's section, the summary files and plots), and ``fabriclab analyze``, which rebuilds a
results folder's derived files from its raw files. Needs no root, no fabric and no live stack:
the run loop (experiments.runner) calls the same analysis after each round's traffic.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from experiments import draw, report
from experiments.context import RoundRecord, RunContext
from experiments.features.registry import FEATURES
from experiments.model import Round, Scenario
from experiments.plan import check_against_fabric
from experiments.scenario import read_yaml_file, validate
from experiments.sections import SECTIONS
from experiments.tables import label_csvs
from experiments.workloads.registry import WORKLOADS


def round_dir(ctx: RunContext, index: int, rnd: Round) -> Path:
    """A round's folder: ``rounds/<nn>-<name>`` of a scenario with rounds, else the run's own folder."""
    return ctx.out / "rounds" / f"{index + 1:02d}-{rnd.name}" if ctx.multi else ctx.out


def run_context(sc: Scenario, layout: tuple, env: dict, out: Path, quiet: bool,
             accept_unfaithful: bool = False) -> RunContext:
    """The run's context: the resolved scenario, its ``layout`` on the fabric
    (experiments.plan.check_against_fabric), ``env`` and the results folder ``out``."""
    fabric, fabric_map, plan, rounds, profiles = layout
    return RunContext(sc=sc, fabric=fabric, fabric_map=fabric_map, plan=plan, rounds=rounds, profiles=profiles,
                      env=env, out=out, multi=sc.multi_round, quiet=quiet, accept_unfaithful=accept_unfaithful,
                      sections=SECTIONS)


#: A round's raw record (what the run loop kept of it, for `python -m experiments analyze`).
ROUND_RECORD = "round.json"


def save_round(rec: RoundRecord, workload: str) -> None:
    """Write the round's raw record (workload, options, the workload's and features' records,
    timings) into its folder, before its analysis."""
    (rec.dir / ROUND_RECORD).write_text(json.dumps(
        {"index": rec.index, "name": rec.round.name, "workload": workload, "options": rec.options,
         "raw": rec.raw, "features": rec.features, "timings_s": rec.timings_s, "stopped": rec.stopped},
        indent=1, default=str))


def analyze(out: Path, quiet: bool = False, features: dict | None = None, workloads: dict | None = None) -> list[Path]:
    """Rebuild a results folder's derived files (each round's tables, summary.json and plots, the
    rounds side by side, the drawing) from its raw files: scenario.yaml, environment.json and, per
    round, round.json, the agents' records, the sampler's files. Needs no root and no fabric.
    Returns the round folders analysed.

    Raises:
        FileNotFoundError: ``out`` is not a results folder, or no round has its raw record
            (the run ended before any round's traffic finished).
    """
    out = Path(out)
    sc = validate(read_yaml_file(out / "scenario.yaml"))
    ctx = run_context(sc, check_against_fabric(sc), json.loads((out / "environment.json").read_text()), out, quiet)
    feats = [f(ctx) for f in (FEATURES if features is None else features).values()]
    for f in feats:
        f.restore()
    registry = WORKLOADS if workloads is None else workloads
    made, done = {}, []
    for i, r in enumerate(ctx.rounds):
        rdir = round_dir(ctx, i, r)
        if not (rdir / ROUND_RECORD).exists():
            continue
        saved = json.loads((rdir / ROUND_RECORD).read_text())
        rec = RoundRecord(index=i, round=r, dir=rdir, options=saved["options"], raw=saved["raw"],
                          features=saved["features"], timings_s=saved["timings_s"], stopped=saved.get("stopped"))
        w = made.setdefault(saved["workload"], registry[saved["workload"]](ctx))
        done.append((saved["workload"], rec, analyse_round(ctx, w, feats, rec)))
    if not done:
        raise FileNotFoundError(f"{out}: no round has its raw record ({ROUND_RECORD}): nothing to analyse")
    draw.draw(ctx.fabric_map, out / "topology.png", title=sc.name)
    if ctx.multi:
        for name, w in made.items():
            w.finish_run([(rec, s) for n, rec, s in done if n == name])
    write_report(out)
    return [rec.dir for _, rec, _ in done]


def write_report(out: Path) -> None:
    """The folder's report.html (experiments.report), from its files; a report that cannot be
    written is a warning, not a failed run (every result file is already written)."""
    try:
        report.write_report(out)
    except (OSError, ValueError) as e:
        print(f"fabriclab: WARNING: could not write {out / report.REPORT}: {e}", file=sys.stderr)


def analyse_round(ctx: RunContext, w, features: list, rec: RoundRecord) -> dict:
    """The round's summary: the workload's, then each feature's section; summary.json written once,
    then the workload's plots, summary.txt (the round's lines as printed: the workload's, then each
    feature's) and every warning. Returns the summary."""
    summary = w.summarize(rec)
    summary["stopped"] = rec.stopped
    for f in features:
        f.summarize(rec, summary)
    failures = [line for f in features for line in f.failures(summary)]
    summary.setdefault("fidelity", {}).update(
        ok=not failures, failures=failures, accepted_unfaithful=bool(failures) and ctx.accept_unfaithful)
    (rec.dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    w.after_summary(rec, summary)
    label_csvs(rec.dir, {"round": rec.round.name, "variant": rec.round.variant, "seed": rec.round.seed})
    lines = [w.format_round(summary, rec.dir)] + [x for x in (f.report(summary) for f in features) if x]
    if rec.stopped:
        lines.append(stopped_line(rec.stopped))
    (rec.dir / report.SUMMARY_TEXT).write_text("\n".join(lines) + "\n")
    for f in features:
        for warning in f.warnings(summary):
            print(f"fabriclab: WARNING: {warning}", file=sys.stderr)
    for line in failures:
        print(f"fabriclab: FIDELITY CHECK FAILED: {line}", file=sys.stderr)
    if not ctx.quiet:
        print("\n".join(lines), flush=True)
    return summary


def stopped_line(reason: str) -> str:
    """The line a stopped round's summary ends with (terminal, summary.txt, report.html): why it
    stopped, and that its figures cover only the time before the stop."""
    return (f"stopped ({reason}): the round's traffic was cut short; its agents wrote what they counted "
            "until then (an unfinished flow's error says \"stopped by the runner\")")
