"""Training iterations in a run: the agents' jobs, the model of each iteration, and the results
(per iteration compute, communication, exposed communication and iteration time beside the
model; per bucket the gradient's error against the exact float32 sum and the compressor's
bound). Models and sources: :mod:`common.training`, :mod:`common.compression`,
:mod:`common.hierarchical`; the agents: :mod:`traffic.training`."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from common.compression import make as make_codec
from common.training import Bucket, Layer, timeline
from experiments import plot
from experiments.workloads.collective import agents as coll_agents, plan as coll_plan, summary as coll_summary
from experiments.live import start_sampler, stop_sampler
from experiments.model import Training
from experiments.tables import write_csv
from traffic.training import gradient


def jobs(lf, hosts: list[str], tr: Training, out: Path, deadline_unix_s: float, seed: int) -> dict[str, dict]:
    """The ``training`` job of every host that runs a rank (traffic.training's job: the collective
    job's transport fields from :func:`experiments.coll_agents.host_jobs` and the model's)."""
    layers, bkts = tr.model_layers(), tr.buckets()
    out_jobs = coll_agents.host_jobs(lf, hosts, "allreduce", len(hosts), out, deadline_unix_s, seed=seed,
                                 algorithm=tr.algorithm, nvlink_ratio=tr.nvlink_ratio)
    for h, j in out_jobs.items():
        j.update({"role": "training", "out": str(Path(out) / f"{h}.training.json"),
                  "layers": [[x.name, x.params_bytes, x.forward_s, x.backward_s] for x in layers],
                  "buckets": [[b.index, list(b.layers), b.params_bytes] for b in bkts],
                  "iterations": tr.iterations, "overlap": tr.overlap,
                  "compression": {"name": tr.compression,
                                  "ratio": tr.topk_ratio if tr.compression == "topk" else None}})
    return out_jobs


def load_records(out: Path, hosts: list[str]) -> list[dict | None]:
    """Each rank's record (rank order) from the agents' ``<host>.training.json``; None for a missing one."""
    return coll_summary.load_records(out, hosts, "training")


def model_comm_s(res: dict, params_bytes: int, ratio: float) -> float:
    """The model's time to reduce one bucket of ``params_bytes`` whose bytes on the wire are
    ``params_bytes / ratio``: the flat or two-level alpha-beta model with the run's alpha and B
    (:func:`experiments.coll_plan.model_time_s`)."""
    return coll_plan.model_time_s(res, params_bytes / ratio, res["alpha_s"] or 0.0, res["rate_bps"])


def run_round(lf, state, tr: Training, out: Path, sample_hz: float, quiet: bool = True, say=print, seed: int = 0,
              sampler_method: str = "auto", capacity_mbps: dict | None = None, alpha_cache: dict | None = None) -> dict:
    """One round's training on a live fabric: a small AllReduce for alpha (as a collective
    round's; once per run for the same ranks, algorithm and NVLink rate when ``alpha_cache``, a
    dict the caller keeps across rounds, is given), then ``tr.iterations`` iterations, with the
    queue sampler on.

    Returns ``{"hosts", "algorithm", "servers", "gpus_per_server", "nvlink_rate_bps", "rate_bps",
    "alpha_s", "alpha_nvlink_s", "layers", "buckets", "overlap", "compression", "ratio",
    "records_dir", "agent_exit_codes", "gradient" (:func:`gradient_errors`, checked before the
    reduced arrays are deleted)}`` (JSON-able). Raises SetupError when the agents cannot start.
    """
    hosts = coll_plan.rank_hosts(lf.fabric, tr)
    n = len(hosts)
    servers = coll_plan.rank_servers(lf.fabric, hosts)
    lay = coll_plan.layout(hosts, servers)
    fmap = lf.fabric.to_map()
    if capacity_mbps:
        fmap["capacity_mbps"] = dict(capacity_mbps)
    nic_bps = 1e6 * min(lf.fabric.host_attachment(h).rate_mbps for h in hosts)
    rate = coll_plan.bottleneck_rate_bps(fmap, hosts, "allreduce", "hash", tr.algorithm, servers) \
        * coll_plan.TCP_PAYLOAD_FRACTION
    layers, bkts = tr.model_layers(), tr.buckets()
    codec = make_codec(tr.compression, tr.topk_ratio if tr.compression == "topk" else None)
    res = {"hosts": hosts, "kind": "allreduce", "ranks": n, "algorithm": tr.algorithm, "server_of_rank": servers,
           "servers": len(lay), "gpus_per_server": len(lay[0]) if len({len(x) for x in lay}) == 1 else None,
           "nic_rate_bps": nic_bps, "nvlink_rate_bps": tr.nvlink_ratio * nic_bps, "rate_bps": rate,
           "layers": [[x.name, x.params_bytes, x.forward_s, x.backward_s] for x in layers],
           "buckets": [[b.index, list(b.layers), b.params_bytes] for b in bkts], "overlap": tr.overlap,
           "compression": tr.compression, "ratio": [codec.ratio(b.params_bytes // 4) for b in bkts],
           "iterations": tr.iterations, "seed": seed, "records_dir": str(out / "ranks")}
    sampler = start_sampler(lf, state, out, sample_hz, sampler_method)
    key = (tuple(hosts), tr.algorithm, tr.nvlink_ratio, tuple(sorted((capacity_mbps or {}).items())))
    try:
        if alpha_cache is not None and key in alpha_cache:
            res["alpha_s"], res["alpha_nvlink_s"] = alpha_cache[key]
        else:
            _measure_alpha(lf, state, tr, res, hosts, out, rate)
            if alpha_cache is not None:
                alpha_cache[key] = (res["alpha_s"], res["alpha_nvlink_s"])
        d = out / "ranks"
        d.mkdir(parents=True, exist_ok=True)
        est = sum(x.forward_s + x.backward_s for x in layers) + sum(model_comm_s(res, b.params_bytes, 1.0) for b in bkts)
        deadline = time.time() + min(tr.timeout_s, 30 + 5 * tr.iterations * est)
        res["agent_exit_codes"] = coll_agents.run_jobs(lf, state, jobs(lf, hosts, tr, d, deadline, seed), "training", d,
                                                   deadline)
    finally:
        stop_sampler(sampler)
    res["gradient"] = gradient_errors(res)      # checked once, here: the arrays are dropped after
    drop_arrays(res)
    if not quiet:
        s = summarize_iterations(res)
        if s:
            steady = s[1:] or s         # as summarize: the median over the iterations after the first
            med = {k: float(np.median([x[k] for x in steady])) for k in ("time_s", "compute_s", "comm_s")}
            say(f"training ({tr.algorithm}, overlap {'on' if tr.overlap else 'off'}, {tr.compression}): iteration "
                f"{med['time_s']:.3f} s, compute {med['compute_s']:.3f} s, communication {med['comm_s']:.3f} s "
                f"(medians of {len(steady)} iteration(s))")
    return res


def _measure_alpha(lf, state, tr: Training, res: dict, hosts: list[str], out: Path, rate: float) -> None:
    """alpha (and the NVLink alpha, for the hierarchical algorithm) from a small AllReduce of the
    round's ranks, into ``res`` (the collectives' way: a few elements per chunk)."""
    n = len(hosts)
    probe_el = max(n * coll_plan.ALPHA_PROBE_ELEMENTS_PER_RANK, 4)
    recs, _ = coll_agents.run(lf, state, hosts, "allreduce", probe_el, out / "alpha", timeout_s=tr.timeout_s,
                          repeat=3, algorithm=tr.algorithm, nvlink_ratio=tr.nvlink_ratio)
    coll_summary.drop_arrays(recs)
    if all(recs) and tr.algorithm == "hierarchical":
        lv = coll_summary.level_alphas(recs, {"intra": res["nvlink_rate_bps"], "inter": rate})
        res["alpha_s"], res["alpha_nvlink_s"] = lv.get("inter"), lv.get("intra")
    elif all(recs):
        probe = coll_summary.timings(recs, "allreduce", probe_el)
        res["alpha_s"] = float(np.median([coll_plan.alpha_from_run(t["time_s"], "allreduce", n, 4 * probe_el, rate)
                                          for t in probe]))
        res["alpha_nvlink_s"] = None
    else:
        res["alpha_s"] = res["alpha_nvlink_s"] = None


def summarize_iterations(res: dict) -> list[dict]:
    """Per iteration over every rank: ``time_s`` (first rank's begin to the last rank's end),
    ``compute_s`` (median over ranks of begin to backward's end), ``comm_s`` (median over ranks
    of the sum of its buckets' reduction times), ``exposed_comm_s`` (time - compute), the wire
    bytes every rank sent (``wire_bytes``), the seconds a rank spent encoding and decoding
    (``codec_s``, median over ranks: the CPU's share of the communication time), and the model's times (:func:`common.training.timeline`
    with each bucket's model time). Empty when a rank has no record."""
    recs = load_records(Path(res["records_dir"]), res["hosts"])
    if not all(recs) or any(r.get("error") for r in recs):
        return []
    layers = [Layer(*x) for x in res["layers"]]
    bkts = [Bucket(b[0], tuple(b[1]), b[2]) for b in res["buckets"]]
    comm_model = [model_comm_s(res, b.params_bytes, r) for b, r in zip(bkts, res["ratio"])]
    mod = timeline(layers, bkts, comm_model, res["overlap"])
    out = []
    for it in range(min(len(r["iterations"]) for r in recs)):
        its = [r["iterations"][it] for r in recs]
        begin = min(i["begin_unix_s"] for i in its)
        end = max(i["end_unix_s"] for i in its)
        compute = float(np.median([i["backward_end_unix_s"] - i["begin_unix_s"] for i in its]))
        comm = float(np.median([sum(b[3] - b[2] for b in i["buckets"]) for i in its]))
        codec = float(np.median([sum(b[5] for b in i["buckets"]) for i in its]))
        out.append({"iteration": it, "time_s": end - begin, "compute_s": compute, "comm_s": comm,
                    "exposed_comm_s": end - begin - compute,
                    "wire_bytes": int(sum(b[4] for i in its for b in i["buckets"])), "codec_s": codec,
                    "sum_s": compute + comm, "max_s": max(compute, comm),
                    "model_time_s": mod["iteration_s"], "model_comm_s": mod["comm_s"],
                    "model_compute_s": mod["compute_s"]})
    return out


def gradient_errors(res: dict) -> list[dict]:
    """Per bucket, the last iteration's reduced gradient against the exact sum of every rank's
    gradient (float64): ``max_abs_error``, ``max_rel_error`` (to the largest |sum|), the bound of
    the compressor summed over the encodes that touched each element (``max_bound``), whether
    every element is within it (``within_bound``), and whether every rank ended with the same
    array (``replicas_equal``, their sums). Buckets whose array is missing are left out."""
    recs = load_records(Path(res["records_dir"]), res["hosts"])
    if not all(recs):
        return []
    n, last = len(recs), res["iterations"] - 1
    arrays = {}
    for r in recs:
        arrays.update({int(b): p for b, p in (r.get("arrays") or {}).items()})
    out = []
    for index, _layers, nbytes in res["buckets"]:
        p = arrays.get(index)
        if p is None or not Path(p).exists():
            continue
        got = np.load(p).astype(np.float64)
        exact = np.sum([gradient(res["seed"], r, last, index, nbytes // 4).astype(np.float64) for r in range(n)], axis=0)
        err = np.abs(got - exact)
        bound = np.zeros(len(got))
        for r in recs:
            for lo, hi, m in (r.get("bounds") or {}).get(str(index), []):
                bound[lo:hi] += m
        sums = {r["sums"].get(str(index)) for r in recs}
        out.append({"bucket": index, "elements": len(got), "max_abs_error": float(err.max()),
                    "max_rel_error": float(err.max() / max(np.abs(exact).max(), 1e-30)),
                    "max_bound": float(bound.max()),
                    "within_bound": bool(np.all(err <= bound + 1e-9 * np.abs(exact))),
                    "exact": bool(err.max() == 0), "replicas_equal": len(sums) == 1})
    return out


def drop_arrays(res: dict) -> None:
    """Delete the saved reduced buckets once checked (their errors stay in the results)."""
    for p in Path(res["records_dir"]).glob("train*-b*.npy"):
        p.unlink(missing_ok=True)


def summarize(res: dict, out: Path, plots: bool = True) -> dict:
    """``training.csv`` (one row per iteration), ``training_buckets.csv`` (per rank, iteration and
    bucket: ready, start, end, wire bytes), ``gradient_error.csv`` (per bucket), the timeline plot;
    returns the ``training`` summary section (medians over the iterations after the first, or the
    one iteration when there is one)."""
    its = summarize_iterations(res)
    errs = res.get("gradient") or []
    write_csv(out / "training.csv", ["iteration", "time_s", "compute_s", "comm_s", "exposed_comm_s", "codec_s",
                                     "wire_bytes",
                                     "sum_s", "max_s", "model_time_s", "model_comm_s", "model_compute_s"], its)
    write_csv(out / "gradient_error.csv", ["bucket", "elements", "max_abs_error", "max_rel_error", "max_bound",
                                           "within_bound", "exact", "replicas_equal"], errs)
    recs = load_records(Path(res["records_dir"]), res["hosts"])
    rows = []
    t0 = min((i["begin_unix_s"] for r in recs if r for i in r["iterations"][:1]), default=0.0)
    for r in recs:
        for i in (r or {}).get("iterations", []):
            rows.append({"iteration": i["iteration"], "rank": r["rank"], "kind": "forward",
                         "start_s": i["begin_unix_s"] - t0, "end_s": i["forward_end_unix_s"] - t0, "bucket": None,
                         "wire_bytes": 0})
            rows.append({"iteration": i["iteration"], "rank": r["rank"], "kind": "backward",
                         "start_s": i["forward_end_unix_s"] - t0, "end_s": i["backward_end_unix_s"] - t0,
                         "bucket": None, "wire_bytes": 0})
            for b, ready, start, end, wb, _codec in i["buckets"]:
                rows.append({"iteration": i["iteration"], "rank": r["rank"], "kind": "allreduce",
                             "start_s": start - t0, "end_s": end - t0, "bucket": b, "wire_bytes": wb})
    write_csv(out / "training_timeline.csv", ["iteration", "rank", "kind", "bucket", "start_s", "end_s",
                                              "wire_bytes"], rows)
    steady = its[1:] or its
    med = {k: float(np.median([x[k] for x in steady])) for k in
           ("time_s", "compute_s", "comm_s", "exposed_comm_s", "codec_s", "sum_s", "max_s", "model_time_s",
            "model_comm_s")} if steady else {}
    if rows and plots:
        plot.plot_training_timeline(rows, out / "training_timeline.png",
                                    title=f"{res['algorithm']} AllReduce, overlap {'on' if res['overlap'] else 'off'}, "
                                          f"{res['compression']}: every rank's iterations")
    return {"ranks": res["ranks"], "algorithm": res["algorithm"], "servers": res["servers"],
            "gpus_per_server": res["gpus_per_server"], "overlap": res["overlap"], "compression": res["compression"],
            "ratio": float(np.mean(res["ratio"])), "buckets": len(res["buckets"]),
            "params_bytes": sum(b[2] for b in res["buckets"]), "alpha_s": res.get("alpha_s"),
            "alpha_nvlink_s": res.get("alpha_nvlink_s"), "rate_bps": res["rate_bps"],
            "nvlink_rate_bps": res["nvlink_rate_bps"], "iterations": its, **med,
            "time_over_max": med["time_s"] / med["max_s"] if med else None,
            "time_over_sum": med["time_s"] / med["sum_s"] if med else None,
            "gradient": errs, "all_within_bound": all(e["within_bound"] for e in errs) and bool(errs),
            "all_exact": all(e["exact"] for e in errs) and bool(errs),
            "replicas_equal": all(e["replicas_equal"] for e in errs) and bool(errs),
            "max_rel_error": max((e["max_rel_error"] for e in errs), default=None),
            "complete": bool(its) and len(its) == res["iterations"]}


def format_line(t: dict) -> str:
    """The terminal line of a round's training results."""
    if not t.get("complete"):
        return "training: FAILED (see ranks/*.training.json)"
    err = ("exact" if t["all_exact"] else f"max relative error {t['max_rel_error']:.2e}, "
           f"{'within' if t['all_within_bound'] else 'OUTSIDE'} the compressor's bound")
    comp = "no compression" if t["compression"] == "none" else f"{t['compression']} x{t['ratio']:.2f}"
    return (f"training ({t['algorithm']}, {t['servers']} servers, overlap {'on' if t['overlap'] else 'off'}, "
            f"{comp}): iteration {t['time_s']:.3f} s (model {t['model_time_s']:.3f}), "
            f"compute {t['compute_s']:.3f} s, communication {t['comm_s']:.3f} s (model {t['model_comm_s']:.3f}"
            + (f"; encoding and decoding {t['codec_s']:.3f} s" if t.get("codec_s") else "") + "), "
            f"exposed {t['exposed_comm_s']:.3f} s; sum {t['sum_s']:.3f}, max {t['max_s']:.3f}; gradient {err}"
            + ("" if t["replicas_equal"] else "; REPLICAS DIFFER"))


def warn(t: dict) -> None:
    """Print a warning for a training round whose replicas differ or whose error is outside its bound."""
    if t.get("complete") and (not t["replicas_equal"] or not t["all_within_bound"]):
        print("fabriclab: WARNING: training gradients " + ("differ between replicas" if not t["replicas_equal"]
                                                           else "are outside the compressor's bound"),
              file=sys.stderr)

