"""Plots of a results folder. Reads only the result files (never live state).

``python -m experiments plot RESULTS_DIR`` redraws them. Every PNG carries its caption (a title and
"how to read this", :class:`experiments.pagekit.Caption`, declared beside the function that draws it),
which a results folder's report.html shows beside the plot; the generic plots take theirs as ``caption``.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from experiments.pagekit import Caption
from experiments.plotkit import plt, read_csv, save_with_legend, write_png
from experiments.section import ResultSection
from experiments.tables import load_queue_samples

BIN_S = 0.05


def _rate_mbps(t_s: np.ndarray, total_bytes: np.ndarray, bin_s: float = BIN_S):
    """Rate in Mbit/s on a regular grid of ``bin_s`` from a cumulative byte counter."""
    if len(t_s) < 2:
        return np.array([]), np.array([])
    grid = np.arange(t_s[0], t_s[-1] + bin_s, bin_s)
    cum = np.interp(grid, t_s, total_bytes)
    return grid[1:], np.diff(cum) * 8 / bin_s / 1e6


# The captions of the plots drawn here: a title and "how to read this" (a run's report.html shows
# them beside each plot; they are stored in the PNG itself).
QUEUE_DEPTH = Caption(
    "Switch egress queue depth over time",
    "The backlog of the bottleneck port (thick red line: the port whose queue held the most on average) and "
    "of the next busiest ports, sampled at measurement.sample_hz, against the time since the traffic started. "
    "The dashed black line is the port's buffer; crosses above it mark samples in which the bottleneck dropped "
    "packets; a dash-dotted line (or band) is the ECN threshold K (or Kmin-Kmax). A queue pinned at the "
    "buffer is loss; a queue held near K is ECN doing its job; a queue above one buffer is possible only "
    "when PFC holds frames.")
THROUGHPUT = Caption(
    "Goodput over time",
    "Payload delivered to the receiving programs, per flow (or per sending host when there are many flows, "
    "with their mean and the fluid model's share as a dashed line), in short time bins, and the busiest "
    "port's transmit rate (black) against its link rate (dotted). The black line at the link rate means the "
    "bottleneck is kept busy; flows far apart from each other mean an unfair share; gaps are stalls "
    "(timeouts, pauses).")
QUEUE_CDF = Caption(
    "Distribution of the queue",
    "The fraction of samples (y) in which the queue held at most x, over the window in which the flows ran, "
    "at the bottleneck (red) and the next busiest ports; vertical lines mark the ECN threshold and the buffer. "
    "A curve that jumps to 1 near zero is a mostly empty queue; one that rises only near the buffer is a "
    "standing full queue. Read the median where a curve crosses 0.5 and the p99 near the top.")
FCT_CDF = Caption(
    "Flow completion times",
    "The fraction of the completed flows (y) that finished within a time (x), with the median (dashed) and "
    "the 99th percentile (dotted) marked; the time axis is logarithmic when the times span more than a "
    "factor of ten. A steep curve means the flows finished together; a long tail to the right is the "
    "slowest flows (retransmission timeouts show as a step far right).")
CWND_QUEUE = Caption(
    "Congestion windows and the queue",
    "Top: each TCP sender's congestion window (segments, from TCP_INFO every 20 ms; up to 8 flows). Bottom: "
    "the bottleneck queue on the same time axis, ECN threshold marked. Windows halving together are a "
    "synchronised loss (drop-tail); small frequent cuts that keep the queue near K are ECN (DCTCP-like); a "
    "window that stays flat at its minimum is a flow waiting out a timeout.")
ROUNDS_QUEUE = Caption(
    "Bottleneck queue, every round",
    "Each round's bottleneck queue over time on one axis (one colour per round, its profile in the legend), "
    "each round's ECN threshold in its colour and the buffer dashed. Compare how high and how long each "
    "round's queue stood: the rounds ran one after another on the same fabric with the same traffic.")
ROUNDS_BARS = Caption(
    "The rounds side by side",
    "One panel per figure, one bar per round: drops at the bottleneck, CE marks, flow completion time median "
    "and p99, bottleneck throughput and, with PFC, the paused time. The numbers come from rounds.json (the "
    "table above). Fewer drops at equal throughput is better; a lower p99 is a shorter tail.")
COMPARE_THROUGHPUT = Caption(
    "Per-host throughput, fabric against fabric",
    "For each traffic mix, one bar per fabric: TCP payload per sending host (Mbit/s) while every flow runs, "
    "with the fluid model's prediction for ideal ECMP (black dash) and for hash ECMP (red dash, median of "
    "random placements) and the host link rate (grey dashed). A bar below the black dash and near the red one "
    "is per-flow hashing losing bandwidth; the ratio between fabrics follows their oversubscription.")
COMPARE_FCT = Caption(
    "Flow completion times per fabric",
    "One panel per fabric: the fraction of flows (y) that completed within a time (x), one curve per traffic "
    "mix with sized flows. Curves further left finished sooner; compare the same traffic across panels.")
COMPARE_PER_FLOW = Caption(
    "Per-flow throughput per run",
    "One box per run (fabric and traffic): the distribution of each flow's throughput (bytes over completion "
    "time, log scale): the box spans the middle half, the line is the median, whiskers and dots the rest. A "
    "tall box is an uneven share between flows.")
COLLECTIVE_TIMELINE = Caption(
    "The collective, step by step",
    "The textbook's ring picture: one lane per rank, one bar per step from its start to its end (seconds from "
    "the collective's start), reduce-scatter and all-gather (or all-to-all) steps in their colours, each bar "
    "labelled with the chunk it sent. Bars that line up are a balanced ring; one lane whose bars are longer "
    "is a straggler, and every rank after it in the ring waits.")
COLLECTIVE_BUSBW = Caption(
    "Bus bandwidth against message size",
    "The NCCL-tests bus bandwidth (busbw = algbw x 2(N-1)/N) against the message size per rank (log scale), "
    "measured (solid) beside the alpha-beta model (dashed), and the link rate (dotted) when one is given. "
    "Small messages are latency-bound (low busbw); large ones approach the slowest link on the ring. A "
    "measured line far under its model points at a slow link or host.")
TRAINING_TIMELINE = Caption(
    "Training iterations, rank by rank",
    "One lane per rank: forward and backward compute as bars, each gradient bucket's AllReduce on a thinner "
    "lane below, its exposed part (still running after backward ended) hatched in red. Communication hidden "
    "under backward is free; the hatched part is what the network adds to every iteration.")
TRAINING_ROUNDS = Caption(
    "Training rounds side by side",
    "Per round: the median iteration time measured beside its model, the compute and the communication time "
    "(bars, left axis), and the gradient's largest relative error after compression (diamonds, log scale, right "
    "axis; 1e-12 means exact). Compression that shortens the iteration shows as lower bars at the price of a "
    "higher diamond.")
LINK_HEATMAP = Caption(
    "Link utilisation and bytes by parallelism kind",
    "Left: each directed link's utilisation (row node to column node; blank where there is no link). Right: per "
    "busy link, the bytes the plan predicts by kind (stacked: tensor, pipeline, data parallel, TCP "
    "acknowledgements) and the bytes its port counted (black dot). A dot at the end of its bar is a plan "
    "that matches the wire; the brightest cells are the links the job saturates.")


def _queue_marks(ax, summary: dict, in_packets: bool, sections: tuple[ResultSection, ...], **kw) -> None:
    """Each of ``sections``' marks on a queue axis (``ResultSection.queue_marks``; ``kw``: its
    ``color``, ``suffix``, ``vertical``)."""
    for sec in sections:
        sec.queue_marks(ax, summary, in_packets, **kw)


def plot_queue_depth(out: Path, summary: dict, samples: dict, *, sections: tuple[ResultSection, ...]) -> Path:
    """queue_depth.png: backlog of the bottleneck port (and the next busiest) with the buffer size
    and each of ``sections``' marks (experiments.sections.SECTIONS)."""
    bn = summary["bottleneck"]
    in_packets = bn["buffer_packets"] is not None
    col, unit = ("backlog_packets", "packets") if in_packets else ("backlog_bytes", "bytes")
    limit = bn["buffer_packets"] if in_packets else bn["buffer_bytes"]
    fig, ax = plt.subplots(figsize=(8, 4.8))
    peaks = sorted(samples, key=lambda i: samples[i][col].max(), reverse=True)
    for intf in peaks[1:4]:
        if samples[intf][col].max() > 0:
            ax.plot(samples[intf]["t_s"], samples[intf][col], lw=0.8, alpha=0.6, label=f"{intf}")
    s = samples[bn["intf"]]
    ax.plot(s["t_s"], s[col], color="C3", lw=1.6, label=f"{bn['intf']} -> {bn['peer']} (bottleneck)")
    ax.axhline(limit, color="k", ls="--", lw=1, label=f"buffer = {limit} {unit}")
    dropped = np.flatnonzero(np.diff(s["drops_total"]) > 0) + 1
    if len(dropped):
        ax.plot(s["t_s"][dropped], np.full(len(dropped), limit * 1.04), "x", color="C3", ms=4,
                label=f"drops at {bn['intf']} ({int(s['drops_total'][-1] - s['drops_total'][0])} packets)")
    ax.axvline(0, color="grey", ls=":", lw=1, label=f"{summary.get('pattern', 'incast')} start")
    _queue_marks(ax, summary, in_packets, sections)
    ax.set_xlabel("time since the start (s)")
    ax.set_ylabel(f"queue backlog ({unit})")
    ax.set_title(f"{summary['scenario']}: switch egress queue depth ({summary['datapath']} datapath)")
    ax.set_ylim(0, max(limit, float(s[col].max())) * 1.1)   # a lossless queue may hold more than one port's buffer
    return save_with_legend(fig, ax, out / "queue_depth.png", legend_cols=3, caption=QUEUE_DEPTH)


#: The queue CDF shows the bottleneck and this many of the next busiest ports (by mean backlog).
CDF_OTHER_PORTS = 3


def _ecdf(values) -> tuple[np.ndarray, np.ndarray]:
    """The empirical CDF of ``values``: sorted values and the fraction of samples at or below each."""
    x = np.sort(np.asarray(values, dtype=float))
    return x, np.arange(1, len(x) + 1) / max(len(x), 1)


def plot_queue_cdf(out: Path, summary: dict, samples: dict, *, sections: tuple[ResultSection, ...]) -> Path:
    """``queue_cdf.png``: the distribution of sampled queue backlog (packets when the buffer is set
    in packets, else bytes) at the bottleneck and the :data:`CDF_OTHER_PORTS` next busiest ports
    (highest mean backlog in the window), each sample weighing the same.

    The samples are those inside ``summary["bottleneck"]["queue_window_s"]`` (the window of the
    queue percentiles; a summary without it: from the start to the last flow's completion).
    The buffer and each of ``sections``' marks (experiments.sections.SECTIONS) are drawn as
    vertical lines. ``samples``: as :func:`experiments.tables.load_queue_samples`.
    Raises KeyError when the bottleneck port has no samples.
    """
    bn = summary["bottleneck"]
    in_packets = bn["buffer_packets"] is not None
    col, unit = ("backlog_packets", "packets") if in_packets else ("backlog_bytes", "bytes")
    limit = bn["buffer_packets"] if in_packets else bn["buffer_bytes"]
    lo, hi = bn.get("queue_window_s") or (0.0, summary["flows"].get("fct_max_s") or np.inf)

    def in_window(intf):
        s = samples[intf]
        return s[col][(s["t_s"] >= lo) & (s["t_s"] <= hi)]
    others = sorted((i for i in samples if i != bn["intf"] and len(in_window(i)) and in_window(i).mean() > 0),
                    key=lambda i: -in_window(i).mean())[:CDF_OTHER_PORTS]
    fig, ax = plt.subplots(figsize=(8, 4.8))
    top = 0.0
    for k, intf in enumerate(others):
        x, y = _ecdf(in_window(intf))
        ax.step(x, y, where="post", lw=1, alpha=0.8, color=f"C{k + 4}", label=f"{intf} (mean {x.mean():.3g})")
        top = max(top, float(x[-1]))
    x, y = _ecdf(in_window(bn["intf"]))
    if len(x):
        ax.step(x, y, where="post", color="C3", lw=1.8,
                label=f"{bn['intf']} -> {bn['peer']} (bottleneck, mean {x.mean():.3g})")
        top = max(top, float(x[-1]))
    _queue_marks(ax, summary, in_packets, sections, vertical=True)
    if limit is not None:
        ax.axvline(limit, color="k", ls="--", lw=1, label=f"buffer = {limit} {unit}")
        top = max(top, float(limit))
    ax.set_xlim(0, max(top, 1.0) * 1.05)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(f"queue backlog ({unit})")
    ax.set_ylabel("fraction of samples at or below")
    ax.set_title(f"{summary['scenario']}: queue CDF, {lo:.1f}-{hi:.1f} s "
                 f"({len(x)} samples at the bottleneck)", fontsize=10)
    return save_with_legend(fig, ax, out / "queue_cdf.png", legend_cols=2, caption=QUEUE_CDF)


def plot_fct_cdf(out: Path, summary: dict) -> Path:
    """``fct_cdf.png``: the CDF of the flow completion times (seconds) of the completed flows
    (``summary["flows"]["per_flow"]``), median and p99 marked; the x axis is logarithmic when
    the times span more than a decade. A run with no completed flow gets a plot that says so."""
    per_flow = summary["flows"]["per_flow"]
    fct = [f["fct_s"] for f in per_flow if f.get("complete") and f.get("fct_s")]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    if fct:
        x, y = _ecdf(fct)
        ax.step(np.concatenate([[x[0]], x]), np.concatenate([[0.0], y]), where="post", color="C0", lw=1.6,
                label=f"{len(x)} of {len(per_flow)} flows completed")
        for q, ls in ((50, "--"), (99, ":")):
            v = float(np.percentile(x, q))
            ax.axvline(v, color="grey", ls=ls, lw=1, label=f"p{q} {v:.3g} s")
        if x[-1] > 10 * x[0]:
            ax.set_xscale("log")
    else:
        ax.text(0.5, 0.5, f"no completed flow (of {len(per_flow)})", transform=ax.transAxes, ha="center")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("flow completion time (s)")
    ax.set_ylabel("fraction of completed flows")
    ax.set_title(f"{summary['scenario']}: flow completion times ({summary.get('pattern', '')})", fontsize=10)
    if fct:
        return save_with_legend(fig, ax, out / "fct_cdf.png", legend_cols=3, caption=FCT_CDF)
    fig.tight_layout()
    return write_png(fig, out / "fct_cdf.png", FCT_CDF)


#: Up to this many flows get a line and a legend entry each; beyond, one line per sending host.
MAX_FLOW_LINES = 12
#: Bin of the per-host lines: the receivers read in bursts, 50 ms bins would show rates above the link's.
HOST_BIN_S = 0.2


def plot_throughput(out: Path, summary: dict, samples: dict) -> Path:
    """throughput.png: goodput vs time, per flow (few flows) or per sending host (many), and the
    bottleneck port's transmit rate; with many flows also the mean per host and the fluid model."""
    flows: dict[str, list] = {}
    src_of: dict[str, str] = {}
    with open(out / "flow_samples.csv") as f:
        for row in csv.DictReader(f):
            flows.setdefault(row["flow_id"], []).append((float(row["t_s"]), float(row["bytes_received_total"])))
            src_of[row["flow_id"]] = row["src"]
    fig, ax = plt.subplots(figsize=(8, 4.8))
    bn = summary["bottleneck"]
    top = bn["rate_mbps"]
    if len(flows) <= MAX_FLOW_LINES:
        for fid, pts in flows.items():
            a = np.asarray([(0.0, 0.0)] + pts)
            t, r = _rate_mbps(a[:, 0], a[:, 1])
            ax.plot(t, r, lw=0.9, alpha=0.8, label=f"flow {fid} from {src_of[fid]}")
    elif flows:
        end = max(p[-1][0] for p in flows.values())
        grid = np.arange(0.0, end + HOST_BIN_S, HOST_BIN_S)
        per_host: dict[str, np.ndarray] = {}
        for fid, pts in flows.items():
            a = np.asarray([(0.0, 0.0)] + pts)
            cum = np.interp(grid, a[:, 0], a[:, 1], right=a[-1, 1])
            per_host[src_of[fid]] = per_host.get(src_of[fid], 0) + cum
        rates = np.asarray([np.diff(c) * 8 / HOST_BIN_S / 1e6 for c in per_host.values()])
        for i, r in enumerate(rates):
            ax.plot(grid[1:], r, color="grey", lw=0.4, alpha=0.35,
                    label=f"each of {len(rates)} sending hosts" if i == 0 else None)
        ax.plot(grid[1:], rates.mean(axis=0), color="C0", lw=1.6, label="mean per sending host")
        tp = summary.get("throughput") or {}
        if tp.get("model_per_sending_host_mbps"):
            ax.axhline(tp["model_per_sending_host_mbps"], color="C0", ls="--", lw=1,
                       label=f"fluid model {tp['model_per_sending_host_mbps']:.2f} Mbit/s per host")
        top = max(top, float(rates.max()) if rates.size else 0.0)
    s = samples[bn["intf"]]
    t, r = _rate_mbps(s["t_s"], s["tx_bytes_total"])
    ax.plot(t, r, color="k", lw=1.4, label=f"busiest port {bn['intf']} tx")
    ax.axhline(bn["rate_mbps"], color="k", ls=":", lw=1, label=f"its link rate {bn['rate_mbps']:g} Mbit/s")
    ax.set_xlabel("time since the start (s)")
    ax.set_ylabel("throughput (Mbit/s)")
    what, bin_s = ("per-flow", BIN_S) if len(flows) <= MAX_FLOW_LINES else ("per-host", HOST_BIN_S)
    ax.set_title(f"{summary['scenario']}: {what} throughput ({bin_s * 1000:.0f} ms bins)")
    ax.set_ylim(0, top * 1.3)
    return save_with_legend(fig, ax, out / "throughput.png", legend_cols=3, caption=THROUGHPUT)


def plot_all(out: Path, *, sections: tuple[ResultSection, ...]) -> list[Path]:
    """Draw every plot of a results folder, each of ``sections``' (experiments.sections.SECTIONS)
    after the common ones (their marks on the common queue plots); returns the PNG paths."""
    out = Path(out)
    summary = json.loads((out / "summary.json").read_text())
    samples = load_queue_samples(out / "queues.csv", 0.0)
    paths = [plot_queue_depth(out, summary, samples, sections=sections), plot_throughput(out, summary, samples),
             plot_queue_cdf(out, summary, samples, sections=sections), plot_fct_cdf(out, summary)]
    if (out / "tcp_samples.csv").exists():
        p = plot_cwnd_queue(out, summary, samples, sections=sections)
        if p is not None:
            paths.append(p)
    for section in sections:
        paths += section.plots(out, summary)
    return paths


def plot_cwnd_queue(out: Path, summary: dict, samples: dict, max_flows: int = 8, *,
                    sections: tuple[ResultSection, ...]) -> Path | None:
    """``cwnd_queue.png``: each TCP flow's congestion window over time (up to ``max_flows`` flows,
    from ``tcp_samples.csv``) above the bottleneck's queue, as the CS244 reproductions of DCTCP
    and buffer sizing plot them; each of ``sections``' marks (experiments.sections.SECTIONS) on
    the queue axis. None when no flow was sampled."""
    rows = read_csv(out / "tcp_samples.csv")
    if not rows:
        return None
    by_flow: dict[str, list] = {}
    for r in rows:
        by_flow.setdefault(r["flow_id"], []).append((float(r["t_s"]), int(r["cwnd_segments"])))
    bn = summary["bottleneck"]
    in_packets = bn["buffer_packets"] is not None
    col, unit = ("backlog_packets", "packets") if in_packets else ("backlog_bytes", "bytes")
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    for fid in sorted(by_flow, key=lambda k: int(k) if k.isdigit() else k)[:max_flows]:
        t, c = zip(*by_flow[fid])
        ax.step(t, c, where="post", lw=1, label=f"flow {fid}")
    ax.set_ylabel("congestion window (segments)")
    more = f" ({max_flows} of {len(by_flow)} flows)" if len(by_flow) > max_flows else ""
    ax.set_title(f"{summary['scenario']}: TCP congestion windows{more} and the bottleneck queue")
    ax.legend(fontsize=7, ncol=4, loc="upper right")
    ax.grid(alpha=0.3)
    s = samples.get(bn["intf"])
    if s is not None:
        bx.plot(s["t_s"], s[col], color="C3", lw=1.2, label=f"{bn['intf']} -> {bn['peer']} (bottleneck)")
    _queue_marks(bx, summary, in_packets, sections)
    bx.set_xlabel("time since the start (s)")
    bx.set_ylabel(f"queue ({unit})")
    bx.legend(fontsize=7, loc="upper right")
    bx.grid(alpha=0.3)
    fig.tight_layout()
    return write_png(fig, out / "cwnd_queue.png", CWND_QUEUE)


def plot_rounds(out: Path, *, sections: tuple[ResultSection, ...]) -> list[Path]:
    """Plots of a run with rounds, from ``rounds.json`` and each round's folder:
    ``rounds_queue.png`` (every round's bottleneck queue on one axis, each labelled with its name
    and ``sections``' words on it, ``ResultSection.round_label``, with their marks in its colour),
    ``rounds_bars.png`` (drops, FCT median/p99, bottleneck throughput side by side, with each
    section's panels where it places them, ``ResultSection.round_bars``), then each section's
    plots across the rounds (``ResultSection.round_plots``). ``sections``:
    experiments.sections.SECTIONS."""
    out = Path(out)
    rows = json.loads((out / "rounds.json").read_text())["rounds"]
    summaries = [json.loads((out / r["folder"] / "summary.json").read_text()) for r in rows]
    paths = []
    fig, ax = plt.subplots(figsize=(8, 4.8))
    limit, unit, top = None, "packets", 0.0
    for i, (r, summary) in enumerate(zip(rows, summaries)):
        d = out / r["folder"]
        bn = summary["bottleneck"]
        in_packets = bn["buffer_packets"] is not None
        col, unit = ("backlog_packets", "packets") if in_packets else ("backlog_bytes", "bytes")
        limit = bn["buffer_packets"] if in_packets else bn["buffer_bytes"]
        s = load_queue_samples(d / "queues.csv", 0.0)[bn["intf"]]
        top = max(top, float(s[col].max()) if len(s[col]) else 0.0)
        words = [w for w in (sec.round_label(r) for sec in sections) if w]
        ax.plot(s["t_s"], s[col], color=f"C{i}", lw=1.2, label=r["round"] + (": " + ", ".join(words) if words else ""))
        _queue_marks(ax, summary, in_packets, sections, color=f"C{i}", suffix=f" ({r['round']})")
    if limit is not None:
        ax.axhline(limit, color="k", ls="--", lw=1, label=f"buffer = {limit} {unit}")
        ax.set_ylim(0, max(limit, top) * 1.1)
    ax.set_xlabel("time since the round's start (s)")
    ax.set_ylabel(f"bottleneck queue ({unit})")
    ax.set_title("bottleneck queue per round")
    paths.append(save_with_legend(fig, ax, out / "rounds_queue.png", legend_cols=2, caption=ROUNDS_QUEUE))

    names = [r["round"] for r in rows]
    x = np.arange(len(rows))
    common = (("drops", "bottleneck_drops", "drops at the bottleneck"),
              ("FCT", ("fct_median_s", "fct_p99_s"), "completion time (s): median, p99"),
              ("Mbit/s", "bottleneck_mean_tx_mbps", "bottleneck throughput (Mbit/s)"))
    extra = [b for sec in sections for b in sec.round_bars(rows)]
    panels = [p for anchor, key, title in common
              for p in [(key, title)] + [(k, t) for after, k, t in extra if after == anchor]]
    panels += [(k, t) for after, k, t in extra if after is None]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.25 * len(panels), 3.8))
    for ax, (key, title) in zip(axes, panels):
        if isinstance(key, tuple):
            for j, k in enumerate(key):
                ax.bar(x + (j - 0.5) * 0.38, [r[k] or 0 for r in rows], 0.38, label=k.split("_")[1])
            ax.legend(fontsize=7, frameon=False)
        else:
            bars = ax.bar(x, [r[key] or 0 for r in rows], 0.6, color=[f"C{i}" for i in range(len(rows))])
            ax.bar_label(bars, fmt="%.4g", fontsize=7)      # a zero shows as "0", not as a missing bar
        ax.set_xticks(x, names, rotation=30, ha="right", fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    paths.append(write_png(fig, out / "rounds_bars.png", ROUNDS_BARS))

    for sec in sections:
        paths += sec.round_plots(out, rows, summaries)
    return paths


def plot_comparison(cmp_dir: Path) -> list[Path]:
    """Side-by-side plots of a comparison folder (experiments.compare): ``compare_throughput.png``
    (per-host throughput per traffic mix and fabric, fluid model and host rate marked),
    ``compare_fct.png`` (CDF of flow completion times of the sized-flow runs, one panel per fabric)
    and ``compare_per_flow.png`` (per-flow throughput distribution per run)."""
    cmp_dir = Path(cmp_dir)
    res = json.loads((cmp_dir / "comparison.json").read_text())
    rows = res["runs"]
    fabrics = list(dict.fromkeys(r["fabric"] for r in rows))
    timed = [r for r in rows if r.get("flows_kind") == "time-limited"] or rows   # throughput from these
    traffics = list(dict.fromkeys(r["traffic"] for r in timed))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    out = []
    fig, ax = plt.subplots(figsize=(max(7, 2.4 * len(traffics)), 4.2))
    w = 0.8 / len(fabrics)
    for j, fab in enumerate(fabrics):
        xs, ys, ms, hs = [], [], [], []
        for i, tr in enumerate(traffics):
            r = next((r for r in timed if r["fabric"] == fab and r["traffic"] == tr), None)
            if r is None:
                continue
            xs.append(i - 0.4 + w * (j + 0.5))
            ys.append(r["per_host_mbps"])
            ms.append(r["model_per_host_mbps"])
            hs.append(r["hash_ecmp_model_per_host_mbps"] if r["hash_ecmp_model_per_host_mbps"] is not None else np.nan)
        over = next(r["oversubscription"] for r in rows if r["fabric"] == fab)
        ax.bar(xs, ys, w * 0.9, color=colors[j % len(colors)], label=f"{fab} ({over:g}:1) measured")
        ax.scatter(xs, ms, marker="_", s=600, color="black", zorder=3, label="fluid model, ideal ECMP" if j == 0 else None)
        ax.scatter(xs, hs, marker="_", s=600, color="crimson", zorder=3,
                   label="fluid model, hash ECMP (median)" if j == 0 else None)
        for x, y in zip(xs, ys):
            ax.annotate(f"{y:.2f}", (x, y), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=7)
    rate = rows[0]["host_rate_mbps"]
    ax.axhline(rate, color="grey", ls="--", lw=1, label=f"host link {rate:g} Mbit/s")
    ax.set_xticks(range(len(traffics)))
    ax.set_xticklabels(traffics, fontsize=8)
    ax.set_ylabel("TCP payload per sending host (Mbit/s)")
    ax.set_title(f"{res['name']}: same traffic, per host", fontsize=10)
    out.append(save_with_legend(fig, ax, cmp_dir / "compare_throughput.png", legend_cols=3, caption=COMPARE_THROUGHPUT))

    sized = [r for r in rows if r.get("flows_kind") == "sized" and r["fct_median_s"] is not None]
    if sized:
        fig, axes = plt.subplots(1, len(fabrics), figsize=(4.2 * len(fabrics), 3.8), sharey=True, squeeze=False)
        for ax, fab in zip(axes[0], fabrics):
            for k, r in enumerate(x for x in sized if x["fabric"] == fab):
                fl = read_csv(cmp_dir / r["run"] / "flows.csv")
                fct = np.sort([float(f["fct_s"]) for f in fl if f["fct_s"] not in ("", "None")])
                if len(fct):
                    ax.step(fct, np.arange(1, len(fct) + 1) / len(fct), where="post", color=colors[k % len(colors)],
                            label=r["traffic"])
            ax.set_title(fab, fontsize=9)
            ax.set_xlabel("flow completion time (s)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="lower right")
        axes[0][0].set_ylabel("fraction of flows")
        fig.tight_layout()
        out.append(write_png(fig, cmp_dir / "compare_fct.png", COMPARE_FCT))

    fig, ax = plt.subplots(figsize=(max(7, 1.3 * len(rows)), 4))
    data, labels = [], []
    for r in rows:
        tp = json.loads((cmp_dir / r["run"] / "summary.json").read_text())["flows"]["per_flow"]
        vals = [f["throughput_mbps"] for f in tp if f["throughput_mbps"] is not None]
        data.append(vals or [0.0])
        labels.append(f"{r['fabric']}\n{r['traffic']}")
    ax.boxplot(data, showfliers=True)
    ax.set_xticks(range(1, len(labels) + 1))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("per-flow throughput (Mbit/s)\nbytes / completion time", fontsize=8)
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out.append(write_png(fig, cmp_dir / "compare_per_flow.png", COMPARE_PER_FLOW))
    return out


def _save_lanes(fig, ax, ranks: list[int], path: Path, xlabel: str, title: str, legend_cols: int,
                caption: Caption) -> Path:
    """A timeline with one lane per rank (top to bottom): labels, axis, title, then :func:`experiments.plotkit.save_with_legend`."""
    ax.set_yticks(range(len(ranks)), [f"rank {k}" for k in ranks], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    return save_with_legend(fig, ax, path, legend_cols, caption)


def plot_collective_timeline(rows: list[dict], path: Path, title: str = "",
                             caption: Caption = COLLECTIVE_TIMELINE) -> Path:
    """The textbook's ring picture: one lane per rank, one bar per step (start -> end, seconds),
    reduce-scatter steps in one colour and all-gather (or all-to-all) steps in another (a
    hierarchical AllReduce's NVLink phases in two more), each bar labelled with the chunk it sent. ``rows``: :func:`experiments.coll_summary.step_rows` of one
    iteration. Raises ValueError for no rows."""
    if not rows:
        raise ValueError("no collective steps to plot")
    ranks = sorted({r["rank"] for r in rows})
    colors = {"reduce_scatter": "C0", "all_gather": "C1", "all_to_all": "C2", "intra_reduce_scatter": "C4",
              "inter_reduce_scatter": "C0", "inter_all_gather": "C1", "intra_all_gather": "C5"}
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(ranks) + 1.8))
    seen = set()
    for r in rows:
        y = ranks.index(r["rank"])
        label = r["phase"].replace("_", "-") if r["phase"] not in seen else None
        seen.add(r["phase"])
        ax.barh(y, r["end_s"] - r["start_s"], left=r["start_s"], height=0.7, color=colors.get(r["phase"], "C3"),
                edgecolor="white", linewidth=0.5, label=label)
        if len(ranks) <= 16 and r["chunk"] is not None:
            ax.text(r["start_s"] + (r["end_s"] - r["start_s"]) / 2, y, str(r["chunk"]), ha="center", va="center",
                    fontsize=6, color="white")
    return _save_lanes(fig, ax, ranks, Path(path), "time from the collective's start (s); number = chunk sent",
                       title or "collective: each rank's steps", 3, caption)


def plot_training_timeline(rows: list[dict], path: Path, title: str = "",
                           caption: Caption = TRAINING_TIMELINE) -> Path:
    """Every rank's iterations: one lane per rank, forward and backward compute as bars, each
    bucket's AllReduce as a bar on a thinner lane below (its exposed part, after backward ended,
    hatched). ``rows``: training_timeline.csv's rows (``iteration``, ``rank``, ``kind``:
    forward | backward | allreduce, ``start_s``, ``end_s``). Raises ValueError for no rows."""
    if not rows:
        raise ValueError("no training iterations to plot")
    ranks = sorted({r["rank"] for r in rows})
    colors = {"forward": "C2", "backward": "C0", "allreduce": "C1"}
    fig, ax = plt.subplots(figsize=(10, 0.4 * len(ranks) + 1.8))
    bwd_end = {(r["rank"], r["iteration"]): r["end_s"] for r in rows if r["kind"] == "backward"}
    seen = set()
    for r in rows:
        y = ranks.index(r["rank"])
        comm = r["kind"] == "allreduce"
        label = ("AllReduce of a bucket" if comm else r["kind"]) if r["kind"] not in seen else None
        seen.add(r["kind"])
        ax.barh(y + (0.25 if comm else -0.1), r["end_s"] - r["start_s"], left=r["start_s"], height=0.3 if comm else 0.5,
                color=colors[r["kind"]], edgecolor="white", linewidth=0.4, label=label)
        end = bwd_end.get((r["rank"], r["iteration"]))
        if comm and end is not None and r["end_s"] > end:
            lo = max(end, r["start_s"])
            ax.barh(y + 0.25, r["end_s"] - lo, left=lo, height=0.3, color="none", edgecolor="C3", hatch="////",
                    linewidth=0, label="exposed communication" if "exposed" not in seen else None)
            seen.add("exposed")
    return _save_lanes(fig, ax, ranks, Path(path), "time from the first iteration's start (s)",
                       title or "training: every rank's iterations", 4, caption)


def plot_training_rounds(rows: list[dict], path: Path, title: str = "",
                         caption: Caption = TRAINING_ROUNDS) -> Path:
    """Rounds side by side: measured iteration time beside the model, compute and communication,
    with the gradient's largest relative error (log scale) on a second axis. ``rows``:
    training_rounds.csv's (``round``, ``time_s``, ``model_time_s``, ``compute_s``, ``comm_s``,
    ``max_rel_error``). Raises ValueError for no rows."""
    if not rows:
        raise ValueError("no training rounds to plot")
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(rows) + 2), 4.4))
    x = np.arange(len(rows))
    w = 0.2
    for i, (key, label) in enumerate((("time_s", "iteration (measured)"), ("model_time_s", "iteration (model)"),
                                      ("compute_s", "compute"), ("comm_s", "communication"))):
        ax.bar(x + (i - 1.5) * w, [r.get(key) or 0 for r in rows], w, label=label, color=f"C{i}")
    ax.set_xticks(x, [r["round"] for r in rows], fontsize=8)
    ax.set_ylabel("seconds per iteration (median)")
    ax.set_title(title or "training rounds: iteration time, and the price of compression")
    errs = [r.get("max_rel_error") for r in rows]
    if any(e for e in errs):
        ax2 = ax.twinx()
        ax2.plot(x, [max(e or 0, 1e-12) for e in errs], "kD--", label="gradient max relative error")
        ax2.set_yscale("log")
        ax2.set_ylabel("max |reduced - exact| / max |exact| (1e-12 = exact)")
        ax2.legend(loc="upper right", fontsize=7, frameon=False)
    return save_with_legend(fig, ax, Path(path), 4, caption)


def plot_busbw_vs_size(rows: list[dict], path: Path, link_rate_bps: float | None = None, title: str = "",
                       link_label: str = "host link rate", caption: Caption = COLLECTIVE_BUSBW) -> Path:
    """busbw against message size, measured beside the alpha-beta model. ``rows``: ``[{"size_bytes",
    "busbw_bps", "model_busbw_bps" (optional), "label" (optional)}]``; one line per label; a rate
    (``link_rate_bps``, named ``link_label``) as a dotted line when given. Raises ValueError for no rows."""
    if not rows:
        raise ValueError("no sizes to plot")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    labels = list(dict.fromkeys(r.get("label", "measured") for r in rows))
    for i, lab in enumerate(labels):
        rs = sorted((r for r in rows if r.get("label", "measured") == lab), key=lambda r: r["size_bytes"])
        x = [r["size_bytes"] for r in rs]
        ax.plot(x, [r["busbw_bps"] / 1e6 for r in rs], "o-", color=f"C{i}", label=f"{lab} measured")
        if any(r.get("model_busbw_bps") for r in rs):
            ax.plot(x, [(r.get("model_busbw_bps") or np.nan) / 1e6 for r in rs], "--", color=f"C{i}",
                    label=f"{lab} alpha-beta model")
    if link_rate_bps:
        ax.axhline(link_rate_bps / 1e6, color="grey", ls=":", label=link_label)
    ax.set_ylim(bottom=0)        # from zero: a busbw a tenth below the model must look a tenth below
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size per rank (bytes)")
    ax.set_ylabel("busbw (Mbit/s)")
    ax.set_title(title or "bus bandwidth against message size")
    return save_with_legend(fig, ax, Path(path), 3, caption)


def plot_link_heatmap(rows: list[dict], path: Path, title: str = "", caption: Caption = LINK_HEATMAP) -> Path:
    """A mixed-parallel job's links: left, a heat map of each directed link's utilisation (from
    row node to column node; blank where no link is); right, each link's predicted bytes by
    parallelism kind (stacked) with the bytes its port counted (a dot). ``rows``:
    experiments.workloads.parallel.run.link_table's (``src``, ``dst``, ``utilisation``, ``pipeline_bytes``,
    ``data_bytes``, ``ack_bytes``, ``measured_bytes``; a server's NVLink, ``src`` = ``dst``, as a bar only).
    Raises ValueError for no rows."""
    if not rows:
        raise ValueError("no links to plot")
    nodes = sorted({r["src"] for r in rows if r["src"] != r["dst"]} | {r["dst"] for r in rows if r["src"] != r["dst"]},
                   key=lambda n: (n.startswith("h"), len(n), n))
    grid = np.full((len(nodes), len(nodes)), np.nan)
    for r in rows:
        if r["utilisation"] is not None and r["src"] != r["dst"]:      # a server's NVLink: bars only
            grid[nodes.index(r["src"]), nodes.index(r["dst"])] = r["utilisation"]
    busy = [r for r in rows if r["predicted_bytes"] or r["measured_bytes"]]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, max(4.5, 0.28 * len(busy) + 1.5)),
                                 gridspec_kw={"width_ratios": [1, 1.2]})
    im = ax.imshow(grid, cmap="viridis", vmin=0, vmax=max(1.0, float(np.nanmax(grid)) if np.isfinite(grid).any() else 1))
    ax.set_xticks(range(len(nodes)), nodes, rotation=90, fontsize=6)
    ax.set_yticks(range(len(nodes)), nodes, fontsize=6)
    ax.set_xlabel("to")
    ax.set_ylabel("from")
    fig.colorbar(im, ax=ax, shrink=0.7, label="utilisation (measured bits / (rate x job span))")
    y = np.arange(len(busy))
    left = np.zeros(len(busy))
    for key, label, c in (("tensor_bytes", "tensor parallel (activation AllReduces)", "C2"),
                          ("pipeline_bytes", "pipeline (activations, their gradients)", "C0"),
                          ("data_bytes", "data parallel (gradient buckets)", "C1"),
                          ("ack_bytes", "TCP acknowledgements", "C7")):
        v = np.array([r[key] / 1e6 for r in busy])
        bx.barh(y, v, left=left, color=c, label=label)
        left += v
    measured = [(r["measured_bytes"] or 0) / 1e6 for r in busy]
    bx.plot(measured, y, "k.", label="measured (port counters; NVLink: the ranks' counts)")
    bx.set_xlim(0, 1.06 * max(max(left, default=0), max(measured, default=0), 1e-6))
    bx.set_yticks(y, [r["link"] for r in busy], fontsize=6)
    bx.invert_yaxis()
    bx.set_xlabel("MB over the round (predicted by kind; <server>:nvlink is inside a server)")
    fig.suptitle(title or "link utilisation and bytes by parallelism kind", fontsize=10)
    return save_with_legend(fig, bx, Path(path), 2, caption)
