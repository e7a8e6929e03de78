"""Fat-Tree builder: counts, degrees, equal-cost paths, names (case C1), loop-free routing."""
import networkx as nx
import pytest

from common.errors import ScenarioError
from controller.routing import compute_routes, follow, switch_graph
from topologies.fattree import FatTree
from topologies.base import MAX_IFNAME_LEN

KS = [4, 6, 8, 10, 12, 14, 16]


@pytest.mark.parametrize("k", KS)
def test_counts(k):
    f = FatTree(k=k).build()
    assert len(f.hosts) == k ** 3 // 4
    assert len(f.switches) == 5 * k ** 2 // 4
    assert len(f.links) == 3 * k ** 3 // 4
    layers = {}
    for n in f.switches:
        layers[n.layer] = layers.get(n.layer, 0) + 1
    assert layers == {"core": (k // 2) ** 2, "aggregation": k * k // 2, "edge": k * k // 2}


@pytest.mark.parametrize("k", [4, 8, 16])
def test_every_switch_uses_k_ports(k):
    f = FatTree(k=k).build()
    degree = {n.name: 0 for n in f.switches}
    for l in f.links:
        for end in (l.a, l.b):
            if end in degree:
                degree[end] += 1
    assert set(degree.values()) == {k}


@pytest.mark.parametrize("k", [4, 6, 8])
def test_equal_cost_paths(k):
    """1 path under the same edge, k/2 within a pod, (k/2)^2 across pods."""
    ft = FatTree(k=k)
    g = nx.Graph(switch_graph(ft.build().to_map()))
    def n_paths(a, b):
        return sum(1 for _ in nx.all_shortest_paths(g, a, b)) if a != b else 1
    assert n_paths(ft.edge_name(0, 0), ft.edge_name(0, 0)) == 1
    assert n_paths(ft.edge_name(0, 0), ft.edge_name(0, 1)) == k // 2
    assert n_paths(ft.edge_name(0, 0), ft.edge_name(k - 1, 1)) == (k // 2) ** 2


def test_interface_names_fit_at_k16():
    f = FatTree(k=16).build()
    longest = max(f.interface_names(), key=len)
    assert len(longest) <= MAX_IFNAME_LEN, longest


def test_positions():
    ft = FatTree(k=4)
    f = ft.build()
    h = f.node("h6")                       # pod 1, edge 0, host 1
    assert (h.leaf, h.ip, h.mac) == ("p1e1", "10.1.0.3", "02:00:00:01:00:01")
    assert f.port_toward("p1e1", "p1a2") == [4]
    assert f.port_toward("p1a2", "c3") == [3]        # aggregation 1 of each pod reaches cores 2..3 (0-based)
    assert f.port_toward("c3", "p1a2") == [2]        # core port p+1 faces pod p
    assert f.params["oversubscription"] == 1.0


def test_routing_is_loop_free_k4():
    m = FatTree(k=4).build().to_map()
    routes = compute_routes(m)
    for sw in m["switches"]:
        for h in m["hosts"]:
            for choose in (min, max):
                path = follow(m, routes, sw["name"], h["ip"], choose)
                assert path[-1] == h["switch"] and len(path) <= 5
    assert len(routes["p0e1"]["10.3.1.2"]) == 2      # up: both aggregation switches
    assert len(routes["p0a1"]["10.3.1.2"]) == 2      # up: both of its cores
    assert len(routes["c1"]["10.3.1.2"]) == 1        # down: the one port to pod 3


@pytest.mark.parametrize("k", [3, 2, 18, True])
def test_bad_k(k):
    with pytest.raises(ScenarioError) as e:
        FatTree(k=k)
    assert e.value.key == "topology.k"


@pytest.mark.parametrize("k", [4, 8, 16])
def test_layer_degrees_up_and_down(k):
    """Edge: k/2 hosts down, k/2 aggregation up; aggregation: k/2 edge down, k/2 core up;
    core: k aggregation switches down (one per pod), nothing up; host: its edge switch."""
    fab = FatTree(k=k).build()
    h = k // 2
    want = {"edge": (h, h), "aggregation": (h, h), "core": (0, k), "host": (1, 0)}
    for n in fab.nodes:
        assert (len(fab.up_neighbours(n.name)), len(fab.down_neighbours(n.name))) == want[n.layer], n.name
    assert fab.up_neighbours("p0e1") == [f"p0a{i}" for i in range(1, h + 1)]
    assert all(fab.node(c).layer == "core" for c in fab.up_neighbours("p1a1"))
    assert len({a.split("a")[0] for a in fab.down_neighbours("c1")}) == k      # one aggregation switch per pod
    assert set(fab.oversubscription_per_switch().values()) == {1}
