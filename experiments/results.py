"""A results folder as tables for a notebook: ``experiments.results.load(dir)``.

    from experiments import results
    r = results.load("results/20261205T091500Z-incast")
    r.flows.groupby("variant")["fct_s"].median()

Works on a run's folder (one round, or rounds under ``rounds/``), a comparison's and a study's
(whose runs hold its cells as rounds): every round folder under ``dir`` (a folder with a
``summary.json``) is one round. Each per-round table starts with the round's labels
(experiments.tables.LABEL_COLUMNS: ``round``, ``variant``, ``seed``, written by the run loop), then
``run`` (the run's folder relative to ``dir``, ``.`` for ``dir`` itself), then the file's columns.
A folder written before the labels existed gets ``round`` and ``variant`` from its folder's name.

pandas is optional for fabriclab: only this module needs it (``pip install pandas``, or the
``notebook`` extra).
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.tables import LABEL_COLUMNS

#: The tables :func:`load` reads up front: attribute -> the round folder's CSV file.
TABLES = {"flows": "flows.csv", "queues": "queues.csv", "ports": "ports.csv"}


def _pandas():
    try:
        import pandas
    except ImportError:
        raise ImportError("experiments.results.load needs pandas: pip install pandas "
                          "(or .venv/bin/pip install -e '.[notebook]')") from None
    return pandas


def round_folders(folder: Path) -> list[Path]:
    """Every round folder under ``folder`` (itself included): folders with a ``summary.json``,
    not inside an ``agents/`` folder, in path order."""
    folder = Path(folder)
    found = [p.parent for p in folder.rglob("summary.json") if "agents" not in p.relative_to(folder).parts]
    return sorted(found)


def _labels(rdir: Path, top: Path) -> dict:
    """The round's labels from its own files: its environment's round name, else its folder's
    name (``NN-name`` under ``rounds/``, else the folder's name); ``run``: its run's folder."""
    run = rdir.parent.parent if rdir.parent.name == "rounds" else rdir
    name = rdir.name.split("-", 1)[1] if rdir.parent.name == "rounds" and "-" in rdir.name else rdir.name
    seed = None
    env = rdir / "environment.json"
    if env.exists():
        try:
            rnd = json.loads(env.read_text()).get("round") or {}
            name = rnd.get("name", name)
        except ValueError:
            pass
    return {"round": name, "variant": name, "seed": seed, "run": str(run.relative_to(top))}


@dataclass(frozen=True)
class Results:
    """A results folder's tables (pandas DataFrames), one row per record of every round:

    Attributes:
        folder: the folder read.
        flows: flows.csv of every round (one row per flow: sizes in bytes, times in seconds).
        queues: queues.csv (one row per queue sample: ``t_s``, ``intf``, backlog in bytes and packets).
        ports: ports.csv (one row per switch port: rate, buffer, drops, backlog percentiles).
        rounds: one row per round: its labels, ``run``, ``folder`` and every number, string and
            boolean of its summary.json, flattened with dotted names (``bottleneck.drops``,
            ``collective.busbw_mbps`` ...); lists are left out.
    """
    folder: Path
    flows: Any
    queues: Any
    ports: Any
    rounds: Any
    _dirs: tuple = field(default=(), repr=False)

    def table(self, name: str):
        """Any per-round CSV by its file name without ``.csv`` (e.g. ``"tcp_samples"``,
        ``"pauses"``, ``"collective"``, ``"link_bytes"``), every round's rows concatenated with
        the labels first; an empty DataFrame when no round has it."""
        return _concat(self._dirs, self.folder, f"{name}.csv")


def _read_one(path: Path, labels: dict):
    pd = _pandas()
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return None
    for i, k in enumerate(LABEL_COLUMNS):
        if k not in df.columns:
            df.insert(i, k, labels[k])
    df.insert(len(LABEL_COLUMNS), "run", labels["run"])
    return df


def _concat(dirs, top: Path, filename: str):
    pd = _pandas()
    frames = [f for f in (_read_one(d / filename, _labels(d, top)) for d in dirs if (d / filename).exists())
              if f is not None]
    frames = [f for f in frames if len(f)] or frames[:1]
    if not frames:
        return pd.DataFrame(columns=list(LABEL_COLUMNS) + ["run"])
    return pd.concat(frames, ignore_index=True)


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        elif isinstance(v, (int, float, str, bool)) or v is None:
            out[key] = v
    return out


def _round_row(rdir: Path, top: Path) -> dict:
    labels = _labels(rdir, top)
    for path in (rdir / "flows.csv", rdir / "queues.csv", rdir / "ports.csv"):
        if path.exists():           # the labels the run loop wrote beat the folder's name
            with open(path, newline="") as f:
                rows = csv.reader(f)
                head, first = next(rows, []), next(rows, [])
            if head[:3] == list(LABEL_COLUMNS) and len(first) >= 3:
                labels.update(round=first[0], variant=first[1], seed=int(first[2]) if first[2] else None)
            break
    summary = json.loads((rdir / "summary.json").read_text())
    return {**labels, "folder": str(rdir.relative_to(top)), **_flatten(summary)}


def load(folder: str | Path) -> Results:
    """Read a results folder (a run, a comparison or a study) into :class:`Results`.

    Raises:
        FileNotFoundError: ``folder`` has no round folder (no ``summary.json`` under it).
        ImportError: pandas is not installed.
    """
    pd = _pandas()
    top = Path(folder)
    dirs = tuple(round_folders(top))
    if not dirs:
        raise FileNotFoundError(f"{top}: no round's summary.json under it: not a results folder")
    tables = {attr: _concat(dirs, top, name) for attr, name in TABLES.items()}
    rounds = pd.DataFrame([_round_row(d, top) for d in dirs])
    return Results(folder=top, rounds=rounds, _dirs=dirs, **tables)
