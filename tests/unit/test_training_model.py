"""Training iterations as a model (common.training): presets, DDP bucketing, and the overlap
timeline against the textbook's bounds."""
import pytest

from common import training as T


def test_presets_keep_their_totals_and_shapes():
    for name in T.PRESETS:
        layers = T.preset(name, 4_000_000, 1.2)
        assert sum(l.params_bytes for l in layers) == pytest.approx(4_000_000, abs=4 * len(layers))
        assert sum(l.forward_s + l.backward_s for l in layers) == pytest.approx(1.2)
        assert all(l.backward_s == pytest.approx(2 * l.forward_s) for l in layers)
    r = T.preset("resnet50", 4_000_000, 1.0)
    # ResNet-50: the last stage and classifier hold most parameters, the early stages most compute
    assert r[-2].params_bytes + r[-1].params_bytes > 0.6 * 4_000_000
    assert sum(l.forward_s for l in r[:3]) > sum(l.forward_s for l in r[-2:])
    with pytest.raises(ValueError, match="unknown model"):
        T.preset("gpt5", 100, 1)


def test_buckets_fill_in_reverse_and_never_split_a_layer():
    layers = [T.Layer(f"l{i}", b, 0.01, 0.02) for i, b in enumerate([400, 100, 300, 300, 800, 0, 200])]
    bk = T.buckets(layers, 600)
    assert [b.layers for b in bk] == [(6,), (4,), (3, 2), (1, 0)]
    assert [b.params_bytes for b in bk] == [200, 800, 600, 500]
    assert [b.ready_after for b in bk] == [6, 4, 2, 0]
    # every layer with parameters in exactly one bucket
    assert sorted(i for b in bk for i in b.layers) == [0, 1, 2, 3, 4, 6]
    with pytest.raises(ValueError, match="no layer has parameters"):
        T.buckets([T.Layer("x", 0, 1, 1)], 100)


def test_overlap_off_is_the_sum_and_on_approaches_the_max():
    layers = [T.Layer(f"l{i}", 1000, 0.1, 0.2) for i in range(8)]        # F 0.8, B 1.6
    bk = T.buckets(layers, 1000)                                           # one bucket per layer
    off = T.timeline(layers, bk, [0.15] * 8, overlap=False)
    assert off["iteration_s"] == pytest.approx(off["sum_s"]) == pytest.approx(2.4 + 1.2)
    on = T.timeline(layers, bk, [0.15] * 8, overlap=True)
    # each bucket's reduction (0.15) hides behind the next layer's backward (0.2); only the last is exposed
    assert on["iteration_s"] == pytest.approx(2.4 + 0.15)
    assert on["exposed_comm_s"] == pytest.approx(0.15)
    assert on["max_s"] <= on["iteration_s"] <= off["iteration_s"]
    # communication-bound: reductions queue behind each other; T = first ready + all comm
    heavy = T.timeline(layers, bk, [0.5] * 8, overlap=True)
    assert heavy["iteration_s"] == pytest.approx(0.8 + 0.2 + 8 * 0.5)
    with pytest.raises(ValueError, match="communication times for"):
        T.timeline(layers, bk, [0.1], overlap=True)


def test_bad_layers_are_refused():
    with pytest.raises(ValueError, match="multiple of 4"):
        T.Layer("x", 6, 0, 0)
    with pytest.raises(ValueError, match="compute times"):
        T.Layer("x", 4, -1, 0)
