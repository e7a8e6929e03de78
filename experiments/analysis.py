"""Turn raw agent and sampler output into the results files.

Pure file-in / file-out code (no root): ``collect_flows`` joins the sender
and receiver records of each flow, ``write_results`` writes flows.csv,
flow_samples.csv, queues.csv, ports.csv and summary.json.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

FLOW_COLUMNS = ("flow_id", "src", "dst", "src_ip", "src_port", "bytes_planned", "bytes_sent",
                "bytes_received", "start_at_unix_s", "first_byte_s", "fct_s", "sender_done_s",
                "congestion_control", "total_retrans", "rtt_us", "complete", "error")


def collect_flows(agent_dir: Path, receiver: str, senders: list[str], codes: dict[str, int]) -> list[dict]:
    """One row per sender (see :data:`FLOW_COLUMNS`), times relative to the common start.

    ``fct_s`` is the receiver's last byte minus the scheduled start (the
    flow completion time); ``complete`` is true when every planned byte
    arrived and the connection closed cleanly.
    """
    def load(host):
        try:
            return json.loads((Path(agent_dir) / f"{host}.json").read_text())
        except (OSError, ValueError) as e:
            return {"error": f"no result from {host} ({e.__class__.__name__}; exit {codes.get(host)})"}
    rx = load(receiver)
    by_port = {(f["src_ip"], f["src_port"]): f for f in rx.get("flows", [])}
    rows = []
    for s in senders:
        tx = load(s)
        row = {k: None for k in FLOW_COLUMNS}
        row.update(flow_id=tx.get("flow_id"), src=s, dst=receiver, error=tx.get("error") or rx.get("error"))
        if "error" not in tx:
            f = next((f for (ip, port), f in by_port.items() if port == tx["src_port"]), None)
            start = tx["start_at_unix_s"]
            row.update(src_port=tx["src_port"], bytes_planned=tx["bytes_planned"], bytes_sent=tx["bytes_sent"],
                       start_at_unix_s=start, sender_done_s=tx["closed_unix_s"] - start,
                       congestion_control=tx["congestion_control"], total_retrans=tx["total_retrans"],
                       rtt_us=tx["rtt_us"])
            if f is not None:
                row.update(src_ip=f["src_ip"], bytes_received=f["bytes"],
                           first_byte_s=(f["first_byte_unix_s"] - start) if f["first_byte_unix_s"] else None,
                           fct_s=(f["last_byte_unix_s"] - start) if f["last_byte_unix_s"] else None,
                           _samples=[(t - start, b) for t, b in f["samples"]])
                row["complete"] = bool(f["eof"] and f["bytes"] == tx["bytes_planned"] == tx["bytes_sent"])
        if row["complete"] is None:
            row["complete"] = False
        rows.append(row)
    return rows


def _percentile(values, q):
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else None


def load_queue_samples(path: Path, t0_unix_s: float) -> dict[str, dict[str, np.ndarray]]:
    """Read a sampler CSV into ``{intf: {column: array}}`` with ``t_s`` relative to ``t0_unix_s``."""
    per: dict[str, list] = {}
    with open(path) as f:
        r = csv.reader(f)
        header = next(r)
        ti = header.index("t_unix_s") if "t_unix_s" in header else header.index("t_s")
        ii = header.index("intf")
        cols = [c for c in header if c not in ("t_unix_s", "t_s", "intf")]
        idx = [header.index(c) for c in cols]
        for row in r:
            per.setdefault(row[ii], []).append([float(row[ti])] + [float(row[i]) for i in idx])
    out = {}
    for intf, rows in per.items():
        a = np.asarray(rows)
        d = {"t_s": a[:, 0] - t0_unix_s if "t_unix_s" in header else a[:, 0]}
        for k, c in enumerate(cols):
            d[c] = a[:, k + 1]
        out[intf] = d
    return out


def port_summaries(samples: dict, fabric_map: dict, sc: dict, window_s: tuple[float, float]) -> list[dict]:
    """Per switch-port figures over the sampled run (rows of ports.csv)."""
    q = sc["queues"]
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
                "rate_mbps": p["rate_mbps"], "buffer_bytes": q["buffer_bytes"], "buffer_packets": q["buffer_packets"],
                "tx_bytes": int(tx[-1] - tx[0]), "tx_packets": int(s["tx_packets_total"][-1] - s["tx_packets_total"][0]),
                "drops": int(s["drops_total"][-1] - s["drops_total"][0]),
                "peak_backlog_bytes": int(s["backlog_bytes"].max()), "peak_backlog_packets": int(s["backlog_packets"].max()),
                "mean_backlog_bytes": float(s["backlog_bytes"][sel].mean()) if sel.any() else 0.0,
                "p99_backlog_bytes": _percentile(s["backlog_bytes"][sel], 99) if sel.any() else 0.0,
                "mean_tx_mbps": mean_mbps, "samples": int(len(s["t_s"])),
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


def _write_csv(path: Path, columns, rows) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)


def write_results(out: Path, sc: dict, fabric_map: dict, flows: list[dict], timings: dict, host_cfg: dict) -> dict:
    """Write flows.csv, flow_samples.csv, queues.csv, ports.csv and summary.json into ``out``; return the summary."""
    out = Path(out)
    starts = [f["start_at_unix_s"] for f in flows if f["start_at_unix_s"] is not None]
    t0 = min(starts) if starts else 0.0
    _write_csv(out / "flows.csv", FLOW_COLUMNS, flows)
    with open(out / "flow_samples.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("t_s", "flow_id", "src", "bytes_received_total"))
        for fl in flows:
            for t, b in fl.get("_samples") or []:
                w.writerow((f"{t:.6f}", fl["flow_id"], fl["src"], b))
    raw = out / "queues_raw.csv"
    samples = load_queue_samples(raw, t0)
    with open(out / "queues.csv", "w", newline="") as f:
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
    raw.unlink()
    fcts = [f["fct_s"] for f in flows if f["fct_s"] is not None]
    end = max(fcts) if fcts else 0.0
    ports = port_summaries(samples, fabric_map, sc, (0.0, end))
    _write_csv(out / "ports.csv", list(ports[0].keys()) if ports else ["intf"], ports)
    bn = bottleneck(ports)
    receiver = sc["traffic"]["receiver"]
    receiver_leaf = next(h["switch"] for h in fabric_map["hosts"] if h["name"] == receiver)
    sampler = json.loads((out / "sampler.json").read_text())
    env = json.loads((out / "environment.json").read_text())
    ccs = sorted({f["congestion_control"] for f in flows if f["congestion_control"]})
    summary = {
        "scenario": sc["name"],
        "datapath": env["datapath"],
        "kernel": env["kernel"],
        "scale": env.get("scale"),
        "flows": {
            "count": len(flows),
            "all_complete": all(f["complete"] for f in flows),
            "bytes_sent": sum(f["bytes_sent"] or 0 for f in flows),
            "bytes_received": sum(f["bytes_received"] or 0 for f in flows),
            "per_flow": [{k: f[k] for k in ("flow_id", "src", "bytes_sent", "bytes_received", "fct_s", "complete",
                                            "total_retrans")} for f in flows],
            "fct_median_s": _percentile(fcts, 50), "fct_p99_s": _percentile(fcts, 99),
            "fct_max_s": max(fcts) if fcts else None,
            "congestion_control_on_live_flows": ccs,
            "errors": [f["error"] for f in flows if f["error"]],
        },
        "bottleneck": None if bn is None else {
            **{k: bn[k] for k in ("switch", "intf", "peer", "mean_backlog_bytes", "peak_backlog_bytes",
                                  "peak_backlog_packets", "drops",
                                  "buffer_bytes", "buffer_packets", "mean_tx_mbps", "rate_mbps")},
            "toward_receiver": bn["peer"] == receiver,
            "within_buffer": (bn["peak_backlog_bytes"] <= bn["buffer_bytes"]) if bn["buffer_bytes"] is not None
            else (bn["peak_backlog_packets"] <= bn["buffer_packets"]),
        },
        # bytes each spine carried down to the receiver's leaf: shows how ECMP split the incast
        "ecmp_split_tx_bytes": {p["intf"]: p["tx_bytes"] for p in ports if p["peer"] == receiver_leaf},
        "total_drops": sum(p["drops"] for p in ports),
        "sampler": sampler,
        "timings_s": timings,
        "hosts_tcp": sorted({(v["tcp_congestion_control"], v["tcp_ecn"]) for v in host_cfg.values()}),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary


def format_summary(summary: dict, out: Path) -> str:
    """A short human-readable summary for the terminal."""
    f = summary["flows"]
    bn = summary["bottleneck"] or {}
    buf = f"{bn.get('buffer_packets')} packets" if bn.get("buffer_packets") else f"{bn.get('buffer_bytes')} bytes"
    lines = [
        "",
        f"== fabriclab: {summary['scenario']} ({summary['datapath']} datapath, kernel {summary['kernel']}) ==",
        f"flows: {f['count']}, all complete: {f['all_complete']}, bytes sent {f['bytes_sent']} / received {f['bytes_received']}",
        f"completion time: median {f['fct_median_s']:.3f} s, p99 {f['fct_p99_s']:.3f} s" if f["fct_median_s"] is not None
        else "completion time: none",
        f"bottleneck: {bn.get('intf')} (toward {bn.get('peer')}), peak backlog {bn.get('peak_backlog_packets')} packets "
        f"/ {bn.get('peak_backlog_bytes')} B (buffer {buf}), drops {bn.get('drops')}",
        "ECMP split toward the receiver's leaf: " + ", ".join(
            f"{k} {v / 1e6:.2f} MB" for k, v in summary.get("ecmp_split_tx_bytes", {}).items()),
        f"sampler: {summary['sampler']['achieved_hz']:.0f} Hz on {summary['sampler']['interfaces']} ports, "
        f"{100 * summary['sampler']['cpu_fraction_of_one_core']:.1f}% of one core",
        f"time: set-up {summary['timings_s'].get('setup_s', 0):.1f} s, traffic {summary['timings_s'].get('traffic_s', 0):.1f} s, "
        f"teardown {summary['timings_s'].get('teardown_s', 0):.1f} s",
        f"results: {out}",
    ]
    return "\n".join(lines)


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
    from scipy.stats import chisquare
    counts = [int(flows_per_path[k]) for k in sorted(flows_per_path)]
    if len(counts) < 2 or sum(counts) == 0:
        raise ValueError(f"need >= 2 paths and >= 1 flow, got {flows_per_path}")
    res = chisquare(counts)
    mean = sum(counts) / len(counts)
    return {"flows": sum(counts), "paths": len(counts), "counts": dict(sorted(flows_per_path.items())),
            "chi2": float(res.statistic), "p_value": float(res.pvalue), "max_over_mean": max(counts) / mean}
