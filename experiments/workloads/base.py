"""The workload protocol: what moves data in a round (kernel TCP/UDP flows, RoCEv2 messages,
collectives; later training iterations). The run loop (experiments.runner) calls only these
methods; a new workload is one module with a subclass, plus its import and an entry in
:data:`experiments.workloads.WORKLOADS`.
"""
from __future__ import annotations

from pathlib import Path

from experiments.context import RoundRecord, RunContext
from experiments.model import Round, Scenario


class Workload:
    """Base class of a workload: one instance per run, called for every round it runs.

    Subclasses set :attr:`name` and override :meth:`wants`, :meth:`run_round` and
    :meth:`summarize`; the other hooks have working defaults.
    """
    #: The workload's registry name (also what ``rounds.json`` and the progress lines call it).
    name = "workload"

    def __init__(self, ctx: RunContext):
        self.ctx = ctx

    @staticmethod
    def wants(sc: Scenario, rnd: Round) -> bool:
        """Whether this workload runs round ``rnd`` of the resolved scenario ``sc``."""
        raise NotImplementedError

    def describe_round(self, rnd: Round) -> str:
        """A few words on what the round sends (the progress line of a scenario with rounds)."""
        return self.name

    def run_round(self, lf, state, rec: RoundRecord) -> dict:
        """Start the round's agents in the live fabric ``lf`` (processes recorded in ``state``),
        wait for them, and return the round's raw record (JSON-able: exit codes, results).
        Files go under ``rec.dir``. Raises SetupError when the agents cannot start."""
        raise NotImplementedError

    def summarize(self, rec: RoundRecord) -> dict:
        """Collect the round's records (setting ``rec.rows`` when it has per-flow rows), write its
        derived files into ``rec.dir`` and return the round's summary (summary.json, before the
        features add their sections). Nothing is written to summary.json here."""
        raise NotImplementedError

    def summary_head(self, rec: RoundRecord) -> dict:
        """The keys every round's summary starts with: ``scenario``, ``round`` (None in a run of one
        round), ``datapath``, ``kernel`` (what the probe chose and found) and ``timings_s``."""
        env = self.ctx.env
        return {"scenario": self.ctx.sc.name, "round": rec.round.name if self.ctx.multi else None,
                "datapath": env["datapath"], "kernel": env["kernel"], "timings_s": rec.timings_s}

    def after_summary(self, rec: RoundRecord, summary: dict) -> None:
        """Draw what needs the written summary.json (plots). Default: nothing."""

    def format_round(self, summary: dict, rdir: Path) -> str:
        """The round's summary for the terminal."""
        return str(rdir)

    def finish_run(self, done: list[tuple[RoundRecord, dict]]) -> None:
        """After the last round: files that put this workload's rounds side by side (only when the
        scenario has rounds). ``done`` holds (record, summary) per round this workload ran."""
