"""The controller's fault manager: applies the data-plane actions of fault injectors
(controller.faults) on a schedule, takes them back exactly, records what each fault did, and keeps
the port counters a fault adds to (a corrupt fault's frames are the receiving port's receive
errors, for as long as the controller runs, as a switch's counters are).

Actions and their mechanisms (controller.dataplane, controller.faultbpf):

- :class:`controller.faults.FrameDrop`: the XDP frame-drop program on the receiving interface;
- :class:`controller.faults.RateLimit`: the port's link-rate HTB class (``1:1``) changed to the
  lower rate, its bursts, quantum and priority kept; the class as read before is written back
  (and read again: the record says whether it matches);
- :class:`controller.faults.LinkFlap`: the interface set down and up (its veth peer loses and
  regains its carrier).

Times are seconds from the request that added the fault (the runner adds a round's faults as the
round starts). Two faults may not act on one interface the same way at once (two frame drops, two
rates, two flaps); a degraded link may also corrupt frames.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Callable

from common.errors import ScenarioError, SetupError
from controller.dataplane import hostknobs, tcqdisc
from controller.faultbpf import XdpFrameDrop
from controller.faults import FAULTS, FaultSpec, FrameDrop, LinkFlap, RateLimit, check_clashes, slot

LOG = logging.getLogger("fabriclab.controller.faults")

#: Every fault manager of this process (the controller's SIGTERM handler takes their faults back).
MANAGERS: list["FaultPorts"] = []


def remove_everywhere(timeout_s: float = 5.0) -> None:
    """End every fault of every manager of this process (the controller stopping while its fabric
    stays up, as under ``mn --custom``, leaves the fabric as it was)."""
    for m in list(MANAGERS):
        m.remove_all(timeout_s)


class _Fault:
    """One fault: its spec, actions, schedule thread and record."""

    def __init__(self, fid: int, spec: FaultSpec, actions: tuple, t0: float, hidden: bool = False):
        self.id, self.spec, self.actions, self.t0, self.hidden = fid, spec, actions, t0, hidden
        self.cancel = threading.Event()
        self.thread: threading.Thread | None = None
        self.state = "scheduled"
        self.applied_at_s: float | None = None
        self.removed_at_s: float | None = None
        self.error: str | None = None
        self.drops: dict[str, XdpFrameDrop] = {}
        self.rates: dict[str, dict] = {}
        self.flap_events: list[list] = []     # [down_at_s, up_at_s or None]

    def record(self) -> dict:
        """What the fault did (JSON): the spec, whether it is hidden, times, frames seen and dropped,
        rates, flaps."""
        counts = {intf: d.counters() for intf, d in self.drops.items()}
        seen = sum(c["seen_packets"] for c in counts.values())
        dropped = sum(c["dropped_packets"] for c in counts.values())
        return {"id": self.id, "kind": self.spec.kind, "place": self.spec.place, "layer": FAULTS[self.spec.kind].LAYER,
                "description": FAULTS[self.spec.kind].describe(self.spec), "spec": self.spec.to_data(),
                "hidden": self.hidden, "state": self.state, "applied_at_s": self.applied_at_s, "removed_at_s": self.removed_at_s,
                "error": self.error, "frames_seen": seen if counts else None,
                "frames_dropped": dropped if counts else None,
                "bytes_dropped": sum(c["dropped_bytes"] for c in counts.values()) if counts else None,
                "drop_fraction_measured": (dropped / seen if seen else None) if counts else None,
                "per_interface": counts, "rates": self.rates,
                "flaps": [{"down_at_s": d, "up_at_s": u} for d, u in self.flap_events]}


class FaultPorts:
    """Faults on one fabric.

    Args:
        fabric_map: the controller's fabric map.
        clock: monotonic seconds (injected for tests).
        apply: the data plane (injected for tests; default :class:`DataPlane`).
    """

    def __init__(self, fabric_map: dict, clock: Callable[[], float] = time.monotonic, apply=None):
        self.fabric_map, self.clock = fabric_map, clock
        self.dp = apply or DataPlane()
        self.host_pids: dict[str, int] = {}
        self.faults: list[_Fault] = []
        self.lock = threading.RLock()
        #: cumulative receive errors per interface (corrupt faults' dropped frames)
        self.rx_errors: dict[str, int] = {}
        self._next = 1
        MANAGERS.append(self)

    def set_hosts(self, host_pids: dict[str, int]) -> None:
        """The hosts' namespace pids (a host's interface is reached in its namespace)."""
        self.host_pids = dict(host_pids)

    def netns(self, node: str) -> int | None:
        """The namespace pid of ``node`` (None for a switch). SetupError for a host not registered."""
        if node in {s["name"] for s in self.fabric_map["switches"]}:
            return None
        if node not in self.host_pids:
            raise SetupError(f"host {node}: its namespace is not known to the controller "
                             "(POST /fabriclab/hosts {\"host_pids\": {...}} first)")
        return self.host_pids[node]

    def busy(self) -> set[tuple[str, str]]:
        """``(interface, action kind)`` of every scheduled or active fault's actions."""
        with self.lock:
            return {slot(a) for f in self.faults if f.state in ("scheduled", "active") for a in f.actions}

    def add(self, specs: list[FaultSpec], hidden: bool = False) -> list[int]:
        """Schedule ``specs`` (times from now); their ids. Nothing is scheduled when one of them
        acts on an interface the way another fault (added earlier or in the same call) does.
        ``hidden`` faults are left out of :meth:`records` until :meth:`remove_all` reveals them.

        Raises:
            ScenarioError: two such faults (naming the second), or a place not in the fabric.
        """
        with self.lock:
            check_clashes(self.fabric_map, specs)
            busy = self.busy()
            planned = []
            for i, spec in enumerate(specs):
                acts = FAULTS[spec.kind].actions(self.fabric_map, spec)
                clash = sorted({slot(a) for a in acts} & busy)
                if clash:
                    raise ScenarioError(f"faults[{i}]", f"another fault already acts on {clash[0][0]} "
                                        f"({clash[0][1]}): one such fault per interface at a time")
                planned.append((spec, acts))
            t0 = self.clock()
            ids = []
            for spec, acts in planned:
                f = _Fault(self._next, spec, acts, t0, hidden)
                self._next += 1
                self.faults.append(f)
                f.thread = threading.Thread(target=self._run, args=(f,), name=f"fabriclab-fault-{f.id}", daemon=True)
                f.thread.start()
                ids.append(f.id)
            return ids

    def records(self) -> list[dict]:
        """Every fault's record but the hidden ones', oldest first."""
        return self.listing()["faults"]

    def listing(self) -> dict:
        """``{"faults": records but the hidden ones', oldest first, "hidden": how many are held
        back}``, read at one instant (until :meth:`remove_all` reveals them)."""
        with self.lock:
            return {"faults": [f.record() for f in self.faults if not f.hidden],
                    "hidden": sum(f.hidden for f in self.faults)}

    def remove_all(self, timeout_s: float = 30.0) -> list[dict]:
        """End every fault now (those not started never start), wait until each is taken back,
        and return every record; the list of faults is then empty (port counters keep what they
        counted)."""
        with self.lock:
            faults = list(self.faults)
        for f in faults:
            f.cancel.set()
        for f in faults:
            if f.thread is not None:
                f.thread.join(timeout_s)
        with self.lock:
            out = [f.record() for f in faults]
            self.faults = [f for f in self.faults if f not in faults]
            return out

    # -- the schedule ------------------------------------------------------
    def _since(self, f: _Fault) -> float:
        return self.clock() - f.t0

    def _wait_until(self, f: _Fault, at_s: float | None) -> bool:
        """Wait until ``at_s`` after the fault's origin (None: until cancelled); True if cancelled."""
        if at_s is None:
            f.cancel.wait()
            return True
        return f.cancel.wait(max(0.0, at_s - self._since(f)))

    def _run(self, f: _Fault) -> None:
        try:
            if self._wait_until(f, f.spec.start_s):
                f.state = "not started"
                return
            self._apply(f)
            f.applied_at_s = self._since(f)
            f.state = "active"
            flaps = [a for a in f.actions if isinstance(a, LinkFlap)]
            if flaps:
                self._flap(f, flaps[0])
            else:
                self._wait_until(f, f.spec.stop_s)
        except Exception as e:  # noqa: BLE001 - recorded; the fault is taken back below
            f.error = str(e)
            LOG.error("fault %d (%s): %s", f.id, f.spec.kind, e)
        finally:
            if f.state in ("active", "scheduled"):
                try:
                    self._remove(f)
                except Exception as e:  # noqa: BLE001
                    f.error = (f.error + "; " if f.error else "") + f"removing: {e}"
                    LOG.error("fault %d (%s) removal: %s", f.id, f.spec.kind, e)
                f.removed_at_s = self._since(f)
                f.state = "removed" if f.error is None else "failed"

    def _flap(self, f: _Fault, a: LinkFlap) -> None:
        n = 0
        pid = self.netns(a.node)
        while a.flaps is None or n < a.flaps:
            self.dp.set_link_up(a.intf, False, pid)
            f.flap_events.append([self._since(f), None])
            up_at = f.flap_events[-1][0] + a.down_s
            end = f.spec.stop_s
            self._wait_until(f, up_at if end is None else min(up_at, end))
            self.dp.set_link_up(a.intf, True, pid)
            f.flap_events[-1][1] = self._since(f)
            n += 1
            if f.cancel.is_set() or (end is not None and self._since(f) >= end):
                return
            next_down = f.flap_events[-1][1] + a.up_s
            if end is not None and next_down >= end:
                self._wait_until(f, end)
                return
            if self._wait_until(f, next_down):
                return
        self._wait_until(f, f.spec.stop_s)

    def _apply(self, f: _Fault) -> None:
        for a in f.actions:
            pid = self.netns(a.node)
            if isinstance(a, FrameDrop):
                f.drops[a.intf] = self.dp.frame_drop(a.intf, a.fraction, pid)
            elif isinstance(a, RateLimit):
                before = self.dp.htb_class(a.intf, pid)
                rate = int(round(a.rate_mbps * 1e6))
                after = self.dp.set_htb_class(a.intf, dataclasses.replace(before, rate_bps=rate, ceil_bps=rate), pid)
                f.rates[a.intf] = {"nominal_mbps": a.nominal_mbps, "asked_mbps": a.rate_mbps,
                                   "applied_mbps": after.ceil_bps / 1e6, "before": dataclasses.asdict(before)}

    def _remove(self, f: _Fault) -> None:
        errors = []
        for a in f.actions:
            try:
                pid = self.netns(a.node)
                if isinstance(a, FrameDrop) and a.intf in f.drops:
                    d = f.drops[a.intf]
                    d.close()
                    c = d.counters()
                    if a.counter == "rx_errors":     # a drop fault's frames show in no port counter
                        with self.lock:
                            self.rx_errors[a.intf] = self.rx_errors.get(a.intf, 0) + c["dropped_packets"]
                elif isinstance(a, RateLimit) and a.intf in f.rates:
                    before = tcqdisc.HtbClass(**f.rates[a.intf]["before"])
                    after = self.dp.set_htb_class(a.intf, before, pid)
                    f.rates[a.intf]["restored"] = after == before
                elif isinstance(a, LinkFlap):
                    self.dp.set_link_up(a.intf, True, pid)
            except Exception as e:  # noqa: BLE001 - every action is tried
                errors.append(f"{a.intf}: {e}")
        if errors:
            raise SetupError("; ".join(errors))

    # -- counters ------------------------------------------------------------
    def live_rx_errors(self) -> dict[str, int]:
        """Receive errors per interface: what removed corrupt faults counted, plus active ones' counts now."""
        with self.lock:
            out = dict(self.rx_errors)
            for f in self.faults:
                for a in f.actions:
                    if isinstance(a, FrameDrop) and a.counter == "rx_errors" and a.intf in f.drops \
                            and f.drops[a.intf].obj is not None:
                        out[a.intf] = out.get(a.intf, 0) + f.drops[a.intf].counters()["dropped_packets"]
            return out

    def link_speeds(self) -> dict[str, float]:
        """``{interface: Mbit/s}`` of both ports of every link an active degrade fault slowed (the
        speed a port reports for its link)."""
        out: dict[str, float] = {}
        with self.lock:
            for f in self.faults:
                if f.state != "active":
                    continue
                for a in f.actions:
                    if isinstance(a, RateLimit) and a.link_peer is not None:
                        for i in (a.intf, a.link_peer):
                            out[i] = min(out.get(i, a.rate_mbps), a.rate_mbps)
        return out


class DataPlane:
    """The data-plane calls the fault manager makes (a fake replaces it in the unit tests)."""

    @staticmethod
    def frame_drop(intf: str, fraction: float, netns_pid: int | None) -> XdpFrameDrop:
        """Attach the frame-drop program (controller.faultbpf.XdpFrameDrop)."""
        return XdpFrameDrop(intf, fraction, netns_pid)

    @staticmethod
    def htb_class(intf: str, netns_pid: int | None) -> tcqdisc.HtbClass:
        """The port's link-rate class (controller.dataplane.tcqdisc.htb_class)."""
        return tcqdisc.htb_class(intf, netns_pid)

    @staticmethod
    def set_htb_class(intf: str, cls: tcqdisc.HtbClass, netns_pid: int | None) -> tcqdisc.HtbClass:
        """Change it (controller.dataplane.tcqdisc.set_htb_class); the class read back."""
        return tcqdisc.set_htb_class(intf, cls, netns_pid)

    @staticmethod
    def set_link_up(intf: str, up: bool, netns_pid: int | None) -> None:
        """Link up or down (controller.dataplane.hostknobs.set_link_up)."""
        hostknobs.set_link_up(intf, up, netns_pid)
