"""The Hedera traffic patterns (Al-Fares et al., NSDI 2010, section 6.1) as registry entries: the
pairs each produces on a k=4 Fat-Tree (16 hosts, 8 edge switches of 2 hosts, 4 pods of 4), seeded
and reproducible, and the scenario keys that belong to each."""
from collections import Counter

import pytest

from common.errors import ScenarioError
from experiments.scenario import validate
from topologies import FatTree
from traffic.patterns import PATTERNS, _PairPattern, flow_plan

FAB = FatTree(k=4).build()
HOSTS = [h.name for h in FAB.hosts]
EDGE = {h.name: h.leaf for h in FAB.hosts}
POD = {h.name: h.group for h in FAB.hosts}


def plan(**traffic):
    sc = validate({"name": "p", "topology": {"kind": "fattree", "k": 4}, "traffic": traffic})
    return [(f["src"], f["dst"]) for f in flow_plan(sc.traffic, FAB, sc.seed)]


def test_stride_sends_host_x_to_host_x_plus_i():
    assert plan(pattern="stride") == [(f"h{x}", f"h{x % 16 + 1}") for x in range(1, 17)]      # stride(1)
    assert plan(pattern="stride", stride=4) == [(f"h{x}", f"h{(x + 3) % 16 + 1}") for x in range(1, 17)]
    eight = plan(pattern="stride", stride=8)                     # Hedera's stride(8) on 16 hosts: every flow
    assert all(POD[s] != POD[d] for s, d in eight)               # leaves its pod
    two = plan(pattern="stride", stride=2)                       # stride(2): to the next edge switch, same pod
    assert sum(POD[s] == POD[d] for s, d in two) == 8 and all(EDGE[s] != EDGE[d] for s, d in two)
    for i in (1, 3, 5):
        pairs = plan(pattern="stride", stride=i)
        assert Counter(d for _, d in pairs) == Counter(HOSTS)    # every host receives exactly once


def test_staggered_draws_edge_pod_and_rest_in_proportion():
    only_edge = plan(pattern="staggered", edge_p=1, pod_p=0)
    assert all(EDGE[s] == EDGE[d] and s != d for s, d in only_edge)
    only_pod = plan(pattern="staggered", edge_p=0, pod_p=1)
    assert all(POD[s] == POD[d] and EDGE[s] != EDGE[d] for s, d in only_pod)
    only_rest = plan(pattern="staggered", edge_p=0, pod_p=0)
    assert all(POD[s] != POD[d] for s, d in only_rest)
    # proportions over many seeds: (0.5, 0.3, 0.2) of 16 hosts x 200 seeds
    tally = Counter()
    for seed in range(200):
        sc = validate({"name": "p", "seed": seed, "topology": {"kind": "fattree", "k": 4},
                       "traffic": {"pattern": "staggered"}})
        for f in flow_plan(sc.traffic, FAB, seed):
            s, d = f["src"], f["dst"]
            tally["edge" if EDGE[s] == EDGE[d] else "pod" if POD[s] == POD[d] else "rest"] += 1
    n = sum(tally.values())
    assert abs(tally["edge"] / n - 0.5) < 0.04 and abs(tally["pod"] / n - 0.3) < 0.04, tally


def test_random_and_random_bijection():
    rnd = plan(pattern="random")
    assert [s for s, _ in rnd] == HOSTS and all(s != d for s, d in rnd)
    assert rnd == plan(pattern="random")                                  # the seed makes it reproducible
    bij = plan(pattern="random-bijection")
    assert [s for s, _ in bij] == HOSTS and all(s != d for s, d in bij)
    assert Counter(d for _, d in bij) == Counter(HOSTS)                   # each receives exactly once
    # a random pattern sends two or more flows to some host (16 uniform draws); a bijection never does
    assert max(Counter(d for _, d in rnd).values()) >= 2


def test_hotspot_sends_everyone_to_the_hotspots():
    pairs = plan(pattern="hotspot", hotspots=2)
    hot = {d for _, d in pairs}
    assert len(hot) == 2 and all(s != d for s, d in pairs) and [s for s, _ in pairs] == HOSTS
    one = plan(pattern="hotspot")                                         # one hotspot: 15 senders to it
    counts = Counter(d for _, d in one)
    assert counts.most_common(1)[0][1] == 15


def test_every_pair_pattern_sends_flows_per_pair_flows_of_flow_bytes():
    for name, cls in PATTERNS.items():
        if not issubclass(cls, _PairPattern):          # incast, poisson: flows of their own
            continue
        sc = validate({"name": "p", "topology": {"kind": "fattree", "k": 4},
                       "traffic": {"pattern": name, "flows_per_pair": 2, "flow_bytes": 5000}})
        flows = flow_plan(sc.traffic, FAB, sc.seed)
        assert {f["bytes"] for f in flows} == {5000} and len(flows) % 2 == 0, name


@pytest.mark.parametrize("traffic, key", [
    ({"pattern": "permutation", "stride": 2}, "traffic.stride"),         # a key of another pattern
    ({"pattern": "stride", "hotspots": 2}, "traffic.hotspots"),
    ({"pattern": "stride", "stride": 16}, "traffic.stride"),             # every host to itself
    ({"pattern": "staggered", "edge_p": 0.7, "pod_p": 0.5}, "traffic.pod_p"),
    ({"pattern": "staggered", "edge_p": 0.8}, "traffic.edge_p"),         # with the default pod_p 0.3
    ({"pattern": "staggered", "edge_p": 1.5}, "traffic.edge_p"),
    ({"pattern": "hotspot", "hotspots": 16}, "traffic.hotspots"),
    ({"pattern": "zigzag"}, "traffic.pattern"),
])
def test_pattern_keys_are_checked_and_named(traffic, key):
    with pytest.raises(ScenarioError) as e:
        validate({"name": "p", "topology": {"kind": "fattree", "k": 4}, "traffic": traffic})
    assert e.value.key == key
