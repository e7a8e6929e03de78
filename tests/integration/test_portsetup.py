"""Port set-up in bulk (controller.portsetup) and the bulk link deletion, on real veths: one end in
the root namespace, the other in a throwaway namespace, as Mininet wires a switch to a host. The
result is read back with the tools a user would use (``ethtool -k``, ``tc``), not with the code
under test."""
import json
import subprocess

import pytest

from common.errors import SetupError
from controller import portsetup
from controller.dataplane import hostknobs, netlink, tcqdisc
from controller.dataplane.hostknobs import offload_state
from controller.dataplane.tcqdisc import PortQueue

from .conftest import own_netns

NAMES = ("fltps0", "fltps1", "fltps2", "fltps3")


@pytest.fixture
def netns_pair():
    """(pid of a process in a new network namespace, root-side name, namespace-side name); a
    second veth pair fltps2/fltps3 stays in the root namespace."""
    holder = subprocess.Popen(["unshare", "-n", "sleep", "120"])
    try:
        own_netns(holder)
        subprocess.run(["ip", "link", "add", "fltps0", "type", "veth", "peer", "name", "fltps1"], check=True)
        subprocess.run(["ip", "link", "set", "fltps1", "netns", str(holder.pid)], check=True)
        subprocess.run(["ip", "link", "add", "fltps2", "type", "veth", "peer", "name", "fltps3"], check=True)
        yield holder.pid, "fltps0", "fltps1"
    finally:
        # the links first (peers go at once); a namespace ends asynchronously
        hostknobs.delete_root_links(list(NAMES))
        holder.kill()
        holder.wait()


def _qdiscs(ifname, pid=None):
    argv = ["tc", "-j", "qdisc", "show", "dev", ifname]
    if pid is not None:
        argv = ["nsenter", "-t", str(pid), "-n", "--"] + argv
    return {(q["kind"], q.get("parent", "root")) for q in json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)}


def test_ports_in_two_namespaces_get_offloads_off_and_their_queue_read_back_by_ethtool_and_tc(netns_pair):
    pid, root_end, ns_end = netns_pair
    q = PortQueue(10, buffer_packets=50)
    portsetup.configure_ports({None: [portsetup.PortPlan(root_end, q, switch_port=True)],
                               pid: [portsetup.PortPlan(ns_end, PortQueue(10, buffer_bytes=30000))]})
    assert offload_state(root_end) == dict.fromkeys(("rx", "tx", "tso", "gso", "gro"), False)
    assert offload_state(ns_end, pid) == dict.fromkeys(("rx", "tx", "tso", "gso", "gro"), False)
    assert hostknobs.gso_max_segs(root_end) == 1 and hostknobs.gso_max_segs(ns_end, pid) == 1
    assert {("htb", "root"), ("pfifo", "1:1")} <= _qdiscs(root_end)
    assert {("htb", "root"), ("bfifo", "1:1")} <= _qdiscs(ns_end, pid)
    assert open(f"/proc/sys/net/ipv6/conf/{root_end}/disable_ipv6").read().strip() == "1"
    # every TSO variant this kernel has is off, whatever ethtool's short names cover
    out = subprocess.run(["ethtool", "-k", root_end], capture_output=True, text=True, check=True).stdout
    on = [line.split(":")[0].strip() for line in out.splitlines()
          if "segmentation" in line and "tcp" in line and line.split(":")[1].strip().startswith("on")]
    assert on == []


def test_a_missing_interface_is_named_and_nothing_else_is_touched(netns_pair):
    with pytest.raises(SetupError, match="no interface 'fltnope'"):
        portsetup.configure_ports({None: [portsetup.PortPlan("fltnope", PortQueue(10, buffer_packets=5))]})


def test_bulk_delete_removes_exactly_the_named_interfaces_and_their_peers(netns_pair):
    pid, root_end, ns_end = netns_pair
    deleted = hostknobs.delete_root_links([root_end, "fltps2", "fltnothere"])
    assert deleted == sorted([root_end, "fltps2"])
    left = hostknobs.root_links()
    assert root_end not in left and "fltps2" not in left and "fltps3" not in left   # peers went with them
    ns_links = subprocess.run(["nsenter", "-t", str(pid), "-n", "ip", "-o", "link"], capture_output=True, text=True).stdout
    assert ns_end not in ns_links
    assert hostknobs.delete_root_links([root_end]) == []


def test_bulk_delete_leaves_an_interface_that_is_not_named_even_in_the_same_group(netns_pair):
    # an interface someone else put in the first group fabriclab would try: not deleted
    subprocess.run(["ip", "link", "set", "fltps2", "group", str(hostknobs.LINK_GROUP_BASE)], check=True)
    try:
        assert hostknobs.delete_root_links([netns_pair[1]]) == [netns_pair[1]]
        assert "fltps2" in hostknobs.root_links()
    finally:
        subprocess.run(["ip", "link", "set", "fltps2", "group", "0"], capture_output=True)


def test_port_trees_read_what_was_installed_as_the_plan_says_and_a_tamper_as_it_is(netns_pair):
    """controller.dataplane.tcqdisc.PortTrees (raw netlink, one socket per namespace) reads the queues
    portsetup installed exactly as controller.porttree expects them (a 64-bit class rate too),
    and a root replaced by tc as what it is; deleting it and installing again puts it back."""
    from controller import porttree
    pid, root_end, ns_end = netns_pair
    fast, slow = PortQueue(40_000, buffer_bytes=150_000), PortQueue(10, buffer_packets=50)
    portsetup.configure_ports({None: [portsetup.PortPlan(root_end, fast, switch_port=True)],
                               pid: [portsetup.PortPlan(ns_end, slow)]})
    intents = {root_end: porttree.PortIntent(40_000_000_000, "bfifo", 150_000),
               ns_end: porttree.PortIntent(10_000_000, "pfifo", 50)}
    trees = tcqdisc.PortTrees({None: [root_end, "flnothere"], pid: [ns_end]})
    try:
        found = trees()
        assert found["flnothere"] == ()
        for intf, intent in intents.items():
            assert found[intf] == porttree.expected_nodes(intent), (intf, found[intf])
        netlink.run(["tc", "qdisc", "replace", "dev", ns_end, "root", "pfifo", "limit", "1000"], pid)
        plan = porttree.restore_plan(intents[ns_end], trees()[ns_end])
        assert plan.reinstall and any(n.startswith("pfifo ") and n.endswith("parent root limit 1000") for n in plan.extra)
        tcqdisc.delete_port_qdiscs(ns_end, pid)
        with portsetup.NamespacePorts(pid) as ns:
            ns.install_queue(ns_end, slow)
        assert not porttree.restore_plan(intents[ns_end], trees()[ns_end]).needed
    finally:
        trees.close()
