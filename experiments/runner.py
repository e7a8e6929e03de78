"""The run loop: scenario -> fabric -> controller -> rounds -> results folder.

It knows no workload and no feature by name. It plans every registered feature
(experiments.features), starts the fabric with their plans, and for each round: lets the
features act before the traffic, runs the round's workload (experiments.workloads), lets the
features act after it, and analyses the round at once (the workload's summary, then each
feature's section; summary.json written once), so a run interrupted later keeps every finished
round's results.

Every exit path (normal end, exception, Ctrl-C, SIGTERM, SIGHUP) tears the fabric down through
:class:`experiments.fabric.LiveFabric` and :class:`experiments.state.RunState`; a run after a
SIGKILLed one starts by removing what the record of that run lists.
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from controller.dataplane.tcqdisc import PortQueue
from controller.datapaths.registry import from_environment
from controller.routing import strategy_class
from experiments import draw, folders, probe as envprobe
from experiments.context import HOST_QUEUE_PACKETS, RoundRecord, RunContext, maybe_fault
from experiments.fabric import REPO, LiveFabric
from experiments.features.registry import FEATURES
from experiments.live import (ROUND_STOP, SIGNAL_STOP, check_signalled, measure_rtt_s, signals_unwind,
                              warm_up_reachability)
from experiments.metrics import measure, one_line
from experiments.progress import Progress
from experiments.rounds import analyse_round, round_dir, run_context, save_round, write_report
from experiments.plan import check_against_fabric
from experiments.scenario import FRAME_BYTES
from experiments.state import RunState, describe_report
from experiments.workloads.registry import WORKLOADS, workload_for
from experiments.model import Round, Scenario
from common.errors import UnfaithfulRun
from common.units import FRAME_TRUESIZE_BYTES


@dataclass(frozen=True)
class Platform:
    """The run loop's side effects on this machine, in one place so component tests can drive the
    loop with fakes (tests/unit/test_run_loop.py).

    Attributes:
        probe: () -> the environment record (experiments.probe.probe).
        run_state: run id -> the run-state context (lock and record; experiments.state.RunState).
        live_fabric: LiveFabric's signature -> the live fabric context (experiments.fabric.LiveFabric).
        warm_up_s: live fabric -> seconds the all-pairs warm-up took (SetupError when pairs are missing).
        rtt_s: (live fabric, src, dst, payload_bytes=56) -> the idle round-trip time in seconds of
            pings of that payload.
        datapath_hold: (scenario, fabric, env, state, queues per port) -> a context in which the
            run's datapath holds what it needs while every queue can fill, for the rounds
            (:func:`datapath_buffer_bytes`; Open vSwitch's userspace datapath: its transmit buffer).
    """
    probe: Callable
    run_state: Callable
    live_fabric: Callable
    warm_up_s: Callable
    rtt_s: Callable
    datapath_hold: Callable


def port_queue(sc: Scenario, rate_mbps: float, slack_s: float) -> PortQueue:
    """The switch egress queue a scenario asks for at ``rate_mbps``, on a machine whose shaper
    slack is ``slack_s`` seconds (``environment.json``'s ``shaper.slack_s``)."""
    q = sc.queues
    return PortQueue(rate_mbps=rate_mbps, buffer_bytes=q.buffer_bytes, buffer_packets=q.buffer_packets,
                     burst_bytes=q.burst_for(rate_mbps, slack_s))


def run(sc: Scenario, results_root: Path, quiet: bool = False, platform: Platform | None = None,
        features: dict | None = None, workloads: dict | None = None, accept_unfaithful: bool = False,
        on_round: Callable[[str, Path, dict], None] | None = None) -> Path:
    """Run one resolved scenario; return its results folder.

    ``platform`` (default :data:`PLATFORM`, this machine), ``features`` (default
    experiments.features.FEATURES) and ``workloads`` (default experiments.workloads.WORKLOADS)
    are for component tests. ``accept_unfaithful``: a round whose fidelity checks fail does not
    fail the run; its outputs are marked instead. ``on_round(name, folder, summary)`` is called
    after each round's analysis (a study's progress).

    Raises:
        UnfaithfulRun: a round's fidelity checks failed (every round ran and was written, the
            fabric is down) and ``accept_unfaithful`` is false.
        ScenarioError, CapabilityError: a key this machine cannot run (nothing started).
        BusyError: another run holds the machine (nothing created).
        PathError: ``results_root`` cannot hold the run's folder (experiments.folders; nothing started).
        SetupError: building or configuring the fabric failed.
        InjectedFault: when asked to by $FABRICLAB_INJECT_FAULT (tests).
    """
    with signals_unwind():
        return _run(sc, Path(results_root), quiet, platform or PLATFORM, FEATURES if features is None else features,
                    WORKLOADS if workloads is None else workloads, accept_unfaithful, on_round)


def preflight(sc: Scenario, env: dict | None = None, platform: Platform | None = None,
              features: dict | None = None) -> dict:
    """What a run checks before it creates anything, without running it: the scenario against
    its fabric, then every feature's plan against this machine (``env``: the probe's record,
    default a fresh probe). A study calls it for every fabric run before its first. Returns the
    environment record with what the features planned.

    Raises:
        ScenarioError, CapabilityError: as :func:`run` would, naming the scenario's key.
    """
    layout = check_against_fabric(sc)
    env = dict(env) if env is not None else (platform or PLATFORM).probe()
    ctx = run_context(sc, layout, env, Path("preflight-not-written"), True)
    queues_per_port = 1
    for f in (FEATURES if features is None else features).values():
        queues_per_port += f(ctx).plan(queues_per_port)
    return ctx.env


def _results_folder(results_root: Path, name: str) -> Path:
    """The run's folder to be: checked (experiments.folders), not created. PathError otherwise."""
    return folders.next_folder(folders.check_results_root(results_root), name)


def _merge(env: dict, more: dict) -> dict:
    """``env`` with ``more`` merged one level deep (a dict value updates a dict value)."""
    out = dict(env)
    for k, v in more.items():
        out[k] = {**out[k], **v} if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _run(sc: Scenario, results_root: Path, quiet: bool, platform: Platform, feature_registry: dict,
         workload_registry: dict, accept_unfaithful: bool = False,
         on_round: Callable[[str, Path, dict], None] | None = None) -> Path:
    """The run loop: plan, bring the fabric up, run every round, tear down, finish (see :func:`run`)."""
    t_begin = time.monotonic()
    timings = {}
    layout = check_against_fabric(sc)          # a scenario that does not fit its fabric: refused before the probe
    out = _results_folder(results_root, sc.name)  # a bad --results: refused before anything starts
    ctx = run_context(sc, layout, platform.probe(), out, quiet, accept_unfaithful)
    env = ctx.env
    features, queues_per_port, round_workload = _plan_run(ctx, feature_registry, workload_registry)
    fabric_args = {k: v for f in features for k, v in f.fabric_args().items()}
    slack_s = env["shaper"]["slack_s"]

    def host_queue(rate_mbps: float) -> PortQueue:
        return PortQueue(rate_mbps=rate_mbps, buffer_packets=HOST_QUEUE_PACKETS,
                         burst_bytes=sc.queues.burst_for(rate_mbps, slack_s))

    done: list[tuple[str, RoundRecord, dict]] = []
    round_env: list[dict] = []
    # the run lock first: a run refused because another is active creates nothing (BusyError)
    with platform.run_state(out.name) as state, contextlib.ExitStack() as run_long:
        _open_run(ctx, features, state, run_long)
        maybe_fault("before_fabric")
        with platform.live_fabric(ctx.fabric, out, state, datapath=from_environment(env),
                                  switch_queue=lambda rate: port_queue(sc, rate, slack_s), host_queue=host_queue,
                                  routing=sc.routing.mode, **fabric_args) as lf:
            _fabric_up(ctx, lf, timings, t_begin)
            maybe_fault("after_fabric")
            for f in features:
                f.after_fabric(lf)
            timings["reachability_s"] = platform.warm_up_s(lf)
            _measure_rtts(ctx, lf, platform)
            with platform.datapath_hold(sc, ctx.fabric, env, state, queues_per_port), \
                    Progress("rounds", len(ctx.rounds), quiet, lines=False) as progress:
                for i, r in enumerate(ctx.rounds):
                    done.append(_one_round(ctx, i, round_workload[i], features, lf, state, timings, round_env))
                    progress.advance(1, f"round {i + 1}/{len(ctx.rounds)} {r.name}: "
                                        + one_line(measure(done[-1][2]), (done[-1][2].get("bottleneck") or {}).get("intf")))
                    if on_round is not None:
                        on_round(r.name, done[-1][1].dir, done[-1][2])
                    if SIGNAL_STOP.stopped:
                        break                  # the run ends after the round a signal stopped
                for f in features:
                    env.update(_merge(env, f.after_rounds(lf)))
                maybe_fault("after_rounds")
            t_down = time.monotonic()
        timings["teardown_s"] = time.monotonic() - t_down
    timings["total_s"] = time.monotonic() - t_begin
    _finish_run(ctx, done, round_env, timings, {w.name: w for w in round_workload})
    return out


def _plan_run(ctx: RunContext, feature_registry: dict, workload_registry: dict) -> tuple[list, int, list]:
    """Every feature planned in order (each adds the queues per port it needs) and each round's
    workload (one instance per workload for the run); the run's own environment entries.
    Returns ``(features, queues_per_port, the workload of each round)``."""
    sc, env = ctx.sc, ctx.env
    features = [f(ctx) for f in feature_registry.values()]
    queues_per_port = 1
    for f in features:
        queues_per_port += f.plan(queues_per_port)
    workloads = {}                    # name -> the run's instance
    round_workload = [workloads.setdefault(w.name, w(ctx)) for w in
                      (workload_for(sc, r, workload_registry) for r in ctx.rounds)]
    env["git_revision"] = _git_rev()
    env["scale"] = _scale(sc)
    env["routing"] = {"mode": sc.routing.mode, **strategy_class(sc.routing.mode).METHOD}
    env["accept_unfaithful"] = ctx.accept_unfaithful
    return features, queues_per_port, round_workload


def _open_run(ctx: RunContext, features: list, state, run_long: contextlib.ExitStack) -> None:
    """The results folder made, the scenario and environment written, the run's headline said, each
    feature entered for the run; a crashed earlier run's leftovers reported."""
    out, env = ctx.out, ctx.env
    folders.make_folder(out)
    (out / "scenario.yaml").write_text(yaml.safe_dump(ctx.sc.to_data(), sort_keys=False))
    (out / "environment.json").write_text(json.dumps(env, indent=2))
    ctx.say(" ".join([f"datapath={env['datapath']} kernel={env['kernel']}"]
                     + [h for h in (f.headline() for f in features) if h] + [f"results -> {out}"]))
    for f in features:
        f.enter(run_long, state)
    if state.stale_report and any(state.stale_report[k] for k in ("processes", "bridges", "interfaces")):
        ctx.say(f"removed state of an earlier run: {describe_report(state.stale_report)}")


def _fabric_up(ctx: RunContext, lf, timings: dict, t_begin: float) -> None:
    """Say the fabric is up (its size, the controller's API and where its token is) and record the API."""
    fabric, env = ctx.fabric, ctx.env
    timings.update(lf.timings_s)
    timings["setup_s"] = time.monotonic() - t_begin
    # where the token the API's changes need is (its owner reads it; the token is recorded nowhere)
    token_file = getattr(lf, "token_file", None)
    ctx.say(f"fabric up in {timings['setup_s']:.1f} s: {len(fabric.switches)} switches, "
            f"{len(fabric.hosts)} hosts, oversubscription {fabric.params['oversubscription']:g}:1; "
            f"controller API {lf.rest_url}/fabriclab/" + (f" (changes need the token in {token_file})"
                                                           if token_file else ""))
    env["controller_api"] = f"{lf.rest_url}/fabriclab/"
    env["controller_token_file"] = str(token_file) if token_file else None


def _measure_rtts(ctx: RunContext, lf, platform: Platform) -> None:
    """The first planned pair's RTT, small and full-frame, and the BDPs they give, into ``env["scale"]``;
    the environment written again, so a run stopped after its rounds leaves them on record and
    ``analyze`` rebuilds the same summaries."""
    sc, env, plan = ctx.sc, ctx.env, ctx.plan
    scale = env["scale"]
    scale["measured_rtt_s"] = platform.rtt_s(lf, plan[0]["src"], plan[0]["dst"])
    scale["rtt_probe_hosts"] = [plan[0]["src"], plan[0]["dst"]]     # whose path both RTTs are
    scale["bdp_packets_measured_rtt"] = sc.topology.host_rate_mbps * 1e6 * scale["measured_rtt_s"] / 8 / FRAME_BYTES
    # a data packet's round trip: full frames both ways, serialised at every hop
    scale["measured_rtt_full_frame_s"] = platform.rtt_s(lf, plan[0]["src"], plan[0]["dst"],
                                                        payload_bytes=FRAME_BYTES - 42)
    scale["bdp_packets_full_frame_rtt"] = (sc.topology.host_rate_mbps * 1e6
                                           * scale["measured_rtt_full_frame_s"] / 8 / FRAME_BYTES)
    (ctx.out / "environment.json").write_text(json.dumps(env, indent=2))


def _one_round(ctx: RunContext, i: int, w, features: list, lf, state, timings: dict,
               round_env: list[dict]) -> tuple[str, RoundRecord, dict]:
    """Round ``i``: its folder and environment (each feature's additions), its traffic through
    workload ``w``, each feature's record, the raw record saved and the round analysed. Appends the
    round's own environment entries to ``round_env``; returns ``(workload name, record, summary)``."""
    env, r = ctx.env, ctx.rounds[i]
    check_signalled()
    ROUND_STOP.clear()
    rdir = round_dir(ctx, i, r)
    rdir.mkdir(parents=True, exist_ok=True)
    (rdir / "agents").mkdir()
    rec = RoundRecord(index=i, round=r, dir=rdir)
    renv = dict(env, round={"index": i, "name": r.name, "of": len(ctx.rounds)})
    rec.port_intent = [x for x in (f.port_intent(rec) for f in features) if x]
    for f in features:
        renv = _merge(renv, f.before_round(lf, rec))
        rec.options.update(f.round_options(rec))
    round_env.append({k: v for k, v in renv.items() if k not in env})
    (rdir / "environment.json").write_text(json.dumps(renv, indent=2))
    if ctx.multi:
        parts = [p for p in (f.describe_round(rec) for f in features) if p]
        ctx.say(f"round {i + 1}/{len(ctx.rounds)} {r.name}: " + ", ".join(parts + [w.describe_round(r)]))
    t_round = time.monotonic()
    # a signal from here to the end of the analysis stops the round's traffic and
    # keeps what it measured; the run ends after it (experiments.live.SignalStop)
    with SIGNAL_STOP.keeping():
        rec.raw = w.run_round(lf, state, rec)
        rec.timings_s = dict(timings, traffic_s=time.monotonic() - t_round)
        rec.stopped = ROUND_STOP.reason if ROUND_STOP.is_set() else None
        for f in features:
            got = f.after_round(lf, rec)
            if got is not None:
                rec.features[f.name] = got
        save_round(rec, w.name)
        return w.name, rec, analyse_round(ctx, w, features, rec)


def _finish_run(ctx: RunContext, done: list, round_env: list[dict], timings: dict, workloads: dict) -> None:
    """After the fabric: the run's environment and timings, the topology drawing, each workload's
    rounds side by side, the report; then a signal's exit, or the failed fidelity checks
    (UnfaithfulRun unless accepted)."""
    out, rounds, multi = ctx.out, ctx.rounds, ctx.multi
    (out / "environment.json").write_text(json.dumps(_run_environment(ctx.env, rounds, round_env, multi), indent=2))
    (out / "timings.json").write_text(json.dumps(
        {**timings, "rounds": {rec.round.name: rec.timings_s.get("traffic_s") for _, rec, _ in done}}, indent=2))
    draw.draw(ctx.fabric_map, out / "topology.png", title=ctx.sc.name)
    if multi:
        for name, w in workloads.items():
            w.finish_run([(rec, s) for n, rec, s in done if n == name])
    write_report(out)
    ctx.say(f"fabric down in {timings['teardown_s']:.1f} s; {timings['total_s']:.1f} s in all; results in {out}")
    if SIGNAL_STOP.stopped:
        kept = done[-1][1].dir if done else out
        print(f"fabriclab: the stopped round's results are kept in {kept} (summary.json: stopped); "
              f"{len(done)} of {len(rounds)} round(s) ran", file=sys.stderr, flush=True)
        check_signalled(ending=True)          # exit with the signal's code (130, 143, 129)
    failed = [(rec.round.name, line) for _, rec, s in done for line in s["fidelity"]["failures"]]
    if failed:
        if not ctx.accept_unfaithful:
            raise UnfaithfulRun(failed, out)
        print(f"fabriclab: WARNING: {len(failed)} fidelity check(s) failed and were accepted (as --accept-unfaithful "
              "and every study ask: a study marks such cells unfaithful); the summary.json of each round that "
              "failed says fidelity.accepted_unfaithful", file=sys.stderr)


def _run_environment(env: dict, rounds: list[Round], round_env: list[dict], multi: bool) -> dict:
    """The run's environment.json at the end: with one round, what the round added (e.g.
    ``host_config``); with rounds, each such key as ``<key>_per_round`` by round name."""
    if not multi:
        return {**env, **{k: v for k, v in round_env[0].items() if k != "round"}}
    keys = list(dict.fromkeys(k for re_ in round_env for k in re_ if k != "round"))
    return {**env, **{f"{k}_per_round": {r.name: re_.get(k) for r, re_ in zip(rounds, round_env)} for k in keys}}


@contextlib.contextmanager
def _datapath_hold(sc: Scenario, fabric, env: dict, state: RunState, queues_per_port: int):
    """What the run's datapath holds while every queue of the block can fill
    (:meth:`controller.datapaths.base.Datapath.hold_for_run` of :func:`datapath_buffer_bytes`;
    Open vSwitch's userspace datapath enlarges its shared transmit buffer, recorded as
    ``ovs_userspace_tx_buffer``); what it records goes into environment.json."""
    with from_environment(env).hold_for_run(datapath_buffer_bytes(sc, fabric, queues_per_port), state) as rec:
        env.update(rec)
        yield


#: This machine: the real probe, run state, fabric, warm-up, RTT probe and what the datapath holds for the run.
PLATFORM = Platform(probe=envprobe.probe, run_state=RunState, live_fabric=LiveFabric,
                    warm_up_s=warm_up_reachability, rtt_s=measure_rtt_s, datapath_hold=_datapath_hold)


def datapath_buffer_bytes(sc: Scenario, fabric, queues_per_port: int = 1) -> int:
    """The buffer the run's datapath holds for the run (``buffer_bytes`` of
    :meth:`controller.datapaths.base.Datapath.hold_for_run`): packet memory (bytes, as the kernel
    charges a frame: :data:`common.units.FRAME_TRUESIZE_BYTES`) for every switch FIFO to fill at
    once, ``queues_per_port`` buffers of the scenario's size per switch port."""
    q = sc.queues
    per_port_frames = q.buffer_packets if q.buffer_packets is not None else -(-q.buffer_bytes // FRAME_BYTES)
    return len(fabric.switch_interfaces()) * (per_port_frames + 2) * queues_per_port * FRAME_TRUESIZE_BYTES


def _git_rev() -> str:
    if os.environ.get("FABRICLAB_GIT_REVISION"):   # set by the VM lane, whose copy has no .git
        return os.environ["FABRICLAB_GIT_REVISION"]
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def _scale(sc: Scenario) -> dict:
    """The dimensionless numbers of the run (what a scaled emulation keeps: rates down by s, times up by s)."""
    q = sc.queues
    buf_pkts = q.buffer_packets if q.buffer_packets is not None else q.buffer_bytes / FRAME_BYTES
    out = {"host_rate_mbps": sc.topology.host_rate_mbps, "buffer_packets": buf_pkts,
           "response_packets": sc.traffic.response_bytes / 1448}
    if sc.scale is not None:          # a scaled scenario: the real fabric's values beside the emulated ones
        out.update(factor=sc.scale.factor, real=sc.scale.real, emulated=sc.scale.emulated)
    return out
