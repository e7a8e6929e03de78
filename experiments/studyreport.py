"""Plots and a self-contained HTML report of a study folder (variants x seeds x sweep points).

Reads only the study's files, never the runner or a live fabric:

- ``comparison.json`` (required): the study's shape, per-variant medians and confidence
  intervals, the paired comparisons, the cells (ok or failed) and the bottlenecks;
- ``study.csv`` (long form: one row per cell and metric; ``value`` empty = not measured): the
  per-seed values the plots show as points (without it, ``per_variant[].values`` are used);
- ``study_fct.csv`` (optional): one row per flow, for the FCT ECDF and the slowdown by flow size.

``write_report(study_dir)`` writes every plot that the files allow and ``report.html`` (every
PNG embedded as a ``data:`` URI, inline CSS, no script, nothing loaded from the network) into
``study_dir``; ``python -m experiments.studyreport STUDY_DIR`` does the same. The page is
rendered from the template ``study.html.j2`` (experiments/templates/, experiments.pagekit.render);
this module gives it its values, already formatted as text, and the template escapes them.
"""
from __future__ import annotations

import csv
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Ellipse  # noqa: E402

from experiments import studystats  # noqa: E402
from experiments.pagekit import png_data_uri, render  # noqa: E402

DPI = 110
#: Figure width (inches): 880 px at :data:`DPI`, readable at 800 px.
FIG_W = 8.0
#: Panels per row in a figure with one panel per sweep point.
MAX_COLS = 3
#: Flow-size buckets of the slowdown plot (fewer when the flows have fewer distinct sizes).
SIZE_BUCKETS = 5
#: Bootstrap resamples of the seeds for the slowdown plot's intervals (:func:`bootstrap_median_ci`).
BOOTSTRAP_N = 2000
#: A log axis when the positive values span more than this factor (two decades).
LOG_SPAN = 100.0
THROUGHPUT, QUEUE_DELAY = "throughput_mbps", "queue_delay_median_ms"

Point = tuple            # one sweep point: the swept values, normalised by _sv, in sweep_keys order


def _sv(v):
    """A swept value as a comparable key: a float when it reads as a number, else its string
    ("" for None): JSON's 5, CSV's "5" and "5.0" all become 5.0."""
    if v is None or v == "":
        return ""
    if isinstance(v, bool):
        return str(v)
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    return f if math.isfinite(f) else str(v)


def _num(v) -> float | None:
    """A value from a file as a finite float, or None (empty, "None", "nan", unreadable)."""
    if v is None or v == "" or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _seed(v):
    """A seed as an int when it is one (CSV gives strings)."""
    try:
        return int(v)
    except (TypeError, ValueError):
        return str(v)


@dataclass
class Study:
    """What the report needs from a study folder, read once by :func:`load_study`.

    ``values[(variant, point, metric)]`` maps seed -> value (finite floats only; not measured =
    absent). ``stats[(variant, point, metric)]`` is the ``per_variant`` entry. ``fct`` is the
    list of ``study_fct.csv`` rows (dicts of strings) or None when the file is absent.
    """
    dir: Path
    cmp: dict
    variants: list
    sweep_keys: list
    seeds: list
    points: list                       # distinct sweep points, ordered (numeric where possible)
    metrics: dict                      # name -> {"unit", "better", "title"}, file order then study.csv's
    values: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)
    fct: list | None = None
    cells: list = field(default_factory=list)
    seen: dict = field(default_factory=dict)      # (key index, value) -> first appearance, for order()

    def point_of(self, sweep: dict | None) -> Point:
        """The normalised sweep point of a ``{key: value}`` dict (missing keys as "")."""
        sweep = sweep or {}
        return tuple(_sv(sweep.get(k)) for k in self.sweep_keys)

    def point_label(self, p: Point) -> str:
        """``key=value, ...`` of a sweep point ("" without a sweep)."""
        return ", ".join(f"{k}={_fmt_sweep(v)}" for k, v in zip(self.sweep_keys, p))

    def color(self, variant: str) -> str:
        """The variant's colour, the same in every plot."""
        return f"C{self.variants.index(variant) % 10}" if variant in self.variants else "grey"

    def order(self, p: Point) -> tuple:
        """Sort key of a sweep point: numbers ascending, other values in the order the files name
        them (cells first)."""
        return tuple((0, v) if isinstance(v, float) else (1, self.seen.get((i, v), len(self.seen)))
                     for i, v in enumerate(p))

    def measured(self, metric: str) -> bool:
        """Whether any cell has a value of ``metric``."""
        return any(m == metric and vals for (_, _, m), vals in self.values.items())


def _fmt_sweep(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def load_study(study_dir: Path) -> Study:
    """Read a study folder (see the module docstring).

    Raises:
        FileNotFoundError: no ``comparison.json`` in ``study_dir``.
        ValueError: ``comparison.json`` is not a JSON object.
    """
    study_dir = Path(study_dir)
    cmp = json.loads((study_dir / "comparison.json").read_text())
    if not isinstance(cmp, dict):
        raise ValueError(f"{study_dir / 'comparison.json'}: not a JSON object")
    sweep_keys = [str(k) for k in cmp.get("sweep_keys") or []]
    variants = [str(v) for v in cmp.get("variants") or []]
    metrics = {str(k): dict(v or {}) for k, v in (cmp.get("metrics") or {}).items()}
    st = Study(dir=study_dir, cmp=cmp, variants=variants, sweep_keys=sweep_keys,
               seeds=list(cmp.get("seeds") or []), points=[], metrics=metrics,
               cells=list(cmp.get("cells") or []))

    def note_variant(v: str):
        if v not in st.variants:
            st.variants.append(v)

    for e in cmp.get("per_variant") or []:
        v, m, p = str(e.get("variant")), str(e.get("metric")), st.point_of(e.get("sweep"))
        note_variant(v)
        st.stats[(v, p, m)] = e
        metrics.setdefault(m, {})
    csv_path = study_dir / "study.csv"
    if csv_path.exists():
        for r in _read_csv(csv_path):
            v, m = str(r.get("variant")), str(r.get("metric"))
            p = tuple(_sv(r.get(k)) for k in sweep_keys)
            note_variant(v)
            if m not in metrics:
                metrics[m] = {"unit": r.get("unit") or "", "better": None, "title": m}
            x = _num(r.get("value"))
            d = st.values.setdefault((v, p, m), {})
            if x is not None:
                d[_seed(r.get("seed"))] = x
    else:                                   # the same values, from comparison.json
        for (v, p, m), e in st.stats.items():
            d = st.values.setdefault((v, p, m), {})
            for s, x in zip(e.get("seeds") or st.seeds, e.get("values") or []):
                if _num(x) is not None:
                    d[_seed(s)] = float(x)
    fct_path = study_dir / "study_fct.csv"
    if fct_path.exists():
        st.fct = _read_csv(fct_path)
        for r in st.fct:
            note_variant(str(r.get("variant")))
    pts = [st.point_of(c.get("sweep")) for c in st.cells]
    pts += [p for (_, p, _) in st.stats] + [p for (_, p, _) in st.values]
    for p in pts:
        for i, v in enumerate(p):
            st.seen.setdefault((i, v), len(st.seen))
    st.points = sorted(set(pts), key=st.order) or [()]
    return st


# ---------------------------------------------------------------- formatting

def _mpl(s) -> str:
    """A string from the files as matplotlib text: ``$`` escaped (no mathtext)."""
    return str(s).replace("$", r"\$")


def _metric_title(st: Study, m: str) -> str:
    return str(st.metrics.get(m, {}).get("title") or m)


def _metric_unit(st: Study, m: str) -> str:
    return str(st.metrics.get(m, {}).get("unit") or "")


def _axis_label(st: Study, m: str) -> str:
    u = _metric_unit(st, m)
    return _mpl(f"{_metric_title(st, m)} ({u})" if u else _metric_title(st, m))


def _better_note(st: Study, m: str) -> str:
    b = st.metrics.get(m, {}).get("better")
    return f", {b} is better" if b in ("lower", "higher") else ""


def _unit_scale(unit: str, ref: float) -> tuple[float, str]:
    """(factor, unit) to show values of magnitude ``ref`` in: seconds below 1 s as ms or µs."""
    if unit == "s" and 0 < ref < 1:
        return (1e3, "ms") if ref >= 1e-3 else (1e6, "µs")
    return 1.0, unit


def _fmt_num(x: float, digits: int = 3) -> str:
    if x == 0:
        return "0"
    if 1e3 <= abs(x) < 1e7:
        return f"{x:.0f}"
    if abs(x) < 1e-3 or abs(x) >= 1e7:
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}g}"


def fmt_value(v, unit: str = "", digits: int = 3) -> str:
    """``v`` with ``digits`` significant digits and its unit: seconds below 1 s as ms or µs,
    thousands without an exponent (``9412 Mbit/s``), very large or small numbers as ``1.23e+07``;
    ``-`` for None. ``unit`` is appended as given (units come from the study's files)."""
    x = _num(v)
    if x is None:
        return "-"
    f, u = _unit_scale(unit, abs(x))
    s = _fmt_num(x * f, digits)
    return f"{s} {u}" if u else s


def fmt_with_ci(v, lo, hi, unit: str = "") -> tuple[str, str]:
    """(``v`` with its unit, ``[lo, hi]``): the three in one unit, chosen by the largest of them
    (a difference of -0.3 ms with an interval of [-2, 1] ms, not [-2 ms, 980 µs]); the interval
    is "" when either end is None. See :func:`fmt_value`."""
    xs = [x for x in (_num(v), _num(lo), _num(hi)) if x is not None]
    f, u = _unit_scale(unit, max((abs(x) for x in xs), default=0.0))
    main = "-" if _num(v) is None else _fmt_num(_num(v) * f) + (f" {u}" if u else "")
    if _num(lo) is None or _num(hi) is None:
        return main, ""
    return main, f"[{_fmt_num(_num(lo) * f)}, {_fmt_num(_num(hi) * f)}]"


def fmt_p(p) -> str:
    """A p-value with two significant digits, ``<0.0001`` below that; ``-`` for None."""
    x = _num(p)
    if x is None:
        return "-"
    return "<0.0001" if x < 1e-4 else f"{x:.2g}"


def fmt_bytes(n: float) -> str:
    """A size in B, KB, MB or GB (powers of 1000), three significant digits at most."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def safe_name(s: str) -> str:
    """A metric name as a file name part: only letters, digits, ``.``, ``_``, ``-`` (others ``_``;
    no leading dot)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(s)).lstrip(".") or "_"


# ---------------------------------------------------------------- plot helpers

def _panels(n: int, row_h: float = 3.4, max_cols: int = MAX_COLS, sharey: bool = True):
    """A figure :data:`FIG_W` wide with ``n`` panels (rows of at most ``max_cols``); returns the
    figure and the ``n`` axes (extra axes removed)."""
    cols = max(1, min(n, max_cols))
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(FIG_W, 0.9 + row_h * rows), sharey=sharey, squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.remove()
    return fig, flat[:n]


def _finish(fig, path: Path, handles=None, ncol: int = 4) -> Path:
    """Legend (``handles``) under the panels, light grids, write ``path`` (PNG, :data:`DPI`), close."""
    for ax in fig.axes:
        ax.grid(alpha=0.3)
    if handles:
        fig.legend(handles=handles, loc="lower center", ncol=min(ncol, len(handles)), fontsize=7, frameon=False)
        rows = math.ceil(len(handles) / ncol)
        fig.tight_layout(rect=(0, (0.12 + 0.2 * rows) / fig.get_figheight(), 1, 1))   # room for the legend
    else:
        fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _variant_handles(st: Study, variants, marker="o", ls="") -> list:
    return [Line2D([], [], color=st.color(v), marker=marker, ls=ls, label=_mpl(v)) for v in variants]


def _log_if_wide(ax, values, axis: str = "y") -> bool:
    pos = [v for v in values if v is not None and v > 0]
    if len(pos) >= 2 and len(pos) == len([v for v in values if v is not None]) and max(pos) / min(pos) > LOG_SPAN:
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
        return True
    return False


def _stat(st: Study, v: str, p: Point, m: str) -> tuple:
    """(median, ci_low, ci_high) of a variant at a point: ``per_variant``'s, else the median of
    the per-seed values without an interval; Nones when nothing was measured."""
    e = st.stats.get((v, p, m))
    if e is not None and _num(e.get("median")) is not None:
        return _num(e.get("median")), _num(e.get("ci_low")), _num(e.get("ci_high"))
    vals = list(st.values.get((v, p, m), {}).values())
    return (float(np.median(vals)) if vals else None), None, None


def _draw_ci(ax, x, med, lo, hi, color):
    """The median as a short bar and the CI as a whisker with caps at ``x``."""
    if med is None:
        return
    ax.plot([x - 0.22, x + 0.22], [med, med], color=color, lw=2.6, solid_capstyle="butt", zorder=4)
    if lo is not None and hi is not None:
        ax.errorbar([x + 0.12], [med], yerr=[[max(med - lo, 0.0)], [max(hi - med, 0.0)]], fmt="none",
                    ecolor="k", elinewidth=1.2, capsize=4, zorder=5)


# ---------------------------------------------------------------- the plots

def plot_metric(st: Study, metric: str) -> Path | None:
    """``metric_<name>.png``: per sweep point (one panel each), per variant (x), every seed's
    value as a jittered dot, the median as a short bar and its confidence interval as a black
    whisker (from ``per_variant``). None when no cell has a value of ``metric``."""
    if not st.measured(metric):
        return None
    rng = np.random.default_rng(0)
    fig, axes = _panels(len(st.points))
    allv = []
    for ax, p in zip(axes, st.points):
        for i, v in enumerate(st.variants):
            vals = list(st.values.get((v, p, metric), {}).values())
            allv += vals
            c = st.color(v)
            if vals:
                ax.scatter(i - 0.08 + rng.uniform(-0.12, 0.12, len(vals)), vals, s=16, color=c, alpha=0.6,
                           edgecolors="none", zorder=3)
            med, lo, hi = _stat(st, v, p, metric)
            allv += [x for x in (med, lo, hi) if x is not None]
            _draw_ci(ax, i, med, lo, hi, c)
        ax.set_xticks(range(len(st.variants)))
        long = sum(len(v) + 2 for v in st.variants) > 100 / min(len(st.points), MAX_COLS)   # ~chars per panel
        ax.set_xticklabels([_mpl(v) for v in st.variants], fontsize=7, rotation=25 if long else 0,
                           ha="right" if long else "center")
        ax.set_xlim(-0.6, len(st.variants) - 0.4)
        if st.sweep_keys:
            ax.set_title(_mpl(st.point_label(p)), fontsize=8)
    for ax in axes[::MAX_COLS]:
        ax.set_ylabel(_axis_label(st, metric), fontsize=8)
    _log_if_wide(axes[0], allv)
    conf = _interval_level(st)
    fig.suptitle(_mpl(f"{st.cmp.get('study', '')}: {_metric_title(st, metric)} per variant"
                      f"{_better_note(st, metric)}"), fontsize=10)
    handles = [Line2D([], [], color="grey", marker="o", ls="", alpha=0.6, label="one seed"),
               Line2D([], [], color="grey", lw=2.6, label="median over seeds"),
               Line2D([], [], color="k", marker="_", ms=8, lw=1.2, label=f"{_pct(conf)} confidence interval")]
    return _finish(fig, st.dir / f"metric_{safe_name(metric)}.png", handles, ncol=3)


def _fct_rows(st: Study):
    """(variant, point, seed, bytes, fct_s, slowdown) of every ``study_fct.csv`` row (None where
    a number is missing)."""
    for r in st.fct or []:
        yield (str(r.get("variant")), tuple(_sv(r.get(k)) for k in st.sweep_keys), _seed(r.get("seed")),
               _num(r.get("bytes")), _num(r.get("fct_s")), _num(r.get("slowdown")))


def plot_fct_ecdf(st: Study) -> Path | None:
    """``fct_ecdf.png``: the empirical CDF of the flow completion times (s) per variant, every
    seed's flows pooled, one panel per sweep point; log x when the times span more than two
    decades. None without ``study_fct.csv`` or without a completed flow."""
    fcts: dict = {}
    missing: dict = {}
    for v, p, _, _, fct, _ in _fct_rows(st):
        if fct is not None and fct > 0:
            fcts.setdefault((v, p), []).append(fct)
        else:
            missing[(v, p)] = missing.get((v, p), 0) + 1
    if not fcts:
        return None
    allf = [x for xs in fcts.values() for x in xs]
    fig, axes = _panels(len(st.points), row_h=3.2)
    log = max(allf) / min(allf) > LOG_SPAN
    for ax, p in zip(axes, st.points):
        for v in st.variants:
            xs = np.sort(fcts.get((v, p), []))
            if len(xs):
                y = np.arange(1, len(xs) + 1) / len(xs)
                ax.step(np.concatenate([[xs[0]], xs]), np.concatenate([[0.0], y]), where="post",
                        color=st.color(v), lw=1.5)
            if missing.get((v, p)):
                ax.plot([], [], " ", label=_mpl(f"{v}: {missing[(v, p)]} flows without a time"))
        if log:
            ax.set_xscale("log")
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("flow completion time (s)", fontsize=8)
        if st.sweep_keys:
            ax.set_title(_mpl(st.point_label(p)), fontsize=8)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6, loc="lower right", frameon=False)
    for ax in axes[::MAX_COLS]:
        ax.set_ylabel("fraction of flows completed", fontsize=8)
    fig.suptitle(_mpl(f"{st.cmp.get('study', '')}: flow completion times, all seeds pooled"), fontsize=10)
    shown = [v for v in st.variants if any(k[0] == v for k in fcts)]
    return _finish(fig, st.dir / "fct_ecdf.png", _variant_handles(st, shown, marker="", ls="-"))


def _cov_ellipse(xs, ys, color, ax) -> bool:
    """A one-sigma covariance ellipse of the points around their mean; False with < 3 points."""
    if len(xs) < 3:
        return False
    cov = np.cov(np.asarray(xs), np.asarray(ys))
    w, vec = np.linalg.eigh(cov)
    w = np.clip(w, 0, None)
    angle = math.degrees(math.atan2(vec[1, 1], vec[0, 1]))
    ax.add_patch(Ellipse((float(np.mean(xs)), float(np.mean(ys))), 2 * math.sqrt(w[1]), 2 * math.sqrt(w[0]),
                         angle=angle, facecolor=color, edgecolor=color, alpha=0.18, lw=1.2, zorder=2))
    return True


def plot_throughput_delay(st: Study) -> Path | None:
    """``throughput_delay.png``, Pantheon's view (Yan et al., USENIX ATC 2018): per seed a dot at
    (median queueing delay in ms, throughput in Mbit/s), per variant the mean (large marker) and a
    one-sigma covariance ellipse (three seeds or more), x axis inverted so that better is up and
    to the right; one panel per sweep point. None when either metric is not measured."""
    if not (st.measured(THROUGHPUT) and st.measured(QUEUE_DELAY)):
        return None
    fig, axes = _panels(len(st.points), row_h=3.6, max_cols=2, sharey=False)
    for ax, p in zip(axes, st.points):
        for v in st.variants:
            tp = st.values.get((v, p, THROUGHPUT), {})
            qd = st.values.get((v, p, QUEUE_DELAY), {})
            seeds = [s for s in tp if s in qd]
            if not seeds:
                continue
            xs, ys = [qd[s] for s in seeds], [tp[s] for s in seeds]
            c = st.color(v)
            ax.scatter(xs, ys, s=14, color=c, alpha=0.55, edgecolors="none", zorder=3)
            _cov_ellipse(xs, ys, c, ax)
            ax.scatter([np.mean(xs)], [np.mean(ys)], s=70, marker="D", color=c, edgecolors="k", zorder=4)
        ax.autoscale_view()
        ax.invert_xaxis()
        ax.set_xlabel(_axis_label(st, QUEUE_DELAY) + ", better \u2192", fontsize=8)
        ax.set_ylabel(_axis_label(st, THROUGHPUT), fontsize=8)
        if st.sweep_keys:
            ax.set_title(_mpl(st.point_label(p)), fontsize=8)
    fig.suptitle(_mpl(f"{st.cmp.get('study', '')}: throughput against queueing delay "
                      "(Pantheon's view: better is up and right)"), fontsize=10)
    handles = _variant_handles(st, [v for v in st.variants
                                    if any(st.values.get((v, p, THROUGHPUT)) for p in st.points)], marker="D")
    handles += [Line2D([], [], color="grey", marker="o", ls="", alpha=0.55, label="one seed"),
                Line2D([], [], color="grey", marker="D", ls="", mec="k", label="mean, ellipse: 1 sigma")]
    return _finish(fig, st.dir / "throughput_delay.png", handles)


def _sweep_x(st: Study):
    """(x values per point, numeric?, tick labels) of the first swept key; None without a sweep
    or with fewer than two values of it."""
    if not st.sweep_keys:
        return None
    firsts = list(dict.fromkeys(p[0] for p in st.points))
    if len(firsts) < 2:
        return None
    if all(isinstance(f, float) for f in firsts):
        return {f: f for f in firsts}, True, None
    return {f: i for i, f in enumerate(firsts)}, False, [_fmt_sweep(f) for f in firsts]


def plot_sweep(st: Study, metric: str) -> Path | None:
    """``sweep_<metric>.png``: the metric against the first swept key, per variant (and per value
    of any further swept key) the median line, the confidence band and every seed as a dot. None
    without a sweep of two values or more, or when the metric is not measured."""
    sx = _sweep_x(st)
    if sx is None or not st.measured(metric):
        return None
    xmap, numeric, ticks = sx
    rests = list(dict.fromkeys(p[1:] for p in st.points))
    fig, ax = plt.subplots(figsize=(FIG_W, 4.8))
    handles, allv = [], []
    styles = ["-", "--", ":", "-."]
    for v in st.variants:
        for j, rest in enumerate(rests):
            pts = sorted((p for p in st.points if p[1:] == rest), key=lambda p: xmap[p[0]])
            x, med, lo, hi = [], [], [], []
            for p in pts:
                m, a, b = _stat(st, v, p, metric)
                vals = list(st.values.get((v, p, metric), {}).values())
                if vals:
                    ax.scatter([xmap[p[0]]] * len(vals), vals, s=9, color=st.color(v), alpha=0.4,
                               edgecolors="none", zorder=3)
                    allv += vals
                if m is None:
                    continue
                x.append(xmap[p[0]])
                med.append(m)
                lo.append(a if a is not None else m)
                hi.append(b if b is not None else m)
            if not x:
                continue
            label = v + (" " + ", ".join(f"{k}={_fmt_sweep(r)}" for k, r in zip(st.sweep_keys[1:], rest))
                         if rest else "")
            ax.plot(x, med, styles[j % len(styles)], marker="o", ms=4, color=st.color(v), lw=1.5,
                    label=_mpl(label), zorder=4)
            ax.fill_between(x, lo, hi, color=st.color(v), alpha=0.15, lw=0)
            allv += med + lo + hi
    key = st.sweep_keys[0]
    if numeric:
        _log_if_wide(ax, list(xmap.values()), axis="x")
    else:
        ax.set_xticks(list(xmap.values()), [_mpl(t) for t in ticks])
    _log_if_wide(ax, allv)
    ax.set_xlabel(_mpl(key))
    ax.set_ylabel(_axis_label(st, metric))
    conf = _interval_level(st)
    ax.set_title(_mpl(f"{st.cmp.get('study', '')}: {_metric_title(st, metric)} against {key}"
                      f"{_better_note(st, metric)}"), fontsize=10)
    handles = ax.get_legend_handles_labels()[0]
    handles += [Line2D([], [], color="grey", marker="o", ls="", alpha=0.4, label="one seed"),
                plt.Rectangle((0, 0), 1, 1, color="grey", alpha=0.15, label=f"{_pct(conf)} confidence band")]
    return _finish(fig, st.dir / f"sweep_{safe_name(metric)}.png", handles, ncol=3)


def size_buckets(sizes, n: int = SIZE_BUCKETS) -> list[tuple[float, float]]:
    """Flow-size buckets ``[(lo, hi)]`` (bytes, both inclusive, ascending, disjoint) holding about
    the same number of flows: one per distinct size when there are at most ``n`` sizes, else
    split at the quantiles of ``sizes``. Empty for no sizes."""
    s = np.sort(np.asarray([x for x in sizes if x is not None], dtype=float))
    if not len(s):
        return []
    distinct = np.unique(s)
    if len(distinct) <= n:
        return [(float(d), float(d)) for d in distinct]
    out, lo_i = [], 0
    for k in range(1, n + 1):
        hi_i = int(round(k * len(s) / n)) - 1
        if hi_i < lo_i:
            continue
        hi = s[hi_i]
        hi_i = int(np.searchsorted(s, hi, side="right")) - 1      # a size never spans two buckets
        out.append((float(s[lo_i]), float(hi)))
        lo_i = hi_i + 1
        if lo_i >= len(s):
            break
    return out


def bootstrap_median_ci(values, conf: float = 0.95, n: int = BOOTSTRAP_N, seed: int = 0) -> tuple:
    """(median, low, high): the median of ``values`` (one per seed, in their own unit) and a
    percentile bootstrap interval of it at level ``conf``, as every per-variant interval of a
    study (:func:`experiments.studystats.summarize_variant`: ``scipy.stats.bootstrap`` with
    ``method='percentile'``, ``n`` resamples of the seeds drawn from
    ``numpy.random.default_rng(seed)``). Low and high are None with fewer than two values; all
    three None for none; values all equal give ``(v, v, v)``. None and NaN values are left out.

    Raises:
        ValueError: an infinite value, ``conf`` not strictly between 0 and 1, ``n`` not a
            positive integer.
    """
    s = studystats.summarize_variant(list(values), confidence=conf, n_resamples=n, seed=seed)
    return s.median, s.ci_low, s.ci_high


def plot_slowdown_by_size(st: Study) -> Path | None:
    """``slowdown_by_size.png`` (as HPCC and Homa plot it): flows split into size buckets (quantiles
    of all flows' sizes, labelled with their size range); per variant and bucket, per seed the
    median (left) and p99 (right) slowdown of the bucket's flows, drawn as the median over seeds
    with a bootstrap interval over seeds; one row of panels per sweep point. None without
    ``study_fct.csv`` rows that have a slowdown."""
    rows = [r for r in _fct_rows(st) if r[5] is not None and r[3] is not None]
    if not rows:
        return None
    buckets = size_buckets([r[3] for r in rows])
    conf = _num(st.cmp.get("confidence")) or 0.95
    per: dict = {}                 # (variant, point, bucket) -> {seed: slowdowns}
    for v, p, seed, b, _, sd in rows:
        k = next(i for i, (lo, hi) in enumerate(buckets) if b <= hi)
        per.setdefault((v, p, k), {}).setdefault(seed, []).append(sd)
    pts = [p for p in st.points if any(k[1] == p for k in per)]
    fig, axes = plt.subplots(len(pts), 2, figsize=(FIG_W, 0.9 + 3.0 * len(pts)), squeeze=False, sharex=True)
    variants = [v for v in st.variants if any(k[0] == v for k in per)]
    w = 0.7 / max(len(variants), 1)
    allv = []
    for row, p in zip(axes, pts):
        for ax, (q, name) in zip(row, ((50, "median"), (99, "p99"))):
            for j, v in enumerate(variants):
                xs, ys, lo, hi = [], [], [], []
                for k in range(len(buckets)):
                    per_seed = [float(np.percentile(sds, q)) for sds in per.get((v, p, k), {}).values()]
                    med, a, b = bootstrap_median_ci(per_seed, conf)
                    if med is None:
                        continue
                    xs.append(k - 0.35 + w * (j + 0.5))
                    ys.append(med)
                    lo.append(max(med - a, 0.0) if a is not None else 0.0)     # matplotlib refuses < 0
                    hi.append(max(b - med, 0.0) if b is not None else 0.0)
                    allv.append(med)
                if xs:
                    ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", ms=4, color=st.color(v), ecolor=st.color(v),
                                capsize=2, lw=1)
            ax.axhline(1.0, color="grey", ls=":", lw=1)
            title = f"{name} slowdown per size bucket"
            ax.set_title(_mpl(f"{title}, {st.point_label(p)}" if st.sweep_keys else title), fontsize=8)
            ax.set_ylabel(f"{name} slowdown (fct / ideal fct)", fontsize=8)
    for ax in fig.axes:
        if allv and max(allv) / max(min(allv), 1e-9) > 30:
            ax.set_yscale("log")
        ax.set_xticks(range(len(buckets)))
        ax.set_xticklabels([fmt_bytes(lo) if lo == hi else f"{fmt_bytes(lo)}-\n{fmt_bytes(hi)}"
                            for lo, hi in buckets], fontsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("flow size bucket", fontsize=8)
    fig.suptitle(_mpl(f"{st.cmp.get('study', '')}: slowdown by flow size (per seed, then the median over "
                      f"seeds, {conf:.0%} bootstrap interval over seeds)"), fontsize=9)
    return _finish(fig, st.dir / "slowdown_by_size.png", _variant_handles(st, variants))


# ---------------------------------------------------------------- the report

HOW_TO_READ = {
    "metric": "Each dot is one seed's value (dots are spread sideways only to keep them apart). "
              "The short coloured bar is the median over seeds, the black whisker its {conf} confidence "
              "interval. Overlapping whiskers do not prove that two variants are alike: the paired "
              "comparison in the table above is the test.",
    "fct_ecdf": "For each variant, the fraction of flows (y) that completed within a time (x), every "
                "seed's flows pooled. A curve further left and up is faster; the top of a curve is the "
                "tail (p99 and above), which can differ where the medians do not.",
    "throughput_delay": "Pantheon's view (Yan et al., USENIX ATC 2018): each small dot is one seed at "
                        "(median queueing delay, throughput); the large marker is the variant's mean and "
                        "the shaded ellipse (three seeds or more) one standard deviation of the seeds around "
                        "it. The delay axis is reversed, so better (more throughput, less delay) is up and to the right; a "
                        "large ellipse means the variant's outcome varied from seed to seed.",
    "sweep": "The metric against the swept value: per variant the median over seeds (line), the "
             "{conf} confidence interval (band) and each seed (dots). Bands that do not overlap at a "
             "setting point to a difference there (the comparison table per sweep point is the "
             "test); where the lines cross, which variant is better depends on the setting.",
    "slowdown": "Slowdown is a flow's completion time divided by its ideal completion time on an empty "
                "network (1 = as fast as possible; dotted line). Flows are grouped into size buckets "
                "that hold about as many flows each (labels: the sizes in the bucket). For each seed, "
                "the median (left) and 99th percentile (right) slowdown of the bucket's flows is "
                "taken; the dot is the median of those over seeds and the whisker a {conf} bootstrap "
                "interval over seeds. With few flows in a bucket the p99 is close to the largest.",
}


def _plot_group(title: str, how: str, figures: list[tuple[Path, str]], absent: str) -> dict:
    """A plot kind for the page: its ``title``, ``how`` to read it, its ``figures`` (data: URI,
    caption); ``absent`` (a sentence) is shown without any. Raises OSError: a PNG unreadable."""
    return {"title": title, "how": how, "figures": [(png_data_uri(p), c) for p, c in figures], "absent": absent}


def _verdict(pair: dict) -> tuple[str, str]:
    """(text, css class) of a pair's verdict, the variant spelled out."""
    v = str(pair.get("verdict") or "")
    a, b = str(pair.get("a")), str(pair.get("b"))
    for prefix, name, cls in (("A ", a, "v-a"), ("B ", b, "v-b")):
        if v.startswith(prefix):
            return f"{name} {v[len(prefix):]}", cls
    return (v or "-"), "v-none"


def _cell(v, lo, hi, unit: str, star: bool = False, times: bool = False) -> dict:
    """A number of the comparison table: ``main`` (the value and its unit), ``ci`` (its interval,
    "" for none); ``times`` (a ratio: ``×``) and ``star`` (a short interval: ``*``) follow a value."""
    main, ci = fmt_with_ci(v, lo, hi, unit)
    return {"main": main, "ci": ci, "times": times, "star": star}


def _pair_table(st: Study, pairs: list, conf: float) -> dict:
    """The comparison table of one pair of variants (``a``, ``b``) at one sweep point: ``rows``
    (one per metric), ``conf`` (the intervals' level as a percentage) and ``short`` (the level
    of the narrowest short interval, or None: :func:`experiments.studystats.short_interval`)."""
    a, b = str(pairs[0].get("a")), str(pairs[0].get("b"))
    rows = []
    for pr in pairs:
        m = str(pr.get("metric"))
        u = _metric_unit(st, m)
        p = st.point_of(pr.get("sweep"))
        sa, sb = st.stats.get((a, p, m), {}), st.stats.get((b, p, m), {})
        text, cls = _verdict(pr)
        better = st.metrics.get(m, {}).get("better")
        needed = pr.get("seeds_needed")
        short = bool(studystats.short_interval(pr, conf))
        rows.append({
            "title": _metric_title(st, m), "note": f"{m}, {better} is better" if better in ("lower", "higher") else m,
            "a": _cell(pr.get("a_median"), sa.get("ci_low"), sa.get("ci_high"), u),
            "b": _cell(pr.get("b_median"), sb.get("ci_low"), sb.get("ci_high"), u),
            "diff": _cell(pr.get("diff_median"), pr.get("diff_ci_low"), pr.get("diff_ci_high"), u, star=short),
            "ratio": _cell(pr.get("ratio"), pr.get("ratio_ci_low"), pr.get("ratio_ci_high"), "", star=short,
                           times=True),
            "p": fmt_p(pr.get("p_wilcoxon")), "p_adjusted": fmt_p(pr.get("p_adjusted")),
            "verdict": text, "css": cls, "n": pr.get("n", "-"), "needed": "-" if needed is None else needed})
    short = [x for x in (studystats.short_interval(pr, conf) for pr in pairs) if x]
    return {"a": a, "b": b, "conf": _pct(conf), "rows": rows, "short": _pct(min(short)) if short else None}


def _interval_level(st: Study) -> float:
    """The level of each interval comparison.json gives (:func:`experiments.studystats.interval_level`)."""
    return studystats.interval_level(st.cmp)


def _pct(level: float) -> str:
    """A confidence level as a percentage with the digits it needs (95%, 99.55%)."""
    return f"{100 * level:.4g}%"


def _comparison(st: Study) -> dict | None:
    """The comparison section: ``level`` (the intervals' level), ``conf`` (the study's),
    ``simultaneous`` (the Bonferroni level, or None), ``points`` (per sweep point its ``label``,
    None without a sweep, and its ``tables``, :func:`_pair_table`). None without pairs."""
    pairs = st.cmp.get("pairs") or []
    if not pairs:
        return None
    conf = _num(st.cmp.get("confidence")) or 0.95
    level = _interval_level(st)
    sim = _num(st.cmp.get("simultaneous_confidence"))
    by_point: dict = {}
    for pr in pairs:
        by_point.setdefault(st.point_of(pr.get("sweep")), []).append(pr)
    points = []
    for p in sorted(by_point, key=st.order):
        groups: dict = {}
        for pr in by_point[p]:
            groups.setdefault((str(pr.get("a")), str(pr.get("b"))), []).append(pr)
        points.append({"label": st.point_label(p) if st.sweep_keys else None,
                       "tables": [_pair_table(st, g, level) for g in groups.values()]})
    return {"level": _pct(level), "conf": _pct(conf), "simultaneous": _pct(sim) if sim is not None else None,
            "points": points}


def _shape(st: Study) -> dict:
    """The study's shape: ``rows`` (variants, sweep, seeds, cells: text pairs), ``incomplete``,
    ``unmeasured`` (title, name) of each metric no cell measured."""
    ok = [c for c in st.cells if c.get("status") == "ok"]
    unfaithful = [c for c in st.cells if c.get("status") == "unfaithful"]
    failed = [c for c in st.cells if c.get("status") not in ("ok", "unfaithful")]
    sweep = "none"
    if st.sweep_keys:
        vals = {k: list(dict.fromkeys(p[i] for p in st.points)) for i, k in enumerate(st.sweep_keys)}
        sweep = "; ".join(f"{k}: " + ", ".join(_fmt_sweep(v) for v in vs) for k, vs in vals.items())
    rows = [("variants", ", ".join(st.variants) or "none"), ("sweep", sweep),
            ("seeds", ", ".join(str(s) for s in st.seeds) or "none"),
            ("cells", f"{len(st.cells)}: {len(ok)} ok"
                      + (f", {len(unfaithful)} unfaithful (a fidelity check failed; counted as missing)"
                         if unfaithful else "") + f", {len(failed)} failed")]
    return {"rows": rows, "incomplete": st.cmp.get("complete") is False,
            "unmeasured": [(_metric_title(st, m), m) for m in st.metrics if not st.measured(m)]}


def _bottlenecks(st: Study) -> dict:
    """The bottlenecks that ``moved`` (comparison.json's entries) and whether any differed
    ``within`` a seed (between its variants)."""
    moved = [b for b in st.cmp.get("bottlenecks") or [] if b.get("moved")]
    within = [b for b in st.cmp.get("bottlenecks") or [] if b.get("differs_in_seed")]
    return {"moved": moved, "within": bool(within)}


def _paths(st: Study) -> dict | None:
    """The paths' section: ``text`` (:func:`experiments.studystats.paths_sentence`) and the
    ``differing`` entries when some differed (None when they did not); None without a sentence."""
    paths = st.cmp.get("paths") or {}
    text = studystats.paths_sentence(paths, len(st.variants))
    if not text:
        return None
    if paths.get("checked") and not paths.get("same"):
        return {"text": text, "differing": paths.get("differing") or []}
    return {"text": text[0].upper() + text[1:], "differing": None}


def _failed(st: Study) -> list[dict]:
    """The cells that failed or were unfaithful, each with its sweep point's ``label``."""
    return [dict(c, label=st.point_label(st.point_of(c.get("sweep")))) for c in st.cells if c.get("status") != "ok"]


def study_view(st: Study, plots: dict) -> dict:
    """The values of a study's report (``study.html.j2``): ``title``, ``description``, ``shape``,
    ``comparison``, ``bottlenecks``, ``paths``, ``failed``, ``sweep`` (whether the study has a
    sweep) and ``groups`` (the plot kinds, :func:`_plot_group`). ``plots`` as :func:`write_html`
    takes it. Raises OSError: a PNG unreadable."""
    conf = _pct(_interval_level(st))
    how = {k: v.format(conf=conf) for k, v in HOW_TO_READ.items()}
    groups = [_plot_group("Each metric per variant", how["metric"],
                          [(p, f"{_metric_title(st, m)} ({m}) per variant") for m, p in plots["metric"]],
                          "No metric was measured.")]
    no_fct = "No study_fct.csv in the study folder." if st.fct is None else "study_fct.csv has no completed flow."
    groups.append(_plot_group("Flow completion times", how["fct_ecdf"],
                              [(plots["fct_ecdf"], "ECDF of flow completion times per variant")]
                              if plots.get("fct_ecdf") else [], no_fct))
    groups.append(_plot_group("Throughput against queueing delay", how["throughput_delay"],
                              [(plots["throughput_delay"], "throughput against median queueing delay per seed")]
                              if plots.get("throughput_delay") else [],
                              f"Needs both {THROUGHPUT} and {QUEUE_DELAY}; this study did not measure both."))
    if st.sweep_keys:
        groups.append(_plot_group(f"Each metric against {st.sweep_keys[0]}", how["sweep"],
                                  [(p, f"{_metric_title(st, m)} ({m}) against {st.sweep_keys[0]}")
                                   for m, p in plots["sweep"]],
                                  f"The sweep has fewer than two values of {st.sweep_keys[0]}."))
    groups.append(_plot_group("Slowdown by flow size", how["slowdown"],
                              [(plots["slowdown"], "median and p99 slowdown per flow-size bucket")]
                              if plots.get("slowdown") else [],
                              no_fct if st.fct is None else "study_fct.csv has no slowdown values."))
    return {"title": str(st.cmp.get("study") or st.dir.name), "description": st.cmp.get("description") or None,
            "shape": _shape(st), "comparison": _comparison(st), "bottlenecks": _bottlenecks(st),
            "paths": _paths(st), "failed": _failed(st), "sweep": bool(st.sweep_keys), "groups": groups}


def write_html(st: Study, plots: dict) -> Path:
    """Write ``report.html`` into the study folder: one self-contained page (PNGs inline as
    ``data:`` URIs, inline CSS, a Content-Security-Policy that forbids scripts and any load but
    ``data:`` images). ``plots``: ``{"metric": [paths], "fct_ecdf": path | None, ...}`` as
    :func:`write_report` collects them. Every string from the study's files is HTML-escaped
    (the template's autoescape)."""
    path = st.dir / "report.html"
    path.write_text(render("study.html.j2", **study_view(st, plots)), encoding="utf-8")
    return path


def write_report(study_dir: Path) -> list[Path]:
    """Draw every plot a study folder allows and write ``report.html`` beside them.

    Writes into ``study_dir``: ``metric_<name>.png`` per metric that was measured (``<name>``
    reduced to letters, digits, ``.``, ``_``, ``-``), ``fct_ecdf.png`` and
    ``slowdown_by_size.png`` (with ``study_fct.csv``; the latter when it has slowdowns),
    ``throughput_delay.png`` (with both throughput_mbps and queue_delay_median_ms),
    ``sweep_<name>.png`` per measured metric (with a sweep of two values or more), and
    ``report.html``. A metric with no value, a missing ``study_fct.csv`` or ``study.csv``, a
    failed cell and a study without a sweep leave out what they cannot show; the report says so.

    Returns:
        The written paths: the PNGs in the order above, ``report.html`` last.

    Raises:
        FileNotFoundError: no ``comparison.json``.
        ValueError: ``comparison.json`` is not a JSON object.
    """
    st = load_study(Path(study_dir))
    plots: dict = {"metric": [], "sweep": []}
    for m in st.metrics:
        p = plot_metric(st, m)
        if p is not None:
            plots["metric"].append((m, p))
    plots["fct_ecdf"] = plot_fct_ecdf(st)
    plots["throughput_delay"] = plot_throughput_delay(st)
    for m in st.metrics:
        p = plot_sweep(st, m)
        if p is not None:
            plots["sweep"].append((m, p))
    plots["slowdown"] = plot_slowdown_by_size(st)
    pngs = [p for _, p in plots["metric"]] + [p for p in (plots["fct_ecdf"], plots["throughput_delay"]) if p] \
        + [p for _, p in plots["sweep"]] + ([plots["slowdown"]] if plots["slowdown"] else [])
    return pngs + [write_html(st, plots)]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m experiments.studyreport STUDY_DIR", file=sys.stderr)
        sys.exit(2)
    for written in write_report(Path(sys.argv[1])):
        print(written)
