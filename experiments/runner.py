"""The experiment runner: scenario -> fabric -> controller -> traffic ->
collectors -> results folder.

Every exit path (normal end, exception, Ctrl-C, SIGTERM) tears the fabric
down through :class:`experiments.fabric.LiveFabric` and
:class:`experiments.state.RunState`; a run after a SIGKILLed one starts by
removing what the record of that run lists (case C2).
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

import yaml

from common.ecn import describe, profile_spec
from common.errors import CapabilityError, ScenarioError, SetupError
from controller import dataplane
from controller.bpfmarker import OBJECT as ECN_BPF_OBJECT
from controller.dataplane import PortQueue
from controller.pfcbpf import OBJECT as PFC_OBJECT
from controller.routing import ECMP_METHOD
from experiments import analysis, collrun, draw, pfcrun, plot, probe as envprobe, rocerun
from experiments.fabric import REPO, LiveFabric
from experiments.live import (_SIGNALLED, Agents, _on_signal, check_signalled, measure_rtt_s,  # noqa: F401
                              start_sampler, stop_sampler, warm_up_reachability)
from experiments.plan import check_against_fabric
from experiments.scenario import FRAME_BYTES, buffer_bytes
from experiments.state import RunState
from experiments.tables import write_csv

#: Host NIC queue length in packets (like a default txqueuelen).
HOST_QUEUE_PACKETS = 1000
#: Set to a phase name to raise an exception there (used by the teardown tests).
FAULT_ENV = "FABRICLAB_INJECT_FAULT"
#: Seconds a time-limited TCP flow may take past its duration to end (its sender's last bytes and
#: FIN acknowledged). Under heavy loss a segment can sit in Linux's exponential RTO backoff: lost 7
#: times in a row from the 200 ms minimum it waits 0.2 x (2^8 - 1) = 51 s in all. With 30 s, a
#: 3:1 Spine-Leaf permutation at 2 Mbit/s (6178 drops in 8 s) had a flow end at 37 s, after its
#: receiver's deadline, under a CPU-heavy process (2 of 10 runs, 2026-12-02).
TAIL_GRACE_S = 60.0
#: Seconds the runner waits past the agents' own deadline before it kills them: at its deadline an
#: agent stops waiting and writes what it has (a receiver killed there loses every flow's record).
AGENT_EXIT_GRACE_S = 5.0


class InjectedFault(RuntimeError):
    """Raised on purpose by :func:`_maybe_fault` to test teardown."""


def _maybe_fault(phase: str) -> None:
    if os.environ.get(FAULT_ENV) == phase:
        raise InjectedFault(f"injected fault at phase {phase!r} ({FAULT_ENV})")


def port_queue(sc: dict, rate_mbps: float) -> PortQueue:
    """The switch egress queue a scenario asks for at ``rate_mbps``."""
    q = sc["queues"]
    return PortQueue(rate_mbps=rate_mbps, buffer_bytes=q["buffer_bytes"], buffer_packets=q["buffer_packets"],
                     burst_bytes=q["burst_bytes"])


ALLOWED_CC = "net.ipv4.tcp_allowed_congestion_control"


class AllowCongestionControl:
    """Context manager: let network namespaces pick ``name`` as their default.

    The kernel lets a non-initial namespace set ``tcp_congestion_control``
    only to an algorithm listed in the root namespace's
    ``tcp_allowed_congestion_control`` (EPERM otherwise). This adds ``name``
    for the run and restores the previous list afterwards.
    """

    def __init__(self, name: str, state: RunState):
        self.name = name
        self.state = state
        self.before = None

    def __enter__(self):
        allowed = dataplane.get_sysctl(ALLOWED_CC).split()
        if self.name not in allowed:
            self.before = " ".join(allowed)
            self.state.remember("sysctl", [ALLOWED_CC, self.before])
            dataplane.set_sysctl(ALLOWED_CC, " ".join(allowed + [self.name]))
        return self

    def __exit__(self, *exc):
        if self.before is not None:
            dataplane.set_sysctl(ALLOWED_CC, self.before)
            self.state.forget("sysctl")
        return False


def configure_hosts(lf: LiveFabric, hosts: dict) -> dict:
    """Set per-namespace TCP congestion control and ECN (a scenario's ``hosts`` section) on every host
    (case H1); return what was read back. Raises SetupError if a read-back differs."""
    cc = hosts["tcp_congestion_control"]
    ecn = str(hosts["tcp_ecn"])
    seen = {}
    for h in lf.net.hosts:
        dataplane.set_sysctl("net.ipv4.tcp_congestion_control", cc, h.pid)
        dataplane.set_sysctl("net.ipv4.tcp_ecn", ecn, h.pid)
        got = (dataplane.get_sysctl("net.ipv4.tcp_congestion_control", h.pid),
               dataplane.get_sysctl("net.ipv4.tcp_ecn", h.pid))
        if got != (cc, ecn):
            raise SetupError(f"{h.name}: sysctls read back as {got}, asked {(cc, ecn)}")
        seen[h.name] = {"tcp_congestion_control": got[0], "tcp_ecn": int(got[1])}
    return seen


def run(sc: dict, results_root: Path, quiet: bool = False) -> Path:
    """Run one resolved scenario; return its results folder.

    Raises:
        CapabilityError: the kernel lacks the requested congestion control.
        SetupError: building or configuring the fabric failed.
        InjectedFault: when asked to by $FABRICLAB_INJECT_FAULT (tests).
    """
    _SIGNALLED.clear()
    old = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        out = _run(sc, Path(results_root), quiet)
        check_signalled()
        return out
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _say(quiet, *a):
    if not quiet:
        print("fabriclab:", *a, flush=True)


def choose_marker(sc: dict, env: dict, needed: bool, priority_queues: bool = False) -> tuple[str, str]:
    """The ECN marker for this run and why: ``none`` when no round marks, else ``red`` or ``bpf``.

    ``auto`` picks the kernel's RED where the kernel has sch_red and the ports have one FIFO
    each, else the BPF marker (``priority_queues``: the scenario has priorities/PFC, whose
    per-priority queues kernel RED would replace).

    Raises:
        CapabilityError: ``ecn.marker`` names a mechanism this machine lacks (never a silent fallback).
    """
    if not needed:
        return "none", "no round asks for ECN marking"
    asked = sc["ecn"]["marker"]
    has_red = bool(env["qdiscs"].get("red"))
    if asked == "red" and not has_red:
        raise CapabilityError("ecn.marker: red: this kernel has no sch_red (use bpf or auto)")
    if asked == "bpf" or (asked == "auto" and (not has_red or priority_queues)):
        if not ECN_BPF_OBJECT.exists():
            raise CapabilityError(f"ecn.marker: bpf: {ECN_BPF_OBJECT} is not built (run 'sudo make setup'; "
                                  "needs clang and libbpf-dev)")
        if not env["qdiscs"].get("clsact"):
            raise CapabilityError("ecn.marker: bpf: this kernel has no clsact qdisc")
        why = ("asked for" if asked == "bpf" else "per-priority queues (priorities/pfc)" if priority_queues
               else "this kernel has no sch_red")
        return "bpf", f"tc clsact egress BPF classifier with a virtual queue per port ({why})"
    return "red", ("kernel RED (ecn, nodrop) under each port's HTB shaper "
                   + ("(asked for)" if asked == "red" else "(this kernel has sch_red)"))


def ecn_plan(sc: dict, fabric_map: dict, marker: str, profiles: dict) -> dict:
    """The plan the controller applies (controller.ecnports): every switch port's rate, buffer,
    shaper burst, FIFO and first-round profile."""
    q = sc["queues"]
    fifo = {"kind": "bfifo", "limit": q["buffer_bytes"]} if q["buffer_bytes"] is not None else \
        {"kind": "pfifo", "limit": q["buffer_packets"]}
    ports = {}
    for sw in fabric_map["switches"]:
        for p in sw["ports"]:
            prof = profiles[p["intf"]]
            ports[p["intf"]] = {"rate_bps": p["rate_mbps"] * 1e6, "buffer_bytes": buffer_bytes(q),
                                "burst_bytes": q["burst_bytes"], "fifo": fifo, "profile": profile_spec(prof)}
    return {"marker": marker, "ports": ports}


def check_red_weights(sc: dict, rounds: list[dict]) -> None:
    """Kernel RED keeps its EWMA weight as a shift: refuse a weight it cannot hold.

    Raises:
        ScenarioError: naming the profile's key, e.g. ``rounds[1].ecn.layers.leaf.red.weight``.
    """
    for i, r in enumerate(rounds):
        prefix = f"rounds[{i}].ecn" if sc["rounds"] else "ecn"
        specs = [("profile", r["ecn"]["profile"])] + [(f"layers.{k}", v) for k, v in r["ecn"]["layers"].items()] \
            + [(f"ports.{k}", v) for k, v in r["ecn"]["ports"].items()]
        for where, spec in specs:
            if isinstance(spec, dict) and "red" in spec and spec["red"].get("weight") is not None:
                try:
                    dataplane.red_wlog(spec["red"]["weight"])
                except ValueError as e:
                    raise ScenarioError(f"{prefix}.{where}.red.weight", str(e)) from None


class _RoundRun(NamedTuple):
    """What one round left for the analysis after the fabric is gone."""
    dir: Path
    round: dict
    profiles: dict        # switch port -> EcnProfile
    host_cfg: dict
    codes: dict           # agent exit codes
    counters: dict        # marker counters over the round, per port
    timings: dict         # seconds
    pfc: dict | None      # PFC reports before/after the round, its begin time and state (None: no PFC)
    collective: dict | None = None   # experiments.collrun.run_round's result (None: flows, not a collective)


def _run(sc: dict, results_root: Path, quiet: bool) -> Path:
    t_begin = time.monotonic()
    timings = {}
    t = sc["traffic"]
    fabric, fabric_map, plan, rounds, profiles = check_against_fabric(sc)
    env = envprobe.probe()
    ccs = sorted({r["hosts"]["tcp_congestion_control"] for r in rounds})
    for i, r in enumerate(rounds):
        cc = r["hosts"]["tcp_congestion_control"]
        if not envprobe.ensure_congestion_control(cc):
            key = f"rounds[{i}].hosts.tcp_congestion_control" if sc["rounds"] else "hosts.tcp_congestion_control"
            raise CapabilityError(f"{key}: the kernel has no '{cc}' "
                                  f"(available: {' '.join(envprobe.tcp_congestion_controls()['available'])})")
    pfc_cfg = pfcrun.pfc_config(sc)
    marker, why = choose_marker(sc, env, any(p.kind != "off" for pr in profiles for p in pr.values()),
                                priority_queues=pfc_cfg is not None)
    plan_pfc = None
    if pfc_cfg is not None:
        if not PFC_OBJECT.exists():
            raise CapabilityError(f"pfc: {PFC_OBJECT} is not built (run 'sudo make setup'; needs clang and "
                                  "libbpf-dev): the priority queues' accounting needs it")
        plan_pfc = pfcrun.pfc_plan(fabric_map, replace(pfc_cfg, enabled=rounds[0]["pfc"]["enabled"]),
                                   buffer_bytes(sc["queues"]), sc["queues"]["burst_bytes"],
                                   HOST_QUEUE_PACKETS * FRAME_BYTES)
    env["pfc"] = None if pfc_cfg is None else {
        "mechanism": pfcrun.MECHANISM, "priorities": sc["priorities"], "pfc": sc["pfc"],
        "rounds": [{"name": r["name"], "enabled": r["pfc"]["enabled"]} for r in rounds]}
    if marker == "red":
        check_red_weights(sc, rounds)
    plan_ecn = ecn_plan(sc, fabric_map, marker, profiles[0]) if marker != "none" else None
    env["tcp_congestion_control"] = envprobe.tcp_congestion_controls()
    labels = [sorted({describe(p) for p in pr.values()}) for pr in profiles]   # per round
    env["ecn"] = {"marker": marker, "mechanism": why,
                  "rounds": [{"name": r["name"], "profiles": lab} for r, lab in zip(rounds, labels)]}
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = results_root / f"{stamp}-{sc['name']}"
    n = 1
    while out.exists():
        n += 1
        out = results_root / f"{stamp}-{sc['name']}-{n}"
    env["git_revision"] = _git_rev()
    env["scale"] = _scale(sc)
    env["routing"] = {"mode": sc["routing"]["mode"], **(ECMP_METHOD if sc["routing"]["mode"] == "ecmp" else {})}

    def host_queue(rate_mbps: float) -> PortQueue:
        return PortQueue(rate_mbps=rate_mbps, buffer_packets=HOST_QUEUE_PACKETS, burst_bytes=sc["queues"]["burst_bytes"])

    multi = sc["rounds"] is not None
    done = []
    # the run lock first: a run refused because another is active creates nothing (BusyError)
    with RunState(out.name) as state, contextlib.ExitStack() as allow:
        out.mkdir(parents=True)
        (out / "scenario.yaml").write_text(yaml.safe_dump(sc, sort_keys=False))
        (out / "environment.json").write_text(json.dumps(env, indent=2))
        _say(quiet, f"datapath={env['datapath']} kernel={env['kernel']} ECN marker={marker} results -> {out}")
        for cc in ccs:
            allow.enter_context(AllowCongestionControl(cc, state))
        if state.stale_report and any(state.stale_report[k] for k in ("processes", "bridges", "interfaces")):
            _say(quiet, f"removed state of an earlier run: {state.stale_report}")
        _maybe_fault("before_fabric")
        with LiveFabric(fabric, out, state, datapath=env["datapath"],
                        switch_queue=lambda rate: port_queue(sc, rate), host_queue=host_queue,
                        routing=sc["routing"]["mode"], ecn_plan=plan_ecn, pfc_plan=plan_pfc) as lf:
            timings.update(lf.timings_s)
            timings["setup_s"] = time.monotonic() - t_begin
            _say(quiet, f"fabric up in {timings['setup_s']:.1f} s: {len(fabric.switches)} switches, "
                        f"{len(fabric.hosts)} hosts, oversubscription {fabric.params['oversubscription']:g}:1")
            _maybe_fault("after_fabric")
            env["ecn"]["controller"] = lf.ecn_record
            if plan_pfc is not None:
                env["pfc"]["controller"] = lf.pfc_record
            pfc_on = plan_pfc is not None and plan_pfc["enabled"]
            timings["reachability_s"] = warm_up_reachability(lf)
            env["scale"]["measured_rtt_s"] = measure_rtt_s(lf, plan[0]["src"], plan[0]["dst"])
            env["scale"]["bdp_packets_measured_rtt"] = (sc["topology"]["host_rate_mbps"] * 1e6
                                                        * env["scale"]["measured_rtt_s"] / 8 / FRAME_BYTES)
            txbuf = contextlib.nullcontext()
            if env["datapath"] == "user":
                # with priority queues a port may hold its lossy buffer plus, per lossless priority,
                # up to one buffer per ingress port (bounded by the caps)
                queues = 1 + (len(pfc_cfg.lossless) if pfc_cfg is not None else 0)
                txbuf = dataplane.OvsTxBuffer(userspace_tx_budget_bytes(sc, fabric, queues), state)
            with txbuf:
                if env["datapath"] == "user":
                    env["ovs_userspace_tx_buffer"] = txbuf.record()
                    if not txbuf.applied and txbuf.reason != "already large enough":
                        print(f"fabriclab: WARNING: could not enlarge Open vSwitch's transmit buffer "
                              f"({txbuf.reason}); all queues of the fabric together are capped near "
                              f"{txbuf.before_bytes} bytes of packet memory, and excess packets are dropped "
                              "inside OVS, not in the qdiscs", file=sys.stderr)
                for i, (r, pr) in enumerate(zip(rounds, profiles)):
                    check_signalled()
                    rdir = out / "rounds" / f"{i + 1:02d}-{r['name']}" if multi else out
                    rdir.mkdir(parents=True, exist_ok=True)
                    (rdir / "agents").mkdir()
                    host_cfg = configure_hosts(lf, r["hosts"])
                    if i > 0 and plan_ecn is not None:
                        lf.ecn_request({intf: profile_spec(p) for intf, p in pr.items()})
                    renv = dict(env, host_config=host_cfg,
                                round={"index": i, "name": r["name"], "of": len(rounds), "profiles": labels[i]})
                    (rdir / "environment.json").write_text(json.dumps(renv, indent=2))
                    if multi:
                        traffic = (f"UDP DSCP {t['dscp']}" if t["transport"] == "udp" else
                                   f"RoCEv2 {r['roce']['mode']} DSCP {t['dscp']}" if t["transport"] == "roce" else
                                   f"{r['hosts']['tcp_congestion_control']} tcp_ecn={r['hosts']['tcp_ecn']}")
                        pfc_state = f", PFC {'on' if r['pfc']['enabled'] else 'off'}" if plan_pfc is not None else ""
                        _say(quiet, f"round {i + 1}/{len(rounds)} {r['name']}: {'; '.join(labels[i])}{pfc_state}, {traffic}")
                    pfc_round = None
                    if plan_pfc is not None:
                        if r["pfc"]["enabled"] != pfc_on:
                            pfc_on = r["pfc"]["enabled"]
                            lf.pfc_request({"enabled": pfc_on})
                        pfc_round = {"enabled": pfc_on, "begin_unix_s": time.time(),
                                     "before": lf.pfc_report(out / ".pfc_report.json")}
                    before = lf.ecn_counters()
                    t_round = time.monotonic()
                    coll, coll_res = r["collective"], None
                    if coll["kind"] is not None:
                        roce_args = None
                        if coll["transport"] == "roce":
                            roce_args = rocerun.collective_job_args(sc, r["roce"]["mode"])
                        coll_res = collrun.run_round(lf, state, {**coll, "seed": r["seed"], "roce_args": roce_args},
                                                     rdir / "agents",
                                                     sc["measurement"]["sample_hz"], quiet, say=lambda m: _say(quiet, m))
                        codes = {}
                    else:
                        codes = _traffic(lf, state, sc, rdir, rdir / "agents", plan, quiet,
                                         count_ecn=marker != "none" or r["hosts"]["tcp_ecn"] != 0,
                                         roce_mode=r["roce"]["mode"], seed=r["seed"])
                    rtimings = dict(timings, traffic_s=time.monotonic() - t_round)
                    counters = analysis.counter_deltas(before, lf.ecn_counters())
                    if pfc_round is not None:
                        pfc_round["after"] = lf.pfc_report(out / ".pfc_report.json")
                        (out / ".pfc_report.json").unlink()
                    done.append(_RoundRun(rdir, r, pr, host_cfg, codes, counters, rtimings, pfc_round, coll_res))
            t_down = time.monotonic()
        timings["teardown_s"] = time.monotonic() - t_down
    timings["total_s"] = time.monotonic() - t_begin
    (out / "environment.json").write_text(json.dumps(
        dict(env, host_config=done[0].host_cfg) if not multi else
        dict(env, host_config_per_round={d.round["name"]: d.host_cfg for d in done}), indent=2))

    summaries = []
    if done[0].collective is not None:
        return _collective_results(out, sc, env, fabric_map, done, timings, multi, quiet)
    for d in done:
        d.timings.update(teardown_s=timings["teardown_s"], total_s=timings["total_s"])
        roce = t["transport"] == "roce"
        if roce:
            flows = rocerun.collect_rows(d.dir / "agents", plan, d.codes)
        else:
            flows = analysis.collect_flows(d.dir / "agents", plan, d.codes)
        summary = analysis.write_results(d.dir, sc, fabric_map, flows, d.timings, d.host_cfg, plan,
                                         receiver_is_bottleneck=d.pfc is not None and d.pfc["enabled"])
        summary = analysis.add_ecn(d.dir, summary, env, d.profiles, d.counters, flows, marker)
        if d.pfc is not None:
            summary = pfcrun.add_to_summary(d.dir, summary, d.pfc, flows)
        if roce:
            mode = d.round["roce"]["mode"]
            summary = rocerun.add_to_summary(d.dir, summary, flows, mode, rocerun.dcqcn_params(sc), d.round["seed"])
        summaries.append(summary)
        plot.plot_all(d.dir)
    draw.draw(fabric_map, out / "topology.png", title=sc["name"])
    if multi:
        analysis.write_rounds(out, summaries)
        plot.plot_rounds(out)
    for summary in summaries:
        for h in (summary.get("pfc") or {}).get("headroom") or []:
            if h["warning"] and summary["pfc"]["enabled"]:
                print(f"fabriclab: WARNING: PFC: {h['warning']}", file=sys.stderr)
    if not quiet:
        for summary, d in zip(summaries, done):
            print(analysis.format_summary(summary, d.dir))
        if multi:
            print(analysis.format_rounds(out))
    return out


def _collective_results(out: Path, sc: dict, env: dict, fabric_map: dict, done: list, timings: dict, multi: bool,
                        quiet: bool) -> Path:
    """Results of a collective scenario: per round collective.csv, collective_steps.csv, plots and
    summary.json (``collective`` section); with rounds, collective_rounds.csv side by side."""
    rows = []
    for d in done:
        c = collrun.summarize(d.collective, d.dir)
        summary = {"scenario": sc["name"], "round": d.round["name"] if multi else None, "datapath": env["datapath"],
                   "kernel": env["kernel"], "timings_s": dict(d.timings, teardown_s=timings["teardown_s"],
                                                              total_s=timings["total_s"]), "collective": c}
        (d.dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        rows += [{"round": d.round["name"] if multi else sc["name"], **r} for r in c["sizes"]]
        if not quiet:
            print(f"{d.dir}\n  {collrun.format_line(c)}")
    draw.draw(fabric_map, out / "topology.png", title=sc["name"])
    if multi:
        write_csv(out / "collective_rounds.csv", list(rows[0]), rows)
    return out


def userspace_tx_budget_bytes(sc: dict, fabric, queues_per_port: int = 1) -> int:
    """Send buffer OVS's shared transmit socket needs (bytes) so every switch FIFO can fill at once
    (see dataplane): ``queues_per_port`` buffers of the scenario's size per switch port."""
    q = sc["queues"]
    per_port_frames = q["buffer_packets"] if q["buffer_packets"] is not None else -(-q["buffer_bytes"] // FRAME_BYTES)
    return len(fabric.switch_interfaces()) * (per_port_frames + 2) * queues_per_port * dataplane.FRAME_TRUESIZE_BYTES


def _traffic(lf, state, sc, out, agent_dir, plan, quiet, count_ecn=False, roce_mode="dcqcn", seed=None):
    """Start the sampler, one receiver agent per destination and one sender agent per source,
    release the synchronized start, take one ``ss -tin`` snapshot of the first sender's live flows
    (case H1: the algorithm really in use) into ``ss_tin.txt``, wait; returns exit codes by
    ``host.rx``/``host.tx``. RoCE (``traffic.transport`` roce): one agent per host
    (experiments.rocerun) in ``roce_mode``, arrivals drawn with ``seed``, codes by ``host.roce``."""
    t = sc["traffic"]
    sampler = start_sampler(lf, state, out, sc["measurement"]["sample_hz"])
    if t["transport"] == "roce":
        try:
            return _roce_traffic(lf, state, sc, agent_dir, plan, quiet, roce_mode, sc["seed"] if seed is None else seed)
        finally:
            stop_sampler(sampler)
    agents = Agents(lf, state)
    by_dst, by_src = {}, {}
    for f in plan:
        by_dst.setdefault(f["dst"], []).append(f)
        by_src.setdefault(f["src"], []).append(f)
    try:
        run_s = t["duration_s"] or t["timeout_s"]
        deadline = time.time() + run_s + t["start_delay_s"] + TAIL_GRACE_S
        udp = t["transport"] == "udp"
        for dst, flows in by_dst.items():
            agents.start(dst, "rx", {"role": "udp-receiver" if udp else "receiver", "port": t["port"],
                                     "expect_flows": len(flows), "count_ecn": count_ecn, "dscp": t["dscp"],
                                     "deadline_unix_s": deadline, "out": str(agent_dir / f"{dst}.rx.json")})
        for src, flows in by_src.items():
            agents.start(src, "tx", {"role": "udp-sender" if udp else "sender", "deadline_unix_s": deadline,
                                     "dscp": t["dscp"],
                                     "out": str(agent_dir / f"{src}.tx.json"),
                                     "flows": [{"dst_ip": f["dst_ip"], "port": t["port"], "bytes": f["bytes"],
                                                "duration_s": f["duration_s"], "flow_id": f["flow_id"]}
                                               for f in flows]})
        agents.wait_ready()
        start_at = time.time() + t["start_delay_s"]
        agents.release(start_at)
        what = (f"{len(by_src)} senders x {t['response_bytes']} B -> {t['receiver']}" if t["pattern"] == "incast" else
                f"{len(plan)} flows ({t['flows_per_pair']} per pair) between {len(set(by_src) | set(by_dst))} hosts, "
                + (f"{t['duration_s']:g} s each" if t["duration_s"] else f"{t['flow_bytes']} B each"))
        _say(quiet, f"{t['pattern']}: {what}")
        _maybe_fault("after_traffic_start")
        if not udp:
            snapshot_ss(lf, plan[0]["src"], t["port"], start_at + 0.2, out / "ss_tin.txt")
        codes = agents.wait(min(deadline, start_at + (t["duration_s"] + TAIL_GRACE_S if t["duration_s"]
                                                      else t["timeout_s"])) + AGENT_EXIT_GRACE_S)
        time.sleep(sc["measurement"]["post_s"])
    finally:
        agents.kill()
        stop_sampler(sampler)
    return codes


def _roce_traffic(lf, state, sc, agent_dir, plan, quiet, mode: str, seed: int) -> dict[str, int]:
    """The RoCE agents of one round (see :func:`_traffic`)."""
    t = sc["traffic"]
    flows = rocerun.scenario_flows(sc, plan, seed)
    last_post = max((m["at_s"] for f in flows for m in f.get("messages", [])), default=0.0)
    run_s = max(t["duration_s"] or 0.0, last_post) + t["timeout_s"]
    deadline = time.time() + run_s + t["start_delay_s"] + 30
    agents = rocerun.start_roce_flows(lf, state, flows, agent_dir, deadline, start_in_s=t["start_delay_s"],
                                      **rocerun.scenario_job_args(sc, mode))
    try:
        what = (f"{len(flows)} senders x {t['responses']} x {t['response_bytes']} B -> {t['receiver']} "
                f"({t['arrival']}{', load ' + format(t['load'], 'g') if t['load'] else ''})"
                if t["pattern"] == "incast" else f"{len(flows)} flows")
        _say(quiet, f"{t['pattern']} over RoCEv2 ({mode}): {what}")
        _maybe_fault("after_traffic_start")
        codes = agents.wait(deadline + AGENT_EXIT_GRACE_S)
        time.sleep(sc["measurement"]["post_s"])
    finally:
        agents.kill()
    return codes


def snapshot_ss(lf, host: str, port: int, at_unix_s: float, path: Path) -> None:
    """Write ``ss -tin`` of ``host``'s established connections to ``port`` at ``at_unix_s`` to ``path``."""
    time.sleep(max(0.0, at_unix_s - time.time()))
    p = lf.host(host).popen(["ss", "-tin", "state", "established", "dport", "=", f":{port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        text, _ = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        text = "ss -tin timed out"
    path.write_text(text)


def _git_rev() -> str:
    if os.environ.get("FABRICLAB_GIT_REVISION"):   # set by the VM lane, whose copy has no .git
        return os.environ["FABRICLAB_GIT_REVISION"]
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def _scale(sc: dict) -> dict:
    """The dimensionless numbers of the run (what a scaled emulation keeps: rates down by s, times up by s)."""
    q = sc["queues"]
    buf_pkts = q["buffer_packets"] if q["buffer_packets"] is not None else q["buffer_bytes"] / FRAME_BYTES
    return {"host_rate_mbps": sc["topology"]["host_rate_mbps"], "buffer_packets": buf_pkts,
            "response_packets": sc["traffic"]["response_bytes"] / 1448}
