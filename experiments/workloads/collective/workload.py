"""A collective (``collective.kind``): ranks on hosts reduce real arrays over kernel TCP or
RoCEv2 (experiments.workloads.collective); collective.csv, collective_steps.csv and the plots per round,
collective_rounds.csv side by side."""
from __future__ import annotations

from pathlib import Path

from common.errors import RunError, SetupError
from controller.faults import capacity_overrides
from experiments import plot
from experiments.workloads.collective import agents as coll_agents, summary as coll_summary
from experiments.workloads.roce import jobs as roce_jobs, summary as roce_summary
from experiments.context import RoundRecord
from experiments.pagekit import Caption
from experiments.tables import write_csv
from experiments.workloads.base import Workload
from experiments.model import Round, Scenario


#: collective_busbw_rounds.png's caption (stored in the PNG; the run's report.html shows it).
BUSBW_ROUNDS = Caption(
    "Bus bandwidth against size, round by round",
    "One colour per round: the measured bus bandwidth (solid) and the alpha-beta model (dashed) against the "
    "message size per rank (log scale). The rounds ran on the same fabric, so a line above another is the "
    "better algorithm or placement at that size (a hierarchical AllReduce wins where the inter-node links are "
    "the bottleneck); the gap to its own model is what the fabric cost that round.")


class Collective(Workload):
    """One round's collective: an alpha probe, then every size, each ``repeat`` times."""
    name = "collective"

    @staticmethod
    def wants(sc: Scenario, rnd: Round) -> bool:
        """Rounds whose collective has a kind."""
        return rnd.collective.kind is not None

    def describe_round(self, rnd: Round) -> str:
        """``<kind> on <ranks> ranks over <transport>``."""
        c = rnd.collective
        ranks = len(c.hosts) if c.hosts else c.ranks
        return f"{c.kind} on {ranks} ranks over {c.transport}"

    def run_round(self, lf, state, rec: RoundRecord) -> dict:
        """experiments.coll_agents.run_round; returns its result (JSON-able).

        Raises:
            RunError: over RoCE, a rate-controller plug-in raised in an agent (named with its file,
                the exception and its line; found once the round's agents have ended).
        """
        coll = rec.round.collective
        roce_args = (roce_jobs.collective_job_args(self.ctx.sc, rec.round.roce_mode, rec.round.roce_plugin)
                     if coll.transport == "roce" else None)
        try:
            res = coll_agents.run_round(lf, state, coll, rec.dir / "agents", self.ctx.sc.measurement.sample_hz,
                                    self.ctx.quiet, say=self.ctx.say, seed=rec.round.seed, roce_args=roce_args,
                                    sampler_method=self.ctx.sc.measurement.sampler,
                                    capacity_mbps=capacity_overrides(self.ctx.fabric_map, rec.round.faults))
        except SetupError:
            _raise_plugin_failure(rec.dir / "agents")
            raise
        _raise_plugin_failure(rec.dir / "agents")
        return res

    def summarize(self, rec: RoundRecord) -> dict:
        """collective.csv, collective_steps.csv, the plots, and the ``collective`` summary."""
        return {**self.summary_head(rec),
                "collective": coll_summary.summarize(rec.raw, rec.dir, plots=self.ctx.sc.measurement.plots)}

    def format_round(self, summary: dict, rdir: Path) -> str:
        """The folder and experiments.coll_summary.format_line."""
        return f"{rdir}\n  {coll_summary.format_line(summary['collective'])}"

    def finish_run(self, done: list[tuple[RoundRecord, dict]]) -> None:
        """collective_rounds.csv: every round's sizes, side by side; with two rounds or more,
        collective_busbw_rounds.png (busbw against size, one line per round, beside its model)."""
        rows = [{"round": rec.round.name, **r} for rec, s in done for r in s["collective"]["sizes"]]
        if rows:
            write_csv(self.ctx.out / "collective_rounds.csv", list(rows[0]), rows)
        good = [{**r, "label": r["round"]} for r in rows if r.get("busbw_bps")]
        if self.ctx.sc.measurement.plots and len({r["round"] for r in good}) > 1:
            plot.plot_busbw_vs_size(good, self.ctx.out / "collective_busbw_rounds.png",
                                    title="busbw against size, round by round (e.g. flat ring against hierarchical)",
                                    caption=BUSBW_ROUNDS)


def _raise_plugin_failure(agent_dir: Path) -> None:
    """RunError when a collective agent below ``agent_dir`` recorded that its rate-controller
    plug-in raised (experiments.workloads.roce.summary.plugin_failures); else nothing."""
    failed = roce_summary.plugin_failures(agent_dir, "*.collective.json")
    if failed:
        more = f" (and {len(failed) - 1} more agent(s))" if len(failed) > 1 else ""
        raise RunError(failed[0] + more)
