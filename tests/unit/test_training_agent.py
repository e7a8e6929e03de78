"""The training agent (traffic.training) on this machine's loopback, no root: ranks on GPU servers
run iterations with compute emulated by time and reduce real gradient buckets, exactly without
compression and within the compressor's bound with it; overlap changes the iteration time as
the model says."""
import threading
import time

import numpy as np
import pytest

from common import training as T
from common.compression import make
from common.hierarchical import hierarchical_moves
from traffic.training import gradient, run_training


def _run(tmp_path, port0, overlap, compression="none", iterations=2, algorithm="hierarchical"):
    s, g = 2, 2
    ranks = [{"rank": r, "host": f"h{r + 1}", "ip": "127.0.0.1", "port": port0 + r, "server": f"srv{r // g}"}
             for r in range(s * g)]
    layers = [T.Layer(f"l{i}", 40_000, 0.02, 0.04) for i in range(6)]
    bk = T.buckets(layers, 80_000)
    start = time.time() + 0.3
    out = {}

    def agent(h):
        job = {"role": "training", "ranks": ranks, "local_ranks": [r["rank"] for r in ranks if r["host"] == h],
               "algorithm": algorithm, "layers": [[l.name, l.params_bytes, l.forward_s, l.backward_s] for l in layers],
               "buckets": [[b.index, list(b.layers), b.params_bytes] for b in bk], "iterations": iterations,
               "overlap": overlap, "seed": 4, "compression": {"name": compression, "ratio": None},
               "out_dir": str(tmp_path), "deadline_unix_s": start + 30,
               "nvlink": {"rate_bps": 800e6, "dir": str(tmp_path / "nvlink")}}
        out[h] = run_training(job, lambda: start)
    ths = [threading.Thread(target=agent, args=(r["host"],)) for r in ranks]
    for t in ths:
        t.start()
    for t in ths:
        t.join(40)
    return [rec for h in sorted(out) for rec in out[h]["ranks"]], layers, bk


def _exact(bk, it, n, b):
    return np.sum([gradient(4, r, it, b, bk[b].params_bytes // 4).astype(np.float64) for r in range(n)], axis=0)


@pytest.mark.parametrize("overlap,port0", [(False, 18500), (True, 18600)])
def test_uncompressed_buckets_are_exact_and_overlap_hides_communication(tmp_path, overlap, port0):
    recs, layers, bk = _run(tmp_path, port0, overlap)
    assert all(r["error"] is None for r in recs), [r["error"] for r in recs]
    for b in range(len(bk)):
        got = np.load(recs[0]["arrays"][str(b)])
        assert np.array_equal(got, _exact(bk, 1, 4, b))
        assert len({r["sums"][str(b)] for r in recs}) == 1          # every replica the same
    for r in recs:
        for it in r["iterations"]:
            assert [x[0] for x in it["buckets"]] == [b.index for b in bk]       # in bucket order
            ready = [x[1] for x in it["buckets"]]
            starts = [x[2] for x in it["buckets"]]
            if overlap:     # a bucket starts before backward ends (but never before it is ready)
                assert starts[0] < it["backward_end_unix_s"]
                assert all(s >= rd - 1e-3 for s, rd in zip(starts, ready))
            else:
                assert min(starts) >= it["backward_end_unix_s"] - 1e-3
            compute = sum(l.forward_s + l.backward_s for l in layers)
            assert it["backward_end_unix_s"] - it["begin_unix_s"] >= compute - 1e-3


def test_int8_error_within_its_bound_and_fewer_bytes(tmp_path):
    recs, layers, bk = _run(tmp_path, 18700, True, compression="int8")
    assert all(r["error"] is None for r in recs), [r["error"] for r in recs]
    codec = make("int8")
    for b in range(len(bk)):
        n = bk[b].params_bytes // 4
        got = np.load(recs[0]["arrays"][str(b)]).astype(np.float64)
        err = np.abs(got - _exact(bk, 1, 4, b))
        bound = np.zeros(n)
        for r in recs:
            for lo, hi, m in r["bounds"][str(b)]:
                bound[lo:hi] += m
        assert np.all(err <= bound + 1e-6) and np.max(err) > 0
        assert len({r["sums"][str(b)] for r in recs}) == 1
    # the wire bytes per bucket are the compressor's, about a quarter of float32's
    sent = sum(x[4] for r in recs for x in r["iterations"][-1]["buckets"])
    plain = sum(4 * x.elements for b in bk for st in hierarchical_moves([[0, 1], [2, 3]], b.params_bytes // 4)
                for x in st)
    assert sent < 0.3 * plain and codec.ratio(1000) > 3.9
