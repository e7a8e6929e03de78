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
