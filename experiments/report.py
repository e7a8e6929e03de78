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

from experiments.pagekit import Caption, esc, figure, page, read_caption

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

EXTRA_CSS = (".wide{overflow-x:auto}.generic figcaption,.generic .read{color:#a60}"
             "details{margin:.3em 0 .8em}summary{cursor:pointer;color:#333}")


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


def facts_table(d: dict, skip: tuple = ()) -> str:
    """A two-column table of ``d``'s keys and :func:`fmt` values (keys in ``skip`` left out)."""
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(fmt(v))}</td></tr>" for k, v in d.items() if k not in skip)
    return f'<div class="wide"><table>{rows}</table></div>' if rows else '<p class="muted">nothing recorded</p>'


def rows_table(rows: list[dict], skip: tuple = ()) -> str:
    """A table of a list of dicts (a CSV's rows, a JSON list): one column per key of any row."""
    cols = [c for c in dict.fromkeys(k for r in rows for k in r) if c not in skip]
    head = "".join(f"<th>{esc(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{esc(fmt(r.get(c)))}</td>" for c in cols) + "</tr>"
                   for r in rows[:MAX_TABLE_ROWS])
    more = (f'<p class="muted">{len(rows) - MAX_TABLE_ROWS} more rows in the file.</p>'
            if len(rows) > MAX_TABLE_ROWS else "")
    return f'<div class="wide"><table><tr>{head}</tr>{body}</table></div>{more}'


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


def plot_figure(p: Plot, folder: Path) -> str:
    """A plot: its title, "how to read this" and the PNG inline; ``data-file`` names the PNG
    relative to ``folder`` (the report's)."""
    rel = p.path.relative_to(folder) if p.path.is_relative_to(folder) else p.path.name
    cls = "plot generic" if p.generic else "plot"
    return (f'<section class="{cls}" data-file="{esc(rel)}"><h4>{esc(p.caption.title)} '
            f'<span class="muted">({esc(rel)})</span></h4>'
            f'<p class="read"><b>How to read this.</b> {esc(p.caption.how)}</p>'
            f"{figure(p.path, p.caption.title)}</section>")


# ---------------------------------------------------------------- sections

def _fidelity(s: dict) -> dict:
    f = s.get("fidelity")
    return f if isinstance(f, dict) else {}


def fidelity_table(rounds: list[Round]) -> str:
    """One row per round: ok, its failed checks, whether the run accepted them; ``ok`` is
    ``not recorded`` for a summary without a fidelity block."""
    out = ['<table class="fidelity"><tr><th>round</th><th>ok</th><th>failures</th>'
           "<th>accepted_unfaithful</th></tr>"]
    for r in rounds:
        f = _fidelity(r.summary)
        ok = f.get("ok")
        cls = "ok" if ok is True else "warn"
        fails = f.get("failures") or []
        out.append(f'<tr><td>{esc(r.name)}</td><td class="{cls}">{esc("not recorded" if ok is None else fmt(ok))}</td>'
                   f"<td>{'<br>'.join(esc(x) for x in fails) or '-'}</td>"
                   f"<td>{esc(fmt(f.get('accepted_unfaithful')))}</td></tr>")
    out.append("</table>")
    return "".join(out)


def _verdict(rounds: list[Round]) -> str:
    failed = [r for r in rounds if _fidelity(r.summary).get("ok") is False]
    missing = [r for r in rounds if _fidelity(r.summary).get("ok") is None]
    if failed:
        accepted = all(_fidelity(r.summary).get("accepted_unfaithful") for r in failed)
        return (f'<p class="warn">Unfaithful: {len(failed)} of {len(rounds)} round(s) failed a fidelity check '
                f"({', '.join(esc(r.name) for r in failed)})"
                + ("; the run accepted them (--accept-unfaithful or a study)" if accepted else "")
                + ". Their figures describe the emulation, not the fabric it stands for.</p>")
    if missing:
        return f'<p class="muted">{len(missing)} round(s) have no fidelity block.</p>'
    if not rounds:
        return '<p class="warn">No round was analysed (the run ended before any round\'s traffic finished).</p>'
    return f'<p class="ok">Every round ({len(rounds)}) passed its fidelity checks.</p>'


def _round_section(i: int, r: Round, folder: Path, multi: bool) -> str:
    s = r.summary
    out = [f"<h2>Round {i}: {esc(r.name)}</h2>" if multi else "<h2>Summary</h2>"]
    if r.text is not None:
        out.append(f"<pre>{esc(r.text.rstrip())}</pre>")
    out.append(f"<details{' open' if r.text is None else ''}><summary>Every figure of "
               f"{esc(r.dir.relative_to(folder) / 'summary.json' if r.dir != folder else 'summary.json')}"
               f"</summary>{facts_table(s, skip=('fidelity',))}</details>")
    f = _fidelity(s)
    ok = f.get("ok")
    verdict = ("passed" if ok else "FAILED" + (" (accepted)" if f.get("accepted_unfaithful") else "")) \
        if ok is not None else "not recorded"
    out.append(f'<h3>Fidelity: <span class="{"ok" if ok else "warn"}">{esc(verdict)}</span></h3>')
    if f.get("failures"):
        out.append("<ul>" + "".join(f"<li>{esc(x)}</li>" for x in f["failures"]) + "</ul>")
    out.append(f"<details><summary>The fidelity block</summary>{facts_table(f)}</details>")
    if r.plots:
        out.append("<h3>Plots</h3>" + "".join(plot_figure(p, folder) for p in r.plots))
    return "".join(out)


def run_body(d: Path) -> tuple[str, str]:
    """(title, body HTML) of a run folder's report (see the module docstring).

    Raises:
        OSError, ValueError: ``scenario.yaml`` or ``environment.json`` unreadable.
    """
    sc = yaml.safe_load((d / "scenario.yaml").read_text()) or {}
    env = json.loads((d / "environment.json").read_text())
    rounds = load_rounds(d)
    single = [d] == [r.dir for r in rounds]
    if single:
        rounds = [Round(r.name, r.dir, r.summary, r.text, []) for r in rounds]
    name = str(sc.get("name") or d.name)
    out = [f"<h1>{esc(name)}</h1>", f'<p class="muted">{esc(d.name)}</p>']
    if sc.get("description"):
        out.append(f"<p>{esc(str(sc['description']).strip())}</p>")
    out.append(_verdict(rounds))
    out.append("<h2>Environment</h2>"
               + facts_table({k: env.get(k) for k in ("datapath", "kernel", "ovs_version", "machine", "cpus",
                                                     "git_revision", "accept_unfaithful") if k in env})
               + f"<details><summary>Everything environment.json records (what each feature chose)</summary>"
                 f"{facts_table(env)}</details>")
    out.append("<h2>Fidelity, round by round</h2>" + fidelity_table(rounds))
    for t in sorted(d.glob("*rounds.csv")):
        try:
            rows = _csv_rows(t)
        except (OSError, csv.Error):
            continue
        if rows:
            out.append(f"<h2>The rounds side by side ({esc(t.name)})</h2>" + rows_table(rows, skip=("folder",)))
    rounds_html = [_round_section(i, r, d, not single) for i, r in enumerate(rounds, 1)]
    if single:                       # a run of one round: its summary, then its plots
        out += rounds_html
    top = plots_in(d)
    if top:
        out.append("<h2>Plots of the whole run</h2>" if not single else "<h2>Plots</h2>")
        out.append("".join(plot_figure(p, d) for p in top))
    if not single:
        out += rounds_html
    return name, "".join(out)


def comparison_body(d: Path) -> tuple[str, str]:
    """(title, body HTML) of a comparison folder's report: its runs and ratios (comparison.json)
    and its plots. Raises OSError, ValueError: comparison.json unreadable."""
    res = json.loads((d / "comparison.json").read_text())
    name = str(res.get("name") or d.name)
    out = [f"<h1>{esc(name)}</h1>", f'<p class="muted">{esc(d.name)}: a comparison</p>']
    if res.get("description"):
        out.append(f"<p>{esc(str(res['description']).strip())}</p>")
    if res.get("complete") is False:
        out.append('<p class="warn">Incomplete: not every planned run is in.</p>')
    runs = [r for r in res.get("runs") or [] if isinstance(r, dict)]
    if runs:
        out.append("<h2>Runs</h2>" + rows_table(runs)
                   + '<p class="muted">Each run\'s folder (the <code>run</code> column) has its own report.html.</p>')
    ratios = [r for r in res.get("ratios") or [] if isinstance(r, dict)]
    if ratios:
        out.append("<h2>Ratios</h2>" + rows_table(ratios))
    top = plots_in(d)
    if top:
        out.append("<h2>Plots</h2>" + "".join(plot_figure(p, d) for p in top))
    return name, "".join(out)


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
    title, body = comparison_body(d) if kind == "comparison" else run_body(d)
    body += (f'<p class="muted">Written from the folder\'s files by experiments/report.py; every plot above is a file '
             f"of the folder, drawn again by <code>python -m experiments plot {esc(d.name)}</code>.</p>")
    html_text = page(f"{title}: fabriclab report", body).replace("</style>", EXTRA_CSS + "</style>", 1)
    path = d / REPORT
    path.write_text(html_text, encoding="utf-8")
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m experiments.report RESULTS_DIR", file=sys.stderr)
        sys.exit(2)
    print(write_report(Path(sys.argv[1])))
