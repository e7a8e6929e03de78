"""The Datapath seam: Open vSwitch satisfies the protocol, a second datapath is one class plus one
registration, the run's choice comes back from its environment, a crash's leftovers are removed
only where a datapath has them, and the features that need an optional capability (the transmit
losses, the switches' own state) ask the run's datapath and say not applicable where it has none."""
from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest

from common.errors import SetupError
from controller import ovstxbpf
from controller.dataplane import ovsctl
from controller.dataplane.tcqdisc import PortQueue
from controller.datapaths import registry
from controller.datapaths.base import FORWARDING_THREAD, Datapath, TransmitLossCount
from controller.datapaths.ovs import datapath as ovs_datapath
from controller.datapaths.ovs.datapath import KERNEL_LOSES_NOTHING, OvsDatapath
from controller.flowtables import FlowEntry, ofctl_line
from controller.porttree import PortIntent, expected_nodes
from controller.portsetup import PortPlan
from experiments.context import RoundRecord
from experiments.features import restore
from experiments.features.ovstx import OvsTransmit
from experiments.features.restore import IntendedDataPlane, intended_flows
from experiments.plan import build_fabric
from experiments.scenario import validate


class ThrowawayDatapath:
    """A second datapath as a contributor would add one (a class; its registration is the test's)."""
    name = "throwaway"
    routes_via = "maps"
    switches: set[str] = set()
    removed: list[str] = []

    def __init__(self, mode: str):
        self.mode = mode

    @classmethod
    def available(cls):
        return "fast"

    def record(self):
        return {"impl": self.name, "mode": self.mode}

    def switch_class(self):
        return object

    def unconnected(self, switches):
        return []

    def shutdown(self, switches):
        pass

    @classmethod
    def present(cls):
        return set(cls.switches)

    @classmethod
    def remove(cls, names):
        cls.removed += names
        cls.switches -= set(names)

    def forwarders(self):
        return {}

    def trace_hop(self, switch, flow):
        return 1, {}

    @contextlib.contextmanager
    def hold_for_run(self, buffer_bytes, state):
        yield {}

    def transmit_losses(self):          # optional capabilities it does not offer
        return None

    def switch_state(self):
        return None


def test_open_vswitch_is_a_datapath_and_says_what_it_is():
    dp = OvsDatapath("user")
    assert isinstance(dp, Datapath)
    assert dp.record() == {"impl": "ovs", "mode": "user", "datapath_type": "netdev", "routes_via": "openflow13"}
    assert OvsDatapath("kernel").record()["datapath_type"] == "system"
    assert dp == OvsDatapath("user") and dp != OvsDatapath("kernel")
    with pytest.raises(SetupError, match="'bpf'"):
        OvsDatapath("bpf")


def test_the_userspace_datapath_names_its_forwarding_thread(monkeypatch):
    monkeypatch.setattr(ovsctl, "ovs_vswitchd_pid", lambda: 4242)
    assert OvsDatapath("user").forwarders() == {"ovs-vswitchd": 4242, FORWARDING_THREAD: (4242, 4242)}
    assert OvsDatapath("kernel").forwarders() == {"ovs-vswitchd": 4242}


def test_the_kernel_datapath_holds_nothing_for_a_run():
    with OvsDatapath("kernel").hold_for_run(1 << 20, state=None) as rec:
        assert rec == {}


def test_a_second_datapath_is_one_class_plus_one_registration(monkeypatch):
    monkeypatch.setitem(registry.DATAPATHS, ThrowawayDatapath.name, ThrowawayDatapath)
    assert isinstance(ThrowawayDatapath("fast"), Datapath)
    dp = registry.from_environment({"datapath_impl": "throwaway", "datapath": "fast"})
    assert isinstance(dp, ThrowawayDatapath) and dp.mode == "fast"
    # chosen when the ones before it cannot run here
    monkeypatch.setattr(OvsDatapath, "available", classmethod(lambda cls: None))
    assert isinstance(registry.choose(), ThrowawayDatapath)


def test_nothing_can_run_here_is_an_error_naming_what_was_tried(monkeypatch):
    monkeypatch.setattr(OvsDatapath, "available", classmethod(lambda cls: None))
    with pytest.raises(SetupError, match="no datapath can run on this machine .tried ovs"):
        registry.choose()


def test_a_recorded_run_without_an_implementation_was_open_vswitch():
    assert registry.from_environment({"datapath": "kernel"}) == OvsDatapath("kernel")
    with pytest.raises(SetupError, match="datapath_impl 'gone'"):
        registry.from_environment({"datapath_impl": "gone", "datapath": "user"})


def test_leftovers_are_removed_only_where_a_datapath_has_them(monkeypatch):
    deleted = []
    monkeypatch.setattr(ovsctl, "ovs_bridges", lambda: ["s1", "l1", "other"])
    monkeypatch.setattr(ovsctl, "ovs_del_bridges", lambda names: deleted.extend(names))
    monkeypatch.setitem(registry.DATAPATHS, ThrowawayDatapath.name, ThrowawayDatapath)
    monkeypatch.setattr(ThrowawayDatapath, "switches", {"x1"})
    monkeypatch.setattr(ThrowawayDatapath, "removed", [])
    assert registry.present_everywhere() == {"s1", "l1", "other", "x1"}
    assert sorted(registry.remove_everywhere(["s1", "x1", "gone"])) == ["s1", "x1"]
    assert deleted == ["s1"] and ThrowawayDatapath.removed == ["x1"]


# -- the optional capabilities and the features that use them -----------------------------------

def ovs_tx_enter(env: dict) -> OvsTransmit:
    f = OvsTransmit(SimpleNamespace(env=env))
    with contextlib.ExitStack() as stack:
        f.enter(stack, state=None)
    return f


def ovs_tx_round(f: OvsTransmit) -> dict:
    rnd = RoundRecord(index=0, round=None, dir=None)
    assert f.before_round(None, rnd) == {}
    rnd.features[f.name] = f.after_round(None, rnd)
    summary = {"total_drops": 7}
    f.summarize(rnd, summary)
    return summary


@pytest.fixture()
def no_open_vswitch(monkeypatch):
    """Every Open vSwitch command the two features could reach fails the test if called."""
    def called(*a, **kw):
        raise AssertionError("Open vSwitch was asked")
    for name in ("ovs_vswitchd_pid", "ovs_port_qos", "ovs_clear_qos", "ovs_flow_fingerprint",
                 "ovs_flow_differences", "ovs_replace_flows"):
        monkeypatch.setattr(ovsctl, name, called)
    monkeypatch.setattr(ovstxbpf.OvsTxCounts, "load", classmethod(called))


def test_open_vswitch_counts_transmit_losses_only_on_its_userspace_datapath(monkeypatch):
    assert OvsDatapath("kernel").transmit_losses() == TransmitLossCount(reason=KERNEL_LOSES_NOTHING)
    loaded = []
    monkeypatch.setattr(ovsctl, "ovs_vswitchd_pid", lambda: 4242)
    monkeypatch.setattr(ovstxbpf.OvsTxCounts, "load", classmethod(lambda cls, tgid: loaded.append(tgid) or
                                                                   contextlib.nullcontext("counts")))
    losses = OvsDatapath("user").transmit_losses()
    assert losses.reason is None and not loaded
    with losses.load() as counts:
        assert counts == "counts" and loaded == [4242]


def test_the_transmit_count_feature_on_open_vswitch_records_what_it_did(monkeypatch, no_open_vswitch):
    # the kernel datapath: nothing lost outside a qdisc, recorded as before the seam
    env = {"datapath": "kernel"}
    f = ovs_tx_enter(env)
    assert env["ovs_tx"] == {"counted": False, "reason": KERNEL_LOSES_NOTHING}
    assert ovs_tx_round(f)["ovs_tx"] == {"counted": False, "reason": KERNEL_LOSES_NOTHING}
    # the userspace datapath: loaded through the datapath; a refused program is a warning
    monkeypatch.setattr(ovsctl, "ovs_vswitchd_pid", lambda: 4242)

    class Counts:
        def __init__(self):
            self.n = 0

        def read(self):
            self.n += 1
            return {1: {"discarded": 5 * (self.n - 1), "retried": self.n - 1}}
    monkeypatch.setattr(ovstxbpf.OvsTxCounts, "load", classmethod(lambda cls, tgid: contextlib.nullcontext(Counts())))
    env = {"datapath_impl": "ovs", "datapath": "user"}
    f = ovs_tx_enter(env)
    assert env["ovs_tx"] == {"counted": True, "reason": None}
    summary = ovs_tx_round(f)
    assert summary["ovs_tx"]["discarded"] == 5 and summary["ovs_tx"]["retried"] == 1
    assert summary["qdisc_drops"] == 7 and summary["total_drops"] == 11

    def refused(cls, tgid):
        raise SetupError("this kernel has no BTF")
    monkeypatch.setattr(ovstxbpf.OvsTxCounts, "load", classmethod(refused))
    env = {"datapath": "user"}
    ovs_tx_enter(env)
    assert env["ovs_tx"] == {"counted": False, "reason": "this kernel has no BTF"}


def test_a_datapath_without_a_transmit_count_leaves_the_feature_not_applicable(monkeypatch, no_open_vswitch):
    monkeypatch.setitem(registry.DATAPATHS, ThrowawayDatapath.name, ThrowawayDatapath)
    env = {"datapath_impl": "throwaway", "datapath": "fast"}
    f = ovs_tx_enter(env)
    assert env["ovs_tx"]["counted"] is False
    assert env["ovs_tx"]["reason"].startswith("not applicable: the throwaway datapath offers no count")
    summary = ovs_tx_round(f)
    assert summary["ovs_tx"] == env["ovs_tx"] and summary["total_drops"] == 7 and "qdisc_drops" not in summary
    assert f.report(summary) is None


def test_open_vswitch_says_what_overrides_a_switch_ports_qdiscs(monkeypatch):
    rows = {"s1-eth1": {"qos": "c0ffee", "queues": {"0": "beef"}, "ingress_policing_rate": 0, "ingress_policing_burst": 0},
            "s1-eth2": {"qos": None, "queues": {}, "ingress_policing_rate": 0, "ingress_policing_burst": 0},
            "s1-eth3": {"qos": "f00d", "queues": {}, "ingress_policing_rate": 1000, "ingress_policing_burst": 100}}
    monkeypatch.setattr(ovsctl, "ovs_port_qos", lambda names: {n: rows[n] for n in names if n in rows})
    assert OvsDatapath("user").switch_state().port_overrides(sorted(rows)) == {
        "s1-eth1": "an Open vSwitch QoS (c0ffee, 1 queue(s))",
        "s1-eth3": "an Open vSwitch QoS (f00d, 0 queue(s)) and ingress policing at 1000 kbit/s, burst 100 kbit"}

    def gone(bridge):
        raise SetupError("no management socket")
    monkeypatch.setattr(ovsctl, "ovs_flow_fingerprint", gone)
    assert OvsDatapath("kernel").switch_state().flow_fingerprint("s1") is None


def test_a_datapath_without_switch_state_gets_its_qdiscs_checked_and_the_rest_not_applicable(monkeypatch,
                                                                                            no_open_vswitch):
    ports = ("leaf1-eth1", "leaf1-eth2")
    installed = expected_nodes(PortIntent(10_000_000, "pfifo", 50))
    monkeypatch.setattr(restore.tcqdisc, "PortTrees", lambda namespaces: lambda: {p: installed for p in ports})
    ctx = SimpleNamespace(sc=SimpleNamespace(routing=SimpleNamespace(mode="ecmp"), queues=SimpleNamespace(limit_bytes=75_000)))
    q = PortQueue(rate_mbps=10, buffer_packets=50)
    lf = SimpleNamespace(port_plans={None: [PortPlan(p, q, switch_port=True) for p in ports]}, fabric_map=None,
                         datapath=ThrowawayDatapath("fast"))
    f = IntendedDataPlane(ctx)
    rnd = RoundRecord(index=0, round=None, dir=None)
    assert f.before_round(lf, rnd) == {}
    rnd.features[f.name] = f.after_round(lf, rnd)
    summary = {}
    f.summarize(rnd, summary)
    block = summary["fidelity"]["data_plane"]
    assert block["failures"] == [] and block["restored"] == [] and f.failures(summary) == []
    assert block["checked"].startswith("before the round, against the plan: 2 ports' qdiscs and classes (")
    assert "Open vSwitch" not in block["checked"] and "flow tables" not in block["checked"]
    (line,) = block["not_checked"]
    assert "not applicable, the throwaway datapath offers no way to read them back" in line


def test_open_vswitch_compares_and_installs_the_entries_as_ovs_ofctl_lines_rendered_once(monkeypatch):
    fmap = build_fabric(validate({"name": "t", "topology": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2},
                                  "traffic": {"senders": 2}})).to_map()
    flows = intended_flows(fmap, "ecmp")["leaf1"]
    rendered, got = [], []
    monkeypatch.setattr(ovs_datapath, "ofctl_line", lambda e: rendered.append(e) or ofctl_line(e))
    monkeypatch.setattr(ovsctl, "ovs_flow_differences", lambda sw, lines: got.append(("diff", sw, lines)) or [])
    monkeypatch.setattr(ovsctl, "ovs_replace_flows", lambda sw, lines: got.append(("replace", sw, lines)))
    state = OvsDatapath("kernel").switch_state()
    assert state.port_settings == "Open vSwitch QoS and ingress policing on the switch ports"
    lines = [ofctl_line(e) for e in flows]
    assert state.flow_differences("leaf1", flows) == [] and state.flow_differences("leaf1", list(flows)) == []
    state.replace_flows("leaf1", flows)
    assert got == [("diff", "leaf1", lines), ("diff", "leaf1", lines), ("replace", "leaf1", lines)]
    assert rendered == flows                         # once for the switch, however often it is compared
    changed = flows[:-1] + [FlowEntry(1, 0, ())]     # other entries: rendered again
    state.flow_differences("leaf1", changed)
    assert got[-1] == ("diff", "leaf1", lines[:-1] + ["table=1,priority=0 actions=drop"])
    assert len(rendered) == 2 * len(flows)


class FakeSwitchState:
    """A second datapath's switch state: it records what the check hands it."""
    port_settings = "throwaway port maps on the switch ports"

    def __init__(self):
        self.given: dict[str, list] = {}

    def port_overrides(self, ports):
        return {}

    def clear_port_overrides(self, ports):
        raise AssertionError("nothing to clear")

    def flow_fingerprint(self, switch):
        return None                         # compared every round

    def flow_differences(self, switch, flows):
        self.given.setdefault(switch, []).append(flows)
        return []

    def replace_flows(self, switch, flows):
        raise AssertionError("nothing differs")


class StatefulDatapath(ThrowawayDatapath):
    """The throwaway datapath with a switch state of its own (one object, to see what it was given)."""
    name = "stateful"
    state = FakeSwitchState()
    asked = 0

    def switch_state(self):
        type(self).asked += 1
        return self.state


def test_a_second_datapaths_switch_state_gets_the_strategys_entries_and_words_the_check(monkeypatch, no_open_vswitch):
    monkeypatch.setitem(registry.DATAPATHS, StatefulDatapath.name, StatefulDatapath)
    monkeypatch.setattr(StatefulDatapath, "state", FakeSwitchState())
    monkeypatch.setattr(StatefulDatapath, "asked", 0)
    fmap = build_fabric(validate({"name": "t", "topology": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2},
                                  "traffic": {"senders": 2}})).to_map()
    ports = ("leaf1-eth1",)
    installed = expected_nodes(PortIntent(10_000_000, "pfifo", 50))
    monkeypatch.setattr(restore.tcqdisc, "PortTrees", lambda namespaces: lambda: {p: installed for p in ports})
    sc = SimpleNamespace(routing=SimpleNamespace(mode="ecmp"), queues=SimpleNamespace(limit_bytes=75_000))
    ctx = SimpleNamespace(sc=sc, env={"datapath_impl": "stateful", "datapath": "fast"})
    q = PortQueue(rate_mbps=10, buffer_packets=50)
    lf = SimpleNamespace(port_plans={None: [PortPlan(p, q, switch_port=True) for p in ports]}, fabric_map=fmap,
                         datapath=StatefulDatapath("fast"))
    f = IntendedDataPlane(ctx)
    for i in range(2):
        rnd = RoundRecord(index=i, round=None, dir=None)
        assert f.before_round(lf, rnd) == {}
        rnd.features[f.name] = f.after_round(lf, rnd)
    assert StatefulDatapath.asked == 1                 # one switch state for the run
    summary = {}
    f.summarize(rnd, summary)                          # worded by the datapath environment.json records
    block = summary["fidelity"]["data_plane"]
    assert block["failures"] == [] and block["restored"] == [] and block["not_checked"] == []
    # the routing strategy's entries, not any datapath's text, and the same every round
    given = StatefulDatapath.state.given
    expected = intended_flows(fmap, "ecmp")
    assert sorted(given) == sorted(expected) and all(v == [expected[sw]] * 2 for sw, v in given.items())
    assert all(isinstance(e, FlowEntry) for v in given.values() for flows in v for e in flows)
    # the check is worded by the datapath
    assert block["checked"].startswith("before the round, against the plan: 1 ports' qdiscs and classes, throwaway "
                                       "port maps on the switch ports, 4 switches' flow tables (")
    assert "Open vSwitch" not in block["checked"]
    # a results folder from a datapath this build does not have is still analysed, in neutral words
    ctx.env = {"datapath_impl": "gone", "datapath": "fast"}
    summary = {}
    f.summarize(rnd, summary)
    assert ", the gone datapath's own settings on the switch ports, 4 switches' flow tables (" in \
        summary["fidelity"]["data_plane"]["checked"]
