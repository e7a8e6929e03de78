"""A resolved scenario laid out on its fabric, without root: the fabric built (pure), the
traffic plan, the rounds, every round's per-port ECN profiles. `python -m experiments check`
stops here; a run starts from here."""
from __future__ import annotations

from common.ecn import port_profiles
from common.errors import ScenarioError
from controller.routing import strategy_class
from experiments.model import Scenario
from experiments.scenario import all_controller_params, topology_of
from traffic.patterns import flow_plan


def build_fabric(sc: Scenario):
    """The pure fabric description for a resolved scenario (its registered topology, built)."""
    return topology_of(sc.topology).build()


def check_against_fabric(sc: Scenario):
    """The checks of a resolved scenario that need its fabric but no root: the routing strategy
    against the fabric, the traffic plan and every round's per-port ECN profiles. Returns
    ``(fabric, fabric_map, plan, rounds, profiles)``.

    Raises:
        ScenarioError: naming the key (``routing.mode``, ``traffic.pattern``, ``ecn.ports.<name>``,
            ``rounds[i].ecn.ports...``, ``roce.<mode>.<key>`` of any registered rate controller).
    """
    fabric = build_fabric(sc)
    fabric_map = fabric.to_map()
    why = strategy_class(sc.routing.mode).refuse(fabric_map)
    if why:
        raise ScenarioError("routing.mode", f"{sc.routing.mode} {why}")
    try:
        plan = flow_plan(sc.traffic, fabric, sc.seed)
    except ValueError as e:
        raise ScenarioError("traffic.pattern", str(e)) from None
    rounds = list(sc.rounds)
    port_profiles(sc.ecn, fabric_map, key="ecn")      # the scenario's own ports, named where written
    profiles = [port_profiles(r.ecn, fabric_map, key=f"rounds[{i}].ecn" if sc.multi_round else "ecn")
                for i, r in enumerate(rounds)]
    if sc.traffic.transport == "roce" or any(r.collective.transport == "roce" for r in rounds):
        all_controller_params(sc)   # overrides that contradict each other: named before anything starts
    return fabric, fabric_map, plan, rounds, profiles
