"""The mixed-parallel plan (common.parallelism): Megatron's rank order, groups on servers,
stages balanced by compute, and the bytes each kind moves per iteration."""
import pytest

from common import parallelism as P
from common.training import Layer

SERVERS = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]


def test_megatron_order_tensor_inside_servers_stages_across():
    p = P.Plan(16, tensor=2, pipeline=2, microbatches=4)
    assert p.data == 4 and p.per_stage == 8
    assert p.groups("tensor") == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11], [12, 13], [14, 15]]
    assert p.groups("data") == [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]]
    assert p.groups("pipeline")[:3] == [[0, 8], [1, 9], [2, 10]]
    assert (p.next_stage(3), p.prev_stage(3), p.next_stage(11), p.prev_stage(11)) == (11, None, None, 3)
    P.check_placement(p, SERVERS)
    every = sorted(r for g in p.groups("tensor") for r in g)
    assert every == list(range(16))          # each rank in exactly one group of each kind
    assert sorted(r for g in p.groups("data") for r in g) == every
    assert sorted(r for g in p.groups("pipeline") for r in g) == every


@pytest.mark.parametrize("plan,servers,msg", [
    (P.Plan(16, tensor=8, pipeline=2), SERVERS, "spans servers"),
    (P.Plan(16, tensor=2, pipeline=8), SERVERS, "stages"),
])
def test_placements_that_do_not_fit_are_refused(plan, servers, msg):
    with pytest.raises(ValueError, match=msg):
        P.check_placement(plan, servers)


@pytest.mark.parametrize("kw,msg", [({"ranks": 12, "tensor": 8}, "multiple"), ({"ranks": 8, "microbatches": 0}, "at least 1"),
                                    ({"ranks": 8, "activation_bytes": 6}, "activation_bytes")])
def test_bad_counts_are_refused(kw, msg):
    with pytest.raises(ValueError, match=msg):
        P.Plan(**kw)


def test_stages_are_contiguous_balanced_by_compute_and_never_empty():
    layers = [Layer("emb", 400, 0.01, 0.02)] + [Layer(f"b{i}", 400, 0.1, 0.2) for i in range(6)] + [Layer("head", 400, 0.01, 0.02)]
    st = P.stage_layers(layers, 2)
    assert st == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert P.stage_layers(layers, 8) == [[i] for i in range(8)]
    with pytest.raises(ValueError, match="pipeline stages"):
        P.stage_layers(layers, 9)


def test_flows_per_kind_follow_the_textbook_counts():
    layers = [Layer(f"l{i}", 4_000_000, 0.1, 0.2) for i in range(4)]
    p = P.Plan(16, tensor=2, pipeline=2, microbatches=4, activation_bytes=1_000_000)
    fl = P.flows(p, layers, 1_000_000)
    by = {k: sum(f.payload_bytes for f in fl if f.kind == k) for k in P.KINDS}
    # tensor: per group, 2 AllReduces per layer per microbatch; a ring AllReduce of A over T ranks moves 2(T-1)A
    assert by["tensor"] == 8 * (2 * 2 * 4) * 2 * (2 - 1) * 1_000_000
    # pipeline: M activations forward and M gradients back per chain link
    assert by["pipeline"] == 8 * 2 * 4 * 1_000_000
    # data: each group reduces its stage's 2 layers / T = 4 MB per rank: 2(D-1) x that / D x D ranks
    assert by["data"] == 4 * 2 * (4 - 1) * 4_000_000
    assert all(f.frames >= f.payload_bytes / 1448 for f in fl)
    assert {(f.src, f.dst) for f in fl if f.kind == "pipeline"} == {(a, a + 8) for a in range(8)} | {(a + 8, a) for a in range(8)}


def test_gpipe_bubble():
    assert P.bubble_fraction(4, 1) == 0 and P.bubble_fraction(1, 4) == 0.75
    assert P.gpipe_compute_s(1.0, 4, 2) == pytest.approx(1.25)


def test_stages_reach_the_best_contiguous_cut():
    import itertools
    import random
    rng = random.Random(5)
    for _ in range(200):
        n, p = rng.randint(1, 8), rng.randint(1, 4)
        if n < p:
            continue
        layers = [Layer(f"l{i}", 4, rng.choice([0.0, 0.1, 0.25, 0.4, 1.0]), rng.choice([0.0, 0.2, 0.5])) for i in range(n)]
        w = [x.forward_s + x.backward_s for x in layers]
        w = w if any(w) else [1.0] * n
        best = min(max(sum(w[a:b]) for a, b in zip((0,) + c, c + (n,)))
                   for c in itertools.combinations(range(1, n), p - 1))
        st = P.stage_layers(layers, p)
        assert [i for g in st for i in g] == list(range(n)) and len(st) == p and all(st)
        assert max(sum(w[i] for i in g) for g in st) <= best + 1e-9


def test_the_transformer_preset_splits_in_two_near_halves():
    from common.training import preset
    layers = preset("transformer", 4_000_000, 1.0)
    st = P.stage_layers(layers, 2)
    loads = [sum(layers[i].forward_s + layers[i].backward_s for i in g) for g in st]
    assert st == [[0, 1, 2, 3], [4, 5, 6, 7]] and max(loads) == pytest.approx(0.515, abs=0.001)
