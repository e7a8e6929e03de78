"""Pure traffic schedules (no sockets, no root)."""
from __future__ import annotations

import random


def incast_senders(hosts_by_leaf: dict[str, list[str]], receiver: str, count: int) -> list[str]:
    """Pick ``count`` senders for an N:1 incast toward ``receiver``.

    Senders come from leaves other than the receiver's, round-robin over
    those leaves (so the fan-in crosses the spine layer), then from the
    receiver's own leaf if the other leaves run out.

    Args:
        hosts_by_leaf: ``{leaf: [host, ...]}`` in position order.
        receiver: the receiving host.
        count: number of senders wanted (>= 1).

    Raises:
        ValueError: fewer than ``count`` other hosts exist, or ``receiver`` is unknown.
    """
    own = next((leaf for leaf, hs in hosts_by_leaf.items() if receiver in hs), None)
    if own is None:
        raise ValueError(f"receiver {receiver!r} is on no leaf")
    others = [list(hs) for leaf, hs in hosts_by_leaf.items() if leaf != own]
    order = []
    while any(others):
        for hs in others:
            if hs:
                order.append(hs.pop(0))
    order += [h for h in hosts_by_leaf[own] if h != receiver]
    if count > len(order):
        raise ValueError(f"{count} senders requested but only {len(order)} other hosts exist")
    return order[:count]


def permutation_pairs(groups: dict[str, list[str]], seed: int) -> list[tuple[str, str]]:
    """A random permutation in which every host sends to exactly one host of another group
    and every host receives from exactly one (the "random permutation" traffic of
    Al-Fares et al., SIGCOMM 2008, and Hedera, NSDI 2010, restricted to cross-group pairs).

    Args:
        groups: ``{group: [host, ...]}``: leaves of a Spine-Leaf or pods of a Fat-Tree
            (``Fabric.host_groups()``); every pair crosses the layer above them.
        seed: makes the permutation reproducible.

    Returns:
        ``[(src, dst), ...]`` in host order, one per host.

    Raises:
        ValueError: fewer than two groups, or one group holds more than half the hosts
            (then no such permutation exists).
    """
    hosts = [h for hs in groups.values() for h in hs]
    group_of = {h: g for g, hs in groups.items() for h in hs}
    biggest = max((len(hs) for hs in groups.values()), default=0)
    if len(groups) < 2 or 2 * biggest > len(hosts):
        raise ValueError(f"no cross-group permutation exists for group sizes {[len(v) for v in groups.values()]}")
    rng = random.Random(seed)
    for _ in range(20000):
        dsts = hosts[:]
        rng.shuffle(dsts)
        if all(group_of[s] != group_of[d] for s, d in zip(hosts, dsts)):
            return list(zip(hosts, dsts))
    # Rejection failed (very uneven groups): shift by the largest group size, which is cross-group
    # for any position order that keeps groups contiguous.
    return [(h, hosts[(i + biggest) % len(hosts)]) for i, h in enumerate(hosts)]


def all_to_all_pairs(hosts: list[str]) -> list[tuple[str, str]]:
    """Every ordered pair of distinct hosts (the all-to-all of MoE expert exchange), src-major order."""
    return [(s, d) for s in hosts for d in hosts if s != d]


def flow_plan(traffic: dict, fabric, seed: int) -> list[dict]:
    """Every flow a resolved scenario's ``traffic`` section asks for, on ``fabric``.

    Returns:
        ``[{"flow_id", "src", "dst", "src_ip", "dst_ip", "bytes", "duration_s"}, ...]``;
        ``flow_id`` counts from 0; ``bytes`` is None for time-limited flows.
        incast: one flow per sender (``response_bytes``); permutation and
        all-to-all: ``flows_per_pair`` flows per pair (``flow_bytes`` or ``duration_s``).

    Raises:
        ValueError: the pattern cannot be laid out on this fabric.
    """
    pattern = traffic["pattern"]
    if pattern == "incast":
        by_leaf: dict[str, list[str]] = {}
        for h in fabric.hosts:
            by_leaf.setdefault(h.leaf, []).append(h.name)
        senders = traffic["sender_hosts"] or incast_senders(by_leaf, traffic["receiver"], traffic["senders"])
        pairs, per_pair, size, duration = [(s, traffic["receiver"]) for s in senders], 1, traffic["response_bytes"], None
    else:
        if pattern == "permutation":
            pairs = permutation_pairs(fabric.host_groups(), seed)
        elif pattern == "all-to-all":
            pairs = all_to_all_pairs([h.name for h in fabric.hosts])
        else:
            raise ValueError(f"unknown traffic pattern {pattern!r}")
        per_pair, duration = traffic["flows_per_pair"], traffic["duration_s"]
        size = None if duration else traffic["flow_bytes"]
    ip = {h.name: h.ip for h in fabric.hosts}
    plan = []
    for src, dst in pairs:
        for _ in range(per_pair):
            plan.append({"flow_id": len(plan), "src": src, "dst": dst, "src_ip": ip[src], "dst_ip": ip[dst],
                         "bytes": size, "duration_s": duration})
    return plan


def message_schedule(senders: int, responses: int, size_bytes: int, arrival: str, load: float | None,
                     rate_bps: float, seed: int) -> list[list[float]]:
    """When each incast sender posts each of its ``responses`` messages (seconds after the start).

    ``synchronized``: every sender posts message k at the same time, all at 0 for one response;
    with several, one round of responses every time the receiver's link could carry a round at
    ``load`` (the partition-aggregate query rate), i.e. ``senders x size_bytes x 8 / (load x rate_bps)``
    seconds apart (back to back, ``load`` None = 1).
    ``poisson``: each sender's messages arrive as a Poisson process whose rates add up to ``load``
    of the receiver's link: mean gap ``senders x size_bytes x 8 / (load x rate_bps)`` per sender
    (case R4: short responses arriving at a load, not long flows).

    Returns one sorted list of times per sender. Raises ValueError on an unknown arrival, or a
    ``load`` outside (0, 1] where one is needed.
    """
    if arrival not in ("synchronized", "poisson"):
        raise ValueError(f"unknown arrival {arrival!r} (synchronized or poisson)")
    lo = 1.0 if load is None and arrival == "synchronized" else load
    if lo is None or not 0 < lo <= 1:
        raise ValueError(f"load must be in (0, 1] for {arrival} arrivals, not {load!r}")
    gap_s = senders * size_bytes * 8 / (lo * rate_bps)
    if arrival == "synchronized":
        return [[k * gap_s if responses > 1 else 0.0 for k in range(responses)] for _ in range(senders)]
    rng = random.Random(seed)
    out = []
    for _ in range(senders):
        t, times = 0.0, []
        for _ in range(responses):
            t += rng.expovariate(1 / gap_s)
            times.append(t)
        out.append(times)
    return out
