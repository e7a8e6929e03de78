"""Kernel TCP or UDP flows (``traffic.transport`` tcp or udp): one receiver agent per
destination and one sender agent per source, released together; per-flow rows, queues, ports,
throughput and the bottleneck in the round's summary."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

from experiments import analysis, plot
from common.errors import SetupError
from experiments.paths import trace_each, traced_path
from experiments.context import RoundRecord, maybe_fault
from experiments.live import Agents, sampler_ready, spawn_sampler, stop_sampler
from experiments.workloads.base import Workload
from experiments.model import Round, Scenario
from traffic.patterns import flow_plan

#: Seconds a time-limited TCP flow may take past its duration to end (its sender's last bytes and
#: FIN acknowledged). Under heavy loss a segment can sit in Linux's exponential RTO backoff: lost 7
#: times in a row from the 200 ms minimum it waits 0.2 x (2^8 - 1) = 51 s in all. With 30 s, a
#: 3:1 Spine-Leaf permutation at 2 Mbit/s (6178 drops in 8 s) had a flow end at 37 s, after its
#: receiver's deadline, under a CPU-heavy process (2 of 10 runs, 2026-12-02).
TAIL_GRACE_S = 60.0
#: Seconds of its host link's rate a time-limited TCP flow may hold unsent (TCP_NOTSENT_LOWAT), and
#: the least bytes: enough that the Python sender refills it long before it runs dry, little
#: enough that the flow ends soon after its duration. Without it each socket kept what its send
#: buffer took: the shipped topology comparison's 8 flows per host at 2 Mbit/s drained for about
#: 10 s past their 8 s.
NOTSENT_LOWAT_S = 0.05
NOTSENT_LOWAT_MIN_BYTES = 16384


def notsent_lowat_bytes(host_rate_mbps: float) -> int:
    """A time-limited flow's most unsent bytes for a host link of ``host_rate_mbps`` (Mbit/s):
    :data:`NOTSENT_LOWAT_S` of its rate, at least :data:`NOTSENT_LOWAT_MIN_BYTES`."""
    return max(NOTSENT_LOWAT_MIN_BYTES, int(host_rate_mbps * 1e6 / 8 * NOTSENT_LOWAT_S))


#: Seconds the runner waits past the agents' own deadline before it kills them: at its deadline an
#: agent stops waiting and writes what it has (a receiver killed there loses every flow's record).
AGENT_EXIT_GRACE_S = 5.0


class KernelFlows(Workload):
    """The traffic section's flows over kernel TCP or UDP."""
    name = "flows"

    @staticmethod
    def wants(sc: Scenario, rnd: Round) -> bool:
        """Rounds without a collective whose transport is tcp or udp."""
        return rnd.collective.kind is None and sc.traffic.transport in ("tcp", "udp")

    def describe_round(self, rnd: Round) -> str:
        """``UDP DSCP d`` or ``<congestion control> tcp_ecn=<n>``."""
        t = self.ctx.sc.traffic
        if t.transport == "udp":
            return f"UDP DSCP {t.dscp}"
        return f"{rnd.hosts.tcp_congestion_control} tcp_ecn={rnd.hosts.tcp_ecn}"

    def round_plan(self, rnd: Round) -> list[dict]:
        """The round's flows (traffic.patterns.flow_plan rows): the run's plan, or, for a round
        with its own seed or (an incast) its own ``senders`` (``Round.traffic``), the round's
        traffic planned with the round's seed: the seed fixes the pairs and every flow's source
        port, hence its ECMP path."""
        if (rnd.traffic is self.ctx.sc.traffic or rnd.traffic == self.ctx.sc.traffic) and rnd.seed == self.ctx.sc.seed:
            return self.ctx.plan
        return flow_plan(rnd.traffic, self.ctx.fabric, rnd.seed)

    def run_round(self, lf, state, rec: RoundRecord) -> dict:
        """Start the sampler and the agents, release the synchronized start, take one ``ss -tin``
        snapshot of the first sender's live flows (the algorithm really in use) into
        ``ss_tin.txt``, wait; returns ``{"codes": {"<host>.rx|tx": exit code}}``."""
        sc, plan = self.ctx.sc, self.round_plan(rec.round)
        t = sc.traffic
        count_ecn = bool(rec.options.get("count_ecn")) or rec.round.hosts.tcp_ecn != 0
        agent_dir = rec.dir / "agents"
        sampler = spawn_sampler(lf, state, rec.dir, sc.measurement.sample_hz, sc.measurement.sampler)
        agents = Agents(lf, state)
        by_dst, by_src, ready = {}, {}, False
        for f in plan:
            by_dst.setdefault(f["dst"], []).append(f)
            by_src.setdefault(f["src"], []).append(f)
        try:
            agents_s, wait_s = run_limits_s(t, plan)
            deadline = time.time() + agents_s
            udp = t.transport == "udp"
            for dst, flows in by_dst.items():
                agents.start(dst, "rx", {"role": "udp-receiver" if udp else "receiver", "port": t.port,
                                         "expect_flows": len(flows), "count_ecn": count_ecn, "dscp": t.dscp,
                                         "deadline_unix_s": deadline, "out": str(agent_dir / f"{dst}.rx.json")})
            for src, flows in by_src.items():
                agents.start(src, "tx", {"role": "udp-sender" if udp else "sender", "deadline_unix_s": deadline,
                                         "dscp": t.dscp, "out": str(agent_dir / f"{src}.tx.json"),
                                         "notsent_lowat_bytes": notsent_lowat_bytes(
                                             lf.fabric.host_attachment(src).rate_mbps),
                                         "flows": [{"dst_ip": f["dst_ip"], "port": t.port, "bytes": f["bytes"],
                                                    "duration_s": f["duration_s"], "flow_id": f["flow_id"],
                                                    "src_port": f["src_port"], "start_s": f.get("start_s") or 0.0}
                                                   for f in flows]})
            sampler_ready(sampler)             # sampling before any traffic is released
            ready = True
            agents.wait_ready()
            start_at = time.time() + t.start_delay_s
            agents.release(start_at)
            what = (f"{len(by_src)} senders x {t.response_bytes} B -> {t.receiver}" if t.pattern == "incast"
                    else describe_arrivals(plan, len(set(by_src) | set(by_dst))) if last_start_s(plan) > 0
                    else f"{len(plan)} flows ({t.flows_per_pair} per pair) between "
                         f"{len(set(by_src) | set(by_dst))} hosts, "
                    + (f"{t.duration_s:g} s each" if t.duration_s else f"{t.flow_bytes} B each"))
            self.ctx.say(f"{t.pattern}: {what}")
            maybe_fault("after_traffic_start")
            if not udp:
                snapshot_ss(lf, plan[0]["src"], t.port, start_at + 0.2, rec.dir / "ss_tin.txt")
            codes = agents.wait(min(deadline, start_at + wait_s) + AGENT_EXIT_GRACE_S)
            time.sleep(sc.measurement.post_s)
        finally:
            agents.kill()
            if ready:
                stop_sampler(sampler)
            else:                              # failed before it sampled: nothing of it to keep
                sampler.kill()
                sampler.wait()
        return {"codes": codes, "paths": trace_paths(lf.fabric_map, plan, t.port, "udp" if udp else "tcp",
                                                                trace=lf.datapath.trace_hop)}

    def collect(self, rec: RoundRecord) -> list[dict]:
        """The round's per-flow rows (experiments.analysis.collect_flows)."""
        return analysis.collect_flows(rec.dir / "agents", self.round_plan(rec.round), rec.raw["codes"],
                                      sections=self.ctx.sections)

    def summarize(self, rec: RoundRecord) -> dict:
        """flows.csv, flow_samples.csv, queues.csv, ports.csv and the round's summary
        (experiments.analysis.write_results)."""
        rec.rows = self.collect(rec)
        paths = rec.raw.get("paths") or {}
        for row in rec.rows:
            row["path"] = paths.get(str(row["flow_id"]))
        return analysis.write_results(rec.dir, self.ctx.sc, self.ctx.fabric_map, rec.rows, rec.timings_s,
                                      self.round_plan(rec.round),
                                      receiver_bottleneck_reason=rec.options.get("receiver_bottleneck_reason"),
                                      stopped=rec.stopped is not None, sections=self.ctx.sections)

    def after_summary(self, rec: RoundRecord, summary: dict) -> None:
        """The round's plots (experiments.plot.plot_all): queue_depth.png, throughput.png,
        queue_cdf.png, fct_cdf.png, and the PFC and RoCE plots when the summary has those sections;
        none when the scenario's ``measurement.plots`` is false."""
        if self.ctx.sc.measurement.plots:
            plot.plot_all(rec.dir, sections=self.ctx.sections)

    def format_round(self, summary: dict, rdir: Path) -> str:
        """experiments.analysis.format_summary."""
        return analysis.format_summary(summary, rdir, sections=self.ctx.sections)

    def finish_run(self, done: list[tuple[RoundRecord, dict]]) -> None:
        """rounds.json, rounds.csv and the rounds' plots, side by side (unless ``measurement.plots``
        is false)."""
        out = self.ctx.out
        analysis.write_rounds(out, [s for _, s in done], [rec.dir for rec, _ in done], [rec.round for rec, _ in done],
                              sections=self.ctx.sections)
        if self.ctx.sc.measurement.plots:
            plot.plot_rounds(out, sections=self.ctx.sections)
        if not self.ctx.quiet:
            print(analysis.format_rounds(out, sections=self.ctx.sections))


def last_start_s(plan: list[dict]) -> float:
    """The latest ``start_s`` of a plan's flows (seconds after the common start; 0 when every flow
    starts at the start)."""
    return max((f.get("start_s") or 0.0 for f in plan), default=0.0)


def run_limits_s(traffic, plan: list[dict]) -> tuple[float, float]:
    """How long a round of ``plan``'s flows may run, in seconds: ``(agents_s, wait_s)``.

    ``agents_s``, from when the agents are started to their own deadline: the flows' time
    (``traffic.duration_s``, else ``traffic.timeout_s``) plus the last flow's ``start_s``, plus
    ``traffic.start_delay_s`` and :data:`TAIL_GRACE_S`. ``wait_s``, from the common start to when
    the runner stops waiting for them (then :data:`AGENT_EXIT_GRACE_S` more): the last flow's
    ``start_s`` plus ``duration_s`` and :data:`TAIL_GRACE_S` for time-limited flows, else plus
    ``timeout_s``. A plan whose flows all start at the start (every pattern but those with
    arrival times) gets the limits it always had; one with arrivals has them moved by its last
    arrival, so the last flow gets the same time as the first."""
    last = last_start_s(plan)
    agents_s = (traffic.duration_s or traffic.timeout_s) + last + traffic.start_delay_s + TAIL_GRACE_S
    wait_s = last + (traffic.duration_s + TAIL_GRACE_S if traffic.duration_s else traffic.timeout_s)
    return agents_s, wait_s


def describe_arrivals(plan: list[dict], hosts: int) -> str:
    """One line for a plan whose flows arrive over time (``start_s``), e.g. ``1750 flows of 1448 B
    to 6.0 MB (mean 342 kB) between 24 hosts, arriving over 40.1 s``."""
    sizes = [f["bytes"] for f in plan if f["bytes"] is not None]
    last = max(f.get("start_s") or 0.0 for f in plan)
    span = (f" of {min(sizes)} B to {max(sizes) / 1e6:.1f} MB (mean {sum(sizes) / len(sizes) / 1e3:.0f} kB)"
            if sizes else "")
    return f"{len(plan)} flows{span} between {hosts} hosts, arriving over {last:.1f} s"


#: Most flows whose paths a round traces (one ``ovs-appctl ofproto/trace`` per switch hop, about
#: 10 ms each): a larger plan records none, and says so.
MAX_TRACED_FLOWS = 256

def trace_paths(fabric_map: dict, plan: list[dict], dst_port: int, proto: str, trace) -> dict:
    """Every planned flow's path through the live fabric, as the switches' tables send its
    5-tuple (experiments.paths.traced_path: the ECMP hash as the switches compute it), e.g.
    ``{"0": "h2>l2>s1>l1>h1", ...}`` by flow id; the seed's source ports make it the same in every
    variant of a study. A flow that cannot be traced maps to ``"error: ..."``; more than
    :data:`MAX_TRACED_FLOWS` flows give ``{}``. ``trace(switch, flow) -> port``: the live fabric's
    (:meth:`controller.datapaths.base.Datapath.trace_hop`) or a test's; called from up to
    experiments.paths.TRACERS threads at once, after the round's traffic."""
    if len(plan) > MAX_TRACED_FLOWS:
        return {}

    def one(f: dict) -> str:
        try:
            links = traced_path(fabric_map, f["src"], f["dst"], f["src_port"], dst_port, proto,
                                trace=trace)
            return ">".join([f["src"]] + [b for _a, b in links])
        except (ValueError, SetupError) as e:
            return f"error: {e}"
    return {str(f["flow_id"]): path for f, path in zip(plan, trace_each(one, plan))}


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
