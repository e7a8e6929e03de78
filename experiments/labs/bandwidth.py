"""Lab 1, bandwidth and latency: 200 flows of many sizes, mostly alone on their links, between
random host pairs of a k=4 Fat-Tree at 10 Mbit/s (experiments/scenarios/latency-bandwidth.yaml;
labs/01-bandwidth-latency/README.md).

The model (Hockney's alpha-beta model of a message's time, as the textbook writes it): a
flow of D bytes on an otherwise idle path takes T(D) = alpha + 8 D / B, where alpha is the
latency (the TCP handshake and the last frame's trip through every switch on the path: it grows
with the switch count) and B the payload rate of the slowest link (10 Mbit/s x 1448 / 1514
for TCP over Ethernet). The student fits a straight line through their own flows' (size, FCT)
points per switch count with the Theil-Sen estimator (``scipy.stats.theilslopes`` with
``method="joint"``: the median of the slopes between every two points, and the median of the
residuals; robust to the few flows that met another one): its slope
is 8 / B, its intercept alpha. The expected answers come from the student's own flows.csv; the
notes give the model's figures beside them (B from the link rate, alpha from the run's idle
pings, scaled to the path: the run's ``ideal_fct_s`` of its one-segment flows).
"""
from __future__ import annotations

import csv
import statistics
from pathlib import Path

from experiments.labs.base import Figures, Lab, Question, around
from experiments.scenario import read_yaml_file

RUN = "latency-bandwidth"
#: TCP payload per Ethernet frame on the wire: 1448 payload bytes (with timestamps) per 1514.
PAYLOAD_FRACTION = 1448 / 1514
#: The switch counts a k=4 Fat-Tree's host pairs cross: same edge, same pod, another pod.
NEAR, FAR = 1, 5


def flows_csv(run: Path) -> Path:
    """The run's flows.csv (its one round's folder, or the run's own folder).

    Raises:
        FileNotFoundError: the run has none.
    """
    found = sorted(Path(run).glob("rounds/*/flows.csv")) or [p for p in [Path(run) / "flows.csv"] if p.is_file()]
    if not found:
        raise FileNotFoundError(f"{run}: no flows.csv")
    return found[0]


def switches_on(path: str) -> int | None:
    """The switches a traced path crosses (``h9>p2e1>p2a2>c4>p3a2>p3e2>h16`` -> 5); None for
    a path not traced (empty, or ``error: ...``)."""
    if not path or path.startswith("error") or ">" not in path:
        return None
    return path.count(">") - 1


def complete_flows(path: Path) -> list[dict]:
    """flows.csv's complete flows, each with ``bytes`` (int), ``fct_s``, ``ideal_fct_s`` (floats
    or None) and ``switches`` (int or None)."""
    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r.get("complete") not in ("True", "true", "1") or not r.get("fct_s"):
                continue
            out.append({"bytes": int(r["bytes_planned"]), "fct_s": float(r["fct_s"]),
                        "ideal_fct_s": float(r["ideal_fct_s"]) if r.get("ideal_fct_s") else None,
                        "switches": switches_on(r.get("path") or "")})
    return out


def fit_alpha_b(sizes_bytes: list[int], fcts_s: list[float]) -> tuple[float, float]:
    """T(D) = alpha + 8 D / B through the points by Theil-Sen (Sen, 1968;
    ``scipy.stats.theilslopes(fct, size, method="joint")``: the slope is the median of the slopes
    between every two points, the intercept the median of ``fct - slope x size``):
    ``(alpha_s, b_bps)``.

    Raises:
        ValueError: fewer than 3 points, fewer than 2 distinct sizes, or a slope not positive.
    """
    from scipy.stats import theilslopes   # scipy.stats loads in ~0.7 s: only lab 1's check needs it
    if len(sizes_bytes) < 3 or len(set(sizes_bytes)) < 2:
        raise ValueError(f"need at least 3 flows of 2 sizes, got {len(sizes_bytes)}")
    fit = theilslopes(fcts_s, sizes_bytes, method="joint")
    if not fit.slope > 0:
        raise ValueError(f"the fitted slope is {fit.slope:g} s/byte: FCT does not grow with size")
    return float(fit.intercept), 8 / float(fit.slope)


class BandwidthLatency(Lab):
    """Lab 1: T = alpha + D/B per switch count, fitted to the student's own flows."""
    NUMBER = 1
    SLUG = "bandwidth-latency"
    TITLE = "bandwidth and latency: T = alpha + D/B over switch counts and sizes"
    RUNS = {RUN: "experiments/scenarios/latency-bandwidth.yaml"}
    QUESTIONS = (
        Question("q1", "how many of your complete flows crossed 5 switches (another pod)?", "flows", "number", RUN),
        Question("q2", "5-switch flows: B, from the Theil-Sen fit of FCT against size", "Mbit/s", "number", RUN),
        Question("q3", "5-switch flows: alpha, the fit's intercept", "ms", "number", RUN),
        Question("q4", "1-switch flows (same edge switch): alpha, the fit's intercept", "ms", "number", RUN),
        Question("q5", "5-switch flows: the size at which the two terms are equal, alpha x B / 8", "kB", "number",
                 RUN),
        Question("q6", "which flows have the larger alpha: those crossing 1 switch or 5?", "", "choice", RUN,
                 ("1", "5")),
    )

    def same(self, q: Question, answer, right) -> bool:
        """A choice of switch count may be written ``5``, ``5 switches`` or ``five``."""
        words = {"one": "1", "five": "5"}
        return super().same(q, " ".join(words.get(w, w) for w in str(answer).lower().split()), right)

    def measure(self, runs: dict[str, Path]) -> Figures:
        """Lab 1's figures from the run's flows.csv: the Theil-Sen fit per switch count."""
        fig = Figures()
        flows = complete_flows(flows_csv(runs[RUN]))
        by = {s: [f for f in flows if f["switches"] == s] for s in (NEAR, FAR)}
        fits = {}
        for s, fl in by.items():
            try:
                fits[s] = fit_alpha_b([f["bytes"] for f in fl], [f["fct_s"] for f in fl])
            except ValueError as e:
                for qid in ("q2", "q3", "q5") if s == FAR else ("q4",):
                    fig.missing[qid] = f"your run has too few {s}-switch flows to fit: {e}"
                fig.missing["q6"] = f"your run has too few {s}-switch flows to fit: {e}"
        n_far = len(by[FAR])
        fig.values["q1"] = n_far
        fig.bands["q1"] = around(n_far, 0.0, 0.5, f"your flows.csv: complete flows whose path crosses {FAR} switches")
        fig.notes["q1"] = (f"model: 12 of 15 destinations are in another pod, so about "
                           f"{0.8 * len(flows):.0f} of your {len(flows)} complete flows")
        link_bps = _link_rate_bps(runs[RUN])
        if FAR in fits:
            alpha, b = fits[FAR]
            fig.values["q2"] = b / 1e6
            fig.bands["q2"] = around(b / 1e6, 0.03, 0.05, f"the fit through your {n_far} {FAR}-switch flows +- 3% "
                                                            "(at least 0.05 Mbit/s)")
            fig.notes["q2"] = (f"model: the {link_bps / 1e6:g} Mbit/s links' TCP payload rate, "
                               f"{link_bps * PAYLOAD_FRACTION / 1e6:.2f} Mbit/s")
            fig.values["q3"] = alpha * 1e3
            fig.bands["q3"] = around(alpha * 1e3, 0.1, 0.2, "the same fit's intercept +- 10% (at least 0.2 ms)")
            fig.notes["q3"] = _model_alpha_note(by[FAR], link_bps * PAYLOAD_FRACTION)
            d_half = alpha * b / 8 / 1e3
            fig.values["q5"] = d_half
            fig.bands["q5"] = around(d_half, 0.12, 0.3, "your alpha x B / 8, in kB (1000 bytes), +- 12% "
                                                        "(at least 0.3 kB)")
            fig.notes["q5"] = "a smaller flow's time is mostly latency; a larger one's mostly bandwidth"
        if NEAR in fits:
            alpha1 = fits[NEAR][0]
            fig.values["q4"] = alpha1 * 1e3
            fig.bands["q4"] = around(alpha1 * 1e3, 0.1, 0.2, f"the fit through your {len(by[NEAR])} {NEAR}-switch "
                                                              "flows' intercept +- 10% (at least 0.2 ms)")
            fig.notes["q4"] = _model_alpha_note(by[NEAR], link_bps * PAYLOAD_FRACTION)
        if NEAR in fits and FAR in fits:
            a1, a5 = fits[NEAR][0], fits[FAR][0]
            fig.values["q6"] = str(FAR if a5 > a1 else NEAR)
            fig.notes["q6"] = (f"your fits: {a1 * 1e3:.2f} ms over {NEAR} switch, {a5 * 1e3:.2f} ms over {FAR}; "
                               "model: each switch adds its forwarding time and a frame's serialisation")
        return fig


def _model_alpha_note(flows: list[dict], b_bps: float) -> str:
    """The model's alpha on these flows' paths: the run's ideal time of a one-segment flow (its
    idle pings, scaled to the path: the handshake and the segment's trip) less that segment's own
    8 D / B, as the fit's intercept (D = 0) leaves it out."""
    one = [f["ideal_fct_s"] - 8 * f["bytes"] / b_bps for f in flows if f["bytes"] <= 1448 and f["ideal_fct_s"]]
    if not one:
        return "model: the run's idle pings, scaled to the path (no one-segment flow to read it from)"
    return (f"model: {statistics.median(one) * 1e3:.2f} ms, the run's ideal time of a one-segment flow on these "
            f"paths (from its idle pings) less the segment's own 8 D / B")


def _link_rate_bps(run: Path) -> float:
    """The host links' rate of the run's recorded scenario (its topology's ``host_rate_mbps``)."""
    topo = (read_yaml_file(Path(run) / "scenario.yaml") or {}).get("topology") or {}
    return float(topo.get("host_rate_mbps", 10)) * 1e6
