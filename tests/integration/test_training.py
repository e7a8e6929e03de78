"""Training iterations on GPU servers, live: 4 servers x 4 GPUs on a rail-optimised pod (10 Mbit/s
NICs, NVLink at 12x outside the fabric), a ResNet-50-shaped model of 1.5 MB of gradients in 400
kB DDP buckets, compute emulated by time, real gradients reduced by the hierarchical AllReduce.

- overlap off: the iteration takes compute + communication; overlap on: towards
  max(compute, communication) (the last bucket, ready only when backward ends, stays exposed);
- compression on the wire: the communication time falls with the bytes, to the model's share
  (1/ratio of the bytes' part; the per-step alpha does not shrink: the limit that takes over);
  the reduced gradient's error stays within the compressor's bound on every element, and every
  replica ends with the same gradient."""

import pytest

from experiments import trainrun
from experiments.context import HOST_QUEUE_PACKETS
from experiments.fabric import LiveFabric
from experiments.live import warm_up_reachability
from experiments.model import Training
from experiments.state import RunState
from controller.dataplane import PortQueue
from topologies.rail import RailOptimized

from .conftest import assert_clean, chosen_datapath

pytestmark = pytest.mark.lane("host", reason="measures against a model: the emulated CPU cannot pace 16 ranks")


ALPHA: dict = {}       # alpha measured once, by the first round, as a run's rounds share it


def _round(lf, st, tmp, name, **kw) -> dict:
    tr = Training(model="resnet50", params_bytes=1_500_000, compute_s=2.0, bucket_bytes=400_000, iterations=2,
                  ranks=16, algorithm="hierarchical", **kw)
    res = trainrun.run_round(lf, st, tr, tmp / name, sample_hz=20, seed=6, alpha_cache=ALPHA)
    t = trainrun.summarize(res, tmp / name, plots=False)
    assert t["complete"] and t["replicas_equal"], (name, res.get("agent_exit_codes"))
    return t


def test_overlap_and_compression_on_a_rail_pod(tmp_path, figure):
    fab = RailOptimized(servers=4, gpus_per_server=4, spines=2, host_rate_mbps=10, uplink_rate_mbps=20).build()
    with RunState("test-train") as st:
        with LiveFabric(fab, tmp_path / "run", st, datapath=chosen_datapath(),
                        switch_queue=lambda r: PortQueue(r, buffer_packets=64),
                        host_queue=lambda r: PortQueue(r, buffer_packets=HOST_QUEUE_PACKETS)) as lf:
            warm_up_reachability(lf)
            off = _round(lf, st, tmp_path, "off", overlap=False)
            on = _round(lf, st, tmp_path, "on", overlap=True)
            fp16 = _round(lf, st, tmp_path, "fp16", overlap=False, compression="fp16")
            int8 = _round(lf, st, tmp_path, "int8", overlap=False, compression="int8")
    assert_clean(str(tmp_path / "run"))
    for name, t in (("off", off), ("on", on), ("fp16", fp16), ("int8", int8)):
        print(f"{name}: T {t['time_s']:.3f} s (model {t['model_time_s']:.3f}), compute {t['compute_s']:.3f}, comm "
              f"{t['comm_s']:.3f} (model {t['model_comm_s']:.3f}, codec {t['codec_s']:.3f}), sum {t['sum_s']:.3f}, "
              f"max {t['max_s']:.3f}, "
              f"max rel error {t['max_rel_error']:.2e}, within bound {t['all_within_bound']}")
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
    for name, t in (("fp16", fp16), ("int8", int8)):
        figure(f"{name}_comm_share", t["comm_s"] / off["comm_s"])
        figure(f"{name}_codec_share", t["codec_s"] / t["comm_s"])
        pred[name] = figure(f"{name}_over_prediction", (t["comm_s"] - t["codec_s"]) / (t["model_comm_s"] + excess))
    # Calibrated on this machine kind (2026-12-05): 10 runs of this test beside a CPU-heavy process
    # (a plain pytest loop with a busy process beside it), min / median / max (mean -/+ 3.3 sd):
    #   overlap off, T / (compute + comm)        1.020 / 1.031 / 1.045  (1.002 .. 1.060)
    #   overlap on,  T / max(compute, comm)      1.079 / 1.096 / 1.122  (1.044 .. 1.150)
    #   fp16: comm / uncompressed comm           0.587 / 0.675 / 0.731; encoding and decoding 2% of it
    #   int8: comm / uncompressed comm           0.381 / 0.476 / 0.523; encoding and decoding 3%
    #   fp16: (comm - codec) / prediction        0.875 / 1.075 / 1.178  (0.789 .. 1.330)
    #   int8: (comm - codec) / prediction        0.759 / 1.117 / 1.232  (0.621 .. 1.534)
    #   comm: int8 below fp16 by 0.094 s or more, fp16 below uncompressed by 0.209 s or more
    # The uncompressed excess over the model was 0.09-0.20 s of 0.77-0.91 s (48 steps per iteration).
    # The 15% bounds on the iteration hold (the overlap one at the band's edge); the
    # compressed rounds fall to 1/ratio of the bytes plus the per-step cost, the limit that takes
    # over: a fifth to a quarter of the uncompressed time here.
    assert 0.85 <= off["time_over_sum"] <= 1.15
    assert 0.98 <= on["time_over_max"] <= 1.15
    assert 0.78 <= pred["fp16"] <= 1.33
    assert 0.60 <= pred["int8"] <= 1.55
    assert int8["comm_s"] < fp16["comm_s"] < off["comm_s"]
