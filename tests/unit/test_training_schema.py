"""The training section and the GPU-server keys of a scenario: what is refused, with the key named."""
import pytest

from common.errors import ScenarioError
from experiments.scenario import validate

RAIL = {"kind": "rail", "servers": 4, "gpus_per_server": 4}


def _sc(**kw):
    return {"name": "t", "topology": RAIL, **kw}


@pytest.mark.parametrize("data,key,msg", [
    (_sc(training={"model": "transformer", "ranks": 16}, collective={"kind": "allreduce"}), "training",
     "not both"),
    (_sc(training={"model": "transformer", "layers": [{"name": "a", "params_bytes": 400, "forward_s": 0.1,
                                                       "backward_s": 0.2}]}), "training.layers", "not both"),
    (_sc(training={"ranks": 16, "layers": [{"name": "a", "params_bytes": 402, "forward_s": 0.1, "backward_s": 0.2}]}),
     "training.layers[0].params_bytes", "multiple of 4"),
    (_sc(training={"model": "transformer", "ranks": 16, "params_bytes": 400, "bucket_bytes": 40}), "training.bucket_bytes",
     "fewer float32 elements than 16"),
    (_sc(training={"model": "transformer", "ranks": 6, "algorithm": "hierarchical"}), "training.ranks",
     "whole servers"),
    (_sc(training={"model": "gpt", "ranks": 16}), "training.model", "transformer"),
    (_sc(rounds=[{"name": "a", "training": {"overlap": False}}]), "rounds[0].training", "has no training"),
    (_sc(training={"model": "transformer", "ranks": 16}, rounds=[{"name": "a", "training": {"iterations": 2}}]),
     "rounds[0].training", "overlap, compression"),
    (_sc(training={"model": "transformer", "ranks": 16}, traffic={"pattern": "incast"}), "traffic",
     "collective or training"),
    (_sc(training={"model": "transformer", "ranks": 16, "compression": "zip"}), "training.compression", "fp16"),
    ({"name": "t", "topology": {"kind": "spineleaf"}, "collective": {"kind": "allreduce", "ranks": 8,
                                                                       "gpus_per_server": 4, "hosts": ["h1", "h2"]}},
     "collective.gpus_per_server", "not both"),
    (_sc(training={"ranks": 16, "compression": "fp16"}), "training.model", "without a model"),
    (_sc(training={"model": "resnet50", "ranks": 16}, rounds=[{"name": "a", "collective": {"kind": "allreduce"}}]),
     "rounds[0].collective", "not both"),
    (_sc(collective={"kind": "allreduce", "hosts": ["h1", "h2", "h3", "h5", "h6"], "algorithm": "hierarchical"}),
     "collective.hosts", "same number of ranks on every server, not [3, 2]"),
    (_sc(training={"model": "resnet50", "hosts": ["h1", "h2", "h3", "h4"]}), "training.hosts", "one server"),
    # mixed parallelism: tensor groups inside a server, stages of whole servers, ring AllReduces uncompressed
    (_sc(training={"model": "transformer", "ranks": 16, "tensor": 8, "pipeline": 2}), "training.tensor",
     "do not fit servers of 4 GPUs"),
    (_sc(training={"model": "transformer", "ranks": 16, "tensor": 2, "pipeline": 8}), "training.pipeline",
     "not whole servers"),
    (_sc(training={"model": "transformer", "ranks": 16, "tensor": 3}), "training.tensor", "not a multiple"),
    (_sc(training={"model": "transformer", "ranks": 16, "tensor": 4, "compression": "fp16"}), "training.compression",
     "mixed-parallel"),
    (_sc(training={"model": "transformer", "ranks": 16, "tensor": 4, "algorithm": "hierarchical"}),
     "training.algorithm", "mixed-parallel"),
    (_sc(training={"ranks": 16, "pipeline": 4, "layers": [{"name": f"l{i}", "params_bytes": 4000, "forward_s": 0.1,
                                                          "backward_s": 0.2} for i in range(2)]}),
     "training.pipeline", "2 layers cannot fill 4 pipeline stages"),
    (_sc(training={"model": "transformer", "ranks": 16, "tensor": 4, "activation_bytes": 8}),
     "training.activation_bytes", "at least 4 elements"),
    (_sc(training={"model": "transformer", "ranks": 16, "tensor": 16, "pipeline": 2}), "training.tensor",
     "do not fit servers of 4 GPUs"),
    (_sc(training={"model": "transformer", "ranks": 16, "activation_bytes": 65536}), "training.activation_bytes",
     "only with tensor or pipeline"),
    (_sc(training={"model": "transformer", "ranks": 16}, rounds=[{"name": "a", "training": {"microbatches": 4}}]),
     "rounds[0].training.microbatches", "only with tensor or pipeline"),
    ({"name": "t", "topology": {"kind": "spineleaf"}, "collective": {"kind": "allreduce", "hosts": ["h1", "h1"]}},
     "collective.hosts", "one server"),
    ({"name": "t", "topology": {"kind": "spineleaf"}, "collective": {"kind": "allreduce", "ranks": 6,
                                                                       "gpus_per_server": 4}},
     "collective.ranks", "do not fill servers of 4"),
])
def test_refused_with_the_key(data, key, msg):
    with pytest.raises(ScenarioError) as e:
        validate(data)
    assert e.value.key == key and msg in str(e.value), str(e.value)


def test_rounds_change_the_training_knobs_and_round_trip():
    sc = validate(_sc(training={"model": "resnet50", "ranks": 16, "algorithm": "hierarchical"},
                      rounds=[{"name": "a", "training": {"overlap": False}},
                              {"name": "b", "training": {"compression": "topk", "topk_ratio": 16}}]))
    assert [(r.training.overlap, r.training.compression) for r in sc.rounds] == [(False, "none"), (True, "topk")]
    assert sc.rounds[1].training.topk_ratio == 16 and "traffic" not in sc.to_data()
    assert validate(sc.to_data()) == sc
    # a server per host on Spine-Leaf: 4 hosts x 4 GPUs
    sc = validate({"name": "t", "topology": {"kind": "spineleaf", "spines": 2, "leaves": 2, "hosts_per_leaf": 2},
                   "training": {"model": "transformer", "ranks": 16, "gpus_per_server": 4}})
    assert sc.training.gpus_per_server == 4
