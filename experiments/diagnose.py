"""The troubleshooter on a live fabric: ``python -m experiments diagnose [SCENARIO] [--inject
random --seed N]``.

It brings the scenario's fabric up, injects the scenario's faults (or, with ``--inject random``,
one seeded random fault) without telling the troubleshooter, and follows the textbook's
procedure (experiments.troubleshooter): probe flows from every host until every directed link has
carried one (is it the network?), halve the suspects by zone with link-disjoint probe rounds
(which zone?), then read the culprit's switch-port counters (which layer?). The probes are
constant-rate UDP flows (traffic.udp_probe) from chosen source ports: each flow's path is the one
Open vSwitch's own tables give its 5-tuple (experiments.coll_plan.traced_path), so a probe can be
steered over a chosen link. Only then is the injected fault revealed and the verdict checked.

Results: ``diagnosis.json`` (the verdict, the evidence chain: every probe with its figures, the
rounds, the time, the truth and whether it matched), ``probes.csv``, ``port_counters.csv`` (the switch
ports' counters over the diagnosis), ``diagnosis.png`` (the fabric with the probed links, the
exonerated ones and the culprit).
"""
from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Iterable

from common.errors import SetupError
from experiments.procs import host_spawn
from common.units import FRAME_BYTES
from controller.faults import FAULTS, parse_fault
from experiments import troubleshooter as D
from experiments import folders
from experiments.paths import traced_path
from experiments.context import HOST_QUEUE_PACKETS
from experiments.draw import draw
from experiments.fabric import REPO
from experiments.features.ports import port_rows
from experiments.model import Scenario
from experiments.pagekit import Caption
from experiments.plan import build_fabric
from experiments.runner import PLATFORM, port_queue
from controller.dataplane.tcqdisc import PortQueue
from controller.datapaths.registry import from_environment

#: The probes' UDP destination port (the traced 5-tuples use it).
PROBE_PORT = 7000
#: Source ports tried per host pair to find the path a probe is to take.
SPORTS = range(20000, 20064)
#: Forwarding budget of one probe round, in Mbit/s of switch hops (a probe's rate times the
#: switches it crosses): the userspace datapath's one ovs-vswitchd thread forwards 300-500 Mbit/s
#: of switch hops in all (docs/scaling.md); a round kept well below it loses nothing to the emulator.
BUDGET_MBPS = {"user": 120.0, "kernel": 1000.0}
#: The senders' common start, after the receivers are ready: time for every sender to start (a
#: Python process each, on 2 cores).
START_S, START_PER_FLOW_S = 0.3, 0.08
#: A receiver ends this long after its flow's last datagram (the flow is over: it sends no more).
RECEIVER_IDLE_S = 0.3
#: Warm-up datagrams each probe sends first (at a quarter of its rate; not counted): ARP and the
#: switches' flow caches settle before the measured ones.
WARMUP = 5


class LiveProbes:
    """Probe flows on a live fabric: their paths traced, their rounds run.

    Args:
        lf: the live fabric; state: the run's RunState (agents are recorded there).
        workdir: where each round's agent outputs go.
        rate_fraction: each probe's rate as a share of the slowest nominal link on its path.
        probe_s: how long each probe sends.
    """

    def __init__(self, lf, state, workdir: Path, rate_fraction: float, probe_s: float):
        self.lf, self.state, self.workdir = lf, state, Path(workdir)
        self.rate_fraction, self.probe_s = rate_fraction, probe_s
        self.fmap = lf.fabric_map
        self.model = D.PathModel(self.fmap)
        self.rates = {}
        for l in self.fmap["links"]:
            self.rates[(l["a"], l["b"])] = self.rates[(l["b"], l["a"])] = float(l["rate_mbps"])
        self._traced: dict[tuple[str, str], dict[int, tuple]] = {}
        self.rounds = 0
        self.traces = 0

    def rate_mbps(self, f: D.Flow) -> float:
        """The probe's rate: ``rate_fraction`` of its path's slowest nominal link."""
        return self.rate_fraction * min(self.rates[l] for l in f.path)

    def _path(self, src: str, dst: str, sport: int) -> tuple | None:
        seen = self._traced.setdefault((src, dst), {})
        if sport not in seen:
            self.traces += 1
            try:
                p = traced_path(self.fmap, src, dst, sport, PROBE_PORT, proto="udp",
                                trace=self.lf.datapath.trace_hop)
            except ValueError:
                p = None
            seen[sport] = tuple(p) if p else None
        return seen[sport]

    def realise(self, src: str, dst: str, path: tuple) -> D.Flow | None:
        """A probe from ``src`` to ``dst`` that takes ``path``: the first source port whose traced
        path it is (None if none of :data:`SPORTS` does)."""
        for sport in SPORTS:
            p = self._path(src, dst, sport)
            if p == tuple(path):
                return D.Flow(src, dst, sport, p)
        return None

    def flows_through(self, e) -> Iterable[D.Flow]:
        """Probes crossing element ``e`` (experiments.troubleshooter.PathModel's pairs, realised)."""
        for s, d, p in self.model.through(e):
            f = self.realise(s, d, p)
            if f is not None:
                yield f

    def flows_between(self, src: str, dst: str) -> Iterable[D.Flow]:
        """The probe a pair's first source port gives (its path whatever the hash picks)."""
        sport = SPORTS[0]
        p = self._path(src, dst, sport)
        if p is not None:
            yield D.Flow(src, dst, sport, p)

    def run(self, flows: list[D.Flow]) -> list[D.Outcome]:
        """Run ``flows`` at once: a receiver in each destination, then every sender from the same
        start time; their outcomes.

        Raises:
            SetupError: an agent failed to start or to report.
        """
        self.rounds += 1
        rdir = self.workdir / f"round-{self.rounds:03d}"
        rdir.mkdir(parents=True, exist_ok=True)
        procs, rx = [], {}
        try:
            for i, f in enumerate(flows):
                out = rdir / f"rx-{i}.json"
                # a receiver that gets nothing (a sender whose link is down) ends at this deadline; a
                # slow host's probe may take up to 4 times its time
                deadline = START_S + START_PER_FLOW_S * len(flows) + 4 * self.probe_s + 2
                p = host_spawn(self.lf.host(f.dst), [sys.executable, "-m", "traffic.udp_probe", "recv", str(PROBE_PORT),
                                                     f"{deadline:.1f}", str(out), str(RECEIVER_IDLE_S)],
                               cwd=str(REPO), stdout=subprocess.PIPE, text=True)
                self.state.add_process(p.pid, f"probe receiver {f.dst}")
                procs.append(p)
                rx[i] = (p, out)
            for p, _ in rx.values():
                if p.stdout.readline().strip() != "READY":
                    raise SetupError("a probe receiver did not start")
            start = time.time() + START_S + START_PER_FLOW_S * len(flows)
            tx = {}
            for i, f in enumerate(flows):
                rate = self.rate_mbps(f)
                packets = max(50, int(rate * 1e6 * self.probe_s / (FRAME_BYTES * 8)))
                p = host_spawn(
                    self.lf.host(f.src), [sys.executable, "-m", "traffic.udp_probe", "send", self.lf.fabric.node(f.dst).ip,
                     str(PROBE_PORT), f"{rate:.4f}", str(packets), str(FRAME_BYTES), "0", str(i), str(start),
                     str(WARMUP), str(f.sport)], cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    text=True)
                self.state.add_process(p.pid, f"probe sender {f.src}")
                procs.append(p)
                tx[i] = (p, rate, packets)
            outcomes = []
            for i, f in enumerate(flows):
                p, rate, packets = tx[i]
                text, err = p.communicate(timeout=self.probe_s * 10 + 60)
                if "achieved_mbps" not in text:
                    raise SetupError(f"probe sender {f.src}->{f.dst} failed: {(text + err).strip()[-300:]}")
                achieved = float(text.split("achieved_mbps")[1])
                rp, out = rx[i]
                rp.wait(self.probe_s + 40)
                rows = [r for r in json.loads(out.read_text())["packets"] if r[0] == i]
                # what the path delivered (the receiver's clock): a slow host's socket buffer lets its
                # sender run ahead of its NIC for a while, so the sender's own figure flatters it
                got = _delivered_mbps(rows)
                achieved = min(achieved, got) if got is not None else achieved
                # every sequence number was tried: one the host could not send (its link down) is lost
                outcomes.append(D.Outcome(f, rate, packets, len({r[1] for r in rows}), achieved,
                                          tuple(_loss_runs(rows, FRAME_BYTES * 8 / (rate * 1e6)))))
            return outcomes
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()


def _delivered_mbps(rows: list) -> float | None:
    """The rate the receiver got a flow's frames at, in Mbit/s of frames: the bytes after the first
    arrival over the time from the first arrival to the last. ``rows``: the probe receiver's
    ``[flow, seq, t_send_ns, t_recv_ns, ecn, length_bytes]`` in arrival order. None with fewer than
    10 frames or no time between them."""
    if len(rows) < 10:
        return None
    t = sorted(r[3] for r in rows)
    span_s = (t[-1] - t[0]) / 1e9
    return sum(r[5] for r in rows[1:]) * 8 / span_s / 1e6 if span_s > 0 else None


def _loss_runs(rows: list, interval_s: float) -> list[tuple[float, float]]:
    """Runs of lost datagrams as (first lost, next received) send times in seconds from the first."""
    by_seq = {r[1]: r[2] / 1e9 for r in rows}
    if not by_seq:
        return []
    seqs = sorted(by_seq)
    t0 = by_seq[seqs[0]]
    return [(round(by_seq[a] + interval_s - t0, 4), round(by_seq[b] - t0, 4))
            for a, b in zip(seqs, seqs[1:]) if b - a > 1]


def hidden_faults(sc: Scenario, fabric_map: dict, inject: str | None, seed: int) -> list[dict]:
    """The faults to inject unseen: one seeded random fault (``inject == "random"``), or the
    scenario's own (those of its first round that has any; none on a healthy scenario)."""
    if inject == "random":
        return [D.random_fault(fabric_map, seed)]
    faulty = next((r for r in sc.rounds if r.faults), None)
    return [f.to_data() for f in faulty.faults] if faulty else []


def probe_rows(steps: list[D.Step]) -> list[dict]:
    """probes.csv's rows: one per probe."""
    rows, n = [], 0
    for s in steps:
        n += 1
        for o in s.outcomes:
            rows.append({"round": n, "step": s.step, "src": o.flow.src, "dst": o.flow.dst, "src_port": o.flow.sport,
                         "path": " ".join(f"{a}>{b}" for a, b in o.flow.path), "rate_mbps": round(o.rate_mbps, 3),
                         "sent": o.sent, "received": o.received, "loss": round(o.loss, 5),
                         "achieved_mbps": round(o.achieved_mbps, 3), "loss_runs": len(o.loss_runs),
                         "symptom": D.symptom(o), "suspects_after": s.suspects_after})
    return rows


def parse_answer(text: str) -> D.Verdict:
    """A student's answer, ``KIND PLACE`` (``corrupt p0a1->c1``, ``degrade h3->p0e2``, ``drop c2``,
    ``flap p0e1<->h1``, ``slow_host h7``), as a verdict.

    Raises:
        ValueError: not two words, or a kind that is not a registered fault (named).
    """
    parts = text.split()
    if len(parts) != 2:
        raise ValueError(f"expected KIND PLACE, e.g. 'corrupt p0a1->c1', got {text.strip()!r}")
    kind, place = parts
    if kind not in FAULTS:
        raise ValueError(f"unknown kind {kind!r}: one of {', '.join(FAULTS)}")
    return D.Verdict(place, kind, FAULTS[kind].LAYER, ("the student's answer",))


def by_hand(lf, fmap: dict, ask, say) -> D.Verdict | None:
    """The lab's mode: tell the student how to probe the fabric themselves, then read their answer
    with ``ask(prompt) -> str`` (None when they gave none: end of input)."""
    pids = ", ".join(f"{h.name}: {h.pid} ({lf.fabric.node(h.name).ip})" for h in lf.net.hosts)
    say(f"the fabric is up with a hidden fault; its controller: {lf.rest_url}/fabriclab/")
    say(f"run a command in a host (iperf3, ping): sudo mnexec -a PID COMMAND, with the hosts' PIDs (and addresses) {pids}")
    say("read every switch port's counters: fabriclab ports [SWITCH] (or .venv/bin/python -m experiments ports)")
    say("when you know, answer KIND PLACE (kinds: " + ", ".join(FAULTS) + "; e.g. 'corrupt p0a1->c1', "
        "'drop c2', 'flap p0e1<->h1', 'slow_host h7')")
    for _ in range(3):
        try:
            text = ask("your answer> ")
        except EOFError:
            return None
        try:
            return parse_answer(text)
        except ValueError as e:
            say(str(e))
    return None


def folder_name(sc: Scenario, inject: str | None, seed: int) -> str:
    """The name a diagnosis's folder gets after its UTC time: ``diagnose-<scenario>[-seed<n>]``."""
    return f"diagnose-{sc.name}" + (f"-seed{seed}" if inject == "random" else "")


def diagnose(sc: Scenario, results_root: Path, inject: str | None = None, seed: int = 0, rate_fraction: float = 0.6,
             probe_s: float = 2.0, budget_mbps: float | None = None, reveal: bool = True, quiet: bool = False,
             platform=PLATFORM, ask=None) -> tuple[Path, dict]:
    """Bring ``sc``'s fabric up, inject its faults (or a random one) unseen, troubleshoot, reveal.
    With ``ask`` (``input``, say), the student troubleshoots instead (:func:`by_hand`) and their
    answer is checked.

    Returns: (the results folder, the diagnosis record written as ``diagnosis.json``).

    Raises:
        CapabilityError, SetupError, BusyError: as a run (experiments.runner.run).
    """
    say = (lambda *a: None) if quiet else (lambda *a: print("fabriclab:", *a, flush=True))
    env = platform.probe()
    fabric = build_fabric(sc)
    fmap = fabric.to_map()
    faults = hidden_faults(sc, fmap, inject, seed)
    specs = [parse_fault(fmap, f, f"faults[{i}]") for i, f in enumerate(faults)]
    budget = budget_mbps or BUDGET_MBPS[env["datapath"]]
    out = folders.next_folder(folders.check_results_root(results_root), folder_name(sc, inject, seed))
    slack_s = env["shaper"]["slack_s"]
    with platform.run_state(out.name) as state:
        folders.make_folder(out)
        say(f"diagnose: {sc.topology.kind} fabric, {len(fabric.hosts)} hosts, {len(fmap['links'])} links "
            f"({D.directed_links(fmap)} directed); datapath={env['datapath']}; results -> {out}")
        with platform.live_fabric(fabric, out, state, datapath=from_environment(env),
                                  switch_queue=lambda r: port_queue(sc, r, slack_s),
                                  host_queue=lambda r: PortQueue(rate_mbps=r, buffer_packets=HOST_QUEUE_PACKETS,
                                                                 burst_bytes=sc.queues.burst_for(r, slack_s)),
                                  routing=sc.routing.mode) as lf:
            platform.warm_up_s(lf)
            with platform.datapath_hold(sc, fabric, env, state, 1):
                lf.api.call("POST", "/hosts", {"host_pids": {h.name: h.pid for h in lf.net.hosts}}, what="diagnose")
                if specs:
                    lf.api.call("POST", "/faults", {"faults": [s.to_data() for s in specs], "hidden": True},
                                what="diagnose")
                    say(f"{'a hidden fault is' if len(specs) == 1 else f'{len(specs)} hidden faults are'} in the "
                        "fabric; the troubleshooter is not told where")
                t0 = time.monotonic()
                if ask is not None:
                    answer = by_hand(lf, fmap, ask, say)
                    took = time.monotonic() - t0
                    lf.api.call("DELETE", "/faults", what="diagnose")
                    return out, _answer_record(out, fmap, faults, answer, took, inject, seed, say, sc.name)
                before = lf.api.call("GET", "/ports", what="diagnose")["ports"]
                probes = LiveProbes(lf, state, out / "probes", rate_fraction, probe_s)
                loc = D.localise(fmap, _saying(probes.run, say), probes.flows_through, probes.flows_between,
                                 rate_fraction * min(l["rate_mbps"] for l in fmap["links"]), budget, seed=seed)
                after = lf.api.call("GET", "/ports", what="diagnose")["ports"]
                delta = port_rows("diagnose", before, after)
                v = D.verdict(loc.suspects, loc.outcomes, delta, {s["name"] for s in fmap["switches"]})
                took = time.monotonic() - t0
                records = lf.api.call("DELETE", "/faults", what="diagnose")["removed"]
    record = _record(sc, fmap, loc, v, took, probes, faults if reveal else None, records, inject, seed, budget,
                     rate_fraction, probe_s)
    (out / "diagnosis.json").write_text(json.dumps(record, indent=1))
    _csv(out / "probes.csv", probe_rows(loc.steps))
    _csv(out / "port_counters.csv", delta)
    draw_diagnosis(fmap, loc, v, out / "diagnosis.png", sc.name)
    for line in report_lines(record):
        say(line)
    return out, record


def _answer_record(out: Path, fmap: dict, truth: list[dict], answer: D.Verdict | None, took: float, inject, seed,
                   say, scenario: str = "") -> dict:
    """The by-hand mode's record (``diagnosis.json``) and its last lines: the truth and the check."""
    rec = {"mode": "by hand", "scenario": scenario, "inject": inject, "seed": seed, "seconds": round(took, 1),
           "answer": asdict(answer) if answer else None, "truth": truth,
           "truth_description": "; ".join(FAULTS[f["kind"]].describe(parse_fault(fmap, f)) for f in truth),
           "matched": bool(answer) and len(truth) == 1 and D.matches(answer, truth[0])}
    (out / "diagnosis.json").write_text(json.dumps(rec, indent=1))
    say(f"the hidden fault was: {rec['truth_description']}; your answer "
        + ("(none) " if answer is None else f"'{answer.kind} {answer.culprit}' ")
        + ("MATCHES" if rec["matched"] else "does NOT match") + f" ({took:.0f} s)")
    return rec


def _n(count: int, noun: str) -> str:
    """``count`` and ``noun``, plural unless one: ``1 flow``, ``2 flows``."""
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _saying(run, say):
    n = [0]

    def wrapped(flows):
        n[0] += 1
        outs = run(flows)
        bad = [o for o in outs if D.symptom(o) != "ok"]
        say(f"probe round {n[0]}: {_n(len(flows), 'flow')}, {len(bad)} unhealthy"
            + (": " + ", ".join(f"{o.flow.src}->{o.flow.dst} {D.symptom(o)} ({o.loss:.1%} lost, "
                                f"{o.achieved_mbps:.2f}/{o.rate_mbps:.2f} Mbit/s sent)" for o in bad[:4]) if bad else ""))
        return outs
    return wrapped


def _csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        if rows:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


def _record(sc, fmap, loc, v, took, probes, truth, records, inject, seed, budget, rate_fraction, probe_s) -> dict:
    outs = loc.outcomes
    survey = [o for s in loc.steps if s.step == "survey" for o in s.outcomes]
    delivered = sum(o.received for o in survey)
    sent = sum(o.sent for o in survey)
    bisect = [s for s in loc.steps if s.step == "bisect"]
    after_survey = next((s.suspects_after for s in reversed(loc.steps) if s.step == "survey"), None)
    rec = {"scenario": sc.name, "topology": sc.topology.model_dump(), "inject": inject, "seed": seed,
           "settings": {"rate_fraction": rate_fraction, "probe_s": probe_s, "budget_mbps": budget,
                        "loss_bad": D.LOSS_BAD, "slow_sender": D.SLOW_SENDER},
           "step1": {"probes": len(survey), "delivered_over_expected": round(delivered / sent, 5) if sent else None,
                     "network_ok": loc.network_ok,
                     "verdict": ("the network delivered what a healthy fabric delivers" if loc.network_ok
                                 else "it is the network: some probes lost datagrams or could not send")},
           "step2": {"suspects_after_survey": after_survey, "bisection_rounds": len(bisect),
                     "bound_rounds": D.rounds_bound(after_survey or 1),
                     "directed_links": D.directed_links(fmap), "log2_links": D.rounds_bound(D.directed_links(fmap)),
                     "suspects_left": sorted(D.describe(e) for e in loc.suspects)},
           "verdict": asdict(v), "probe_rounds": len(loc.steps), "probes": len(outs), "traces": probes.traces,
           "seconds": round(took, 2),
           "evidence": [{"round": i + 1, "step": s.step, "tested": s.tested[:8], "suspects_after": s.suspects_after,
                         "probes": [{"flow": f"{o.flow.src}->{o.flow.dst}:{o.flow.sport}", "loss": round(o.loss, 4),
                                     "achieved_mbps": round(o.achieved_mbps, 3), "rate_mbps": round(o.rate_mbps, 3),
                                     "symptom": D.symptom(o)} for o in s.outcomes]}
                        for i, s in enumerate(loc.steps)]}
    if truth is not None:
        rec["truth"] = truth
        rec["fault_records"] = records
        rec["matched"] = len(truth) == 1 and D.matches(v, truth[0])
        rec["truth_description"] = "; ".join(FAULTS[f["kind"]].describe(parse_fault(fmap, f)) for f in truth)
    return rec


def report_lines(rec: dict) -> list[str]:
    """The terminal's account: the three steps, the verdict with its evidence, then the truth."""
    s1, s2, v = rec["step1"], rec["step2"], rec["verdict"]
    lines = [f"step 1, is it the network: {s1['verdict']} ({s1['probes']} probes delivered "
             f"{s1['delivered_over_expected']:.4f} of what they sent)",
             f"step 2, which zone: {_n(s2['suspects_after_survey'], 'suspect')} after the survey, "
             f"{_n(s2['bisection_rounds'], 'bisection round')} (ceil(log2) of the suspects: {s2['bound_rounds']}; of the "
             f"{s2['directed_links']} directed links: {s2['log2_links']}); left: "
             f"{', '.join(s2['suspects_left']) or 'none'}"]
    if v["culprit"]:
        lines.append(f"step 3, which layer: {v['kind']} ({v['layer']}) at {v['culprit']}")
    else:
        lines.append("step 3, which layer: no culprit found")
    lines += [f"  because {w}" for w in v["why"]]
    lines.append(f"{rec['probe_rounds']} probe rounds, {rec['probes']} probes, {rec['seconds']:.1f} s")
    if "truth" in rec:
        lines.append(f"the hidden fault was: {rec['truth_description']}; the diagnosis "
                     f"{'MATCHES' if rec['matched'] else 'does NOT match'}")
    return lines


#: The diagnosis drawing's caption (stored in the PNG).
DIAGNOSIS = Caption(
    "Where the probes went and what they found",
    "The fabric with every link a probe crossed: green where a healthy probe exonerated it, orange where only "
    "unhealthy probes crossed it, and the culprit the bisection settled on in red (a link, or a switch or host "
    "drawn in red). The culprit is where the orange paths meet and no green path passes.")


def draw_diagnosis(fmap: dict, loc: D.Localisation, v: D.Verdict, path: Path, title: str) -> Path:
    """The fabric with the links the probes crossed (green: exonerated by a healthy probe, orange:
    crossed only by unhealthy ones) and the culprit in red."""
    healthy, sick = set(), set()
    for o in loc.outcomes:
        pairs = {frozenset(l) for l in o.flow.path}
        (healthy if D.symptom(o) == "ok" else sick).update(pairs)
    culprit_links, culprit_node = set(), None
    if v.culprit:
        if "->" in v.culprit:
            culprit_links.add(frozenset(v.culprit.replace("<->", "->").split("->")))
        else:
            culprit_node = v.culprit
    overlay = {"links": {**{p: ("#38a169", 1.6) for p in healthy}, **{p: ("#dd6b20", 2.2) for p in sick - healthy},
                         **{p: ("#e53e3e", 4.0) for p in culprit_links}},
               "nodes": {culprit_node: "#e53e3e"} if culprit_node else {},
               "legend": [("#38a169", "probed, healthy"), ("#dd6b20", "only unhealthy probes"),
                          ("#e53e3e", f"culprit: {v.kind} at {v.culprit}" if v.culprit else "no culprit")]}
    return draw(fmap, path, title=f"diagnosis of {title}", overlay=overlay, caption=DIAGNOSIS)


def check_inject(value: str | None) -> str | None:
    """``--inject``: None or ``random`` (ValueError otherwise)."""
    if value not in (None, "random"):
        raise ValueError(f"--inject takes 'random', got {value!r}")
    return value

