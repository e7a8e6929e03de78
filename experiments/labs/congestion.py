"""Lab 4, congestion: an 8:1 incast with drop-tail, ECN, PFC and ECN + PFC, and DCQCN against
open-loop RoCEv2 senders (labs/04-congestion/README.md).

Every expected answer is read from the student's own runs (the default incast,
experiments/scenarios/incast.yaml, and the RoCEv2 incast, experiments/scenarios/roce-incast.yaml);
the notes say what the model predicts beside it (ECN: a queue near K; PFC: lossless; ECN + PFC:
fewer pauses, because marking keeps the queue below XOFF; open-loop RoCEv2: losses that
go-back-N repairs by resending).
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from experiments.labs.base import Figures, Lab, Question, around, round_folder
from experiments.scenario import FRAME_BYTES

INCAST, ROCE = "incast", "roce-incast"


def _round(run: Path, name: str) -> dict:
    """The summary of round ``name`` of a run folder."""
    return json.loads((round_folder(run, name) / "summary.json").read_text())


def _step_k_packets(summary: dict) -> float | None:
    """The step marking threshold K at the bottleneck, in packets (its bytes over a full frame)."""
    k = (summary.get("ecn") or {}).get("bottleneck_k_bytes")
    return k / FRAME_BYTES if k else None


class Congestion(Lab):
    """Lab 4: incast, ECN marking and K, PFC and its pauses, DCQCN."""
    NUMBER = 4
    SLUG = "congestion"
    TITLE = "congestion: incast, ECN, PFC and DCQCN"
    RUNS = {INCAST: "experiments/scenarios/incast.yaml", ROCE: "experiments/scenarios/roce-incast.yaml"}
    QUESTIONS = (
        Question("q1", "drop-tail round: packets dropped at the bottleneck port", "packets", "number", INCAST),
        Question("q2", "ecn-k20 round: the bottleneck queue's median after the first round trip", "packets",
                 "number", INCAST),
        Question("q3", "how many times fewer packets does the bottleneck drop with ECN than with drop-tail "
                       "(drop-tail drops / ECN drops, ECN's counted as at least 1)", "ratio", "number", INCAST),
        Question("q4", "bottleneck throughput in the ecn-k20 round as a share of the link's rate", "ratio",
                 "number", INCAST),
        Question("q5", "pfc round: packets dropped anywhere in the fabric", "packets", "number", INCAST),
        Question("q6", "which round's links stood paused for less time in all: pfc or ecn-pfc?", "", "choice",
                 INCAST, ("pfc", "ecn-pfc")),
        Question("q7", "DCQCN rounds: CNPs the senders received, median over the three seeds", "packets", "number",
                 ROCE),
        Question("q8", "open-loop rounds: packets the senders retransmitted (go-back-N), median over the three "
                       "seeds", "packets", "number", ROCE),
    )

    def measure(self, runs: dict[str, Path]) -> Figures:
        """Lab 4's figures from the incast run's rounds and the RoCEv2 run's seeds."""
        fig = Figures()
        inc = runs.get(INCAST)
        if inc is None:
            for q in self.QUESTIONS[:6]:
                fig.missing[q.id] = f"no finished run of {INCAST} in the results: sudo fabriclab run {self.RUNS[INCAST]}"
        else:
            dt, ecn = _round(inc, "drop-tail"), _round(inc, "ecn-k20")
            pfc, both = _round(inc, "pfc"), _round(inc, "ecn-pfc")
            d_dt, d_ecn = dt["bottleneck"]["drops"], ecn["bottleneck"]["drops"]
            fig.values["q1"] = d_dt
            fig.bands["q1"] = around(d_dt, 0.05, 2, "your drop-tail round's bottleneck drops +- 5%")
            fig.notes["q1"] = (f"model: the buffer ({dt['bottleneck']['buffer_packets']} packets) overflows when 8 "
                               "senders each open their window at once")
            q = ecn["ecn"]["queue_after_first_rtt"]["median_packets"]
            k = _step_k_packets(ecn)
            fig.values["q2"] = q
            fig.bands["q2"] = around(q, 0.1, 1.5, "your ecn-k20 round's median queue after the first RTT +- 10%")
            fig.notes["q2"] = (f"model: senders back off at the first CE mark (TCP with ECN), so the queue hovers "
                               f"near K = {k:.0f} packets" if k else "model: near the marking threshold K")
            ratio = d_dt / max(d_ecn, 1)
            fig.values["q3"] = ratio
            fig.bands["q3"] = around(ratio, 0.1, 0.5, f"your runs: {d_dt} / max({d_ecn}, 1) +- 10%")
            fig.notes["q3"] = "model: marking slows the senders before the buffer fills (at least 10x fewer)"
            share = ecn["bottleneck"]["mean_tx_mbps"] / ecn["bottleneck"]["rate_mbps"]
            fig.values["q4"] = share
            fig.bands["q4"] = around(share, 0.0, 0.03, "your ecn-k20 round's bottleneck Mbit/s / link rate +- 0.03")
            fig.notes["q4"] = "model: a queue that never empties keeps the link busy (near 1)"
            fig.values["q5"] = pfc["total_drops"]
            fig.bands["q5"] = around(pfc["total_drops"], 0.0, 0.5, "your pfc round's drops, exactly")
            fig.notes["q5"] = "model: PFC pauses the upstream port before its buffer overflows: lossless (0)"
            p_pfc, p_both = pfc["pfc"]["paused_time_s"], both["pfc"]["paused_time_s"]
            fig.values["q6"] = "pfc" if p_pfc < p_both else "ecn-pfc"
            fig.notes["q6"] = (f"your runs: paused {p_pfc:.2f} s (pfc) against {p_both:.2f} s (ecn-pfc); model: ECN "
                               "keeps the queue below XOFF, so ECN + PFC pauses less")
        roce = runs.get(ROCE)
        if roce is None:
            for q in self.QUESTIONS[6:]:
                fig.missing[q.id] = f"no finished run of {ROCE} in the results: sudo fabriclab run {self.RUNS[ROCE]}"
            return fig
        modes: dict[str, list[dict]] = {}
        for d in sorted((roce / "rounds").iterdir()):
            s = json.loads((d / "summary.json").read_text())["roce"]
            modes.setdefault("dcqcn" if s["mode"] == "dcqcn" else "open-loop", []).append(s)
        cnps = statistics.median(s["cnps_received"] for s in modes["dcqcn"])
        fig.values["q7"] = cnps
        fig.bands["q7"] = around(cnps, 0.1, 2, "the median of your DCQCN rounds' CNPs received +- 10%")
        fig.notes["q7"] = "model: the switch marks above Kmin and every marked packet's receiver sends a CNP"
        rtx = statistics.median(s["retransmitted_packets"] for s in modes["open-loop"])
        fig.values["q8"] = rtx
        fig.bands["q8"] = around(rtx, 0.1, 2, "the median of your open-loop rounds' retransmitted packets +- 10%")
        fig.notes["q8"] = ("model: senders at line rate overflow the 8:1 bottleneck's buffer, and go-back-N resends "
                           "from each lost packet on")
        return fig
