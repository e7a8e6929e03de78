"""Collectives in a run (issue 8): rank placement, the agents' jobs, and the results: exactness
against numpy, transfer counts, per-step timings, algbw/busbw, the straggler balance and the
alpha-beta model (formulas and sources: :mod:`common.collectives`)."""
from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from common import collectives as C
from common import hierarchical as H
from common.errors import SetupError
from common.roce import OVERHEAD_BYTES, SPORT_BASE
from controller.dataplane import ovs_trace_output_port
from experiments import plot
from experiments.fluid import hash_ecmp_min_rate, max_min_on_paths, max_min_rates
from experiments.live import ROUND_STOP, Agents, start_sampler, stop_sampler
from experiments.model import Collective
from experiments.tables import write_csv
from traffic.collective import initial_array, server_layout

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
    of servers (:attr:`topologies.spineleaf.Node.server`, a rail-optimised fabric), else the
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


def host_jobs(lf, hosts: list[str], kind: str, elements: int, out: Path, deadline_unix_s: float,
              init: str = "seeded", seed: int = 0, repeat: int = 1, dscp: int = 0,
              stream: bool = False, transport: str = "tcp", roce: dict | None = None,
              algorithm: str = "ring", nvlink_ratio: float = 12.0) -> dict[str, dict]:
    """The ``collective`` job of every host that runs a rank (``hosts[r]`` runs rank r).
    ``stream``: the benchmark's baseline, the same bytes on the same connections without the
    ring's step dependency (traffic.collective.Rank._stream_iteration). ``transport`` ``roce``:
    RoCEv2 queue pairs (:func:`roce_qps`) with ``roce``'s settings (traffic.roce job fields:
    ``mode``, ``line_rate_mbps``, ``dcqcn``, ``dscp``, ``rto_s``, ...; each host's interface and
    addresses are added). ``algorithm``: ``ring`` or ``hierarchical`` (common.hierarchical).
    Ranks of one server (:func:`rank_servers`) exchange over the NVLink channel
    (traffic.nvlink, pipes in ``out``/nvlink) at ``nvlink_ratio`` x their NIC's rate.

    Raises:
        ValueError: an unknown kind or transport, roce without its settings, or fewer elements
            than ranks (a chunk would be empty).
    """
    n = len(hosts)
    servers = rank_servers(lf.fabric, hosts)
    schedule(hosts, kind, elements, algorithm, servers)      # raises for a bad kind, algorithm or size
    if transport not in TRANSPORTS:
        raise ValueError(f"collective transport must be one of {', '.join(TRANSPORTS)}, not {transport!r}")
    if transport == "roce" and not roce:
        raise ValueError("collective transport roce needs its roce settings")
    ranks = [{"rank": r, "host": h, "ip": lf.fabric.node(h).ip, "mac": lf.fabric.node(h).mac, "port": BASE_PORT + r,
              "server": servers[r]} for r, h in enumerate(hosts)]
    qps = roce_qps(n, kind, algorithm, servers) if transport == "roce" else None
    nic_mbps = min(lf.fabric.host_attachment(h).rate_mbps for h in hosts)
    jobs: dict[str, dict] = {}
    for r, h in enumerate(hosts):
        j = jobs.get(h)
        if j is None:
            j = jobs[h] = {"role": "collective", "kind": kind, "ranks": ranks, "local_ranks": [],
                           "elements": elements, "init": init, "seed": seed, "repeat": repeat, "dscp": dscp,
                           "out": str(Path(out) / f"{h}.collective.json"), "out_dir": str(out),
                           "deadline_unix_s": deadline_unix_s, "stream": stream, "transport": transport,
                           "algorithm": algorithm,
                           "nvlink": {"rate_bps": nvlink_ratio * nic_mbps * 1e6, "dir": str(Path(out) / "nvlink")}}
            if qps is not None:
                node = lf.fabric.node(h)
                j["qps"] = [c for c in qps if h in (hosts[c["src_rank"]], hosts[c["dst_rank"]])]   # its own
                j["roce"] = {**roce, "ifname": lf.fabric.host_attachment(h).b_intf, "mac": node.mac, "ip": node.ip,
                             "deadline_unix_s": deadline_unix_s}
        j["local_ranks"].append(r)
    return jobs


def start(lf, state, hosts: list[str], kind: str, elements: int, out: Path, deadline_unix_s: float,
          start_in_s: float = 1.0, **job_args):
    """Start one agent per host of ``hosts`` and release them together; returns the released
    ``experiments.live.Agents`` (``wait(deadline)``, then ``kill()``). SetupError when an agent
    is not ready."""
    Path(out).mkdir(parents=True, exist_ok=True)
    agents = Agents(lf, state)
    for h, j in host_jobs(lf, hosts, kind, elements, out, deadline_unix_s, **job_args).items():
        agents.start(h, "collective", j)
    agents.ready_then_release(start_in_s)
    return agents


def run_jobs(lf, state, jobs: dict[str, dict], role: str, out: Path, deadline_unix_s: float) -> dict:
    """Start one ``role`` agent per host of ``jobs`` (``{host: job}``), release them together, wait
    for them until ``deadline_unix_s`` + 5 s (:func:`wait_done`), then remove the NVLink pipes
    under ``out``; returns the agents' exit codes. SetupError when an agent is not ready."""
    agents = Agents(lf, state)
    for h, j in jobs.items():
        agents.start(h, role, j)
    agents.ready_then_release(1.0)
    try:
        return wait_done(agents, deadline_unix_s + 5)
    finally:         # the pipes of ranks that did not end cleanly
        shutil.rmtree(Path(out) / "nvlink", ignore_errors=True)


def load_records(out: Path, hosts: list[str], role: str = "collective") -> list[dict | None]:
    """Each rank's record (rank order) from the agents' result files (``<host>.<role>.json``);
    None for a missing one."""
    recs: dict[int, dict] = {}
    for h in dict.fromkeys(hosts):
        p = Path(out) / f"{h}.{role}.json"
        if p.exists():
            res = json.loads(p.read_text())
            for r in res.get("ranks", []):
                recs[r["rank"]] = {**r, "host": h, "agent_error": res.get("error")}
    return [recs.get(r) for r in range(len(hosts))]


def transport_totals(out: Path, hosts: list[str]) -> dict | None:
    """The RoCE transport's figures over every agent of a run (traffic.collective.RoceLinks.close):
    packets sent, retransmitted, NAKs, timeouts, CNPs received, duplicates dropped, and the
    agents' errors and DCQCN/pacing warnings; None for a TCP run (or when no agent left a record)."""
    tot = {"packets_sent": 0, "retransmitted_packets": 0, "naks": 0, "timeouts": 0, "cnps_received": 0,
           "duplicates_dropped": 0, "errors": [], "warnings": []}
    seen = False
    for h in dict.fromkeys(hosts):
        p = Path(out) / f"{h}.collective.json"
        t = json.loads(p.read_text()).get("roce") if p.exists() else None
        if not t:
            continue
        seen = True
        if t.get("error"):
            tot["errors"].append(f"{h}: {t['error']}")
        for x in t["senders"]:
            for k in ("packets_sent", "retransmitted_packets", "naks", "timeouts", "cnps_received"):
                tot[k] += x.get(k) or 0
            tot["warnings"] += [x[w] for w in ("pacing_warning", "feedback_warning") if x.get(w)]
        tot["duplicates_dropped"] += sum(x.get("duplicates") or 0 for x in t["receivers"])
    return tot if seen else None


def drop_arrays(recs: list[dict | None]) -> None:
    """Delete the ranks' final arrays (``rank<r>.npy``) once they have been checked: the check and
    the arrays' sums stay in the results; the arrays themselves (D bytes per rank per size) would
    make a sweep's folder hundreds of MB."""
    for rec in recs:
        if rec and rec.get("array"):
            Path(rec["array"]).unlink(missing_ok=True)


def check_results(recs: list[dict | None], kind: str, elements: int, init: str = "seeded", seed: int = 0,
                  algorithm: str = "ring", hosts: list[str] | None = None, servers: list[str] | None = None) -> dict:
    """Compare every rank's final array with the reference (the schedule run on the same inputs
    by :func:`common.hierarchical.simulate_moves`; for AllReduce that is numpy's element-wise
    sum, exact for these integer-valued float32 inputs, whatever the algorithm). ``hosts`` and
    ``servers`` give the layout the hierarchical algorithm ran on. Returns ``{"exact": bool,
    "ranks_exact": [bool, ...], "transfers": chunk transfers received over the last iteration,
    "expected_transfers", "errors": [...]}``."""
    n = len(recs)
    inputs = [initial_array(r, elements, init, seed) for r in range(n)]
    want, count = H.simulate_moves(inputs, schedule(hosts or [str(r) for r in range(n)], kind, elements,
                                                    algorithm, servers))
    ok, transfers, errors = [], 0, []
    for r, rec in enumerate(recs):
        if rec is None or rec.get("error") or rec.get("array") is None:
            ok.append(False)
            why = "no record" if rec is None else (rec.get("error") or rec.get("agent_error") or "no array")
            errors.append(f"rank {r}: {why}")
            continue
        got = np.load(rec["array"])
        if kind == "reduce_scatter":
            b = C.chunk_bounds(elements, n)
            c = C.owned_chunk_after_reduce_scatter(r, n)
            ok.append(bool(np.array_equal(got[b[c]:b[c + 1]], want[r][b[c]:b[c + 1]])))
        else:
            ok.append(bool(np.array_equal(got, want[r])))
        transfers += rec["iterations"][-1]["received"] if rec["iterations"] else 0
    return {"exact": all(ok), "ranks_exact": ok, "transfers": transfers, "expected_transfers": count,
            "errors": errors}


#: The collectives whose every step sends rank r's chunk to rank r+1 (common.collectives.ring_schedule).
RING_KINDS = ("allreduce", "reduce_scatter", "all_gather")


def timings(recs: list[dict], kind: str, elements: int, algorithm: str = "ring") -> list[dict]:
    """Per iteration: total time T (first rank's begin -> last rank's end), algbw/busbw (bit/s),
    per-step balance (slowest rank's step time / fastest's) and the overall balance (slowest
    rank's time / fastest's), and which rank was slowest in each step (``slowest_rank_per_step``)
    and overall (``slowest_rank``); for a ring, which transfer r -> r+1 took longest in each step
    (``slowest_transfer_per_step``: r, from both ranks starting the step to r+1 holding the chunk).
    Raises ValueError when a rank has no timings."""
    n = len(recs)
    size = 4 * elements
    out = []
    for it in range(min(len(r["iterations"]) for r in recs)):
        its = [r["iterations"][it] for r in recs]
        begin = min(i["begin_unix_s"] for i in its)
        end = max(i["end_unix_s"] for i in its)
        per_rank = [i["end_unix_s"] - i["begin_unix_s"] for i in its]
        steps = len(its[0]["steps"])
        step_balance, slowest, slow_link = [], [], []
        ring = kind in RING_KINDS and n > 1 and algorithm == "ring"
        for s in range(steps):
            d = [i["steps"][s][7] - i["steps"][s][4] for i in its]
            step_balance.append(max(d) / min(d) if min(d) > 0 else None)
            slowest.append(max(range(n), key=lambda r: d[r]))
            if ring:        # rank r's transfer to r+1: from both ranks starting the step to r+1 holding it
                tr = [its[(r + 1) % n]["steps"][s][6] - max(its[r]["steps"][s][4], its[(r + 1) % n]["steps"][s][4])
                      for r in range(n)]
                slow_link.append(max(range(n), key=lambda r: tr[r]))
        t = end - begin
        out.append({"iteration": it, "time_s": t, **C.bandwidths(kind, n, size, t), "rank_time_s": per_rank,
                    "balance": max(per_rank) / min(per_rank) if min(per_rank) > 0 else None,
                    "step_balance": step_balance, "slowest_rank_per_step": slowest,
                    "slowest_transfer_per_step": slow_link if ring else None,
                    "slowest_rank": max(range(n), key=lambda r: per_rank[r]),
                    "begin_unix_s": begin, "end_unix_s": end})
    return out


def step_rows(recs: list[dict], t0_unix_s: float) -> list[dict]:
    """Every rank's every step (all iterations) as CSV rows, times in seconds from ``t0_unix_s``."""
    rows = []
    for rec in recs:
        for it in rec["iterations"]:
            for step, phase, chunk, nbytes, t_start, t_send, t_recv, t_end in it["steps"]:
                rows.append({"iteration": it["iteration"], "rank": rec["rank"], "host": rec["host"], "step": step,
                             "phase": phase, "chunk": chunk, "bytes": nbytes, "start_s": t_start - t0_unix_s,
                             "send_done_s": t_send - t0_unix_s, "recv_done_s": t_recv - t0_unix_s,
                             "end_s": t_end - t0_unix_s})
    return rows


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
    gives the lowest, every transfer of a step running at once. ``routing``: ``"ecmp"`` splits
    each transfer ideally over its equal-cost paths (:func:`experiments.fluid.max_min_rates`; the
    best any hash can do); ``"single"``: one fixed path per destination; ``"hash"``: each
    transfer pinned to one random equal-cost path, the median over random placements
    (:func:`experiments.fluid.hash_ecmp_min_rate`), what long-lived TCP connections meet. A
    ring's steps all use the same host pairs, so its B is its ring's bottleneck; an all-to-all's
    steps differ. ``algorithm`` and ``servers`` as :func:`step_pairs` (a hierarchical
    AllReduce's B is its rails' slowest transfer, B_rail of common.hierarchical).

    Raises:
        ValueError: no transfer crosses the fabric (every rank on one server), or an unknown ``routing``.
    """
    if routing not in ("ecmp", "single", "hash"):
        raise ValueError(f"routing must be ecmp, single or hash, not {routing!r}")
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


def traced_path(fabric_map: dict, src: str, dst: str, src_port: int, dst_port: int, proto: str = "tcp",
                trace=None) -> dict[tuple[str, str], float]:
    """The path one ``src`` -> ``dst`` connection takes on the live fabric, switch by switch, from
    Open vSwitch's own tables (:func:`controller.dataplane.ovs_trace_output_port`: the ECMP hash of
    this 5-tuple as the switch computes it), as link fractions of 1.0 (see
    :func:`experiments.fluid.max_min_on_paths`). ``trace(bridge, flow) -> port`` replaces the
    tracer (tests).

    Raises:
        ValueError: a switch drops the flow or the walk does not reach ``dst``.
        SetupError: ovs-appctl failed.
    """
    trace = trace or ovs_trace_output_port
    hosts = {h["name"]: h for h in fabric_map["hosts"]}
    ends = {(sw["name"], p["port"]): (p["peer"], p["peer_port"]) for sw in fabric_map["switches"] for p in sw["ports"]}
    s, d = hosts[src], hosts[dst]
    out = {(src, s["switch"]): 1.0}
    sw, in_port = s["switch"], s["switch_port"]
    for _ in range(len(fabric_map["switches"]) + 1):
        port = trace(sw, f"in_port={in_port},{proto},nw_src={s['ip']},nw_dst={d['ip']},{proto}_src={src_port},"
                         f"{proto}_dst={dst_port}")      # tp_src is refused for udp ("prerequisites not met")
        if port is None or (sw, port) not in ends:
            raise ValueError(f"{sw} does not forward {src}:{src_port} -> {dst}:{dst_port} (port {port})")
        node, in_port = ends[(sw, port)]
        out[(sw, node)] = 1.0
        if node == dst:
            return out
        sw = node
    raise ValueError(f"{src}:{src_port} -> {dst}:{dst_port} does not reach {dst}")


def traced_rate_bps(fabric_map: dict, recs: list[dict], hosts: list[str], kind: str, trace=None,
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
    paths = {}
    for r, rec in enumerate(recs):
        if not rec or rec.get("connections") is None:
            return None
        for c in rec["connections"]:
            if where[r] != where[c["dst_rank"]]:
                paths[(r, c["dst_rank"])] = traced_path(fabric_map, hosts[r], hosts[c["dst_rank"]], c["src_port"],
                                                        c["dst_port"], proto=c.get("proto", "tcp"), trace=trace)
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


def wait_done(agents, deadline_unix_s: float) -> dict:
    """Wait for the agents (see ``Agents.wait``), kill what is left; their exit codes."""
    try:
        return agents.wait(deadline_unix_s)
    finally:
        agents.kill()


def run(lf, state, hosts: list[str], kind: str, elements: int, out: Path, timeout_s: float = 120.0,
        **job_args) -> tuple[list[dict | None], dict]:
    """Start, wait, load: (rank records, agent exit codes)."""
    deadline = time.time() + timeout_s
    agents = start(lf, state, hosts, kind, elements, out, deadline, **job_args)
    try:
        codes = wait_done(agents, deadline + 5)
    finally:        # the NVLink pipes of ranks that did not end cleanly
        shutil.rmtree(Path(out) / "nvlink", ignore_errors=True)
    return load_records(out, hosts), codes


#: Elements per rank of the small run that measures alpha (a few per chunk: T is mostly per-step cost).
ALPHA_PROBE_ELEMENTS_PER_RANK = 4


def run_round(lf, state, coll: Collective, out: Path, sample_hz: float, quiet: bool = True, say=print,
              seed: int = 0, roce_args: dict | None = None, sampler_method: str = "auto",
              capacity_mbps: dict | None = None) -> dict:
    """Run one round's collective on a live fabric: a small run for alpha, then every size of
    ``coll`` (``sizes_bytes`` or ``size_bytes``), each ``repeat`` times, with the queue sampler on.

    Args:
        coll: the round's collective section (typed; ``kind`` set).
        seed: the seed of the ranks' arrays (``init: seeded``).
        sampler_method: the queue sampler's reader (``measurement.sampler``: auto, bpf, netlink).
        roce_args: the RoCE queue pairs' settings (experiments.workloads.roce.jobs.collective_job_args) for
            ``transport: roce``.
        capacity_mbps: link directions a fault slowed for the round (``{"a>b": Mbit/s}``,
            controller.faults.capacity_overrides): the models' B uses them.

    Returns ``{"hosts", "alpha_s", "rate_bps" (B: hash-ECMP bottleneck x TCP_PAYLOAD_FRACTION),
    "link_rate_bps" (that bottleneck link's rate), "rate_ideal_ecmp_bps",
    "runs": [{"size_bytes", "elements", "exact",
    "transfers", "expected_transfers", "iterations": [timings], "errors", "dir"}]}``.
    Raises SetupError when the agents cannot start.
    """
    hosts = rank_hosts(lf.fabric, coll)
    n, kind = len(hosts), coll.kind
    transport, algorithm = coll.transport, coll.algorithm
    servers = rank_servers(lf.fabric, hosts)
    lay = layout(hosts, servers)
    nic_bps = 1e6 * min(lf.fabric.host_attachment(h).rate_mbps for h in hosts)
    tr = {"algorithm": algorithm, "nvlink_ratio": coll.nvlink_ratio,
          **({"transport": transport, "roce": roce_args} if transport == "roce" else {})}
    # B: every transfer is one TCP connection (RoCE queue pair), kept for the whole run, so on one
    # hashed path; the model counts payload bytes, so B is the link rate's payload share
    ra = roce_args or {}
    frac = payload_fraction(transport, ra.get("mtu_bytes", 1024))
    fmap = lf.fabric.to_map()
    if capacity_mbps:
        fmap["capacity_mbps"] = dict(capacity_mbps)
    link_rate = bottleneck_rate_bps(fmap, hosts, kind, "hash", algorithm, servers)
    label = {"tcp": "TCP", "roce": "RoCE"}[transport]
    model = f"hash-ECMP, {label} payload"
    if transport == "roce" and ra.get("mode") == "none" and ra.get("rate_mbps") and \
            ra["rate_mbps"] * 1e6 < link_rate:
        link_rate = ra["rate_mbps"] * 1e6       # every queue pair paced at the fixed rate
        model = f"fixed rate, {label} payload"
    rate = link_rate * frac
    res = {"hosts": hosts, "kind": kind, "ranks": n, "placement": "list" if coll.hosts else coll.placement,
           "transport": transport, "payload_fraction": frac, "algorithm": algorithm, "server_of_rank": servers,
           "servers": len(lay), "gpus_per_server": len(lay[0]) if len({len(x) for x in lay}) == 1 else None,
           "nic_rate_bps": nic_bps, "nvlink_ratio": coll.nvlink_ratio, "nvlink_rate_bps": coll.nvlink_ratio * nic_bps,
           "rate_bps": rate, "link_rate_bps": link_rate, "rate_model": model,
           "rate_ideal_ecmp_bps": bottleneck_rate_bps(fmap, hosts, kind, "ecmp", algorithm, servers) * frac,
           "capacity_mbps": dict(capacity_mbps or {}), "runs": []}
    sampler = start_sampler(lf, state, out, sample_hz, sampler_method)
    try:
        probe_el = max(n * ALPHA_PROBE_ELEMENTS_PER_RANK, 4)
        recs, _ = run(lf, state, hosts, kind, probe_el, out / "alpha", timeout_s=coll.timeout_s, repeat=3, **tr)
        probe = timings([r for r in recs if r], kind, probe_el) if all(recs) else []
        drop_arrays(recs)
        if algorithm == "hierarchical":        # one alpha per level, from the probe's steps
            lv = level_alphas(recs, {"intra": res["nvlink_rate_bps"], "inter": rate}) if all(recs) else {}
            res["alpha_s"], res["alpha_nvlink_s"] = lv.get("inter"), lv.get("intra")
        else:
            res["alpha_s"] = (float(np.median([alpha_from_run(t["time_s"], kind, n, 4 * probe_el, rate)
                                               for t in probe])) if probe else None)
            res["alpha_nvlink_s"] = None
        for size in coll.sizes_bytes or [coll.size_bytes]:
            if ROUND_STOP.is_set():       # the round was stopped: the sizes run so far are kept
                break
            el = size // 4
            d = out / f"size-{size}"
            recs, codes = run(lf, state, hosts, kind, el, d, timeout_s=coll.timeout_s, init=coll.init,
                              seed=seed, repeat=coll.repeat, **tr)
            chk = check_results(recs, kind, el, init=coll.init, seed=seed, algorithm=algorithm, hosts=hosts,
                                servers=servers)
            tim = timings(recs, kind, el, algorithm) if chk["exact"] else []
            drop_arrays(recs)
            traced, traced_error = None, None
            try:     # this run's connections on the paths the switches really gave them
                traced = (traced_rate_bps(fmap, recs, hosts, kind, algorithm=algorithm, servers=servers)
                          if chk["exact"] else None)
            except (ValueError, SetupError) as e:
                traced_error = str(e)
            res["runs"].append({"size_bytes": 4 * el, "elements": el, **chk, "iterations": tim, "dir": str(d),
                                "nvlink_achieved_bps": nvlink_rate_achieved(recs) if chk["exact"] else None,
                                "agent_exit_codes": codes, "traced_link_rate_bps": traced,
                                "traced_error": traced_error, "roce": transport_totals(d, hosts)})
            for w in sorted(set((res["runs"][-1]["roce"] or {}).get("warnings", []))):
                print(f"fabriclab: WARNING: {w}", file=sys.stderr)
            if not quiet:
                med = float(np.median([t["time_s"] for t in tim])) if tim else None
                say(f"{kind}{f' ({algorithm})' if algorithm != 'ring' else ''} of {4 * el} B on {n} ranks "
                    f"({res['placement']}): "
                    + (f"T {med:.3f} s (median of {len(tim)}), exact {chk['exact']}" if med
                       else f"FAILED {chk['errors'][:2]}"))
    finally:
        stop_sampler(sampler)
    return res


def level_alphas(recs: list[dict], rates_bps: dict[str, float]) -> dict[str, float]:
    """alpha per level of a hierarchical AllReduce, from a small run's step records: for
    ``intra`` (NVLink phases) and ``inter`` (rail phases), the median over ranks, iterations and
    steps of the step's time less its bytes at that level's rate (``rates_bps``), never below 0.
    Levels without steps are left out."""
    out = {}
    for level, phases in (("intra", H.INTRA_PHASES), ("inter", H.INTER_PHASES)):
        d = [max(0.0, s[7] - s[4] - 8 * s[3] / rates_bps[level]) for rec in recs for it in rec["iterations"]
             for s in it["steps"] if s[1] in phases]
        if d:
            out[level] = float(np.median(d))
    return out


def nvlink_rate_achieved(recs: list[dict]) -> float | None:
    """The rate the NVLink channel gave (bit/s): the median over the intra-server sends of the
    last iteration of their bytes over the time from the step's start to the send's end. None
    when no step sent over NVLink alone (a flat ring's steps mix both levels: its sends are left
    out)."""
    r = [8 * s[3] / (s[5] - s[4]) for rec in recs for s in rec["iterations"][-1]["steps"]
         if s[1] in H.INTRA_PHASES and s[3] and s[5] > s[4]] if all(rec and rec["iterations"] for rec in recs) else []
    return float(np.median(r)) if r else None


def model_time_s(res: dict, size_bytes: float, alpha_s: float, rate_bps: float) -> float:
    """The model's T for one size of a run's result ``res`` (:func:`run_round`): the two-level model
    (common.hierarchical) for the hierarchical algorithm, else the flat alpha-beta model
    (common.collectives) with B = ``rate_bps`` (the network's, or the NVLink rate when every
    rank is on one server)."""
    if res.get("algorithm") == "hierarchical":
        return H.hierarchical_model_time_s(res["servers"], res["gpus_per_server"], size_bytes,
                                           res.get("alpha_nvlink_s") or 0.0, res["nvlink_rate_bps"], alpha_s, rate_bps)
    return C.model_time_s(res["kind"], res["ranks"], size_bytes, alpha_s, rate_bps)


def stragglers(iterations: list[dict], hosts: list[str], top: int = 2) -> str:
    """Where the balance points, over ``iterations`` (:func:`timings`): for a ring, the transfers
    most often slowest in a step, ``"3:h4->4:h5 40/60"`` (sender rank:host -> receiver, steps /
    steps), which names the ranks on either side of a slow link or a slow sender; otherwise the
    ranks most often slowest, ``"3:h4 18/60"``. Empty without iterations."""
    counts: dict[int, int] = {}
    total = 0
    ring = all(it.get("slowest_transfer_per_step") for it in iterations) and bool(iterations)
    n = len(hosts)
    for it in iterations:
        for r in (it["slowest_transfer_per_step"] if ring else it.get("slowest_rank_per_step", [])):
            counts[r] = counts.get(r, 0) + 1
            total += 1
    best = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    if ring:
        return ", ".join(f"{r}:{hosts[r]}->{(r + 1) % n}:{hosts[(r + 1) % n]} {c}/{total}" for r, c in best)
    return ", ".join(f"{r}:{hosts[r]} {c}/{total}" for r, c in best)


#: collective.csv's columns from the RoCE transport (empty for TCP): totals over the size's iterations.
ROCE_COLUMNS = ("packets_sent", "retransmitted_packets", "timeouts", "cnps_received")


def sent_bytes_by_level(recs: list[dict], steps: list[list[H.Move]], server_of_rank: list[str]) -> dict:
    """The bytes the ranks sent in one collective, by where they went, from the ranks' records
    (each step's bytes sent, as recorded) and the schedule ``steps`` (which rank each of a
    rank's moves went to; a step's bytes are split over its moves by their elements).

    Returns ``{"network_bytes", "network_bytes_max_rank", "nvlink_bytes"}``: the bytes sent to a
    rank of another server (through its NIC and the fabric), summed over the ranks and the most
    one rank sent, and the bytes sent inside a server (NVLink); each the median over the
    iterations. Raises ValueError when a record's steps do not match the schedule."""
    per_it: list[tuple[float, float, float]] = []
    for it in range(min(len(r["iterations"]) for r in recs)):
        net_by_rank, nvlink = [], 0.0
        for rec in recs:
            rank, net = rec["rank"], 0.0
            rows = rec["iterations"][it]["steps"]
            if len(rows) != len(steps):
                raise ValueError(f"rank {rank}: {len(rows)} steps recorded, {len(steps)} scheduled")
            for row, step in zip(rows, steps):
                mine = [mv for mv in step if mv.src == rank]
                total = sum(mv.elements for mv in mine)
                for mv in mine:
                    share = row[3] * mv.elements / total
                    if server_of_rank[mv.dst] != server_of_rank[rank]:
                        net += share
                    else:
                        nvlink += share
            net_by_rank.append(net)
        per_it.append((sum(net_by_rank), max(net_by_rank, default=0.0), nvlink))
    med = [float(np.median([x[i] for x in per_it])) if per_it else None for i in range(3)]
    return {"network_bytes": med[0], "network_bytes_max_rank": med[1], "nvlink_bytes": med[2]}


def summarize(res: dict, out: Path, plots: bool = True) -> dict:
    """Write ``collective.csv`` (one row per size: T median over the iterations, algbw, busbw,
    the model's T and busbw, balance, exactness), ``collective_steps.csv`` (every rank's steps of
    every size) and the plots (step timeline of the largest size, busbw against size); returns
    the ``collective`` summary section."""
    n, kind, rate, alpha = res["ranks"], res["kind"], res["rate_bps"], res["alpha_s"] or 0.0
    rows, steps = [], []
    for r in res["runs"]:
        its = r["iterations"]
        t = float(np.median([i["time_s"] for i in its])) if its else None
        model_t = model_time_s(res, r["size_bytes"], alpha, rate)
        traced = r.get("traced_link_rate_bps")
        traced_rate = traced * res.get("payload_fraction", TCP_PAYLOAD_FRACTION) if traced else None
        traced_t = model_time_s(res, r["size_bytes"], alpha, traced_rate) if traced_rate else None
        row = {"size_bytes": r["size_bytes"], "ranks": n, "kind": kind, "placement": res["placement"],
               "algorithm": res.get("algorithm", "ring"), "servers": res.get("servers"),
               "gpus_per_server": res.get("gpus_per_server"), "nvlink_rate_bps": res.get("nvlink_rate_bps"),
               "nvlink_achieved_bps": r.get("nvlink_achieved_bps"), "alpha_nvlink_s": res.get("alpha_nvlink_s"),
               "exact": r["exact"], "transfers": r["transfers"], "expected_transfers": r["expected_transfers"],
               "time_s": t, "model_time_s": model_t, "measured_over_model": t / model_t if t else None,
               "traced_rate_bps": traced_rate, "traced_model_time_s": traced_t,
               "measured_over_traced_model": t / traced_t if t and traced_t else None,
               "traced_error": r.get("traced_error"), "alpha_s": res["alpha_s"], "rate_bps": rate,
               "balance": float(np.median([i["balance"] for i in its])) if its else None,
               "step_balance_max": max((b for i in its for b in i["step_balance"] if b is not None), default=None),
               "stragglers": stragglers(its, res["hosts"]),
               **{k: (r.get("roce") or {}).get(k) for k in ROCE_COLUMNS}}
        if t:
            row.update(C.bandwidths(kind, n, r["size_bytes"], t))
            row["model_busbw_bps"] = C.bandwidths(kind, n, r["size_bytes"], model_t)["busbw_bps"]
        recs = load_records(Path(r["dir"]), res["hosts"])
        row.update(dict.fromkeys(("network_bytes", "network_bytes_max_rank", "nvlink_bytes")))
        if all(recs) and its:
            try:
                where = res.get("server_of_rank") or res["hosts"]
                row.update(sent_bytes_by_level(recs, schedule(res["hosts"], kind, r["size_bytes"] // 4,
                                                              res.get("algorithm", "ring"), where), where))
            except (ValueError, KeyError, IndexError, ZeroDivisionError):
                pass                # a schedule the records do not follow (a stream baseline): left empty
        rows.append(row)
        if all(recs) and its:
            for s in step_rows(recs, its[0]["begin_unix_s"]):
                steps.append({"size_bytes": r["size_bytes"], **s})
    cols = ["size_bytes", "ranks", "kind", "placement", "algorithm", "servers", "gpus_per_server", "exact", "transfers", "expected_transfers", "time_s",
            "algbw_bps", "busbw_bps", "model_time_s", "model_busbw_bps", "measured_over_model", "traced_rate_bps",
            "traced_model_time_s", "measured_over_traced_model", "alpha_s", "rate_bps", "balance", "step_balance_max",
            "stragglers", "nvlink_rate_bps", "nvlink_achieved_bps", "alpha_nvlink_s", "network_bytes",
            "network_bytes_max_rank", "nvlink_bytes", *ROCE_COLUMNS]
    write_csv(out / "collective.csv", cols, rows)
    write_csv(out / "collective_steps.csv", ["size_bytes", "iteration", "rank", "host", "step", "phase", "chunk",
                                               "bytes", "start_s", "send_done_s", "recv_done_s", "end_s"], steps)
    good = [r for r in rows if r.get("busbw_bps")]
    if good and plots:
        big = max(good, key=lambda r: r["size_bytes"])
        first = [s for s in steps if s["size_bytes"] == big["size_bytes"] and s["iteration"] == 0]
        if first:
            plot.plot_collective_timeline(first, out / "collective_timeline.png",
                                          title=f"{kind}, {n} ranks ({res['placement']}), {big['size_bytes']} B per rank")
        plot.plot_busbw_vs_size([{**r, "label": res["placement"]} for r in good], out / "collective_busbw.png",
                                link_rate_bps=rate,
                                link_label=f"model B ({res.get('rate_model') or 'hash-ECMP'})")
    return {"kind": kind, "ranks": n, "placement": res["placement"], "hosts": res["hosts"],
            "algorithm": res.get("algorithm", "ring"), "servers": res.get("servers"),
            "gpus_per_server": res.get("gpus_per_server"), "nic_rate_bps": res.get("nic_rate_bps"),
            "nvlink_ratio": res.get("nvlink_ratio"), "nvlink_rate_bps": res.get("nvlink_rate_bps"),
            "alpha_nvlink_s": res.get("alpha_nvlink_s"),
            "transport": res.get("transport", "tcp"), "alpha_s": res["alpha_s"],
            "rate_bps": rate, "link_rate_bps": res.get("link_rate_bps"), "rate_model": res.get("rate_model"),
            "rate_ideal_ecmp_bps": res.get("rate_ideal_ecmp_bps"), "all_exact": all(r["exact"] for r in rows),
            "sizes": rows}


def format_line(c: dict) -> str:
    """The terminal line of a round's collective results."""
    parts = []
    for r in c["sizes"]:
        if r.get("busbw_bps"):
            traced = (f", traced paths {r['traced_model_time_s']:.3f} at B {r['traced_rate_bps'] / 1e6:.2f}"
                      if r.get("traced_model_time_s") else "")
            bal = (f", balance {r['balance']:.2f} (worst step {r['step_balance_max']:.2f}; slowest ranks "
                   f"{r['stragglers']})" if r.get("balance") and r.get("step_balance_max") else "")
            parts.append(f"{r['size_bytes']} B: T {r['time_s']:.3f} s (model {r['model_time_s']:.3f}{traced}), "
                         f"busbw {r['busbw_bps'] / 1e6:.2f} Mbit/s{bal}")
        else:
            parts.append(f"{r['size_bytes']} B: FAILED")
    ideal = c.get("rate_ideal_ecmp_bps")
    b = f"B {c['rate_bps'] / 1e6:.2f} Mbit/s ({c.get('rate_model') or 'hash-ECMP'}" + (
        f"; ideal ECMP {ideal / 1e6:.2f})" if ideal else ")")
    srv = (f", {c['servers']} servers x {c['gpus_per_server']} GPUs, NVLink {c['nvlink_rate_bps'] / 1e6:.0f} Mbit/s"
           if (c.get("gpus_per_server") or 1) > 1 else "")
    nv = f", NVLink alpha {1e3 * c['alpha_nvlink_s']:.1f} ms" if c.get("alpha_nvlink_s") is not None else ""
    alg = f" ({c['algorithm']})" if c.get("algorithm", "ring") != "ring" else ""
    return (f"collective {c['kind']}{alg} on {c['ranks']} ranks ({c['placement']}, "
            f"{c.get('transport', 'tcp')}{srv}), {b}{nv}, "
            f"alpha {1e3 * (c['alpha_s'] or 0):.1f} ms, exact: {'yes' if c['all_exact'] else 'NO'}; " + "; ".join(parts))
