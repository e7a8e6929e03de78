"""Lab 3, collectives: the ring AllReduce of 8 ranks, rack-local against spread over a 3:1
Spine-Leaf, at three sizes (experiments/scenarios/allreduce-placement.yaml;
labs/03-collectives/README.md).

The alpha-beta model of the ring (Patarasuk and Yuan, 2009; NCCL's busbw): an AllReduce of D
bytes over N ranks takes 2(N - 1) steps, each sending D/N bytes, so
T(D) = 2(N - 1) alpha + 2 (N - 1) / N x D / B, and busbw = 2 (N - 1) / N x D / T. The expected
answers come from the student's own run (collective_steps.csv, collective.csv); the notes give
the model's figures beside them (fabriclab's alpha from a small probe AllReduce, B from hash-ECMP
on the fabric).
"""
from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

from experiments.labs.base import Figures, Lab, Question, around, round_folder

RUN = "allreduce-placement"


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def fit_alpha_beta(n: int, sizes_bytes: list[float], times_s: list[float]) -> tuple[float, float]:
    """The ring AllReduce's alpha (s per step) and B (bit/s) through the smallest and the largest
    size: T(D) = 2(N - 1) alpha + 2 (N - 1) / N x 8 D / B. ValueError if the times do not grow."""
    (d1, t1), (d2, t2) = min(zip(sizes_bytes, times_s)), max(zip(sizes_bytes, times_s))
    if t2 <= t1:
        raise ValueError("the largest size did not take longer than the smallest")
    share = 2 * (n - 1) / n
    b = share * 8 * (d2 - d1) / (t2 - t1)
    alpha = (t1 - share * 8 * d1 / b) / (2 * (n - 1))
    return alpha, b


class Collectives(Lab):
    """Lab 3: the ring's steps, busbw against size and placement, the alpha-beta fit."""
    NUMBER = 3
    SLUG = "collectives"
    TITLE = "collectives: the ring AllReduce, busbw and placement"
    RUNS = {RUN: "experiments/scenarios/allreduce-placement.yaml"}
    QUESTIONS = (
        Question("q1", "how many steps does each rank take in one AllReduce?", "steps", "number", RUN),
        Question("q2", "rack-local round: busbw at the largest size", "Mbit/s", "number", RUN),
        Question("q3", "spread round: busbw at the largest size", "Mbit/s", "number", RUN),
        Question("q4", "which placement gives the higher busbw at the largest size: rack-local or spread?", "",
                 "choice", RUN, ("rack-local", "spread")),
        Question("q5", "rack-local round: alpha, fitted through the smallest and the largest size", "ms", "number",
                 RUN),
        Question("q6", "rack-local round: B, fitted through the same two sizes", "Mbit/s", "number", RUN),
    )

    def measure(self, runs: dict[str, Path]) -> Figures:
        """Lab 3's figures from the run's two rounds (their collective.csv and collective_steps.csv)."""
        fig = Figures()
        run = runs[RUN]
        local, spread = round_folder(run, "rack-local"), round_folder(run, "spread")
        steps = _rows(local / "collective_steps.csv")
        per = Counter((r["size_bytes"], r["iteration"], r["rank"]) for r in steps)
        n_ranks = len({r["rank"] for r in steps})
        counts = sorted(set(per.values()))
        fig.values["q1"] = counts[0]
        fig.bands["q1"] = around(counts[0], 0.0, 0.5, f"every rank's steps per AllReduce in your run ({counts})")
        fig.notes["q1"] = f"model: 2(N - 1) = {2 * (n_ranks - 1)} for N = {n_ranks} ranks (reduce-scatter, all-gather)"
        rows = {name: _rows(d / "collective.csv") for name, d in (("rack-local", local), ("spread", spread))}
        top = {name: max(rs, key=lambda r: int(r["size_bytes"])) for name, rs in rows.items()}
        for qid, name in (("q2", "rack-local"), ("q3", "spread")):
            r = top[name]
            busbw = float(r["busbw_bps"]) / 1e6
            fig.values[qid] = busbw
            fig.bands[qid] = around(busbw, 0.05, 0.05, f"your {name} round's busbw at {int(r['size_bytes'])} B +- 5%")
            fig.notes[qid] = (f"model: {float(r['model_busbw_bps']) / 1e6:.2f} Mbit/s (alpha-beta with B from "
                              "hash-ECMP on this fabric)")
        b_local, b_spread = (float(top[n]["busbw_bps"]) for n in ("rack-local", "spread"))
        fig.values["q4"] = "rack-local" if b_local > b_spread else "spread"
        fig.notes["q4"] = (f"your run: {b_local / 1e6:.2f} against {b_spread / 1e6:.2f} Mbit/s; model: a spread ring "
                           "crosses the 3:1 oversubscribed spines at every hop, where ECMP can also collide flows")
        local_rows = rows["rack-local"]
        alpha, b = fit_alpha_beta(n_ranks, [int(r["size_bytes"]) for r in local_rows],
                                  [float(r["time_s"]) for r in local_rows])
        fig.values["q5"] = alpha * 1e3
        fig.bands["q5"] = around(alpha * 1e3, 0.1, 0.3, "the fit through your rack-local round's smallest and largest "
                                                        "size +- 10%")
        fig.notes["q5"] = (f"fabriclab's own alpha, from a small AllReduce it times before the sizes: "
                           f"{float(local_rows[0]['alpha_s']) * 1e3:.2f} ms")
        fig.values["q6"] = b / 1e6
        fig.bands["q6"] = around(b / 1e6, 0.05, 0.05, "the fit through the same two sizes +- 5%")
        fig.notes["q6"] = (f"model: {float(local_rows[0]['rate_bps']) / 1e6:.2f} Mbit/s (the 10 Mbit/s links' TCP "
                           "payload rate, hash-ECMP)")
        return fig
