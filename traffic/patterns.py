"""Pure traffic schedules (no sockets, no root)."""
from __future__ import annotations


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
    import random
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
