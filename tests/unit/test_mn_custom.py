"""`mn --custom topologies/mn_custom.py --topo ...` builds the same fabrics as the runner."""
import pytest

from topologies import mn_custom


def test_specs_match_builders():
    ft = mn_custom.build("fattree,4")
    assert (len(ft.hosts), len(ft.switches), ft.kind) == (16, 20, "fattree")
    sl = mn_custom.build("spineleaf,2,2,3")
    assert (len(sl.hosts), len(sl.switches), sl.kind) == (6, 4, "spineleaf")
    assert mn_custom.build("spineleaf,2,4,6,10,10").params["oversubscription"] == 3.0


def test_mininet_topos_have_the_fabric_nodes():
    pytest.importorskip("mininet.topo")
    t = mn_custom.topos["fattree"](4)
    assert len(t.hosts()) == 16 and len(t.switches()) == 20 and len(t.links()) == 48
    assert t.nodeInfo("p0e1")["dpid"] == f"{(5 << 16) | 1:016x}"


def test_unknown_topology():
    with pytest.raises(ValueError, match="unknown topology"):
        mn_custom.build("torus,3")
