"""ECN marking at the switch ports (a scenario's ``ecn`` section, per round): the marker chosen
for this machine (kernel RED or the BPF marker), every port's profile planned once from the
parsed :class:`common.ecn.EcnProfile` objects, changed between rounds, the marker's counters
read around each round; ``ecn_counters.csv`` and the ``ecn`` section of each round."""
from __future__ import annotations

from common.ecn import describe, profile_spec
from experiments.context import RoundRecord
from experiments.features.base import Feature
from experiments.features.ecn.plan import check_red_weights, choose_marker, ecn_plan
from experiments.features.ecn.summary import add_ecn, counter_deltas


class Ecn(Feature):
    """ECN marking: the marker chosen and the first round's profiles applied when the fabric
    starts, each later round's profiles sent to the controller before its traffic."""
    name = "ecn"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.marker = "none"
        self.plan_ecn = None
        self.labels = []
        self._before = {}

    def plan(self, queues_per_port: int) -> int:
        """Choose the marker (BPF in front of per-priority queues), check RED's weights, plan the ports."""
        ctx = self.ctx
        needed = any(p.kind != "off" for pr in ctx.profiles for p in pr.values())
        self.marker, why = choose_marker(ctx.sc, ctx.env, needed, priority_queues=queues_per_port > 1)
        if self.marker == "red":
            check_red_weights(ctx.sc, ctx.rounds)
        if self.marker != "none":
            self.plan_ecn = ecn_plan(ctx.sc, ctx.fabric_map, self.marker, ctx.profiles[0],
                                     ctx.env["shaper"]["slack_s"])
        self.labels = [sorted({describe(p) for p in pr.values()}) for pr in ctx.profiles]
        ctx.env["ecn"] = {"marker": self.marker, "mechanism": why,
                          "rounds": [{"name": r.name, "profiles": lab} for r, lab in zip(ctx.rounds, self.labels)]}
        return 0

    def restore(self) -> None:
        """The marker the run chose (environment.json's ``ecn.marker``)."""
        self.marker = (self.ctx.env.get("ecn") or {}).get("marker", "none")

    def headline(self) -> str | None:
        """``ECN marker=<none|red|bpf>``."""
        return f"ECN marker={self.marker}"

    def fabric_args(self) -> dict:
        """``ecn_plan`` for the controller (None: no round marks)."""
        return {"ecn_plan": self.plan_ecn}

    def after_fabric(self, lf) -> None:
        """Record what the controller applied."""
        self.ctx.env["ecn"]["controller"] = lf.ecn_record

    def describe_round(self, rnd: RoundRecord) -> str | None:
        """The round's profiles, e.g. ``step K=20 pkt; off``."""
        return "; ".join(self.labels[rnd.index])

    def round_options(self, rnd: RoundRecord) -> dict:
        """Receivers count CE marks when some port marks (``count_ecn``)."""
        return {"count_ecn": self.marker != "none"}

    def port_intent(self, rnd: RoundRecord) -> dict | None:
        """Kernel RED in the FIFO's place on each port that marks this round; the BPF marker's
        clsact hook on every switch port."""
        if self.marker == "red":
            return {intf: {"red": p} for intf, p in self.ctx.profiles[rnd.index].items() if p.kind != "off"}
        if self.marker == "bpf":
            return {intf: {"clsact": True} for intf in self.plan_ecn.ports}
        return None

    def before_round(self, lf, rnd: RoundRecord) -> dict:
        """Send a later round's profiles to the controller; read the marker's counters."""
        if rnd.index > 0 and self.plan_ecn is not None:
            lf.ecn_request({intf: profile_spec(p) for intf, p in self.ctx.profiles[rnd.index].items()})
        self._before = lf.ecn_counters()
        return {"round": {"profiles": self.labels[rnd.index]}}

    def after_round(self, lf, rnd: RoundRecord) -> dict:
        """The marker's per-port counters over the round."""
        return {"counters": counter_deltas(self._before, lf.ecn_counters())}

    def summarize(self, rnd: RoundRecord, summary: dict) -> None:
        """The ``ecn`` section and ecn_counters.csv (:func:`.summary.add_ecn`) of a round with flow rows."""
        if rnd.rows is None:
            return
        add_ecn(rnd.dir, summary, self.ctx.env, self.ctx.profiles[rnd.index],
                rnd.features[self.name]["counters"], rnd.rows, self.marker)
