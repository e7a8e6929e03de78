"""Every round starts from the intended data plane: before each round's traffic, each switch
port's and host NIC's qdisc tree, and the switches' own state the run's datapath offers
(controller.datapaths.base.Datapath.switch_state; Open vSwitch: QoS and ingress policing on the
switch ports, and every switch's flow tables) are compared with what the scenario asked for (the
queues the fabric installed, with what the features put over them this round, and the
controller's flow tables computed again from the fabric map), never with what is found; whatever
differs is put back (the qdiscs through controller.dataplane, the switches' state through the
datapath) and read back. The round's fidelity block ``data_plane`` records what was wrong and what
was done; a difference that cannot be put back (a BPF hook removed, a tree the kernel will not
take) fails the round (exit 3). On a datapath that offers no switch state, the qdiscs are checked
and the switches' state is listed as not checked (not applicable).

Why: the control-plane watcher (experiments.features.watch) compares each port with its first
reading of the round, so a tree replaced in one round and left in place would be the next
round's baseline, and that round would report a buffer the ports do not have.
"""
from __future__ import annotations

import contextlib
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

from common.errors import SetupError
from common.lazy import lazy_module
from controller import porttree
from controller.datapaths.registry import from_environment
from controller.routing import strategy_for
from experiments.context import RoundRecord
from experiments.features.base import Feature

if TYPE_CHECKING:
    from controller.dataplane import tcqdisc
    from controller.datapaths.base import SwitchState
    from controller.flowtables import FlowEntry
    from controller import portsetup
else:    # the live half, loaded when a live hook first runs (common.lazy): analyze and plot run without it
    tcqdisc = lazy_module("controller.dataplane.tcqdisc")
    portsetup = lazy_module("controller.portsetup")


#: Threads that read the switches' flow tables (Open vSwitch: one ovs-ofctl process each).
FLOW_READERS = 4

#: ``checked``'s words for the switch ports' own settings when the run's datapath is not one this
#: build has (a results folder analysed elsewhere); a datapath's own are SwitchState.port_settings.
UNKNOWN_PORT_SETTINGS = "the {} datapath's own settings on the switch ports"

#: ``not_checked`` on a datapath that offers no switch state (Datapath.switch_state is None).
NO_SWITCH_STATE = ("the switches' own port settings and flow tables: not applicable, the {} datapath offers "
                   "no way to read them back")


def merge_intents(base: dict[str, porttree.PortIntent], layers: list[dict]) -> tuple[dict, dict]:
    """The round's intent per interface: ``base`` (the fabric's queues) with each layer of
    :meth:`experiments.features.base.Feature.port_intent` applied in order (``"*"`` applies to
    every interface; an interface not in ``base`` is ignored: the fabric gave it no queue).
    Returns ``(intents, red)``: ``{intf: PortIntent}`` and ``{intf: EcnProfile}`` of the ports
    where RED replaces the FIFO.

    Raises:
        TypeError: a layer names a field PortIntent does not have.
    """
    out, red = dict(base), {}
    for layer in layers:
        for intf, fields in layer.items():
            for name in (out if intf == "*" else [intf] if intf in out else []):
                f = dict(fields)
                if f.get("red"):
                    red[name] = f["red"]
                    f["red"] = True
                out[name] = replace(out[name], **f)
    return out, red


def intended_flows(fabric_map: dict, routing: str) -> dict[str, list[FlowEntry]]:
    """``{switch: [FlowEntry, ...]}``: every switch's flow entries as controller.app installs them,
    in install order (the ``switch_flows`` of routing strategy ``routing``, controller.routing),
    in no datapath's form: the run's SwitchState renders them in its own."""
    strategy = strategy_for(fabric_map, routing)
    return {s["name"]: strategy.switch_flows(s["name"]) for s in fabric_map["switches"]}


class IntendedDataPlane(Feature):
    """Puts every round's data plane back to the plan before its traffic (module docstring)."""
    name = "data_plane"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.flows: dict[str, list[FlowEntry]] | None = None
        #: the run's datapath's switch state, asked for once (None: the datapath offers none)
        self.switches: SwitchState | None = None
        self._asked = False
        self.trees: tcqdisc.PortTrees | None = None
        #: switch -> fingerprint of its flow tables when last found equal to the plan
        self.verified: dict[str, bytes | None] = {}
        self._record: dict | None = None

    def enter(self, stack: contextlib.ExitStack, state) -> None:
        """Close the tree reader's sockets when the run ends."""
        stack.callback(self._close)

    def _close(self) -> None:
        if self.trees is not None:
            self.trees.close()
            self.trees = None

    def before_round(self, lf, rnd: RoundRecord) -> dict:
        """Compare, put back, read back; the record goes into this round's fidelity block."""
        t0 = time.perf_counter()
        restored, failures, unchecked = [], [], set()
        namespaces = {pid: [p.ifname for p in plans] for pid, plans in lf.port_plans.items()}
        queues = {p.ifname: (pid, p.queue) for pid, plans in lf.port_plans.items() for p in plans}
        switch_ports = [p.ifname for p in lf.port_plans.get(None, [])]
        if not self._asked:      # one per run: it may keep what it renders from the intended flows
            self.switches, self._asked = lf.datapath.switch_state(), True
        switches = self.switches
        if switches is None:
            unchecked.add(NO_SWITCH_STATE.format(lf.datapath.name))
        try:
            if self.trees is None:
                self.trees = tcqdisc.PortTrees(namespaces)
            before = self._port_settings(switches, switch_ports, restored, failures) if switches is not None else {}
            self._trees(namespaces, queues, rnd, restored, failures, unchecked, before)
            if switches is not None:
                self._flow_tables(switches, lf, restored, failures)
        except SetupError as e:
            failures.append(f"the data plane could not be checked before the round: {e}")
        self._record = {"restored": restored, "failures": failures, "unchecked": sorted(unchecked),
                        "ports": len(queues), "switches": len(self.flows or {}) if switches is not None else None,
                        "check_ms": round((time.perf_counter() - t0) * 1e3, 1)}
        return {}

    def _port_settings(self, switches: SwitchState, ports: list[str], restored: list, failures: list) -> dict:
        """No setting of the datapath's own over any switch port's qdiscs (Open vSwitch: no QoS and
        no ingress policing; fabriclab sets neither). Returns the ports' trees as read before
        clearing (Open vSwitch takes its qdiscs away with the QoS, so what the port held is
        described from this reading), or {} when nothing was cleared."""
        bad = switches.port_overrides(ports)
        if not bad:
            return {}
        before = {p: t for p, t in self.trees().items() if p in bad}
        switches.clear_port_overrides(sorted(bad))
        after = switches.port_overrides(sorted(bad))
        for p, what in sorted(bad.items()):
            if p in after:
                failures.append(f"{p}: {what} set on the port could not be cleared")
            else:
                restored.append(f"{p}: {what} set on the port: cleared")
        return before

    def _trees(self, namespaces: dict, queues: dict, rnd: RoundRecord, restored: list, failures: list,
               unchecked: set, before: dict) -> None:
        """Every port's qdiscs and classes against the intent; reinstalled where they differ
        (``before``: trees read before the datapath's port settings were cleared, Open vSwitch's QoS,
        which describe those ports)."""
        base = {intf: porttree.PortIntent(int(round(q.rate_mbps * 1e6)), q.fifo_kind, q.fifo_limit)
                if q is not None else porttree.PortIntent(1, "pfifo", 1, unchecked="no queue of the fabric's own")
                for intf, (_, q) in queues.items()}
        intents, red = merge_intents(base, rnd.port_intent)
        unchecked.update(i.unchecked for i in intents.values() if i.unchecked)
        found = self.trees()
        plans = {intf: porttree.restore_plan(intents[intf], found.get(intf, ())) for intf in intents}
        done = {}
        for intf, plan in sorted(plans.items()):
            if not plan.needed:
                continue
            first = porttree.restore_plan(intents[intf], before[intf]) if intf in before else plan
            line = porttree.describe(intf, first if first.needed else plan)
            if plan.impossible:
                failures.append(f"{line}: cannot be put back: {plan.impossible}")
                continue
            pid, q = queues[intf]
            try:
                tcqdisc.delete_port_qdiscs(intf, pid, root=plan.reinstall, hooks=plan.delete_hooks)
                if plan.reinstall:
                    with portsetup.NamespacePorts(pid) as ns:
                        ns.install_queue(intf, q)
                    if intf in red:
                        tcqdisc.install_red(intf, q.rate_mbps * 1e6, self.ctx.sc.queues.limit_bytes, red[intf])
            except SetupError as e:
                failures.append(f"{line}: putting it back failed: {e}")
                continue
            done[intf] = line
        if not done:
            return
        again = self.trees()
        for intf, line in done.items():
            plan = porttree.restore_plan(intents[intf], again.get(intf, ()))
            if plan.needed:
                failures.append(f"{line}: put back, but it reads back different: {porttree.describe(intf, plan)}")
            else:
                restored.append(f"{line}: put back as planned")

    def _flow_tables(self, switches: SwitchState, lf, restored: list, failures: list) -> None:
        """Every switch's flow tables against the controller's entries (:func:`intended_flows`,
        computed once; the datapath renders them in its own form). A switch whose tables fingerprint
        (``switches.flow_fingerprint``; Open vSwitch: controller.dataplane.ovsctl.ovs_flow_fingerprint,
        about a millisecond) as they did when last verified against the plan is not read again; any
        other is compared entry by entry (Open vSwitch: ovs-ofctl diff-flows) and, if it differs,
        replaced (replace-flows) and compared again."""
        if self.flows is None:
            self.flows = intended_flows(lf.fabric_map, self.ctx.sc.routing.mode)
        with ThreadPoolExecutor(FLOW_READERS) as pool:
            prints = dict(zip(self.flows, pool.map(switches.flow_fingerprint, self.flows)))
            todo = [sw for sw in self.flows if prints[sw] is None or self.verified.get(sw) != prints[sw]]
            diffs = dict(zip(todo, pool.map(lambda sw: switches.flow_differences(sw, self.flows[sw]), todo)))
        for sw, diff in sorted(diffs.items()):
            if not diff:
                self.verified[sw] = prints[sw]
                continue
            self.verified.pop(sw, None)
            shown = "; ".join(diff[:4]) + (f"; ... ({len(diff)} lines)" if len(diff) > 4 else "")
            try:
                switches.replace_flows(sw, self.flows[sw])
                left = switches.flow_differences(sw, self.flows[sw])
            except SetupError as e:
                failures.append(f"{sw}: flow tables differed ({shown}); putting them back failed: {e}")
                continue
            if left:
                failures.append(f"{sw}: flow tables differed ({shown}) and still do after replacing them: "
                                f"{'; '.join(left[:4])}")
            else:
                self.verified[sw] = switches.flow_fingerprint(sw)
                restored.append(f"{sw}: flow tables differed from the controller's ({shown}): replaced")

    def after_round(self, lf, rnd: RoundRecord) -> dict | None:
        """What the check before the round found and did."""
        rec, self._record = self._record, None
        return rec

    def summarize(self, rnd: RoundRecord, summary: dict) -> None:
        """``fidelity.data_plane``: what was checked, what was put back, what could not be."""
        rec = rnd.features.get(self.name)
        if rec is None:
            return
        switches = ("" if rec["switches"] is None else      # None: the datapath offers no switch state
                    f", {self._port_settings_checked()}, {rec['switches']} switches' flow tables")
        summary.setdefault("fidelity", {})["data_plane"] = {
            "checked": (f"before the round, against the plan: {rec['ports']} ports' qdiscs and classes{switches} "
                        f"({rec['check_ms']} ms)"),
            "not_checked": rec["unchecked"], "restored": rec["restored"], "failures": rec["failures"]}

    def _port_settings_checked(self) -> str:
        """The switch port settings the run's datapath checks, in its words (SwitchState.port_settings;
        Open vSwitch: ``Open vSwitch QoS and ingress policing on the switch ports``), from the
        datapath that environment.json records, so that ``analyze`` words a round as the run did;
        :data:`UNKNOWN_PORT_SETTINGS` for a datapath this build does not have."""
        try:
            state = from_environment(self.ctx.env).switch_state()
        except (SetupError, KeyError):
            state = None
        if state is None:
            return UNKNOWN_PORT_SETTINGS.format(self.ctx.env.get("datapath_impl", "run's"))
        return state.port_settings

    def failures(self, summary: dict) -> list[str]:
        """What differed and could not be put back before the round."""
        return list(((summary.get("fidelity") or {}).get("data_plane") or {}).get("failures", []))

    def warnings(self, summary: dict) -> list[str]:
        """One line per thing put back before the round (the round then ran on the plan)."""
        dp = (summary.get("fidelity") or {}).get("data_plane") or {}
        return [f"data plane put back before the round: {line}" for line in dp.get("restored", [])]

    def report(self, summary: dict) -> str | None:
        """``data plane: put back before the round: ...`` when something was."""
        dp = (summary.get("fidelity") or {}).get("data_plane") or {}
        if not dp.get("restored"):
            return None
        return f"data plane: put back before the round: {'; '.join(dp['restored'])}"
