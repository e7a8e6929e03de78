"""Mixed-parallel training in a run (``training.tensor`` or ``training.pipeline`` above 1): the
agents' jobs, the iteration's figures beside the GPipe model, and every link's bytes by
parallelism kind: what the plan predicts from the paths the connections really took, against
what the switch ports counted.

The plan (:mod:`common.parallelism`) gives each kind's payload between each pair of ranks per
iteration; the ranks count what they really sent (traffic.parallel), which must equal it. A
pair on one server exchanges over the NVLink channel (never a fabric link); any other pair over
one TCP connection, whose path is traced switch by switch through Open vSwitch's own tables
(:func:`experiments.coll_plan.traced_path`). On the wire, each message of ``b`` payload bytes is
``b + ceil(b / 1448) x 66`` bytes of frames (:func:`experiments.slowdown.wire_bytes`) on every
link of its path, and its receiver's delayed acknowledgements (one 66-byte frame per two
segments, RFC 5681 section 4.2) travel the path the receiver's switches pick for the reverse
5-tuple, traced the same way (each switch hashes with its own basis: not always the same
spine as the data). A link's
measured bytes are its sending port's ``tx_bytes`` over the round (a host's uplink: the switch
port's ``rx_bytes``), from the round's port counters (experiments.features.ports). Beside the
prediction, the same payload with the TCP overhead the endpoints counted (segments sent,
retransmitted bytes: struct tcp_info) instead of modelled: what the ports must count exactly,
and so where the prediction's acknowledgement model or retransmissions account for a gap.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from common.errors import SetupError
from common.parallelism import KINDS, Plan, bubble_fraction, check_placement, flows, gpipe_compute_s, stage_layers
from experiments import plot
from experiments import paths
from experiments.workloads.collective import agents as coll_agents, plan as coll_plan, summary as coll_summary
from experiments.features.ports import port_rows
from experiments.live import start_sampler, stop_sampler
from experiments.model import Training
from experiments.slowdown import HEADER_BYTES
from experiments.tables import write_csv
from traffic.collective import HELLO

#: Delayed acknowledgements: pure ACK frames per full data segment received (RFC 5681 4.2).
ACKS_PER_SEGMENT = 0.5
#: The hello a rank sends first on every connection it opens (traffic.collective.HELLO).
HELLO_BYTES = HELLO.size
#: link_bytes.csv's columns.
LINK_COLUMNS = ("link", "src", "dst", "rate_mbps", "tensor_bytes", "pipeline_bytes", "data_bytes", "ack_bytes",
                "predicted_bytes", "measured_bytes", "measured_over_predicted", "accounted_bytes",
                "measured_over_accounted", "utilisation")


def jobs(lf, hosts: list[str], tr: Training, out: Path, deadline_unix_s: float, seed: int) -> dict[str, dict]:
    """The ``parallel`` job of every host that runs a rank (traffic.parallel's job)."""
    p = tr.plan()
    out_jobs = coll_agents.host_jobs(lf, hosts, "allreduce", len(hosts), out, deadline_unix_s, seed=seed,
                                 nvlink_ratio=tr.nvlink_ratio)
    for h, j in out_jobs.items():
        j.update({"role": "parallel", "out": str(Path(out) / f"{h}.parallel.json"),
                  "plan": {"ranks": p.ranks, "tensor": p.tensor, "pipeline": p.pipeline,
                           "microbatches": p.microbatches, "activation_bytes": p.activation_bytes},
                  "layers": [[x.name, x.params_bytes, x.forward_s, x.backward_s] for x in tr.model_layers()],
                  "bucket_bytes": tr.bucket_bytes, "iterations": tr.iterations, "overlap": tr.overlap})
    return out_jobs


def run_round(lf, state, tr: Training, out: Path, sample_hz: float, quiet: bool = True, say=print, seed: int = 0,
              sampler_method: str = "auto") -> dict:
    """One round's mixed-parallel iterations on a live fabric, the queue sampler on; then the
    path of every connection that crosses the fabric.

    Returns ``{"hosts", "server_of_rank", "plan", "layers", "stages", "bucket_bytes",
    "iterations", "overlap", "flows" ([kind, src, dst, payload, messages, frames] per iteration),
    "paths" ([src rank, dst rank, data's links [[a, b], ...], acknowledgements' links]), "nic_rate_bps", "nvlink_rate_bps",
    "records_dir", "agent_exit_codes"}`` (JSON-able).

    Raises:
        SetupError: the plan does not fit the ranks' servers, or the agents cannot start.
    """
    hosts = coll_plan.rank_hosts(lf.fabric, tr)
    servers = coll_plan.rank_servers(lf.fabric, hosts)
    lay = coll_plan.layout(hosts, servers)
    plan: Plan = tr.plan()
    try:
        check_placement(plan, lay)
    except ValueError as e:
        raise SetupError(f"training: {e}") from None
    layers = tr.model_layers()
    fl = flows(plan, layers, tr.bucket_bytes)
    nic_bps = 1e6 * min(lf.fabric.host_attachment(h).rate_mbps for h in hosts)
    res = {"hosts": hosts, "server_of_rank": servers, "ranks": plan.ranks,
           "plan": {"tensor": plan.tensor, "pipeline": plan.pipeline, "data": plan.data,
                    "microbatches": plan.microbatches, "activation_bytes": plan.activation_bytes},
           "layers": [[x.name, x.params_bytes, x.forward_s, x.backward_s] for x in layers],
           "stages": stage_layers(layers, plan.pipeline), "bucket_bytes": tr.bucket_bytes,
           "iterations": tr.iterations, "overlap": tr.overlap, "seed": seed,
           "flows": [[f.kind, f.src, f.dst, f.payload_bytes, f.messages, f.frames] for f in fl],
           "nic_rate_bps": nic_bps, "nvlink_rate_bps": tr.nvlink_ratio * nic_bps, "records_dir": str(out / "ranks")}
    d = out / "ranks"
    d.mkdir(parents=True, exist_ok=True)
    sent_bytes_per_host: dict[str, int] = {}
    for f in fl:
        if servers[f.src] != servers[f.dst]:
            sent_bytes_per_host[hosts[f.src]] = sent_bytes_per_host.get(hosts[f.src], 0) + f.payload_bytes
    stage_s = max(sum(layers[i].forward_s + layers[i].backward_s for i in st) for st in res["stages"])
    iteration_estimate_s = (gpipe_compute_s(stage_s, plan.microbatches, plan.pipeline)
                            + 8 * max(sent_bytes_per_host.values(), default=0) / nic_bps)
    deadline = time.time() + min(tr.timeout_s, 30 + 5 * tr.iterations * iteration_estimate_s)
    sampler = start_sampler(lf, state, out, sample_hz, sampler_method)
    try:
        res["agent_exit_codes"] = coll_agents.run_jobs(lf, state, jobs(lf, hosts, tr, d, deadline, seed), "parallel", d,
                                                   deadline)
    finally:
        stop_sampler(sampler)
    fmap = lf.fabric.to_map()
    recs = coll_summary.load_records(d, hosts, "parallel")
    res["paths"] = []
    for r, rec in enumerate(recs):
        for c in (rec or {}).get("connections") or []:
            if servers[r] != servers[c["dst_rank"]]:
                path = paths.traced_path(fmap, hosts[r], hosts[c["dst_rank"]], c["src_port"], c["dst_port"],
                                              trace=lf.datapath.trace_hop)
                back = paths.traced_path(fmap, hosts[c["dst_rank"]], hosts[r], c["dst_port"], c["src_port"],
                                              trace=lf.datapath.trace_hop)
                res["paths"].append([r, c["dst_rank"], [list(k) for k in path], [list(k) for k in back]])
    if not quiet:
        say(format_line(summarize_iterations(res, recs)))
    return res


def predicted_link_bytes(res: dict) -> dict[tuple[str, str], dict[str, int]]:
    """``{(a, b): {kind: bytes, "ack": bytes}}`` over the round (every iteration) on every fabric
    link the plan's flows cross (module docstring); tensor traffic never appears (NVLink)."""
    its = res["iterations"]
    paths = {(s, d): ([tuple(x) for x in fwd], [tuple(x) for x in back]) for s, d, fwd, back in res["paths"]}
    out: dict[tuple[str, str], dict[str, int]] = {}
    for kind, src, dst, payload, messages, frames in res["flows"]:
        if (src, dst) not in paths:
            continue                    # one server: the NVLink channel
        fwd, back = paths[(src, dst)]
        data = its * (payload + frames * HEADER_BYTES)
        acks = math.ceil(its * frames * ACKS_PER_SEGMENT) * HEADER_BYTES
        for a, b in fwd:
            e = out.setdefault((a, b), {})
            e[kind] = e.get(kind, 0) + data
        for a, b in back:
            e = out.setdefault((a, b), {})
            e["ack"] = e.get("ack", 0) + acks
    return out


def accounted_link_bytes(res: dict, tcp: dict) -> dict[tuple[str, str], int]:
    """``{(a, b): bytes}``: the plan's payload on every fabric link with the TCP overhead the
    endpoints counted instead of modelled: every segment the sender sent (``segs_out``, data
    and pure acknowledgements, 66 bytes of headers each) plus its retransmitted bytes on the
    data's links, every segment the receiver sent (its acknowledgements) on the reverse links.
    ``tcp``: ``{(src rank, dst rank): {"sender": counters, "receiver": counters}}``
    (traffic.parallel.wire_counters); a connection without both is left out."""
    its = res["iterations"]
    payload: dict[tuple[int, int], int] = {}
    for _kind, src, dst, nbytes, _m, _f in res["flows"]:
        payload[(src, dst)] = payload.get((src, dst), 0) + nbytes * its
    out: dict[tuple[str, str], int] = {}
    for src, dst, fwd, back in res["paths"]:
        c = tcp.get((src, dst), {})
        snd, rcv = c.get("sender"), c.get("receiver")
        if not snd or not rcv or snd.get("bytes_retrans") is None:
            continue
        there = payload.get((src, dst), 0) + HELLO_BYTES + snd["bytes_retrans"] + snd["segs_out"] * HEADER_BYTES
        for a, b in fwd:
            out[(a, b)] = out.get((a, b), 0) + there
        for a, b in back:
            out[(a, b)] = out.get((a, b), 0) + rcv["segs_out"] * HEADER_BYTES
    return out


def measured_link_bytes(rows: list[dict]) -> dict[tuple[str, str], tuple[int, float]]:
    """``{(a, b): (bytes, rate Mbit/s)}`` from port_counters rows (experiments.features.ports.port_rows):
    a switch's port toward ``b`` sent them (``tx_bytes``), or a host's link into switch ``b``
    (its port's ``rx_bytes``)."""
    out: dict[tuple[str, str], tuple[int, float]] = {}
    switches = {r["switch"] for r in rows}
    for r in rows:
        rate = r["rate_mbps"] or r["nominal_mbps"]
        for key, nbytes in (((r["switch"], r["peer"]), r["tx_bytes"]),
                            ((r["peer"], r["switch"]), r["rx_bytes"] if r["peer"] not in switches else None)):
            if nbytes is not None:
                b, _ = out.get(key, (0, rate))
                out[key] = (b + nbytes, rate)
    return out


def nvlink_rows(res: dict, sent: dict, span_s: float) -> list[dict]:
    """One link_bytes.csv row per server whose GPUs exchange over NVLink (``link`` ``<server>:nvlink``,
    ``src`` = ``dst`` = the server): the plan's bytes by kind between its GPUs beside what its ranks
    counted sending (``sent``: ``{(kind, src rank, dst rank): bytes}`` over the round), utilisation
    against G GPUs' NVLink rate. No frames, no acknowledgements: the channel carries the arrays."""
    where, its = res["server_of_rank"], res["iterations"]
    g = {sv: where.count(sv) for sv in where}
    rows: dict[str, dict] = {}
    for kind, src, dst, payload, _m, _f in res["flows"]:
        if where[src] != where[dst]:
            continue
        sv = where[src]
        r = rows.setdefault(sv, {"link": f"{sv}:nvlink", "src": sv, "dst": sv,
                                 "rate_mbps": res["nvlink_rate_bps"] * g[sv] / 1e6,
                                 **{f"{k}_bytes": 0 for k in KINDS}, "ack_bytes": 0, "measured_bytes": 0})
        r[f"{kind}_bytes"] += payload * its
        r["measured_bytes"] += sent.get((kind, src, dst), 0)
    for r in rows.values():
        r["predicted_bytes"] = sum(r[f"{k}_bytes"] for k in KINDS)
        r["measured_over_predicted"] = r["measured_bytes"] / r["predicted_bytes"] if r["predicted_bytes"] else None
        r["accounted_bytes"] = r["measured_over_accounted"] = None
        r["utilisation"] = 8 * r["measured_bytes"] / (r["rate_mbps"] * 1e6 * span_s) if span_s > 0 else None
    return [rows[k] for k in sorted(rows)]


def link_table(res: dict, ports: dict | None, span_s: float, sent: dict | None = None,
               tcp: dict | None = None) -> list[dict]:
    """link_bytes.csv's rows (:data:`LINK_COLUMNS`): every fabric link the plan uses or the ports
    saw traffic on, predicted bytes by kind beside the measured bytes, the bytes accounted with
    the endpoints' TCP counters (:func:`accounted_link_bytes`, when ``tcp`` is given), and the
    utilisation (measured bits / (rate x ``span_s``), the job's span); then each server's NVLink
    (:func:`nvlink_rows`, when ``sent`` is given). Empty without the round's port counters."""
    if not ports:
        return []
    measured = measured_link_bytes(port_rows("", ports["before"], ports["after"]))
    pred = predicted_link_bytes(res)
    acc = accounted_link_bytes(res, tcp) if tcp else {}
    rows = nvlink_rows(res, sent, span_s) if sent is not None else []
    for (a, b) in sorted(set(pred) | {k for k, v in measured.items() if v[0]}):
        p = pred.get((a, b), {})
        m, rate = measured.get((a, b), (None, None))
        total = sum(p.values())
        rows.append({"link": f"{a}->{b}", "src": a, "dst": b, "rate_mbps": rate,
                     **{f"{k}_bytes": p.get(k, 0) for k in KINDS}, "ack_bytes": p.get("ack", 0),
                     "predicted_bytes": total, "measured_bytes": m,
                     "measured_over_predicted": (m / total) if m is not None and total else None,
                     "accounted_bytes": acc.get((a, b)),
                     "measured_over_accounted": (m / acc[(a, b)]) if m is not None and acc.get((a, b)) else None,
                     "utilisation": (8 * m / (rate * 1e6 * span_s)) if m is not None and rate and span_s > 0 else None})
    return [r for r in rows if r["src"] != r["dst"]] + [r for r in rows if r["src"] == r["dst"]]


def tcp_by_pair(recs: list[dict]) -> dict[tuple[int, int], dict]:
    """``{(src rank, dst rank): {"sender": counters, "receiver": counters}}`` from the ranks'
    ``tcp`` records (traffic.parallel.wire_counters)."""
    out: dict[tuple[int, int], dict] = {}
    for r in recs:
        for c in r.get("tcp") or []:
            if "dst_rank" in c:
                out.setdefault((r["rank"], c["dst_rank"]), {})["sender"] = c
            else:
                out.setdefault((c["src_rank"], r["rank"]), {})["receiver"] = c
    return out


def summarize_iterations(res: dict, recs: list[dict | None] | None = None) -> dict:
    """The job's figures. Per iteration ``time_s``: when its last rank finished, after the previous
    iteration's last rank finished (the first: from the first rank's start); stages overlap in a
    pipeline, so an iteration's first begin to last end would count the overlap twice. Per
    iteration and stage (``stages``), the median rank's ``tensor_s``, ``pipeline_wait_s`` (waiting
    for a neighbour stage's message), ``data_comm_s`` and ``data_exposed_s`` (end - backward's
    end). The summary's figures are medians over the iterations after the first (``steady``
    says which). Also the GPipe compute model, exactness, and whether every rank sent exactly
    what the plan says (``sent_as_planned``, with the totals per kind; ``sent_by_pair``
    ``{(kind, src, dst): bytes}`` and ``tcp_by_pair`` (:func:`tcp_by_pair`), not JSON-able).
    ``complete`` False when a rank failed."""
    recs = recs if recs is not None else coll_summary.load_records(Path(res["records_dir"]), res["hosts"], "parallel")
    p, layers = res["plan"], res["layers"]
    stage_compute = [sum(layers[i][2] + layers[i][3] for i in st) for st in res["stages"]]
    model = gpipe_compute_s(max(stage_compute), p["microbatches"], p["pipeline"])
    base = {"ranks": res["ranks"], **p, "iterations_asked": res["iterations"], "model_compute_s": model,
            "stage_compute_s": stage_compute,
            "bubble_fraction": bubble_fraction(p["microbatches"], p["pipeline"]), "overlap": res["overlap"]}
    if not all(recs) or any(r.get("error") for r in recs):
        errs = [f"rank {i}: {(r or {}).get('error') or 'no record'}" for i, r in enumerate(recs)
                if not r or r.get("error")]
        return {**base, "complete": False, "errors": errs[:4]}
    its, rows = [], []
    prev_end = None
    for it in range(min(len(r["iterations"]) for r in recs)):
        its_r = [(r["stage"], r["iterations"][it]) for r in recs]
        end = max(i["end_unix_s"] for _, i in its_r)
        its.append({"iteration": it, "time_s": end - (prev_end if prev_end is not None
                                                      else min(i["begin_unix_s"] for _, i in its_r))})
        prev_end = end
        for st in range(p["pipeline"]):
            mine = [i for s_, i in its_r if s_ == st]
            rows.append({"iteration": it, "stage": st, "time_s": its[-1]["time_s"],
                         "tensor_s": float(np.median([i["tensor_s"] for i in mine])),
                         "pipeline_wait_s": float(np.median([i["pipeline_wait_s"] for i in mine])),
                         "data_comm_s": float(np.median([sum(b[3] - b[2] for b in i["buckets"]) for i in mine])),
                         "data_exposed_s": float(np.median([i["end_unix_s"] - i["backward_end_unix_s"]
                                                            for i in mine]))})
    want = {(k, s, d): (b * res["iterations"], m * res["iterations"]) for k, s, d, b, m, _ in res["flows"]}
    got = {(k, r["rank"], d): (b, m) for r in recs for k, d, b, m in r["sent"]}
    sent = {k: sum(v[0] for (kk, _, _), v in got.items() if kk == k) for k in KINDS}
    steady = [x["iteration"] for x in (its[1:] or its)]
    by_stage = [{"stage": st, **{k: float(np.median([r[k] for r in rows if r["stage"] == st
                                                         and r["iteration"] in steady]))
                                 for k in ("tensor_s", "pipeline_wait_s", "data_comm_s", "data_exposed_s")}}
                for st in range(p["pipeline"])] if its else []
    return {**base, "time_s": float(np.median([x["time_s"] for x in its if x["iteration"] in steady])) if its else None,
            "steady": steady, "stages": by_stage, "per_iteration": rows, "complete": len(its) == res["iterations"],
            "exact": all(r["exact"]["tensor"] in (True, None) and r["exact"]["data"] in (True, None) for r in recs),
            "sent_as_planned": got == want, "sent_bytes": sent,
            "sent_by_pair": {k: v[0] for k, v in got.items()},
            "tcp_by_pair": tcp_by_pair(recs),
            "span_s": max(i["end_unix_s"] for r in recs for i in r["iterations"])
                      - min(i["begin_unix_s"] for r in recs for i in r["iterations"])}


def summarize(res: dict, ports: dict | None, out: Path, plots: bool = True) -> dict:
    """``parallel.csv`` (one row per iteration), ``link_bytes.csv`` and its heat map; returns the
    ``parallel`` summary section: the job's figures and the links' predicted against measured bytes
    (``links``: links that carry the plan's data; ``worst_link_ratio``: the one furthest from 1;
    ``accounted_ratio_range``: measured / accounted over them)."""
    s = summarize_iterations(res)
    write_csv(out / "parallel.csv", ["iteration", "stage", "time_s", "tensor_s", "pipeline_wait_s", "data_comm_s",
                                     "data_exposed_s"], s.get("per_iteration", []))
    rows = (link_table(res, ports, s.get("span_s", 0.0), s.get("sent_by_pair"), s.get("tcp_by_pair"))
            if s["complete"] else [])
    write_csv(out / "link_bytes.csv", list(LINK_COLUMNS), rows)
    # links that carry the plan's data (a link with acknowledgements only is TCP's, not the plan's)
    planned = [r for r in rows if r["src"] != r["dst"] and r["pipeline_bytes"] + r["data_bytes"] > 0
               and r["measured_over_predicted"]]
    worst = max(planned, key=lambda r: abs(r["measured_over_predicted"] - 1), default=None)
    acc = [r["measured_over_accounted"] for r in planned if r["measured_over_accounted"] is not None]
    unplanned = [r for r in rows if not r["predicted_bytes"]]
    if rows and plots:
        plot.plot_link_heatmap(rows, out / "link_utilisation.png",
                               title=f"tensor {res['plan']['tensor']} x pipeline {res['plan']['pipeline']} x data "
                                     f"{res['plan']['data']}: link utilisation over the job, bytes by kind")
    return {**{k: v for k, v in s.items() if k not in ("per_iteration", "sent_by_pair", "tcp_by_pair")}, "iterations": s.get("per_iteration", []),
            "nvlink_bytes": sum(r["measured_bytes"] for r in rows if r["src"] == r["dst"]),
            "links": len(planned), "worst_link": worst["link"] if worst else None,
            "worst_link_ratio": worst["measured_over_predicted"] if worst else None,
            "accounted_ratio_range": [min(acc), max(acc)] if acc else None,
            "unplanned_bytes_max": max((r["measured_bytes"] or 0 for r in unplanned), default=0)}


def format_line(p: dict) -> str:
    """The terminal line of a round's mixed-parallel results."""
    head = (f"mixed parallel (tensor {p['tensor']} x pipeline {p['pipeline']} x data {p['data']}, "
            f"{p['microbatches']} microbatches)")
    if not p.get("complete"):
        return f"{head}: FAILED ({'; '.join(p.get('errors') or ['see ranks/*.parallel.json'])})"
    steady = p["steady"]
    which = f"iteration {steady[0] + 1}" if len(steady) == 1 else f"median of iterations {steady[0] + 1}-{steady[-1] + 1}"
    stages = "; ".join(f"stage {x['stage']}: tensor AllReduces {x['tensor_s']:.3f} s, waiting on stages "
                       f"{x['pipeline_wait_s']:.3f} s, data-parallel exposed {x['data_exposed_s']:.3f} s"
                       for x in p["stages"])
    line = (f"{head}: an iteration every {p['time_s']:.3f} s ({which}; GPipe compute {p['model_compute_s']:.3f} s, "
            f"bubble {p['bubble_fraction']:.0%}); {stages}; "
            f"{'exact' if p['exact'] else 'NOT EXACT'}, bytes sent {'as planned' if p['sent_as_planned'] else 'NOT AS PLANNED'}")
    if p.get("worst_link_ratio") is not None:
        line += f"; {p['links']} links, measured/predicted furthest from 1 on {p['worst_link']}: {p['worst_link_ratio']:.3f}"
    if p.get("accounted_ratio_range"):
        lo, hi = p["accounted_ratio_range"]
        line += f" (with the endpoints' TCP counters: {lo:.3f} to {hi:.3f})"
    return line
