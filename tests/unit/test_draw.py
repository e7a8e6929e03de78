"""Topology drawing and per-switch oversubscription (no root)."""
from fractions import Fraction

from experiments.draw import draw
from topologies.base import oversubscription_per_switch
from topologies.fattree import FatTree
from topologies.spineleaf import SpineLeaf


def test_oversubscription_per_switch():
    m = SpineLeaf(spines=2, leaves=4, hosts_per_leaf=6).build().to_map()
    assert set(oversubscription_per_switch(m).values()) == {Fraction(3)}
    m = SpineLeaf(spines=2, leaves=2, hosts_per_leaf=8, uplink_rate_mbps=10, uplinks_per_spine=2).build().to_map()
    assert oversubscription_per_switch(m)["leaf1"] == Fraction(2)
    m = FatTree(k=4, host_rate_mbps=10, edge_agg_rate_mbps=10, agg_core_rate_mbps=5).build().to_map()
    over = oversubscription_per_switch(m)
    assert over["p0e1"] == 1 and over["p0a1"] == 2 and "c1" not in over


def test_draw_writes_png(tmp_path):
    for name, fab in (("sl", SpineLeaf().build()), ("ft", FatTree(k=8).build())):
        p = draw(fab.to_map(), tmp_path / f"{name}.png")
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000


def test_end_to_end_oversubscription():
    from experiments.draw import end_to_end_oversubscription
    assert end_to_end_oversubscription(SpineLeaf().build().to_map()) == 3
    tapered = FatTree(k=4, host_rate_mbps=10, edge_agg_rate_mbps=5, agg_core_rate_mbps=2.5).build().to_map()
    assert end_to_end_oversubscription(tapered) == 4
    assert end_to_end_oversubscription(FatTree(k=8).build().to_map()) == 1
