"""Training iterations (``training.model`` or ``training.layers``): data-parallel ranks on GPU
servers emulate compute by time and synchronise real gradients in buckets (experiments.workloads.training.run);
training.csv, training_timeline.csv, gradient_error.csv and the timeline plot per round,
training_rounds.csv and the rounds' plot side by side."""
from __future__ import annotations

from pathlib import Path

from controller.faults import capacity_overrides
from experiments import plot
from experiments.workloads.training import run as trainrun
from experiments.context import RoundRecord
from experiments.model import Round, Scenario
from experiments.tables import write_csv
from experiments.workloads.base import Workload

#: training_rounds.csv's columns: one row per round.
ROUND_COLUMNS = ("round", "algorithm", "overlap", "compression", "ratio", "time_s", "compute_s", "comm_s",
                 "exposed_comm_s", "codec_s", "sum_s", "max_s", "model_time_s", "model_comm_s", "time_over_max",
                 "time_over_sum", "max_rel_error", "all_within_bound", "all_exact", "replicas_equal")


class Training(Workload):
    """One round's training iterations: an alpha probe (once per run for the same ranks and
    algorithm), then ``training.iterations`` iterations."""
    name = "training"

    def __init__(self, ctx):
        """The run's workload; keeps the alphas measured in its rounds."""
        super().__init__(ctx)
        self.alpha_cache: dict = {}

    @staticmethod
    def wants(sc: Scenario, rnd: Round) -> bool:
        """Rounds whose training section has a model or layers, data parallelism only."""
        return rnd.training.on and not rnd.training.mixed

    def describe_round(self, rnd: Round) -> str:
        """``training on <ranks> ranks (<algorithm>, overlap on|off, <compression>)``."""
        t = rnd.training
        return (f"training on {t.ranks} ranks ({t.algorithm}, overlap {'on' if t.overlap else 'off'}, "
                f"{t.compression})")

    def run_round(self, lf, state, rec: RoundRecord) -> dict:
        """experiments.workloads.training.run.run_round; returns its result (JSON-able)."""
        return trainrun.run_round(lf, state, rec.round.training, rec.dir, self.ctx.sc.measurement.sample_hz,
                                  self.ctx.quiet, say=self.ctx.say, seed=rec.round.seed,
                                  sampler_method=self.ctx.sc.measurement.sampler,
                                  capacity_mbps=capacity_overrides(self.ctx.fabric_map, rec.round.faults),
                                  alpha_cache=self.alpha_cache)

    def summarize(self, rec: RoundRecord) -> dict:
        """training.csv, training_timeline.csv, gradient_error.csv, the plot, and the ``training`` summary."""
        t = trainrun.summarize(rec.raw, rec.dir, plots=self.ctx.sc.measurement.plots)
        trainrun.warn(t)
        return {**self.summary_head(rec), "training": t}

    def format_round(self, summary: dict, rdir: Path) -> str:
        """The folder and experiments.workloads.training.run.format_line."""
        return f"{rdir}\n  {trainrun.format_line(summary['training'])}"

    def finish_run(self, done: list[tuple[RoundRecord, dict]]) -> None:
        """training_rounds.csv and training_rounds.png: every round's iteration, side by side."""
        rows = [{"round": rec.round.name, **{k: s["training"].get(k) for k in ROUND_COLUMNS if k != "round"}}
                for rec, s in done if s["training"].get("complete")]
        if rows:
            write_csv(self.ctx.out / "training_rounds.csv", list(ROUND_COLUMNS), rows)
            if self.ctx.sc.measurement.plots and len(rows) > 1:
                plot.plot_training_rounds(rows, self.ctx.out / "training_rounds.png")
