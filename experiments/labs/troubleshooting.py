"""Lab 6, troubleshooting: a fabric with one hidden random fault (``fabriclab diagnose --inject
random --seed N --by-hand``) that the student finds with the tools, iperf3, ping and the switch
ports' counters (labs/06-troubleshooting/README.md).

The expected answers are the fault the run injected and recorded (``diagnosis.json``'s
``truth``, revealed when the student ends the run); the size's band is the model's relation
between the fault and what a probe through it measures (a UDP probe loses about the corrupted
or dropped share of its frames; a degraded link or slow host gives about its rate fraction).
"""
from __future__ import annotations

import json
from pathlib import Path

from controller.faults import FAULTS
from experiments import troubleshooter as D
from experiments.labs.base import Band, Figures, Lab, Question

RUN = "diagnose-fattree"

#: what each kind's size is, for the student (and its key in the recorded fault)
SIZES = {"corrupt": ("frame_fraction", "the share of the link's frames it corrupts"),
         "drop": ("frame_fraction", "the share of the frames the switch drops"),
         "degrade": ("rate_fraction", "the link's rate left, as a share of its nominal rate"),
         "slow_host": ("rate_fraction", "the host's sending rate left, as a share of its link's"),
         "flap": ("down_s", "how long each down period lasts, in seconds")}


class Troubleshooting(Lab):
    """Lab 6: find a hidden fault: its kind, place, layer and size."""
    NUMBER = 6
    SLUG = "troubleshooting"
    TITLE = "troubleshooting: find a hidden fault"
    RUNS = {RUN: "experiments/scenarios/diagnose-fattree.yaml"}
    QUESTIONS = (
        Question("q1", "what kind of fault is it?", "", "choice", RUN, tuple(FAULTS)),
        Question("q2", "where is it: a directed link (p0a1->c1), a switch (c2) or a host (h7)?", "", "text", RUN),
        Question("q3", "at which layer does it act?", "", "choice", RUN,
                 tuple(sorted({f.LAYER for f in FAULTS.values()}))),
        Question("q4", "how large is it: the share of frames lost (corrupt, drop), the share of the rate left "
                       "(degrade, slow_host) or each down period's seconds (flap)", "", "number", RUN),
    )

    def command(self, name: str) -> str:
        """The troubleshooting run: the hidden fault of seed N, handed to the student."""
        return f"sudo fabriclab diagnose {self.RUNS[name]} --inject random --seed N --by-hand --results DIR"

    def measure(self, runs: dict[str, Path]) -> Figures:
        """The hidden fault the run recorded (its newest diagnosis.json)."""
        fig = Figures()
        rec = json.loads((runs[RUN] / "diagnosis.json").read_text())
        (truth,) = rec["truth"]
        kind = truth["kind"]
        place = truth.get("link") or truth.get("switch") or truth.get("host")
        key, what = SIZES[kind]
        size = float(truth[key])
        seed = f"seed {rec.get('seed')}" if rec.get("inject") == "random" else "the scenario's own fault"
        fig.values.update(q1=kind, q2=place, q3=FAULTS[kind].LAYER, q4=size)
        fig.notes.update(q1=f"the hidden fault ({seed}): {rec.get('truth_description', kind)}",
                         q2="a link's direction counts for corrupt and degrade (the frames that way); either "
                            "direction of a flapping link",
                         q3=f"{kind} acts at the {FAULTS[kind].LAYER} layer",
                         q4=f"{what}: {size:g}")
        fig.bands["q4"] = Band(size * 0.5, size * 1.5, f"the hidden fault's {key} {size:g}, within half of it either "
                                                       "way (what iperf3 or ping through it measures)")
        self._truth = truth
        return fig

    def same(self, q: Question, answer, right) -> bool:
        """The place matches as the troubleshooter's verdict does (experiments.troubleshooter.matches)."""
        if q.id == "q2":
            return D.matches(D.Verdict(str(answer).strip(), self._truth["kind"], "", ()), self._truth)
        return super().same(q, answer, right)
