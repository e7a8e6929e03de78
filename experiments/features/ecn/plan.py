"""ECN's plan, before anything starts: the marker this machine can run (kernel RED or the BPF
marker), the controller's plan of every port's profile, and the RED weights' check."""
from __future__ import annotations

from typing import TYPE_CHECKING

from common import redparams
from common.ecn import profile_spec
from common.errors import CapabilityError, ScenarioError
from common.lazy import lazy_module
from controller.messages import EcnPlan, EcnPort, Fifo
from experiments.model import Round, Scenario

if TYPE_CHECKING:
    from controller.ecn import marker as bpfmarker
else:    # the live half, loaded when a live hook first runs (common.lazy): analyze and plot run without it
    bpfmarker = lazy_module("controller.ecn.marker")


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
        if not bpfmarker.OBJECT.exists():
            raise CapabilityError(f"ecn.marker: bpf: {bpfmarker.OBJECT} is not built (run 'sudo make setup'; "
                                  "needs clang and libbpf-dev)")
        if not env["qdiscs"].get("clsact"):
            raise CapabilityError("ecn.marker: bpf: this kernel has no clsact qdisc")
        why = ("asked for" if asked == "bpf" else "per-priority queues (priorities/pfc)" if priority_queues
               else "this kernel has no sch_red")
        return "bpf", f"tc clsact egress BPF classifier with a virtual queue per port ({why})"
    return "red", ("kernel RED (ecn, nodrop) under each port's HTB shaper "
                   + ("(asked for)" if asked == "red" else "(this kernel has sch_red)"))


def ecn_plan(sc: Scenario, fabric_map: dict, marker: str, profiles: dict, slack_s: float) -> EcnPlan:
    """The plan the controller applies (controller.ecn.ports), as the message its start request
    takes: every switch port's rate, buffer, shaper burst (from ``slack_s``, the machine's shaper
    slack in seconds), FIFO and first-round profile (``profiles``: port -> EcnProfile)."""
    q = sc.queues
    fifo = Fifo(kind="bfifo", limit=q.buffer_bytes) if q.buffer_bytes is not None else \
        Fifo(kind="pfifo", limit=q.buffer_packets)
    ports = {}
    for sw in fabric_map["switches"]:
        for p in sw["ports"]:
            ports[p["intf"]] = EcnPort(rate_bps=p["rate_mbps"] * 1e6, buffer_bytes=q.limit_bytes,
                                       burst_bytes=q.burst_for(p["rate_mbps"], slack_s), fifo=fifo,
                                       profile=profile_spec(profiles[p["intf"]]))
    return EcnPlan(marker=marker, ports=ports)


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
                    redparams.red_wlog(prof.weight)
                except ValueError as e:
                    raise ScenarioError(f"{prefix}.{where}.red.weight", str(e)) from None
