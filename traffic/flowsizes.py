"""Empirical flow-size distributions of data-center workloads, and sampling from them (pure: data
and arithmetic; no sockets, no files).

Data-center congestion-control evaluations (pFabric, pHost, HPCC, Homa and many others) draw
flow sizes from a few published measurements. Each is bundled here as a piecewise-linear
cumulative distribution function: a tuple of ``(bytes, cumulative probability)`` points, sampled
by inverting it with linear interpolation between neighbouring points (what the simulators that
distribute these tables do). Two points with the same size and rising probability are a point
mass (a step of the CDF); two points with the same probability and rising size leave the sizes
between them out.

Where the points come from (numbers, not code, from the tables those simulators ship; each
table is the one the cited evaluations used, itself read off the measurement paper's figure):

- ``websearch``: Alizadeh et al., "Data Center TCP (DCTCP)", SIGCOMM 2010: the sizes of the
  background flows of a production web-search cluster (the paper's flow-size distribution
  figure). pFabric (Alizadeh et al., SIGCOMM 2013) tabulated it in 1460-byte packets (6, 13, 19,
  33, 53, 133, 667, 1333, 3333, 6667 and 20000 packets at 0.15, 0.2, 0.3, 0.4, 0.53, 0.6, 0.7,
  0.8, 0.9, 0.97 and 1), as the pHost simulator (Gao et al., CoNEXT 2015) ships it; HPCC's
  traffic generator (Li et al., SIGCOMM 2019, ``WebSearch_distribution.txt``) gives the same
  points in round bytes (10 kB ... 30 MB) and starts the CDF at 0 bytes instead of a 15% step
  at 6 packets. This module uses the bytes form (HPCC's): 15% of flows below 10 kB, 60% below
  200 kB, 3% above 10 MB, mean 1.71 MB.
- ``datamining``: Greenberg et al., "VL2: A Scalable and Flexible Data Center Network", SIGCOMM
  2009: the flow sizes of a data-mining cluster (the paper's flow-size distribution figure).
  The form used by pFabric and pHost (``CDF_datamining``), in 1460-byte packets: half the flows
  are one packet (a point mass), 80% at most 7 packets, then a tail to 666667 packets (973 MB);
  converted here at 1460 bytes per packet. Mean 7.47 MB, almost all of it in the 5% of flows
  above 3 MB.
- ``hadoop``: Roy et al., "Inside the Social Network's (Datacenter) Network", SIGCOMM 2015: the
  flow sizes of Facebook's Hadoop cluster (the paper's flow-size figure), in the form HPCC's
  traffic generator ships (``FbHdp_distribution.txt``), in bytes: half the flows at most 700 B,
  90% at most 120 kB, the largest 10 MB. Mean 120 kB.

Scaling (:meth:`FlowSizeCdf.scaled`): the measured sizes come from 1-10 Gbit/s fabrics; on a
10 Mbit/s emulated fabric a 30 MB web-search flow takes 24 s alone. Dividing every size by
``scale`` (and raising any size below one full TCP segment, :data:`TCP_PAYLOAD_BYTES`, to one
segment) keeps the distribution's shape above one packet while fitting many flows into a run;
each distribution has a default scale (:attr:`FlowSizeCdf.default_scale`) that puts its mean
at a few hundred kB (see :data:`FLOW_SIZES`). The scale is recorded in the scaled CDF and, via
the scenario's ``traffic.size_scale``, in every results folder.
"""
from __future__ import annotations

import bisect
import random
from dataclasses import dataclass

#: TCP payload of one full-size frame (bytes): a 1448-byte segment (MSS 1460 less 12 bytes of
#: timestamp option) in a 1514-byte frame (common.units.FRAME_BYTES). The smallest scaled flow.
TCP_PAYLOAD_BYTES = 1448


@dataclass(frozen=True)
class FlowSizeCdf:
    """A flow-size distribution: a piecewise-linear CDF over bytes.

    Attributes:
        name: the registry name (``websearch``, ``datamining``, ``hadoop``).
        points: ``((bytes, cumulative probability), ...)``: sizes non-decreasing and >= 0,
            probabilities non-decreasing from 0 at the first point to 1 at the last.
        source: the measurement it comes from and the table its points are taken from.
        default_scale: what ``traffic.size_scale`` divides the sizes by when a scenario does not
            say (chosen so the mean flow is a few hundred kB on the 10 Mbit/s default fabric).
        scale: the divisor already applied to ``points`` (1 for the bundled tables).
        min_bytes: the smallest size :meth:`sample` returns (bytes; 1 unscaled, one TCP segment
            once scaled).

    Raises:
        ValueError: (at construction) fewer than two points, sizes or probabilities decreasing,
            a negative size, or probabilities not running from 0 to 1.
    """
    name: str
    points: tuple[tuple[float, float], ...]
    source: str = ""
    default_scale: float = 1.0
    scale: float = 1.0
    min_bytes: int = 1

    def __post_init__(self) -> None:
        pts = self.points
        if len(pts) < 2:
            raise ValueError(f"{self.name}: a CDF needs at least two points, got {len(pts)}")
        for (x0, p0), (x1, p1) in zip(pts, pts[1:]):
            if x1 < x0 or p1 < p0:
                raise ValueError(f"{self.name}: points must not decrease: ({x0}, {p0}) then ({x1}, {p1})")
        if pts[0][0] < 0:
            raise ValueError(f"{self.name}: negative size {pts[0][0]}")
        if pts[0][1] != 0 or pts[-1][1] != 1:
            raise ValueError(f"{self.name}: probabilities must run from 0 to 1, got {pts[0][1]} .. {pts[-1][1]}")
        if not self.scale > 0 or self.min_bytes < 1:
            raise ValueError(f"{self.name}: scale must be > 0 and min_bytes >= 1, got {self.scale}, {self.min_bytes}")

    @property
    def sizes(self) -> tuple[float, ...]:
        """The points' sizes in bytes."""
        return tuple(x for x, _ in self.points)

    @property
    def probabilities(self) -> tuple[float, ...]:
        """The points' cumulative probabilities."""
        return tuple(p for _, p in self.points)

    def quantile(self, u: float) -> float:
        """The inverse CDF at ``u`` in [0, 1] (bytes, not rounded): linear between the two points
        whose probabilities bracket ``u``; a point mass (equal sizes) returns its size.

        Raises:
            ValueError: ``u`` outside [0, 1].
        """
        if not 0.0 <= u <= 1.0:
            raise ValueError(f"u must be in [0, 1], got {u}")
        ps = self.probabilities
        i = bisect.bisect_left(ps, u)
        if i == 0:
            return float(self.points[0][0])
        (x0, p0), (x1, p1) = self.points[i - 1], self.points[i]
        if p1 == p0:
            return float(x1)
        return x0 + (u - p0) / (p1 - p0) * (x1 - x0)

    def cdf(self, x: float) -> float:
        """P(size <= ``x``) (``x`` in bytes): 0 below the first point, 1 from the last, linear in
        between; at a point mass, the probability after its step (right-continuous)."""
        xs = self.sizes
        if x < xs[0]:
            return 0.0
        if x >= xs[-1]:
            return 1.0
        i = bisect.bisect_right(xs, x)          # points[i - 1] <= x < points[i]
        (x0, p0), (x1, p1) = self.points[i - 1], self.points[i]
        return p0 + (x - x0) / (x1 - x0) * (p1 - p0)

    def sample(self, rng: random.Random) -> int:
        """One flow size in bytes: :meth:`quantile` of one ``rng.random()`` draw, rounded to whole
        bytes, at least :attr:`min_bytes`."""
        return max(self.min_bytes, int(round(self.quantile(rng.random()))))

    @property
    def mean_bytes(self) -> float:
        """The distribution's mean in bytes (exact for the piecewise-linear CDF: each segment
        holds its probability spread evenly between its two sizes)."""
        return sum((p1 - p0) * (x0 + x1) / 2 for (x0, p0), (x1, p1) in zip(self.points, self.points[1:]))

    def scaled(self, scale: float, min_bytes: int = TCP_PAYLOAD_BYTES) -> "FlowSizeCdf":
        """This distribution with every size divided by ``scale`` and sizes below ``min_bytes``
        raised to it (a point mass at ``min_bytes`` holding what fell below), recording the scale
        (times this one's). ``scale`` 1 still applies the floor.

        Raises:
            ValueError: ``scale`` not positive, or ``min_bytes`` < 1.
        """
        if not scale > 0 or min_bytes < 1:
            raise ValueError(f"scale must be > 0 and min_bytes >= 1, got {scale}, {min_bytes}")
        raw = tuple((x / scale, p) for x, p in self.points)
        if raw[0][0] >= min_bytes:
            out = raw
        else:                                   # what fell below the floor becomes a point mass on it
            below = FlowSizeCdf(self.name, raw).cdf(min_bytes)
            out = ((float(min_bytes), 0.0),) + (((float(min_bytes), below),) if below > 0 else ()) \
                + tuple((x, p) for x, p in raw if x > min_bytes)
        return FlowSizeCdf(self.name, out, self.source, self.default_scale, self.scale * scale, min_bytes)


#: Alizadeh et al., DCTCP, SIGCOMM 2010 (web search), in HPCC's bytes form (module docstring).
WEBSEARCH = FlowSizeCdf(
    "websearch",
    ((0, 0.0), (10_000, 0.15), (20_000, 0.2), (30_000, 0.3), (50_000, 0.4), (80_000, 0.53), (200_000, 0.6),
     (1_000_000, 0.7), (2_000_000, 0.8), (5_000_000, 0.9), (10_000_000, 0.97), (30_000_000, 1.0)),
    source="Alizadeh et al., Data Center TCP (DCTCP), SIGCOMM 2010: web-search background flows; points as "
           "tabulated by pFabric/pHost (1460-byte packets) and HPCC (bytes, used here)",
    default_scale=5.0)

#: 1460-byte packets per point of the pFabric/pHost tables.
PFABRIC_PACKET_BYTES = 1460

#: Greenberg et al., VL2, SIGCOMM 2009 (data mining), pFabric/pHost's packets at 1460 bytes each.
DATAMINING = FlowSizeCdf(
    "datamining",
    tuple((n * PFABRIC_PACKET_BYTES, p) for n, p in
          ((1, 0.0), (1, 0.5), (2, 0.6), (3, 0.7), (7, 0.8), (267, 0.9), (2107, 0.95), (66667, 0.99),
           (666667, 1.0))),
    source="Greenberg et al., VL2, SIGCOMM 2009: data-mining cluster flows; points as tabulated by "
           "pFabric/pHost in 1460-byte packets",
    default_scale=25.0)

#: Roy et al., Inside the Social Network's (Datacenter) Network, SIGCOMM 2015 (Hadoop), HPCC's form.
HADOOP = FlowSizeCdf(
    "hadoop",
    ((0, 0.0), (100, 0.01), (200, 0.02), (300, 0.05), (350, 0.15), (400, 0.2), (500, 0.3), (600, 0.4),
     (700, 0.5), (1_000, 0.6), (2_000, 0.67), (7_000, 0.7), (30_000, 0.72), (50_000, 0.82), (80_000, 0.87),
     (120_000, 0.9), (300_000, 0.95), (1_000_000, 0.975), (2_000_000, 0.99), (10_000_000, 1.0)),
    source="Roy et al., Inside the Social Network's (Datacenter) Network, SIGCOMM 2015: Facebook Hadoop "
           "cluster flows; points as tabulated by HPCC (bytes)",
    default_scale=1.0)

#: The bundled distributions by name (``traffic.size_distribution``). Default scales: websearch 5
#: (mean 1.71 MB -> 342 kB), datamining 25 (7.47 MB -> 300 kB; half its flows are one packet
#: anyway), hadoop 1 (its mean is already 120 kB, and most of its flows are under one packet).
FLOW_SIZES: dict[str, FlowSizeCdf] = {c.name: c for c in (WEBSEARCH, DATAMINING, HADOOP)}


def flow_size_cdf(name: str, scale: float | None = None) -> FlowSizeCdf:
    """The bundled distribution ``name`` divided by ``scale`` (None: its default scale), sizes at
    least one TCP segment (:data:`TCP_PAYLOAD_BYTES`).

    Raises:
        ValueError: unknown name (the message lists the known ones), or ``scale`` not positive.
    """
    if name not in FLOW_SIZES:
        raise ValueError(f"unknown flow-size distribution {name!r} (known: {', '.join(FLOW_SIZES)})")
    cdf = FLOW_SIZES[name]
    return cdf.scaled(cdf.default_scale if scale is None else scale)


def bytes_label(n: float) -> str:
    """A size for a bucket label, in decimal units without a space: ``10KB``, ``1MB``, ``500B``
    (kB = 1000 bytes, as flow-size tables count)."""
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= div:
            v = n / div
            return f"{v:g}{unit}" if v == int(v) else f"{v:.3g}{unit}"
    return f"{n:g}B"


#: Upper edges (bytes) of the flow-size buckets slowdown is reported by: decades from 10 kB.
SIZE_BUCKET_EDGES = (10_000, 100_000, 1_000_000, 10_000_000, 100_000_000)


def size_buckets(edges: tuple[int, ...] = SIZE_BUCKET_EDGES) -> list[tuple[str, int, int | None]]:
    """The fixed, log-spaced flow-size buckets: ``[(label, lo_bytes, hi_bytes), ...]``, ``lo``
    inclusive, ``hi`` exclusive (None: no upper edge), e.g. ``("<10KB", 0, 10000)``,
    ``("10KB-100KB", 10000, 100000)``, ..., ``(">=100MB", 100000000, None)``.

    Raises:
        ValueError: edges not strictly increasing or not positive.
    """
    if not edges or any(e <= 0 for e in edges) or any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"bucket edges must be positive and increasing, got {edges}")
    out = [(f"<{bytes_label(edges[0])}", 0, edges[0])]
    out += [(f"{bytes_label(a)}-{bytes_label(b)}", a, b) for a, b in zip(edges, edges[1:])]
    out.append((f">={bytes_label(edges[-1])}", edges[-1], None))
    return out


def poisson_arrivals(cdf: FlowSizeCdf, hosts: list[str], load: float, host_rate_bps: float, flows: int,
                     seed: int) -> list[tuple[float, str, str, int]]:
    """``flows`` flows arriving as one Poisson process over the whole fabric, each between a
    uniformly chosen source and a uniformly chosen other destination, its size drawn from ``cdf``.

    The load is offered on the host links: the process's rate is
    ``lambda = load x len(hosts) x host_rate_bps / (8 x cdf.mean_bytes)`` flows per second, so
    each host sends (and, by symmetry, receives) on average ``load`` of its link's rate in flow
    bytes (payload; frames on the wire are 1514/1448 of it). One process with uniform sources is
    the same as one Poisson process of rate lambda / n per host, merged.

    Every flow draws, in order, its gap (exponential, mean 1 / lambda), its source, its destination
    and its size from one generator seeded by ``seed``: flow i is the same whatever ``flows`` is
    (prefix-stable), so a longer plan only adds flows at its end.

    Returns:
        ``[(start_s, src, dst, bytes), ...]`` in arrival order, ``start_s`` in seconds from the
        common start (the first flow arrives after one gap, not at 0).

    Raises:
        ValueError: fewer than two hosts, ``load`` outside (0, 1], a rate or ``flows`` not positive.
    """
    if len(hosts) < 2:
        raise ValueError(f"random pairs need at least 2 hosts, got {len(hosts)}")
    if not 0 < load <= 1:
        raise ValueError(f"load must be in (0, 1], got {load}")
    if not host_rate_bps > 0 or flows < 1:
        raise ValueError(f"host_rate_bps and flows must be positive, got {host_rate_bps}, {flows}")
    lam = load * len(hosts) * host_rate_bps / (8 * cdf.mean_bytes)
    rng = random.Random(f"fabriclab-poisson-{seed}")
    n = len(hosts)
    t, out = 0.0, []
    for _ in range(flows):
        t += rng.expovariate(lam)
        s = rng.randrange(n)
        d = rng.randrange(n - 1)
        d += d >= s
        out.append((t, hosts[s], hosts[d], cdf.sample(rng)))
    return out


def offered_load(flows: list[tuple[float, int]], n_hosts: int, host_rate_bps: float) -> float | None:
    """The load a list of arrivals offers on the host links: the flows' bytes x 8 over the span
    of their arrivals (the last ``start_s``) and the hosts' summed rate, ``sum(bytes) x 8 /
    (last start_s x n_hosts x host_rate_bps)``; the estimate of ``load`` :func:`poisson_arrivals`
    was asked for (its bias shrinks as 1/flows).

    Args:
        flows: ``[(start_s, bytes), ...]`` (seconds from the start, payload bytes).

    Returns:
        The fraction, or None for fewer than two flows or a zero span.
    """
    if len(flows) < 2:
        return None
    span = max(t for t, _ in flows)
    if not span > 0 or not n_hosts or not host_rate_bps > 0:
        return None
    return sum(b for _, b in flows) * 8 / (span * n_hosts * host_rate_bps)

