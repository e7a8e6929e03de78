"""RoCE's section of the results: its line in a round's terminal block, its columns in
rounds.csv, the comparison of each mode's rounds across their seeds in rounds.json, and its plot
(registered in experiments.sections)."""
from __future__ import annotations

import statistics
from pathlib import Path

from experiments.section import ResultSection
from experiments.workloads.roce import plots


def format_line(summary: dict) -> str | None:
    """The terminal line of a round's RoCE results, or None without RoCE traffic."""
    r = summary.get("roce")
    if not r:
        return None
    f = r["message_fct_s"]
    fct = (f"message FCT median {f['median'] * 1e3:.0f} ms, p99 {f['p99'] * 1e3:.0f} ms"
           if f["median"] is not None else "no message completed")
    return (f"RoCE {r['mode']}: {r['messages_complete']}/{r['messages']} messages, {fct}; CNPs {r['cnps_received']}, "
            f"retransmitted {r['retransmitted_packets']} packets (NAKs {r['naks']}, timeouts {r['timeouts']}); "
            f"every byte once: {'yes' if r['delivered_exactly_once'] else 'NO'}"
            + _fluid_clause(r.get("fluid_fixed_point")))


def _fluid_clause(fp: dict | None) -> str:
    """``; fluid q* 11.5 pkts at leaf1-eth1, p* 0.033 (measured median 12 pkts); second half: median
    14 pkts, in [Kmin, Kmax] 95%, port busy 0.999`` for a ``fluid_fixed_point`` block, else ''."""
    if not fp:
        return ""
    q = "above Kmax" if fp["above_kmax"] else f"{fp['queue_packets']:.1f} pkts"
    m, st = fp.get("measured_queue_median_packets"), fp.get("settled")
    out = (f"; fluid q* {q} at {fp['port']}, p* {fp['p_mark']:.3f}"
           + (f" (measured median {m:.0f} pkts)" if m is not None else ""))
    if st:
        busy = f", port busy {st['utilisation']:.3f}" if st.get("utilisation") is not None else ""
        out += (f"; second half: median {st['median_packets']:.0f} pkts, in [Kmin, Kmax] "
                f"{st['in_band_share']:.0%}{busy}")
    return out


def across_seeds(round_rows: list[dict]) -> dict:
    """Rounds that share a RoCE mode, told apart by their seeds (case R4): per mode, the rounds, their
    seeds, and the median, smallest and largest of the rounds' message completion medians
    (``median_s``) and p99s (``p99_s``), from :func:`experiments.analysis.round_row` rows."""
    out: dict[str, dict] = {}
    for r in round_rows:
        if r.get("roce_mode"):
            out.setdefault(r["roce_mode"], []).append(r)

    def spread(xs):
        xs = [x for x in xs if x is not None]
        return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)} if xs else None
    return {mode: {"rounds": [r["round"] for r in rs], "seeds": [r["seed"] for r in rs],
                   "median_s": spread(r["message_fct_median_s"] for r in rs),
                   "p99_s": spread(r["message_fct_p99_s"] for r in rs)} for mode, rs in out.items()}


class RoceSection(ResultSection):
    """``summary["roce"]``: the mode, the message completion times with their ~95% interval, CNPs
    and retransmissions per round; rounds of one mode compared across their seeds."""
    key = "roce"
    columns = ("roce_mode", "message_fct_median_s", "message_fct_median_ci95_low_s",
               "message_fct_median_ci95_high_s", "message_fct_p99_s", "cnps", "retransmitted_packets")

    def row(self, summary: dict) -> dict:
        """The message FCT's 95% interval as two columns; all None in a round without RoCE."""
        r = summary.get("roce")
        if r is None:
            return dict.fromkeys(self.columns)
        m = r["message_fct_s"]
        low, high = m["median_ci95"] or (None, None)
        return {"roce_mode": r["mode"], "message_fct_median_s": m["median"],
                "message_fct_median_ci95_low_s": low, "message_fct_median_ci95_high_s": high,
                "message_fct_p99_s": m["p99"], "cnps": r["cnps_received"],
                "retransmitted_packets": r["retransmitted_packets"]}

    def seed(self, summary: dict) -> int | None:
        """The seed the round's arrivals were drawn with."""
        return (summary.get("roce") or {}).get("seed")

    def line(self, summary: dict) -> str | None:
        """:func:`format_line`."""
        return format_line(summary)

    def across_rounds(self, rows: list[dict]) -> dict:
        """``roce_across_seeds`` (:func:`across_seeds`) when any round ran RoCE."""
        return {"roce_across_seeds": across_seeds(rows)} if any(r["roce_mode"] for r in rows) else {}

    def plots(self, out: Path, summary: dict) -> list[Path]:
        """``roce_rates.png`` (:func:`.plots.plot_roce`)."""
        if summary.get("roce") and (Path(out) / "roce_rates.csv").exists():
            return [plots.plot_roce(Path(out), summary)]
        return []


SECTION = RoceSection()
