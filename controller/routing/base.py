"""What a routing strategy is (pure): one class per strategy, registered by name
(:mod:`controller.routing.registry`); an instance is that strategy on one fabric map.

A strategy says, from the fabric map alone:

- :attr:`RoutingStrategy.routes`: the next hops toward every destination host, per switch
  (``{switch: {host_ip: [port, ...]}}``): its minimal routes;
- :meth:`RoutingStrategy.switch_flows`: every flow entry of one switch (``controller.flowtables``
  entries, whatever tables, matches and actions it needs): the os-ken app installs them as they
  are and names no strategy;
- :meth:`RoutingStrategy.link_fractions` and :meth:`RoutingStrategy.sampled_path`: where a
  flow's bytes go, as the fluid models read it (the ideal spread over every path the strategy
  may give the flow, and one path as a per-flow hash would pick it), so that the models predict
  its loads without knowing its name.

The base class is per-destination shortest-path routing over every equal-cost next hop, hashed
per flow (ECMP, :mod:`controller.routing.ecmp`); a strategy overrides what it does differently.
"""
from __future__ import annotations

from typing import ClassVar

from controller.routing.graph import hash_basis, port_peers, shortest_next_hops, spread, switch_graph, walk_one
from controller.flowtables import FlowEntry, switch_flows


class RoutingStrategy:
    """Base of every routing strategy (a registry entry): per-destination routing over all
    equal-cost next hops, flows hashed onto them by their 5-tuple.

    Class attributes a strategy sets:
        NAME: its ``routing.mode`` (the registry key; ``--routing`` of the controller).
        TITLE: one line for the docs and the schema.
        METHOD: how it spreads flows, recorded in every result's environment.json (``routing``).
        HASHED: True when a flow's path depends on a hash of its 5-tuple (then the analysis also
            reports the hashed model, :func:`experiments.fluid.hash_ecmp_aggregate`).

    Args:
        fabric_map: as :meth:`topologies.base.Fabric.to_map` writes it.

    Raises:
        ValueError: the strategy cannot route this fabric (:meth:`refuse` says why), or a host is
            unreachable from some switch.
    """

    NAME: ClassVar[str] = ""
    TITLE: ClassVar[str] = ""
    METHOD: ClassVar[dict] = {}
    HASHED: ClassVar[bool] = True

    @classmethod
    def refuse(cls, fabric_map: dict) -> str | None:
        """Why this strategy cannot route ``fabric_map`` (one line, for an error naming
        ``routing.mode``), or None when it can. The base routes any connected fabric."""
        return None

    def __init__(self, fabric_map: dict):
        why = self.refuse(fabric_map)
        if why:
            raise ValueError(f"routing mode {self.NAME}: {why}")
        self.fabric_map = fabric_map
        self.graph = switch_graph(fabric_map)
        self.peer = port_peers(fabric_map)
        self.hosts = {h["name"]: h for h in fabric_map["hosts"]}
        self.index = {s["name"]: i for i, s in enumerate(fabric_map["switches"])}
        self.limit = len(fabric_map["switches"]) + 1
        self.routes: dict[str, dict[str, list[int]]] = self.next_hops()

    def next_hops(self) -> dict[str, dict[str, list[int]]]:
        """``{switch: {host_ip: [port, ...]}}``: every equal-cost next hop (ports ascending)."""
        return shortest_next_hops(self.fabric_map, self.graph)

    def basis(self, switch: str) -> int:
        """The switch's 16-bit ECMP hash basis (:func:`controller.routing.graph.hash_basis` of its
        index in the map)."""
        return hash_basis(self.index[switch])

    def switch_flows(self, switch: str) -> list[FlowEntry]:
        """Every flow entry of ``switch`` in install order (:func:`controller.flowtables.switch_flows`:
        per destination, ECMP through table 1). KeyError for an unknown switch."""
        return switch_flows(self.routes[switch], self.basis(switch))

    def link_fractions(self, src: str, dst: str) -> dict[tuple[str, str], float]:
        """Fraction of one ``src`` -> ``dst`` flow (host names) on each directed link ``(from node,
        to node)`` when the flow is split ideally over every path the strategy may give it (split
        equally at each switch over its next hops: ideal ECMP).

        Raises:
            KeyError: unknown host. ValueError: the routes do not reach ``dst``.
        """
        s, d = self.hosts[src], self.hosts[dst]
        frac = {(src, s["switch"]): 1.0}
        spread(self.peer, {s["switch"]: 1.0}, lambda sw: self.routes[sw].get(d["ip"]), lambda n: n == dst, frac,
               self.limit)
        return frac

    def sampled_path(self, src: str, dst: str, rng) -> dict[tuple[str, str], float]:
        """One path of a ``src`` -> ``dst`` flow as a per-flow hash would pick it, every choice
        uniform from ``rng`` (a ``random.Random``): ``{(from node, to node): 1.0}``.

        Raises:
            KeyError: unknown host. ValueError: the routes do not reach ``dst``.
        """
        s, d = self.hosts[src], self.hosts[dst]
        out = {(src, s["switch"]): 1.0}
        walk_one(self.peer, s["switch"], lambda sw: self.routes[sw].get(d["ip"]), lambda n: n == dst, rng.choice,
                 out, self.limit)
        return out
