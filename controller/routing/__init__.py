"""Routing (pure): the registered routing strategies and what they compute from the fabric map.

A strategy (:class:`controller.routing.base.RoutingStrategy`, one module each: ``ecmp``,
``single``, ``valiant``; registered in :mod:`controller.routing.registry`) gives per-switch next
hops toward every host, every switch's flow entries (:mod:`controller.flowtables` types, which the
os-ken app installs as they are), and where a flow's bytes go (for the fluid models). The graph
helpers every strategy shares are in :mod:`controller.routing.graph`.

Routing is L3-style per destination: no learning, no flooding; a strategy's next hops each
strictly decrease a distance (to the destination, or to an intermediate group), so loops cannot
form.
"""
from __future__ import annotations

from controller.routing.base import RoutingStrategy
from controller.routing.graph import follow, hash_basis, port_peers, switch_graph, switch_groups
from controller.routing.registry import STRATEGIES, names, register, strategy_class, strategy_for
from controller.flowtables import ecmp_tables

#: How the controller spreads flows in ``ecmp`` mode (the ``ecmp`` strategy's METHOD).
ECMP_METHOD = STRATEGIES["ecmp"].METHOD

__all__ = ["ECMP_METHOD", "STRATEGIES", "RoutingStrategy", "compute_routes", "ecmp_tables", "follow", "hash_basis",
           "names", "port_peers", "register", "strategy_class", "strategy_for", "switch_graph", "switch_groups"]


def compute_routes(fabric_map: dict, mode: str = "ecmp") -> dict[str, dict[str, list[int]]]:
    """Next-hop ports for every (switch, destination host IP) under routing ``mode``: the
    strategy's per-destination routes (``ecmp``: every equal-cost port; ``single``: one of them
    per destination; ``valiant``: its minimal routes, which its second phase and same-group
    traffic take; its first phase is in its flow tables).

    Args:
        fabric_map: as produced by :meth:`topologies.base.Fabric.to_map`.
        mode: a registered routing mode (:data:`STRATEGIES`).

    Returns:
        ``{switch_name: {host_ip: [port, ...]}}``, ports sorted ascending.

    Raises:
        ValueError: unknown mode, a mode that cannot route this fabric, or a host unreachable
            from some switch.
    """
    return strategy_for(fabric_map, mode).routes
