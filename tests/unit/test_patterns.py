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
