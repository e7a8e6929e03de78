"""The fluid model the topology comparison is measured against (pure).

Max-min fair rates (Bertsekas and Gallager, Data Networks, 2nd ed., section
6.5.2: progressive filling) of a set of long-lived flows on a fabric, each
flow spread ideally over the paths its routing strategy may give it (under
``ecmp``, split at every switch equally over its equal-cost next hops, i.e.
ideal ECMP: the best any per-flow hash can do; under ``valiant``, also
equally over its intermediate groups). The routing strategy says where a
flow's bytes go (:meth:`controller.routing.RoutingStrategy.link_fractions`
and ``sampled_path``); this module names none. Hash collisions, TCP dynamics
and the emulator's CPU budget are what the measurement adds on top.
"""
from __future__ import annotations

import random
import statistics
from collections import defaultdict

from common.units import FRAME_BYTES
from controller.routing import port_peers, strategy_for
from controller.routing.graph import spread, walk_one
from traffic.flowsizes import TCP_PAYLOAD_BYTES


def link_fractions(fabric_map: dict, routes: dict, src: str, dst: str, peer: dict | None = None
                   ) -> dict[tuple[str, str], float]:
    """Fraction of one ``src`` -> ``dst`` flow on each directed link ``(from node, to node)`` under
    ideal ECMP over per-destination ``routes`` (``{switch: {host_ip: [port, ...]}}``, as
    :func:`controller.routing.compute_routes` gives them).

    ``peer`` is :func:`controller.routing.port_peers` of the map (computed if not given).

    Raises:
        KeyError: unknown host name.
        ValueError: a route dead-ends (the routes do not reach ``dst``).
    """
    hosts = {h["name"]: h for h in fabric_map["hosts"]}
    peer = peer or port_peers(fabric_map)
    s, d = hosts[src], hosts[dst]
    frac = {(src, s["switch"]): 1.0}
    spread(peer, {s["switch"]: 1.0}, lambda sw: routes[sw].get(d["ip"]), lambda n: n == dst, frac,
           len(fabric_map["switches"]) + 1)
    return frac


def hashed_path(fabric_map: dict, routes: dict, src: str, dst: str, rng, peer: dict | None = None
                ) -> dict[tuple[str, str], float]:
    """One path for a ``src`` -> ``dst`` flow over per-destination ``routes``, each switch picking
    one of its equal-cost next hops uniformly at random (what a per-flow hash with a per-switch
    basis amounts to), as link fractions of 1.0.

    Raises:
        KeyError: unknown host. ValueError: the routes do not reach ``dst``.
    """
    hosts = {h["name"]: h for h in fabric_map["hosts"]}
    peer = peer or port_peers(fabric_map)
    s, d = hosts[src], hosts[dst]
    out = {(src, s["switch"]): 1.0}
    walk_one(peer, s["switch"], lambda sw: routes[sw][d["ip"]], lambda n: n == dst, rng.choice, out,
             len(fabric_map["switches"]) + 1)
    return out


def _hash_ecmp_trials(fabric_map: dict, pairs: list[tuple[str, str]], trials: int, seed: int, reduce,
                      routing: str = "ecmp") -> dict:
    """``reduce(max-min rates)`` of ``pairs`` with every flow on one path as routing strategy
    ``routing`` hashes it (its ``sampled_path``; under ``ecmp`` one random equal-cost path, as
    :func:`hashed_path`), over ``trials`` placements: ``{"median", "p10", "p90", "trials"}``."""
    rng = random.Random(seed)
    strategy = strategy_for(fabric_map, routing)
    vals = sorted(reduce(_progressive_filling(fabric_map, [strategy.sampled_path(s, d, rng) for s, d in pairs]))
                  for _ in range(trials))
    return {"median": statistics.median(vals), "p10": vals[int(0.1 * (len(vals) - 1))],
            "p90": vals[int(0.9 * (len(vals) - 1))], "trials": trials}


def hash_ecmp_aggregate(fabric_map: dict, pairs: list[tuple[str, str]], trials: int | None = None,
                        seed: int = 1, routing: str = "ecmp") -> dict:
    """Aggregate max-min fair throughput (Mbit/s) when every flow is pinned to one path as a
    per-flow hash picks it under routing strategy ``routing`` (hash ECMP: one random equal-cost
    path; ``valiant``: a random intermediate group too), over ``trials`` random placements
    (default: 50, fewer for very many flows so that it stays within seconds: 100,000 / flows, at
    least 3).

    The gap to :func:`max_min_rates` (ideal splitting) is what hash collisions
    cost: the effect Hedera (Al-Fares et al., NSDI 2010) measured for one
    flow per host pair. Returns ``{"median", "p10", "p90", "trials"}`` of the aggregate.

    Raises:
        ValueError: an unknown routing mode, or one that cannot route this fabric.
    """
    if trials is None:
        trials = max(3, min(50, 100_000 // max(1, len(pairs))))
    return _hash_ecmp_trials(fabric_map, pairs, trials, seed, sum, routing)


def hash_ecmp_min_rate(fabric_map: dict, pairs: list[tuple[str, str]], trials: int = 200, seed: int = 1,
                       routing: str = "ecmp") -> dict:
    """The slowest flow's max-min fair rate (Mbit/s) when every flow of ``pairs`` is pinned to one
    path as routing strategy ``routing`` hashes it (hash ECMP: one random equal-cost path,
    :func:`hashed_path`), over ``trials`` random placements.

    What bounds a step of a ring collective over long-lived TCP connections: each connection keeps
    its hash (its path) for the whole run and the step ends with its slowest transfer. Returns
    ``{"median", "p10", "p90", "trials"}`` of that minimum.

    Raises:
        ValueError: ``pairs`` empty or ``trials`` < 1, or a routing mode that cannot route this
            fabric; KeyError/ValueError as :func:`hashed_path`.
    """
    if not pairs or trials < 1:
        raise ValueError(f"need at least one pair and one trial (pairs {len(pairs)}, trials {trials})")
    return _hash_ecmp_trials(fabric_map, pairs, trials, seed, min, routing)


def max_min_rates(fabric_map: dict, pairs: list[tuple[str, str]], routing: str = "ecmp") -> list[float]:
    """Max-min fair rate (Mbit/s) of one long-lived flow per entry of ``pairs`` (repeat a pair for parallel flows),
    each flow spread ideally over the paths routing strategy ``routing`` may give it (its
    ``link_fractions``: ``ecmp`` splits it over its equal-cost paths, ``single`` keeps it on the
    one path per destination, ``valiant`` spreads it over its intermediate groups too).

    Every link direction has the link's ``rate_mbps`` of capacity. Returns the
    rates in the order of ``pairs``.

    Raises:
        KeyError, ValueError: as :func:`link_fractions`; ValueError for a routing mode that cannot
            route this fabric.
    """
    return _progressive_filling(fabric_map, _fractions(fabric_map, pairs, routing))


def _fractions(fabric_map: dict, pairs: list[tuple[str, str]], routing: str) -> list[dict]:
    """Each pair's link fractions under routing strategy ``routing`` (one computation per distinct pair)."""
    strategy = strategy_for(fabric_map, routing)
    cache: dict[tuple[str, str], dict] = {}
    for pair in pairs:
        if pair not in cache:
            cache[pair] = strategy.link_fractions(*pair)
    return [cache[pair] for pair in pairs]


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
    fracs = _fractions(fabric_map, pairs, routing)
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
    strategy = strategy_for(fabric_map, routing)
    switches: dict[tuple[str, str], float] = {}
    total = 0.0
    for f in plan:
        pair = (f["src"], f["dst"])
        if pair not in switches:
            switches[pair] = max(0.0, sum(strategy.link_fractions(*pair).values()) - 1.0)
        total += (f["bytes"] or 0) * FRAME_BYTES / TCP_PAYLOAD_BYTES * 8 * switches[pair]
    return total / span / 1e6
