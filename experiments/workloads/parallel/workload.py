"""Mixed-parallel training (``training.tensor`` or ``training.pipeline`` above 1): tensor groups
inside servers, pipeline stages across servers, data-parallel replicas (experiments.workloads.parallel.run);
parallel.csv, link_bytes.csv and the links' heat map per round."""
from __future__ import annotations

from pathlib import Path

from experiments.workloads.parallel import run as parallelrun
from experiments.context import RoundRecord
from experiments.model import Round, Scenario
from experiments.workloads.base import Workload


class MixedParallel(Workload):
    """One round's mixed-parallel iterations, and its links' bytes by kind against the port counters."""
    name = "parallel"

    @staticmethod
    def wants(sc: Scenario, rnd: Round) -> bool:
        """Rounds whose training section has a model and tensor or pipeline parallelism."""
        return rnd.training.on and rnd.training.mixed

    def describe_round(self, rnd: Round) -> str:
        """``mixed-parallel training on <ranks> ranks (tensor T x pipeline P, M microbatches)``."""
        t = rnd.training
        return (f"mixed-parallel training on {t.ranks} ranks (tensor {t.tensor} x pipeline {t.pipeline}, "
                f"{t.microbatches} microbatches)")

    def run_round(self, lf, state, rec: RoundRecord) -> dict:
        """experiments.workloads.parallel.run.run_round; returns its result (JSON-able)."""
        return parallelrun.run_round(lf, state, rec.round.training, rec.dir, self.ctx.sc.measurement.sample_hz,
                                     self.ctx.quiet, say=self.ctx.say, seed=rec.round.seed,
                                     sampler_method=self.ctx.sc.measurement.sampler)

    def summarize(self, rec: RoundRecord) -> dict:
        """parallel.csv, link_bytes.csv, the heat map, and the ``parallel`` summary."""
        p = parallelrun.summarize(rec.raw, rec.features.get("ports"), rec.dir, plots=self.ctx.sc.measurement.plots)
        return {**self.summary_head(rec), "parallel": p}

    def format_round(self, summary: dict, rdir: Path) -> str:
        """The folder and experiments.workloads.parallel.run.format_line."""
        return f"{rdir}\n  {parallelrun.format_line(summary['parallel'])}"
