"""Collectives' results of a round (file in, file out): the ranks' records, exactness against
numpy, transfer counts, per-step timings, algbw/busbw, the straggler balance and the model beside
them; collective.csv, collective_steps.csv and the plots."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from common import collectives as C
from common import hierarchical as H
from experiments import plot
from experiments.tables import write_csv
from traffic.collective import initial_array
from experiments.workloads.collective.plan import TCP_PAYLOAD_FRACTION, model_time_s, schedule


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
