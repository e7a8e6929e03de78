"""PFC's plots of one run or round: the pause timeline and the switch buffer per ingress port
and priority, from ``pauses.csv`` and ``pfc_occupancy.csv`` (result files only)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from experiments.pagekit import Caption
from experiments.plotkit import plt, read_csv, save_with_legend, write_png

PFC_PAUSES = Caption(
    "PFC pause timeline",
    "One row per paused (switch port, upstream transmitter, priority), one bar per pause from XOFF to XON; red "
    "bars are pause storms (the watchdog's). Time runs from the start of the traffic. Rows near the receiver "
    "pausing first and rows further upstream following show the pause spreading back through the fabric "
    "(head-of-line blocking); no row means no pause was needed.")
PFC_BUFFER = Caption(
    "Switch buffer per ingress port and priority",
    "The bytes each (ingress port, lossless priority) counter held over time (the counters that held most), "
    "with the XOFF threshold (dashed: a pause is sent above it), XON (dotted: the pause ends below it) and "
    "the buffer cap (solid). A lossless class stays under the cap: the overshoot above XOFF is the headroom "
    "that the bytes in flight during the pause reaction need.")


def plot_pfc(out: Path, summary: dict, max_counters: int = 6, max_links: int = 24) -> list[Path]:
    """PFC plots of one run or round, from ``pauses.csv`` and ``pfc_occupancy.csv``:

    - ``pfc_pauses.png``: a pause timeline, one row per paused (link, priority) (the pausing
      switch port and the upstream transmitter it stopped), a bar per pause; storms in red.
    - ``pfc_buffer.png``: bytes held per (ingress port, lossless priority), the counters that
      held the most, with the XOFF, XON and buffer (cap) lines the pauses follow.
    """
    p = summary["pfc"]
    pauses = read_csv(out / "pauses.csv")
    occ = read_csv(out / "pfc_occupancy.csv")
    state = "on" if p["enabled"] else "off"
    links: dict[str, list] = {}
    for r in pauses:
        links.setdefault(f"{r['port']} -> {r['upstream_port']} (prio {r['priority']})", []).append(r)
    order = sorted(links, key=lambda k: (-sum(float(r["duration_s"]) for r in links[k]), k))[:max_links]
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.28 * max(len(order), 1)))
    for y, k in enumerate(order):
        bars = [(float(r["start_s"]), float(r["duration_s"])) for r in links[k]]
        colors = ["C3" if r["storm"] == "True" else "C0" for r in links[k]]
        ax.broken_barh(bars, (y - 0.35, 0.7), facecolors=colors)
    ax.set_yticks(range(len(order)))
    ax.set_yticklabels(order, fontsize=7)
    ax.invert_yaxis()
    ax.axvline(0, color="grey", ls=":", lw=1)
    ax.set_xlabel("time since the start (s)")
    ax.set_title(f"{summary['scenario']}: PFC {state}, {p['pauses']} pauses on {len(links)} links "
                 f"({p['paused_time_s']:.2f} s paused); red = pause storm", fontsize=9)
    if not order:
        ax.text(0.5, 0.5, "no pause", transform=ax.transAxes, ha="center", va="center")
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    pauses_png = write_png(fig, out / "pfc_pauses.png", PFC_PAUSES)

    series: dict[str, list] = {}
    for r in occ:
        series.setdefault(f"{r['port']} prio {r['priority']}", []).append((float(r["t_s"]), int(r["bytes"])))
    top = sorted(series, key=lambda k: -max(b for _, b in series[k]))[:max_counters]
    fig, ax = plt.subplots(figsize=(8, 4.8))
    for k in top:
        t, b = zip(*series[k])
        ax.step(t, np.asarray(b) / 1e3, where="post", lw=1, label=f"ingress {k}")
    for v, name, style in ((p["xoff_bytes"], "XOFF", "--"), (p["xon_bytes"], "XON", ":"),
                           (p["buffer_bytes"], "buffer (cap)", "-")):
        ax.axhline(v / 1e3, color="k", ls=style, lw=1, label=f"{name} = {v / 1e3:.1f} kB")
    ax.axvline(0, color="grey", ls=":", lw=1)
    ax.set_xlabel("time since the start (s)")
    ax.set_ylabel("bytes held per (ingress port, priority) (kB)")
    shown = f" (the {len(top)} of {len(series)} that held most)" if len(series) > len(top) else ""
    ax.set_title(f"{summary['scenario']}: PFC {state}: switch buffer per ingress port and lossless priority{shown}",
                 fontsize=9)
    ax.set_ylim(0, max([p["buffer_bytes"]] + [max(b for _, b in series[k]) for k in top]) / 1e3 * 1.1)
    return [pauses_png, save_with_legend(fig, ax, out / "pfc_buffer.png", legend_cols=3, caption=PFC_BUFFER)]
