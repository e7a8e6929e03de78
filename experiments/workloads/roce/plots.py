"""RoCE's plot of one run or round: each sender's rate over time above its messages' completion
times, from ``roce_rates.csv`` and ``roce_messages.csv`` (result files only)."""
from __future__ import annotations

from pathlib import Path

from experiments.pagekit import Caption
from experiments.plotkit import plt, read_csv, write_png


ROCE_RATES = Caption(
    "RoCEv2 sender rates and message completion",
    "Top: each RoCE sender's rate as its rate controller sets it (line: DCQCN's, TIMELY's, a plug-in's, or the "
    "fixed rate in mode none) and what it actually put on the wire over four sample intervals (dots). Bottom: "
    "each message's completion time against when it was posted. Rate cuts after CNPs show as steps down; "
    "messages posted during a cut take longer.")


def plot_roce(out: Path, summary: dict) -> Path:
    """``roce_rates.png``: each RoCE sender's rate over time (its rate controller's
    current rate: DCQCN's, TIMELY's, a plug-in's, or the fixed rate in mode none; solid) beside what it put on the wire per sample interval (dots),
    above the completion times of its messages, from ``roce_rates.csv`` and ``roce_messages.csv``."""
    r = summary["roce"]
    rates = read_csv(out / "roce_rates.csv")
    msgs = read_csv(out / "roce_messages.csv")
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    by_flow: dict[str, list] = {}
    for row in rates:
        by_flow.setdefault(row["flow_id"], []).append(row)
    for i, (fid, rows) in enumerate(sorted(by_flow.items(), key=lambda kv: int(kv[0]))):
        t = [float(x["t_s"]) for x in rows]
        c = f"C{i % 10}"
        ax.plot(t, [float(x["rate_bps"]) / 1e6 for x in rows], color=c, lw=1.2,
                label=f"flow {fid} ({rows[0]['src']})")
        sent = [float(x["wire_bytes_sent"]) for x in rows]
        k = 4                      # what went on the wire over 4 sample intervals, where anything did
        pts = [(tb, (b - a) * 8 / (tb - ta) / 1e6) for a, b, ta, tb in zip(sent, sent[k:], t, t[k:])
               if tb > ta and b > a]
        ax.plot([p for p, _ in pts], [w for _, w in pts], ".", color=c, ms=2, alpha=0.5)
    ax.set_ylabel("rate (Mbit/s)")
    ax.set_title(f"RoCEv2 senders, mode {r['mode']}: rate (line) and sent over 4 samples (dots); "
                 f"{r['cnps_received']} CNPs, {r['retransmitted_packets']} retransmitted", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    done = [(float(m["posted_s"]), float(m["fct_s"])) for m in msgs if m["fct_s"] not in ("", None)]
    if done:
        bx.plot([p for p, _ in done], [f * 1e3 for _, f in done], "o", ms=3)
    bx.set_ylabel("message completion (ms)")
    bx.set_xlabel("time since the start (s), by message posting time below")
    fig.tight_layout()
    return write_png(fig, out / "roce_rates.png", ROCE_RATES)
