"""Pure traffic schedules (no sockets, no root) and the registry of traffic patterns."""
from __future__ import annotations

import random
from typing import Any

from common.params import F
from traffic.flowsizes import FLOW_SIZES, flow_size_cdf, poisson_arrivals


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


#: The source ports a flow plan draws from (below Linux's ephemeral range, 32768-60999, so a pinned
#: port never collides with a connection the kernel numbered itself).
SOURCE_PORTS = range(10000, 32768)


def source_ports(count: int, seed: int, avoid: tuple[int, ...] = ()) -> list[int]:
    """``count`` distinct source ports drawn from :data:`SOURCE_PORTS` by ``seed``.

    The ECMP hash of a flow is a function of its 5-tuple, so the source port fixes the flow's
    path: the same seed gives flow i the same port (and the same path) in every run and every
    variant of a study (common random numbers). Drawn one at a time, so the first n ports of a
    plan do not depend on how many flows follow (an N sweep keeps flow i's path).

    Raises:
        ValueError: more ports asked than the range holds (less ``avoid``).
    """
    free = len(SOURCE_PORTS) - sum(1 for a in set(avoid) if a in SOURCE_PORTS)
    if count > free:
        raise ValueError(f"{count} flows need more source ports than the {free} of {SOURCE_PORTS}")
    rng = random.Random(f"fabriclab-source-ports-{seed}")
    taken, out = set(avoid), []
    while len(out) < count:
        p = rng.randrange(SOURCE_PORTS.start, SOURCE_PORTS.stop)
        if p not in taken:
            taken.add(p)
            out.append(p)
    return out


def flow_plan(traffic: Any, fabric, seed: int) -> list[dict]:
    """Every flow a resolved scenario's ``traffic`` section asks for, on ``fabric``.

    Returns:
        ``[{"flow_id", "src", "dst", "src_ip", "dst_ip", "src_port", "bytes", "duration_s", "start_s"}, ...]``;
        ``flow_id`` counts from 0; ``bytes`` is None for time-limited flows; ``start_s`` is when
        the flow starts, in seconds after the common start (0 for every pattern but those that
        plan arrivals, e.g. poisson); ``src_port`` the port the flow's sender binds
        (:func:`source_ports` of ``seed``: the seed fixes every flow's ECMP path). incast: one flow
        per sender (``response_bytes``); the pair patterns: ``flows_per_pair`` flows per pair
        (``flow_bytes`` or ``duration_s``); poisson: ``flows`` arrivals (:class:`Poisson`).

    Raises:
        ValueError: the pattern is unknown or cannot be laid out on this fabric.
    """
    if traffic.pattern not in PATTERNS:
        raise ValueError(f"unknown traffic pattern {traffic.pattern!r}")
    ip = {h.name: h.ip for h in fabric.hosts}
    plan = [{"flow_id": i, "src": src, "dst": dst, "src_ip": ip[src], "dst_ip": ip[dst], "bytes": size,
             "duration_s": duration, "start_s": start_s}
            for i, (src, dst, size, duration, start_s) in enumerate(PATTERNS[traffic.pattern].flows(fabric, traffic,
                                                                                                      seed))]
    for f, port in zip(plan, source_ports(len(plan), seed, avoid=(getattr(traffic, "port", 0),))):
        f["src_port"] = port
    return plan


# -- the registry -----------------------------------------------------------------------------------
#
# A pattern is one class registered in PATTERNS by NAME: PARAMS (the traffic keys only it takes,
# checked by the scenario schema), COMMON_KEYS (keys of the shared traffic section it reads that
# are otherwise refused for its transport, e.g. load), REFUSED_KEYS ({shared key: why}: keys it
# refuses when they differ from their default), pairs(fabric, traffic, seed) -> [(src, dst)],
# sizes(traffic) -> (flows per pair, bytes or None, duration_s or None), flows(fabric, traffic,
# seed) -> [(src, dst, bytes, duration_s, start_s)] (by default every pair's flows_per_pair flows of
# sizes(), all at start_s 0; a pattern with its own sizes and arrival times overrides it),
# resolve(traffic) -> {key: value} (its keys' defaults, filled into the resolved scenario),
# pair_count(n_hosts) (the most pairs it can give: the schema's flow cap) and check(n_hosts,
# n_groups, traffic) -> None, or (the traffic key at fault, what is wrong).

class _Pattern:
    """Base of every registered pattern: no keys of its own, flows from :meth:`pairs` and
    :meth:`sizes`, all starting together."""

    PARAMS: dict = {}
    COMMON_KEYS: tuple[str, ...] = ()
    REFUSED_KEYS: dict[str, str] = {}

    @classmethod
    def flows(cls, fabric, traffic: Any, seed: int) -> list[tuple[str, str, int | None, float | None, float]]:
        """``[(src, dst, bytes or None, duration_s or None, start_s)]``: ``sizes()``'s flows per pair
        for every pair of ``pairs()``, in pair order, every one at ``start_s`` 0."""
        per_pair, size, duration = cls.sizes(traffic)
        return [(src, dst, size, duration, 0.0) for src, dst in cls.pairs(fabric, traffic, seed) for _ in range(per_pair)]

    @staticmethod
    def resolve(traffic: Any) -> dict:
        """No keys of its own to fill in."""
        return {}

    @staticmethod
    def receiver(traffic: Any) -> str | None:
        """The one host every flow of the pattern ends at (an incast's receiver: the results name
        its port the bottleneck's and show how ECMP split the traffic toward it), or None."""
        return None


class Incast(_Pattern):
    """``senders`` hosts -> ``receiver`` (or ``sender_hosts``), one ``response_bytes`` flow each:
    partition-aggregate (see :func:`incast_senders`)."""

    NAME = "incast"

    @staticmethod
    def receiver(traffic: Any) -> str | None:
        """``traffic.receiver``: every response ends there."""
        return traffic.receiver

    @staticmethod
    def pairs(fabric, traffic: Any, seed: int) -> list[tuple[str, str]]:
        """The senders (given or chosen across leaves) each paired with the receiver."""
        by_leaf: dict[str, list[str]] = {}
        for h in fabric.hosts:
            by_leaf.setdefault(h.leaf, []).append(h.name)
        senders = traffic.sender_hosts or incast_senders(by_leaf, traffic.receiver, traffic.senders)
        return [(s, traffic.receiver) for s in senders]

    @staticmethod
    def sizes(traffic: Any) -> tuple[int, int | None, float | None]:
        """One flow of ``response_bytes`` per sender."""
        return 1, traffic.response_bytes, None

    @staticmethod
    def pair_count(n_hosts: int) -> int:
        """At most every other host sends."""
        return n_hosts - 1

    @staticmethod
    def check(n_hosts: int, n_groups: int, traffic: Any) -> tuple[str, str] | None:
        """Nothing beyond the schema's own incast checks."""
        return None


class _PairPattern(_Pattern):
    """Base of the patterns that send ``flows_per_pair`` flows per (src, dst) pair."""

    @staticmethod
    def sizes(traffic: Any) -> tuple[int, int | None, float | None]:
        """``flows_per_pair`` flows of ``flow_bytes`` each, or time-limited to ``duration_s``."""
        duration = traffic.duration_s
        return traffic.flows_per_pair, None if duration else traffic.flow_bytes, duration

    @staticmethod
    def pair_count(n_hosts: int) -> int:
        """One pair per host."""
        return n_hosts

    @staticmethod
    def check(n_hosts: int, n_groups: int, traffic: Any) -> tuple[str, str] | None:
        """At least two hosts."""
        return None if n_hosts >= 2 else ("pattern", "needs at least 2 hosts")


class Permutation(_PairPattern):
    """Every host -> one host of another group (leaf, pod, Dragonfly group), every host receiving
    once (:func:`permutation_pairs`)."""

    NAME = "permutation"

    @staticmethod
    def pairs(fabric, traffic: Any, seed: int) -> list[tuple[str, str]]:
        """A seeded cross-group permutation."""
        return permutation_pairs(fabric.host_groups(), seed)

    @staticmethod
    def check(n_hosts: int, n_groups: int, traffic: Any) -> tuple[str, str] | None:
        """Needs two groups."""
        return None if n_groups >= 2 else ("pattern", "a permutation sends every host to another leaf: it needs "
                                                      "at least 2 leaves")


class AllToAll(_PairPattern):
    """Every ordered pair of distinct hosts (:func:`all_to_all_pairs`)."""

    NAME = "all-to-all"

    @staticmethod
    def pairs(fabric, traffic: Any, seed: int) -> list[tuple[str, str]]:
        """N(N-1) pairs, source-major."""
        return all_to_all_pairs([h.name for h in fabric.hosts])

    @staticmethod
    def pair_count(n_hosts: int) -> int:
        """N(N-1)."""
        return n_hosts * (n_hosts - 1)


class Stride(_PairPattern):
    """Hedera's stride(i) (Al-Fares et al., NSDI 2010, section 6.1): the host with index x sends
    to the host with index (x + i) mod N; ``stride`` is i (default 1)."""

    NAME = "stride"
    PARAMS = {"stride": F((int,), None, lo=1, hi=100000)}

    @staticmethod
    def offset(traffic: Any) -> int:
        """i of stride(i): ``traffic.stride``, 1 when not given."""
        return traffic.stride or 1

    @staticmethod
    def pairs(fabric, traffic: Any, seed: int) -> list[tuple[str, str]]:
        """One pair per host, in host order."""
        return stride_pairs([h.name for h in fabric.hosts], Stride.offset(traffic))

    @staticmethod
    def check(n_hosts: int, n_groups: int, traffic: Any) -> tuple[str, str] | None:
        """The stride must not map a host onto itself."""
        i = Stride.offset(traffic)
        return None if i % n_hosts else ("stride", f"{i} is a multiple of the {n_hosts} hosts: every host would "
                                                   "send to itself")


class Staggered(_PairPattern):
    """Hedera's staggered(EdgeP, PodP): each host sends to a host on its own edge switch with
    probability ``edge_p``, to one elsewhere in its pod with ``pod_p``, and to one outside its pod
    otherwise (:func:`staggered_pairs`; defaults 0.5 and 0.3)."""

    NAME = "staggered"
    PARAMS = {"edge_p": F((int, float), None, lo=0, hi=1), "pod_p": F((int, float), None, lo=0, hi=1)}

    @staticmethod
    def pairs(fabric, traffic: Any, seed: int) -> list[tuple[str, str]]:
        """One seeded draw per host."""
        edge_p, pod_p = Staggered.probabilities(traffic)
        return staggered_pairs([(h.name, h.leaf, h.group or h.leaf) for h in fabric.hosts], edge_p, pod_p, seed)

    @staticmethod
    def probabilities(traffic: Any) -> tuple[float, float]:
        """``(edge_p, pod_p)`` with the defaults filled in."""
        edge_p = 0.5 if traffic.edge_p is None else traffic.edge_p
        pod_p = 0.3 if traffic.pod_p is None else traffic.pod_p
        return edge_p, pod_p

    @staticmethod
    def check(n_hosts: int, n_groups: int, traffic: Any) -> tuple[str, str] | None:
        """The two probabilities leave a share (>= 0) for the rest of the fabric."""
        edge_p, pod_p = Staggered.probabilities(traffic)
        if edge_p + pod_p <= 1:
            return None
        given = "" if traffic.pod_p is not None else " (pod_p not given: its default 0.3)"
        return "pod_p" if traffic.pod_p is not None else "edge_p", (
            f"edge_p + pod_p is {edge_p + pod_p:g}{given}; at most 1")


class RandomPairs(_PairPattern):
    """Hedera's random: each host sends to a uniformly chosen other host (a host may receive from
    several, or from none) (:func:`random_pairs`)."""

    NAME = "random"

    @staticmethod
    def pairs(fabric, traffic: Any, seed: int) -> list[tuple[str, str]]:
        """One seeded draw per host."""
        return random_pairs([h.name for h in fabric.hosts], seed)


class RandomBijection(_PairPattern):
    """Hedera's random bijective: a uniformly random permutation with no host sending to itself,
    so every host sends once and receives once (:func:`random_bijection_pairs`)."""

    NAME = "random-bijection"

    @staticmethod
    def pairs(fabric, traffic: Any, seed: int) -> list[tuple[str, str]]:
        """A seeded derangement."""
        return random_bijection_pairs([h.name for h in fabric.hosts], seed)


class Hotspot(_PairPattern):
    """Random traffic with hotspots (Hedera's random patterns "where hotspots are present"):
    ``hotspots`` hosts are chosen at random and every host sends to one of them (a hotspot to
    another hotspot, or to any other host if it is the only one) (:func:`hotspot_pairs`; default 1)."""

    NAME = "hotspot"
    PARAMS = {"hotspots": F((int,), None, lo=1, hi=100000)}

    @staticmethod
    def count(traffic: Any) -> int:
        """``traffic.hotspots``, 1 when not given."""
        return traffic.hotspots or 1

    @staticmethod
    def pairs(fabric, traffic: Any, seed: int) -> list[tuple[str, str]]:
        """One seeded draw per host."""
        return hotspot_pairs([h.name for h in fabric.hosts], Hotspot.count(traffic), seed)

    @staticmethod
    def check(n_hosts: int, n_groups: int, traffic: Any) -> tuple[str, str] | None:
        """Fewer hotspots than hosts."""
        k = Hotspot.count(traffic)
        return None if k < n_hosts else ("hotspots", f"{k} in a fabric of {n_hosts} hosts: at most {n_hosts - 1}")


#: Most flows a poisson plan may hold (the source ports a plan draws from hold 22768).
MAX_POISSON_FLOWS = 20000


class Poisson(_Pattern):
    """Poisson flow arrivals at a given load between random host pairs, flow sizes drawn from an
    empirical distribution: the workload of data-center congestion-control evaluations (pFabric,
    pHost, HPCC, Homa).

    ``flows`` flows arrive as one Poisson process over the whole fabric (traffic.flowsizes.
    poisson_arrivals): each between a uniformly chosen source host and a uniformly chosen other
    host, of a size drawn from ``size_distribution`` (traffic.flowsizes.FLOW_SIZES: websearch,
    datamining, hadoop) divided by ``size_scale`` (default: the distribution's own, so the mean
    flow is a few hundred kB; at least one TCP segment). ``load`` is the load offered on the host
    links: the rate is ``lambda = load x n_hosts x host_rate_bps / (8 x mean_bytes)`` flows per
    second, so each host sends, and receives, ``load`` of its link's rate in flow bytes on
    average (as HPCC and Homa define load). The seed fixes every flow's arrival time, hosts and
    size, and the plan is prefix-stable: flow i is the same whatever ``flows`` is. Sized TCP flows
    only; no incast groups.
    """

    NAME = "poisson"
    PARAMS = {"size_distribution": F((str,), None, choices=tuple(FLOW_SIZES)),
              "size_scale": F((int, float), None, lo=0.01, hi=1e6),
              "flows": F((int,), None, lo=1, hi=MAX_POISSON_FLOWS)}
    COMMON_KEYS = ("load",)
    REFUSED_KEYS = {"duration_s": "poisson flows are sized (size_distribution); bound the plan with flows",
                    "flows_per_pair": "applies to the pair patterns; poisson draws a pair for every flow",
                    "flow_bytes": "applies to the pair patterns; poisson draws sizes from size_distribution"}
    #: ``size_distribution`` when the scenario does not give one.
    DEFAULT_DISTRIBUTION = "websearch"

    @staticmethod
    def resolve(traffic: Any) -> dict:
        """``size_distribution`` (default websearch) and ``size_scale`` (default the distribution's
        :attr:`traffic.flowsizes.FlowSizeCdf.default_scale`) filled in."""
        name = traffic.size_distribution or Poisson.DEFAULT_DISTRIBUTION
        scale = traffic.size_scale if traffic.size_scale is not None else FLOW_SIZES[name].default_scale
        return {"size_distribution": name, "size_scale": scale}

    @staticmethod
    def size_cdf(traffic: Any):
        """The scaled flow-size distribution of ``traffic`` (traffic.flowsizes.FlowSizeCdf, sizes in
        bytes), defaults filled in as :meth:`resolve` does."""
        r = Poisson.resolve(traffic)
        return flow_size_cdf(r["size_distribution"], r["size_scale"])

    @classmethod
    def flows(cls, fabric, traffic: Any, seed: int) -> list[tuple[str, str, int, None, float]]:
        """``flows`` seeded arrivals ``(src, dst, bytes, None, start_s)`` in arrival order, at
        ``load`` of the hosts' mean link rate (traffic.flowsizes.poisson_arrivals).

        Raises:
            ValueError: no ``load`` or ``flows``, or fewer than two hosts.
        """
        if traffic.load is None or traffic.flows is None:
            raise ValueError("the poisson pattern needs traffic.load and traffic.flows")
        hosts = [h.name for h in fabric.hosts]
        names = set(hosts)
        rates = [link.rate_mbps for link in fabric.links if link.b in names]
        rate_bps = sum(rates) / len(rates) * 1e6
        arrivals = poisson_arrivals(cls.size_cdf(traffic), hosts, traffic.load, rate_bps, traffic.flows, seed)
        return [(src, dst, size, None, start_s) for start_s, src, dst, size in arrivals]

    @staticmethod
    def sizes(traffic: Any) -> tuple[int, int | None, float | None]:
        """One flow per draw; sizes vary (:meth:`flows` draws them): ``(1, None, None)``."""
        return 1, None, None

    @staticmethod
    def pairs(fabric, traffic: Any, seed: int) -> list[tuple[str, str]]:
        """The planned flows' (src, dst), in arrival order."""
        return [(s, d) for s, d, *_ in Poisson.flows(fabric, traffic, seed)]

    @staticmethod
    def pair_count(n_hosts: int) -> int:
        """Its flows are counted by ``flows`` (at most :data:`MAX_POISSON_FLOWS`), not by pairs: 1."""
        return 1

    @staticmethod
    def check(n_hosts: int, n_groups: int, traffic: Any) -> tuple[str, str] | None:
        """Needs ``load`` and ``flows`` and two hosts; kernel TCP only."""
        if n_hosts < 2:
            return "pattern", "needs at least 2 hosts"
        if traffic.transport != "tcp":
            return "transport", (f"the poisson pattern runs kernel TCP flows (transport tcp), not "
                                 f"{traffic.transport}")
        if traffic.load is None:
            return "load", ("the poisson pattern needs a load: the fraction (0-1] of each host's link its "
                            "flows offer")
        if traffic.flows is None:
            return "flows", "the poisson pattern needs the number of flows to plan"
        return None


#: name -> pattern class.
PATTERNS = {cls.NAME: cls for cls in (Incast, Permutation, AllToAll, Stride, Staggered, RandomPairs,
                                      RandomBijection, Hotspot, Poisson)}


def stride_pairs(hosts: list[str], stride: int) -> list[tuple[str, str]]:
    """``[(hosts[x], hosts[(x + stride) % N])]`` for every x (Hedera's stride(i))."""
    n = len(hosts)
    return [(h, hosts[(x + stride) % n]) for x, h in enumerate(hosts)]


def staggered_pairs(hosts: list[tuple[str, str, str]], edge_p: float, pod_p: float,
                    seed: int) -> list[tuple[str, str]]:
    """Hedera's staggered(EdgeP, PodP) over ``[(host, edge switch, pod)]`` in host order.

    Each host draws u in [0, 1): u < edge_p picks a uniformly chosen other host on its edge switch,
    u < edge_p + pod_p one in its pod on another edge switch, else one outside its pod. Where the
    chosen set is empty (one host per edge switch; a pod that is one edge switch, as a Spine-Leaf's
    leaf) the next wider set is used: edge, pod, the rest, then any other host.
    """
    rng = random.Random(seed)
    out = []
    for name, edge, pod in hosts:
        same_edge = [h for h, e, _ in hosts if e == edge and h != name]
        same_pod = [h for h, e, p in hosts if p == pod and e != edge]
        rest = [h for h, _, p in hosts if p != pod]
        u = rng.random()
        tiers = [same_edge, same_pod, rest] if u < edge_p else [same_pod, rest] if u < edge_p + pod_p else [rest]
        tiers.append([h for h, _, _ in hosts if h != name])
        choice = next(t for t in tiers if t)
        out.append((name, rng.choice(choice)))
    return out


def random_pairs(hosts: list[str], seed: int) -> list[tuple[str, str]]:
    """Each host -> a uniformly chosen other host (seeded; receivers may repeat)."""
    rng = random.Random(seed)
    return [(h, rng.choice([d for d in hosts if d != h])) for h in hosts]


def random_bijection_pairs(hosts: list[str], seed: int) -> list[tuple[str, str]]:
    """A uniformly random derangement of ``hosts`` (seeded; rejection sampling, about e tries):
    every host sends to one other host and receives from exactly one."""
    if len(hosts) < 2:
        raise ValueError("a bijection without fixed points needs at least 2 hosts")
    rng = random.Random(seed)
    while True:
        dsts = hosts[:]
        rng.shuffle(dsts)
        if all(s != d for s, d in zip(hosts, dsts)):
            return list(zip(hosts, dsts))


def hotspot_pairs(hosts: list[str], hotspots: int, seed: int) -> list[tuple[str, str]]:
    """``hotspots`` hosts chosen at random (seeded); every host sends to a uniformly chosen one of
    them other than itself (a lone hotspot sends to a uniformly chosen other host).

    Raises:
        ValueError: not fewer hotspots than hosts.
    """
    if not 1 <= hotspots < len(hosts):
        raise ValueError(f"{hotspots} hotspots among {len(hosts)} hosts")
    rng = random.Random(seed)
    hot = sorted(rng.sample(hosts, hotspots), key=hosts.index)
    out = []
    for h in hosts:
        choice = [d for d in hot if d != h] or [d for d in hosts if d != h]
        out.append((h, rng.choice(choice)))
    return out


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
