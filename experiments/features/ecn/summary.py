"""ECN's results of one round (file in, file out): the marker's counters over the round
(ecn_counters.csv), the bottleneck's profile and marks, CE at the receivers, the queue after the
first burst, and what ``ss`` saw of the connections: ``summary["ecn"]``."""
from __future__ import annotations

import csv
from pathlib import Path

from common.ecn import describe
from common.units import FRAME_BYTES
from experiments.analysis import end_s, queue_after_first_rtt
from experiments.tables import write_csv


def counter_deltas(before: dict, after: dict) -> dict:
    """Per-port marker counters over one round: ``after - before`` for counting fields
    (``max_backlog_bytes`` and ``backlog_bytes`` are taken from ``after``)."""
    out = {}
    for intf, a in after.items():
        b = before.get(intf, {})
        out[intf] = {k: (v if k in ("max_backlog_bytes", "backlog_bytes") or not isinstance(v, (int, float))
                         else v - (b.get(k) or 0)) for k, v in a.items() if v is not None}
    return out


def parse_ss_tin(text: str, known: list[str]) -> dict:
    """From ``ss -tin`` output: connections, the congestion controls named on them, how many show
    ``ecn`` and how many a non-zero ``delivered_ce`` (CE echoed back to the sender).

    ``ecn_flows`` is None when ``ss`` printed no TCP option flags at all (``ts``, ``sack``,
    ``ecn``): iproute2 6.1 on a 6.18 kernel prints none, so their absence says nothing; the
    per-flow ``ecn_negotiated`` (TCP_INFO, read by the sender agent) is the reliable figure."""
    conns, algos, ecn, dce, flags = 0, set(), 0, 0, False
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if line[:1] not in (" ", "\t") and words[0] not in ("Recv-Q", "State"):
            conns += 1
            continue
        found = [w for w in words if w in known]
        algos.update(found)
        ecn += "ecn" in words
        flags |= bool({"ts", "sack", "ecn"} & set(words))
        dce += any(w.startswith("delivered_ce:") and w != "delivered_ce:0" for w in words)
    return {"connections": conns, "congestion_control": sorted(algos), "ecn_flows": ecn if flags else None,
            "delivered_ce_flows": dce}


def add_ecn(out: Path, summary: dict, env: dict, profiles: dict, counters: dict, flows: list[dict],
            marker: str) -> dict:
    """Add ``summary["ecn"]`` (profile and counters at the bottleneck, marks at receivers, live
    congestion control) to ``summary``; write ``ecn_counters.csv`` into ``out``. Returns the summary.

    ``profiles`` maps switch ports to :class:`common.ecn.EcnProfile`; ``counters`` are the
    marker's per-port counters over this round (:func:`counter_deltas`); ``ecn_counters.csv``
    adds each port's real FIFO drops (from the sampler, ``ports.csv``).
    """
    out = Path(out)
    bn = summary.get("bottleneck") or {}
    intf = bn.get("intf")
    prof = profiles.get(intf) if intf else None
    fcts = [end_s(f) for f in flows if f["fct_s"] is not None]
    rtt = (env.get("scale") or {}).get("measured_rtt_s") or 0.0
    fifo_drops = {}
    if (out / "ports.csv").exists():
        with open(out / "ports.csv") as fh:
            fifo_drops = {r["intf"]: int(r["drops"]) for r in csv.DictReader(fh) if r.get("drops")}
    rows = [{"intf": k, "profile": describe(profiles[k]) if k in profiles else None, **v,
             "fifo_drops": fifo_drops.get(k)} for k, v in sorted(counters.items())]
    if rows:
        cols = list(dict.fromkeys(c for r in rows for c in r))
        write_csv(out / "ecn_counters.csv", cols, [{c: r.get(c) for c in cols} for r in rows])
    total = {}
    for v in counters.values():
        for k, x in v.items():
            if k not in ("max_backlog_bytes", "backlog_bytes") and isinstance(x, (int, float)):
                total[k] = total.get(k, 0) + x
    ce = [f["ce_received"] for f in flows if f.get("ce_received") is not None]
    known = sorted(set((env.get("tcp_congestion_control") or {}).get("available", []))
                   | set((env.get("tcp_congestion_control") or {}).get("loadable", [])) | {"dctcp", "reno", "cubic", "bbr"})
    ss_path = out / "ss_tin.txt"
    summary["ecn"] = {
        "marker": marker,
        "mechanism": (env.get("ecn") or {}).get("mechanism"),
        "bottleneck_profile": describe(prof) if prof else None,
        "bottleneck_k_bytes": prof.k_bytes if prof and prof.kind == "step" else None,
        "bottleneck_kmin_kmax_bytes": [prof.kmin_bytes, prof.kmax_bytes] if prof and prof.kind == "red" else None,
        "bottleneck_counters": counters.get(intf),
        "all_ports": total,
        "queue_after_first_rtt": queue_after_first_rtt(
            out / "queues.csv", intf, rtt, max(fcts), bn["rate_mbps"] * 1e6,
            bn["buffer_bytes"] if bn.get("buffer_bytes") is not None else bn["buffer_packets"] * FRAME_BYTES)
        if intf and fcts else {},
        "bottleneck_mean_tx_mbps": bn.get("mean_tx_mbps"),
        "ce_received": {"flows_counted": len(ce), "packets": sum(ce),
                        "flows_with_ce": sum(1 for c in ce if c),
                        "ect_packets": sum(f.get("ect_received") or 0 for f in flows),
                        "not_ect_packets": sum(f.get("not_ect_received") or 0 for f in flows)},
        "ecn_negotiated_flows": sum(1 for f in flows if f.get("ecn_negotiated")),
        "ss_tin": parse_ss_tin(ss_path.read_text(), known) if ss_path.exists() else None,
    }
    return summary
