"""The Dragonfly builder (Kim et al., ISCA 2008): closed-form counts, one global link per pair of
groups, at most h per router, minimal routes (at most one global link, three router hops) that the
controller's shortest-path routing gives, and the scenario, `mn --custom` and drawing paths."""
import itertools
from collections import Counter

import pytest

from common.errors import ScenarioError
from controller.routing import compute_routes, follow
from experiments import draw
from experiments.scenario import validate
from topologies import TOPOLOGIES, Dragonfly
from topologies.mn_custom import build as mn_build

SHAPES = [(2, 1, 1, 1), (3, 2, 2, 1), (5, 4, 2, 2), (9, 4, 2, 2), (4, 3, 1, 2), (17, 4, 1, 4)]


def group_of(name: str) -> str:
    return name.split("r")[0]


@pytest.mark.parametrize("g, a, p, h", SHAPES)
def test_counts_match_the_closed_forms(g, a, p, h):
    d = Dragonfly(groups=g, routers_per_group=a, hosts_per_router=p, global_links_per_router=h)
    f = d.build()
    routers = [n for n in f.switches]
    assert len(routers) == d.n_routers == g * a
    assert len(f.hosts) == d.n_hosts == g * a * p
    local = [l for l in f.links if not l.b.startswith("h") and group_of(l.a) == group_of(l.b)]
    glob = [l for l in f.links if not l.b.startswith("h") and group_of(l.a) != group_of(l.b)]
    assert len(local) == d.n_local_links == g * a * (a - 1) // 2
    assert len(glob) == d.n_global_links == g * (g - 1) // 2
    assert len(f.links) == g * a * p + len(local) + len(glob)
    # every pair of groups joined exactly once; no router carries more than h global links
    assert Counter(frozenset((group_of(l.a), group_of(l.b))) for l in glob) == {
        frozenset((f"g{i + 1}", f"g{j + 1}")): 1 for i, j in itertools.combinations(range(g), 2)}
    per_router = Counter([l.a for l in glob] + [l.b for l in glob])
    assert max(per_router.values()) <= h
    # every router's ports are distinct and numbered 1..(its link count)
    ports = Counter()
    for l in f.links:
        for node, port in ((l.a, l.a_port), (l.b, l.b_port)):
            if not node.startswith("h"):
                ports[(node, port)] += 1
    assert max(ports.values()) == 1
    for r in routers:
        mine = sorted(port for (node, port) in ports if node == r.name)
        assert mine == list(range(1, len(mine) + 1))
    assert len({n.ip for n in f.hosts}) == len({n.mac for n in f.hosts}) == len(f.hosts)
    assert len({n.dpid for n in routers}) == len(routers)
    assert {l.cost for l in glob} == {3} and {l.cost for l in local} <= {1}


@pytest.mark.parametrize("g, a, p, h", SHAPES)
def test_routes_are_minimal_loop_free_and_ecmp_where_minimal_paths_tie(g, a, p, h):
    fmap = Dragonfly(groups=g, routers_per_group=a, hosts_per_router=p, global_links_per_router=h).build().to_map()
    routes = compute_routes(fmap, "ecmp")
    for src in fmap["switches"]:
        for host in fmap["hosts"]:
            for choose in (min, max):
                path = follow(fmap, routes, src["name"], host["ip"], choose)
                groups = [group_of(n) for n in path]
                changes = sum(1 for x, y in zip(groups, groups[1:]) if x != y)
                assert changes <= 1, path                        # at most one global link
                assert len(path) - 1 <= 3, path                  # hops: local, global, local at most
                if group_of(src["name"]) == group_of(host["switch"]):
                    assert changes == 0


def test_two_global_hops_are_never_taken_even_when_shorter_in_hops():
    # 3 groups of 2 routers, h = 1: g1r1 holds the link to g2, g1r2 the link to g3. From g1r1 to g3's
    # router that faces g2, hop count alone would go g1r1 -> g2 -> g3 (two global links, 2 hops);
    # minimal routing goes g1r1 -> g1r2 -> g3r? -> ... with one global link.
    d = Dragonfly(groups=3, routers_per_group=2, hosts_per_router=1, global_links_per_router=1)
    fmap = d.build().to_map()
    routes = compute_routes(fmap, "ecmp")
    for host in fmap["hosts"]:
        path = follow(fmap, routes, "g1r1", host["ip"])
        assert len({group_of(n) for n in path}) <= 2, path


@pytest.mark.parametrize("kw, key", [
    ({"groups": 10, "routers_per_group": 4, "global_links_per_router": 2}, "topology.groups"),   # 4 x 2 + 1 = 9
    ({"groups": 1}, "topology.groups"),
    ({"routers_per_group": 0}, "topology.routers_per_group"),
    ({"hosts_per_router": 17}, "topology.hosts_per_router"),
    ({"global_rate_mbps": 0}, "topology.global_rate_mbps"),
])
def test_bad_parameters_name_the_key(kw, key):
    with pytest.raises(ScenarioError) as e:
        Dragonfly(**kw)
    assert e.value.key == key


def test_a_scenario_builds_a_dragonfly_and_refuses_other_kinds_keys():
    sc = validate({"name": "df", "topology": {"kind": "dragonfly", "groups": 3, "routers_per_group": 2,
                                              "hosts_per_router": 2, "global_links_per_router": 1},
                   "traffic": {"pattern": "permutation"}, "ecn": {"layers": {"router": {"step": {"k_packets": 20}}}}})
    assert sc.topology.model_dump() == {"kind": "dragonfly", "groups": 3, "routers_per_group": 2, "hosts_per_router": 2,
                              "global_links_per_router": 1, "host_rate_mbps": 10, "local_rate_mbps": 10,
                              "global_rate_mbps": 10}
    for bad, key in (({"kind": "dragonfly", "leaves": 2}, "topology.leaves"),
                     ({"kind": "dragonfly", "groups": 12}, "topology.groups")):
        with pytest.raises(ScenarioError) as e:
            validate({"name": "df", "topology": bad})
        assert e.value.key == key
    with pytest.raises(ScenarioError) as e:
        validate({"name": "df", "topology": {"kind": "dragonfly"}, "ecn": {"layers": {"spine": "off"}}})
    assert e.value.key == "ecn.layers.spine"


def test_mn_custom_and_the_drawing(tmp_path):
    f = mn_build("dragonfly,3,2,2,1")
    assert len(f.switches) == 6 and len(f.hosts) == 12
    assert {l.rate_mbps for l in f.links} == {10}
    assert draw.draw(f.to_map(), tmp_path / "df.png").stat().st_size > 10_000
    assert draw.end_to_end_oversubscription(f.to_map()) is None       # one switch layer


def test_registry_entries_declare_what_the_schema_mn_and_drawing_read(tmp_path):
    shared = {}
    for kind, cls in TOPOLOGIES.items():
        assert cls.KIND == kind and cls.LAYERS[-1] == "host" and cls.TITLE
        fab = cls().build()                                   # defaults are a valid fabric
        assert fab.kind == kind and fab.layers == cls.LAYERS
        assert set(cls.PARAMS) <= set(cls.__dataclass_fields__)
        for key, spec in cls.PARAMS.items():
            assert shared.setdefault(key, spec) == spec, (kind, key)   # a shared key is declared alike
            assert getattr(cls(), key) == spec.default, (kind, key)     # the builder's default is the schema's
        assert cls().n_hosts == len(fab.hosts) and cls().n_groups == len(fab.host_groups())
        assert draw.draw(fab.to_map(), tmp_path / f"{kind}.png").exists()


def test_the_largest_dragonfly_the_builder_takes_has_linux_sized_names():
    # case C1: every generated interface name fits 15 characters (g33r16-eth39, h8448-eth0)
    d = Dragonfly(groups=33, routers_per_group=16, hosts_per_router=16, global_links_per_router=8)
    f = d.build()                       # check_names raises ScenarioError on a longer name
    assert max(len(n) for n in f.interface_names()) <= 15
    assert len(f.hosts) == 33 * 16 * 16 and d.n_links == len(f.links)
