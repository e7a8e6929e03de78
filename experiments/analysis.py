"""Turn raw agent and sampler output into the results files.

Pure file-in / file-out code (no root): ``collect_flows`` joins the sender
and receiver records of each flow, ``write_results`` writes flows.csv,
flow_samples.csv, queues.csv, ports.csv and summary.json.
"""
from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import numpy as np

from common.stats import QUEUE_PERCENTILES, jain_index, sample_percentiles
from common.units import FRAME_BYTES
from controller.routing import strategy_class
from experiments.fluid import hash_ecmp_aggregate, max_min_rates
from experiments.slowdown import add_ideal_fct, slowdown_summary
from experiments.tables import (FLOW_COLUMNS, load_queue_samples, percentile as _percentile,  # noqa: F401
                                write_csv as _write_csv)
from experiments.model import Scenario
from experiments.section import ResultSection, cell
from traffic.flowsizes import offered_load
from traffic.patterns import PATTERNS


def collect_flows(agent_dir: Path, plan: list[dict], codes: dict[str, int], *,
                  sections: tuple[ResultSection, ...]) -> list[dict]:
    """One row per planned flow (see :data:`FLOW_COLUMNS`), times relative to the common start.

    Args:
        agent_dir: where the agents wrote ``<host>.rx.json`` / ``<host>.tx.json``.
        plan: the flows (traffic.patterns.flow_plan): ``flow_id``, ``src``, ``dst``, ``src_ip``.
        codes: agent exit codes by ``<host>.rx`` / ``<host>.tx`` (named in error rows).
        sections: the result sections (experiments.sections.SECTIONS) whose fields each row
            adds from its sender's and receiver's records (``ResultSection.flow_fields``).

    ``fct_s`` is the receiver's last byte minus the flow's scheduled start (the
    flow completion time): the common start plus the flow's ``start_s`` (the plan's; 0 unless
    its flows arrive over time), which ``first_byte_s`` and ``sender_done_s`` count from too;
    ``start_at_unix_s`` stays the common start, and the receiver's and sender's samples
    (``_samples``, ``_tcp_samples``) are in seconds from it; ``_launch_late_s``: how long after
    its scheduled start the sender connected. ``complete`` is true when every byte sent arrived,
    the connection closed cleanly (UDP: the end marker arrived) and (sized flows) every
    planned byte was sent. UDP flows (``transport`` udp) also carry ``datagrams_sent``,
    ``datagrams_received`` (distinct), ``datagrams_lost`` (their difference: lost in the
    fabric), ``blocked_sends`` and ``host_queue_full`` (the host's back-pressure; traffic.agent).
    Sender and receiver records are joined on (receiving host, source IP, source port): one
    host may use the same source port toward two destinations at once.
    """
    def load(name):
        try:
            return json.loads((Path(agent_dir) / f"{name}.json").read_text())
        except (OSError, ValueError) as e:
            return {"error": f"no result from {name} ({e.__class__.__name__}; exit {codes.get(name)})"}
    rx = {d: load(f"{d}.rx") for d in {f["dst"] for f in plan}}
    tx = {s: load(f"{s}.tx") for s in {f["src"] for f in plan}}
    # keyed per receiving host: the kernel reuses a source port toward different destinations
    by_addr = {(dst, f["src_ip"], f["src_port"]): f for dst, rec in rx.items() for f in rec.get("flows", [])}
    tx_by_id = {f["flow_id"]: (s, f) for s, rec in tx.items() for f in rec.get("flows", [])}
    return [_flow_row(p, tx, rx, tx_by_id, by_addr, sections) for p in plan]


def _flow_row(p: dict, tx: dict, rx: dict, tx_by_id: dict, by_addr: dict,
              sections: tuple[ResultSection, ...]) -> dict:
    """One planned flow's row (:func:`collect_flows`): its sender's record joined with its
    receiver's, then each of ``sections``' fields of the two."""
    row = {k: None for k in FLOW_COLUMNS}
    row.update(flow_id=p["flow_id"], src=p["src"], dst=p["dst"], src_ip=p["src_ip"], start_s=p.get("start_s") or 0.0)
    _, t = tx_by_id.get(p["flow_id"], (None, None))
    if t is None:
        row["error"] = tx[p["src"]].get("error") or f"sender {p['src']} has no record of flow {p['flow_id']}"
    else:
        _sender_fields(row, t, rx[p["dst"]].get("error"))
        f = by_addr.get((p["dst"], p["src_ip"], t.get("src_port")))
        if f is not None:
            _receiver_fields(row, t, f)
        for sec in sections:
            row.update(sec.flow_fields(t, f))
    if row["complete"] is None:
        row["complete"] = False
    return row


def _sender_fields(row: dict, t: dict, receiver_error: str | None) -> None:
    """A flow row's sender half from its sender record ``t`` (times from the flow's scheduled start)."""
    t0 = t["start_at_unix_s"]
    start = t0 + row["start_s"]
    row.update(src_port=t.get("src_port"), bytes_planned=t["bytes_planned"], bytes_sent=t["bytes_sent"],
               start_at_unix_s=t0, congestion_control=t.get("congestion_control"),
               total_retrans=t.get("total_retrans"), rtt_us=t.get("rtt_us"),
               sender_done_s=(t["closed_unix_s"] - start) if t.get("closed_unix_s") else None,
               error=t.get("error") or receiver_error,
               _tcp_samples=[[x[0] - t0] + list(x[1:]) for x in t.get("tcp_samples") or []],
               _launch_late_s=(t["started_unix_s"] - start) if t.get("started_unix_s") else None)
    udp = "datagrams_sent" in t
    row["transport"] = "udp" if udp else "tcp"
    if udp:
        row.update(datagrams_sent=t["datagrams_sent"], blocked_sends=t["blocked_sends"],
                   host_queue_full=t["host_queue_full"], datagrams_received=0,
                   datagrams_lost=t["datagrams_sent"], bytes_received=0)


def _receiver_fields(row: dict, t: dict, f: dict) -> None:
    """A flow row's receiver half from its receiver record ``f`` (the sender's ``t`` for the join)."""
    t0 = t["start_at_unix_s"]
    start = t0 + row["start_s"]
    if row["transport"] == "udp":
        row.update(datagrams_received=f["datagrams_received"],
                   datagrams_lost=t["datagrams_sent"] - f["datagrams_received"])
    row.update(bytes_received=f["bytes"],
               first_byte_s=(f["first_byte_unix_s"] - start) if f["first_byte_unix_s"] else None,
               fct_s=(f["last_byte_unix_s"] - start) if f["last_byte_unix_s"] else None,
               _samples=[(ts - t0, b) for ts, b in f["samples"]])
    row["complete"] = bool(f["eof"] and not row["error"] and f["bytes"] == t["bytes_sent"]
                           and (t["bytes_planned"] is None or t["bytes_sent"] == t["bytes_planned"]))


def queue_percentile_columns(backlog_packets, backlog_bytes) -> dict:
    """The queue percentile columns of one port from its backlog samples in the window.

    Args:
        backlog_packets, backlog_bytes: the sampled backlog (1-D arrays of equal length, packets
            and bytes), already cut to the measurement window.

    Returns:
        ``{"p5_backlog_packets", "p50_backlog_packets", "p95_backlog_packets",
        "p99_backlog_packets", "p5_backlog_bytes", ..., "p99_backlog_bytes",
        "window_samples"}``: sample percentiles (:func:`common.stats.sample_percentiles`;
        every sample weighs the same, which at the sampler's fixed rate is the time-weighted
        distribution to within one sample interval), None each when the window holds no
        sample; ``window_samples`` is how many there were.
    """
    out = {}
    for unit, values in (("packets", backlog_packets), ("bytes", backlog_bytes)):
        pct = sample_percentiles(values, QUEUE_PERCENTILES) or {}
        out.update({f"p{q}_backlog_{unit}": pct.get(f"p{q}") for q in QUEUE_PERCENTILES})
    out["window_samples"] = int(len(backlog_packets))
    return out


#: The queue figures of ports.csv the bottleneck section repeats (besides the port's identity).
QUEUE_COLUMNS = tuple(f"p{q}_backlog_{u}" for u in ("packets", "bytes") for q in QUEUE_PERCENTILES) \
    + ("window_samples",)


def port_summaries(samples: dict, fabric_map: dict, sc: Scenario, window_s: tuple[float, float]) -> list[dict]:
    """Per switch-port figures over the sampled run (rows of ports.csv).

    Args:
        samples: ``{intf: {column: array}}`` (:func:`experiments.tables.load_queue_samples`,
            ``t_s`` from the start).
        window_s: ``(from, to)`` in seconds since the start: the means and the queue
            percentiles (:func:`queue_percentile_columns`) cover the samples inside it;
            totals (bytes, packets, drops) and peaks cover every sample.

    Returns:
        One dict per sampled switch port, in fabric-map order (ports without a sample are left out).
    """
    q = sc.queues
    rows = []
    for sw in fabric_map["switches"]:
        for p in sw["ports"]:
            s = samples.get(p["intf"])
            if s is None or len(s["t_s"]) == 0:
                continue
            lo, hi = window_s
            sel = (s["t_s"] >= lo) & (s["t_s"] <= hi)
            tx = s["tx_bytes_total"]
            dt = s["t_s"][sel][-1] - s["t_s"][sel][0] if sel.sum() > 1 else 0.0
            mean_mbps = (tx[sel][-1] - tx[sel][0]) * 8 / dt / 1e6 if dt > 0 else 0.0
            rows.append({
                "switch": sw["name"], "port": p["port"], "intf": p["intf"], "peer": p["peer"],
                "rate_mbps": p["rate_mbps"], "buffer_bytes": q.buffer_bytes, "buffer_packets": q.buffer_packets,
                "tx_bytes": int(tx[-1] - tx[0]), "tx_packets": int(s["tx_packets_total"][-1] - s["tx_packets_total"][0]),
                "drops": int(s["drops_total"][-1] - s["drops_total"][0]),
                "peak_backlog_bytes": int(s["backlog_bytes"].max()), "peak_backlog_packets": int(s["backlog_packets"].max()),
                "mean_backlog_bytes": float(s["backlog_bytes"][sel].mean()) if sel.any() else 0.0,
                "mean_tx_mbps": mean_mbps, "samples": int(len(s["t_s"])),
                **queue_percentile_columns(s["backlog_packets"][sel], s["backlog_bytes"][sel]),
            })
    return rows


def bottleneck(ports: list[dict]) -> dict | None:
    """The port whose queue held the most over the flows' lifetime (mean backlog; ties: drops).

    The sustained queue, not the peak: in an incast across spines the spine
    ports toward the receiver's leaf see slow-start bursts that can touch
    their buffer too, but only the receiver's port stays full for the run.
    """
    if not ports:
        return None
    return max(ports, key=lambda p: (p["mean_backlog_bytes"], p["drops"], p["peak_backlog_bytes"]))


def bottleneck_summary(bn: dict | None, receiver: str | None,
                       window_s: tuple[float, float] | None = None) -> dict | None:
    """``summary["bottleneck"]`` for the ports.csv row ``bn`` (``receiver``: an incast's, else None):
    the port, its peaks, means and drops, its queue percentiles (:data:`QUEUE_COLUMNS`) and
    ``queue_window_s``, the window ``(from, to)`` in seconds they cover (``window_s``, as given to
    :func:`port_summaries`). None when there is no port."""
    if bn is None:
        return None
    return {**{k: bn[k] for k in ("switch", "intf", "peer", "mean_backlog_bytes", "peak_backlog_bytes",
                                  "peak_backlog_packets", "drops", "buffer_bytes", "buffer_packets", "mean_tx_mbps",
                                  "rate_mbps")},
            **{k: bn.get(k) for k in QUEUE_COLUMNS},
            "queue_window_s": list(window_s) if window_s is not None else None,
            "toward_receiver": (bn["peer"] == receiver) if receiver else None,
            # a buffer of N packets is N full frames' bytes in the byte-limited queues of priority classes
            "within_buffer": (bn["peak_backlog_bytes"] <= bn["buffer_bytes"]) if bn["buffer_bytes"] is not None
            else (bn["peak_backlog_packets"] <= bn["buffer_packets"]
                  or bn["peak_backlog_bytes"] <= bn["buffer_packets"] * FRAME_BYTES)}


def bytes_at(samples: list, t_s: float) -> float:
    """Cumulative bytes a flow had delivered at ``t_s`` (linear between receiver samples; 0 before the first)."""
    if not samples:
        return 0.0
    ts = np.asarray([x[0] for x in samples], dtype=float)
    bs = np.asarray([x[1] for x in samples], dtype=float)
    return float(np.interp(t_s, ts, bs, left=0.0, right=bs[-1]))


#: The shortest window in seconds the throughput and the per-flow rates are measured over; shorter
#: and the throughput takes the whole run, the fairness each flow's bytes over its completion time.
MIN_WINDOW_S = 0.5


def end_s(flow: dict) -> float | None:
    """When a flows.csv row's flow ended, in seconds from the common start: its ``start_s`` (0
    when absent) plus its ``fct_s``; None without an FCT."""
    return None if flow.get("fct_s") is None else (flow.get("start_s") or 0.0) + flow["fct_s"]


def arrives_over_time(flows: list[dict]) -> bool:
    """True when the flows do not all start at the common start (a plan with arrival times,
    ``start_s`` > 0 for some flow)."""
    return any((f.get("start_s") or 0.0) > 0 for f in flows)


def measurement_window(flows: list[dict], sc: Scenario, stopped: bool = False) -> tuple[float, float, str]:
    """The window in which every flow runs: ``(from_s, to_s, kind)`` in seconds since the start.

    From ``measurement.warmup_s`` (slow start left out) to the end of the time-limited flows
    (``traffic.duration_s``) or to the first sized flow completing (after that the mix of active
    flows changes); ``kind`` is ``"all flows running"``. Flows that arrive over time
    (``start_s``) never all run at once: the window is from ``measurement.warmup_s`` to the last
    arrival, while the arrivals keep the offered load up, and ``kind`` is ``"arrivals"``. A
    ``stopped`` round's traffic ended at the stop: the window ends at its last byte (an
    unfinished flow's ``fct_s`` is its last byte's time) when that comes first, and ``kind`` adds
    ``", to the stop"``. When that leaves under :data:`MIN_WINDOW_S` (or no flow completed) it
    is the whole run, from 0 to the last byte, and ``kind`` is ``"whole run"``.

    Args:
        flows: flows.csv rows (``fct_s`` in seconds or None, ``complete``, ``start_s``).
        stopped: the round was stopped by a signal (experiments.live.SignalStop).
    """
    duration = sc.traffic.duration_s
    ends = [end_s(f) for f in flows if f["complete"] and f["fct_s"] is not None]
    t_a, t_b = sc.measurement.warmup_s, (duration if duration else (min(ends) if ends else None))
    kind = "all flows running"
    if arrives_over_time(flows):
        t_b, kind = max(f.get("start_s") or 0.0 for f in flows), "arrivals"
    last_byte = max([end_s(f) for f in flows if f["fct_s"] is not None] or [0.0])
    if stopped and t_b is not None and last_byte < t_b:
        t_b, kind = last_byte, kind + ", to the stop"
    if t_b is None or t_b - t_a < MIN_WINDOW_S:
        return 0.0, last_byte, "whole run"
    return t_a, t_b, kind


def fairness_summary(flows: list[dict], window: tuple[float, float, str]) -> dict:
    """Per-flow steady-state rates and Jain's fairness index over them (``summary["fairness"]``).

    Which rate, and why:

    - ``how`` = ``"all_flows_window"``: when :func:`measurement_window` found a window in which
      every flow runs (``kind`` ``"all flows running"``), each flow's rate is the bytes it
      delivered inside that window over its length (its receiver's cumulative samples,
      interpolated: :func:`bytes_at`). Fairness is about how competing flows share at the same
      time; a window common to all of them compares like with like. Each flow's own mid-life
      would not: in a sized-flow run a flow that was starved lives longer, and the middle of its
      life falls after the others ended, when it has the link to itself, which hides the very
      unfairness the index is for.
    - ``how`` = ``"bytes_over_fct"``: otherwise (short flows such as incast responses that end
      within the warm-up, or less than :data:`MIN_WINDOW_S` of overlap), each flow's
      ``bytes_received`` over its ``fct_s`` (its average rate over its whole life; with the
      synchronized start every flow shares, a flow that got less finishes later).

    A flow with no receiver record (``bytes_received`` None: its agent failed) is left out and
    counted in ``flows_left_out``; a flow that received nothing counts with rate 0.

    Args:
        flows: flows.csv rows, each with ``_samples`` ``[(t_s, bytes_received_total), ...]``
            when the receiver recorded any.
        window: :func:`measurement_window`'s ``(from_s, to_s, kind)``.

    Returns:
        ``{"jain_index" (None without a non-zero rate), "n_flows", "flows_left_out",
        "rate_mbps": {"min", "median", "max"} (None without flows), "how", "window_s"
        ([from, to] in seconds for all_flows_window, else None)}``; rates in Mbit/s of payload.
    """
    t_a, t_b, kind = window
    counted = [f for f in flows if f.get("bytes_received") is not None]
    if kind.startswith("all flows running"):        # to the stop, too
        how, window_s = "all_flows_window", [t_a, t_b]
        rates = [(bytes_at(f.get("_samples") or [], t_b) - bytes_at(f.get("_samples") or [], t_a)) * 8
                 / (t_b - t_a) / 1e6 for f in counted]
    else:
        how, window_s = "bytes_over_fct", None
        counted = [f for f in counted if f["bytes_received"] == 0 or f.get("fct_s")]
        rates = [f["bytes_received"] * 8 / f["fct_s"] / 1e6 if f["bytes_received"] else 0.0 for f in counted]
    x = np.asarray(rates, dtype=float)
    return {"jain_index": jain_index(x) if x.any() else None, "n_flows": len(rates),
            "flows_left_out": len(flows) - len(rates),
            "rate_mbps": {"min": float(x.min()), "median": float(np.median(x)), "max": float(x.max())}
            if len(x) else None,
            "how": how, "window_s": window_s}


def throughput_summary(flows: list[dict], fabric_map: dict, plan: list[dict], sc: Scenario,
                       samples: dict | None = None, stopped: bool = False) -> dict:
    """Delivered throughput while every flow is running, and the fluid model's prediction.

    The window is :func:`measurement_window`'s: from ``measurement.warmup_s`` after the start
    (slow start left out) to the end of the time-limited flows, or to the first sized flow
    completing (after that the mix of active flows, which the model assumes,
    changes). Sized flows give short, noisy windows: measure throughput with
    time-limited flows (``traffic.duration_s``) and completion times with sized ones.
    If that leaves under 0.5 s the whole run (start to last byte) is used and
    ``window`` says so. The model is :func:`experiments.fluid.max_min_rates`
    (max-min fair rates with ideal ECMP) for the same flows.

    Two measures of the same window: ``aggregate_mbps`` is TCP payload
    delivered to the receiving applications (goodput; at most 1448/1514 of a
    link's rate with full-size frames), ``wire_aggregate_mbps`` is every byte
    the switches sent down the receiving hosts' links (Ethernet frames as the
    link rate counts them, the ACKs of the hosts' own uploads included), from
    the queue sampler's transmit counters (``samples``, as load_queue_samples).

    Flows that arrive over time (``start_s``; the window is then the arrivals', see
    :func:`measurement_window`) have no fluid model: ``model`` is ``"offered"`` and
    ``model_aggregate_mbps`` the payload rate the plan offers (its bytes over the span of its
    arrivals), which a fabric that keeps up delivers; otherwise ``model`` is ``"fluid"``.

    The model follows the run's routing strategy: its ideal spread (with ``ecmp``, the ideal split
    over equal-cost paths; with ``valiant``, over its intermediate groups too), and, for a
    strategy that hashes flows (``HASHED``: ``ecmp``, ``valiant``), the hash model
    (:func:`experiments.fluid.hash_ecmp_aggregate`) that pins each flow to one path as a random
    hash would (its median is what per-flow hashing can reach); with ``single``, the one path
    per destination (no hash model: None).

    Returns:
        ``{"window", "window_s", "aggregate_mbps", "wire_aggregate_mbps", "sending_hosts", "model",
        "per_sending_host_mbps", "host_rate_mbps", "fraction_of_hosts_x_host_rate",
        "wire_fraction_of_hosts_x_host_rate", "model_aggregate_mbps", "measured_over_model",
        "hash_ecmp_model_aggregate_mbps": {median, p10, p90}, "per_flow_mbps": {min, p10, median, max},
        "jain_index_per_flow"}`` (Mbit/s).
    """
    t_a, t_b, kind = measurement_window(flows, sc, stopped)
    span = max(t_b - t_a, 1e-9)
    per_flow = [(bytes_at(f.get("_samples") or [], t_b) - bytes_at(f.get("_samples") or [], t_a)) * 8 / span / 1e6
                for f in flows]
    agg = float(sum(per_flow))
    senders = sorted({p["src"] for p in plan})
    rate_of = {h["name"]: h["rate_mbps"] for h in fabric_map["hosts"]}
    line = sum(rate_of[s] for s in senders)
    routing = sc.routing.mode
    model, hashed, model_kind = _throughput_model(flows, fabric_map, plan, sc)
    wire = _wire_mbps(samples, fabric_map, plan, t_a, t_b) if samples else None
    x = np.asarray(per_flow, dtype=float)
    jain = jain_index(x) if len(x) and x.any() else None
    return {
        "window": kind, "window_s": [t_a, t_b], "aggregate_mbps": agg, "wire_aggregate_mbps": wire,
        "sending_hosts": len(senders), "per_sending_host_mbps": agg / len(senders) if senders else 0.0,
        "host_rate_mbps": statistics.mode([rate_of[s] for s in senders]) if senders else None,
        "fraction_of_hosts_x_host_rate": agg / line if line else None,
        "wire_fraction_of_hosts_x_host_rate": wire / line if line and wire is not None else None,
        "hash_ecmp_model_aggregate_mbps": hashed, "model_routing": routing, "model": model_kind,
        "model_aggregate_mbps": float(sum(model)), "model_per_sending_host_mbps": float(sum(model)) / len(senders),
        "measured_over_model": agg / sum(model) if sum(model) else None,
        "per_flow_mbps": {"min": float(x.min()), "p10": _percentile(x, 10), "median": _percentile(x, 50),
                          "max": float(x.max())} if len(x) else None,
        "jain_index_per_flow": jain,
    }


def _throughput_model(flows: list[dict], fabric_map: dict, plan: list[dict], sc: Scenario) -> tuple:
    """``(per-flow model rates in Mbit/s, the hash-ECMP model or None, "fluid" or "offered")`` for
    :func:`throughput_summary`."""
    routing = sc.routing.mode
    if arrives_over_time(flows):
        # flows arriving over time never all run at once: what the links carry is what the plan
        # offers (its bytes over its arrivals' span), not the fluid model of every flow at once
        last = max(p.get("start_s") or 0.0 for p in plan)
        return ([sum(p["bytes"] or 0 for p in plan) * 8 / last / 1e6] if last > 0 else [0.0]), None, "offered"
    pairs = [(p["src"], p["dst"]) for p in plan]
    # a strategy without hashing (single) has no hash model: its model is its fixed paths
    hashed = (hash_ecmp_aggregate(fabric_map, pairs, seed=sc.seed, routing=routing)
              if strategy_class(routing).HASHED else None)
    return max_min_rates(fabric_map, pairs, routing), hashed, "fluid"


def _wire_mbps(samples: dict, fabric_map: dict, plan: list[dict], t_a: float, t_b: float) -> float | None:
    """Every byte the switches sent down the receiving hosts' links between ``t_a`` and ``t_b`` (s),
    in Mbit/s, from the queue sampler's transmit counters; None when a link has no samples."""
    receivers = {q["dst"] for q in plan}
    down = {p["intf"] for sw in fabric_map["switches"] for p in sw["ports"] if p["peer"] in receivers}
    total = 0.0
    for intf in down:
        smp = samples.get(intf)
        if smp is None or len(smp["t_s"]) < 2:
            return None
        total += float(np.interp(t_b, smp["t_s"], smp["tx_bytes_total"]) - np.interp(t_a, smp["t_s"], smp["tx_bytes_total"]))
    return total * 8 / max(t_b - t_a, 1e-9) / 1e6


#: tcp_samples.csv: each TCP sender's live connections sampled from TCP_INFO (traffic.agent.tcp_sample).
TCP_SAMPLE_COLUMNS = ("t_s", "flow_id", "src", "cwnd_segments", "rtt_ms", "ssthresh_segments", "total_retrans",
                      "delivery_rate_mbps")


def write_tcp_samples(path: Path, flows: list[dict]) -> int:
    """Write every flow's TCP_INFO samples (``_tcp_samples``: ``[t_s, snd_cwnd, rtt_us, snd_ssthresh,
    total_retrans, delivery_rate_Bps]``, times from the common start) as :data:`TCP_SAMPLE_COLUMNS`:
    the congestion window and ssthresh in segments, the smoothed RTT in ms, the delivery rate in
    Mbit/s (an ssthresh of 2^31 - 1, "not set yet", is left empty). Returns the rows written."""
    n = 0
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(TCP_SAMPLE_COLUMNS)
        for fl in flows:
            for t, cwnd, rtt_us, ssth, retr, rate in fl.get("_tcp_samples") or []:
                w.writerow((f"{t:.6f}", fl["flow_id"], fl["src"], cwnd, f"{rtt_us / 1000:.3f}",
                            "" if ssth is None or ssth >= 2**31 - 1 else ssth, retr,
                            "" if rate is None else f"{rate * 8 / 1e6:.4f}"))
                n += 1
    return n


def write_results(out: Path, sc: Scenario, fabric_map: dict, flows: list[dict], timings: dict,
                  plan: list[dict], receiver_bottleneck_reason: str | None = None, stopped: bool = False, *,
                  sections: tuple[ResultSection, ...]) -> dict:
    """Write flows.csv, flow_samples.csv, queues.csv and ports.csv into ``out``; return the round's
    summary (the run loop writes summary.json once, after the features added their sections).
    The hosts' TCP settings come from the round's environment.json (``host_config``), with each
    of ``sections``' (experiments.sections.SECTIONS) part of them (:func:`hosts_tcp`).

    ``receiver_bottleneck_reason`` (a feature's round option, e.g. a lossless class paused
    upstream): the bottleneck is the port toward the receiver, not the one that held the most
    (queues held upstream can hold more, but they wait; they are not where the congestion is);
    ``bottleneck.chosen`` then says so, with the reason. ``stopped`` (a
    signal stopped the round): throughput and fairness are measured up to the stop
    (:func:`measurement_window`)."""
    out = Path(out)
    starts = [f["start_at_unix_s"] for f in flows if f["start_at_unix_s"] is not None]
    t0 = min(starts) if starts else 0.0
    write_flow_samples(out / "flow_samples.csv", flows)
    write_tcp_samples(out / "tcp_samples.csv", flows)
    ends = [end_s(f) for f in flows if f["fct_s"] is not None]
    end = max(ends) if ends else 0.0
    env = json.loads((out / "environment.json").read_text())
    ideal = add_ideal_fct(flows, plan, fabric_map, env, sc.routing.mode, sc.queues.burst_bytes)
    _write_csv(out / "flows.csv", FLOW_COLUMNS, flows)
    samples, ports = write_port_tables(out, sc, fabric_map, t0, end)
    receiver = PATTERNS[sc.traffic.pattern].receiver(sc.traffic)      # every flow ends there, or None
    bn, chosen = choose_bottleneck(ports, receiver, receiver_bottleneck_reason)
    receiver_leaf = next((h["switch"] for h in fabric_map["hosts"] if h["name"] == receiver), None)
    sampler = json.loads((out / "sampler.json").read_text())
    summary = {
        "scenario": sc.name,
        "pattern": sc.traffic.pattern,
        "flows_kind": "time-limited" if sc.traffic.duration_s else "sized",
        "topology": dict(sc.topology.model_dump(), oversubscription=fabric_map["params"].get("oversubscription")),
        "routing": env.get("routing"),
        "datapath": env["datapath"],
        "kernel": env["kernel"],
        "scale": env.get("scale"),
        "flows": flows_summary(flows),
        "bottleneck": bottleneck_summary(bn, receiver, (0.0, end)) if chosen is None
        else dict(bottleneck_summary(bn, receiver, (0.0, end)), chosen=chosen),
        # bytes each spine carried down to the receiver's leaf: shows how ECMP split the traffic toward it
        "ecmp_split_tx_bytes": ({p["intf"]: p["tx_bytes"] for p in ports if p["peer"] == receiver_leaf}
                                if receiver is not None else {}),
        "throughput": throughput_summary(flows, fabric_map, plan, sc, samples, stopped),
        "fairness": fairness_summary(flows, measurement_window(flows, sc, stopped)),
        "total_drops": sum(p["drops"] for p in ports),
        "sampler": sampler,
        "timings_s": timings,
        "hosts_tcp": hosts_tcp(env, sections=sections),
    }
    sd = slowdown_summary(flows, plan, ideal)
    if sd is not None:
        summary["slowdown"] = sd
    if arrives_over_time(flows):
        summary["arrivals"] = arrivals_summary(flows, plan, fabric_map)
    return summary


def write_flow_samples(path: Path, flows: list[dict]) -> None:
    """flow_samples.csv: every flow's received-bytes samples (``t_s`` from the common start)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("t_s", "flow_id", "src", "bytes_received_total"))
        for fl in flows:
            for t, b in fl.get("_samples") or []:
                w.writerow((f"{t:.6f}", fl["flow_id"], fl["src"], b))


def flows_summary(flows: list[dict]) -> dict:
    """``summary["flows"]``: count, completeness, bytes, each flow's figures, completion-time
    percentiles (s), the congestion controls the live flows used, the errors."""
    fcts = [f["fct_s"] for f in flows if f["fct_s"] is not None]
    return {
        "count": len(flows),
        "all_complete": all(f["complete"] for f in flows),
        "bytes_sent": sum(f["bytes_sent"] or 0 for f in flows),
        "bytes_received": sum(f["bytes_received"] or 0 for f in flows),
        "per_flow": [{**{k: f[k] for k in ("flow_id", "src", "dst", "bytes_sent", "bytes_received", "fct_s",
                                           "complete", "total_retrans")},
                      "throughput_mbps": (f["bytes_received"] * 8 / f["fct_s"] / 1e6)
                      if f["bytes_received"] and f["fct_s"] else None} for f in flows],
        "fct_median_s": _percentile(fcts, 50), "fct_p99_s": _percentile(fcts, 99),
        "fct_max_s": max(fcts) if fcts else None,
        "congestion_control_on_live_flows": sorted({f["congestion_control"] for f in flows if f["congestion_control"]}),
        "errors": [f["error"] for f in flows if f["error"]],
    }


def arrivals_summary(flows: list[dict], plan: list[dict], fabric_map: dict) -> dict:
    """``summary["arrivals"]`` of a plan whose flows arrive over time (``start_s``): ``flows``,
    ``last_start_s`` (seconds from the start), ``offered_load`` (the plan's bytes over the
    arrivals' span and every host's link rate: traffic.flowsizes.offered_load; the planned load
    is the scenario's ``traffic.load``), ``offered_mbps`` (the same in Mbit/s of payload), and
    ``launch_late_s`` ``{median, p99, max}``: how long after its scheduled start each sender
    connected (the agents' timing; an FCT counts from the scheduled start)."""
    rates = [h["rate_mbps"] * 1e6 for h in fabric_map["hosts"]]
    arrivals = [(p.get("start_s") or 0.0, p["bytes"] or 0) for p in plan]
    last = max((t for t, _ in arrivals), default=0.0)
    late = [f["_launch_late_s"] for f in flows if f.get("_launch_late_s") is not None]
    return {"flows": len(plan), "last_start_s": last,
            "offered_load": offered_load(arrivals, len(rates), sum(rates) / len(rates)) if rates else None,
            "offered_mbps": sum(b for _, b in arrivals) * 8 / last / 1e6 if last > 0 else None,
            "launch_late_s": {"median": _percentile(late, 50), "p99": _percentile(late, 99),
                              "max": max(late) if late else None}}


def write_port_tables(out: Path, sc: Scenario, fabric_map: dict, t0_unix_s: float,
                      window_end_s: float) -> tuple[dict, list[dict]]:
    """The queue files of a round's folder ``out``: the sampler's ``queues_raw.csv`` becomes
    ``queues.csv`` (``t_s`` in seconds from ``t0_unix_s``, the common start; once: the raw file
    is removed), and ``ports.csv`` (:func:`port_summaries` over the window ``(0, window_end_s)``
    in seconds from the start).

    Every figure comes from queues.csv, so ``python -m experiments analyze`` later computes the
    same figures from the same file.

    Returns:
        ``(samples, ports)``: :func:`experiments.tables.load_queue_samples` of queues.csv and
        the ports.csv rows.
    """
    out = Path(out)
    raw = out / "queues_raw.csv"
    if raw.exists():
        _write_queues(out / "queues.csv", load_queue_samples(raw, t0_unix_s))
        raw.unlink()
    samples = load_queue_samples(out / "queues.csv", 0.0)
    ports = port_summaries(samples, fabric_map, sc, (0.0, window_end_s))
    _write_csv(out / "ports.csv", list(ports[0].keys()) if ports else ["intf"], ports)
    return samples, ports


def choose_bottleneck(ports: list[dict], receiver: str | None,
                      receiver_bottleneck_reason: str | None = None) -> tuple[dict | None, str | None]:
    """The round's bottleneck among the ports.csv rows: ``(row, chosen)``. The port that held the
    most (:func:`bottleneck`, ``chosen`` None); with a ``receiver_bottleneck_reason`` (a feature's:
    queues held upstream can hold more, but they wait, they are not where the congestion is) and
    an incast's ``receiver``, the port toward the receiver instead (``chosen``:
    ``the receiver's port (<reason>)``)."""
    if receiver_bottleneck_reason and receiver:
        toward = next((p for p in ports if p["peer"] == receiver), None)
        if toward is not None:
            return toward, f"the receiver's port ({receiver_bottleneck_reason})"
    return bottleneck(ports), None


def hosts_tcp(env: dict, *, sections: tuple[ResultSection, ...]) -> list:
    """The distinct TCP settings the hosts had (the round's environment.json ``host_config``),
    sorted: each a tuple of the congestion control's name, then each of ``sections``' values
    (``ResultSection.host_tcp_settings``), in the sections' order."""
    return sorted({(v["tcp_congestion_control"], *(x for sec in sections for x in sec.host_tcp_settings(v)))
                   for v in (env.get("host_config") or {}).values()})


def _write_queues(path: Path, samples: dict) -> None:
    """queues.csv: every sample of every port (as load_queue_samples), in time order."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("t_s", "intf", "backlog_bytes", "backlog_packets", "drops_total", "tx_bytes_total",
                    "tx_packets_total"))
        rows = []
        for intf, s in samples.items():
            for k in range(len(s["t_s"])):
                rows.append((s["t_s"][k], intf, int(s["backlog_bytes"][k]), int(s["backlog_packets"][k]),
                             int(s["drops_total"][k]), int(s["tx_bytes_total"][k]), int(s["tx_packets_total"][k])))
        rows.sort(key=lambda r: r[0])
        w.writerows((f"{r[0]:.6f}",) + r[1:] for r in rows)


def format_summary(summary: dict, out: Path, *, sections: tuple[ResultSection, ...]) -> str:
    """A short human-readable summary for the terminal; each of ``sections``
    (experiments.sections.SECTIONS) adds its line after the bottleneck's (or the throughput's)."""
    f = summary["flows"]
    bn = summary["bottleneck"] or {}
    buf = f"{bn.get('buffer_packets')} packets" if bn.get("buffer_packets") else f"{bn.get('buffer_bytes')} bytes"
    lines = [
        "",
        f"== fabriclab: {summary['scenario']} ({summary['datapath']} datapath, kernel {summary['kernel']}) ==",
        f"flows: {f['count']}, all complete: {f['all_complete']}, bytes sent {f['bytes_sent']} / received {f['bytes_received']}",
        (f"completion time: median {f['fct_median_s']:.3f} s, p99 {f['fct_p99_s']:.3f} s" if f["fct_median_s"] is not None
         else "completion time: none") + "; " + _fairness_clause(summary.get("fairness"))
        + ("\n" + _slowdown_line(summary) if summary.get("slowdown") else ""),
        f"bottleneck: {bn.get('intf')} (toward {bn.get('peer')}), peak backlog {bn.get('peak_backlog_packets')} packets "
        f"/ {bn.get('peak_backlog_bytes')} B (buffer {buf}), drops {bn.get('drops')}" + _queue_clause(bn),
        ("ECMP split toward the receiver's leaf: " + ", ".join(
            f"{k} {v / 1e6:.2f} MB" for k, v in summary["ecmp_split_tx_bytes"].items())) if summary.get("ecmp_split_tx_bytes")
        else _throughput_line(summary.get("throughput")),
        "\n".join(x for x in (s.line(summary) for s in sections) if x),
        f"sampler: {summary['sampler']['achieved_hz']:.0f} Hz on {summary['sampler']['interfaces']} ports, "
        f"{100 * summary['sampler']['cpu_fraction_of_one_core']:.1f}% of one core",
        f"time: set-up {summary['timings_s'].get('setup_s', 0):.1f} s, traffic {summary['timings_s'].get('traffic_s', 0):.1f} s",
        f"results: {out}",
    ]
    return "\n".join(lines)


def _slowdown_line(summary: dict) -> str:
    """``summary["slowdown"]`` (and ``arrivals``) in one line, e.g. ``FCT slowdown: median 1.9, p99
    14.2 over 1750 flows; by size (median/p99): <10KB 1.4/6.1, 10KB-100KB 2.0/9.8; offered load
    0.49, launches late by at most 1.2 ms``."""
    sd, arr = summary["slowdown"], summary.get("arrivals")

    def f(v):
        return "-" if v is None else f"{v:.2g}" if v < 10 else f"{v:.0f}"
    line = (f"FCT slowdown: median {f(sd['median'])}, p99 {f(sd['p99'])} over {sd['flows']} flows; by size "
            "(median/p99): " + ", ".join(f"{b['bucket']} {f(b['median'])}/{f(b['p99'])}" for b in sd["by_size"]))
    if arr and arr.get("offered_load") is not None:
        late = (arr.get("launch_late_s") or {}).get("max")
        line += f"; offered load {arr['offered_load']:.2f}" + (f", launches late by at most {1e3 * late:.1f} ms"
                                                               if late is not None else "")
    return line


def _fairness_clause(fa: dict | None) -> str:
    """``summary["fairness"]`` in a few words, e.g. ``Jain's index 0.93 over 128 flows (1.2 / 1.6 /
    2.0 Mbit/s min/median/max, in the window 2.0-8.0 s)``."""
    if not fa:
        return "fairness: not measured"
    if fa.get("jain_index") is None:
        return "fairness: no flow delivered anything"
    r = fa["rate_mbps"]
    how = (f"in the window {fa['window_s'][0]:.1f}-{fa['window_s'][1]:.1f} s" if fa["how"] == "all_flows_window"
           else "bytes / completion time")
    left = f", {fa['flows_left_out']} without a record left out" if fa.get("flows_left_out") else ""
    return (f"Jain's index {fa['jain_index']:.3f} over {fa['n_flows']} flows ({r['min']:.2f} / {r['median']:.2f} / "
            f"{r['max']:.2f} Mbit/s min/median/max, {how}{left})")


def _queue_clause(bn: dict) -> str:
    """The bottleneck queue's p50/p95/p99 in packets, when the summary has them."""
    if bn.get("p50_backlog_packets") is None:
        return ""
    return (f", queue p50/p95/p99 {bn['p50_backlog_packets']:.0f}/{bn['p95_backlog_packets']:.0f}/"
            f"{bn['p99_backlog_packets']:.0f} packets")


def _throughput_line(tp: dict | None) -> str:
    if not tp:
        return "throughput: not measured"
    return (f"throughput ({tp['window']}, {tp['window_s'][0]:.1f}-{tp['window_s'][1]:.1f} s): aggregate "
            f"{tp['aggregate_mbps']:.1f} Mbit/s = {tp['per_sending_host_mbps']:.2f} per sending host "
            f"({100 * (tp['fraction_of_hosts_x_host_rate'] or 0):.0f}% of line rate as payload, "
            f"{100 * (tp['wire_fraction_of_hosts_x_host_rate'] or 0):.0f}% as frames on the wire); "
            + (f"the arrivals offered {tp['model_aggregate_mbps']:.1f} Mbit/s" if tp.get("model") == "offered" else
               "fluid model "
               + (f"{tp['model_aggregate_mbps']:.1f} Mbit/s ideal {tp.get('model_routing') or 'ecmp'}, "
                  f"{tp['hash_ecmp_model_aggregate_mbps']['median']:.1f} hashed"
                  if tp.get("hash_ecmp_model_aggregate_mbps") else
                  f"{tp['model_aggregate_mbps']:.1f} Mbit/s on the {tp.get('model_routing') or 'ecmp'} paths"))
            + f" (payload measured/model {tp['measured_over_model'] or 0:.2f})")


def ecmp_balance(flows_per_path: dict[str, int]) -> dict:
    """Pearson's chi-square test of flow counts per equal-cost path against an even split.

    Args:
        flows_per_path: ``{path label: number of flows that took it}``, every
            equal-cost path listed (zero counts included), at least 2 paths.

    Returns:
        ``{"flows", "paths", "counts", "chi2", "p_value", "max_over_mean"}``;
        ``p_value`` > 0.01 means the split is consistent with a fair hash (case C5).

    Raises:
        ValueError: fewer than two paths or no flows.
    """
    from scipy.stats import chisquare  # scipy.stats loads in ~0.7 s: only the ECMP balance test needs it
    counts = [int(flows_per_path[k]) for k in sorted(flows_per_path)]
    if len(counts) < 2 or sum(counts) == 0:
        raise ValueError(f"need >= 2 paths and >= 1 flow, got {flows_per_path}")
    res = chisquare(counts)
    mean = sum(counts) / len(counts)
    return {"flows": sum(counts), "paths": len(counts), "counts": dict(sorted(flows_per_path.items())),
            "chi2": float(res.statistic), "p_value": float(res.pvalue), "max_over_mean": max(counts) / mean}


def queue_after_first_rtt(queues_csv: Path, intf: str, rtt_s: float, end_s: float, rate_bps: float,
                          buffer_bytes: float) -> dict:
    """Median and p99 of ``intf``'s sampled backlog after the first round trip's burst, to ``end_s``.

    The first round trip's burst (every sender's initial window at once) arrives within the idle
    RTT plus the time a full buffer takes to drain; its peak is the largest backlog in that
    span, and it is over once that peak has drained at the port's rate. The window starts
    there (``from_s``; never before the idle RTT)."""
    s = load_queue_samples(queues_csv, 0.0).get(intf)
    if s is None:
        return {}
    first = (s["t_s"] >= 0) & (s["t_s"] <= rtt_s + buffer_bytes * 8 / rate_bps)
    start = rtt_s
    if first.any():
        k = int(np.argmax(np.where(first, s["backlog_bytes"], -1)))
        start = max(rtt_s, float(s["t_s"][k]) + float(s["backlog_bytes"][k]) * 8 / rate_bps)
    sel = (s["t_s"] >= start) & (s["t_s"] <= end_s)
    b = s["backlog_bytes"][sel]
    p = s["backlog_packets"][sel]
    if not len(b):
        return {}
    return {"from_s": start, "to_s": end_s, "samples": int(len(b)),
            "median_bytes": float(np.median(b)), "p99_bytes": _percentile(b, 99),
            "median_packets": float(np.median(p)), "p99_packets": _percentile(p, 99)}


def queue_in_window(queues_csv: Path, intf: str, from_s: float, to_s: float, rate_bps: float,
                    kmin_bytes: int, kmax_bytes: int) -> dict:
    """``intf``'s sampled queue and transmit rate from ``from_s`` to ``to_s`` (seconds of the
    round), against a marking band [``kmin_bytes``, ``kmax_bytes``] (a RED profile's Kmin/Kmax).

    Returns ``{}`` without two samples in the window, else ``from_s``, ``to_s``, ``samples``,
    ``p5_packets``, ``median_packets``, ``p95_packets``, ``median_bytes``, the shares of samples
    with the backlog in the band (``in_band_share``), below Kmin (``below_kmin_share``) and above
    Kmax (``above_kmax_share``), and ``utilisation``: the bytes the port sent over the window
    (its ``tx_bytes_total`` counter) against ``rate_bps`` x the window."""
    s = load_queue_samples(queues_csv, 0.0).get(intf)
    if s is None:
        return {}
    sel = (s["t_s"] >= from_s) & (s["t_s"] <= to_s)
    if int(sel.sum()) < 2:
        return {}
    t, b, p, tx = s["t_s"][sel], s["backlog_bytes"][sel], s["backlog_packets"][sel], s["tx_bytes_total"][sel]
    n = len(b)
    return {"from_s": float(t[0]), "to_s": float(t[-1]), "samples": n,
            "p5_packets": _percentile(p, 5), "median_packets": float(np.median(p)), "p95_packets": _percentile(p, 95),
            "median_bytes": float(np.median(b)),
            "in_band_share": float(((b >= kmin_bytes) & (b <= kmax_bytes)).sum()) / n,
            "below_kmin_share": float((b < kmin_bytes).sum()) / n,
            "above_kmax_share": float((b > kmax_bytes).sum()) / n,
            "utilisation": float(tx[-1] - tx[0]) * 8 / (float(t[-1] - t[0]) * rate_bps) if t[-1] > t[0] else None}


#: rounds.csv's common columns (the result sections place theirs among and after them).
ROUND_COLUMNS = ("round", "variant", "seed", "round_index", "congestion_control", "flows_complete",
                 "fct_median_s", "fct_p99_s", "bottleneck_drops", "total_drops", "peak_backlog_packets",
                 "bottleneck_mean_tx_mbps", "bottleneck_intf", "jain_index", "fairness_how")


def round_columns(sections: tuple[ResultSection, ...]) -> tuple[str, ...]:
    """rounds.csv's columns: :data:`ROUND_COLUMNS` with each of ``sections``' placed columns right
    after the one it names (``ResultSection.placed``), then each section's other columns, then
    ``stopped``."""
    cols = []
    for c in ROUND_COLUMNS:
        cols.append(c)
        cols += [x for sec in sections for x in sec.placed.get(c, ())]
    return tuple(cols) + tuple(c for sec in sections for c in sec.columns) + ("stopped",)


def round_row(i: int, name: str, s: dict, variant: str | None = None, seed: int | None = None, *,
              sections: tuple[ResultSection, ...]) -> dict:
    """One row of rounds.csv from round ``i``'s (0-based) summary ``s``: the round's ``name``,
    ``variant`` (default: its name) and ``seed`` first (experiments.tables.LABEL_COLUMNS), then
    ``round_index`` (1-based) and its figures, each result section's columns
    (experiments.section.ResultSection.row); ``stopped`` last (why the round's traffic was
    cut short, e.g. ``SIGTERM``; empty for a round that ran to its end)."""
    bn, f, fa = s.get("bottleneck") or {}, s["flows"], s.get("fairness") or {}
    if seed is None:
        seed = next((x for x in (sec.seed(s) for sec in sections) if x is not None), None)
    common = {"round": name, "variant": variant or name, "seed": seed, "round_index": i + 1,
              "congestion_control": ",".join(f["congestion_control_on_live_flows"]),
              "flows_complete": f["all_complete"],
              "fct_median_s": f["fct_median_s"], "fct_p99_s": f["fct_p99_s"], "bottleneck_drops": bn.get("drops"),
              "total_drops": s["total_drops"], "peak_backlog_packets": bn.get("peak_backlog_packets"),
              "bottleneck_mean_tx_mbps": bn.get("mean_tx_mbps"), "bottleneck_intf": bn.get("intf"),
              "jain_index": fa.get("jain_index"), "fairness_how": fa.get("how"), "stopped": s.get("stopped")}
    values = dict(common, **{k: v for sec in sections for k, v in sec.row(s).items()})
    return {c: values[c] for c in round_columns(sections)}


def write_rounds(out: Path, summaries: list[dict], dirs: list[Path] | None = None,
                 rounds: list | None = None, *, sections: tuple[ResultSection, ...]) -> list[dict]:
    """rounds.json and rounds.csv: one row per round (:func:`round_row`), folders under ``rounds/``
    (``dirs``, one per summary; default: every folder there, in order), each round's variant and
    seed from ``rounds`` (experiments.model.Round, one per summary; default: the folder's name as
    both round and variant); rounds.json also holds what each result section compares across the
    rounds (experiments.section.ResultSection.across_rounds)."""
    out = Path(out)
    dirs = [Path(d) for d in dirs] if dirs is not None else sorted((out / "rounds").iterdir())
    rnds = list(rounds) if rounds is not None else [None] * len(dirs)
    rows = [dict(round_row(i, d.name.split("-", 1)[1], s, getattr(r, "variant", None), getattr(r, "seed", None),
                           sections=sections), folder=f"rounds/{d.name}")
            for i, (d, s, r) in enumerate(zip(dirs, summaries, rnds))]
    _write_csv(out / "rounds.csv", list(round_columns(sections)) + ["folder"], rows)
    doc = {"rounds": rows}
    for sec in sections:
        doc.update(sec.across_rounds(rows))
    (out / "rounds.json").write_text(json.dumps(doc, indent=2, default=str))
    return rows


def format_rounds(out: Path, *, sections: tuple[ResultSection, ...]) -> str:
    """The rounds side by side, for the terminal: the round, its drops, FCT and rate, with each of
    ``sections``' cells after the common column it names (``ResultSection.round_cells``)."""
    rows = json.loads((Path(out) / "rounds.json").read_text())["rounds"]
    extra = [c for sec in sections for c in sec.round_cells(rows)]

    def after(col: str) -> list:
        return [(head, cells) for anchor, head, cells in extra if anchor == col]
    common = (("round", f"{'round':<16}", lambda r: f"{r['round'][:16]:<16}"),
              ("drops", f" {'drops':>6}", lambda r: f" {cell(r['bottleneck_drops'], 'd'):>6}"),
              ("FCT", f" {'FCT med/p99 s':>14}", lambda r: f" {cell(r['fct_median_s'], '.2f') + '/' + cell(r['fct_p99_s'], '.2f'):>14}"),
              ("Mbit/s", f" {'Mbit/s':>7}", lambda r: f" {cell(r['bottleneck_mean_tx_mbps'], '.2f'):>7}"))
    parts = [p for col, head, cells in common for p in [(head, cells)] + after(col)] + after(None)
    lines = ["", f"== rounds ({out}) ==", "".join(head for head, _ in parts)]
    lines += ["".join(cells(r) for _, cells in parts) for r in rows]
    return "\n".join(lines)
