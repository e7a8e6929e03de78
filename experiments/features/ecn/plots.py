"""ECN's marks and plots (result files only): the bottleneck's marking threshold on a queue axis
of the common queue plots, and the K sweep across a run's rounds."""
from __future__ import annotations

from pathlib import Path

from common.units import FRAME_BYTES
from experiments.pagekit import Caption
from experiments.plotkit import plt, save_with_legend

K_SWEEP = Caption(
    "K sweep",
    "Against the ECN marking threshold K (packets): the bottleneck queue's median and p99 after the first "
    "round trip (left axis, the grey dotted line is queue = K) and the bottleneck's throughput (right axis). "
    "The textbook trade-off: a small K keeps the queue short until throughput starts to fall; the smallest K "
    "that keeps the link busy is the one to choose.")


def threshold_lines(ax, ecn: dict, in_packets: bool, color: str = "C2", suffix: str = "",
                    vertical: bool = False) -> None:
    """Mark the bottleneck's ECN thresholds of ``summary["ecn"]`` (``ecn``) on a queue axis of the
    matplotlib axes ``ax``: the y axis, or the x axis with ``vertical`` (a queue CDF). A step
    profile's K is a dash-dotted line labelled ``ECN K = <k> <unit><suffix>``; a RED profile's
    Kmin-Kmax a band labelled ``ECN Kmin-Kmax <lo>-<hi> <unit><suffix>``; in packets of a full
    frame (common.units.FRAME_BYTES) with ``in_packets``, else bytes. Nothing when ``ecn`` has
    neither (drop-tail, or no marking)."""
    scale = FRAME_BYTES if in_packets else 1
    unit = "packets" if in_packets else "bytes"
    line, span = (ax.axvline, ax.axvspan) if vertical else (ax.axhline, ax.axhspan)
    if ecn.get("bottleneck_k_bytes"):
        k = ecn["bottleneck_k_bytes"] / scale
        line(k, color=color, ls="-.", lw=1.2, label=f"ECN K = {k:g} {unit}{suffix}")
    elif ecn.get("bottleneck_kmin_kmax_bytes"):
        lo, hi = (v / scale for v in ecn["bottleneck_kmin_kmax_bytes"])
        span(lo, hi, color=color, alpha=0.12, label=f"ECN Kmin-Kmax {lo:g}-{hi:g} {unit}{suffix}")


def plot_k_sweep(out: Path, rows: list[dict], summaries: list[dict]) -> Path | None:
    """``k_sweep.png`` of a run whose rounds differ in a step profile's K at the bottleneck: the
    bottleneck queue's median and p99 after the first round trip (packets; rounds.json's
    ``queue_median_packets``, ``queue_p99_packets``) and its throughput (``bottleneck_mean_tx_mbps``,
    Mbit/s, right axis) against K in packets. ``rows``: rounds.json's rows, ``summaries``: each
    round's summary.json in the same order. None (nothing drawn) with fewer than two distinct K."""
    ks = []
    for r, summary in zip(rows, summaries):
        e = summary.get("ecn") or {}
        if e.get("bottleneck_k_bytes"):
            ks.append((e["bottleneck_k_bytes"] / FRAME_BYTES, r))
    if len({v for v, _ in ks}) < 2:
        return None
    ks.sort(key=lambda kr: kr[0])
    k = [v for v, _ in ks]
    fig, ax = plt.subplots(figsize=(8, 4.8))
    ax.plot(k, [r["queue_median_packets"] for _, r in ks], "o-", label="queue median (packets)")
    ax.plot(k, [r["queue_p99_packets"] for _, r in ks], "s--", label="queue p99 (packets)")
    ax.plot(k, k, color="grey", ls=":", lw=1, label="queue = K")
    ax.set_xlabel("K (packets)")
    ax.set_ylabel("bottleneck queue after the first RTT (packets)")
    ax2 = ax.twinx()
    ax2.plot(k, [r["bottleneck_mean_tx_mbps"] for _, r in ks], "^-", color="C3", label="throughput")
    ax2.set_ylabel("bottleneck throughput (Mbit/s)", color="C3")
    ax2.set_ylim(0, max(r["bottleneck_mean_tx_mbps"] or 0 for _, r in ks) * 1.25 + 0.1)
    ax.set_title("K sweep: queue and throughput vs the marking threshold")
    return save_with_legend(fig, ax, Path(out) / "k_sweep.png", legend_cols=4, caption=K_SWEEP)
