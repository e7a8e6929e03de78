"""A results folder's ``report.html``: one self-contained page (every plot inline as a ``data:``
URI, inline CSS, no script, a Content-Security-Policy that refuses any load) written from the
folder's files alone, never from the run loop or a live fabric.

What it reads:

- a run's folder (``scenario.yaml``, ``environment.json``, and either ``summary.json`` beside
  them or one ``rounds/<nn>-<name>/summary.json`` per round): the scenario's name and
  description, the environment (datapath, kernel, what the features chose), each round's
  summary (``summary.txt``, the lines the run printed, and the figures of ``summary.json``), the
  fidelity block per round (ok, failures, accepted_unfaithful), the top-level ``*rounds.csv``
  tables, and every PNG of the folder and of each round's folder;
- a comparison's folder (``comparison.json`` with ``runs``, experiments.compare): its runs and
  ratios as tables and its PNGs (each run inside it has its own report).

Beside each plot: the caption its drawer stored in the PNG (experiments.pagekit.read_caption);
a PNG without one gets :data:`GENERIC_HOW` and the CSS class ``generic``. This module names no
workload, feature or plot. A study's folder has its own report (experiments.studyreport).

The page is rendered from the templates ``run.html.j2`` and ``comparison.html.j2``
(experiments/templates/, experiments.pagekit.render); this module gives them their values, every
one already formatted as text (:func:`fmt`) and escaped by the templates.

``python -m experiments.report DIR`` writes it; the run loop writes it at the end of every run,
``python -m experiments analyze`` and ``plot`` rewrite it.
"""
from __future__ import annotations

import csv
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from experiments.pagekit import Caption, png_data_uri, read_caption, render

REPORT = "report.html"
#: The round's summary as the run printed it (written by the run loop beside summary.json).
SUMMARY_TEXT = "summary.txt"
#: What a plot whose PNG carries no caption gets.
GENERIC_HOW = ("No caption was stored with this plot (it was drawn by an older fabriclab, or by code that "
               "declares none): its title, axes and legend say what it shows, and docs/results.md describes "
               "each file of a results folder.")
#: A cell's text is cut to this many characters (a long list in environment.json, say).
MAX_CELL_CHARS = 400
#: A table from a CSV shows at most this many rows.
MAX_TABLE_ROWS = 200


@dataclass(frozen=True)
class Plot:
    """A PNG of the folder and its caption; ``generic`` when the PNG carried none."""
    path: Path
    caption: Caption
    generic: bool


@dataclass(frozen=True)
class Round:
    """A round's folder and what the report shows of it: its name, ``summary.json`` as a dict
    (empty when unreadable), ``summary.txt`` (None when absent) and its plots."""
    name: str
    dir: Path
    summary: dict
    text: str | None
    plots: list


def folder_kind(d: Path) -> str:
    """What ``d`` holds: ``"study"`` (study.json and comparison.json), ``"comparison"``
    (comparison.json with ``runs``), ``"run"`` (scenario.yaml and environment.json).

    Raises:
        FileNotFoundError: none of those (not a results folder).
    """
    d = Path(d)
    if (d / "study.json").exists() and (d / "comparison.json").exists():
        return "study"
    if (d / "scenario.yaml").exists() and (d / "environment.json").exists():
        return "run"
    if (d / "comparison.json").exists():
        try:
            if "runs" in json.loads((d / "comparison.json").read_text()):
                return "comparison"
        except (OSError, ValueError):
            pass
    raise FileNotFoundError(f"{d}: not a results folder (no scenario.yaml and environment.json, no comparison.json)")


def plots_in(d: Path) -> list[Plot]:
    """The PNGs directly in ``d`` (sorted by name), each with the caption stored in it or the
    generic one."""
    out = []
    for p in sorted(Path(d).glob("*.png")):
        c = read_caption(p)
        out.append(Plot(p, c or Caption(p.stem.replace("_", " "), GENERIC_HOW), c is None))
    return out


def _json(path: Path) -> dict:
    try:
        v = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return v if isinstance(v, dict) else {}


def load_rounds(d: Path) -> list[Round]:
    """The rounds of a run folder: each ``rounds/<nn>-<name>/`` with a ``summary.json`` (in
    folder order), or the folder itself when it has ``summary.json`` (a run of one round); []
    for a run that ended before any round was analysed."""
    d = Path(d)
    dirs = sorted(p for p in (d / "rounds").glob("*") if (p / "summary.json").exists()) \
        if (d / "rounds").is_dir() else []
    if not dirs and (d / "summary.json").exists():
        dirs = [d]
    rounds = []
    for rd in dirs:
        s = _json(rd / "summary.json")
        text = (rd / SUMMARY_TEXT).read_text(errors="replace") if (rd / SUMMARY_TEXT).exists() else None
        name = str(s.get("round") or (rd.name.split("-", 1)[-1] if rd != d else s.get("scenario") or d.name))
        rounds.append(Round(name, rd, s, text, plots_in(rd) if rd != d else []))
    return rounds


# ---------------------------------------------------------------- formatting

def fmt(v) -> str:
    """A value from a JSON or CSV file as short text: floats with 4 significant digits, None and
    "" as ``-``, lists of scalars joined by commas (``n entries`` otherwise), dicts as ``k=v``
    pairs of their scalars; at most :data:`MAX_CELL_CHARS` characters."""
    if v is None or v == "":
        s = "-"
    elif isinstance(v, bool):
        s = str(v).lower()
    elif isinstance(v, float):
        s = f"{v:.4g}" if math.isfinite(v) else str(v)
    elif isinstance(v, (int, str)):
        s = str(v)
    elif isinstance(v, list):
        s = ", ".join(fmt(x) for x in v) if all(not isinstance(x, (dict, list)) for x in v) \
            else f"{len(v)} entries"
    elif isinstance(v, dict):
        parts = [f"{k}={fmt(x)}" for k, x in v.items() if not isinstance(x, (dict, list))]
        nested = sum(isinstance(x, (dict, list)) for x in v.values())
        s = "; ".join(parts) + (f" (+{nested} nested)" if nested else "") if parts or nested else "-"
    else:
        s = str(v)
    return s if len(s) <= MAX_CELL_CHARS else s[:MAX_CELL_CHARS - 1] + "…"


def facts(d: dict, skip: tuple = ()) -> list[tuple[str, str]]:
    """``d``'s keys and :func:`fmt` values as ``(key, value)`` text pairs, keys in ``skip`` left
    out: a two-column table of the page (``facts_table`` of macros.html.j2)."""
    return [(str(k), fmt(v)) for k, v in d.items() if k not in skip]


def table(rows: list[dict], skip: tuple = ()) -> dict:
    """A table of a list of dicts (a CSV's rows, a JSON list) for the page (``rows_table`` of
    macros.html.j2): ``columns`` (one per key of any row, ``skip`` left out), ``rows`` (lists of
    :func:`fmt` texts, at most :data:`MAX_TABLE_ROWS`) and ``more`` (how many rows were left out)."""
    cols = [c for c in dict.fromkeys(k for r in rows for k in r) if c not in skip]
    return {"columns": [str(c) for c in cols],
            "rows": [[fmt(r.get(c)) for c in cols] for r in rows[:MAX_TABLE_ROWS]],
            "more": max(len(rows) - MAX_TABLE_ROWS, 0)}


def _csv_rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return [{k: _number(v) for k, v in r.items()} for r in csv.DictReader(f)]


def _number(v):
    """A CSV cell as an int or a float when it reads as one (a float is shown with 4 digits), else as is."""
    for kind in (int, float):
        try:
            return kind(v)
        except (TypeError, ValueError):
            pass
    return v


def plot_view(p: Plot, folder: Path) -> dict:
    """A plot for the page (``plot`` of macros.html.j2): ``title`` and ``how`` (its caption),
    ``css`` (``plot``, or ``plot generic`` without a stored caption), ``file`` (the PNG relative
    to ``folder``, the report's) and ``src`` (the PNG as a data: URI).
    Raises OSError when the PNG cannot be read."""
    rel = p.path.relative_to(folder) if p.path.is_relative_to(folder) else p.path.name
    return {"css": "plot generic" if p.generic else "plot", "file": str(rel), "title": p.caption.title,
            "how": p.caption.how, "src": png_data_uri(p.path)}


# ---------------------------------------------------------------- sections

def _fidelity(s: dict) -> dict:
    f = s.get("fidelity")
    return f if isinstance(f, dict) else {}


def fidelity_rows(rounds: list[Round]) -> list[dict]:
    """The page's fidelity table, one row per round: ``name``, ``ok`` (``not recorded`` for a
    summary without a fidelity block) and its ``css`` (``ok`` or ``warn``), ``failures`` (the
    failed checks' texts; the cell shows ``-`` for none) and ``accepted`` (whether the run
    accepted them)."""
    out = []
    for r in rounds:
        f = _fidelity(r.summary)
        ok = f.get("ok")
        fails = [str(x) for x in f.get("failures") or []]
        out.append({"name": r.name, "css": "ok" if ok is True else "warn",
                    "ok": "not recorded" if ok is None else fmt(ok),
                    "failures": fails if len(fails) > 1 or any(fails) else [],     # one empty text: "-"
                    "accepted": fmt(f.get("accepted_unfaithful"))})
    return out


def _verdict(rounds: list[Round]) -> dict:
    """The run's verdict (the paragraph at the top): the names of the ``failed`` rounds and
    whether the run ``accepted`` them all, how many rounds are ``missing`` a fidelity block, how
    many ``rounds`` there are."""
    failed = [r for r in rounds if _fidelity(r.summary).get("ok") is False]
    return {"failed": [r.name for r in failed], "rounds": len(rounds),
            "accepted": bool(failed) and all(_fidelity(r.summary).get("accepted_unfaithful") for r in failed),
            "missing": sum(_fidelity(r.summary).get("ok") is None for r in rounds)}


def _round_view(i: int, r: Round, folder: Path, multi: bool) -> dict:
    """Round ``i``'s section (``round_section`` of run.html.j2)."""
    s = r.summary
    f = _fidelity(s)
    ok = f.get("ok")
    verdict = ("passed" if ok else "FAILED" + (" (accepted)" if f.get("accepted_unfaithful") else "")) \
        if ok is not None else "not recorded"
    return {"heading": f"Round {i}: {r.name}" if multi else "Summary",
            "text": r.text.rstrip() if r.text is not None else None,
            "summary_file": str(r.dir.relative_to(folder) / "summary.json" if r.dir != folder else "summary.json"),
            "figures": facts(s, skip=("fidelity",)),
            "verdict": verdict, "css": "ok" if ok else "warn", "failures": f.get("failures"),
            "fidelity": facts(f), "plots": [plot_view(p, folder) for p in r.plots]}


def run_view(d: Path) -> dict:
    """The values of a run folder's report (``run.html.j2``; see the module docstring): ``name``,
    ``folder``, ``description``, ``verdict``, ``environment`` (the main facts) and
    ``environment_all``, ``fidelity`` (:func:`fidelity_rows`), ``tables`` (each ``*rounds.csv``),
    ``rounds`` (each round's section), ``plots`` (the folder's own), ``single`` (a run of one
    round: its summary, then its plots).

    Raises:
        OSError, ValueError: ``scenario.yaml`` or ``environment.json`` unreadable.
    """
    sc = yaml.safe_load((d / "scenario.yaml").read_text()) or {}
    env = json.loads((d / "environment.json").read_text())
    rounds = load_rounds(d)
    single = [d] == [r.dir for r in rounds]
    if single:
        rounds = [Round(r.name, r.dir, r.summary, r.text, []) for r in rounds]
    tables = []
    for t in sorted(d.glob("*rounds.csv")):
        try:
            rows = _csv_rows(t)
        except (OSError, csv.Error):
            continue
        if rows:
            tables.append(dict(table(rows, skip=("folder",)), file=t.name))
    return {"name": str(sc.get("name") or d.name), "folder": d.name,
            "description": str(sc["description"]).strip() if sc.get("description") else None,
            "verdict": _verdict(rounds),
            "environment": facts({k: env.get(k) for k in ("datapath", "kernel", "ovs_version", "machine", "cpus",
                                                         "git_revision", "accept_unfaithful") if k in env}),
            "environment_all": facts(env), "fidelity": fidelity_rows(rounds), "tables": tables,
            "rounds": [_round_view(i, r, d, not single) for i, r in enumerate(rounds, 1)],
            "plots": [plot_view(p, d) for p in plots_in(d)], "single": single}


def comparison_view(d: Path) -> dict:
    """The values of a comparison folder's report (``comparison.html.j2``): ``name``, ``folder``,
    ``description``, ``incomplete``, its ``runs`` and ``ratios`` (comparison.json, as
    :func:`table`; None when it has none) and its ``plots``.
    Raises OSError, ValueError: comparison.json unreadable."""
    res = json.loads((d / "comparison.json").read_text())
    runs = [r for r in res.get("runs") or [] if isinstance(r, dict)]
    ratios = [r for r in res.get("ratios") or [] if isinstance(r, dict)]
    return {"name": str(res.get("name") or d.name), "folder": d.name,
            "description": str(res["description"]).strip() if res.get("description") else None,
            "incomplete": res.get("complete") is False,
            "runs": table(runs) if runs else None, "ratios": table(ratios) if ratios else None,
            "plots": [plot_view(p, d) for p in plots_in(d)]}


def write_report(d: Path) -> Path:
    """Write ``report.html`` into the results folder ``d`` (a run's, with or without rounds, or a
    comparison's) from its files; return its path.

    Raises:
        FileNotFoundError: ``d`` is not a results folder (:func:`folder_kind`).
        ValueError: ``d`` is a study's folder (its report is experiments.studyreport's), or a
            file it needs does not parse.
        OSError: a file cannot be read, or the report cannot be written.
    """
    d = Path(d)
    kind = folder_kind(d)
    if kind == "study":
        raise ValueError(f"{d} is a study's folder: its report.html is experiments.studyreport's")
    html_text = render("comparison.html.j2", **comparison_view(d)) if kind == "comparison" \
        else render("run.html.j2", **run_view(d))
    path = d / REPORT
    path.write_text(html_text, encoding="utf-8")
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m experiments.report RESULTS_DIR", file=sys.stderr)
        sys.exit(2)
    print(write_report(Path(sys.argv[1])))
