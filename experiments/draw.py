"""Topology drawing: a fabric map as a PNG, layers on rows, link rates and
oversubscription annotated (pure: needs no root and no live fabric).

``python -m experiments draw SCENARIO.yaml [--out topology.png]``; every run
also writes ``topology.png`` into its results folder.
"""
from __future__ import annotations

from collections import defaultdict
from fractions import Fraction
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

import numpy as np  # noqa: E402

from experiments.pagekit import Caption  # noqa: E402
from topologies import TOPOLOGIES  # noqa: E402
from topologies.base import map_layers, oversubscription_per_switch  # noqa: E402

#: The drawing's caption (stored in the PNG; a run's report.html shows it beside the drawing).
TOPOLOGY = Caption(
    "The fabric",
    "Layers on rows (spines or core on top, hosts at the bottom), every link drawn, each group of links "
    "between two layers labelled with its rate, and each switch with its oversubscription (downlink capacity "
    "over uplink capacity; 1:1 is full bisection). A switch above 1:1 is where traffic that crosses it can "
    "queue even when no single host link is full.")

#: Hosts are drawn with names up to this many (beyond, dots only).
MAX_LABELLED = 48
#: Switch layers are labelled switch by switch up to this many (beyond, the first and last only).
MAX_SWITCH_LABELS = 24


def end_to_end_oversubscription(fabric_map: dict) -> Fraction | None:
    """Host capacity / capacity of the links into the top layer (spines, core): 3 for the
    default 3:1 Spine-Leaf, 4 for a Fat-Tree whose edge and aggregation layers are each 2:1.
    None for a one-switch-layer fabric (a Dragonfly's routers are one layer)."""
    rows = map_layers(fabric_map)
    if len(rows) < 3:
        return None
    top = {s["name"] for s in fabric_map["switches"] if s["layer"] == rows[0]}
    hosts = sum(Fraction(h["rate_mbps"]).limit_denominator(1000) for h in fabric_map["hosts"])
    into_top = sum(Fraction(l["rate_mbps"]).limit_denominator(1000) for l in fabric_map["links"]
                   if (l["a"] in top) != (l["b"] in top))
    return hosts / into_top if into_top else None


def _ratio(r: Fraction) -> str:
    return f"{float(r):g}:1"


def draw(fabric_map: dict, path: Path, title: str | None = None, overlay: dict | None = None,
         caption: Caption = TOPOLOGY) -> Path:
    """Draw ``fabric_map`` (see topologies.base.Fabric.to_map) into ``path``; return it.

    Nodes sit on one row per layer (spines/core on top, hosts at the bottom; links between two
    switches of one row, a Dragonfly's local and global links, are arcs above it),
    each switch labelled with its name and, where it has uplinks, its
    oversubscription; every group of links between two layers is labelled
    with its rate (and the number of parallel links per pair if more than one).

    ``overlay`` marks a diagnosis on the drawing: ``{"links": {frozenset({a, b}): (colour, width)},
    "nodes": {name: colour}, "legend": [(colour, text), ...]}`` (experiments.diagnose). ``caption``
    is stored in the PNG (experiments.pagekit; default :data:`TOPOLOGY`).

    Raises:
        KeyError: a layer or node the map does not define.
    """
    rows = list(map_layers(fabric_map))
    nodes = defaultdict(list)
    for s in fabric_map["switches"]:
        nodes[s["layer"]].append(s["name"])
    nodes["host"] = [h["name"] for h in fabric_map["hosts"]]
    widest = max(len(v) for v in nodes.values())
    pos = {}
    for r, layer in enumerate(rows):
        names = nodes[layer]
        for i, n in enumerate(names):
            pos[n] = ((i + 0.5) / len(names) * widest, len(rows) - 1 - r)
    width = min(max(8.0, widest * 0.28), 40.0)
    fig, ax = plt.subplots(figsize=(width, 1.6 * len(rows) + 1.2))
    rate_groups: dict[tuple[str, str], set] = defaultdict(set)
    pair_count: dict[tuple[str, str], int] = defaultdict(int)
    layer_of = {n: layer for layer, ns in nodes.items() for n in ns}
    arc_top = 0.0
    marked = (overlay or {}).get("links", {})
    for link in fabric_map["links"]:
        a, b = link["a"], link["b"]
        (xa, ya), (xb, yb) = pos[a], pos[b]
        lw = 0.4 + 1.6 * min(link["rate_mbps"], 100) / 100
        if frozenset((a, b)) in marked:
            colour, width = marked[frozenset((a, b))]
            ax.plot([xa, xb], [ya, yb], color=colour, lw=width, alpha=0.9, zorder=2)
        if ya == yb:        # two switches of one layer (a Dragonfly's routers): an arc above the row
            t = np.linspace(0.0, 1.0, 24)
            rise = 0.12 * np.sqrt(abs(xb - xa))
            arc_top = max(arc_top, rise)
            xs, ys = xa + (xb - xa) * t, ya + 0.3 + rise * np.sin(np.pi * t)
            ax.plot(xs, ys, color="#7a8ca3", lw=lw, alpha=0.6, zorder=1)
        else:
            ax.plot([xa, xb], [ya, yb], color="#7a8ca3", lw=lw, alpha=0.6, zorder=1)
        key = tuple(sorted((layer_of[a], layer_of[b]), key=rows.index))
        rate_groups[key].add(link["rate_mbps"])
        pair_count[(a, b) if a < b else (b, a)] += 1
    parallel = defaultdict(set)
    for (a, b), c in pair_count.items():
        parallel[tuple(sorted((layer_of[a], layer_of[b]), key=rows.index))].add(c)
    over = oversubscription_per_switch(fabric_map)
    for layer in rows:
        names = nodes[layer]
        xs = [pos[n][0] for n in names]
        ys = [pos[n][1] for n in names]
        host = layer == "host"
        ax.scatter(xs, ys, s=18 if host else 120, marker="o" if host else "s",
                   color="#2b6cb0" if host else "#e07b39", zorder=3)
        limit = MAX_LABELLED if host else MAX_SWITCH_LABELS
        shown = names if len(names) <= limit else [names[0], names[-1]]
        if len(shown) < len(names):
            ax.annotate(f"{len(names)} hosts" if host else f"{len(names)} {layer} switches", (widest / 2, pos[names[0]][1]),
                        textcoords="offset points", xytext=(0, -14 if host else 9), ha="center",
                        va="top" if host else "bottom", fontsize=8, zorder=4)
        if not host or len(names) <= MAX_LABELLED:
            for n in shown:
                lbl = n if n not in over else f"{n}\n{_ratio(over[n])}"
                ax.annotate(lbl, pos[n], textcoords="offset points", xytext=(0, -14 if host else 9),
                            ha="center", va="top" if host else "bottom", fontsize=6 if host else 7, zorder=4)
    for name, colour in ((overlay or {}).get("nodes") or {}).items():
        if name in pos:
            ax.scatter([pos[name][0]], [pos[name][1]], s=320, facecolors="none", edgecolors=colour, linewidths=2.5,
                       zorder=5)
    if overlay and overlay.get("legend"):
        ax.legend(handles=[Line2D([0], [0], color=c, lw=3) for c, _ in overlay["legend"]],
                  labels=[t for _, t in overlay["legend"]], loc="upper right", fontsize=7, frameon=False)
    for (upper, lower), rates in rate_groups.items():
        y = (len(rows) - 1 - rows.index(upper) + len(rows) - 1 - rows.index(lower)) / 2
        par = parallel[(upper, lower)]
        extra = f", x{max(par)} parallel" if max(par) > 1 else ""
        y += 0.25 if upper == lower else 0
        ax.text(widest + 0.2, y, f"{lower}-{upper}: {', '.join(f'{r:g}' for r in sorted(rates))} Mbit/s{extra}",
                fontsize=8, va="center", ha="left", color="#2d3748")
    kinds = {kind: cls.TITLE for kind, cls in TOPOLOGIES.items()}
    ratios = sorted(set(over.values()))
    e2e = end_to_end_oversubscription(fabric_map)
    own = fabric_map.get("params", {}).get("oversubscription")
    if ratios:
        what = f"oversubscription {', '.join(_ratio(r) for r in ratios)} per switch (downlink / uplink capacity)"
    elif own is not None:       # one switch layer (a Dragonfly): the topology's own figure
        what = f"oversubscription {own:g}:1 (the topology's own figure)"
    else:
        what = "oversubscription n/a"
    sub = (f"{len(fabric_map['switches'])} switches, {len(fabric_map['hosts'])} hosts; {what}"
           + (f", {_ratio(e2e)} hosts to {rows[0]}" if e2e is not None else ""))
    ax.set_title((title or kinds.get(fabric_map["kind"], fabric_map["kind"])) + "\n" + sub, fontsize=10)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(list(reversed(rows)))
    ax.set_xticks([])
    ax.set_xlim(-0.3, widest * 1.45 + 0.5)
    ax.set_ylim(-0.7, len(rows) - 0.4 + arc_top + (0.3 if arc_top else 0))
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata=caption.metadata())
    plt.close(fig)
    return Path(path)
