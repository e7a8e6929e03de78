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

from controller import dataplane
from controller.dataplane import PortQueue
from controller.routing import strategy_class
from experiments import draw, folders, probe as envprobe, report
from experiments.context import HOST_QUEUE_PACKETS, RoundRecord, RunContext, maybe_fault
from experiments.fabric import REPO, LiveFabric
from experiments.features.registry import FEATURES
from experiments.live import (ROUND_STOP, SIGNAL_STOP, check_signalled, measure_rtt_s, signals_unwind,
                              warm_up_reachability)
from experiments.metrics import measure, one_line
from experiments.progress import Progress
from experiments.tables import label_csvs
from experiments.plan import check_against_fabric
from experiments.scenario import FRAME_BYTES, read_yaml_file, validate
from experiments.sections import SECTIONS
from experiments.state import RunState, describe_report
from experiments.workloads.registry import WORKLOADS, workload_for
from experiments.model import Round, Scenario
from common.errors import UnfaithfulRun


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
        tx_buffer: (scenario, fabric, env, state, queues per port) -> a context that sizes the
            datapath's transmit buffer for the rounds.
    """
    probe: Callable
    run_state: Callable
    live_fabric: Callable
    warm_up_s: Callable
    rtt_s: Callable
    tx_buffer: Callable


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
    ctx = _context(sc, layout, env, Path("preflight-not-written"), True)
    queues_per_port = 1
    for f in (FEATURES if features is None else features).values():
        queues_per_port += f(ctx).plan(queues_per_port)
    return ctx.env


def _results_folder(results_root: Path, name: str) -> Path:
    """The run's folder to be: checked (experiments.folders), not created. PathError otherwise."""
    return folders.next_folder(folders.check_results_root(results_root), name)


def _round_dir(ctx: RunContext, index: int, rnd: Round) -> Path:
    """A round's folder: ``rounds/<nn>-<name>`` of a scenario with rounds, else the run's own folder."""
    return ctx.out / "rounds" / f"{index + 1:02d}-{rnd.name}" if ctx.multi else ctx.out


def _context(sc: Scenario, layout: tuple, env: dict, out: Path, quiet: bool,
             accept_unfaithful: bool = False) -> RunContext:
    """The run's context: the resolved scenario, its ``layout`` on the fabric
    (experiments.plan.check_against_fabric), ``env`` and the results folder ``out``."""
    fabric, fabric_map, plan, rounds, profiles = layout
    return RunContext(sc=sc, fabric=fabric, fabric_map=fabric_map, plan=plan, rounds=rounds, profiles=profiles,
                      env=env, out=out, multi=sc.multi_round, quiet=quiet, accept_unfaithful=accept_unfaithful,
                      sections=SECTIONS)


def _merge(env: dict, more: dict) -> dict:
    """``env`` with ``more`` merged one level deep (a dict value updates a dict value)."""
    out = dict(env)
    for k, v in more.items():
        out[k] = {**out[k], **v} if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _run(sc: Scenario, results_root: Path, quiet: bool, platform: Platform, feature_registry: dict,
         workload_registry: dict, accept_unfaithful: bool = False,
         on_round: Callable[[str, Path, dict], None] | None = None) -> Path:
    t_begin = time.monotonic()
    timings = {}
    layout = check_against_fabric(sc)          # a scenario that does not fit its fabric: refused before the probe
    out = _results_folder(results_root, sc.name)  # a bad --results: refused before anything starts
    ctx = _context(sc, layout, platform.probe(), out, quiet, accept_unfaithful)
    env = ctx.env
    fabric, fabric_map, plan, rounds, out, multi = ctx.fabric, ctx.fabric_map, ctx.plan, ctx.rounds, ctx.out, ctx.multi
    features = [f(ctx) for f in feature_registry.values()]
    queues_per_port = 1
    for f in features:
        queues_per_port += f.plan(queues_per_port)
    workloads = {}                    # name -> the run's instance; and each round's
    round_workload = []
    for r in rounds:
        w = workload_for(sc, r, workload_registry)
        round_workload.append(workloads.setdefault(w.name, w(ctx)))
    fabric_args = {k: v for f in features for k, v in f.fabric_args().items()}
    env["git_revision"] = _git_rev()
    env["scale"] = _scale(sc)
    env["routing"] = {"mode": sc.routing.mode, **strategy_class(sc.routing.mode).METHOD}
    env["accept_unfaithful"] = accept_unfaithful

    slack_s = env["shaper"]["slack_s"]

    def host_queue(rate_mbps: float) -> PortQueue:
        return PortQueue(rate_mbps=rate_mbps, buffer_packets=HOST_QUEUE_PACKETS,
                         burst_bytes=sc.queues.burst_for(rate_mbps, slack_s))

    done: list[tuple[str, RoundRecord, dict]] = []
    round_env: list[dict] = []
    # the run lock first: a run refused because another is active creates nothing (BusyError)
    with platform.run_state(out.name) as state, contextlib.ExitStack() as run_long:
        folders.make_folder(out)
        (out / "scenario.yaml").write_text(yaml.safe_dump(sc.to_data(), sort_keys=False))
        (out / "environment.json").write_text(json.dumps(env, indent=2))
        ctx.say(" ".join([f"datapath={env['datapath']} kernel={env['kernel']}"]
                         + [h for h in (f.headline() for f in features) if h] + [f"results -> {out}"]))
        for f in features:
            f.enter(run_long, state)
        if state.stale_report and any(state.stale_report[k] for k in ("processes", "bridges", "interfaces")):
            ctx.say(f"removed state of an earlier run: {describe_report(state.stale_report)}")
        maybe_fault("before_fabric")
        with platform.live_fabric(fabric, out, state, datapath=env["datapath"],
                                  switch_queue=lambda rate: port_queue(sc, rate, slack_s), host_queue=host_queue,
                                  routing=sc.routing.mode, **fabric_args) as lf:
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
            maybe_fault("after_fabric")
            for f in features:
                f.after_fabric(lf)
            timings["reachability_s"] = platform.warm_up_s(lf)
            env["scale"]["measured_rtt_s"] = platform.rtt_s(lf, plan[0]["src"], plan[0]["dst"])
            env["scale"]["rtt_probe_hosts"] = [plan[0]["src"], plan[0]["dst"]]     # whose path both RTTs are
            env["scale"]["bdp_packets_measured_rtt"] = (sc.topology.host_rate_mbps * 1e6
                                                        * env["scale"]["measured_rtt_s"] / 8 / FRAME_BYTES)
            # a data packet's round trip: full frames both ways, serialised at every hop
            env["scale"]["measured_rtt_full_frame_s"] = platform.rtt_s(lf, plan[0]["src"], plan[0]["dst"],
                                                                       payload_bytes=FRAME_BYTES - 42)
            env["scale"]["bdp_packets_full_frame_rtt"] = (sc.topology.host_rate_mbps * 1e6
                                                          * env["scale"]["measured_rtt_full_frame_s"] / 8 / FRAME_BYTES)
            # the rounds are analysed with the measured RTT: a run stopped after them leaves it on
            # record, so `analyze` rebuilds the same summaries
            (out / "environment.json").write_text(json.dumps(env, indent=2))
            with platform.tx_buffer(sc, fabric, env, state, queues_per_port), \
                    Progress("rounds", len(rounds), quiet, lines=False) as progress:
                for i, r in enumerate(rounds):
                    check_signalled()
                    ROUND_STOP.clear()
                    w = round_workload[i]
                    rdir = _round_dir(ctx, i, r)
                    rdir.mkdir(parents=True, exist_ok=True)
                    (rdir / "agents").mkdir()
                    rec = RoundRecord(index=i, round=r, dir=rdir)
                    renv = dict(env, round={"index": i, "name": r.name, "of": len(rounds)})
                    rec.port_intent = [x for x in (f.port_intent(rec) for f in features) if x]
                    for f in features:
                        renv = _merge(renv, f.before_round(lf, rec))
                        rec.options.update(f.round_options(rec))
                    round_env.append({k: v for k, v in renv.items() if k not in env})
                    (rdir / "environment.json").write_text(json.dumps(renv, indent=2))
                    if multi:
                        parts = [p for p in (f.describe_round(rec) for f in features) if p]
                        ctx.say(f"round {i + 1}/{len(rounds)} {r.name}: "
                                + ", ".join(parts + [w.describe_round(r)]))
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
                        _save_round(rec, w.name)
                        done.append((w.name, rec, _analyse_round(ctx, w, features, rec)))
                    progress.advance(1, f"round {i + 1}/{len(rounds)} {r.name}: "
                                        + one_line(measure(done[-1][2]), (done[-1][2].get("bottleneck") or {}).get("intf")))
                    if on_round is not None:
                        on_round(r.name, rdir, done[-1][2])
                    if SIGNAL_STOP.stopped:
                        break                  # the run ends after the round a signal stopped
                for f in features:
                    env.update(_merge(env, f.after_rounds(lf)))
                maybe_fault("after_rounds")
            t_down = time.monotonic()
        timings["teardown_s"] = time.monotonic() - t_down
    timings["total_s"] = time.monotonic() - t_begin
    (out / "environment.json").write_text(json.dumps(_run_environment(env, rounds, round_env, multi), indent=2))
    (out / "timings.json").write_text(json.dumps(
        {**timings, "rounds": {rec.round.name: rec.timings_s.get("traffic_s") for _, rec, _ in done}}, indent=2))
    draw.draw(fabric_map, out / "topology.png", title=sc.name)
    if multi:
        for name, w in workloads.items():
            w.finish_run([(rec, s) for n, rec, s in done if n == name])
    _write_report(out)
    ctx.say(f"fabric down in {timings['teardown_s']:.1f} s; {timings['total_s']:.1f} s in all; results in {out}")
    if SIGNAL_STOP.stopped:
        kept = done[-1][1].dir if done else out
        print(f"fabriclab: the stopped round's results are kept in {kept} (summary.json: stopped); "
              f"{len(done)} of {len(rounds)} round(s) ran", file=sys.stderr, flush=True)
        check_signalled(ending=True)          # exit with the signal's code (130, 143, 129)
    failed = [(rec.round.name, line) for _, rec, s in done for line in s["fidelity"]["failures"]]
    if failed:
        if not accept_unfaithful:
            raise UnfaithfulRun(failed, out)
        print(f"fabriclab: WARNING: {len(failed)} fidelity check(s) failed and were accepted (as --accept-unfaithful "
              "and every study ask: a study marks such cells unfaithful); the summary.json of each round that "
              "failed says fidelity.accepted_unfaithful", file=sys.stderr)
    return out


#: A round's raw record (what the run loop kept of it, for `python -m experiments analyze`).
ROUND_RECORD = "round.json"


def _save_round(rec: RoundRecord, workload: str) -> None:
    """Write the round's raw record (workload, options, the workload's and features' records,
    timings) into its folder, before its analysis."""
    (rec.dir / ROUND_RECORD).write_text(json.dumps(
        {"index": rec.index, "name": rec.round.name, "workload": workload, "options": rec.options,
         "raw": rec.raw, "features": rec.features, "timings_s": rec.timings_s, "stopped": rec.stopped},
        indent=1, default=str))


def analyze(out: Path, quiet: bool = False, features: dict | None = None, workloads: dict | None = None) -> list[Path]:
    """Rebuild a results folder's derived files (each round's tables, summary.json and plots, the
    rounds side by side, the drawing) from its raw files: scenario.yaml, environment.json and, per
    round, round.json, the agents' records, the sampler's files. Needs no root and no fabric.
    Returns the round folders analysed.

    Raises:
        FileNotFoundError: ``out`` is not a results folder, or no round has its raw record
            (the run ended before any round's traffic finished).
    """
    out = Path(out)
    sc = validate(read_yaml_file(out / "scenario.yaml"))
    ctx = _context(sc, check_against_fabric(sc), json.loads((out / "environment.json").read_text()), out, quiet)
    feats = [f(ctx) for f in (FEATURES if features is None else features).values()]
    for f in feats:
        f.restore()
    registry = WORKLOADS if workloads is None else workloads
    made, done = {}, []
    for i, r in enumerate(ctx.rounds):
        rdir = _round_dir(ctx, i, r)
        if not (rdir / ROUND_RECORD).exists():
            continue
        saved = json.loads((rdir / ROUND_RECORD).read_text())
        rec = RoundRecord(index=i, round=r, dir=rdir, options=saved["options"], raw=saved["raw"],
                          features=saved["features"], timings_s=saved["timings_s"], stopped=saved.get("stopped"))
        w = made.setdefault(saved["workload"], registry[saved["workload"]](ctx))
        done.append((saved["workload"], rec, _analyse_round(ctx, w, feats, rec)))
    if not done:
        raise FileNotFoundError(f"{out}: no round has its raw record ({ROUND_RECORD}): nothing to analyse")
    draw.draw(ctx.fabric_map, out / "topology.png", title=sc.name)
    if ctx.multi:
        for name, w in made.items():
            w.finish_run([(rec, s) for n, rec, s in done if n == name])
    _write_report(out)
    return [rec.dir for _, rec, _ in done]


def _write_report(out: Path) -> None:
    """The folder's report.html (experiments.report), from its files; a report that cannot be
    written is a warning, not a failed run (every result file is already written)."""
    try:
        report.write_report(out)
    except (OSError, ValueError) as e:
        print(f"fabriclab: WARNING: could not write {out / report.REPORT}: {e}", file=sys.stderr)


def _analyse_round(ctx: RunContext, w, features: list, rec: RoundRecord) -> dict:
    """The round's summary: the workload's, then each feature's section; summary.json written once,
    then the workload's plots, summary.txt (the round's lines as printed: the workload's, then each
    feature's) and every warning. Returns the summary."""
    summary = w.summarize(rec)
    summary["stopped"] = rec.stopped
    for f in features:
        f.summarize(rec, summary)
    failures = [line for f in features for line in f.failures(summary)]
    summary.setdefault("fidelity", {}).update(
        ok=not failures, failures=failures, accepted_unfaithful=bool(failures) and ctx.accept_unfaithful)
    (rec.dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    w.after_summary(rec, summary)
    label_csvs(rec.dir, {"round": rec.round.name, "variant": rec.round.variant, "seed": rec.round.seed})
    lines = [w.format_round(summary, rec.dir)] + [x for x in (f.report(summary) for f in features) if x]
    if rec.stopped:
        lines.append(stopped_line(rec.stopped))
    (rec.dir / report.SUMMARY_TEXT).write_text("\n".join(lines) + "\n")
    for f in features:
        for warning in f.warnings(summary):
            print(f"fabriclab: WARNING: {warning}", file=sys.stderr)
    for line in failures:
        print(f"fabriclab: FIDELITY CHECK FAILED: {line}", file=sys.stderr)
    if not ctx.quiet:
        print("\n".join(lines), flush=True)
    return summary


def stopped_line(reason: str) -> str:
    """The line a stopped round's summary ends with (terminal, summary.txt, report.html): why it
    stopped, and that its figures cover only the time before the stop."""
    return (f"stopped ({reason}): the round's traffic was cut short; its agents wrote what they counted "
            "until then (an unfinished flow's error says \"stopped by the runner\")")


def _run_environment(env: dict, rounds: list[Round], round_env: list[dict], multi: bool) -> dict:
    """The run's environment.json at the end: with one round, what the round added (e.g.
    ``host_config``); with rounds, each such key as ``<key>_per_round`` by round name."""
    if not multi:
        return {**env, **{k: v for k, v in round_env[0].items() if k != "round"}}
    keys = list(dict.fromkeys(k for re_ in round_env for k in re_ if k != "round"))
    return {**env, **{f"{k}_per_round": {r.name: re_.get(k) for r, re_ in zip(rounds, round_env)} for k in keys}}


@contextlib.contextmanager
def _tx_buffer(sc: Scenario, fabric, env: dict, state: RunState, queues_per_port: int):
    """On the userspace datapath, OVS's shared transmit buffer enlarged for the block so every
    queue can fill (recorded as ``ovs_userspace_tx_buffer``; a warning when it cannot be)."""
    if env["datapath"] != "user":
        yield
        return
    with dataplane.OvsTxBuffer(userspace_tx_budget_bytes(sc, fabric, queues_per_port), state) as txbuf:
        env["ovs_userspace_tx_buffer"] = txbuf.record()
        if not txbuf.applied and txbuf.reason != "already large enough":
            print(f"fabriclab: WARNING: could not enlarge Open vSwitch's transmit buffer "
                  f"({txbuf.reason}); all queues of the fabric together are capped near "
                  f"{txbuf.before_bytes} bytes of packet memory, and excess packets are dropped "
                  "inside OVS, not in the qdiscs", file=sys.stderr)
        yield


#: This machine: the real probe, run state, fabric, warm-up, RTT probe and transmit buffer.
PLATFORM = Platform(probe=envprobe.probe, run_state=RunState, live_fabric=LiveFabric,
                    warm_up_s=warm_up_reachability, rtt_s=measure_rtt_s, tx_buffer=_tx_buffer)


def userspace_tx_budget_bytes(sc: Scenario, fabric, queues_per_port: int = 1) -> int:
    """Send buffer OVS's shared transmit socket needs (bytes) so every switch FIFO can fill at once
    (see dataplane): ``queues_per_port`` buffers of the scenario's size per switch port."""
    q = sc.queues
    per_port_frames = q.buffer_packets if q.buffer_packets is not None else -(-q.buffer_bytes // FRAME_BYTES)
    return len(fabric.switch_interfaces()) * (per_port_frames + 2) * queues_per_port * dataplane.FRAME_TRUESIZE_BYTES


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
