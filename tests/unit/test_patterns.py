"""Incast sender selection."""
import pytest

from traffic.patterns import incast_senders

LEAVES = {"leaf1": ["h1", "h2", "h3"], "leaf2": ["h4", "h5", "h6"], "leaf3": ["h7", "h8", "h9"]}


def test_round_robin_over_other_leaves():
    assert incast_senders(LEAVES, "h1", 4) == ["h4", "h7", "h5", "h8"]


def test_own_leaf_last():
    assert incast_senders(LEAVES, "h1", 8) == ["h4", "h7", "h5", "h8", "h6", "h9", "h2", "h3"]


def test_too_many_and_unknown():
    with pytest.raises(ValueError, match="only 8"):
        incast_senders(LEAVES, "h1", 9)
    with pytest.raises(ValueError, match="no leaf"):
        incast_senders(LEAVES, "h42", 1)


def test_permutation_crosses_groups_and_is_a_permutation():
    from topologies.fattree import FatTree
    from topologies.spineleaf import SpineLeaf
    from traffic.patterns import permutation_pairs
    for fab in (FatTree(k=4).build(), SpineLeaf(spines=2, leaves=4, hosts_per_leaf=6).build()):
        groups = fab.host_groups()
        group_of = {h: g for g, hs in groups.items() for h in hs}
        pairs = permutation_pairs(groups, seed=1)
        srcs, dsts = [s for s, _ in pairs], [d for _, d in pairs]
        assert sorted(srcs) == sorted(dsts) == sorted(h.name for h in fab.hosts)
        assert all(group_of[s] != group_of[d] for s, d in pairs)
        assert pairs == permutation_pairs(groups, seed=1)          # reproducible
        assert pairs != permutation_pairs(groups, seed=2)
    assert len(FatTree(k=4).build().host_groups()) == 4             # Fat-Tree groups are pods


def test_permutation_impossible_and_fallback():
    from traffic.patterns import permutation_pairs
    with pytest.raises(ValueError, match="no cross-group"):
        permutation_pairs({"a": ["h1", "h2", "h3"], "b": ["h4"]}, seed=1)
    pairs = permutation_pairs({"a": ["h1", "h2"], "b": ["h3", "h4"]}, seed=3)
    assert {s for s, _ in pairs} == {d for _, d in pairs} == {"h1", "h2", "h3", "h4"}


def test_all_to_all():
    from traffic.patterns import all_to_all_pairs
    pairs = all_to_all_pairs(["h1", "h2", "h3"])
    assert len(pairs) == 6 and ("h1", "h1") not in pairs and len(set(pairs)) == 6


def test_message_schedule_synchronized_and_poisson_at_a_load():
    from traffic.patterns import message_schedule
    assert message_schedule(8, 1, 500_000, "synchronized", None, 10e6, 1) == [[0.0]] * 8
    # 4 senders x 125 kB at 10 Mbit/s and load 0.5: a round every 0.8 s
    s = message_schedule(4, 3, 125_000, "synchronized", 0.5, 10e6, 1)
    assert all(t == pytest.approx([0, 0.8, 1.6]) for t in s)
    p = message_schedule(8, 2000, 10_000, "poisson", 0.4, 10e6, 7)
    assert p == message_schedule(8, 2000, 10_000, "poisson", 0.4, 10e6, 7)      # seeded
    gaps = [b - a for times in p for a, b in zip([0] + times, times)]
    mean_gap = sum(gaps) / len(gaps)
    assert mean_gap == pytest.approx(8 * 10_000 * 8 / (0.4 * 10e6), rel=0.05)   # offered load 0.4
    import statistics
    assert statistics.pstdev(gaps) == pytest.approx(mean_gap, rel=0.1)          # exponential gaps
    with pytest.raises(ValueError, match="load"):
        message_schedule(8, 10, 10_000, "poisson", None, 10e6, 1)
    with pytest.raises(ValueError, match="arrival"):
        message_schedule(8, 10, 10_000, "burst", 0.5, 10e6, 1)
