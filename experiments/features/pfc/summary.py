"""PFC's results of one round: ``pauses.csv``, ``pfc_occupancy.csv`` and ``summary.json`` ->
``pfc``, from the controller's reports before and after the round (file in, file out)."""
from __future__ import annotations

import json
from pathlib import Path

from experiments.features.pfc.plan import MECHANISM
from experiments.tables import percentile, write_csv


PAUSE_COLUMNS = ("start_s", "end_s", "duration_s", "switch", "port", "priority", "upstream", "upstream_port", "storm")
OCCUPANCY_COLUMNS = ("t_s", "switch", "port", "priority", "bytes")


def round_results(out: Path, report: dict, before: dict | None, begin_unix_s: float, start_unix_s: float,
                  flows: list[dict], enabled: bool) -> dict:
    """Write one round's ``pauses.csv`` and ``pfc_occupancy.csv`` into ``out``; return its
    ``summary["pfc"]``.

    Args:
        report: the controller's PFC report at the round's end (controller.pfc.ports.PfcPorts.report).
        before: the report at the round's beginning (None for the first round): counters are
            cumulative, so the round's drops and XOFF events are the differences.
        begin_unix_s: when the round began (its pauses, reactions and counter changes are those after it).
        start_unix_s: the traffic's common start: every time written is seconds from it.
        flows: the round's flow rows (experiments.analysis.collect_flows): UDP back-pressure counts.
        enabled: whether PFC was on in this round.

    Returns:
        ``{"enabled", "mechanism", "xoff_bytes", "xon_bytes", "buffer_bytes", "pauses", "paused_time_s",
        "per_port": [{"switch", "port", "upstream", "pauses", "paused_time_s"}], "pausing_switches",
        "paused_upstreams", "reaction_s": {count, p50, p99, max}, "headroom", "storms", "cap_drops",
        "storm_drops", "xoff_events", "lost_events", "pauser_realtime", "hub_realtime", "blocked_sends",
        "host_queue_full", "datagrams_lost", "sender_done_s": {median, max}, "errors",
        "slowest_reactions": the 5 slowest XOFF reactions of the round with their parts}`` (bytes, seconds); :func:`add_to_summary` adds ``receiver_udp_drops`` (per receiving host, from its agent).
    """
    shift = report["t0_unix_s"] - start_unix_s      # controller-relative -> traffic-relative seconds
    begin = begin_unix_s - report["t0_unix_s"]
    pauses = []
    for p in report["pauses"]:
        if p["start_s"] < begin and (p["end_s"] is None or p["end_s"] < begin):
            continue
        end = p["end_s"] if p["end_s"] is not None else report["now_s"]
        pauses.append({**p, "start_s": p["start_s"] + shift, "end_s": end + shift, "duration_s": end - p["start_s"]})
    write_csv(out / "pauses.csv", PAUSE_COLUMNS, pauses)
    occ = [{**o, "t_s": o["t_s"] + shift} for o in report["occupancy"] if o["t_s"] >= begin]
    write_csv(out / "pfc_occupancy.csv", OCCUPANCY_COLUMNS, occ)
    per_port: dict[tuple, dict] = {}
    for p in pauses:
        d = per_port.setdefault((p["switch"], p["port"], p["priority"]),
                                {"switch": p["switch"], "port": p["port"], "priority": p["priority"],
                                 "upstream": p["upstream_port"], "pauses": 0, "paused_time_s": 0.0})
        d["pauses"] += 1
        d["paused_time_s"] += p["duration_s"]
    old = {(c["port"], c["priority"]): c for c in (before or {}).get("counters", [])}

    def delta(field):
        return sum((c[field] or 0) - (old.get((c["port"], c["priority"]), {}).get(field) or 0)
                   for c in report["counters"])
    reactions = [r for t, r in report["reactions"] if t >= begin]
    udp = [f for f in flows if f.get("transport") == "udp"]
    done_s = [f["sender_done_s"] for f in flows if f.get("sender_done_s") is not None]
    return {
        "enabled": enabled, "mechanism": MECHANISM, "xoff_bytes": report["xoff_bytes"], "xon_bytes": report["xon_bytes"],
        "buffer_bytes": report["cap_bytes"], "pauses": len(pauses),
        "paused_time_s": float(sum(p["duration_s"] for p in pauses)),
        "per_port": sorted(per_port.values(), key=lambda d: -d["paused_time_s"]),
        "pausing_switches": sorted({p["switch"] for p in pauses}),
        "paused_upstreams": sorted({p["upstream"] for p in pauses}),
        "reaction_s": {"count": len(reactions), "p50": percentile(reactions, 50), "p99": percentile(reactions, 99),
                       "max": max(reactions) if reactions else None},
        "headroom": report["headroom"],
        "storms": [{**s, "t_s": s["t_s"] + shift} for s in report["storms"] if s["t_s"] >= begin],
        "cap_drops": delta("drops"), "storm_drops": delta("storm_drops"), "xoff_events": delta("xoff_events"),
        "lost_events": report["lost_events"], "pauser_realtime": report["pauser_realtime"],
        "hub_realtime": report.get("hub_realtime"),
        "blocked_sends": sum(f.get("blocked_sends") or 0 for f in udp) if udp else None,
        "host_queue_full": sum(f.get("host_queue_full") or 0 for f in udp) if udp else None,
        "datagrams_lost": sum(f.get("datagrams_lost") or 0 for f in udp) if udp else None,
        # how long the senders took to hand over their bytes: paused NICs make it the congested port's pace
        "sender_done_s": {"median": percentile(done_s, 50), "max": max(done_s)} if done_s else None,
        "errors": report["errors"],
        # where the time of the round's slowest pause reactions went (case: a late reaction overruns the headroom)
        "slowest_reactions": [{"t_s": t + shift, "reaction_s": a + b + c, "event_to_pauser_s": a,
                               "pauser_to_gate_thread_s": b, "gate_change_s": c}
                              for t, a, b, c in sorted((x for x in report.get("reaction_parts", []) if x[0] >= begin),
                                                       key=lambda x: -(x[1] + x[2] + x[3]))[:5]],
    }


def add_to_summary(out: Path, summary: dict, pfc_round: dict, flows: list[dict]) -> dict:
    """Add ``summary["pfc"]`` (:func:`round_results`) for one round, count the lossless class's
    cap drops into ``total_drops`` (they happen in front of the queues, not in them); write
    ``pauses.csv`` and ``pfc_occupancy.csv`` into ``out``. Returns the summary.

    Args:
        pfc_round: ``{"enabled", "begin_unix_s", "before", "after"}`` as the runner kept them.
    """
    starts = [f["start_at_unix_s"] for f in flows if f["start_at_unix_s"] is not None]
    start = min(starts) if starts else pfc_round["begin_unix_s"]
    summary["pfc"] = round_results(Path(out), pfc_round["after"], pfc_round["before"], pfc_round["begin_unix_s"],
                                   start, flows, pfc_round["enabled"])
    rx = {}
    for path in sorted((Path(out) / "agents").glob("*.rx.json")):
        try:
            drops = json.loads(path.read_text()).get("host_udp_drops")
        except ValueError:
            continue
        if drops:
            rx[path.name.split(".")[0]] = drops
    summary["pfc"]["receiver_udp_drops"] = rx or None
    summary["total_drops"] += summary["pfc"]["cap_drops"] + summary["pfc"]["storm_drops"]
    return summary
