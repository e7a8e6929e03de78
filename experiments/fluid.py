"""The fluid model the topology comparison is measured against (pure).

Max-min fair rates (Bertsekas and Gallager, Data Networks, 2nd ed., section
6.5.2: progressive filling) of a set of long-lived flows on a fabric, each
flow split at every switch equally over its equal-cost next hops, i.e. ideal
ECMP: the best any per-flow hash can do. Hash collisions, TCP dynamics and
the emulator's CPU budget are what the measurement adds on top.
"""
from __future__ import annotations

import random
import statistics
from collections import defaultdict

from common.units import FRAME_BYTES
from controller.routing import compute_routes, port_peers
from traffic.flowsizes import TCP_PAYLOAD_BYTES


def link_fractions(fabric_map: dict, routes: dict, src: str, dst: str, peer: dict | None = None
                   ) -> dict[tuple[str, str], float]:
    """Fraction of one ``src`` -> ``dst`` flow on each directed link ``(from node, to node)`` under ideal ECMP.

    ``peer`` is :func:`controller.routing.port_peers` of the map (computed if not given).

    Raises:
        KeyError: unknown host name.
        ValueError: a route dead-ends (the routes do not reach ``dst``).
    """
    hosts = {h["name"]: h for h in fabric_map["hosts"]}
    peer = peer or port_peers(fabric_map)
    s, d = hosts[src], hosts[dst]
    frac: dict[tuple[str, str], float] = defaultdict(float)
    frac[(src, s["switch"])] = 1.0
    at = {s["switch"]: 1.0}
    for _ in range(len(fabric_map["switches"]) + 1):
        nxt: dict[str, float] = defaultdict(float)
        for sw, f in at.items():
            ports = routes[sw].get(d["ip"])
            if not ports:
                raise ValueError(f"no route at {sw} toward {dst}")
            for p in ports:
                node = peer[(sw, p)]
                frac[(sw, node)] += f / len(ports)
                if node != dst:
                    nxt[node] += f / len(ports)
        if not nxt:
            return dict(frac)
        at = nxt
    raise ValueError(f"routes from {src} to {dst} do not terminate")


def hashed_path(fabric_map: dict, routes: dict, src: str, dst: str, rng, peer: dict | None = None
                ) -> dict[tuple[str, str], float]:
    """One path for a ``src`` -> ``dst`` flow, each switch picking one of its equal-cost next hops
    uniformly at random (what a per-flow hash with a per-switch basis amounts to), as link fractions of 1.0.

    Raises:
        KeyError: unknown host. ValueError: the routes do not reach ``dst``.
    """
    hosts = {h["name"]: h for h in fabric_map["hosts"]}
    peer = peer or port_peers(fabric_map)
    s, d = hosts[src], hosts[dst]
    out = {(src, s["switch"]): 1.0}
    sw = s["switch"]
    for _ in range(len(fabric_map["switches"]) + 1):
        node = peer[(sw, rng.choice(routes[sw][d["ip"]]))]
        out[(sw, node)] = 1.0
        if node == dst:
            return out
        sw = node
    raise ValueError(f"routes from {src} to {dst} do not terminate")


def _hash_ecmp_trials(fabric_map: dict, pairs: list[tuple[str, str]], trials: int, seed: int, reduce) -> dict:
    """``reduce(max-min rates)`` of ``pairs`` with every flow on one random equal-cost path
    (:func:`hashed_path`), over ``trials`` placements: ``{"median", "p10", "p90", "trials"}``."""
    rng = random.Random(seed)
    routes = compute_routes(fabric_map, "ecmp")
    peer = port_peers(fabric_map)
    vals = sorted(reduce(_progressive_filling(fabric_map, [hashed_path(fabric_map, routes, s, d, rng, peer)
                                                           for s, d in pairs]))
                  for _ in range(trials))
    return {"median": statistics.median(vals), "p10": vals[int(0.1 * (len(vals) - 1))],
            "p90": vals[int(0.9 * (len(vals) - 1))], "trials": trials}


def hash_ecmp_aggregate(fabric_map: dict, pairs: list[tuple[str, str]], trials: int | None = None,
                        seed: int = 1) -> dict:
    """Aggregate max-min fair throughput (Mbit/s) when every flow is pinned to one random
    equal-cost path (hash ECMP), over ``trials`` random placements (default: 50, fewer
    for very many flows so that it stays within seconds: 100,000 / flows, at least 3).

    The gap to :func:`max_min_rates` (ideal splitting) is what hash collisions
    cost: the effect Hedera (Al-Fares et al., NSDI 2010) measured for one
    flow per host pair. Returns ``{"median", "p10", "p90", "trials"}`` of the aggregate.
    """
    if trials is None:
        trials = max(3, min(50, 100_000 // max(1, len(pairs))))
    return _hash_ecmp_trials(fabric_map, pairs, trials, seed, sum)


def hash_ecmp_min_rate(fabric_map: dict, pairs: list[tuple[str, str]], trials: int = 200, seed: int = 1) -> dict:
    """The slowest flow's max-min fair rate (Mbit/s) when every flow of ``pairs`` is pinned to one
    random equal-cost path (hash ECMP, :func:`hashed_path`), over ``trials`` random placements.

    What bounds a step of a ring collective over long-lived TCP connections: each connection keeps
    its hash (its path) for the whole run and the step ends with its slowest transfer. Returns
    ``{"median", "p10", "p90", "trials"}`` of that minimum.

    Raises:
        ValueError: ``pairs`` empty or ``trials`` < 1; KeyError/ValueError as :func:`hashed_path`.
    """
    if not pairs or trials < 1:
        raise ValueError(f"need at least one pair and one trial (pairs {len(pairs)}, trials {trials})")
    return _hash_ecmp_trials(fabric_map, pairs, trials, seed, min)


def max_min_rates(fabric_map: dict, pairs: list[tuple[str, str]], routing: str = "ecmp") -> list[float]:
    """Max-min fair rate (Mbit/s) of one long-lived flow per entry of ``pairs`` (repeat a pair for parallel flows),
    each flow split ideally over its equal-cost paths (``routing="ecmp"``), or on the one path
    ``routing="single"`` gives it.

    Every link direction has the link's ``rate_mbps`` of capacity. Returns the
    rates in the order of ``pairs``.

    Raises:
        KeyError, ValueError: as :func:`link_fractions`.
    """
    routes = compute_routes(fabric_map, routing)
    peer = port_peers(fabric_map)
    cache: dict[tuple[str, str], dict] = {}
    fracs = []
    for pair in pairs:
        if pair not in cache:
            cache[pair] = link_fractions(fabric_map, routes, *pair, peer=peer)
        fracs.append(cache[pair])
    return _progressive_filling(fabric_map, fracs)


def max_min_on_paths(fabric_map: dict, paths: list[dict]) -> list[float]:
    """Max-min fair rates (Mbit/s) of flows on given paths: ``paths[i]`` maps each directed link
    ``(from node, to node)`` to flow i's fraction on it (1.0 along a single path, as
    :func:`hashed_path` returns or a traced path). Raises KeyError for a link not in the map."""
    return _progressive_filling(fabric_map, paths)


def _progressive_filling(fabric_map: dict, fracs: list[dict]) -> list[float]:
    """Max-min fair rates of flows given each flow's fraction on every directed link. A map's
    ``capacity_mbps`` (``{"a>b": Mbit/s}``: a direction a fault slowed, controller.faults.capacity_overrides)
    replaces that direction's rate."""
    cap: dict[tuple[str, str], float] = {}
    for link in fabric_map["links"]:
        cap[(link["a"], link["b"])] = cap.get((link["a"], link["b"]), 0.0) + link["rate_mbps"]
        cap[(link["b"], link["a"])] = cap.get((link["b"], link["a"]), 0.0) + link["rate_mbps"]
    for key, mbps in (fabric_map.get("capacity_mbps") or {}).items():
        a, b = key.split(">")
        cap[(a, b)] = float(mbps)
    rate = [0.0] * len(fracs)
    active = set(range(len(fracs)))
    left = dict(cap)
    while active:
        load: dict[tuple[str, str], float] = defaultdict(float)
        for i in active:
            for e, f in fracs[i].items():
                load[e] += f
        step = min(left[e] / w for e, w in load.items() if w > 0)
        for i in active:
            rate[i] += step
        for e, w in load.items():
            left[e] -= step * w
        full = {e for e, w in load.items() if w > 0 and left[e] <= 1e-9 * cap[e]}
        active = {i for i in active if not full.intersection(fracs[i])}
    return rate


def switch_hop_forwarding_mbps(fabric_map: dict, pairs: list[tuple[str, str]], routing: str = "ecmp") -> float:
    """What the data plane must forward for ``pairs`` at their max-min fair rates, in Mbit/s of
    switch hops: each flow's rate times the switches it crosses (the links of its path minus one;
    split ECMP paths counted by their fractions). The userspace datapath's one forwarding thread
    spends its time per switch hop, so this is what to hold against its budget. 0.0 for no pairs.

    Raises:
        KeyError, ValueError: as :func:`link_fractions`.
    """
    if not pairs:
        return 0.0
    routes = compute_routes(fabric_map, routing)
    peer = port_peers(fabric_map)
    fracs = [link_fractions(fabric_map, routes, s, d, peer=peer) for s, d in pairs]
    rates = _progressive_filling(fabric_map, fracs)
    return sum(r * max(0.0, sum(f.values()) - 1.0) for r, f in zip(rates, fracs))


def offered_switch_hop_mbps(fabric_map: dict, plan: list[dict], routing: str = "ecmp") -> float:
    """What the data plane must forward for a plan whose flows arrive over time (``start_s``), in
    Mbit/s of switch hops: every flow's bytes as full frames on the wire (1514 bytes per 1448 of
    payload) times the switches it crosses (the links of its path minus one; split ECMP paths by
    their fractions), over the span of the arrivals (the last ``start_s``). The fluid model of
    :func:`switch_hop_forwarding_mbps` would run every flow at once; arrivals offer this instead.
    0.0 for an empty plan or one without arrival times.

    Raises:
        KeyError, ValueError: as :func:`link_fractions`.
    """
    span = max((f.get("start_s") or 0.0 for f in plan), default=0.0)
    if not span > 0:
        return 0.0
    routes = compute_routes(fabric_map, routing)
    peer = port_peers(fabric_map)
    switches: dict[tuple[str, str], float] = {}
    total = 0.0
    for f in plan:
        pair = (f["src"], f["dst"])
        if pair not in switches:
            switches[pair] = max(0.0, sum(link_fractions(fabric_map, routes, *pair, peer=peer).values()) - 1.0)
        total += (f["bytes"] or 0) * FRAME_BYTES / TCP_PAYLOAD_BYTES * 8 * switches[pair]
    return total / span / 1e6
