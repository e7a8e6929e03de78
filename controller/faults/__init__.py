"""Fault injectors (pure strategies) and their registry: a dirty fibre (``corrupt``), an optic
that trained down (``degrade``), a switch that loses frames (``drop``), a flapping link
(``flap``), a slow node (``slow_host``). Each turns a :class:`FaultSpec` into data-plane actions
that the controller's fault manager (controller.faultports) applies; the scenario's ``faults``
keys, the REST API and the troubleshooter read this registry, so a new injector is one module
plus one entry in :data:`FAULTS`.
"""
from __future__ import annotations

from common.errors import ScenarioError
from controller.faults.base import (Action, Direction, FaultSpec, FrameDrop, Injector, LinkFlap, RateLimit,
                                    host_record, link_directions, switch_ports)
from controller.faults.corrupt import Corrupt
from controller.faults.degrade import Degrade
from controller.faults.drop import Drop
from controller.faults.flap import Flap
from controller.faults.slow_host import SlowHost

#: kind -> injector class.
FAULTS: dict[str, type[Injector]] = {c.NAME: c for c in (Corrupt, Degrade, Drop, Flap, SlowHost)}

#: What every fault takes besides its place and its own keys.
COMMON_KEYS = ("kind", "start_s", "stop_s")


def parse_fault(fabric_map: dict, data: dict, key: str = "faults[0]") -> FaultSpec:
    """One fault as written (``{"kind": ..., "link"|"switch"|"host": ..., its keys, "start_s",
    "stop_s"[, "ports"]}``), checked against ``fabric_map``: a :class:`FaultSpec` whose actions
    resolve. The REST API parses with it; the scenario's typed model has checked the types already.

    Raises:
        ScenarioError: an unknown kind, a missing or unknown key, a value out of range, or a place
            not in the fabric, naming ``key`` and the key inside it.
    """
    if not isinstance(data, dict):
        raise ScenarioError(key, f"expected a mapping, got {type(data).__name__}")
    kind = data.get("kind")
    cls = FAULTS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ScenarioError(f"{key}.kind", f"must be one of {', '.join(FAULTS)}; got {kind!r}")
    known = set(COMMON_KEYS) | {cls.TARGET} | set(cls.PARAMS) | ({"ports"} if cls.TARGET == "switch" else set())
    unknown = sorted(set(data) - known)
    if unknown:
        raise ScenarioError(f"{key}.{unknown[0]}", f"unknown key for a {kind} fault (keys: {', '.join(sorted(known))})")
    if not isinstance(data.get(cls.TARGET), str):
        raise ScenarioError(f"{key}.{cls.TARGET}", f"a {kind} fault names its {cls.TARGET}")
    params = {k: spec.check(f"{key}.{k}", data.get(k, spec.default)) for k, spec in cls.PARAMS.items()}
    start, stop = data.get("start_s", 0.0), data.get("stop_s")
    for k, v in (("start_s", start), ("stop_s", stop)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 86400):
            raise ScenarioError(f"{key}.{k}", f"expected seconds between 0 and 86400, got {v!r}")
    if stop is not None and stop <= start:
        raise ScenarioError(f"{key}.stop_s", f"must be after start_s ({start}), got {stop}")
    ports = data.get("ports")
    if ports is not None:
        if (not isinstance(ports, list) or not ports
                or not all(type(p) is int and 0 < p < 65280 for p in ports)):
            raise ScenarioError(f"{key}.ports", f"expected a list of OpenFlow port numbers, got {ports!r}")
        ports = tuple(ports)
    spec = FaultSpec(kind=kind, target=cls.TARGET, place=data[cls.TARGET], params=params, start_s=float(start),
                     stop_s=None if stop is None else float(stop), ports=ports)
    check_place(fabric_map, spec, key)
    return spec


def check_place(fabric_map: dict, spec: FaultSpec, key: str = "faults[0]") -> tuple[Action, ...]:
    """The actions of ``spec`` on ``fabric_map``; ScenarioError naming ``<key>.<target>`` when
    its place is not in the fabric."""
    try:
        return FAULTS[spec.kind].actions(fabric_map, spec)
    except ScenarioError as e:
        raise ScenarioError(f"{key}.{'ports' if e.key == 'ports' else spec.target}", e.detail) from None


#: The mechanism each action occupies on its interface (two faults may not hold one at once).
MECHANISMS = {FrameDrop: "frame drop", RateLimit: "rate", LinkFlap: "link state"}


def slot(action: Action) -> tuple[str, str]:
    """What an action occupies: ``(interface, mechanism)``."""
    return action.intf, MECHANISMS[type(action)]


def check_clashes(fabric_map: dict, specs: list[FaultSpec] | tuple[FaultSpec, ...], key: str = "faults") -> None:
    """Refuse two faults of ``specs`` that hold one interface's mechanism (two frame drops, two rates,
    two link states) during overlapping times.

    Raises:
        ScenarioError: naming the second one (``<key>[i]``) and the interface.
    """
    held: list[tuple[tuple[str, str], float, float, int]] = []
    for i, spec in enumerate(specs):
        end = float("inf") if spec.stop_s is None else spec.stop_s
        mine = {slot(a) for a in FAULTS[spec.kind].actions(fabric_map, spec)}
        for s, start, stop, j in held:
            if s in mine and spec.start_s < stop and start < end:
                raise ScenarioError(f"{key}[{i}]", f"{key}[{j}] acts on {s[0]} ({s[1]}) at the same time: one such "
                                    "fault per interface at a time")
        held += [(s, spec.start_s, end, i) for s in mine]


def capacity_overrides(fabric_map: dict, specs) -> dict[str, float]:
    """``{"a>b": Mbit/s}``: the link directions ``specs`` slow for a whole round (a degraded link, a
    slow host's uplink; faults that start at 0 and never stop), for the fluid and alpha-beta models
    (experiments.fluid reads a map's ``capacity_mbps``). A fault with a schedule changes the rate
    mid-round and is left out."""
    ends = {}
    for l in fabric_map["links"]:
        ends[l["a_intf"]] = (l["a"], l["b"])
        ends[l["b_intf"]] = (l["b"], l["a"])
    out: dict[str, float] = {}
    for spec in specs:
        if spec.start_s > 0 or spec.stop_s is not None:
            continue
        for a in FAULTS[spec.kind].actions(fabric_map, spec):
            if isinstance(a, RateLimit) and a.intf in ends:
                key = ">".join(ends[a.intf])
                out[key] = min(out.get(key, a.rate_mbps), a.rate_mbps)
    return out


__all__ = ["FAULTS", "COMMON_KEYS", "Action", "Direction", "FaultSpec", "FrameDrop", "Injector", "LinkFlap",
           "RateLimit", "parse_fault", "check_place", "check_clashes", "capacity_overrides", "slot", "MECHANISMS", "host_record", "link_directions", "switch_ports"]
