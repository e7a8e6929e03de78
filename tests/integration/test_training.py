"""Training iterations on GPU servers, live: the shipped scenario (experiments/scenarios/training.yaml,
`make training`, lab 5's first run) as this test was calibrated, once per session (conftest's
``training_run``): 4 servers x 4 GPUs on a rail-optimised pod (10 Mbit/s NICs, NVLink at 12x
outside the fabric), a ResNet-50-shaped model of 1.5 MB of gradients in 400 kB DDP buckets,
compute emulated by time, real gradients reduced by the hierarchical AllReduce, 2 iterations per
round.

- overlap off: the iteration takes compute + communication; overlap on: towards
  max(compute, communication) (the last bucket, ready only when backward ends, stays exposed);
- compression on the wire: the communication time falls with the bytes, to the model's share
  (1/ratio of the bytes' part; the per-step alpha does not shrink: the limit that takes over);
  the reduced gradient's error stays within the compressor's bound on every element, and every
  replica ends with the same gradient."""
import json

import pytest

from experiments.labs.base import round_folder

from .conftest import assert_clean

pytestmark = pytest.mark.lane("host", reason="measures against a model: the emulated CPU cannot pace 16 ranks")

ROUNDS = ("overlap-off", "overlap-on", "fp16", "int8")


def test_overlap_and_compression_on_a_rail_pod(training_run, figure):
    p, run = training_run
    t = {name: json.loads((round_folder(run, name) / "summary.json").read_text())["training"] for name in ROUNDS}
    for name, x in t.items():
        assert x["complete"] and x["replicas_equal"], name
        assert x["ranks"] == 16 and x["servers"] == 4 and x["buckets"] == 4 and len(x["iterations"]) == 2, name
        print(f"{name}: T {x['time_s']:.3f} s (model {x['model_time_s']:.3f}), compute {x['compute_s']:.3f}, comm "
              f"{x['comm_s']:.3f} (model {x['model_comm_s']:.3f}, codec {x['codec_s']:.3f}), sum {x['sum_s']:.3f}, "
              f"max {x['max_s']:.3f}, max rel error {x['max_rel_error']:.2e}, within bound {x['all_within_bound']}")
    assert_clean(str(run))
    off, on, fp16, int8 = (t[n] for n in ROUNDS[:4])
    assert off["all_exact"] and on["all_exact"]
    assert fp16["all_within_bound"] and int8["all_within_bound"]
    assert 0 < fp16["max_rel_error"] < int8["max_rel_error"]
    figure("off_time_over_sum", off["time_over_sum"])
    figure("on_time_over_max", on["time_over_max"])
    # Compression: the bytes' part of the communication falls by the ratio, the per-step part does
    # not. The model's alpha comes from a tiny message; the uncompressed round shows the per-step
    # cost a mid-size step really has (its excess over the model: TCP's per-step ramp, the threads'
    # hand-offs), and that excess stays. So the prediction for a compressed round is its model plus
    # the uncompressed round's excess, and the seconds spent encoding and decoding (the CPU's
    # share, measured by the ranks) come on top.
    excess = off["comm_s"] - off["model_comm_s"]
    pred = {}
    for name, x in (("fp16", fp16), ("int8", int8)):
        figure(f"{name}_comm_share", x["comm_s"] / off["comm_s"])
        figure(f"{name}_codec_share", x["codec_s"] / x["comm_s"])
        pred[name] = figure(f"{name}_over_prediction", (x["comm_s"] - x["codec_s"]) / (x["model_comm_s"] + excess))
    # Calibrated on this machine kind (2026-12-05): 10 runs of this test's earlier version (the same
    # pod, 1.5 MB in 400 kB buckets, 2 iterations, the rounds run in-process) beside a CPU-heavy process,
    # min / median / max (mean -/+ 3.3 sd):
    #   overlap off, T / (compute + comm)        1.020 / 1.031 / 1.045  (1.002 .. 1.060)
    #   overlap on,  T / max(compute, comm)      1.079 / 1.096 / 1.122  (1.044 .. 1.150)
    #   fp16: comm / uncompressed comm           0.587 / 0.675 / 0.731; encoding and decoding 2% of it
    #   int8: comm / uncompressed comm           0.381 / 0.476 / 0.523; encoding and decoding 3%
    #   fp16: (comm - codec) / prediction        0.875 / 1.075 / 1.178  (0.789 .. 1.330)
    #   int8: (comm - codec) / prediction        0.759 / 1.117 / 1.232  (0.621 .. 1.534)
    #   comm: int8 below fp16 by 0.094 s or more, fp16 below uncompressed by 0.209 s or more
    # The uncompressed excess over the model was 0.09-0.20 s of 0.77-0.91 s (48 steps per iteration).
    # The shipped scenario as shipped (2 MB in 500 kB buckets, the same 48 steps per iteration, 3
    # iterations), 3 runs (2026-12-05, no busy process beside them), min / median / max; within
    # the bounds above (lab 5's teacher's guide reads these runs):
    #   overlap off 1.016 / 1.018 / 1.019; overlap on 1.069 / 1.073 / 1.095
    #   fp16 comm share 0.605 / 0.649 / 0.651, over prediction 1.017 / 1.111 / 1.116
    #   int8 comm share 0.406 / 0.434 / 0.451, over prediction 1.060 / 1.179 / 1.241
    # The 15% bounds on the iteration hold (the overlap one at the band's edge); the
    # compressed rounds fall to 1/ratio of the bytes plus the per-step cost, the limit that takes
    # over: a fifth to a quarter of the uncompressed time here.
    assert 0.85 <= off["time_over_sum"] <= 1.15
    assert 0.98 <= on["time_over_max"] <= 1.15
    # Calibrated again on 2026-12-07, as this test now reads the shipped run (trimmed, through the
    # command): two CI rehearsals failed the bounds above (fp16 at 1.45 against 1.33; int8 at 1.58
    # against 1.55). make test-repeat N=10 K=test_overlap_and_compression_on_a_rail_pod beside a
    # CPU-heavy process: fp16 over prediction 1.042 / 1.125 / 1.203, int8 1.003 / 1.259 / 1.582 (1 of
    # the 10 failed at 1.582), overlap off 1.016 / 1.028 / 1.056, on 1.071 / 1.087 / 1.105. The int8
    # round's model is 0.23 s of network time, and one of its two iterations can take 0.1 s more than
    # the other: its ratio is wide. Bounds: the 1-in-1000 prediction bounds of those runs pooled with
    # the rehearsals' (fp16 0.72 .. 1.59, n 12; int8 0.54 .. 2.07, n 11); the ordering below is the
    # check that compression shortened the exchange.
    assert 0.72 <= pred["fp16"] <= 1.59
    assert 0.54 <= pred["int8"] <= 2.07
    assert int8["comm_s"] < fp16["comm_s"] < off["comm_s"]
    assert "training (hierarchical, 4 servers, overlap off" in p.stdout
