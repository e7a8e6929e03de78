"""The max-min fair fluid model behind the topology comparison."""
import pytest

from experiments.fluid import link_fractions, max_min_rates
from controller.routing import compute_routes
from topologies.fattree import FatTree
from topologies.spineleaf import SpineLeaf
from traffic.patterns import all_to_all_pairs, permutation_pairs


def test_ecmp_split_fractions_fattree():
    m = FatTree(k=4).build().to_map()
    f = link_fractions(m, compute_routes(m), "h1", "h5")          # pod 0 -> pod 1: 4 core paths
    core_in = {e: v for e, v in f.items() if e[1].startswith("c")}
    assert sorted(core_in.values()) == [0.25] * 4
    assert f[("h1", "p0e1")] == 1.0 and sum(v for e, v in f.items() if e[1] == "h5") == 1.0


@pytest.mark.parametrize("flows_per_pair", [1, 8])
def test_permutation_fattree_full_bisection_spineleaf_one_third(flows_per_pair):
    ft = FatTree(k=4).build()
    pairs = [p for p in permutation_pairs(ft.host_groups(), 1) for _ in range(flows_per_pair)]
    rates = max_min_rates(ft.to_map(), pairs)
    assert sum(rates) == pytest.approx(16 * 10)                 # every host at its 10 Mbit/s
    sl = SpineLeaf(spines=2, leaves=4, hosts_per_leaf=6).build()   # 3:1
    pairs = [p for p in permutation_pairs(sl.host_groups(), 1) for _ in range(flows_per_pair)]
    rates = max_min_rates(sl.to_map(), pairs)
    assert sum(rates) / 24 == pytest.approx(10 / 3)             # per host: 1/3 of the host link


def test_all_to_all_spineleaf_local_flows_get_more():
    sl = SpineLeaf(spines=2, leaves=4, hosts_per_leaf=6).build()
    hosts = [h.name for h in sl.hosts]
    pairs = all_to_all_pairs(hosts)
    rates = dict(zip(pairs, max_min_rates(sl.to_map(), pairs)))
    leaf = {h.name: h.leaf for h in sl.hosts}
    local = [r for (s, d), r in rates.items() if leaf[s] == leaf[d]]
    remote = [r for (s, d), r in rates.items() if leaf[s] != leaf[d]]
    assert min(local) > max(remote)
    # each leaf's 2 uplinks (20 Mbit/s) carry 6 x 18 remote flows: 20 / 108 each
    assert max(remote) == pytest.approx(20 / 108)
    # host NIC is the limit of each host's sending: 10 Mbit/s per host in total
    for h in hosts:
        assert sum(r for (s, _), r in rates.items() if s == h) == pytest.approx(10, rel=1e-6)


def test_hash_ecmp_collisions_cost_one_flow_per_pair_most():
    """Hedera's observation in the model: pinning one flow per pair to a random core path
    loses a large share of a Fat-Tree's bisection; 8 flows per pair lose little."""
    from experiments.fluid import hash_ecmp_aggregate
    ft = FatTree(k=4).build()
    m = ft.to_map()
    perm = permutation_pairs(ft.host_groups(), 1)
    one = hash_ecmp_aggregate(m, perm, trials=100)
    eight = hash_ecmp_aggregate(m, [p for p in perm for _ in range(8)], trials=100)
    assert one["trials"] == 100 and one["p10"] <= one["median"] <= one["p90"]
    assert 0.4 * 160 < one["median"] < 0.7 * 160
    assert 0.85 * 160 < eight["median"] < 160
    assert hash_ecmp_aggregate(m, perm * 500)["trials"] == 12        # fewer trials for many flows
