"""The collective layer's overhead (issue 8): busbw of a 16-rank ring AllReduce against the same
bytes sent as 16 plain flows on the same paths, measured in the same run on the same fabric.

Fabric: Fat-Tree k=4 (16 hosts), 20-packet switch buffers, every link at --rate-mbps (default 2: at 10 Mbit/s the 16
hosts x 5 switch hops exceed what one ovs-vswitchd core forwards on the userspace datapath,
see README "Comparing topologies"). Ranks 0..15 on h1..h16 (rack-local ring: one transfer per
direction leaves each edge switch, so no two of the ring's connections can share a link).

Each run does, on the same 16 TCP connections (so on the same hashed paths):
  ring:   the NCCL-style ring AllReduce of D bytes per rank (2 x 15 steps of D/16, each step
          waiting for the previous step's chunk, the received chunks added), checked exact;
  stream: every rank sends the same 2 x 15 chunks back to back to its successor with no step
          dependency and nothing reduced (traffic.collective.Rank._stream_iteration).
busbw = (D / T) x 2(N-1)/N for both (NCCL-tests' definition; for the stream T is the time the
same bytes took). Prints per-run figures, medians, and the ratio ring / stream (target >= 0.9),
beside the link rate and the alpha-beta model's busbw.

``sudo .venv/bin/python bench/bench_collective.py [--runs 3] [--size-bytes 2097152] [--rate-mbps 2]``
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from common import collectives as C  # noqa: E402
from experiments import probe  # noqa: E402
from experiments.state import RunState  # noqa: E402
from controller.dataplane.tcqdisc import PortQueue  # noqa: E402
from experiments.workloads.collective import agents as coll_agents, plan as coll_plan, summary as coll_summary  # noqa: E402
from experiments.fabric import LiveFabric  # noqa: E402
from experiments.context import HOST_QUEUE_PACKETS  # noqa: E402
from experiments.live import warm_up_reachability  # noqa: E402
from topologies.fattree import FatTree  # noqa: E402

RANKS = 16
#: Switch buffer per port in packets; shallow, as tests/integration/test_collective_model.py
#: explains (with 100 each flow's ACKs wait up to 0.6 s behind another flow's data).
BUFFER_PACKETS = 20
TARGET_RATIO = 0.9


def one(lf, st, hosts, elements, out: Path, stream: bool) -> dict:
    """One ring or stream run: its timing (coll_summary.timings) and, for the ring, exactness.
    Raises SystemExit when an agent fails or the ring's result is wrong."""
    recs, codes = coll_agents.run(lf, st, hosts, "allreduce", elements, out, timeout_s=600, stream=stream)
    if any(codes.values()) or not all(recs) or any(r["error"] for r in recs):
        raise SystemExit(f"{'stream' if stream else 'ring'} run failed: {codes} "
                         f"{[r and r['error'] for r in recs]}")
    if not stream:
        chk = coll_summary.check_results(recs, "allreduce", elements)
        if not chk["exact"] or chk["transfers"] != chk["expected_transfers"]:
            raise SystemExit(f"ring result wrong: {chk}")
    (t,) = coll_summary.timings(recs, "allreduce", elements)
    return t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--size-bytes", type=int, default=2 << 20, help="D, bytes per rank (float32 elements x 4)")
    ap.add_argument("--rate-mbps", type=float, default=2.0)
    a = ap.parse_args()
    r = a.rate_mbps
    fab = FatTree(k=4, host_rate_mbps=r, edge_agg_rate_mbps=r, agg_core_rate_mbps=r).build()
    env = probe.probe()
    hosts = coll_plan.place_ranks(fab, RANKS, "local")
    b_hash = coll_plan.bottleneck_rate_bps(fab.to_map(), hosts, "allreduce", "hash")
    elements = a.size_bytes // 4
    rows = []
    with tempfile.TemporaryDirectory(prefix="fabriclab-bench-coll-") as tmp, RunState("bench-collective") as st:
        tmp = Path(tmp)
        with LiveFabric(fab, tmp / "run", st, datapath="kernel" if env["datapath"] == "kernel" else "user",
                        switch_queue=lambda rate: PortQueue(rate, buffer_packets=BUFFER_PACKETS),
                        host_queue=lambda rate: PortQueue(rate, buffer_packets=HOST_QUEUE_PACKETS)) as lf:
            warm_up_reachability(lf)
            for i in range(a.runs):
                # alternate the order so neither kind always runs first
                order = (False, True) if i % 2 == 0 else (True, False)
                got = {}
                for stream in order:
                    got[stream] = one(lf, st, hosts, elements, tmp / f"run{i}-{'stream' if stream else 'ring'}", stream)
                    time.sleep(1)
                row = {"ring_time_s": got[False]["time_s"], "ring_busbw_bps": got[False]["busbw_bps"],
                       "stream_time_s": got[True]["time_s"], "stream_busbw_bps": got[True]["busbw_bps"],
                       "ring_balance": got[False]["balance"]}
                row["ratio"] = row["ring_busbw_bps"] / row["stream_busbw_bps"]
                rows.append(row)
                print(f"run {i + 1}: ring T {row['ring_time_s']:.2f} s, busbw {row['ring_busbw_bps'] / 1e6:.3f} Mbit/s; "
                      f"stream T {row['stream_time_s']:.2f} s, busbw {row['stream_busbw_bps'] / 1e6:.3f} Mbit/s; "
                      f"ratio {row['ratio']:.3f}", flush=True)
    med = {k: statistics.median(x[k] for x in rows) for k in rows[0]}
    model_t = C.model_time_s("allreduce", RANKS, 4 * elements, 0.0, b_hash * coll_plan.TCP_PAYLOAD_FRACTION)
    res = {"datapath": env["datapath"], "kernel": env["kernel"], "ranks": RANKS, "size_bytes": 4 * elements,
           "link_rate_bps": r * 1e6, "model_rate_bps_hash_ecmp": b_hash,
           "model_busbw_bps_alpha0": C.bandwidths("allreduce", RANKS, 4 * elements, model_t)["busbw_bps"],
           "runs": rows, "median": med, "target_ratio": TARGET_RATIO, "target_met": med["ratio"] >= TARGET_RATIO}
    print(json.dumps(res, indent=1))
    print(f"16-rank ring AllReduce of {4 * elements} B per rank on Fat-Tree k=4 at {r:g} Mbit/s ({env['datapath']} "
          f"datapath), median of {len(rows)} runs: ring busbw {med['ring_busbw_bps'] / 1e6:.3f} Mbit/s "
          f"({med['ring_busbw_bps'] / (r * 1e6):.1%} of the link), 16 plain flows on the same connections "
          f"{med['stream_busbw_bps'] / 1e6:.3f} Mbit/s; ratio {med['ratio']:.3f} "
          f"(target >= {TARGET_RATIO}: {'met' if res['target_met'] else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
