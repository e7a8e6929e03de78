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


def test_hash_basis_differs_on_every_switch():
    """Case C5: no two switches of even the largest fabric share an ECMP hash basis."""
    from controller.routing import hash_basis
    from topologies.fattree import FatTree
    n = len(FatTree(k=16).build().switches)
    bases = [hash_basis(i) for i in range(n)]
    assert len(set(bases)) == n and all(0 <= b <= 0xFFFF for b in bases)
    assert len({hash_basis(i) for i in range(0xFFFF)}) == 0xFFFF
    with pytest.raises(ValueError):
        hash_basis(0xFFFF)


def test_ecmp_tables_group_destinations_by_port_set():
    from controller.routing import ecmp_tables
    from topologies.fattree import FatTree
    m = FatTree(k=4).build().to_map()
    r = compute_routes(m)
    set_of, sets = ecmp_tables(r["p0e1"])
    assert sets == {1: [3, 4]}                       # every remote host: both aggregation uplinks
    assert len(set_of) == 14                          # 16 hosts minus the 2 on this edge switch
    set_of, sets = ecmp_tables(r["c1"])
    assert sets == {} and set_of == {}               # core: one port down to each pod
    set_of, sets = ecmp_tables(r["p0a1"])
    assert list(sets.values()) == [[3, 4]]            # the two core uplinks, for the 12 hosts of other pods
    assert len(set_of) == 12


def test_ecmp_balance_chi_square():
    from experiments.analysis import ecmp_balance
    fair = ecmp_balance({"c1": 17, "c2": 15, "c3": 16, "c4": 16})
    assert fair["p_value"] > 0.9 and fair["flows"] == 64
    polarized = ecmp_balance({"c1": 32, "c2": 0, "c3": 0, "c4": 32})   # one shared hash basis
    assert polarized["p_value"] < 1e-6
    assert ecmp_balance({"a": 64, "b": 0})["p_value"] < 1e-10
    with pytest.raises(ValueError):
        ecmp_balance({"a": 3})


# -- the registry: a new strategy is one class and one registration ---------------------------------

def test_a_registered_strategy_is_accepted_by_the_schema_and_routes(request):
    """A throwaway strategy (one class, one register() call) is a valid ``routing.mode`` at once,
    is listed in the exported schema's enum, computes routes, and leaves the registry as it was."""
    from controller.routing import STRATEGIES, RoutingStrategy, register, strategy_for
    from experiments.model import ScenarioFile
    from experiments.plan import check_against_fabric
    from experiments.scenario import validate

    class Highest(RoutingStrategy):
        """Of the equal-cost next hops, always the highest-numbered port."""
        NAME = "highest-port-test"
        TITLE = "the highest equal-cost port"
        HASHED = False

        def next_hops(self):
            return {sw: {ip: [max(ports)] for ip, ports in r.items()} for sw, r in super().next_hops().items()}

    register(Highest)
    request.addfinalizer(lambda: STRATEGIES.pop(Highest.NAME))
    sc = validate({"name": "t", "routing": {"mode": "highest-port-test"}})
    assert sc.routing.mode == "highest-port-test"
    check_against_fabric(sc)
    schema = ScenarioFile.model_json_schema()
    assert "highest-port-test" in str(schema["$defs"]["Routing"]["properties"]["mode"]["enum"])
    m = SpineLeaf(spines=2, leaves=3, hosts_per_leaf=2).build().to_map()
    routes = strategy_for(m, "highest-port-test").routes
    assert routes["leaf1"]["10.2.0.1"] == [4]                  # leaf1's uplinks are ports 3 and 4
    for sw in m["switches"]:
        for h in m["hosts"]:
            assert follow(m, routes, sw["name"], h["ip"])[-1] == h["switch"]
    with pytest.raises(ValueError, match="taken"):
        register(type("Other", (RoutingStrategy,), {"NAME": "highest-port-test"}))


def test_every_place_takes_its_choices_from_the_registry():
    from controller.main import main
    from controller.options import OPTS
    from controller.routing import STRATEGIES
    from experiments.model import ScenarioFile
    assert next(o for o in OPTS if o.dest == "routing").type.choices.keys() == STRATEGIES.keys()
    assert ScenarioFile.model_json_schema()["$defs"]["Routing"]["properties"]["mode"]["enum"] == list(STRATEGIES)
    with pytest.raises(SystemExit) as e:
        main(["--topo", "fattree,4", "--ready-file", "/dev/null", "--routing", "flood"])
    assert e.value.code == 2


def test_routing_mode_errors_name_the_key():
    from common.errors import ScenarioError
    from experiments.plan import check_against_fabric
    from experiments.scenario import validate
    from controller.routing.registry import STRATEGIES
    assert list(STRATEGIES)[:3] == ["ecmp", "single", "valiant"]
    with pytest.raises(ScenarioError, match=f"routing.mode.*must be one of {', '.join(STRATEGIES)}; got 'flood'"):
        validate({"name": "t", "routing": {"mode": "flood"}})
    with pytest.raises(ScenarioError, match="routing.mode.*valiant needs switches in at least 3 groups"):
        check_against_fabric(validate({"name": "t", "routing": {"mode": "valiant"}}))     # a Spine-Leaf


# -- Valiant on the Dragonfly ----------------------------------------------------------------------

@pytest.mark.parametrize("shape", [dict(), dict(groups=3, routers_per_group=2, hosts_per_router=1,
                                                global_links_per_router=1),
                                   dict(groups=9, routers_per_group=4, hosts_per_router=1, global_links_per_router=2)])
def test_valiant_paths_are_loop_free_and_reach_every_host(shape):
    """Every pair through every intermediate group, taking the lowest and the highest next hop at
    every switch: the path ends at the destination's router, goes through the intermediate group,
    never repeats a switch, and has at most two global links (one within a group: minimal)."""
    from controller.routing import strategy_for
    from topologies.dragonfly import GLOBAL_LINK_COST, Dragonfly
    m = Dragonfly(**shape).build().to_map()
    v = strategy_for(m, "valiant")
    cost = {(l["a"], l["b"]): l.get("cost", 1) for l in m["links"]}
    cost.update({(b, a): c for (a, b), c in cost.items()})
    for s in m["hosts"]:
        for d in m["hosts"][:: 3]:
            if s == d:
                continue
            sg, dg = v.host_group[s["name"]], v.host_group[d["name"]]
            for via in v.candidates(sg, dg) or [None]:
                for choose in (min, max):
                    path = v.path(s["name"], d["name"], via, choose)
                    assert path[0] == s["switch"] and path[-1] == d["switch"]
                    assert len(set(path)) == len(path)
                    globals_ = sum(cost[e] == GLOBAL_LINK_COST for e in zip(path, path[1:]))
                    if via is None:
                        assert sg == dg and globals_ == 0
                    else:
                        assert via in {v.group_of[sw] for sw in path} and globals_ == 2
                        assert len(path) <= 6            # local, global, local, global, local


def test_valiant_candidates_exclude_the_two_end_groups():
    from controller.routing import strategy_for
    from topologies.dragonfly import Dragonfly
    v = strategy_for(Dragonfly().build().to_map(), "valiant")
    assert v.groups == ["g1", "g2", "g3", "g4", "g5"]
    assert v.candidates("g1", "g2") == ["g3", "g4", "g5"] and v.candidates("g3", "g3") == []
    with pytest.raises(ValueError, match="not an intermediate group"):
        v.path("h1", "h9", "g2")


def test_valiant_fluid_model_on_the_adversarial_and_the_permutation_patterns():
    """The fluid model predicts Valiant's loads from its own path spread (no name in the model).
    Adversarial traffic (every host of group i to group i+1, stride = hosts per group) on the
    default Dragonfly (g = 5, 8 hosts and 4 global links per group, every link 10 Mbit/s): minimal
    routing puts a group's 8 flows on its one global link to the next group, 10 / 8 Mbit/s each,
    50 in all; Valiant spreads each over the g - 2 = 3 other groups, so every used global link
    carries 8/3 first-phase and 8/3 second-phase flows: 10 x 3/16 Mbit/s per flow, 75 in all, the
    ratio (g - 2) / 2 = 1.5. On a cross-group permutation the doubled global hops cost about half."""
    from experiments.fluid import max_min_rates, switch_hop_forwarding_mbps
    from topologies.dragonfly import Dragonfly
    from traffic.patterns import permutation_pairs, stride_pairs
    fab = Dragonfly().build()
    m = fab.to_map()
    wc = stride_pairs([h["name"] for h in m["hosts"]], 8)
    assert sum(max_min_rates(m, wc, "ecmp")) == pytest.approx(50.0)
    assert max_min_rates(m, wc, "valiant") == pytest.approx([10 * 3 / 16] * 40)
    assert switch_hop_forwarding_mbps(m, wc, "valiant") > 2 * switch_hop_forwarding_mbps(m, wc, "ecmp")
    perm = permutation_pairs(fab.host_groups(), 1)
    ratio = sum(max_min_rates(m, perm, "valiant")) / sum(max_min_rates(m, perm, "ecmp"))
    assert 0.4 < ratio < 0.6
    # each flow's fractions leave its host and reach its destination whole, over 3 intermediate groups
    from controller.routing import strategy_for
    f = strategy_for(m, "valiant").link_fractions("h1", "h9")
    assert f[("h1", "g1r1")] == 1.0 and f[("g2r1", "h9")] == pytest.approx(1.0)
    assert sum(x for (a, b), x in f.items() if a.startswith("g1") and b.startswith(("g3", "g4", "g5"))) \
        == pytest.approx(1.0)
