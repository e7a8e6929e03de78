"""RoCEv2 results of a round (file in, file out): each queue pair's record from the agents'
files, the flows' rows, the ``roce`` section of summary.json with roce_messages.csv,
roce_rates.csv and roce_flows.csv, and the DCQCN fluid model's fixed point beside the measured
queue."""
from __future__ import annotations

import hashlib
import json
import math
import statistics
import sys
from pathlib import Path

from common.dcqcn import DcqcnParams
from common.dcqcn_fluid import fixed_point
from common.ecn import EcnProfile
from common.roce import OVERHEAD_BYTES, SPORT_BASE
from experiments.tables import FLOW_COLUMNS, percentile, write_csv
from experiments.model import RocePlugin


def flow_records(flows: list[dict], out: Path) -> list[dict]:
    """Per flow of ``flows``: its sender QP's record (``tx``) and its receiver QP's (``rx``), from the
    agents' result files in ``out``, with their agents' loop statistics (``tx_loop``, ``rx_loop``:
    CPU fraction, pacer wake-up lateness). A missing file or record gives None there."""
    cache: dict[str, dict | None] = {}

    def load(h):
        if h not in cache:
            p = Path(out) / f"{h}.roce.json"
            cache[h] = json.loads(p.read_text()) if p.exists() else None
        return cache[h]

    res = []
    for f in flows:
        tx_all, rx_all = load(f["src"]), load(f["dst"])
        tx = next((r for r in (tx_all or {}).get("senders", []) if r["flow_id"] == f["flow_id"]), None)
        rx = next((r for r in (rx_all or {}).get("receivers", []) if r["flow_id"] == f["flow_id"]), None)
        res.append({"flow": f, "tx": tx, "rx": rx,
                    "errors": [x.get("error") for x in (tx_all, rx_all) if x and x.get("error")],
                    "rx_host_udp_drops": (rx_all or {}).get("host_udp_drops"),
                    "tx_loop": (tx_all or {}).get("loop"), "rx_loop": (rx_all or {}).get("loop")})
    return res


def rate_series_bps(samples: list, t0_unix_s: float, t1_unix_s: float) -> float:
    """Mean rate (bit/s) between two times from ``[(t_unix_s, cumulative_bytes), ...]`` samples,
    interpolating linearly. Raises ValueError when the samples do not cover the interval."""
    if not samples or samples[0][0] > t0_unix_s or samples[-1][0] < t1_unix_s:
        raise ValueError("samples do not cover the interval")

    def at(t):
        for (ta, ba), (tb, bb) in zip(samples, samples[1:]):
            if ta <= t <= tb:
                return ba + (bb - ba) * ((t - ta) / (tb - ta) if tb > ta else 0)
        return samples[-1][1]
    return (at(t1_unix_s) - at(t0_unix_s)) * 8 / (t1_unix_s - t0_unix_s) if t1_unix_s > t0_unix_s else math.nan


def collect_rows(agent_dir: Path, plan: list[dict], codes: dict[str, int]) -> list[dict]:
    """One experiments.analysis row per planned RoCE flow (its FLOW_COLUMNS, times from the common
    start), plus ``roce``: the sender's and receiver's QP records (CNPs, retransmissions, messages,
    rate samples). ``bytes_sent`` is message bytes (each counted once); ``complete`` means every
    message was acknowledged and every byte delivered once, in order; ``fct_s`` is the receiver's
    last byte."""
    rows = []
    for rec in flow_records(plan, agent_dir):
        p, tx, rx = rec["flow"], rec["tx"], rec["rx"]
        row = {k: None for k in FLOW_COLUMNS}
        row.update(flow_id=p["flow_id"], src=p["src"], dst=p["dst"], src_ip=p.get("src_ip"), transport="roce",
                   complete=False)
        errs = rec["errors"] + [f"agent {h} exit {codes.get(h + '.roce')}" for h in (p["src"], p["dst"])
                                if codes.get(h + ".roce")]
        if tx is None or rx is None:
            errs.append(f"no record of flow {p['flow_id']} from {'sender' if tx is None else 'receiver'}")
        if tx is not None:
            start = tx["start_at_unix_s"]
            row.update(src_port=SPORT_BASE + p["flow_id"], bytes_planned=tx["message_bytes"],
                       bytes_sent=tx["message_bytes"] if tx["all_complete"] else tx["payload_bytes_sent"],
                       start_at_unix_s=start, total_retrans=tx["retransmitted_packets"],
                       blocked_sends=tx["blocked_sends"], host_queue_full=tx["host_queue_full"],
                       sender_done_s=max((m["completed_unix_s"] for m in tx["messages"] if m["completed_unix_s"]),
                                         default=None))
            if row["sender_done_s"] is not None:
                row["sender_done_s"] -= start
        if rx is not None and tx is not None:
            start = tx["start_at_unix_s"]
            row.update(bytes_received=rx["bytes_delivered"], ce_received=rx["ce_packets"],
                       ect_received=rx["ect_packets"], not_ect_received=rx["not_ect_packets"],
                       first_byte_s=rx["first_byte_unix_s"] - start if rx["first_byte_unix_s"] else None,
                       fct_s=rx["last_byte_unix_s"] - start if rx["last_byte_unix_s"] else None,
                       _samples=[(ts - start, b) for ts, b in rx["samples"]])
            row["complete"] = (not errs and tx["all_complete"] and rx["bytes_delivered"] == tx["message_bytes"])
        row["error"] = "; ".join(e for e in errs if e) or None
        row["roce"] = {"tx": tx, "rx": rx, "rx_host_udp_drops": rec["rx_host_udp_drops"]}
        rows.append(row)
    return rows


def _median_ci(xs: list[float], z: float = 1.96) -> tuple[float, float] | None:
    """Distribution-free ~95% confidence interval of the median: the order statistics at
    n/2 -+ z sqrt(n)/2 (binomial approximation). None below 6 values."""
    n = len(xs)
    if n < 6:
        return None
    s = sorted(xs)
    lo, hi = int(math.floor(n / 2 - z * math.sqrt(n) / 2)), int(math.ceil(n / 2 + z * math.sqrt(n) / 2))
    return s[max(lo, 0)], s[min(hi, n - 1)]


def shared_port(flows: list[dict], fabric_map: dict) -> dict | None:
    """The one switch port every flow of ``flows`` (:func:`scenario_flows`) crosses when they are
    long flows into one receiver, as ``{"intf", "receiver", "rate_bps", "n_flows"}``; None otherwise.

    Long: one message each (a sized flow, or an incast's single response) or time-limited; a flow
    of several messages (Poisson arrivals) comes and goes and has no fixed point to settle at.
    The port is the receiver's switch port: all N flows end there, so it carries all of them."""
    if not flows or len({f["dst"] for f in flows}) != 1:
        return None
    if not all("duration_s" in f or "bytes" in f or len(f.get("messages", ())) == 1 for f in flows):
        return None
    receiver = flows[0]["dst"]
    toward = [p for sw in fabric_map["switches"] for p in sw["ports"] if p["peer"] == receiver]
    if len(toward) != 1:
        return None
    return {"intf": toward[0]["intf"], "receiver": receiver, "rate_bps": toward[0]["rate_mbps"] * 1e6,
            "n_flows": len(flows)}


def fluid_fixed_point(mode: str, params: DcqcnParams | None, port: dict | None, profile: EcnProfile | None,
                      mtu_bytes: int, measured_queue: dict | None = None, settled: dict | None = None) -> dict | None:
    """The ``roce.fluid_fixed_point`` block: where the DCQCN fluid model (common.dcqcn_fluid, Zhu
    et al., CoNEXT 2016) puts N long flows through ``port`` (:func:`shared_port`) with its RED
    ``profile``, beside the measured queue of that port.

    Returns None where the model does not apply: mode other than dcqcn, no shared port, a profile
    other than red, or flows the line rate holds (one flow on a port as fast as its NIC).
    ``measured_queue``: experiments.analysis.queue_after_first_rtt of the port (median after the
    first burst), or None when not sampled.

    Block: ``n_flows``, ``port``, ``capacity_bps``, ``packet_bytes`` (a data frame on the wire:
    ``mtu_bytes`` + RoCEv2 headers), ``rate_bps`` per flow (C/N), ``p_mark``, ``alpha``,
    ``target_rate_bps``, ``target_above_line_rate``, ``above_kmax``, ``queue_bytes`` and
    ``queue_packets`` (None past Kmax), the curve (``kmin_bytes``, ``kmax_bytes``, ``pmax``) and
    ``measured_queue_median_bytes`` / ``_packets`` with their window ``measured_window_s``, and
    ``settled``: the port over the second half of the time all N flows ran
    (experiments.analysis.queue_in_window: queue p5 / median / p95, the shares in [Kmin, Kmax],
    below and above, utilisation), or None when not measured."""
    if mode != "dcqcn" or params is None or port is None or profile is None or profile.kind != "red":
        return None
    packet_bytes = mtu_bytes + OVERHEAD_BYTES
    try:
        fp = fixed_point(params, port["n_flows"], port["rate_bps"], profile.kmin_bytes, profile.kmax_bytes,
                         profile.pmax, packet_bytes)
    except ValueError:
        return None
    m = measured_queue or {}
    return {**fp.as_dict(), "port": port["intf"], "kmin_bytes": profile.kmin_bytes,
            "kmax_bytes": profile.kmax_bytes, "pmax": profile.pmax,
            # the port's sampled backlog after the first burst (the ECN section's
            # queue_after_first_rtt figure, for this port); None when the port was not sampled
            "measured_queue_median_bytes": m.get("median_bytes"),
            "measured_queue_median_packets": m.get("median_packets"),
            "measured_window_s": [m["from_s"], m["to_s"]] if m else None,
            "settled": settled or None}


def plugin_record(plugin: RocePlugin) -> dict:
    """What a round records of its plug-in: ``{"name", "path", "params", "sha256"}`` (the SHA-256
    of the file as the round ran it; None when it cannot be read any more)."""
    try:
        digest = hashlib.sha256(Path(plugin.path).read_bytes()).hexdigest()
    except OSError:
        digest = None
    return {"name": plugin.name, "path": plugin.path, "params": dict(plugin.params), "sha256": digest}


def plugin_failures(out: Path, pattern: str = "*.roce.json") -> list[str]:
    """The errors of the agents in ``out`` (their result files matching ``pattern``, searched
    below ``out``) whose rate-controller plug-in failed, one line each: ``RoCE agent on <host>:
    rate-controller plug-in <file>: raised <exception> (line N, in <method>) ...``. An agent that
    failed records ``error_type`` PluginError (traffic.agent); a collective agent whose RoCE
    engine stopped records the error in its ``roce`` record (traffic.collective.RoceLinks)."""
    found = []
    for p in sorted(Path(out).rglob(pattern)):
        try:
            rec = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(rec, dict):
            continue
        errors = [rec.get("error") if rec.get("error_type") == "PluginError" else None,
                  (rec.get("roce") or {}).get("error") if isinstance(rec.get("roce"), dict) else None]
        for err in errors:
            if isinstance(err, str) and err.startswith("PluginError: "):
                found.append(f"RoCE agent on {p.name.split('.')[0]}: {err.removeprefix('PluginError: ')}")
                break
    return found


def _rtt_totals(txs: list[dict]) -> dict:
    """The senders' RTT samples together: ``samples`` (their count), ``min``, the median of the
    flows' medians and the largest flow p99 (seconds; None without samples)."""
    per = [x.get("rtt_s") or {} for x in txs]
    meds = [r["median"] for r in per if r.get("median") is not None]
    return {"samples": sum(r.get("count") or 0 for r in per),
            "min": min((r["min"] for r in per if r.get("min") is not None), default=None),
            "flow_median_median": statistics.median(meds) if meds else None,
            "flow_p99_max": max((r["p99"] for r in per if r.get("p99") is not None), default=None)}


def add_to_summary(out: Path, summary: dict, rows: list[dict], mode: str, params: DcqcnParams | None,
                   seed: int | None = None, fluid: dict | None = None, plugin: dict | None = None) -> dict:
    """Add ``summary["roce"]`` and write ``roce_messages.csv`` (every message: flow, bytes, posted,
    completed, completion time), ``roce_rates.csv`` (each sender's rate over time) and
    ``roce_flows.csv`` (per queue pair: bytes, completion, CE, CNPs sent and received,
    retransmitted packets, NAKs, timeouts, back-pressure, last rate, pacing) into ``out``.

    ``roce``: mode (``plugin:<name>`` for a plug-in), DCQCN parameters (mode dcqcn), ``cc``: the
    rate controller's parameters as its senders recorded them (``params``) and ``plugin``
    (:func:`plugin_record`, or None), the RTT samples (``rtt_s``: :func:`_rtt_totals`), CNPs sent
    and received, retransmitted packets,
    NAKs, timeouts, host back-pressure, the receiving hosts' UDP receive drops
    (``host_udp_drops``), message completion times (count, median with its ~95%
    confidence interval, p99, max; case R4), pacing warnings (case T5), the senders' last rates, and
    ``fluid_fixed_point`` when ``fluid`` (:func:`fluid_fixed_point`) is given."""
    out = Path(out)
    msgs, rates = [], []
    for r in rows:
        tx = (r["roce"] or {}).get("tx")
        if not tx:
            continue
        start = tx["start_at_unix_s"]
        for i, m in enumerate(tx["messages"]):
            msgs.append({"flow_id": r["flow_id"], "src": r["src"], "dst": r["dst"], "message": i, "bytes": m["bytes"],
                         "posted_s": m["posted_unix_s"] - start,
                         "completed_s": None if m["completed_unix_s"] is None else m["completed_unix_s"] - start,
                         "fct_s": m["fct_s"]})
        for t_s, wire, rate, target in tx["samples"]:
            rates.append({"t_s": round(t_s - start, 6), "flow_id": r["flow_id"], "src": r["src"], "rate_bps": rate,
                          "target_bps": target, "wire_bytes_sent": wire})
    write_csv(out / "roce_messages.csv", ("flow_id", "src", "dst", "message", "bytes", "posted_s", "completed_s",
                                           "fct_s"), msgs)
    write_csv(out / "roce_rates.csv", ("t_s", "flow_id", "src", "rate_bps", "target_bps", "wire_bytes_sent"), rates)
    per_flow = []
    for r in rows:
        tx, rx = ((r["roce"] or {}).get(k) or {} for k in ("tx", "rx"))
        per_flow.append({"flow_id": r["flow_id"], "src": r["src"], "dst": r["dst"], "message_bytes": tx.get("message_bytes"),
                         "bytes_delivered": rx.get("bytes_delivered"), "fct_s": r["fct_s"], "complete": r["complete"],
                         "packets_sent": tx.get("packets_sent"), "retransmitted_packets": tx.get("retransmitted_packets"),
                         "naks": tx.get("naks"), "timeouts": tx.get("timeouts"), "ce_packets": rx.get("ce_packets"),
                         "cnps_sent": rx.get("cnps_sent"), "cnps_received": tx.get("cnps_received"),
                         "duplicates_dropped": rx.get("duplicates"), "blocked_sends": tx.get("blocked_sends"),
                         "host_queue_full": tx.get("host_queue_full"), "final_rate_bps": tx.get("final_rate_bps"),
                         "achieved_fraction_of_pacer": tx.get("achieved_fraction_of_pacer"),
                         "rtt_samples": (tx.get("rtt_s") or {}).get("count"),
                         "rtt_min_s": (tx.get("rtt_s") or {}).get("min"),
                         "rtt_median_s": (tx.get("rtt_s") or {}).get("median"),
                         "rtt_p99_s": (tx.get("rtt_s") or {}).get("p99")})
    write_csv(out / "roce_flows.csv", list(per_flow[0]) if per_flow else ["flow_id"], per_flow)
    fcts = [m["fct_s"] for m in msgs if m["fct_s"] is not None]
    txs = [(r["roce"] or {}).get("tx") or {} for r in rows]
    rxs = [(r["roce"] or {}).get("rx") or {} for r in rows]
    summary["roce"] = {
        "mode": mode, "seed": seed, "dcqcn": params.as_dict() if (params is not None and mode == "dcqcn") else None,
        "cc": {"params": next((x["cc_params"] for x in txs if x.get("cc_params") is not None), None),
               "plugin": plugin},
        "rtt_s": _rtt_totals(txs),
        "flows": len(rows), "messages": len(msgs), "messages_complete": len(fcts),
        "message_fct_s": {"median": percentile(fcts, 50) if fcts else None, "median_ci95": _median_ci(fcts),
                          "p99": percentile(fcts, 99) if fcts else None, "max": max(fcts) if fcts else None},
        "cnps_sent": sum(x.get("cnps_sent", 0) for x in rxs),
        "cnps_received": sum(x.get("cnps_received", 0) for x in txs),
        "ce_packets": sum(x.get("ce_packets", 0) for x in rxs),
        "retransmitted_packets": sum(x.get("retransmitted_packets", 0) for x in txs),
        "naks": sum(x.get("naks", 0) for x in txs), "timeouts": sum(x.get("timeouts", 0) for x in txs),
        "duplicates_dropped": sum(x.get("duplicates", 0) for x in rxs),
        "blocked_sends": sum(x.get("blocked_sends", 0) for x in txs),
        "host_queue_full": sum(x.get("host_queue_full", 0) for x in txs),
        "host_udp_drops": _host_udp_drops(rows),
        "delivered_exactly_once": all(r["complete"] for r in rows),
        "pacing_warnings": [x["pacing_warning"] for x in txs if x.get("pacing_warning")],
        "feedback_warnings": [x["feedback_warning"] for x in txs if x.get("feedback_warning")],
        "final_rate_bps": {r["flow_id"]: t.get("final_rate_bps") for r, t in zip(rows, txs) if t},
    }
    if fluid is not None and mode == "dcqcn":
        summary["roce"]["fluid_fixed_point"] = fluid
    for w in summary["roce"]["pacing_warnings"] + summary["roce"]["feedback_warnings"]:
        print(f"fabriclab: WARNING: {w}", file=sys.stderr)
    return summary


def _host_udp_drops(rows: list[dict]) -> dict:
    """Per receiving host: the RoCE frames its kernel dropped before the agent read them
    (``/proc/net/snmp`` Udp RcvbufErrors and InErrors over the run), summed over hosts."""
    per_host = {r["dst"]: (r["roce"] or {}).get("rx_host_udp_drops") for r in rows}
    tot = {"RcvbufErrors": 0, "InErrors": 0}
    for d in per_host.values():
        for k in tot:
            tot[k] += (d or {}).get(k, 0)
    return tot
