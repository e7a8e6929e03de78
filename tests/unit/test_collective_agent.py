"""The collective agent (traffic.collective) on this machine's loopback, no root: GPU servers whose
ranks talk over the NVLink pipes, servers over TCP; flat ring and hierarchical AllReduce exact."""
import threading
import time

import numpy as np
import pytest

from common import hierarchical as H
from traffic.collective import initial_array, run_collective, server_layout


def _run(tmp_path, servers, gpus, algorithm, elements, per_gpu_hosts, port0):
    """One agent per host (a thread each): per_gpu_hosts puts every rank on a host of its own (a
    NIC per GPU), else a server's ranks share one host (a NIC per server)."""
    n = servers * gpus
    ranks = []
    for r in range(n):
        host = f"h{r + 1}" if per_gpu_hosts else f"h{r // gpus + 1}"
        ranks.append({"rank": r, "host": host, "ip": "127.0.0.1", "port": port0 + r, "server": f"srv{r // gpus + 1}"})
    hosts = sorted({r["host"] for r in ranks}, key=lambda h: int(h[1:]))
    start = time.time() + 0.5
    out = {}

    def agent(h):
        job = {"role": "collective", "kind": "allreduce", "algorithm": algorithm, "ranks": ranks,
               "local_ranks": [r["rank"] for r in ranks if r["host"] == h], "elements": elements,
               "init": "seeded", "seed": 5, "repeat": 2, "out_dir": str(tmp_path), "deadline_unix_s": start + 30,
               "nvlink": {"rate_bps": 400e6, "dir": str(tmp_path / "nvlink")}}
        out[h] = run_collective(job, lambda: start)
    ths = [threading.Thread(target=agent, args=(h,)) for h in hosts]
    for t in ths:
        t.start()
    for t in ths:
        t.join(40)
    return [rec for h in hosts for rec in out[h]["ranks"]]


@pytest.mark.parametrize("algorithm,per_gpu_hosts,port0", [("ring", True, 18100), ("hierarchical", True, 18200),
                                                         ("ring", False, 18300), ("hierarchical", False, 18400)])
def test_ranks_on_servers_reduce_exactly(tmp_path, algorithm, per_gpu_hosts, port0):
    s, g, el = 2, 3, 601
    recs = _run(tmp_path, s, g, algorithm, el, per_gpu_hosts, port0)
    want = np.sum([initial_array(r, el, "seeded", 5) for r in range(s * g)], axis=0)
    assert all(r["error"] is None for r in recs), [r["error"] for r in recs]
    for r in recs:
        assert np.array_equal(np.load(r["array"]), want), r["rank"]
    steps = H.moves(algorithm, "allreduce", [[0, 1, 2], [3, 4, 5]], el)
    assert sum(r["iterations"][-1]["received"] for r in recs) == sum(len(st) for st in steps)
    # only the ranks of other servers were connected over TCP: the rest went over the pipes
    for r in recs:
        assert all(c["dst_rank"] // g != r["rank"] // g for c in r["connections"])
    assert not any((tmp_path / "nvlink").iterdir())


def test_server_layout_groups_ranks_by_server_then_host():
    ranks = [{"rank": 0, "host": "h1"}, {"rank": 1, "host": "h1"}, {"rank": 2, "host": "h2"}, {"rank": 3, "host": "h2"}]
    assert server_layout(ranks) == [[0, 1], [2, 3]]
    ranks = [{"rank": r, "host": f"h{r + 1}", "server": f"srv{r // 2}"} for r in range(4)]
    assert server_layout(ranks) == [[0, 1], [2, 3]]
