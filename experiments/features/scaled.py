"""A scaled scenario (experiments.scaling) checked against this machine and read back in the real
fabric's units: before anything starts, the emulated fabric's switch-hop forwarding (the fluid
model of the run's flows) is held against the userspace datapath's budget, and a scenario that
would be forwarding-limited is refused naming ``scale.factor`` and the factor that would fit;
each round's summary gets ``real_units``: its headline figures converted back (times divided by
the factor, rates multiplied by it; packets and bytes are the same in both).
"""
from __future__ import annotations

from common.errors import ScenarioError
from experiments.context import RoundRecord
from experiments.features.base import Feature
from experiments.fluid import offered_switch_hop_mbps, switch_hop_forwarding_mbps

#: Switch-hop forwarding the userspace datapath's one thread sustains here, Mbit/s: measured at
#: 300-500 in all on this 2-core machine kind (88-100% of a core); the low end, so a scaled
#: scenario that passes is not forwarding-limited on a busy machine either.
USERSPACE_FORWARDING_MBPS = 300.0


def real_units(summary: dict, factor: float) -> dict:
    """Headline figures of a round's ``summary`` in the real fabric's units: the flows' ``fct_*_s``
    divided by ``factor``, the throughputs' ``*_mbps`` multiplied by it (those present; others
    omitted)."""
    out: dict = {"factor": factor}
    flows = summary.get("flows") or {}
    for k in ("fct_median_s", "fct_p99_s", "fct_max_s"):
        if isinstance(flows.get(k), (int, float)):
            out[k] = flows[k] / factor
    tp = summary.get("throughput") or {}
    for k in ("aggregate_mbps", "wire_aggregate_mbps", "model_aggregate_mbps"):
        if isinstance(tp.get(k), (int, float)):
            out[k] = tp[k] * factor
    return out


class ScaledFabric(Feature):
    """The scaling helper's checks and real-unit figures (a scenario without ``scale``: nothing)."""
    name = "scaled"

    def plan(self, queues_per_port: int) -> int:
        """Estimate the switch-hop forwarding; refuse a scaled scenario beyond the userspace budget."""
        sc, env = self.ctx.sc, self.ctx.env
        if sc.scale is None:
            return 0
        routing = sc.routing.mode
        if any((f.get("start_s") or 0.0) > 0 for f in self.ctx.plan):    # flows arriving over time
            need = offered_switch_hop_mbps(self.ctx.fabric_map, self.ctx.plan, routing)
            how = "the traffic plan's bytes as frames over its arrivals' span x switches on their paths"
        else:
            pairs = [(f["src"], f["dst"]) for f in self.ctx.plan]
            need = switch_hop_forwarding_mbps(self.ctx.fabric_map, pairs, routing)
            how = "max-min fair rates of the traffic plan's flows x switches on their paths"
        budget = USERSPACE_FORWARDING_MBPS if env.get("datapath") == "user" else None
        env["scaled"] = {"forwarding_estimate_mbps": need, "forwarding_budget_mbps": budget, "estimate": how}
        if budget is not None and need > budget:
            fit = sc.scale.factor * need / budget
            raise ScenarioError("scale.factor", f"{sc.scale.factor:g}: the emulated fabric needs about {need:.0f} "
                                                f"Mbit/s of switch-hop forwarding, beyond the userspace datapath's "
                                                f"{budget:.0f} here; a factor of at least {fit:.0f} fits")
        return 0

    def summarize(self, rnd: RoundRecord, summary: dict) -> None:
        """``real_units``: the round's FCTs and throughputs in the real fabric's units."""
        if self.ctx.sc.scale is not None:
            summary["real_units"] = real_units(summary, self.ctx.sc.scale.factor)
