"""Each round starts from the intended data plane (controller.porttree, experiments.features.restore):
the comparison of a port's intended queues with fake dumps of what a tamper leaves (an Open
vSwitch QoS, a root replaced by tc, a FIFO's limit changed, a hook added or removed), the flow
entries the switches are compared with (and their ovs-ofctl lines), and the feature's record over
a fake data plane. No root."""
import shutil
import subprocess
from types import SimpleNamespace

import pytest

from common.ecn import EcnProfile
from controller import porttree
from controller.dataplane import ovsctl
from controller.dataplane.tcqdisc import PortQueue
from controller.datapaths.ovs.datapath import OvsDatapath
from controller.porttree import PortIntent, class_node, expected_nodes, qdisc_node, restore_plan
from controller.portsetup import PortPlan
from controller.flowtables import ofctl_line, switch_flows
from experiments.context import RoundRecord
from experiments.features import restore
from experiments.features.registry import FEATURES
from experiments.features.restore import IntendedDataPlane, intended_flows, merge_intents
from experiments.plan import build_fabric
from experiments.scenario import validate

SWITCH = PortIntent(10_000_000, "pfifo", 50)
HOST = PortIntent(10_000_000, "pfifo", 1000)
#: What fabriclab installs on a 10 Mbit/s switch port with a 50-packet buffer, as a dump shows it.
INSTALLED = (class_node("htb", "1:1", "root", 10_000_000, 10_000_000), qdisc_node("htb", "1:", "root"),
             qdisc_node("pfifo", "10:", "1:1", 50))
#: An Open vSwitch linux-htb QoS on the port: its own HTB (root class 1:fffe at max-rate, queue
#: 0 as class 1:1) with the kernel's default 1000-packet FIFOs under the classes.
OVS_QOS = (qdisc_node("htb", "1:", "root"), class_node("htb", "1:fffe", "root", 10_000_000, 10_000_000),
           class_node("htb", "1:1", "1:fffe", 8000, 10_000_000), qdisc_node("pfifo", "0:", "1:1", 1000))


def test_the_installed_tree_is_what_a_plain_port_expects_and_needs_nothing():
    assert expected_nodes(SWITCH) == tuple(sorted(INSTALLED))
    plan = restore_plan(SWITCH, tuple(sorted(INSTALLED)))
    assert not plan.needed and not plan.reinstall and plan.impossible is None


def test_an_open_vswitch_qos_left_on_a_port_is_reinstalled_naming_what_was_found():
    plan = restore_plan(SWITCH, tuple(sorted(OVS_QOS)))
    assert plan.needed and plan.reinstall and not plan.delete_hooks and plan.impossible is None
    assert qdisc_node("pfifo", "0:", "1:1", 1000) in plan.extra
    assert qdisc_node("pfifo", "10:", "1:1", 50) in plan.missing
    line = porttree.describe("leaf1-eth1", plan)
    assert line.startswith("leaf1-eth1: found ") and "pfifo 0: parent 1:1 limit 1000" in line
    assert "instead of " in line and "pfifo 10: parent 1:1 limit 50" in line


@pytest.mark.parametrize("found, what", [
    ((qdisc_node("pfifo", "8001:", "root", 1000),), "a host NIC's root replaced by tc"),
    ((class_node("htb", "1:1", "root", 10_000_000, 10_000_000), qdisc_node("htb", "1:", "root"),
      qdisc_node("pfifo", "10:", "1:1", 1000)), "the FIFO's limit raised in place"),
    ((class_node("htb", "1:1", "root", 100_000_000, 100_000_000), qdisc_node("htb", "1:", "root"),
      qdisc_node("pfifo", "10:", "1:1", 50)), "the class's rate changed"),
    ((qdisc_node("noqueue", "0:", "root"),), "the root deleted"),
    ((), "every qdisc gone"),
])
def test_any_change_to_the_root_its_class_or_its_leaf_reinstalls_it(found, what):
    plan = restore_plan(SWITCH, tuple(sorted(found)))
    assert plan.needed and plan.reinstall and plan.impossible is None, what


def test_a_hook_that_does_not_belong_is_deleted_and_the_tree_kept():
    plan = restore_plan(SWITCH, tuple(sorted(INSTALLED + (porttree.HOOK_NODE,))))
    assert plan.delete_hooks and not plan.reinstall and plan.extra == (porttree.HOOK_NODE,)
    ingress = qdisc_node("ingress", "ffff:", "ffff:fff1")      # Open vSwitch's ingress policing
    assert restore_plan(SWITCH, tuple(sorted(INSTALLED + (ingress,)))).delete_hooks


def test_an_intended_hook_that_is_gone_cannot_be_put_back_from_here():
    hooked = PortIntent(10_000_000, "pfifo", 50, clsact=True)
    assert not restore_plan(hooked, tuple(sorted(INSTALLED + (porttree.HOOK_NODE,)))).needed
    plan = restore_plan(hooked, tuple(sorted(INSTALLED)))
    assert plan.impossible and "BPF hook" in plan.impossible
    # the hook kept and the root replaced: the root is reinstalled, the hook left alone
    plan = restore_plan(hooked, tuple(sorted(OVS_QOS + (porttree.HOOK_NODE,))))
    assert plan.reinstall and not plan.delete_hooks and plan.impossible is None


def test_a_red_round_expects_red_under_the_class_and_a_fifo_there_is_wrong():
    red = PortIntent(10_000_000, "bfifo", 150_000, red=True)
    assert qdisc_node("red", "20:", "1:1") in expected_nodes(red)
    assert restore_plan(red, tuple(sorted(INSTALLED))).reinstall


def test_an_unchecked_port_is_left_alone_whatever_it_shows():
    plan = restore_plan(PortIntent(1, "pfifo", 1, unchecked="PFC's"), tuple(sorted(OVS_QOS)))
    assert not plan.needed and expected_nodes(PortIntent(1, "pfifo", 1, unchecked="x")) == ()


def test_class_rates_are_compared_to_the_byte_per_second_the_kernel_keeps():
    assert class_node("htb", "1:1", "root", 10_000_003, 10_000_003) == class_node("htb", "1:1", "root", 10_000_000,
                                                                                   10_000_000)


def test_a_bad_intent_is_refused():
    with pytest.raises(ValueError):
        PortIntent(10_000_000, "fq_codel", 50)
    with pytest.raises(ValueError):
        PortIntent(0, "pfifo", 50)


def test_the_features_layers_apply_in_order_every_interface_or_one():
    base = {"leaf1-eth1": SWITCH, "h1-eth0": HOST}
    prof = EcnProfile("step", k_bytes=30_000)
    out, red = merge_intents(base, [{"*": {"clsact": True}}, {"leaf1-eth1": {"red": prof}, "nowhere": {"clsact": False}}])
    assert out["leaf1-eth1"].red and out["leaf1-eth1"].clsact and red == {"leaf1-eth1": prof}
    assert out["h1-eth0"].clsact and not out["h1-eth0"].red and "nowhere" not in out
    assert base["leaf1-eth1"] == SWITCH                         # the base is not changed
    with pytest.raises(TypeError):
        merge_intents(base, [{"*": {"colour": "red"}}])


def test_the_registered_features_put_the_data_plane_back_after_ecn_and_before_faults_and_the_watcher():
    order = list(FEATURES)
    assert order.index("ecn") < order.index("data_plane") < min(order.index("faults"), order.index("control_plane"))


# -- flow lines ----------------------------------------------------------------------------------

def small_map() -> dict:
    return build_fabric(validate({"name": "t", "topology": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2}, "traffic": {"senders": 2}})).to_map()


def ofctl_flows(fmap: dict, routing: str = "ecmp") -> dict[str, list[str]]:
    """The intended entries as Open vSwitch's switch state compares them: ovs-ofctl lines."""
    state = OvsDatapath("kernel").switch_state()
    return {sw: state.ofctl_lines(sw, entries) for sw, entries in intended_flows(fmap, routing).items()}


def test_the_intended_flows_are_the_strategys_entries_in_no_datapaths_form():
    fmap = small_map()
    flows = intended_flows(fmap, "ecmp")
    from controller.flowtables import FlowEntry
    from controller.routing import strategy_for
    strategy = strategy_for(fmap, "ecmp")
    assert flows == {s["name"]: strategy.switch_flows(s["name"]) for s in fmap["switches"]}
    assert all(isinstance(e, FlowEntry) for entries in flows.values() for e in entries)


def test_flow_lines_say_what_the_controller_installs():
    flows = ofctl_flows(small_map())
    leaf = flows["leaf1"]
    assert leaf[:3] == ["table=0,priority=0 actions=drop", "table=0,priority=100,dl_type=0x0806 actions=CONTROLLER:65535",
                        "table=1,priority=0 actions=drop"]
    ecmp = [x for x in leaf if "multipath" in x]
    assert ecmp and all(x.startswith("table=0,priority=200,dl_type=0x0800,nw_dst=") for x in ecmp)
    assert all("multipath(symmetric_l3l4+udp," in x and ",hash_threshold,2,0,reg0[0..15]),goto_table:1" in x
               for x in ecmp)
    assert any(x.startswith("table=1,priority=200,reg1=") and "actions=output:" in x for x in leaf)
    # one line per entry, every entry of every switch
    fmap = small_map()
    from controller.routing import compute_routes, hash_basis
    routes = compute_routes(fmap, "ecmp")
    assert {s: len(v) for s, v in flows.items()} == {
        s["name"]: len(switch_flows(routes[s["name"]], hash_basis(i))) for i, s in enumerate(fmap["switches"])}


@pytest.mark.skipif(shutil.which("ovs-ofctl") is None, reason="needs ovs-ofctl (Open vSwitch's tools) to parse lines")
def test_ovs_ofctl_reads_every_line_and_tells_a_changed_entry(tmp_path):
    """ovs-ofctl parses the lines (no switch: two files); a changed output port is a difference."""
    lines = ofctl_flows(small_map())["leaf1"]
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("\n".join(lines) + "\n")
    i = next(i for i, x in enumerate(lines) if "actions=output:" in x)
    changed = lines[:i] + [lines[i].split("actions=")[0] + "actions=output:99"] + lines[i + 1:]
    b.write_text("\n".join(changed) + "\n")
    same = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "diff-flows", str(a), str(a)], capture_output=True, text=True)
    assert same.returncode == 0 and same.stdout == "", same.stderr
    diff = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "diff-flows", str(a), str(b)], capture_output=True, text=True)
    assert diff.returncode == 2 and "output:99" in diff.stdout, (diff.stdout, diff.stderr)


def test_an_action_without_a_line_form_is_refused():
    from controller.flowtables import FlowEntry
    with pytest.raises(TypeError):
        ofctl_line(FlowEntry(0, 1, (), (object(),)))


# -- the feature over a fake data plane ----------------------------------------------------------

class FakeDataPlane:
    """The kernel and Open vSwitch as the feature sees them: trees per port, QoS rows, flow tables."""

    def __init__(self, trees: dict, qos: dict | None = None, flows: dict | None = None, stubborn=()):
        self.trees, self.qos, self.flows, self.stubborn = dict(trees), dict(qos or {}), dict(flows or {}), set(stubborn)
        self.calls = []

    def PortTrees(self, namespaces):                # noqa: N802 (stands in for the class)
        names = [n for ns in namespaces.values() for n in ns]
        return lambda: {n: self.trees.get(n, ()) for n in names}

    def delete_port_qdiscs(self, intf, pid, root=True, hooks=False):
        self.calls.append(("delete", intf, root, hooks))
        if intf in self.stubborn:
            return
        self.trees[intf] = tuple(n for n in self.trees[intf]
                                 if not (hooks and n.startswith(("clsact", "ingress"))) and
                                 (not root or n.startswith(("clsact", "ingress"))))

    def install_queue(self, intf, q):
        self.calls.append(("install", intf))
        if intf not in self.stubborn:
            self.trees[intf] = tuple(sorted(self.trees[intf] + INSTALLED))

    def ovs_port_qos(self, names):
        return {n: self.qos.get(n, {"qos": None, "queues": {}, "ingress_policing_rate": 0, "ingress_policing_burst": 0})
                for n in names}

    def ovs_clear_qos(self, names):
        self.calls.append(("clear qos", tuple(names)))
        for n in names:
            self.qos.pop(n, None)

    def ovs_flow_fingerprint(self, sw):
        return b"tampered" if self.flows.get(sw) else b"as planned"

    def ovs_flow_differences(self, sw, flows):
        self.calls.append(("diff flows", sw))
        return ["-table=1 priority=200,reg0=0,reg1=0x1 actions=output:3"] if self.flows.get(sw) else []

    def ovs_replace_flows(self, sw, flows):
        self.calls.append(("replace flows", sw))
        self.flows[sw] = False


@pytest.fixture()
def fake(monkeypatch):
    def make(**kw):
        dp = FakeDataPlane(**kw)
        for name in ("PortTrees", "delete_port_qdiscs"):
            monkeypatch.setattr(restore.tcqdisc, name, getattr(dp, name))
        for name in ("ovs_port_qos", "ovs_clear_qos", "ovs_flow_differences", "ovs_replace_flows",
                     "ovs_flow_fingerprint"):      # Open vSwitch's commands, behind its datapath's switch_state
            monkeypatch.setattr(ovsctl, name, getattr(dp, name))

        class Ports:
            def __init__(self, pid):
                pass

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def install_queue(self, intf, q):
                dp.install_queue(intf, q)
        monkeypatch.setattr(restore.portsetup, "NamespacePorts", Ports)
        return dp
    return make


def run_check(intent=(), ports=("leaf1-eth1", "leaf1-eth2"), f=None, datapath=OvsDatapath("kernel")):
    fmap = small_map()
    sc = SimpleNamespace(routing=SimpleNamespace(mode="ecmp"), queues=SimpleNamespace(limit_bytes=75_000))
    ctx = SimpleNamespace(sc=sc, env={"datapath_impl": datapath.name, "datapath": datapath.mode})
    q = PortQueue(rate_mbps=10, buffer_packets=50)
    lf = SimpleNamespace(port_plans={None: [PortPlan(p, q, switch_port=True) for p in ports]}, fabric_map=fmap,
                         datapath=datapath)
    f = f or IntendedDataPlane(ctx)
    rnd = RoundRecord(index=2, round=None, dir=None, port_intent=list(intent))
    assert f.before_round(lf, rnd) == {}
    rnd.features[f.name] = f.after_round(lf, rnd)
    summary = {}
    f.summarize(rnd, summary)
    return f, summary


def test_a_clean_data_plane_is_checked_and_left_alone(fake):
    dp = fake(trees={"leaf1-eth1": INSTALLED, "leaf1-eth2": INSTALLED})
    f, summary = run_check()
    block = summary["fidelity"]["data_plane"]
    assert block["restored"] == [] and block["failures"] == []
    assert sorted(dp.calls) == [("diff flows", s) for s in ("leaf1", "leaf2", "spine1", "spine2")]
    assert block["checked"].startswith("before the round, against the plan: 2 ports' qdiscs and classes, Open vSwitch "
                                       "QoS and ingress policing on the switch ports, 4 switches' flow tables (")
    assert f.failures(summary) == [] and f.report(summary) is None
    # the next round: the tables fingerprint as verified, so none is read line by line
    dp.calls.clear()
    dp.flows["spine1"] = True                   # ... unless it changed
    f, summary = run_check(f=f)
    assert dp.calls == [("diff flows", "spine1"), ("replace flows", "spine1"), ("diff flows", "spine1")]
    assert summary["fidelity"]["data_plane"]["restored"][0].startswith("spine1: flow tables differed")


def test_a_tampered_port_qos_and_flow_table_are_put_back_and_said(fake):
    qos = {"leaf1-eth1": {"qos": "c0ffee", "queues": {"0": "beef"}, "ingress_policing_rate": 0, "ingress_policing_burst": 0}}
    dp = fake(trees={"leaf1-eth1": tuple(sorted(OVS_QOS)), "leaf1-eth2": INSTALLED}, qos=qos, flows={"spine2": True})
    f, summary = run_check()
    block = summary["fidelity"]["data_plane"]
    assert block["failures"] == [] and f.failures(summary) == []
    assert ("clear qos", ("leaf1-eth1",)) in dp.calls and ("install", "leaf1-eth1") in dp.calls
    assert ("replace flows", "spine2") in dp.calls and ("install", "leaf1-eth2") not in dp.calls
    text = "\n".join(block["restored"])
    assert "leaf1-eth1: an Open vSwitch QoS (c0ffee, 1 queue(s)) set on the port: cleared" in text
    assert "leaf1-eth1: found " in text and "pfifo 0: parent 1:1 limit 1000" in text and "put back as planned" in text
    assert "spine2: flow tables differed from the controller's" in text and "replaced" in text
    assert f.report(summary).startswith("data plane: put back before the round: ")
    assert f.warnings(summary) and all(w.startswith("data plane put back before the round: ") for w in f.warnings(summary))


def test_a_tamper_that_does_not_go_away_fails_the_round(fake):
    fake(trees={"leaf1-eth1": tuple(sorted(OVS_QOS)), "leaf1-eth2": INSTALLED}, stubborn={"leaf1-eth1"})
    f, summary = run_check()
    (line,) = f.failures(summary)
    assert line.startswith("leaf1-eth1: found ") and "put back, but it reads back different" in line


def test_a_removed_hook_fails_the_round_without_touching_the_port(fake):
    dp = fake(trees={"leaf1-eth1": INSTALLED, "leaf1-eth2": INSTALLED})
    f, summary = run_check(intent=[{"*": {"clsact": True}}], ports=("leaf1-eth1",))
    (line,) = f.failures(summary)
    assert "leaf1-eth1: missing clsact ffff: parent ffff:fff1: cannot be put back" in line
    assert not [c for c in dp.calls if c[0] in ("delete", "install")]


def test_a_data_plane_that_cannot_be_read_fails_the_round_with_the_reason(fake, monkeypatch):
    fake(trees={})

    def refused(names):
        raise restore.SetupError("ovs-vsctl exited 1: database connection failed")
    monkeypatch.setattr(ovsctl, "ovs_port_qos", refused)
    f, summary = run_check()
    (line,) = f.failures(summary)
    assert line == "the data plane could not be checked before the round: ovs-vsctl exited 1: database connection failed"


def test_a_flow_fingerprint_ignores_age_and_counters_and_reads_every_reply_part(tmp_path, monkeypatch):
    """ovs_flow_fingerprint against a fake switch on a Unix socket: two replies (the first marked
    'more'), entries whose age and counters differ between dumps give the same fingerprint; a
    changed priority does not."""
    import socket
    import struct
    import threading

    def entry(priority: int, age_s: int, packets: int) -> bytes:
        body = struct.pack("!HBxIIHHHH4xQQQ", 56, 0, age_s, 7, priority, 0, 0, 0, 0, packets, packets * 1500)
        return body + struct.pack("!HH4x", 1, 4)        # an empty OXM match, padded; no instructions

    def serve(entries_a, entries_b):
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(str(tmp_path / "br0.mgmt"))
        srv.listen(1)

        def run():
            c, _ = srv.accept()
            c.recv(1 << 16)
            for flags, part in ((1, entries_a), (0, entries_b)):
                body = struct.pack("!HH4x", 1, flags) + part
                c.sendall(struct.pack("!BBHI", 4, 19, 8 + len(body), 2) + body)
            c.close()
            srv.close()
        t = threading.Thread(target=run)
        t.start()
        return t

    monkeypatch.setattr(ovsctl, "OVS_RUNDIRS", (str(tmp_path),))
    t = serve(entry(200, 1, 10), entry(0, 1, 3))
    first = ovsctl.ovs_flow_fingerprint("br0")
    t.join()
    (tmp_path / "br0.mgmt").unlink()
    t = serve(entry(0, 9, 500), entry(200, 9, 4000))      # older, busier, other order: the same tables
    assert ovsctl.ovs_flow_fingerprint("br0") == first and len(first) == 2 * 56
    t.join()
    (tmp_path / "br0.mgmt").unlink()
    t = serve(entry(201, 1, 10), entry(0, 1, 3))
    assert ovsctl.ovs_flow_fingerprint("br0") != first
    t.join()
    with pytest.raises(restore.SetupError, match="no management socket"):
        ovsctl.ovs_flow_fingerprint("nobridge")
