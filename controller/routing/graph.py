"""The fabric map as a routing graph (pure): switch graph, link ends, switch groups, shortest-path
next hops, the ECMP hash basis, and walks along next hops (every strategy routes with these).

Shortest paths are by the sum of link costs (1 per link unless the fabric map says otherwise;
networkx's Dijkstra on the switch graph). A Dragonfly gives its global links cost 3, so that a
path with one global link (at most local, global, local: cost <= 5) always beats one with two
(cost >= 6): minimal routing (Kim et al., ISCA 2008). Loops cannot form along next hops that
each strictly decrease the distance to the target (every cost is positive).
"""
from __future__ import annotations

from collections import defaultdict

import networkx as nx

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


def port_peers(fabric_map: dict) -> dict[tuple[str, int], str]:
    """``{(node, port): node at the other end of that port's link}`` for every link end of a fabric map."""
    peer = {}
    for link in fabric_map["links"]:
        peer[(link["a"], link["a_port"])] = link["b"]
        peer[(link["b"], link["b_port"])] = link["a"]
    return peer


def switch_groups(fabric_map: dict) -> dict[str, str | None]:
    """``{switch: its group or None}``: the groups a topology puts its switches in (a Dragonfly's
    routers: ``g1``, ``g2``, ...; the map's ``switches[].group``); None where the map gives none."""
    return {s["name"]: s.get("group") for s in fabric_map["switches"]}


def next_hop_ports(g: nx.MultiGraph, dist: dict[str, float], sw: str) -> list[int]:
    """The ports of ``sw`` on a shortest path toward the target of ``dist`` (the neighbours whose
    distance plus the link's cost is ``sw``'s own), ascending. ``dist`` from a Dijkstra toward the
    target (e.g. ``nx.single_source_dijkstra_path_length(g, target, weight="cost")``); [] where
    ``sw`` is not in it."""
    if sw not in dist:
        return []
    return sorted(data["ports"][sw] for _, nbr, data in g.edges(sw, data=True)
                  if dist.get(nbr, float("inf")) + data["cost"] == dist[sw])


def shortest_next_hops(fabric_map: dict, g: nx.MultiGraph | None = None) -> dict[str, dict[str, list[int]]]:
    """Every equal-cost next-hop port of every (switch, destination host IP): ``{switch: {host_ip:
    [port, ...]}}``, ports ascending; the host's own switch has the host's port.

    Raises:
        ValueError: a host unreachable from some switch.
    """
    g = g if g is not None else switch_graph(fabric_map)
    routes: dict[str, dict[str, list[int]]] = {s: {} for s in g.nodes}
    dist_cache: dict[str, dict[str, float]] = {}
    for host in fabric_map["hosts"]:
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
            routes[sw][host["ip"]] = next_hop_ports(g, dist, sw)
    return routes


def spread(peer: dict, at: dict[str, float], ports_of, arrived, frac: dict, limit: int) -> dict[str, float]:
    """Move flow fractions along next hops, split equally at every switch (ideal ECMP), until each
    reaches a node where ``arrived(node)`` holds. Adds each directed link's fraction to ``frac``
    (``{(from node, to node): fraction}``, changed in place).

    Args:
        peer: :func:`port_peers` of the map.
        at: ``{switch: fraction}`` where the fractions start.
        ports_of: ``ports_of(switch) -> [port, ...]``: the next hops there ([]: a dead end).
        arrived: ``arrived(node) -> bool``: the walk ends at this node.
        limit: most hops (the number of switches + 1 for a loop-free walk).

    Returns:
        ``{node: fraction}`` of the nodes arrived at.

    Raises:
        ValueError: a dead end, or no arrival within ``limit`` hops (a loop).
    """
    done: dict[str, float] = defaultdict(float)
    for _ in range(limit):
        nxt: dict[str, float] = defaultdict(float)
        for sw, f in at.items():
            ports = ports_of(sw)
            if not ports:
                raise ValueError(f"no route at {sw}")
            for p in ports:
                node = peer[(sw, p)]
                frac[(sw, node)] = frac.get((sw, node), 0.0) + f / len(ports)
                (done if arrived(node) else nxt)[node] += f / len(ports)
        if not nxt:
            return dict(done)
        at = nxt
    raise ValueError(f"the walk from {sorted(at)} does not terminate")


def walk_one(peer: dict, start: str, ports_of, arrived, choose, out: dict, limit: int) -> str:
    """One path along next hops from ``start``, taking ``choose(ports)`` at every switch, until a
    node where ``arrived(node)`` holds; each directed link is set to 1.0 in ``out`` (changed in
    place). Returns the node arrived at.

    Raises:
        ValueError: a dead end, or no arrival within ``limit`` hops (a loop).
    """
    sw = start
    for _ in range(limit):
        ports = ports_of(sw)
        if not ports:
            raise ValueError(f"no route at {sw}")
        node = peer[(sw, choose(ports))]
        out[(sw, node)] = 1.0
        if arrived(node):
            return node
        sw = node
    raise ValueError(f"the walk from {start} does not terminate")


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
