"""Collectives' plan, pure: where the ranks go, their schedules and connections, the RoCE
queue pairs, and the alpha-beta model's B (the bottleneck rate, from the fabric's routes or from
the paths the connections really took) and T (formulas and sources: :mod:`common.collectives`)."""
from __future__ import annotations


from common import collectives as C
from common import hierarchical as H
from common.roce import OVERHEAD_BYTES, SPORT_BASE
from experiments.paths import trace_each, traced_path
from controller.routing import STRATEGIES
from experiments.fluid import hash_ecmp_min_rate, max_min_on_paths, max_min_rates
from experiments.model import Collective
from traffic.collective import server_layout


#: Rank r listens on BASE_PORT + r.
BASE_PORT = 17000


PLACEMENTS = ("local", "spread")


def place_ranks(fabric, n: int, placement="local") -> list[str]:
    """Hosts of ranks 0..N-1 in ring order.

    ``local`` (rack-aware): the hosts in position order, so consecutive ranks share a leaf (an
    edge switch on a Fat-Tree) and the ring leaves a rack only between racks. ``spread``:
    round-robin over the groups (leaves; pods on a Fat-Tree), so every hop of the ring
    crosses to another group. A list names the hosts itself (several ranks may share a host).

    Raises:
        ValueError: N < 2, more ranks than hosts for ``local``/``spread``, an unknown placement
            or host (named).
    """
    if not isinstance(n, int) or n < 2:
        raise ValueError(f"collective.ranks must be an integer >= 2, not {n!r}")
    hosts = [h.name for h in fabric.hosts]
    if isinstance(placement, (list, tuple)):
        bad = [h for h in placement if h not in hosts]
        if bad or len(placement) != n:
            raise ValueError(f"collective.placement: {'unknown hosts ' + str(bad) if bad else f'{len(placement)} hosts for {n} ranks'}")
        return list(placement)
    if placement not in PLACEMENTS:
        raise ValueError(f"collective.placement must be local, spread or a list of hosts, not {placement!r}")
    if n > len(hosts):
        raise ValueError(f"collective.ranks: {n} ranks on {len(hosts)} hosts (placement {placement})")
    if placement == "local":
        return hosts[:n]
    groups = [list(g) for g in _racks(fabric).values()]
    out, i = [], 0
    while len(out) < n:
        g = groups[i % len(groups)]
        if g:
            out.append(g.pop(0))
        i += 1
    return out


def rank_hosts(fabric, coll: Collective) -> list[str]:
    """The host of every rank of ``coll`` (rank order): ``hosts`` as listed; with
    ``gpus_per_server`` G, the hosts of ranks/G servers (:func:`place_ranks`), each running G
    consecutive ranks; else one rank per host (:func:`place_ranks`).

    Raises:
        ValueError: as :func:`place_ranks`.
    """
    if coll.hosts:
        return list(coll.hosts)
    g = coll.gpus_per_server or 1
    return [h for h in place_ranks(fabric, coll.ranks // g, coll.placement) for _ in range(g)] if g > 1 \
        else place_ranks(fabric, coll.ranks, coll.placement)


def rank_servers(fabric, hosts: list[str]) -> list[str]:
    """The server of every rank on ``hosts``: the host's server on a fabric whose hosts are GPUs
    of servers (:attr:`topologies.base.Node.server`, a rail-optimised fabric), else the
    host itself (a server with one NIC and its ranks as GPUs)."""
    return [fabric.node(h).server or h for h in hosts]


def layout(hosts: list[str], servers: list[str] | None = None) -> list[list[int]]:
    """Ranks grouped by server (:func:`traffic.collective.server_layout`; ``servers`` None: by host)."""
    return server_layout([{"rank": r, "host": h, "server": (servers or hosts)[r]} for r, h in enumerate(hosts)])


def schedule(hosts: list[str], kind: str, elements: int, algorithm: str = "ring",
             servers: list[str] | None = None) -> list[list[H.Move]]:
    """The moves of ``kind`` by ``algorithm`` for ranks on ``hosts`` (:func:`common.hierarchical.moves`).
    Raises ValueError as that does."""
    return H.moves(algorithm, kind, layout(hosts, servers), elements)


def _racks(fabric) -> dict[str, list[str]]:
    """Hosts per rack (their leaf or edge switch), in position order."""
    out: dict[str, list[str]] = {}
    for h in fabric.hosts:
        out.setdefault(h.leaf or h.group, []).append(h.name)
    return out


#: RoCE queue pair numbers of the collective's pair i: sender SEND_QPN + i, receiver RECV_QPN + i;
#: UDP source port (RoCEv2's ECMP entropy) SPORT_BASE + i, as for RoCE flows (experiments.workloads.roce.jobs).
SEND_QPN, RECV_QPN = 0x1000, 0x8000


TRANSPORTS = ("tcp", "roce")


def roce_qps(n: int, kind: str, algorithm: str = "ring", servers: list[str] | None = None) -> list[dict]:
    """One RoCE queue pair per (source rank, destination rank) pair of ``kind``'s schedule on ``n``
    ranks whose ranks are on different servers (``servers``: each rank's; None: all different;
    ranks of one server use the NVLink channel), in sorted order:
    ``[{"id", "src_rank", "dst_rank", "send_qpn", "recv_qpn", "udp_sport"}]``.
    Raises ValueError for an unknown kind or more pairs than UDP source ports above 49152."""
    where = servers or list(range(n))
    steps = (C.ring_schedule(n, kind) if algorithm == "ring"
             else H.moves(algorithm, kind, layout(list(map(str, range(n))), list(map(str, where))), n))
    pairs = sorted({(t.src, t.dst) for step in steps for t in step if where[t.src] != where[t.dst]})
    if len(pairs) > 65536 - SPORT_BASE:
        raise ValueError(f"{len(pairs)} queue pairs: more than the {65536 - SPORT_BASE} UDP source ports")
    return [{"id": i, "src_rank": s, "dst_rank": d, "send_qpn": SEND_QPN + i, "recv_qpn": RECV_QPN + i,
             "udp_sport": SPORT_BASE + i} for i, (s, d) in enumerate(pairs)]


def payload_fraction(transport: str, mtu_bytes: int = 1024) -> float:
    """The share of a full frame's bytes on the wire that is payload: TCP 1448 of 1514 (timestamps
    on), RoCEv2 ``mtu_bytes`` of ``mtu_bytes`` + 58 (Ethernet, IP, UDP, BTH, ICRC)."""
    return TCP_PAYLOAD_FRACTION if transport == "tcp" else mtu_bytes / (mtu_bytes + OVERHEAD_BYTES)


def step_pairs(hosts: list[str], kind: str, algorithm: str = "ring",
               servers: list[str] | None = None) -> list[list[tuple[str, str]]]:
    """The (source host, destination host) transfers of each step of ``kind`` by ``algorithm``
    with ranks on ``hosts`` (transfers between ranks of one server, ``servers`` giving each
    rank's, by default its host, are left out: they go over NVLink, not the fabric)."""
    where = servers or hosts
    return [[(hosts[t.src], hosts[t.dst]) for t in step if where[t.src] != where[t.dst]]
            for step in schedule(hosts, kind, len(hosts), algorithm, servers)]


#: TCP payload per full-size frame on the wire: a 1448-byte segment (MSS 1460 less 12 bytes of
#: timestamp option) in a 1514-byte Ethernet frame. The model's B for kernel-TCP ranks is the
#: bottleneck link's rate times this (what a TCP flow can deliver to the application).
TCP_PAYLOAD_FRACTION = 1448 / 1514


def bottleneck_rate_bps(fabric_map: dict, hosts: list[str], kind: str, routing: str = "ecmp",
                        algorithm: str = "ring", servers: list[str] | None = None) -> float:
    """B of the alpha-beta model (bit/s): the slowest transfer's max-min fair rate in the step that
    gives the lowest, every transfer of a step running at once. ``routing``: a registered routing
    strategy spreads each transfer ideally over its paths (:func:`experiments.fluid.max_min_rates`:
    ``"ecmp"`` over its equal-cost paths, the best any hash can do; ``"single"``: one fixed path
    per destination; controller.routing.STRATEGIES); ``"hash"``: each
    transfer pinned to one random equal-cost path, the median over random placements
    (:func:`experiments.fluid.hash_ecmp_min_rate`), what long-lived TCP connections meet. A
    ring's steps all use the same host pairs, so its B is its ring's bottleneck; an all-to-all's
    steps differ. ``algorithm`` and ``servers`` as :func:`step_pairs` (a hierarchical
    AllReduce's B is its rails' slowest transfer, B_rail of common.hierarchical).

    Raises:
        ValueError: no transfer crosses the fabric (every rank on one server), or an unknown ``routing``.
    """
    if routing != "hash" and routing not in STRATEGIES:
        raise ValueError(f"routing must be one of {', '.join(STRATEGIES)} or hash, not {routing!r}")
    rates = []
    seen: dict[tuple, float] = {}
    for pairs in step_pairs(hosts, kind, algorithm, servers):
        if not pairs:
            continue
        key = tuple(sorted(pairs))
        if key not in seen:
            seen[key] = (hash_ecmp_min_rate(fabric_map, pairs)["median"] if routing == "hash"
                         else min(max_min_rates(fabric_map, pairs, routing)))
        rates.append(seen[key])
    if not rates:
        raise ValueError("no transfer crosses the fabric: every rank is on one server")
    return min(rates) * 1e6


def traced_rate_bps(fabric_map: dict, recs: list[dict], hosts: list[str], kind: str, *, trace,
                    algorithm: str = "ring", servers: list[str] | None = None) -> float | None:
    """B of the run that made ``recs``, from the paths its connections really took
    (:func:`traced_path` of each rank's ``connections``): the slowest transfer's max-min fair
    rate (bit/s, link rate) in the step that gives the lowest. What the hash-ECMP model
    (:func:`bottleneck_rate_bps` with ``"hash"``) predicts as a median over hash outcomes, for
    this run's one outcome. None when a record lacks its connections or no transfer crosses
    the fabric. ``algorithm`` and ``servers`` as :func:`step_pairs`.

    Raises:
        ValueError, SetupError: as :func:`traced_path`.
    """
    where = servers or hosts
    if any(not rec or rec.get("connections") is None for rec in recs):
        return None
    conns = [(r, c) for r, rec in enumerate(recs) for c in rec["connections"] if where[r] != where[c["dst_rank"]]]
    paths = dict(zip([(r, c["dst_rank"]) for r, c in conns], trace_each(
        lambda rc: traced_path(fabric_map, hosts[rc[0]], hosts[rc[1]["dst_rank"]], rc[1]["src_port"],
                               rc[1]["dst_port"], proto=rc[1].get("proto", "tcp"), trace=trace), conns)))
    rates = []
    for step in schedule(hosts, kind, len(hosts), algorithm, servers):
        fracs = [paths.get((t.src, t.dst)) for t in step if where[t.src] != where[t.dst]]
        if any(f is None for f in fracs):
            return None
        if fracs:
            rates.append(min(max_min_on_paths(fabric_map, fracs)))
    return min(rates) * 1e6 if rates else None


def alpha_from_run(time_s: float, kind: str, n: int, size_bytes: float, rate_bps: float) -> float:
    """alpha (s per step) from a measured time: (T - steps x size/(N B)) / steps, never below 0.
    Run it on a small message, where T is mostly alpha (common.collectives.model_time_s)."""
    return max(0.0, (time_s - C.model_time_s(kind, n, size_bytes, 0.0, rate_bps)) / C.step_count(kind, n))


def model_time_s(res: dict, size_bytes: float, alpha_s: float, rate_bps: float) -> float:
    """The model's T for one size of a run's result ``res`` (:func:`run_round`): the two-level model
    (common.hierarchical) for the hierarchical algorithm, else the flat alpha-beta model
    (common.collectives) with B = ``rate_bps`` (the network's, or the NVLink rate when every
    rank is on one server)."""
    if res.get("algorithm") == "hierarchical":
        return H.hierarchical_model_time_s(res["servers"], res["gpus_per_server"], size_bytes,
                                           res.get("alpha_nvlink_s") or 0.0, res["nvlink_rate_bps"], alpha_s, rate_bps)
    return C.model_time_s(res["kind"], res["ranks"], size_bytes, alpha_s, rate_bps)


#: Elements per rank of the small run that measures alpha (a few per chunk: T is mostly per-step cost).
ALPHA_PROBE_ELEMENTS_PER_RANK = 4
