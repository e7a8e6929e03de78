"""Lab 5, optimisation: compute/communication overlap, gradient compression and the
hierarchical AllReduce on GPU servers (labs/05-optimisation/README.md).

Two runs on the same rail-optimised pod (4 servers x 4 GPUs, a 10 Mbit/s NIC per GPU, NVLink at
12x outside the fabric): data-parallel training iterations with overlap off and on and with
compressed gradients (experiments/scenarios/training.yaml), and the same AllReduce as one flat
ring and as the hierarchical AllReduce (experiments/scenarios/hierarchical-rail.yaml).

The models (docs/gpu-servers.md): an iteration without overlap takes T = T_compute + T_comm,
with overlap about max(T_compute, T_comm) plus the part of the communication that cannot be
hidden (the last bucket, ready when backward ends); compression by a ratio r divides the bytes'
part of each step, T_comm = 2(N - 1) alpha + D / (r B) for a ring, not the per-step alpha; the
hierarchical AllReduce sends 2(S - 1) D through the network in all and 2(S - 1) D / (G S) from
each NIC, the flat ring over ranks in server order 2(N - 1) D / G and up to 2(N - 1) D / N from
one NIC. Every expected answer is read from the student's own runs (each round's summary.json,
the training section's medians over the iterations after the first and the collective's row of
the largest size); the notes give the model's figure beside it.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from experiments.labs.base import Figures, Lab, Question, around, round_folder

TRAINING, HIER = "training", "hierarchical-rail"
#: MB in the answers: 10^6 bytes.
MB_BYTES = 1e6


def _summary(run: Path, name: str) -> dict:
    """The summary of round ``name`` of a run folder."""
    return json.loads((round_folder(run, name) / "summary.json").read_text())


def steady_wire_bytes(training: dict) -> float:
    """The bytes every rank sent in one iteration (NVLink and network), the median over the
    iterations after the first (the one iteration when there is one), from a round's training
    summary section (its ``iterations``, as training.csv). ValueError when it has none."""
    its = training.get("iterations") or []
    if not its:
        raise ValueError("the round recorded no iteration")
    return float(statistics.median(i["wire_bytes"] for i in (its[1:] or its)))


def largest(collective: dict) -> dict:
    """The row of the largest size of a round's collective summary section (collective.csv's)."""
    return max(collective["sizes"], key=lambda r: r["size_bytes"])


class Optimisation(Lab):
    """Lab 5: overlap, gradient compression and the hierarchical AllReduce on GPU servers."""
    NUMBER = 5
    SLUG = "optimisation"
    TITLE = "optimisation: overlap, gradient compression, hierarchical AllReduce on GPU servers"
    RUNS = {TRAINING: "experiments/scenarios/training.yaml", HIER: "experiments/scenarios/hierarchical-rail.yaml"}
    QUESTIONS = (
        Question("q1", "overlap-off round: iteration time", "s", "number", TRAINING),
        Question("q2", "overlap-on round: iteration time", "s", "number", TRAINING),
        Question("q3", "overlap-on round: exposed communication per iteration (iteration time less compute)", "s",
                 "number", TRAINING),
        Question("q4", "int8 round: bytes the ranks sent per iteration, as a share of the overlap-off round's",
                 "ratio", "number", TRAINING),
        Question("q5", "int8 round: communication speed-up (the overlap-off round's communication time per "
                       "iteration / the int8 round's)", "ratio", "number", TRAINING),
        Question("q6", "flat-ring round: AllReduce time at the largest size", "s", "number", HIER),
        Question("q7", "hierarchical round: AllReduce time at the largest size", "s", "number", HIER),
        Question("q8", "flat-ring round: bytes sent through the network per AllReduce at the largest size", "MB",
                 "number", HIER),
        Question("q9", "hierarchical round: bytes sent through the network per AllReduce at the largest size", "MB",
                 "number", HIER),
        Question("q10", "the busiest NIC: the most bytes one rank sent through the network per AllReduce, flat-ring "
                        "/ hierarchical, at the largest size", "ratio", "number", HIER),
        Question("q11", "which AllReduce is faster at the largest size: flat-ring or hierarchical?", "", "choice",
                 HIER, ("flat-ring", "hierarchical")),
    )

    def measure(self, runs: dict[str, Path]) -> Figures:
        """Lab 5's figures from the training run's overlap-off, overlap-on and int8 rounds and the
        hierarchical-rail run's flat-ring and hierarchical rounds (their summary.json)."""
        fig = Figures()
        for name, part in ((TRAINING, self._training), (HIER, self._hierarchical)):
            if name in runs:
                part(runs[name], fig)
            else:
                for q in self.QUESTIONS:
                    if q.run == name:
                        fig.missing[q.id] = (f"no finished run of {name} in the results: sudo fabriclab run "
                                             f"{self.RUNS[name]}")
        return fig

    def _training(self, run: Path, fig: Figures) -> None:
        off, on, int8 = (_summary(run, n)["training"] for n in ("overlap-off", "overlap-on", "int8"))
        fig.values["q1"] = off["time_s"]
        fig.bands["q1"] = around(off["time_s"], 0.05, 0.02, "your overlap-off round's iteration time +- 5%")
        fig.notes["q1"] = (f"model: T = T_compute + T_comm = {off['compute_s']:.2f} + {off['comm_s']:.2f} = "
                           f"{off['sum_s']:.2f} s in your run; the alpha-beta model's iteration "
                           f"{off['model_time_s']:.2f} s")
        fig.values["q2"] = on["time_s"]
        fig.bands["q2"] = around(on["time_s"], 0.05, 0.02, "your overlap-on round's iteration time +- 5%")
        fig.notes["q2"] = (f"model: about max(T_compute, T_comm) = {on['max_s']:.2f} s in your run, plus the "
                           f"exposed part; the model's timeline {on['model_time_s']:.2f} s")
        fig.values["q3"] = on["exposed_comm_s"]
        fig.bands["q3"] = around(on["exposed_comm_s"], 0.15, 0.03,
                                 "your overlap-on round's iteration time less its compute +- 15%")
        model_compute = statistics.median(i["model_compute_s"] for i in on["iterations"])
        fig.notes["q3"] = (f"model: {on['model_time_s'] - model_compute:.2f} s (the last bucket is ready only when "
                           f"backward ends); without overlap all {off['exposed_comm_s']:.2f} s were exposed")
        share = steady_wire_bytes(int8) / steady_wire_bytes(off)
        fig.values["q4"] = share
        fig.bands["q4"] = around(share, 0.03, 0.005, "your int8 round's wire bytes per iteration / your overlap-off "
                                                     "round's +- 3%")
        fig.notes["q4"] = (f"model: 1/r = 1/{int8['ratio']:.2f} = {1 / int8['ratio']:.3f} (int8 sends a byte per "
                           "element and a scale per block)")
        speedup = off["comm_s"] / int8["comm_s"]
        fig.values["q5"] = speedup
        fig.bands["q5"] = around(speedup, 0.1, 0.05, f"your runs: {off['comm_s']:.3f} / {int8['comm_s']:.3f} s +- 10%")
        fig.notes["q5"] = (f"model: {off['model_comm_s'] / int8['model_comm_s']:.2f} (the bytes' part D/(rB) falls "
                           f"by r = {int8['ratio']:.2f}, the per-step alpha does not)")

    def _hierarchical(self, run: Path, fig: Figures) -> None:
        flat_c, hier_c = (_summary(run, n)["collective"] for n in ("flat-ring", "hierarchical"))
        flat, hier = largest(flat_c), largest(hier_c)
        d = hier["size_bytes"]
        n, s = hier_c["ranks"], hier_c["servers"]
        g = n // s
        for qid, name, row in (("q6", "flat-ring", flat), ("q7", "hierarchical", hier)):
            fig.values[qid] = row["time_s"]
            fig.bands[qid] = around(row["time_s"], 0.05, 0.01, f"your {name} round's T at {d} B +- 5%")
        traced = flat.get("traced_model_time_s")
        fig.notes["q6"] = (f"model: 2(N - 1)(alpha + D/(N B)) = {flat['model_time_s']:.3f} s"
                           + (f", {traced:.3f} s on the paths your run's connections took" if traced else ""))
        fig.notes["q7"] = (f"model: 2(G - 1)(alpha_nv + D/(G B_nv)) + 2(S - 1)(alpha + D/(G S B_rail)) = "
                           f"{hier['model_time_s']:.3f} s")
        for qid, name, row, model in (("q8", "flat-ring", flat, 2 * (n - 1) * d / g),
                                      ("q9", "hierarchical", hier, 2 * (s - 1) * d)):
            mb = row["network_bytes"] / MB_BYTES
            fig.values[qid] = mb
            fig.bands[qid] = around(mb, 0.02, 0.01, f"your {name} round's network_bytes at {d} B +- 2%")
            formula = "2(N - 1) D / G" if name == "flat-ring" else "2(S - 1) D"
            fig.notes[qid] = f"model: {formula} = {model / MB_BYTES:.2f} MB (N = {n}, S = {s}, G = {g})"
        ratio = flat["network_bytes_max_rank"] / hier["network_bytes_max_rank"]
        fig.values["q10"] = ratio
        fig.bands["q10"] = around(ratio, 0.03, 0.05, "your rounds' network_bytes_max_rank at the largest size +- 3%")
        fig.notes["q10"] = (f"model: (2(N - 1) D / N) / (2(S - 1) D / (G S)) = {(n - 1) / n * g * s / (s - 1):.2f}, "
                            f"about G = {g}: every NIC carries a G-th of a rail's share, in parallel")
        faster = "hierarchical" if hier["time_s"] < flat["time_s"] else "flat-ring"
        fig.values["q11"] = faster
        fig.notes["q11"] = (f"your run: {flat['time_s']:.3f} s (flat ring) against {hier['time_s']:.3f} s "
                            f"(hierarchical); the models': {flat['model_time_s']:.3f} against "
                            f"{hier['model_time_s']:.3f} s")
