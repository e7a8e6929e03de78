"""RoCEv2 messages over reliable-connection queue pairs (``traffic.transport: roce``): one agent
per host, the round's rate controller (traffic.ratecontrol's registry: DCQCN, TIMELY, Patched
TIMELY, Swift-like, a fixed rate; or a plug-in)
and seed; the flows' rows, and the ``roce`` section with message completion times, CNPs,
retransmissions and RTT samples. A plug-in that raises in an agent ends the run (RunError)."""
from __future__ import annotations

import time

from common.errors import RunError, SetupError
from experiments import analysis
from experiments.context import RoundRecord, maybe_fault
from experiments.live import start_sampler, stop_sampler
from experiments.scenario import dcqcn_params
from experiments.workloads.flows import AGENT_EXIT_GRACE_S, KernelFlows
from experiments.workloads.roce import jobs, summary as roce_summary
from experiments.model import Round, Scenario


class RoceFlows(KernelFlows):
    """The traffic section's flows as RoCEv2 messages (same files as kernel flows, plus RoCE's)."""
    name = "roce"

    @staticmethod
    def wants(sc: Scenario, rnd: Round) -> bool:
        """Rounds without a collective whose transport is roce."""
        return rnd.collective.kind is None and sc.traffic.transport == "roce"

    def describe_round(self, rnd: Round) -> str:
        """``RoCEv2 <mode> DSCP d``."""
        return f"RoCEv2 {rnd.roce_mode} DSCP {self.ctx.sc.traffic.dscp}"

    def run_round(self, lf, state, rec: RoundRecord) -> dict:
        """The round's RoCE agents (:mod:`.jobs`), arrivals drawn with the round's seed;
        returns ``{"codes": {"<host>.roce": exit code}}`` and, with a plug-in, ``cc_plugin``
        (:func:`.summary.plugin_record`: its file, name, parameters and SHA-256).

        Raises:
            RunError: a rate-controller plug-in raised in an agent (the agents and the sampler
                are stopped first; :func:`.summary.plugin_failures` names the file, the
                exception and its line).
            SetupError: an agent did not get ready for another reason.
        """
        sc, mode, seed, plugin = self.ctx.sc, rec.round.roce_mode, rec.round.seed, rec.round.roce_plugin
        t = sc.traffic
        agent_dir = rec.dir / "agents"
        sampler = start_sampler(lf, state, rec.dir, sc.measurement.sample_hz, sc.measurement.sampler)
        try:
            flows = jobs.scenario_flows(sc, self.round_plan(rec.round), seed)
            last_post = max((m["at_s"] for f in flows for m in f.get("messages", [])), default=0.0)
            run_s = max(t.duration_s or 0.0, last_post) + t.timeout_s
            deadline = time.time() + run_s + t.start_delay_s + 30
            try:
                agents = jobs.start_roce_flows(lf, state, flows, agent_dir, deadline, start_in_s=t.start_delay_s,
                                               **jobs.scenario_job_args(sc, mode, plugin=plugin))
            except SetupError:
                _raise_plugin_failure(agent_dir)      # a plug-in that failed before its agent was ready
                raise
            try:
                what = (f"{len(flows)} senders x {t.responses} x {t.response_bytes} B -> {t.receiver} "
                        f"({t.arrival}{', load ' + format(t.load, 'g') if t.load else ''})"
                        if t.pattern == "incast" else f"{len(flows)} flows")
                self.ctx.say(f"{t.pattern} over RoCEv2 ({mode}): {what}")
                maybe_fault("after_traffic_start")
                # a plug-in that raised in one agent leaves the others nothing to do: stop them then
                codes = agents.wait(deadline + AGENT_EXIT_GRACE_S,
                                    give_up=lambda: bool(roce_summary.plugin_failures(agent_dir)))
                time.sleep(sc.measurement.post_s)
            finally:
                agents.kill()
        finally:
            stop_sampler(sampler)
        _raise_plugin_failure(agent_dir)
        raw = {"codes": codes}
        if plugin is not None:
            raw["cc_plugin"] = roce_summary.plugin_record(plugin)
        return raw

    def collect(self, rec: RoundRecord) -> list[dict]:
        """The round's per-queue-pair rows (:func:`.summary.collect_rows`)."""
        return roce_summary.collect_rows(rec.dir / "agents", self.round_plan(rec.round), rec.raw["codes"])

    def summarize(self, rec: RoundRecord) -> dict:
        """The kernel flows' files and summary, plus the ``roce`` section and RoCE's CSV files; with
        DCQCN and long flows into one receiver, the fluid model's fixed point for its port beside
        the port's measured queue (:func:`.summary.fluid_fixed_point`)."""
        summary = super().summarize(rec)
        sc, mode, params = self.ctx.sc, rec.round.roce_mode, dcqcn_params(self.ctx.sc)
        fluid = None
        if mode == "dcqcn":
            port = roce_summary.shared_port(jobs.scenario_flows(sc, self.round_plan(rec.round), rec.round.seed),
                                            self.ctx.fabric_map)
            profile = self.ctx.profiles[rec.index].get(port["intf"]) if port else None
            fluid = roce_summary.fluid_fixed_point(mode, params, port, profile, sc.roce.mtu_bytes,
                                                   self._measured_queue(rec, port), self._settled(rec, port, profile))
        return roce_summary.add_to_summary(rec.dir, summary, rec.rows, mode, params, rec.round.seed, fluid=fluid,
                                           plugin=(getattr(rec, "raw", None) or {}).get("cc_plugin"))

    def _settled(self, rec: RoundRecord, port: dict | None, profile) -> dict | None:
        """``port`` over the second half of the time every flow ran (to the first completion):
        experiments.analysis.queue_in_window against the profile's Kmin/Kmax; None without a port,
        a RED profile, samples or a completed flow."""
        fcts = [r["fct_s"] for r in rec.rows if r["fct_s"] is not None]
        if port is None or profile is None or profile.kind != "red" or not fcts or not (rec.dir / "queues.csv").exists():
            return None
        end = min(fcts)
        return analysis.queue_in_window(rec.dir / "queues.csv", port["intf"], end / 2, end, port["rate_bps"],
                                        profile.kmin_bytes, profile.kmax_bytes) or None

    def _measured_queue(self, rec: RoundRecord, port: dict | None) -> dict | None:
        """``port``'s sampled queue after the first burst (experiments.analysis.queue_after_first_rtt,
        the ECN section's figure for this port), None without a port, samples or a completed flow."""
        fcts = [r["fct_s"] for r in rec.rows if r["fct_s"] is not None]
        if port is None or not fcts or not (rec.dir / "queues.csv").exists():
            return None
        rtt_s = (self.ctx.env.get("scale") or {}).get("measured_rtt_s") or 0.0
        return analysis.queue_after_first_rtt(rec.dir / "queues.csv", port["intf"], rtt_s, max(fcts),
                                              port["rate_bps"], self.ctx.sc.queues.limit_bytes) or None


def _raise_plugin_failure(agent_dir) -> None:
    """Raise RunError when an agent in ``agent_dir`` recorded that its rate-controller plug-in
    raised (:func:`.summary.plugin_failures`); else nothing."""
    failed = roce_summary.plugin_failures(agent_dir)
    if failed:
        more = f" (and {len(failed) - 1} more agent(s))" if len(failed) > 1 else ""
        raise RunError(failed[0] + more)
