"""The experiment runner: scenario -> fabric -> controller -> traffic ->
collectors -> results folder.

Every exit path (normal end, exception, Ctrl-C, SIGTERM) tears the fabric
down through :class:`experiments.fabric.LiveFabric` and
:class:`common.state.RunState`; a run after a SIGKILLed one starts by
removing what the record of that run lists (case C2).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import yaml

from common import probe as envprobe
from common.errors import CapabilityError, ScenarioError, SetupError
from common.scenario import FRAME_BYTES
from common.state import RunState
from controller import dataplane
from controller.routing import ECMP_METHOD
from controller.dataplane import PortQueue
from experiments import analysis, reach
from experiments.fabric import REPO, LiveFabric
from topologies.fattree import FatTree
from topologies.spineleaf import SpineLeaf
from traffic.patterns import flow_plan

#: Host NIC queue length in packets (like a default txqueuelen).
HOST_QUEUE_PACKETS = 1000
#: Set to a phase name to raise an exception there (used by the teardown tests).
FAULT_ENV = "FABRICLAB_INJECT_FAULT"


class InjectedFault(RuntimeError):
    """Raised on purpose by :func:`_maybe_fault` to test teardown."""


def _maybe_fault(phase: str) -> None:
    if os.environ.get(FAULT_ENV) == phase:
        raise InjectedFault(f"injected fault at phase {phase!r} ({FAULT_ENV})")


def _sigterm(*_):
    raise SystemExit(143)   # unwinds through every `finally`: the fabric is torn down


def build_fabric(sc: dict):
    """The pure fabric description for a resolved scenario (Spine-Leaf or Fat-Tree)."""
    t = dict(sc["topology"])
    kind = t.pop("kind")
    return (FatTree if kind == "fattree" else SpineLeaf)(**t).build()


def port_queue(sc: dict, rate_mbps: float) -> PortQueue:
    """The switch egress queue a scenario asks for at ``rate_mbps``."""
    q = sc["queues"]
    return PortQueue(rate_mbps=rate_mbps, buffer_bytes=q["buffer_bytes"], buffer_packets=q["buffer_packets"],
                     burst_bytes=q["burst_bytes"])


class _Agents:
    """Start agents inside hosts with popen, check readiness, release them together."""

    def __init__(self, lf: LiveFabric, state: RunState):
        self.lf, self.state = lf, state
        self.procs = []

    def start(self, host: str, role: str, job: dict):
        """Launch one agent (``role`` rx/tx) in ``host``; :meth:`wait_ready` waits for it."""
        h = self.lf.host(host)
        p = h.popen([sys.executable, "-m", "traffic.agent", json.dumps(job)], cwd=str(REPO),
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.state.add_process(p.pid, f"agent {host} {role}")
        self.procs.append((f"{host}.{role}", p))
        return p

    def wait_ready(self, timeout_s: float = 60.0):
        """Wait until every started agent printed READY; SetupError naming the first that did not."""
        deadline = time.monotonic() + timeout_s
        for name, p in self.procs:
            line = ""
            while time.monotonic() < deadline:
                r, _, _ = select.select([p.stdout], [], [], 0.1)
                if r:
                    line = p.stdout.readline()
                    break
                if p.poll() is not None:
                    break
            if line.strip() != "READY":
                err = p.stderr.read() if p.poll() is not None else ""
                raise SetupError(f"agent {name} not ready within {timeout_s:.0f} s: {err.strip()[-400:]}")

    def release(self, start_at_unix_s: float):
        for _, p in self.procs:
            p.stdin.write(f"{start_at_unix_s:.6f}\n")
            p.stdin.flush()

    def wait(self, deadline_unix_s: float) -> dict[str, int]:
        codes = {}
        for host, p in self.procs:
            left = max(0.1, deadline_unix_s - time.time())
            try:
                codes[host] = p.wait(left)
            except subprocess.TimeoutExpired:
                p.kill()
                codes[host] = p.wait()
        return codes

    def kill(self):
        for _, p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def start_sampler(lf: LiveFabric, state: RunState, out: Path, hz: float) -> subprocess.Popen:
    """Start the queue sampler process on every switch port; waits for READY."""
    intfs = lf.fabric.switch_interfaces()
    p = subprocess.Popen([sys.executable, "-m", "controller.qstats", "--intfs", ",".join(intfs),
                          "--hz", str(hz), "--out", str(out / "queues_raw.csv"), "--meta", str(out / "sampler.json")],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    state.add_process(p.pid, "sampler")
    line = p.stdout.readline()
    if line.strip() != "READY":
        p.wait(5)
        raise SetupError(f"queue sampler failed: {p.stderr.read().strip()}")
    return p


def stop_sampler(p: subprocess.Popen) -> None:
    """SIGTERM the sampler and wait for it to write its files."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    if p.returncode != 0:
        raise SetupError(f"queue sampler exited {p.returncode}: {p.stderr.read().strip()}")


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


def configure_hosts(lf: LiveFabric, sc: dict) -> dict:
    """Set per-namespace TCP congestion control and ECN on every host (case H1); return what was read back."""
    cc = sc["hosts"]["tcp_congestion_control"]
    ecn = str(sc["hosts"]["tcp_ecn"])
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


def warm_up_reachability(lf: LiveFabric) -> float:
    """Probe every host pair once (ARP resolved before the synchronized start); return seconds taken.

    Raises:
        SetupError: some pair does not answer within 20 s.
    """
    res = reach.all_pairs(reach.live_fabric_hosts(lf), timeout_s=20)
    if res.missing:
        raise SetupError(f"no connectivity before traffic: {len(res.missing)} of {res.pairs} host pairs "
                         f"unreachable, e.g. {', '.join(f'{s}->{d}' for s, d in res.missing[:5])}")
    return res.elapsed_s


def measure_rtt_s(lf: LiveFabric, src: str, dst: str) -> float:
    """Median round-trip time of 5 idle pings from ``src`` to ``dst`` in seconds (SetupError on loss)."""
    p = lf.host(src).popen(["ping", "-c", "5", "-i", "0.05", "-W", "2", lf.fabric.node(dst).ip],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    text, _ = p.communicate(timeout=15)
    rtts = sorted(float(m) for m in re.findall(r"time=([0-9.]+) ms", text))
    if not rtts:
        raise SetupError(f"ping {src}->{dst} got no reply: {text.strip()[-200:]}")
    return rtts[len(rtts) // 2] / 1000.0


def run(sc: dict, results_root: Path, quiet: bool = False) -> Path:
    """Run one resolved scenario; return its results folder.

    Raises:
        CapabilityError: the kernel lacks the requested congestion control.
        SetupError: building or configuring the fabric failed.
        InjectedFault: when asked to by $FABRICLAB_INJECT_FAULT (tests).
    """
    old_term = signal.signal(signal.SIGTERM, _sigterm)
    try:
        return _run(sc, Path(results_root), quiet)
    finally:
        signal.signal(signal.SIGTERM, old_term)


def _say(quiet, *a):
    if not quiet:
        print("fabriclab:", *a, flush=True)


def _run(sc: dict, results_root: Path, quiet: bool) -> Path:
    t_begin = time.monotonic()
    timings = {}
    fabric = build_fabric(sc)
    t = sc["traffic"]
    try:
        plan = flow_plan(t, fabric, sc["seed"])
    except ValueError as e:
        raise ScenarioError("traffic.pattern", str(e)) from None
    env = envprobe.probe()
    cc = sc["hosts"]["tcp_congestion_control"]
    if not envprobe.ensure_congestion_control(cc):
        raise CapabilityError(f"hosts.tcp_congestion_control: the kernel has no '{cc}' "
                              f"(available: {' '.join(envprobe.tcp_congestion_controls()['available'])})")
    env["tcp_congestion_control"] = envprobe.tcp_congestion_controls()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = results_root / f"{stamp}-{sc['name']}"
    n = 1
    while out.exists():
        n += 1
        out = results_root / f"{stamp}-{sc['name']}-{n}"
    out.mkdir(parents=True)
    (out / "scenario.yaml").write_text(yaml.safe_dump(sc, sort_keys=False))
    env["git_revision"] = _git_rev()
    env["scale"] = _scale(sc)
    env["routing"] = {"mode": sc["routing"]["mode"], **(ECMP_METHOD if sc["routing"]["mode"] == "ecmp" else {})}
    (out / "environment.json").write_text(json.dumps(env, indent=2))
    _say(quiet, f"datapath={env['datapath']} kernel={env['kernel']} results -> {out}")


    def host_queue(rate_mbps: float) -> PortQueue:
        return PortQueue(rate_mbps=rate_mbps, buffer_packets=HOST_QUEUE_PACKETS, burst_bytes=sc["queues"]["burst_bytes"])

    agent_dir = out / "agents"
    agent_dir.mkdir()
    with RunState(out.name) as state, AllowCongestionControl(cc, state):
        if state.stale_report and any(state.stale_report[k] for k in ("processes", "bridges", "interfaces")):
            _say(quiet, f"removed state of an earlier run: {state.stale_report}")
        _maybe_fault("before_fabric")
        with LiveFabric(fabric, out, state, datapath=env["datapath"],
                        switch_queue=lambda rate: port_queue(sc, rate), host_queue=host_queue,
                        routing=sc["routing"]["mode"]) as lf:
            host_cfg = configure_hosts(lf, sc)
            timings.update(lf.timings_s)
            timings["setup_s"] = time.monotonic() - t_begin
            _say(quiet, f"fabric up in {timings['setup_s']:.1f} s: {len(fabric.switches)} switches, "
                        f"{len(fabric.hosts)} hosts, oversubscription {fabric.params['oversubscription']:g}:1")
            _maybe_fault("after_fabric")
            timings["reachability_s"] = warm_up_reachability(lf)
            env["scale"]["measured_rtt_s"] = measure_rtt_s(lf, plan[0]["src"], plan[0]["dst"])
            env["scale"]["bdp_packets_measured_rtt"] = (sc["topology"]["host_rate_mbps"] * 1e6
                                                        * env["scale"]["measured_rtt_s"] / 8 / FRAME_BYTES)
            env["host_config"] = host_cfg
            txbuf = contextlib.nullcontext()
            if env["datapath"] == "user":
                txbuf = dataplane.OvsTxBuffer(userspace_tx_budget_bytes(sc, fabric), state)
            with txbuf:
                if env["datapath"] == "user":
                    env["ovs_userspace_tx_buffer"] = txbuf.record()
                    if not txbuf.applied and txbuf.reason != "already large enough":
                        print(f"fabriclab: WARNING: could not enlarge Open vSwitch's transmit buffer "
                              f"({txbuf.reason}); all queues of the fabric together are capped near "
                              f"{txbuf.before_bytes} bytes of packet memory, and excess packets are dropped "
                              "inside OVS, not in the qdiscs", file=sys.stderr)
                (out / "environment.json").write_text(json.dumps(env, indent=2))
                codes, t_traffic = _traffic(lf, state, sc, out, agent_dir, plan, quiet)
            timings["traffic_s"] = time.monotonic() - t_traffic
            t_down = time.monotonic()
        timings["teardown_s"] = time.monotonic() - t_down
    timings["total_s"] = time.monotonic() - t_begin

    flows = analysis.collect_flows(agent_dir, plan, codes)
    fabric_map = fabric.to_map()
    analysis.write_results(out, sc, fabric_map, flows, timings, host_cfg, plan)
    from experiments import draw, plot
    plot.plot_all(out)
    draw.draw(fabric_map, out / "topology.png", title=sc["name"])
    summary = json.loads((out / "summary.json").read_text())
    if not quiet:
        print(analysis.format_summary(summary, out))
    return out


def userspace_tx_budget_bytes(sc: dict, fabric) -> int:
    """Send buffer OVS's shared transmit socket needs so every switch FIFO can fill at once (see dataplane)."""
    q = sc["queues"]
    per_port_frames = q["buffer_packets"] if q["buffer_packets"] is not None else -(-q["buffer_bytes"] // FRAME_BYTES)
    return len(fabric.switch_interfaces()) * (per_port_frames + 2) * dataplane.FRAME_TRUESIZE_BYTES


def _traffic(lf, state, sc, out, agent_dir, plan, quiet):
    """Start the sampler, one receiver agent per destination and one sender agent per source,
    release the synchronized start, wait; returns (exit codes by ``host.rx``/``host.tx``, t0)."""
    t = sc["traffic"]
    t_traffic = time.monotonic()
    sampler = start_sampler(lf, state, out, sc["measurement"]["sample_hz"])
    agents = _Agents(lf, state)
    by_dst, by_src = {}, {}
    for f in plan:
        by_dst.setdefault(f["dst"], []).append(f)
        by_src.setdefault(f["src"], []).append(f)
    try:
        run_s = t["duration_s"] or t["timeout_s"]
        deadline = time.time() + run_s + t["start_delay_s"] + 30
        for dst, flows in by_dst.items():
            agents.start(dst, "rx", {"role": "receiver", "port": t["port"], "expect_flows": len(flows),
                                     "deadline_unix_s": deadline, "out": str(agent_dir / f"{dst}.rx.json")})
        for src, flows in by_src.items():
            agents.start(src, "tx", {"role": "sender", "deadline_unix_s": deadline,
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
        codes = agents.wait(min(deadline, start_at + (t["duration_s"] + 30 if t["duration_s"] else t["timeout_s"])))
        time.sleep(sc["measurement"]["post_s"])
    finally:
        agents.kill()
        stop_sampler(sampler)
    return codes, t_traffic


def _git_rev() -> str:
    if os.environ.get("FABRICLAB_GIT_REVISION"):   # set by the VM lane, whose copy has no .git
        return os.environ["FABRICLAB_GIT_REVISION"]
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def _scale(sc: dict) -> dict:
    """The dimensionless numbers of the run (DESIGN.md: keep them when scaling)."""
    q = sc["queues"]
    buf_pkts = q["buffer_packets"] if q["buffer_packets"] is not None else q["buffer_bytes"] / FRAME_BYTES
    return {"host_rate_mbps": sc["topology"]["host_rate_mbps"], "buffer_packets": buf_pkts,
            "response_packets": sc["traffic"]["response_bytes"] / 1448}
