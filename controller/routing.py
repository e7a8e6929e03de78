"""Routing policy (pure): per-destination next hops computed from the fabric map.

L3-style forwarding per destination host: at each switch the next hops to
a host are all neighbours on a shortest path to the host's switch (shortest
by the sum of link costs, 1 per link unless the fabric map says otherwise;
computed with networkx on the switch graph). A Dragonfly gives its global
links cost 3, so that a path with one global link (at most local, global,
local: cost <= 5) always beats one with two (cost >= 6): minimal routing
(Kim et al., ISCA 2008). With several equal-cost
next hops the controller hashes each flow's 5-tuple onto one of them (ECMP;
see :func:`ecmp_tables` and :mod:`controller.app`).
No learning, no flooding: loops cannot form because every hop strictly
decreases the distance to the destination (every cost is positive).
"""
from __future__ import annotations

import networkx as nx

MODES = ("ecmp", "single")

#: How the controller spreads flows in ``ecmp`` mode (written into every result's
#: environment.json; the mechanism is explained in controller.app).
ECMP_METHOD = {"mechanism": "ovs_multipath", "fields": "symmetric_l3l4+udp (IP src/dst, protocol, TCP/UDP ports)",
               "algorithm": "hash_threshold (RFC 2992)", "hash_basis": "per switch (controller.routing.hash_basis)"}

#: Odd multiplier: ``(i * _BASIS_STRIDE) mod 2**16`` is a bijection, so the
#: first 65,535 switches all get different ECMP hash bases (case C5).
_BASIS_STRIDE = 40503


def hash_basis(switch_index: int) -> int:
    """16-bit ECMP hash basis of the switch at ``switch_index`` in the fabric map.

    Different on every switch of a fabric (up to 65,535 switches), so that two
    switches on one path do not make correlated choices: with one shared basis
    an aggregation switch re-picks the same bucket index its edge switch picked
    and half the core layer stays idle ("hash polarization"; case C5).

    Raises:
        ValueError: ``switch_index`` outside 0..65534.
    """
    if not 0 <= switch_index < 0xFFFF:
        raise ValueError(f"switch index {switch_index} outside 0..65534")
    return ((switch_index + 1) * _BASIS_STRIDE) & 0xFFFF


def switch_graph(fabric_map: dict) -> nx.MultiGraph:
    """Switch-only multigraph of the fabric map; edge attributes ``ports`` = {switch: port} and
    ``cost`` (the link's routing cost, 1 when the map gives none)."""
    g = nx.MultiGraph()
    names = {s["name"] for s in fabric_map["switches"]}
    g.add_nodes_from(names)
    for link in fabric_map["links"]:
        if link["a"] in names and link["b"] in names:
            g.add_edge(link["a"], link["b"], ports={link["a"]: link["a_port"], link["b"]: link["b_port"]},
                       cost=link.get("cost", 1))
    return g


def compute_routes(fabric_map: dict, mode: str = "ecmp") -> dict[str, dict[str, list[int]]]:
    """Next-hop ports for every (switch, destination host IP).

    Args:
        fabric_map: as produced by :meth:`topologies.spineleaf.Fabric.to_map`.
        mode: ``ecmp`` (all equal-cost ports) or ``single`` (one of them,
            chosen deterministically per destination).

    Returns:
        ``{switch_name: {host_ip: [port, ...]}}``, ports sorted ascending.

    Raises:
        ValueError: unknown mode, or a host unreachable from some switch.
    """
    if mode not in MODES:
        raise ValueError(f"routing mode must be one of {MODES}, got {mode!r}")
    g = switch_graph(fabric_map)
    routes: dict[str, dict[str, list[int]]] = {s: {} for s in g.nodes}
    dist_cache: dict[str, dict[str, int]] = {}
    for h_index, host in enumerate(fabric_map["hosts"]):
        edge = host["switch"]
        if edge not in dist_cache:
            dist_cache[edge] = nx.single_source_dijkstra_path_length(g, edge, weight="cost")
        dist = dist_cache[edge]
        for sw in g.nodes:
            if sw == edge:
                routes[sw][host["ip"]] = [host["switch_port"]]
                continue
            if sw not in dist:
                raise ValueError(f"host {host['name']} unreachable from switch {sw}")
            ports = sorted(data["ports"][sw] for _, nbr, data in g.edges(sw, data=True)
                           if dist.get(nbr, 1 << 30) + data["cost"] == dist[sw])
            if mode == "single":
                ports = [ports[h_index % len(ports)]]
            routes[sw][host["ip"]] = ports
    return routes


def port_peers(fabric_map: dict) -> dict[tuple[str, int], str]:
    """``{(node, port): node at the other end of that port's link}`` for every link end of a fabric map."""
    peer = {}
    for link in fabric_map["links"]:
        peer[(link["a"], link["a_port"])] = link["b"]
        peer[(link["b"], link["b_port"])] = link["a"]
    return peer


def follow(fabric_map: dict, routes: dict, src_switch: str, dst_ip: str, choose=min) -> list[str]:
    """Walk the routes from ``src_switch`` to ``dst_ip``, taking ``choose(ports)`` at each hop.

    Returns the switch names visited, ending at the destination's edge switch.
    Raises ValueError on a loop or a dead end (used by the loop-freedom tests).
    """
    peer = port_peers(fabric_map)
    host_names = {h["name"] for h in fabric_map["hosts"]}
    path = [src_switch]
    sw = src_switch
    for _ in range(len(fabric_map["switches"]) + 1):
        ports = routes[sw].get(dst_ip)
        if not ports:
            raise ValueError(f"dead end at {sw} for {dst_ip}")
        nxt = peer[(sw, choose(ports))]
        if nxt in host_names:
            return path
        if nxt in path:
            raise ValueError(f"loop {path + [nxt]} for {dst_ip}")
        path.append(nxt)
        sw = nxt
    raise ValueError(f"no termination from {src_switch} to {dst_ip}")


def ecmp_tables(switch_routes: dict[str, list[int]]) -> tuple[dict[str, int], dict[int, list[int]]]:
    """Group one switch's multi-port routes by their set of next-hop ports.

    Args:
        switch_routes: ``{host_ip: [port, ...]}`` of one switch (from :func:`compute_routes`).

    Returns:
        ``(set_of, port_sets)``: ``set_of`` maps every destination with two or
        more next hops to a port-set id (1, 2, ...); ``port_sets`` maps each id
        to its ascending port list. Destinations with one next hop are left out.
        Ids are assigned in order of first appearance over sorted destinations,
        so they are deterministic.
    """
    ids: dict[tuple[int, ...], int] = {}
    set_of: dict[str, int] = {}
    for ip in sorted(switch_routes):
        ports = tuple(switch_routes[ip])
        if len(ports) < 2:
            continue
        set_of[ip] = ids.setdefault(ports, len(ids) + 1)
    return set_of, {i: list(p) for p, i in ids.items()}
