"""Spine-Leaf builder: counts, oversubscription, ports, names (case C1)."""
from fractions import Fraction

import pytest

from common.errors import ScenarioError
from topologies.base import MAX_IFNAME_LEN, Fabric, LinkSpec, Node
from topologies.spineleaf import SpineLeaf


@pytest.mark.parametrize("spines,leaves,hpl,up", [(2, 4, 6, 1), (2, 2, 1, 1), (4, 8, 16, 2), (1, 3, 5, 1)])
def test_counts(spines, leaves, hpl, up):
    f = SpineLeaf(spines=spines, leaves=leaves, hosts_per_leaf=hpl, uplinks_per_spine=up).build()
    assert len(f.switches) == spines + leaves
    assert len(f.hosts) == leaves * hpl
    assert len(f.links) == leaves * hpl + leaves * spines * up
    for leaf in [n for n in f.switches if n.layer == "leaf"]:
        assert len([l for l in f.links if leaf.name in (l.a, l.b)]) == hpl + spines * up
    for spine in [n for n in f.switches if n.layer == "spine"]:
        assert len([l for l in f.links if spine.name in (l.a, l.b)]) == leaves * up


@pytest.mark.parametrize("kw,ratio", [
    ({}, Fraction(3)),                                                   # textbook 2x4x6 at 10 Mbit/s
    ({"hosts_per_leaf": 2}, Fraction(1)),
    ({"hosts_per_leaf": 8, "spines": 4}, Fraction(2)),
    ({"host_rate_mbps": 10, "uplink_rate_mbps": 40}, Fraction(3, 4)),
    ({"hosts_per_leaf": 6, "uplinks_per_spine": 3}, Fraction(1)),
    ({"host_rate_mbps": 25, "uplink_rate_mbps": 100, "hosts_per_leaf": 48, "spines": 4}, Fraction(3)),
])
def test_oversubscription(kw, ratio):
    sl = SpineLeaf(**kw)
    assert sl.oversubscription == ratio
    assert sl.build().params["oversubscription"] == float(ratio)


def test_default_is_textbook():
    sl = SpineLeaf()
    assert (sl.spines, sl.leaves, sl.hosts_per_leaf, sl.host_rate_mbps, sl.uplink_rate_mbps) == (2, 4, 6, 10, 10)
    assert sl.oversubscription == 3


def test_positions_derive_names_dpids_macs_ips():
    f = SpineLeaf().build()
    h = f.node("h8")                     # leaf 2, second host
    assert (h.leaf, h.ip, h.mac) == ("leaf2", "10.2.0.2", "02:00:00:00:02:02")
    assert f.node("leaf3").dpid == (2 << 16) | 3
    assert f.node("spine2").dpid == (1 << 16) | 2
    assert len({n.dpid for n in f.switches}) == 6
    assert len({n.ip for n in f.hosts}) == len({n.mac for n in f.hosts}) == 24


def test_leaf_ports_hosts_then_uplinks():
    f = SpineLeaf(spines=2, leaves=4, hosts_per_leaf=6, uplinks_per_spine=2).build()
    assert f.port_toward("leaf1", "h1") == [1]
    assert f.port_toward("leaf1", "spine1") == [7, 8]
    assert f.port_toward("leaf1", "spine2") == [9, 10]
    assert f.port_toward("spine2", "leaf3") == [5, 6]


def test_interface_names_fit_for_largest_fabric():
    """Case C1: every name of the largest accepted Spine-Leaf fits in 15 characters."""
    f = SpineLeaf(spines=64, leaves=250, hosts_per_leaf=250, uplinks_per_spine=8).build()
    longest = max(f.interface_names(), key=len)
    assert len(longest) <= MAX_IFNAME_LEN, longest
    assert len(longest) == 15  # spine64-eth2000: the bound is reached, not just approached


def test_too_long_name_is_refused():
    f = Fabric(kind="x", params={}, nodes=[Node("averyveryverylongswitch", "leaf", dpid=1), Node("h1", "host")],
               links=[LinkSpec("averyveryverylongswitch", 1, "h1", 0, 10)])
    with pytest.raises(ScenarioError, match="averyveryverylongswitch-eth1"):
        f.check_names()


@pytest.mark.parametrize("kw,key", [({"spines": 0}, "topology.spines"), ({"leaves": 251}, "topology.leaves"),
                                    ({"host_rate_mbps": 0}, "topology.host_rate_mbps"),
                                    ({"hosts_per_leaf": True}, "topology.hosts_per_leaf")])
def test_bad_parameters_name_the_key(kw, key):
    with pytest.raises(ScenarioError) as e:
        SpineLeaf(**kw)
    assert e.value.key == key


def test_up_down_neighbours_and_oversubscription_per_leaf():
    fab = SpineLeaf(spines=2, leaves=3, hosts_per_leaf=4, uplinks_per_spine=2).build()
    assert fab.up_neighbours("leaf2") == ["spine1", "spine2"]           # parallel links listed once
    assert fab.down_neighbours("leaf2") == ["h5", "h6", "h7", "h8"]
    assert fab.down_neighbours("spine1") == ["leaf1", "leaf2", "leaf3"] and fab.up_neighbours("spine1") == []
    assert fab.up_neighbours("h5") == ["leaf2"]
    over = fab.oversubscription_per_switch()
    assert set(over) == {"leaf1", "leaf2", "leaf3"} and over["leaf1"] == 1   # 4 x 10 down, 2 x 2 x 10 up
    assert SpineLeaf().build().oversubscription_per_switch()["leaf4"] == 3
