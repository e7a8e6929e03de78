"""ECN marking at the switch ports (a scenario's ``ecn`` section, per round): the marker chosen
for this machine (kernel RED or the BPF marker), every port's profile planned once from the
parsed :class:`common.ecn.EcnProfile` objects, changed between rounds, the marker's counters
read around each round; ``ecn_counters.csv`` and the ``ecn`` section of each round."""
from __future__ import annotations

from common.ecn import describe, profile_spec
from common.errors import CapabilityError, ScenarioError
from controller import dataplane
from controller.bpfmarker import OBJECT as ECN_BPF_OBJECT
from experiments import analysis
from experiments.context import RoundRecord
from experiments.features.base import Feature
from experiments.model import Round, Scenario


def choose_marker(sc: Scenario, env: dict, needed: bool, priority_queues: bool = False) -> tuple[str, str]:
    """The ECN marker for this run and why: ``none`` when no round marks, else ``red`` or ``bpf``.

    ``auto`` picks the kernel's RED where the kernel has sch_red and the ports have one FIFO
    each, else the BPF marker (``priority_queues``: the scenario has priorities/PFC, whose
    per-priority queues kernel RED would replace).

    Raises:
        CapabilityError: ``ecn.marker`` names a mechanism this machine lacks (never a silent fallback).
    """
    asked = sc.ecn.marker
    has_red = bool(env["qdiscs"].get("red"))
    if asked == "red" and not has_red:        # asked for by name: refused, even with nothing to mark
        raise CapabilityError("ecn.marker: red: this kernel has no sch_red (use bpf or auto)")
    if not needed:
        return "none", "no round asks for ECN marking"
    if asked == "bpf" or (asked == "auto" and (not has_red or priority_queues)):
        if not ECN_BPF_OBJECT.exists():
            raise CapabilityError(f"ecn.marker: bpf: {ECN_BPF_OBJECT} is not built (run 'sudo make setup'; "
                                  "needs clang and libbpf-dev)")
        if not env["qdiscs"].get("clsact"):
            raise CapabilityError("ecn.marker: bpf: this kernel has no clsact qdisc")
        why = ("asked for" if asked == "bpf" else "per-priority queues (priorities/pfc)" if priority_queues
               else "this kernel has no sch_red")
        return "bpf", f"tc clsact egress BPF classifier with a virtual queue per port ({why})"
    return "red", ("kernel RED (ecn, nodrop) under each port's HTB shaper "
                   + ("(asked for)" if asked == "red" else "(this kernel has sch_red)"))


def ecn_plan(sc: Scenario, fabric_map: dict, marker: str, profiles: dict, slack_s: float) -> dict:
    """The plan the controller applies (controller.ecnports): every switch port's rate, buffer,
    shaper burst (from ``slack_s``, the machine's shaper slack in seconds), FIFO and first-round
    profile (``profiles``: port -> EcnProfile)."""
    q = sc.queues
    fifo = {"kind": "bfifo", "limit": q.buffer_bytes} if q.buffer_bytes is not None else \
        {"kind": "pfifo", "limit": q.buffer_packets}
    ports = {}
    for sw in fabric_map["switches"]:
        for p in sw["ports"]:
            prof = profiles[p["intf"]]
            ports[p["intf"]] = {"rate_bps": p["rate_mbps"] * 1e6, "buffer_bytes": q.limit_bytes,
                                "burst_bytes": q.burst_for(p["rate_mbps"], slack_s), "fifo": fifo, "profile": profile_spec(prof)}
    return {"marker": marker, "ports": ports}


def check_red_weights(sc: Scenario, rounds: list[Round]) -> None:
    """Kernel RED keeps its EWMA weight as a shift: refuse a weight it cannot hold.

    Raises:
        ScenarioError: naming the profile's key, e.g. ``rounds[1].ecn.layers.leaf.red.weight``.
    """
    for i, r in enumerate(rounds):
        prefix = f"rounds[{i}].ecn" if sc.multi_round else "ecn"
        specs = [("profile", r.ecn.profile)] + [(f"layers.{k}", v) for k, v in r.ecn.layers.items()] \
            + [(f"ports.{k}", v) for k, v in r.ecn.ports.items()]
        for where, prof in specs:
            if prof.kind == "red" and prof.weight is not None:
                try:
                    dataplane.red_wlog(prof.weight)
                except ValueError as e:
                    raise ScenarioError(f"{prefix}.{where}.red.weight", str(e)) from None


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
            return {intf: {"clsact": True} for intf in self.plan_ecn["ports"]}
        return None

    def before_round(self, lf, rnd: RoundRecord) -> dict:
        """Send a later round's profiles to the controller; read the marker's counters."""
        if rnd.index > 0 and self.plan_ecn is not None:
            lf.ecn_request({intf: profile_spec(p) for intf, p in self.ctx.profiles[rnd.index].items()})
        self._before = lf.ecn_counters()
        return {"round": {"profiles": self.labels[rnd.index]}}

    def after_round(self, lf, rnd: RoundRecord) -> dict:
        """The marker's per-port counters over the round."""
        return {"counters": analysis.counter_deltas(self._before, lf.ecn_counters())}

    def summarize(self, rnd: RoundRecord, summary: dict) -> None:
        """The ``ecn`` section and ecn_counters.csv (experiments.analysis.add_ecn) of a round with flow rows."""
        if rnd.rows is None:
            return
        analysis.add_ecn(rnd.dir, summary, self.ctx.env, self.ctx.profiles[rnd.index],
                         rnd.features[self.name]["counters"], rnd.rows, self.marker)
