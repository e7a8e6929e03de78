"""The hierarchical AllReduce's schedule and model (common.hierarchical): exact on real arrays,
transfer counts and bytes per level, and the two-level alpha-beta model against the flat ring."""
import numpy as np
import pytest

from common import collectives as C
from common import hierarchical as H


def _layout(s, g):
    return [[i * g + j for j in range(g)] for i in range(s)]


def _inputs(n, el, seed=1):
    return [np.random.default_rng(seed + r).integers(-1000, 1000, el).astype(np.float32) for r in range(n)]


@pytest.mark.parametrize("s,g,el", [(4, 4, 16), (4, 4, 1001), (2, 8, 64), (3, 2, 7), (1, 4, 9), (4, 1, 9), (2, 3, 100)])
def test_hierarchical_allreduce_is_exact_on_every_rank(s, g, el):
    xs = _inputs(s * g, el)
    out, count = H.simulate_moves(xs, H.hierarchical_moves(_layout(s, g), el))
    want = np.sum(xs, axis=0)
    for r in range(s * g):
        assert np.array_equal(out[r], want), r
    assert count == 2 * (g - 1) * g * s + 2 * (s - 1) * s * g


def test_transfer_counts_and_bytes_per_level():
    s, g, el = 4, 4, 1600
    steps = H.hierarchical_moves(_layout(s, g), el)
    assert len(steps) == 2 * (g - 1) + 2 * (s - 1)
    lv = H.level_counts(steps, _layout(s, g))
    # every server: G ranks x 2(G-1) steps of D/G; every rail: S ranks x 2(S-1) steps of D/(G S)
    assert lv["intra"] == {"moves": s * g * 2 * (g - 1), "bytes": s * g * 2 * (g - 1) * 4 * el // g}
    assert lv["inter"] == {"moves": s * g * 2 * (s - 1), "bytes": s * g * 2 * (s - 1) * 4 * el // (g * s)}
    phases = [st[0].phase for st in steps]
    assert phases == ["intra_reduce_scatter"] * 3 + ["inter_reduce_scatter"] * 3 + ["inter_all_gather"] * 3 \
        + ["intra_all_gather"] * 3
    # inter moves stay on their rail: GPU j talks to GPU j of the next server
    for st in steps:
        for mv in st:
            if mv.phase.startswith("inter"):
                assert mv.src % g == mv.dst % g and mv.dst // g == (mv.src // g + 1) % s
            else:
                assert mv.src // g == mv.dst // g


def test_flat_ring_across_servers_crosses_the_fabric_once_per_server_per_step():
    s, g, el = 4, 4, 1600
    steps = H.flat_moves(s * g, "allreduce", el)
    lv = H.level_counts(steps, _layout(s, g))
    assert lv["inter"]["moves"] == s * 2 * (s * g - 1)
    for kind in C.KINDS:
        xs = _inputs(6, 60)
        want, n = C.simulate(xs, kind)
        got, m = H.simulate_moves(xs, H.flat_moves(6, kind, 60))
        assert m == n
        for a, b in zip(got, want):
            assert np.array_equal(a, b), kind


def test_two_level_model_beats_the_flat_ring_at_the_textbook_ratio():
    d, b = 1_000_000, 10e6
    hier = H.hierarchical_model_time_s(4, 4, d, 0, 12 * b, 0, b)
    flat = C.model_time_s("allreduce", 16, d, 0, b)
    assert hier == pytest.approx(0.5 * 8 * d / b)
    assert flat == pytest.approx(1.875 * 8 * d / b)
    # alpha adds per step: 2(G-1) NVLink steps, 2(S-1) rail steps
    assert H.hierarchical_model_time_s(4, 4, 0, 1e-3, b, 2e-3, b) == pytest.approx(6e-3 + 12e-3)


@pytest.mark.parametrize("servers,msg", [([], "at least one"), ([[0, 1], [2]], "same number"),
                                         ([[0, 1], [1, 2]], "each once"), ([[0]], "at least 2")])
def test_bad_layouts_are_refused(servers, msg):
    with pytest.raises(ValueError, match=msg):
        H.check_servers(servers)


def test_unknown_algorithm_and_kind_are_refused():
    with pytest.raises(ValueError, match="unknown algorithm"):
        H.moves("tree", "allreduce", _layout(2, 2), 8)
    with pytest.raises(ValueError, match="is an allreduce"):
        H.moves("hierarchical", "all_gather", _layout(2, 2), 8)
    with pytest.raises(ValueError, match="cannot fill"):
        H.hierarchical_moves(_layout(2, 2), 3)
