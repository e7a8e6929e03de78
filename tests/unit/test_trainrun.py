"""The training results (experiments.workloads.training.run) from real agents' records, no root: the agents of
traffic.training on loopback write their files as on a fabric, and the run's tables, gradient
checks, plots and summary are made from them."""
import json
import threading
import time

import pytest

from common import training as T
from experiments.workloads.training import run as trainrun
from experiments.model import Training
from traffic.training import run_training


def _records(tmp_path, port0, tr: Training):
    """Run tr's iterations on 2 servers x 2 GPUs over loopback; return the ``res`` run_round would."""
    d = tmp_path / "ranks"
    d.mkdir()
    hosts = [f"h{r + 1}" for r in range(4)]
    servers = [f"srv{r // 2}" for r in range(4)]
    ranks = [{"rank": r, "host": hosts[r], "ip": "127.0.0.1", "port": port0 + r, "server": servers[r]} for r in range(4)]
    layers, bk = tr.model_layers(), tr.buckets()
    start = time.time() + 0.3

    def agent(h):
        job = {"role": "training", "ranks": ranks, "local_ranks": [r["rank"] for r in ranks if r["host"] == h],
               "algorithm": tr.algorithm, "layers": [[l.name, l.params_bytes, l.forward_s, l.backward_s] for l in layers],
               "buckets": [[b.index, list(b.layers), b.params_bytes] for b in bk], "iterations": tr.iterations,
               "overlap": tr.overlap, "seed": 2, "out_dir": str(d), "deadline_unix_s": start + 30,
               "compression": {"name": tr.compression, "ratio": tr.topk_ratio if tr.compression == "topk" else None},
               "nvlink": {"rate_bps": 400e6, "dir": str(d / "nvlink")}}
        (d / f"{h}.training.json").write_text(json.dumps(run_training(job, lambda: start)))
    ths = [threading.Thread(target=agent, args=(h,)) for h in hosts]
    for t in ths:
        t.start()
    for t in ths:
        t.join(40)
    from common.compression import make
    codec = make(tr.compression, tr.topk_ratio if tr.compression == "topk" else None)
    return {"hosts": hosts, "kind": "allreduce", "ranks": 4, "algorithm": tr.algorithm, "servers": 2,
            "gpus_per_server": 2, "nic_rate_bps": 50e6, "nvlink_rate_bps": 400e6, "rate_bps": 50e6,
            "alpha_s": 0.001, "alpha_nvlink_s": 0.0005, "layers": [[l.name, l.params_bytes, l.forward_s, l.backward_s]
                                                                    for l in layers],
            "buckets": [[b.index, list(b.layers), b.params_bytes] for b in bk], "overlap": tr.overlap,
            "compression": tr.compression, "ratio": [codec.ratio(b.params_bytes // 4) for b in bk],
            "iterations": tr.iterations, "seed": 2, "records_dir": str(d)}


@pytest.mark.parametrize("compression,port0", [("none", 19000), ("fp16", 19050), ("topk", 19100)])
def test_tables_checks_and_plots_from_real_records(tmp_path, compression, port0):
    tr = Training(model="transformer", params_bytes=400_000, compute_s=0.3, bucket_bytes=100_000, iterations=2,
                  ranks=4, algorithm="hierarchical", compression=compression)
    res = _records(tmp_path, port0, tr)
    res["gradient"] = trainrun.gradient_errors(res)      # as run_round does, before dropping the arrays
    trainrun.drop_arrays(res)
    t = trainrun.summarize(res, tmp_path)
    assert t["complete"] and t["replicas_equal"] and len(t["iterations"]) == 2
    assert t["all_exact"] is (compression == "none")
    assert t["all_within_bound"] if compression != "topk" else t["max_rel_error"] > 0
    it = t["iterations"][-1]
    assert it["compute_s"] >= 0.3 - 1e-3 and it["time_s"] >= it["compute_s"]
    assert it["model_time_s"] == pytest.approx(T.timeline(tr.model_layers(), tr.buckets(), [
        trainrun.model_comm_s(res, b.params_bytes, r) for b, r in zip(tr.buckets(), res["ratio"])], True)["iteration_s"])
    for f in ("training.csv", "training_timeline.csv", "gradient_error.csv", "training_timeline.png"):
        assert (tmp_path / f).exists(), f
    assert not list((tmp_path / "ranks").glob("*.npy"))          # the checked arrays are dropped
    assert "training (hierarchical, 2 servers, overlap on" in trainrun.format_line(t)
    if compression == "fp16":     # about half the bytes of the uncompressed run of the same model
        assert t["ratio"] == pytest.approx(2.0)


def test_rounds_plot(tmp_path):
    from experiments import plot
    rows = [{"round": "a", "time_s": 2, "model_time_s": 1.9, "compute_s": 1.5, "comm_s": 1, "max_rel_error": None},
            {"round": "b", "time_s": 1.6, "model_time_s": 1.6, "compute_s": 1.5, "comm_s": 0.5, "max_rel_error": 1e-4}]
    assert plot.plot_training_rounds(rows, tmp_path / "r.png").exists()
