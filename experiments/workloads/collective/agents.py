"""Collectives on the live fabric: the ranks' jobs, starting and waiting for their agents, and
a round of a scenario's ``collective`` (sizes, alpha probe, traced paths)."""
from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import numpy as np

from common.errors import SetupError
from experiments.live import RELEASE_IN_S, ROUND_STOP, Agents, start_sampler, stop_sampler
from experiments.model import Collective
from experiments.workloads.collective.plan import (ALPHA_PROBE_ELEMENTS_PER_RANK, BASE_PORT, TRANSPORTS, alpha_from_run,
                                                   bottleneck_rate_bps, layout, payload_fraction, rank_hosts,
                                                   rank_servers, roce_qps, schedule, traced_rate_bps)
from experiments.workloads.collective.summary import (check_results, drop_arrays, level_alphas, load_records,
                                                      nvlink_rate_achieved, timings, transport_totals)


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
          start_in_s: float = RELEASE_IN_S, **job_args):
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
    agents.ready_then_release(RELEASE_IN_S)
    try:
        return wait_done(agents, deadline_unix_s + 5)
    finally:         # the pipes of ranks that did not end cleanly
        shutil.rmtree(Path(out) / "nvlink", ignore_errors=True)


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
                traced = (traced_rate_bps(fmap, recs, hosts, kind, trace=lf.datapath.trace_hop, algorithm=algorithm,
                                           servers=servers)
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
