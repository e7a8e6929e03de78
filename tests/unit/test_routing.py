"""Routing policy: every host reachable from every switch, loop-free, ECMP widths."""
import pytest

from controller.routing import compute_routes, follow
from topologies.spineleaf import SpineLeaf


@pytest.mark.parametrize("shape", [dict(), dict(spines=1, leaves=2, hosts_per_leaf=2),
                                   dict(spines=2, leaves=2, hosts_per_leaf=1),
                                   dict(spines=4, leaves=3, hosts_per_leaf=2, uplinks_per_spine=2)])
@pytest.mark.parametrize("mode", ["ecmp", "single"])
def test_loop_free_all_pairs(shape, mode):
    m = SpineLeaf(**shape).build().to_map()
    routes = compute_routes(m, mode)
    for sw in m["switches"]:
        for h in m["hosts"]:
            for choose in (min, max):
                path = follow(m, routes, sw["name"], h["ip"], choose)
                assert path[-1] == h["switch"]
                assert len(path) <= 3


def test_ecmp_width():
    m = SpineLeaf(spines=2, leaves=4, hosts_per_leaf=6, uplinks_per_spine=2).build().to_map()
    r = compute_routes(m)
    assert r["leaf1"]["10.1.0.3"] == [3]                 # local host: its own port
    assert r["leaf1"]["10.2.0.1"] == [7, 8, 9, 10]       # remote: every uplink
    assert r["spine1"]["10.3.0.1"] == [5, 6]             # spine: the parallel links to leaf3
    assert all(len(v) == 1 for v in compute_routes(m, "single")["leaf1"].values())


def test_unknown_mode():
    with pytest.raises(ValueError, match="routing mode"):
        compute_routes(SpineLeaf().build().to_map(), "flood")


def test_follow_detects_loop():
    m = SpineLeaf(spines=1, leaves=2, hosts_per_leaf=1).build().to_map()
    r = compute_routes(m)
    r["spine1"]["10.2.0.1"] = [1]     # back to leaf1
    r["leaf1"]["10.2.0.1"] = [2]      # up to spine1
    with pytest.raises(ValueError, match="loop"):
        follow(m, r, "leaf1", "10.2.0.1")
