"""The control plane and the data plane's queues watched through every round: the controller
process alive, every switch connected to it, no OpenFlow error from any switch, and every switch
port's and host NIC's qdiscs the ones fabriclab installed. A controller that dies mid-run leaves the fabric
forwarding on its installed rules, but nothing answers ARP any more (only the controller does), so
flows stall in ways the traffic's own figures do not explain; a switch that refuses a rule
forwards something other than the routes; a port whose qdiscs something else replaced (Open
vSwitch does when a port gets a QoS) no longer has the rate or the buffer the run reports. Each is
a fidelity failure of the round, naming what failed and when; a replaced qdisc also stops the
round's traffic at once (experiments.live.ROUND_STOP), since nothing it measures after that is
the fabric's.
"""
from __future__ import annotations

import subprocess
import threading
import time
from typing import TYPE_CHECKING

from common.lazy import lazy_module
from experiments.context import RoundRecord
from experiments.features.base import Feature
from experiments.live import ROUND_STOP

if TYPE_CHECKING:
    from controller.dataplane import tcqdisc
else:    # the live half, loaded when a live hook first runs (common.lazy): analyze and plot run without it
    tcqdisc = lazy_module("controller.dataplane.tcqdisc")


#: How often the watcher looks (seconds).
INTERVAL_S = 0.25
#: How often it reads every switch port's and host NIC's qdiscs (one netlink dump per namespace;
#: 3-10 ms on 40 switch ports).
TREES_EVERY_S = 1.0
#: ovs-vswitchd refreshes a controller's ``is_connected`` in its database every few seconds, so a
#: switch that has not shown as connected since the round began is only reported once it has
#: shown as not connected for this long (a run's first round can begin before the first refresh:
#: every switch read "not connected" there, once, in a CI rehearsal); one seen connected and then
#: not is reported at once.
STALE_S = 10.0


def switch_connections(timeout_s: float = 2.0) -> dict[str, bool] | None:
    """Every Open vSwitch bridge's controller connection: ``{bridge: connected}`` (a bridge with
    several controllers counts as connected when one is), or None when ovs-vsctl cannot answer."""
    try:
        p = subprocess.run(["ovs-vsctl", f"--timeout={int(timeout_s)}", "--format=csv", "--data=bare",
                            "--no-headings", "--columns=name,controller", "list", "bridge"],
                           capture_output=True, text=True, timeout=timeout_s + 1)
        c = subprocess.run(["ovs-vsctl", f"--timeout={int(timeout_s)}", "--format=csv", "--data=bare",
                            "--no-headings", "--columns=_uuid,is_connected", "list", "controller"],
                           capture_output=True, text=True, timeout=timeout_s + 1)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode or c.returncode:
        return None
    connected = {}
    for line in c.stdout.splitlines():
        uuid, _, state = line.partition(",")
        connected[uuid.strip()] = state.strip() == "true"
    out = {}
    for line in p.stdout.splitlines():
        name, _, ctls = line.partition(",")
        out[name.strip()] = any(connected.get(u, False) for u in ctls.split())
    return out


def describe_tree_change(port: str, installed: tuple, now: tuple, t: float) -> str:
    """One line: what changed in ``port``'s qdiscs (:class:`controller.dataplane.tcqdisc.QdiscTrees`
    entries) at ``t`` seconds of the round."""
    return (f"{port}: its qdiscs were replaced at t = {t:.2f} s of the round: now {'; '.join(now) or 'none'}, "
            f"where fabriclab installed {'; '.join(installed) or 'none'} (something else set its "
            f"queues: a tc command, or an Open vSwitch QoS on a switch port); the round was stopped")


class Watcher:
    """A thread that, every :data:`INTERVAL_S`, checks ``alive()`` and ``connections()`` for
    ``switches``, and every :data:`TREES_EVERY_S` ``trees()`` against its first reading, and keeps
    the first problem of each kind with its time (``t0`` relative). A changed qdisc tree also
    requests :data:`experiments.live.ROUND_STOP` (``on_stop``).

    Args:
        alive: () -> None when the controller runs, else its exit code.
        connections: () -> :func:`switch_connections`-like dict, or None (not known this time).
        switches: the fabric's switch names.
        trees: () -> ``{port: qdiscs}`` (:class:`controller.dataplane.tcqdisc.QdiscTrees` of the switch
            ports and host NICs), or None: not watched.
        on_stop: called with the reason when the round must stop.
    """

    def __init__(self, alive, connections, switches: list[str], clock=time.monotonic, trees=None,
                 on_stop=ROUND_STOP.request):
        self.alive, self.connections, self.switches, self.clock = alive, connections, list(switches), clock
        self.trees, self.on_stop = trees, on_stop
        self.t0 = clock()
        self.problems: dict[str, str] = {}
        self.seen_connected: set[str] = set()
        self.down_since: dict[str, float] = {}
        self.installed: dict | None = None
        self.trees_at = -TREES_EVERY_S
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="control-plane-watch", daemon=True)

    def check_trees(self, t: float) -> None:
        """Compare every port's qdiscs with the first reading (kept as what fabriclab installed)."""
        self.trees_at = t
        try:
            now = self.trees()
        except Exception:             # a dump that failed once is not a replaced qdisc
            return
        if self.installed is None:
            self.installed = now
            return
        for port, qdiscs in self.installed.items():
            key = f"qdisc {port}"
            if key not in self.problems and now.get(port) != qdiscs:
                self.problems[key] = describe_tree_change(port, qdiscs, now.get(port, ()), t)
                self.on_stop(self.problems[key])

    def check(self, trees_now: bool = False) -> None:
        """One look (the thread calls it; tests call it directly); the qdiscs are read every
        :data:`TREES_EVERY_S`, or now with ``trees_now``."""
        t = self.clock() - self.t0
        if self.trees is not None and (trees_now or t - self.trees_at >= TREES_EVERY_S):
            self.check_trees(t)
        code = self.alive()
        if code is not None and "controller" not in self.problems:
            self.problems["controller"] = f"the controller process exited ({code}) at t = {t:.2f} s of the round"
        seen = self.connections()
        if seen is None:
            return
        for sw in self.switches:
            if seen.get(sw, False):
                self.seen_connected.add(sw)
                self.down_since.pop(sw, None)
                continue
            since = self.down_since.setdefault(sw, t)
            if f"switch {sw}" not in self.problems and (sw in self.seen_connected or t - since >= STALE_S):
                self.problems[f"switch {sw}"] = f"switch {sw} was not connected to the controller at t = {since:.2f} s"

    def _run(self):
        while not self._stop.wait(INTERVAL_S):
            self.check()

    def start(self) -> "Watcher":
        """Start watching (after one look)."""
        self.check()
        self._thread.start()
        return self

    def stop(self) -> list[str]:
        """Stop, take one last look (the qdiscs read too: a tree replaced in the round's last
        second is the round's problem); the problems found, one line each."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        self.check(trees_now=True)
        return list(self.problems.values())


class ControlPlane(Feature):
    """The controller, the switches' connections and OpenFlow errors, watched in every round."""
    name = "control_plane"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.watcher = None
        self.trees = None
        self._errors_before = 0

    def before_round(self, lf, rnd: RoundRecord) -> dict:
        """Start the watcher; note how many OpenFlow errors the controller had reported."""
        self._errors_before = len(self._errors(lf))
        ports = [p["intf"] for s in self.ctx.fabric_map["switches"] for p in s["ports"]]
        nics = {h["intf"]: lf.host(h["name"]).pid for h in self.ctx.fabric_map["hosts"]}
        self.trees = tcqdisc.QdiscTrees(ports, nics)
        self.watcher = Watcher(lf.controller.poll, switch_connections,
                               [s["name"] for s in self.ctx.fabric_map["switches"]],
                               trees=self.trees).start()
        return {}

    @staticmethod
    def _errors(lf) -> list[dict]:
        if lf.controller.poll() is not None:
            return []
        try:
            return lf.api.call("GET", "/status", timeout_s=5).get("openflow_errors") or []
        except Exception:             # the status is best effort; a dead API shows as the watcher's problem
            return []

    def after_round(self, lf, rnd: RoundRecord) -> dict:
        """The round's problems: the watcher's and the OpenFlow errors sent during it."""
        problems = self.watcher.stop() if self.watcher else []
        if self.trees is not None:
            self.trees.close()
            self.trees = None
        new = self._errors(lf)[self._errors_before:]
        problems += [f"OpenFlow error from {e['switch']}: {e['text']}" for e in new]
        return {"problems": problems, "interval_s": INTERVAL_S}

    def summarize(self, rnd: RoundRecord, summary: dict) -> None:
        """``fidelity.control_plane``: what was watched and what went wrong."""
        rec = rnd.features.get(self.name)
        if rec is None:
            return
        summary.setdefault("fidelity", {})["control_plane"] = {
            "checked": f"controller alive, every switch connected (every {rec['interval_s']} s), no OpenFlow "
                       f"error; every switch port's and host NIC's qdiscs as installed (every {TREES_EVERY_S} s)",
            "failures": rec["problems"]}

    def failures(self, summary: dict) -> list[str]:
        """The round's control-plane problems."""
        return list(((summary.get("fidelity") or {}).get("control_plane") or {}).get("failures", []))
