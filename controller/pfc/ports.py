"""PFC for the controller (issue 6): priority queues on every port, the kernel's
per-(switch, ingress port, priority) accounting, and the pauser that gates the
upstream transmitter of a link when its counter passes XOFF and reopens it at XON.

Buffer-accounting model: every byte a switch holds in its egress queues counts
against the (ingress port, priority) it arrived on (controller/bpf/pfc.bpf.c).
Each (ingress port, lossless priority) owns ``cap_bytes`` of buffer: XOFF plus
the headroom must fit in it; frames beyond it are dropped (and counted). Lossy
priorities never pause; their queues drop at the egress buffer, as before.

The plan is a :class:`controller.messages.PfcPlan` (the runner builds it:
:func:`experiments.features.pfc.plan.pfc_plan`).

Requests (controller.rest): ``POST /fabriclab/pfc/start`` ``{"host_pids": {name: pid}, "plan": {...}}``
installs everything and starts the pauser; ``GET /fabriclab/pfc/report`` answers the
pauses, reaction latencies, headroom and counters; ``PUT /fabriclab/pfc`` with ``{"xoff_bytes",
"xon_bytes", "cap_bytes"}`` changes the thresholds and buffers of every lossless counter,
counts kept, and with ``{"enabled": bool}`` turns PFC on or off for the lossless priorities
(a scenario's rounds): off, they pause nobody, have no cap and their egress queues drop at
the port's buffer like a lossy priority's.
"""
from __future__ import annotations

import logging
import os
import queue
import socket
import sys
import threading
import time

import numpy as np

from common.errors import SetupError
from common.units import shaper_burst_bytes
from common.pfc import PauseState, buffer_warning, headroom_bytes, pfc_frame
from controller.dataplane import pausegate
from controller.dataplane.netlink import ipr_entered
from controller.messages import PfcPlan
from controller.pfc.accounting import PfcBpf
from controller.qstats import QdiscStatsReader, ifindexes_for

LOG = logging.getLogger("fabriclab.controller.pfc")
RECONCILE_INTERVAL_S = 0.1
#: Seconds between the pauser's sweeps of every counter (lost events, watchdog, occupancy record).
TICK_S = 0.01
#: The sweep (and the reconciliation, at half that share) waits this many times its own duration.
TICK_SHARE_DIVISOR = 10
#: Real-time priority of the pauser and gate threads (SCHED_FIFO; they sleep in epoll and queues, so
#: they cannot starve the machine). Under a busy incast the OVS and traffic processes hold both
#: cores: at normal priority the pauser woke up to ~0.1 s late (reaction p99 84 ms).
RT_PRIORITY = 10


#: Real-time priority given to the controller's main thread (os-ken's hub) when PFC runs in its
#: process: below the pauser's, above every normal process (see :func:`share_gil_realtime`).
HUB_RT_PRIORITY = RT_PRIORITY - 1
#: The controller's interpreter switch interval when PFC runs in it (see :func:`share_gil_realtime`).
SWITCH_INTERVAL_S = 0.0005


def _realtime(priority: int = RT_PRIORITY) -> bool:
    """Make the calling thread SCHED_FIFO at ``priority`` (children it forks start normal again:
    SCHED_RESET_ON_FORK); False (kept normal) if the kernel refuses."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO | getattr(os, "SCHED_RESET_ON_FORK", 0), os.sched_param(priority))
        return True
    except (OSError, AttributeError):
        return False


def share_gil_realtime() -> bool:
    """Make the calling (os-ken main) thread real-time too, at HUB_RT_PRIORITY.

    The pauser and the gate threads share the interpreter lock with os-ken's hub thread. At
    normal priority the hub thread was preempted by the traffic processes while it held the lock,
    and the real-time pauser waited for it: XOFF reactions of 87 and 117 ms in a RoCE incast (the
    event -> pauser part; p50 0.5 ms), 265 ms once, enough to overrun the headroom and drop. A
    real-time holder is not preempted by normal processes, so it hands the lock on within the
    interpreter's switch interval. The hub sleeps in epoll between OpenFlow messages and requests.

    The switch interval itself drops to :data:`SWITCH_INTERVAL_S`: the reconciler thread parses
    netlink dumps in Python, and with the default 5 ms a pauser that wanted the lock waited up to
    that long (`make bench-pfc`: reaction p99 11.0 ms with 5 ms)."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    return _realtime(HUB_RT_PRIORITY)


class GateWorker:
    """One thread per upstream transmitter for the gate changes that may wait: FIFO limits when
    PFC is turned on or off, and reopening a gate for a pause storm's drop action. XOFF and XON
    are not handed over: the pauser changes those gates itself (:meth:`PfcPorts._on_event`)."""

    def __init__(self, gates: pausegate.PauseGates, errors: list):
        self.gates, self.errors = gates, errors
        self.q: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name=f"pfc-gate-{gates.ifname}", daemon=True)
        self.thread.start()

    def submit(self, fn, *args) -> None:
        """Run ``fn(*args)`` on this port's thread, after what was submitted before."""
        self.q.put((fn, args))

    def _run(self) -> None:
        _realtime()
        while True:
            item = self.q.get()
            if item is None:
                return
            fn, args = item
            try:
                fn(*args)
            except SetupError as err:
                self.errors.append(str(err))
                LOG.error("PFC gate %s: %s", self.gates.ifname, err)

    def wait(self, timeout_s: float = 5.0) -> bool:
        """Block until what was submitted before has run (at most ``timeout_s``); False on timeout."""
        done = threading.Event()
        self.submit(done.set)
        return done.wait(timeout_s)

    def stop(self) -> None:
        """Finish what was submitted, then end the thread."""
        self.q.put(None)
        self.thread.join(timeout=2)


class PfcPorts:
    """Applies a PFC plan and runs the pauser thread (see the module docstring).

    Raises (from :meth:`start`): SetupError naming the port and the kernel's message.
    """

    def __init__(self, plan: PfcPlan, clock_ns=time.monotonic_ns):
        """``plan``: the :class:`controller.messages.PfcPlan` (its start request's); ``clock_ns``: the
        monotonic clock in nanoseconds (component tests pass a fake one)."""
        self.plan = plan
        self.clock_ns = clock_ns
        self.bpf = None
        self.workers: dict[str, GateWorker] = {}   # upstream interface -> its gates' thread
        self.priorities: list[int] = []
        self.links: dict[tuple, dict] = {}     # (sw, index) -> the switch port, its peer and gate
        self.states: dict[tuple, PauseState] = {}
        self.pauses: list[dict] = []
        self.reaction_s: list[float] = []
        self.reactions: list[tuple] = []    # (t_s of the XOFF, reaction_s)
        self.reaction_parts: list[tuple] = []  # (t_s of the XOFF, event -> pauser, pauser -> gate thread, netlink) s
        self.enabled = False
        self.occupancy: list[tuple] = []    # (t_s, sw, ingress index, prio, bytes) when a count changed
        self._last_occ: dict[tuple, int] = {}
        self.storms: list[dict] = []
        self.corrected_bytes = 0
        self._idle_seen: dict[tuple, int] = {}
        self._tried: dict[tuple, tuple | None] = {}   # (sw, prio) -> (packets, bytes held) when a reconcile found queues busy
        self.realtime = None
        self.hub_realtime = None   # set by the app: its hub thread shares the interpreter lock (share_gil_realtime)
        self.lost_events = 0       # transitions found by _tick before (or without) their ring-buffer event
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = None
        self._reconciler = None
        self._gate_readers: dict = {}     # prio -> controller.qstats.QdiscStatsReader of the switches' gates
        self._lock = threading.Lock()
        self.t0_mono_ns = self.clock_ns()
        self.t0_unix_s = time.time()

    # -- set-up ---------------------------------------------------------------------------
    def _queues(self, rate_bps: float, fifo: dict) -> pausegate.PriorityQueues:
        return pausegate.PriorityQueues(rate_bps=rate_bps, fifo_bytes={int(p): int(v) for p, v in fifo.items()},
                                        default_prio=self.plan.default_priority,
                                        weights=dict(self.plan.weights) if self.plan.weights else None,
                                        burst_bytes=self.plan.burst_bytes
                                        or shaper_burst_bytes(rate_bps, self.plan.shaper_slack_s))

    def plan_pauses(self) -> None:
        """The pauser's own state from the plan, no side effects: the priorities, every switch
        port's link (its peer, whose gate a pause closes) and a :class:`PauseState` per (switch,
        ingress port, lossless priority); enabled as the plan says."""
        p = self.plan
        lossless = set(p.lossless)
        self.priorities = sorted({int(x) for x in p.switch_fifo_bytes})
        for s in p.switches:
            for port in s.ports:
                for prio in self.priorities:
                    if prio in lossless:
                        self.states[(s.sw, port.index, prio)] = PauseState(
                            p.xoff_bytes, p.xon_bytes, p.watchdog_s, p.watchdog_action)
                self.links[(s.sw, port.index)] = {"switch": s.name, **port.model_dump()}
        self.enabled = bool(p.enabled) and bool(lossless)

    def start(self, host_pids: dict) -> dict:
        """Install queues and classifiers on every port, load the accounting, start the pauser."""
        p = self.plan
        lossless = set(p.lossless)      # counted and gated; paused only while enabled
        kick = pfc_frame("02:fa:b1:ab:00:00", {prio: 0 for prio in sorted(lossless)}) if lossless else b""
        self.plan_pauses()
        self.bpf = PfcBpf.load()
        self.bpf.set_dscp_map(dict(p.dscp_map), p.default_priority)
        # one netlink socket per namespace for the whole set-up (opened in this thread, used only by
        # it): one per request cost about 3 s of a 24-host fabric's start here
        for h in p.hosts:
            pid = host_pids[h.name]
            q = self._queues(h.rate_bps, p.host_fifo_bytes)
            with ipr_entered(pid) as ipr:
                pausegate.install_priority_queues(h.intf, q, pid, ipr=ipr)
                self.bpf.attach(h.intf, pid, switch_port=False, ipr=ipr)
                gates = pausegate.PauseGates(h.intf, q, pid, kick_frame=kick, ipr=ipr)
            self.workers[h.intf] = GateWorker(gates, self.errors)
        with ipr_entered(None) as ipr:
            for s in p.switches:
                for port in s.ports:
                    self._start_switch_port(s.sw, port, kick, ipr)
        self.bpf.on_events(self._on_event)
        self._thread = threading.Thread(target=self._run, name="pfc-pauser", daemon=True)
        self._thread.start()
        self._reconciler = threading.Thread(target=self._run_reconciler, name="pfc-reconciler", daemon=True)
        self._reconciler.start()
        record = {"ports": sum(len(s.ports) for s in p.switches), "hosts": len(p.hosts),
                  "lossless": sorted(lossless), "enabled": self.enabled, **self.bpf.ids()}
        LOG.info("PFC: queues on %d switch ports and %d host NICs; lossless priorities %s",
                 record["ports"], record["hosts"], record["lossless"])
        return record

    def _start_switch_port(self, sw: int, port, kick: bytes, ipr) -> None:
        """One switch port's queues, classifiers, pause gates and thresholds (``ipr``: the root
        namespace's open netlink socket)."""
        p = self.plan
        lossless = set(p.lossless)
        q = self._queues(port.rate_bps, p.switch_fifo_bytes)
        pausegate.install_priority_queues(port.intf, q, ipr=ipr)
        self.bpf.set_port(socket.if_nametoindex(port.intf), sw, port.index, True)
        self.bpf.attach(port.intf, ipr=ipr)
        self.workers[port.intf] = GateWorker(pausegate.PauseGates(port.intf, q, kick_frame=kick, ipr=ipr),
                                                self.errors)
        for prio in self.priorities:
            on = prio in lossless and p.enabled
            self.bpf.set_thresholds(sw, port.index, prio, p.xoff_bytes if on else 0,
                                    p.xon_bytes if on else 0, p.cap_bytes if on else 0)

    # -- the pauser -----------------------------------------------------------------------
    def _t_rel(self, t_ns: int) -> float:
        return (t_ns - self.t0_mono_ns) / 1e9

    def _on_event(self, e: dict) -> None:
        key = (e["sw"], e["port"], e["prio"])
        link = self.links.get((e["sw"], e["port"]))
        state = self.states.get(key)
        if link is None or state is None or not self.enabled:
            return
        worker = self.workers.get(link["peer_intf"])
        try:
            if e["kind"] == "xoff":
                if state.paused:
                    return                  # _tick saw this transition first
                if worker is not None and not state.dropping:
                    # inline, not on the port's gate thread: a change is one pre-encoded netlink
                    # round trip (~4 us), and the hand-over to another thread cost more than that
                    # under load (pauser -> gate thread p99 1.95 ms, `make bench-pfc`, 2026-12-01)
                    self._close(worker.gates, e["prio"], e["t_ns"], self.clock_ns())
                for ev in state.update(e["bytes"], self._t_rel(e["t_ns"])):
                    self._after(ev, key, link)
            else:
                if not state.paused:
                    return
                was_storm = state.storm
                events = state.update(min(e["bytes"], state.xon_bytes), self._t_rel(e["t_ns"]))
                if worker is not None:
                    worker.gates.open_gate(e["prio"])
                if was_storm and state.action == "drop":
                    self.bpf.set_storm_drop(*key, False)
                for ev in events:
                    self._after(ev, key, link)
        except SetupError as err:
            self.errors.append(str(err))
            LOG.error("PFC: %s", err)

    def _close(self, gates, prio: int, t_event_ns: int, t_submit_ns: int) -> None:
        """Close ``prio``'s gate; record the reaction latency and its three parts: kernel event ->
        pauser (``t_submit_ns``: when the pauser took the XOFF up), pauser -> the change's start
        (~0 since the pauser changes gates itself; the key keeps its old name,
        ``pauser_to_gate_thread``), the netlink change itself."""
        t_start = self.clock_ns()
        gates.close_gate(prio)
        t_done = self.clock_ns()
        with self._lock:
            self.reaction_s.append((t_done - t_event_ns) / 1e9)
            self.reactions.append((self._t_rel(t_event_ns), self.reaction_s[-1]))
            self.reaction_parts.append((self._t_rel(t_event_ns), (t_submit_ns - t_event_ns) / 1e9,
                                        (t_start - t_submit_ns) / 1e9, (t_done - t_start) / 1e9))

    def _after(self, ev, key, link) -> None:
        if ev.kind == "xon":
            start, end, stormed = self.states[key].intervals[-1]
            with self._lock:
                self.pauses.append({"start_s": start, "end_s": end, "switch": link["switch"], "port": link["intf"],
                                    "priority": key[2], "upstream": link["peer"], "upstream_port": link["peer_intf"],
                                    "storm": stormed})
        elif ev.kind == "storm":
            with self._lock:
                self.storms.append({"t_s": ev.t_s, "switch": link["switch"], "port": link["intf"], "priority": key[2],
                                    "upstream_port": link["peer_intf"], "action": self.states[key].action})
            LOG.warning("PFC watchdog: %s priority %d paused for %.3f s (pause storm; action %s)", link["peer_intf"],
                        key[2], ev.t_s - self.states[key].paused_since_s, self.states[key].action)
            if self.states[key].action == "drop":
                self.bpf.set_storm_drop(*key, True)
                worker = self.workers.get(link["peer_intf"])
                if worker is not None:     # stop obeying the pause; the packets are dropped downstream
                    worker.submit(worker.gates.open_gate, key[2])

    def _queues_empty(self, ports, prio: int) -> bool:
        """Whether priority ``prio``'s gate holds nothing on every one of ``ports``: one raw netlink
        dump of the switches' namespace (controller.qstats; a pyroute2 socket per port made the
        reconciler hold the interpreter lock for milliseconds: `make bench-pfc` reaction p99 7.5-11 ms
        instead of 1.9 without it)."""
        reader = self._gate_readers.get(prio)
        if reader is None:
            names = [port.intf for s in self.plan.switches for port in s.ports]
            reader = self._gate_readers[prio] = QdiscStatsReader(ifindexes_for(names), pausegate.prio_gate_handle(prio))
        stats = reader.read()
        return all(port.intf in stats and stats[port.intf][0] == 0 for port in ports)

    def _tick(self) -> None:
        """Every poll: follow the kernel's paused flags (an event the ring buffer could not take
        must not leave a gate shut) and run the watchdog on the paused (link, priority)s."""
        now_ns = self.clock_ns()
        for key, state in self.states.items():
            c = self.bpf.read(*key)
            if c is None:
                continue
            if self._last_occ.get(key) != c["bytes"]:
                self._last_occ[key] = c["bytes"]
                with self._lock:
                    self.occupancy.append((self._t_rel(now_ns), *key, c["bytes"]))
            if not self.enabled:
                continue
            ev = {"t_ns": now_ns, "sw": key[0], "port": key[1], "prio": key[2]}
            if c["paused"] and not state.paused:
                self.lost_events += 1
                self._on_event({**ev, "bytes": max(c["bytes"], state.xoff_bytes), "kind": "xoff"})
            elif not c["paused"] and state.paused and c["bytes"] <= state.xon_bytes:
                self.lost_events += 1
                self._on_event({**ev, "bytes": c["bytes"], "kind": "xon"})
            elif state.paused:
                for e in state.update(max(c["bytes"], state.xon_bytes + 1), self._t_rel(now_ns)):
                    self._after(e, key, self.links[key[:2]])

    def _reconcile_idle(self, lossless) -> None:
        """Reconcile the (switch, priority) counters that still hold bytes though nothing has arrived
        for a whole interval (an idle switch; reading queues costs netlink dumps: never while busy)."""
        for s in self.plan.switches:
            idx = [port.index for port in s.ports]
            for prio in lossless:
                reads = [self.bpf.read(s.sw, i, prio) for i in idx]
                packets = sum(r["packets"] for r in reads if r)
                held = sum(r["bytes"] for r in reads if r)
                key = (s.sw, prio)
                last = self._idle_seen.get(key)
                self._idle_seen[key] = packets
                # not again while nothing moved: a switch held by a pause downstream keeps its bytes
                # and its count for as long as the pause lasts, and its queues stay non-empty; once
                # they drain (the held bytes change) it is tried again
                if held and last == packets and self._tried.get(key) != (packets, held):
                    fixed = self.bpf.reconcile(s.sw, prio, idx,
                                               lambda s=s, prio=prio: self._queues_empty(s.ports, prio))
                    self.corrected_bytes += fixed
                    self._tried[key] = None if fixed else (packets, held)

    def _run(self) -> None:
        self.realtime = _realtime()
        next_tick = 0.0
        while not self._stop.is_set():
            try:
                self.bpf.poll(10)
                # events wake the poll early (an incast brings hundreds a second), so the sweep of
                # every counter runs on its own clock: every TICK_S, or TICK_SHARE_DIVISOR times its
                # own duration when that is longer, so this real-time thread never spends more than
                # ~1/TICK_SHARE_DIVISOR of a core sweeping (under the VM lane's emulated CPU a sweep
                # of 40 counters can take milliseconds, and at 100 Hz it would starve the rest)
                now = time.monotonic()
                if now >= next_tick:
                    self._tick()
                    took = time.monotonic() - now
                    next_tick = now + max(TICK_S, TICK_SHARE_DIVISOR * took)
            except SetupError as err:
                self.errors.append(str(err))
                LOG.error("PFC pauser: %s", err)
                time.sleep(0.1)

    def _run_reconciler(self) -> None:
        """Every RECONCILE_INTERVAL_S (or 2 x TICK_SHARE_DIVISOR times its own duration, if longer),
        :meth:`_reconcile_idle`, on a thread of its own: on the pauser's thread its queue reads (then
        a pyroute2 socket per port) took 0.13-0.26 s under a RoCE incast's pauses, and the XOFF
        events waited meanwhile. Real-time below the pauser, so it hands the interpreter lock on
        when the pauser wants it."""
        _realtime(HUB_RT_PRIORITY)
        lossless = self.plan.lossless
        wait_s = RECONCILE_INTERVAL_S
        while not self._stop.wait(wait_s):
            try:
                t0 = time.monotonic()
                self._reconcile_idle(lossless)
                wait_s = max(RECONCILE_INTERVAL_S, 2 * TICK_SHARE_DIVISOR * (time.monotonic() - t0))
            except SetupError as err:
                self.errors.append(str(err))
                LOG.error("PFC reconciler: %s", err)

    # -- results --------------------------------------------------------------------------
    def report(self) -> dict:
        """Pauses (closed and open), storms, reaction latencies (``reactions``: [t_s of the XOFF,
        latency_s]; ``reaction_parts_s``: p50/p99/max of its parts since the start: kernel event ->
        pauser thread, pauser -> gate thread, the netlink gate change; ``reaction_parts``: each
        reaction's [t_s of the XOFF, those three parts]), per-(port, priority)
        counters, and ``occupancy``: every change of a lossless (ingress port, priority)'s held
        bytes the pauser saw (one read per poll, ~10 ms), times in seconds from ``t0_unix_s``."""
        now = self._t_rel(self.clock_ns())
        with self._lock:
            pauses = list(self.pauses)
            storms = list(self.storms)
            reactions = list(self.reactions)
            parts = np.array(self.reaction_parts) if self.reaction_parts else None
            occupancy = [{"t_s": t, "switch": self.links[(sw, idx)]["switch"], "port": self.links[(sw, idx)]["intf"],
                          "priority": prio, "bytes": b} for t, sw, idx, prio, b in self.occupancy]
        for key, st in self.states.items():
            if st.paused:
                link = self.links[key[:2]]
                pauses.append({"start_s": st.paused_since_s, "end_s": None, "switch": link["switch"],
                               "port": link["intf"], "priority": key[2], "upstream": link["peer"],
                               "upstream_port": link["peer_intf"], "storm": st.storm})
        counters = []
        for (sw, idx), link in self.links.items():
            for prio in self.priorities:
                c = self.bpf.read(sw, idx, prio)
                if c is not None:
                    counters.append({"switch": link["switch"], "port": link["intf"], "priority": prio,
                                     **{k: c.get(k) for k in ("bytes", "max_bytes", "packets", "xoff_events", "drops",
                                                              "storm_drops", "corrected_bytes", "underflows",
                                                              "cap_bytes")}})
        r = np.array(self.reaction_s) if self.reaction_s else None
        return {"t0_unix_s": self.t0_unix_s, "pauses": sorted(pauses, key=lambda x: x["start_s"]), "storms": storms,
                "reaction_s": {"count": len(self.reaction_s),
                               "p50": float(np.percentile(r, 50)) if r is not None else None,
                               "p99": float(np.percentile(r, 99)) if r is not None else None,
                               "max": float(r.max()) if r is not None else None},
                "headroom": self.headroom(), "pauser_realtime": self.realtime, "hub_realtime": self.hub_realtime,
                "lost_events": self.lost_events,
                "corrected_bytes": self.corrected_bytes, "counters": counters, "errors": self.errors[:20],
                "now_s": now, "enabled": self.enabled, "xoff_bytes": self.plan.xoff_bytes,
                "xon_bytes": self.plan.xon_bytes, "cap_bytes": self.plan.cap_bytes,
                "reactions": reactions, "occupancy": occupancy,
                "reaction_parts": [list(x) for x in self.reaction_parts] if parts is not None else [],
                "reaction_parts_s": None if parts is None else {
                    name: {"p50": float(np.percentile(parts[:, i + 1], 50)),
                           "p99": float(np.percentile(parts[:, i + 1], 99)), "max": float(parts[:, i + 1].max())}
                    for i, name in enumerate(("event_to_pauser", "pauser_to_gate_thread", "gate_change"))}}

    def set_enabled(self, on: bool) -> int:
        """Turn PFC on or off for every lossless (ingress port, priority); returns how many.

        On: the plan's XOFF, XON and cap in the kernel, lossless egress queues sized to hold
        every ingress port's cap. Off: no threshold and no cap (the kernel never pauses), every
        gate of a paused (link, priority) reopened (its pause ends now), lossless egress queues
        at the lossy queues' limit (they drop at the port's buffer). Counts are kept."""
        p = self.plan
        self.enabled = bool(on) and bool(self.states)
        now_s = self._t_rel(self.clock_ns())
        for key, st in self.states.items():
            if self.enabled:
                self.bpf.set_limits(*key, p.xoff_bytes, p.xon_bytes, p.cap_bytes)
                continue
            self.bpf.set_limits(*key, 0, 0, 0)
            if st.paused:
                link = self.links[key[:2]]
                worker = self.workers.get(link["peer_intf"])
                if worker is not None:
                    worker.submit(worker.gates.open_gate, key[2])
                if st.storm and st.action == "drop":
                    self.bpf.set_storm_drop(*key, False)
                for ev in st.update(0, now_s):
                    self._after(ev, key, link)
        lossy = int(p.lossy_fifo_bytes)
        for s in p.switches:
            for port in s.ports:
                worker = self.workers[port.intf]
                for prio in {k[2] for k in self.states}:
                    worker.submit(worker.gates.set_limit, prio,
                                  p.cap_bytes * len(s.ports) if self.enabled else lossy)
        self._wait_workers("PFC on" if self.enabled else "PFC off")
        LOG.info("PFC %s on %d (ingress port, priority) counters", "on" if self.enabled else "off", len(self.states))
        return len(self.states)

    def set_limits(self, xoff_bytes: int, xon_bytes: int, cap_bytes: int) -> int:
        """Change XOFF, XON and every lossless counter's buffer (cap) now, counts kept; returns
        how many counters changed. Raises ValueError for XON >= XOFF or XOFF >= cap."""
        if not 0 <= xon_bytes < xoff_bytes < cap_bytes:
            raise ValueError(f"need 0 <= XON < XOFF < buffer, got {xon_bytes}, {xoff_bytes}, {cap_bytes}")
        self.plan = self.plan.model_copy(update={"xoff_bytes": xoff_bytes, "xon_bytes": xon_bytes,
                                                 "cap_bytes": cap_bytes})
        for (sw, idx, prio), st in self.states.items():
            st.xoff_bytes, st.xon_bytes = xoff_bytes, xon_bytes
            self.bpf.set_limits(sw, idx, prio, xoff_bytes, xon_bytes, cap_bytes)
        # a lossless egress queue must hold every ingress port's buffer (drops happen at the caps)
        lossless = {k[2] for k in self.states}
        for s in self.plan.switches:
            for port in s.ports:
                worker = self.workers[port.intf]
                for prio in lossless:
                    worker.submit(worker.gates.set_limit, prio, cap_bytes * len(s.ports))
        self._wait_workers("new limits")
        LOG.info("PFC: XOFF %d B, XON %d B, buffer %d B on %d counters", xoff_bytes, xon_bytes, cap_bytes,
                 len(self.states))
        return len(self.states)

    def _wait_workers(self, what: str) -> None:
        """Return once every gate thread has applied what was submitted (the runner starts the
        traffic after the answer: a lossless FIFO still at the lossy limit would drop)."""
        late = [w.gates.ifname for w in self.workers.values() if not w.wait()]
        if late:
            self.errors.append(f"{what}: gate threads of {late} did not finish within 5 s")
            LOG.error("PFC: %s: gate threads of %s did not finish within 5 s", what, late)

    def headroom(self) -> list[dict]:
        """Per link rate: the headroom the measured reaction latency needs (rate x (p99 reaction + link
        delay) + one MTU; common.pfc.headroom_bytes; emulated links have no propagation delay) and a
        warning when a (ingress port, priority)'s buffer cannot hold XOFF plus it (case R3)."""
        with self._lock:
            r = list(self.reaction_s)
        if not r:
            return []
        p99 = float(np.percentile(r, 99))
        rates = sorted({port.rate_bps for s in self.plan.switches for port in s.ports})
        out = []
        for rate in rates:
            need = headroom_bytes(rate, p99, 0.0)
            out.append({"rate_bps": rate, "reaction_p99_s": p99, "headroom_bytes": need,
                        "xoff_bytes": self.plan.xoff_bytes, "buffer_bytes": self.plan.cap_bytes,
                        "warning": buffer_warning(self.plan.cap_bytes, self.plan.xoff_bytes, need,
                                                  f"ports at {rate / 1e6:g} Mbit/s")})
        return out

    def stop(self) -> None:
        """Stop the pauser, close sockets and the BPF object (queues stay with their ports)."""
        self._stop.set()
        for t in (self._thread, self._reconciler):
            if t is not None:
                t.join(timeout=2)
        for w in self.workers.values():
            w.stop()
        for w in self.workers.values():
            w.gates.close()
        for r in self._gate_readers.values():
            r.close()
        if self.bpf is not None:
            self.bpf.close()

    # -- requests -------------------------------------------------------------------------
