"""Collectives in a run (issue 8): rank placement, the agents' jobs, and the results: exactness
against numpy, transfer counts, per-step timings, algbw/busbw, the straggler balance and the
alpha-beta model (formulas and sources: :mod:`common.collectives`)."""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from common import collectives as C
from traffic.collective import initial_array

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


def _racks(fabric) -> dict[str, list[str]]:
    """Hosts per rack (their leaf or edge switch), in position order."""
    out: dict[str, list[str]] = {}
    for h in fabric.hosts:
        out.setdefault(h.leaf or h.group, []).append(h.name)
    return out


def host_jobs(lf, hosts: list[str], kind: str, elements: int, out: Path, deadline_unix_s: float,
              init: str = "seeded", seed: int = 0, repeat: int = 1, dscp: int = 0) -> dict[str, dict]:
    """The ``collective`` job of every host that runs a rank (``hosts[r]`` runs rank r).

    Raises:
        ValueError: an unknown kind, or fewer elements than ranks (a chunk would be empty).
    """
    n = len(hosts)
    C.ring_schedule(n, kind)
    C.chunk_bounds(elements, n)
    ranks = [{"rank": r, "host": h, "ip": lf.fabric.node(h).ip, "port": BASE_PORT + r} for r, h in enumerate(hosts)]
    jobs: dict[str, dict] = {}
    for r, h in enumerate(hosts):
        j = jobs.setdefault(h, {"role": "collective", "kind": kind, "ranks": ranks, "local_ranks": [],
                                "elements": elements, "init": init, "seed": seed, "repeat": repeat, "dscp": dscp,
                                "out": str(Path(out) / f"{h}.collective.json"), "out_dir": str(out),
                                "deadline_unix_s": deadline_unix_s})
        j["local_ranks"].append(r)
    return jobs


def start(lf, state, hosts: list[str], kind: str, elements: int, out: Path, deadline_unix_s: float,
          start_in_s: float = 1.0, **job_args):
    """Start one agent per host of ``hosts`` and release them together; returns the released
    ``experiments.runner._Agents`` (``wait(deadline)``, then ``kill()``). SetupError when an agent
    is not ready."""
    from experiments.runner import _Agents
    Path(out).mkdir(parents=True, exist_ok=True)
    agents = _Agents(lf, state)
    for h, j in host_jobs(lf, hosts, kind, elements, out, deadline_unix_s, **job_args).items():
        agents.start(h, "collective", j)
    agents.ready_then_release(start_in_s)
    return agents


def load_records(out: Path, hosts: list[str]) -> list[dict | None]:
    """Each rank's record (rank order) from the agents' result files; None for a missing one."""
    recs: dict[int, dict] = {}
    for h in dict.fromkeys(hosts):
        p = Path(out) / f"{h}.collective.json"
        if p.exists():
            res = json.loads(p.read_text())
            for r in res.get("ranks", []):
                recs[r["rank"]] = {**r, "host": h, "agent_error": res.get("error")}
    return [recs.get(r) for r in range(len(hosts))]


def check_results(recs: list[dict | None], kind: str, elements: int, init: str = "seeded", seed: int = 0) -> dict:
    """Compare every rank's final array with the reference (:func:`common.collectives.simulate` on
    the same inputs; for AllReduce that is numpy's element-wise sum, exact for these
    integer-valued float32 inputs). Returns ``{"exact": bool, "ranks_exact": [bool, ...],
    "transfers": chunk transfers received over the last iteration, "expected_transfers",
    "errors": [...]}``."""
    n = len(recs)
    inputs = [initial_array(r, elements, init, seed) for r in range(n)]
    want, count = C.simulate(inputs, kind)
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


def timings(recs: list[dict], kind: str, elements: int) -> list[dict]:
    """Per iteration: total time T (first rank's begin -> last rank's end), algbw/busbw (bit/s),
    per-step balance (slowest rank's step time / fastest's) and the overall balance (slowest
    rank's time / fastest's). Raises ValueError when a rank has no timings."""
    n = len(recs)
    size = 4 * elements
    out = []
    for it in range(min(len(r["iterations"]) for r in recs)):
        its = [r["iterations"][it] for r in recs]
        begin = min(i["begin_unix_s"] for i in its)
        end = max(i["end_unix_s"] for i in its)
        per_rank = [i["end_unix_s"] - i["begin_unix_s"] for i in its]
        steps = len(its[0]["steps"])
        step_balance = []
        for s in range(steps):
            d = [i["steps"][s][7] - i["steps"][s][4] for i in its]
            step_balance.append(max(d) / min(d) if min(d) > 0 else None)
        t = end - begin
        out.append({"iteration": it, "time_s": t, **C.bandwidths(kind, n, size, t), "rank_time_s": per_rank,
                    "balance": max(per_rank) / min(per_rank) if min(per_rank) > 0 else None,
                    "step_balance": step_balance, "begin_unix_s": begin, "end_unix_s": end})
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


def step_pairs(hosts: list[str], kind: str) -> list[list[tuple[str, str]]]:
    """The (source host, destination host) transfers of each step of ``kind`` with ranks on ``hosts``
    (transfers between ranks on one host are left out: they do not use the fabric)."""
    return [[(hosts[t.src], hosts[t.dst]) for t in step if hosts[t.src] != hosts[t.dst]]
            for step in C.ring_schedule(len(hosts), kind)]


def bottleneck_rate_bps(fabric_map: dict, hosts: list[str], kind: str, routing: str = "ecmp") -> float:
    """B of the alpha-beta model: the slowest transfer's max-min fair rate (bit/s) in the step
    that gives the lowest, every transfer of a step running at once over ideal ECMP
    (:func:`experiments.fluid.max_min_rates`). A ring's steps all use the same host pairs, so
    its B is its ring's bottleneck; an all-to-all's steps differ. Raises ValueError when no
    transfer crosses the fabric (every rank on one host)."""
    from experiments.fluid import max_min_rates
    rates = []
    seen: dict[tuple, float] = {}
    for pairs in step_pairs(hosts, kind):
        if not pairs:
            continue
        key = tuple(sorted(pairs))
        if key not in seen:
            seen[key] = min(max_min_rates(fabric_map, pairs, routing))
        rates.append(seen[key])
    if not rates:
        raise ValueError("no transfer crosses the fabric: every rank is on one host")
    return min(rates) * 1e6


def alpha_from_run(time_s: float, kind: str, n: int, size_bytes: float, rate_bps: float) -> float:
    """alpha (s per step) from a measured time: (T - steps x size/(N B)) / steps, never below 0.
    Run it on a small message, where T is mostly alpha (common.collectives.model_time_s)."""
    steps = 2 * (n - 1) if kind == "allreduce" else n - 1
    return max(0.0, (time_s - C.model_time_s(kind, n, size_bytes, 0.0, rate_bps)) / steps)


def wait_done(agents, deadline_unix_s: float) -> dict:
    """Wait for the agents (see ``_Agents.wait``), kill what is left; their exit codes."""
    try:
        return agents.wait(deadline_unix_s)
    finally:
        agents.kill()


def run(lf, state, hosts: list[str], kind: str, elements: int, out: Path, timeout_s: float = 120.0,
        **job_args) -> tuple[list[dict | None], dict]:
    """Start, wait, load: (rank records, agent exit codes)."""
    deadline = time.time() + timeout_s
    agents = start(lf, state, hosts, kind, elements, out, deadline, **job_args)
    codes = wait_done(agents, deadline + 5)
    return load_records(out, hosts), codes
