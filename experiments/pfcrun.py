"""PFC in a run (issue 6): the plan the controller applies, the choices recorded, and the
results of each round: ``pauses.csv``, ``pfc_occupancy.csv`` and ``summary.json`` -> ``pfc``.

Buffer-accounting model (the controller's; controller/pfcports.py and
controller/bpf/pfc.bpf.c): every byte a switch holds in its egress queues is counted against
the (ingress port, priority) it came in on, found from the packet's 5-tuple as it arrived.
Each (ingress port, lossless priority) owns ``buffer_bytes`` of the switch's buffer (the
scenario's ``queues`` buffer): at XOFF the pauser stops the transmitter on the other end of
that ingress link (the upstream switch's egress queue for that priority, or the host NIC's),
at XON it restarts it; a frame that would take the count past the buffer is dropped and
counted (the headroom, buffer - XOFF, was too small). Lossy priorities are never paused and
drop at the egress port's buffer, as without PFC.
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

from common.errors import SetupError
from common.pfc import PfcConfig
from controller import dataplane
from experiments import probe
from experiments.fabric import LiveFabric
from experiments.live import Agents, warm_up_reachability
from experiments.scenario import FRAME_BYTES
from experiments.tables import percentile, write_csv

#: What every result records as the PFC mechanism.
MECHANISM = ("per-priority HTB classes with a TBF gate each on every switch port and host NIC; bytes held "
             "counted per (switch, ingress port, priority) by BPF at the qdisc tracepoints; the controller's "
             "pauser closes the upstream transmitter's gate at XOFF and opens it at XON")


def pfc_plan(fabric_map: dict, cfg, buffer_bytes: int, burst_bytes: int | None, host_fifo_bytes: int,
             slack_s: float) -> dict:
    """The plan controller.pfcports applies: priority queues on every switch port and host NIC, the
    thresholds of the lossless priorities, and each switch port's link peer (whose gate it pauses).

    Args:
        fabric_map: the fabric's map (``Fabric.to_map()``).
        cfg: a :class:`common.pfc.PfcConfig`.
        buffer_bytes: each switch egress port's buffer (lossy priorities drop there, and lossless
            ones while PFC is off), and each (ingress port, lossless priority)'s own share of
            the switch buffer (its cap).
        burst_bytes: HTB burst of every port; None: per port from its rate and ``slack_s``
            (common.units.shaper_burst_bytes).
        host_fifo_bytes: each host NIC priority queue's limit.
        slack_s: the machine's shaper slack in seconds (controller.timers.shaper_slack_s).
    """
    prios = cfg.priorities()
    lossless = set(cfg.lossless)      # counted and gated; paused while "enabled" (rounds turn it on and off)
    sw_ids = {s["name"]: i + 1 for i, s in enumerate(fabric_map["switches"])}
    hosts = {h["name"]: h for h in fabric_map["hosts"]}
    n_ports = max(len(s["ports"]) for s in fabric_map["switches"])    # host-facing ports included
    switches = []
    for s in fabric_map["switches"]:
        ports = []
        for p in s["ports"]:
            peer_is_host = p["peer"] in hosts
            peer_intf = hosts[p["peer"]]["intf"] if peer_is_host else f"{p['peer']}-eth{p['peer_port']}"
            ports.append({"intf": p["intf"], "index": p["port"], "rate_bps": p["rate_mbps"] * 1e6, "peer": p["peer"],
                          "peer_intf": peer_intf, "peer_is_host": peer_is_host})
        switches.append({"name": s["name"], "sw": sw_ids[s["name"]], "ports": ports})
    # a lossless egress queue never drops: its limit holds every ingress port's share (the buffer
    # caps drop at ingress); PfcPorts.set_limits raises it with the buffer
    switch_fifo = {p: (buffer_bytes * n_ports if p in lossless and cfg.enabled else buffer_bytes) for p in prios}
    return {"enabled": cfg.enabled, "dscp_map": {str(d): p for d, p in cfg.dscp_map.items()},
            "default_priority": cfg.default_priority, "lossless": sorted(lossless),
            "xoff_bytes": cfg.xoff_bytes or 0, "xon_bytes": cfg.xon_bytes or 0, "cap_bytes": buffer_bytes,
            "watchdog_s": cfg.watchdog_s, "watchdog_action": cfg.watchdog_action,
            "weights": {str(p): w for p, w in cfg.weights.items()} if cfg.scheduling == "weighted" else None,
            "burst_bytes": burst_bytes, "shaper_slack_s": slack_s, "lossy_fifo_bytes": buffer_bytes,
            "switch_fifo_bytes": {str(p): v for p, v in switch_fifo.items()},
            "host_fifo_bytes": {str(p): host_fifo_bytes for p in prios},
            "switches": switches,
            "hosts": [{"name": h["name"], "intf": h["intf"], "rate_bps": h["rate_mbps"] * 1e6}
                      for h in fabric_map["hosts"]]}


PAUSE_COLUMNS = ("start_s", "end_s", "duration_s", "switch", "port", "priority", "upstream", "upstream_port", "storm")
OCCUPANCY_COLUMNS = ("t_s", "switch", "port", "priority", "bytes")


def round_results(out: Path, report: dict, before: dict | None, begin_unix_s: float, start_unix_s: float,
                  flows: list[dict], enabled: bool) -> dict:
    """Write one round's ``pauses.csv`` and ``pfc_occupancy.csv`` into ``out``; return its
    ``summary["pfc"]``.

    Args:
        report: the controller's PFC report at the round's end (controller.pfcports.PfcPorts.report).
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


def format_line(p: dict | None, total_drops: int | None = None) -> str:
    """One terminal line about a round's PFC, or '' without PFC."""
    if p is None:
        return ""
    lost = f", {p['datagrams_lost']} datagrams lost" if p["datagrams_lost"] is not None else ""
    if not p["enabled"]:
        drops = f": {total_drops} drop{'' if total_drops == 1 else 's'} in the fabric" if total_drops is not None else ""
        return f"PFC: off (the lossless class drops like a lossy one){drops}{lost}"
    r = p["reaction_s"]
    rt = f"reaction p50 {r['p50'] * 1e3:.1f} ms, p99 {r['p99'] * 1e3:.1f} ms" if r["count"] else "no pause"
    return (f"PFC: {p['pauses']} pauses ({p['paused_time_s']:.2f} s paused) by {', '.join(p['pausing_switches']) or '-'};"
            f" {rt}; cap drops {p['cap_drops']}{lost}")


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


@contextlib.contextmanager
def live_fabric(fabric, cfg: PfcConfig, buf_bytes: int, workdir: Path, state, burst_bytes: int | None = None,
                host_fifo_bytes: int = 1000 * FRAME_BYTES, ovs_tx_budget_bytes: int = 32 << 20):
    """A running fabric with priority queues and PFC as ``cfg`` says (tests and benches that drive
    traffic themselves): the controller's PFC plan, OVS's userspace transmit buffer raised (every
    held frame counts against it), every host pair's ARP resolved (an unresolved neighbour queues
    only ~92 frames). Yields ``(LiveFabric, plan)``; everything is torn down on exit.

    Raises:
        SetupError: the fabric, the controller or the PFC plan failed to come up.
    """
    env = probe.probe()
    plan = pfc_plan(fabric.to_map(), cfg, buf_bytes, burst_bytes, host_fifo_bytes, env["shaper"]["slack_s"])
    datapath = env["datapath"]
    with LiveFabric(fabric, workdir, state, datapath=datapath, pfc_plan=plan) as lf:
        # first the pings: ovs-vswitchd opens its transmit socket when it forwards its first packet
        # (a freshly started OVS has none to enlarge)
        warm_up_reachability(lf)
        buf = contextlib.nullcontext()
        if datapath == "user":
            buf = dataplane.OvsTxBuffer(ovs_tx_budget_bytes, state)
        with buf:
            if datapath == "user" and not (buf.applied or buf.reason == "already large enough"):
                raise SetupError(f"could not enlarge Open vSwitch's transmit buffer: {buf.record()}")
            yield lf, plan


def start_udp_flows(lf, state, flows: list[dict], out: Path, port: int, deadline_unix_s: float,
                    start_in_s: float = 0.5, idle_s: float | None = None):
    """Start UDP traffic agents (traffic.agent) for ``flows`` and release them together.

    Args:
        flows: ``[{"src", "dst", "dscp", "bytes" | "duration_s"}]``, one flow per source host.
        out: folder for the agents' records (``<host>.rx.json``, ``<host>.tx.json``).
        port: the receivers' UDP port.
        idle_s: a receiver ends a flow whose end marker was lost this long after its last
            datagram (None: traffic.agent.UDP_IDLE_S); longer than any pause held on purpose.

    Returns:
        the released ``experiments.live.Agents`` (call ``wait(deadline)`` then ``kill()``).

    Raises:
        SetupError: an agent did not get ready.
    """
    Path(out).mkdir(parents=True, exist_ok=True)
    agents = Agents(lf, state)
    by_dst: dict[str, int] = {}
    for f in flows:
        by_dst[f["dst"]] = by_dst.get(f["dst"], 0) + 1
    for dst, n in by_dst.items():
        job = {"role": "udp-receiver", "port": port, "expect_flows": n,
               "deadline_unix_s": deadline_unix_s, "out": str(Path(out) / f"{dst}.rx.json")}
        if idle_s is not None:
            job["idle_s"] = idle_s
        agents.start(dst, "rx", job)
    for i, f in enumerate(flows):
        size = {"bytes": f["bytes"]} if "bytes" in f else {"duration_s": f["duration_s"]}
        agents.start(f["src"], "tx", {"role": "udp-sender", "dscp": f["dscp"], "deadline_unix_s": deadline_unix_s,
                                      "out": str(Path(out) / f"{f['src']}.tx.json"),
                                      "flows": [{"dst_ip": lf.fabric.node(f["dst"]).ip, "port": port, "flow_id": i,
                                                 **size}]})
    agents.ready_then_release(start_in_s)
    return agents


def udp_flow_records(lf, flows: list[dict], out: Path) -> list[tuple[dict, dict | None]]:
    """For each flow of :func:`start_udp_flows`, its sender's record and its receiver's (None if
    nothing arrived), from the agents' files in ``out``."""
    res = []
    for f in flows:
        tx = json.loads((Path(out) / f"{f['src']}.tx.json").read_text())["flows"][0]
        rx = json.loads((Path(out) / f"{f['dst']}.rx.json").read_text())["flows"]
        ip = lf.fabric.node(f["src"]).ip
        res.append((tx, next((r for r in rx if r["src_ip"] == ip and r["src_port"] == tx["src_port"]), None)))
    return res
