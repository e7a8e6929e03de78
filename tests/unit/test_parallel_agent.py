"""The mixed-parallel agent (traffic.parallel) on this machine's loopback, no root: 2 servers x 4
GPUs as tensor 2 x pipeline 2 x data 2; every reduction exact, and every byte each rank sends,
counted by kind and destination, equals what the plan (common.parallelism.flows) says."""
import threading
import time

import pytest

from common import parallelism as P
from common import training as T
from traffic.parallel import run_parallel

LAYERS = [T.Layer(f"l{i}", 64_000, 0.01, 0.02) for i in range(4)]


def _run(tmp_path, port0, overlap, iterations=2):
    s, g = 2, 4
    plan = P.Plan(s * g, tensor=2, pipeline=2, microbatches=2, activation_bytes=32_768)
    ranks = [{"rank": r, "host": f"h{r // g + 1}", "ip": "127.0.0.1", "port": port0 + r, "server": f"srv{r // g}"}
             for r in range(s * g)]
    start = time.time() + 0.3
    out = {}

    def agent(h):
        job = {"role": "parallel", "ranks": ranks, "local_ranks": [r["rank"] for r in ranks if r["host"] == h],
               "plan": {"ranks": plan.ranks, "tensor": plan.tensor, "pipeline": plan.pipeline,
                        "microbatches": plan.microbatches, "activation_bytes": plan.activation_bytes},
               "layers": [[x.name, x.params_bytes, x.forward_s, x.backward_s] for x in LAYERS],
               "bucket_bytes": 40_000, "iterations": iterations, "overlap": overlap, "seed": 3,
               "out_dir": str(tmp_path), "deadline_unix_s": start + 30,
               "nvlink": {"rate_bps": 2e9, "dir": str(tmp_path / "nvlink")}}
        out[h] = run_parallel(job, lambda: start)
    ths = [threading.Thread(target=agent, args=(h,)) for h in ("h1", "h2")]
    for t in ths:
        t.start()
    for t in ths:
        t.join(40)
    return plan, sorted((rec for h in out for rec in out[h]["ranks"]), key=lambda r: r["rank"]), iterations


@pytest.mark.parametrize("overlap,port0", [(False, 18800), (True, 18900)])
def test_mixed_parallel_ranks_are_exact_and_send_what_the_plan_says(tmp_path, overlap, port0):
    plan, recs, its = _run(tmp_path, port0, overlap)
    assert len(recs) == 8 and all(r["error"] is None for r in recs), [r.get("error") for r in recs]
    assert all(r["exact"] == {"tensor": True, "data": True} for r in recs), [r["exact"] for r in recs]
    want = {(f.kind, f.src, f.dst): (f.payload_bytes * its, f.messages * its)
            for f in P.flows(plan, LAYERS, 40_000)}
    got = {(k, r["rank"], d): (b, m) for r in recs for k, d, b, m in r["sent"]}
    assert got == want
    for r in recs:
        for it in r["iterations"]:
            starts = [x[2] for x in it["buckets"]]
            if overlap:
                assert all(s >= rd - 1e-3 for s, rd in zip(starts, [x[1] for x in it["buckets"]]))
            else:
                assert min(starts) >= it["backward_end_unix_s"] - 1e-3
            # compute by time: every microbatch of every layer slept
            mine = P.stage_layers(LAYERS, 2)[r["stage"]]
            compute = sum(LAYERS[i].forward_s + LAYERS[i].backward_s for i in mine)
            assert it["backward_end_unix_s"] - it["begin_unix_s"] >= compute - 1e-3
