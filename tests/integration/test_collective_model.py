"""Issue 8 against the alpha-beta model, on real fabrics over kernel TCP:
- Fat-Tree k=4, 16 ranks, 1 MiB per rank: exact on every rank with 2N(N-1) transfers; busbw near the host link
  rate and T near the model T = 2(N-1)(alpha + D/(N B)) (alpha measured by a small run, B from the
  hash-ECMP fluid model), within bounds calibrated beside a CPU-heavy process (below);
- Spine-Leaf 3:1 (the shipped placement scenario's run, which lab 3 reads too): a ring whose every
  hop crosses the spines takes the time the model predicts on the paths the switches gave this
  run's connections, and is slower than the rack-aware ring by about the factor the model predicts
  for the two placements (calibrated bounds, below)."""

import json

import pytest

from experiments.state import RunState
from controller.dataplane.tcqdisc import PortQueue
from experiments.workloads.collective import agents as coll_agents, plan as coll_plan, summary as coll_summary
from experiments.fabric import LiveFabric
from experiments.context import HOST_QUEUE_PACKETS
from experiments.live import warm_up_reachability
from experiments.model import Collective
from topologies.fattree import FatTree

from .conftest import assert_clean, chosen_datapath

pytestmark = pytest.mark.lane("host", reason="measures against a model: kernel TCP between namespaces does not "
                                             "depend on the datapath, and the emulated CPU cannot forward 16 ranks")


#: Switch buffer per port. Every host both sends (to its successor) and receives (from its
#: predecessor), so each flow's ACKs queue behind another flow's data; with 100-packet buffers
#: (0.6 s at 2 Mbit/s) that inflated every RTT and the 16-rank ring reached 55-70% of the link,
#: with 20 (0.12 s, shallow as data-centre switch buffers are per port) 85-90% (measured
#: 2026-12-01, this machine; a 10-packet buffer measured the same as 20).
BUFFER_PACKETS = 20


def switch_queue(rate_mbps: float) -> PortQueue:
    """Switch ports: :data:`BUFFER_PACKETS` at the link's rate."""
    return PortQueue(rate_mbps, buffer_packets=BUFFER_PACKETS)


def host_queue(rate_mbps: float) -> PortQueue:
    """Host NICs shaped to their link's rate, as experiments shape them (a host that sends at the
    veth's speed into the edge switch makes the userspace datapath drop before the switch's queue)."""
    return PortQueue(rate_mbps, buffer_packets=HOST_QUEUE_PACKETS)


def measure(lf, st, tmp, hosts, size_bytes, repeat=2) -> dict:
    """One AllReduce round as experiments run it (:func:`experiments.coll_agents.run_round`: alpha from
    a small run, then ``repeat`` iterations of ``size_bytes`` per rank, then
    :func:`experiments.coll_summary.summarize`): the median T, busbw, the model's T (B: the hash-ECMP
    bottleneck's TCP payload rate, a median over hash outcomes) and the model's T on the paths
    this run's connections took (traced from Open vSwitch's tables), exactness and transfers."""
    coll = Collective(kind="allreduce", hosts=hosts, ranks=len(hosts), placement="local", size_bytes=size_bytes,
                      repeat=repeat, init="seeded", timeout_s=300)
    res = coll_agents.run_round(lf, st, coll, tmp, sample_hz=20, seed=5)
    (row,) = coll_summary.summarize(res, tmp)["sizes"]
    (run,) = res["runs"]
    assert row["exact"] and run["traced_error"] is None, (run["errors"], run["agent_exit_codes"], run["traced_error"])
    return {"exact": row["exact"], "transfers": row["transfers"], "expected": row["expected_transfers"],
            "time_s": row["time_s"], "model_time_s": row["model_time_s"], "alpha_s": row["alpha_s"],
            "rate_bps": row["rate_bps"], "link_rate_bps": res["link_rate_bps"],
            "traced_link_rate_bps": run["traced_link_rate_bps"], "traced_model_time_s": row["traced_model_time_s"],
            "busbw_bps": row["busbw_bps"], "balance": row["balance"],
            "times_s": [x["time_s"] for x in run["iterations"]]}


def test_fattree_16_ranks_exact_near_line_rate_and_the_model(tmp_path, figure):
    # 2 Mbit/s links: the Fat-Tree's 16 hosts x 5 switch hops stay inside what one ovs-vswitchd
    # core forwards on the userspace datapath (docs/results.md, "Fat-Tree against Spine-Leaf")
    rate_mbps = 2.0
    fab = FatTree(k=4, host_rate_mbps=rate_mbps, edge_agg_rate_mbps=rate_mbps, agg_core_rate_mbps=rate_mbps).build()
    hosts = coll_plan.place_ranks(fab, 16, "local")
    with RunState("test-coll-ft") as st:
        with LiveFabric(fab, tmp_path / "run", st, datapath=chosen_datapath(),
                        switch_queue=switch_queue, host_queue=host_queue) as lf:
            warm_up_reachability(lf)
            m = measure(lf, st, tmp_path, hosts, 1 << 20)
    assert_clean(str(tmp_path / "run"))
    print(f"Fat-Tree k=4, 16 ranks, 1 MiB per rank at {rate_mbps} Mbit/s: T {m['time_s']:.2f} s, model "
          f"{m['model_time_s']:.2f} s (alpha {m['alpha_s'] * 1e3:.1f} ms, B {m['rate_bps'] / 1e6:.2f} Mbit/s), "
          f"busbw {m['busbw_bps'] / 1e6:.3f} Mbit/s = {m['busbw_bps'] / (rate_mbps * 1e6):.1%} of the link, "
          f"balance {m['balance']:.3f}, iterations {[round(x, 2) for x in m['times_s']]}")
    figure("busbw_fraction_of_link", m["busbw_bps"] / (rate_mbps * 1e6))
    figure("time_over_model", m["time_s"] / m["model_time_s"])
    assert m["exact"] and m["transfers"] == m["expected"] == 2 * 16 * 15
    # the rack-local ring cannot collide: the model's median and this run's traced paths agree
    assert m["link_rate_bps"] == pytest.approx(rate_mbps * 1e6) == m["traced_link_rate_bps"]
    # Calibrated on this machine kind, pooling every run of a correct build (2026-12-03): make
    # test-repeat N=10 K='fattree_16_ranks' beside a CPU-heavy process (busbw / link 0.773 / 0.839 /
    # 0.889, T / model 1.070 / 1.135 / 1.232), 8 quiet runs of the same test (0.759 .. 0.863) and 3
    # full host lanes, where it runs after the other collective tests and measured lowest (busbw
    # 0.697, 0.750, 0.830; T / model 1.368, 1.271, 1.148). Pooled: busbw n 21, min 0.697, median
    # 0.816, max 0.889; T / model n 13, 1.070 / 1.148 / 1.368. The bounds are the pooled runs'
    # 1-in-1000 prediction bounds (0.631; 0.823 .. 1.516). The bounds of 2026-12-02 (0.72; 0.91 ..
    # 1.29, from 10 loaded runs alone) failed one full host lane (0.697, 1.368). Issue 8's 85% and
    # 15% hold on a quiet machine (87.4-89.4%, 1.06-1.09x; make bench-collective); the forwarding
    # thread shares the two cores with everything else. 55-70% came with 100-packet buffers.
    # 1 MiB per rank since 2026-12-07 (2 MiB before; 17 s less: the host lane's budget): make
    # test-repeat N=10 K='fattree_16_ranks' beside a CPU-heavy process, busbw / link 0.871 / 0.892 /
    # 0.906, T / model 1.035 / 1.048 / 1.069 (prediction bounds 0.845; 1.003 .. 1.094), the test 31-34
    # s: inside the pooled bounds above, which are kept for a full host lane's lows.
    assert m["busbw_bps"] >= 0.63 * rate_mbps * 1e6
    assert 0.82 <= m["time_s"] / m["model_time_s"] <= 1.52


#: The spine-crossing test's size: the shipped placement scenario's largest, per rank.
PLACEMENT_SIZE_BYTES = 2 << 20


def test_spine_crossing_ring_is_slower_by_the_predicted_factor(allreduce_placement_run, figure):
    """The shipped placement scenario (`make allreduce`, lab 3's run: 2 spines x 4 leaves x 6 hosts,
    10 Mbit/s everywhere, 3:1; 20-packet buffers): the same 8 ranks rack-local, then spread so that
    every hop of the ring crosses the spines. At its largest size the spread ring takes the time the
    model predicts on the paths the switches gave its connections, and is slower than the rack-local
    ring by about the factor the model predicts for the two placements on their traced paths."""
    _p, out = allreduce_placement_run
    sec, row = {}, {}
    for placement, folder in (("local", "01-rack-local"), ("spread", "02-spread")):
        sec[placement] = json.loads((out / "rounds" / folder / "summary.json").read_text())["collective"]
        (row[placement],) = [r for r in sec[placement]["sizes"] if r["size_bytes"] == PLACEMENT_SIZE_BYTES]
    loc, spr = row["local"], row["spread"]
    assert loc["exact"] and spr["exact"] and loc["traced_error"] is None and spr["traced_error"] is None
    # the prediction for this run: the model on the paths its connections took (which uplinks
    # the spread ring's flows share is the hash's draw; the hash model's median is beside it)
    predicted = spr["traced_model_time_s"] / loc["traced_model_time_s"]
    measured = spr["time_s"] / loc["time_s"]
    print(f"8 ranks, 2 MiB per rank: rack-local T {loc['time_s']:.3f} s (model {loc['traced_model_time_s']:.3f} on "
          f"its paths, B {loc['traced_rate_bps'] / 1e6:.2f} Mbit/s of payload), spread T {spr['time_s']:.3f} s "
          f"(model {spr['traced_model_time_s']:.3f}, B {spr['traced_rate_bps'] / 1e6:.2f}); spread / local "
          f"predicted {predicted:.2f}, measured {measured:.2f}; the hash model's median predicts "
          f"{spr['model_time_s'] / loc['model_time_s']:.2f}")
    figure("measured_over_predicted", measured / predicted)
    figure("spread_time_over_model", spr["time_s"] / spr["traced_model_time_s"])
    figure("local_time_over_model", loc["time_s"] / loc["traced_model_time_s"])
    # rack-local: one transfer per direction leaves a leaf, on the paths traced and in the hash model
    assert loc["traced_rate_bps"] == pytest.approx(sec["local"]["rate_bps"])
    assert sec["local"]["link_rate_bps"] == pytest.approx(10e6)
    assert sec["spread"]["rate_bps"] < sec["local"]["rate_bps"]     # the hash model: the spread ring shares uplinks
    # Calibrated on this run (make test-repeat N=10 K='spine_crossing or allreduce_rounds_through_the_cli'
    # beside a CPU-heavy process, 2026-12-07; min / median / max): the spread ring at 1.057 / 1.084 /
    # 1.173x its model on its traced paths (1-in-1000 prediction bounds 0.92 .. 1.27), the rack-local
    # ring at 1.033 / 1.038 / 1.054x, measured over predicted spread / local 1.010 / 1.039 / 1.136
    # (0.86 .. 1.24). The bounds are those calibrated on 2026-12-02 for a test run of its own at 1 MiB
    # per rank, median of 5 (spread 1.131 / 1.178 / 1.266x; ratio 0.871 / 1.001 / 1.173, where the
    # rack-local ring, which asks the one forwarding thread for the most packets, ran either near its
    # model or 1.19-1.33x run by run): the model is held to the spread ring's own time, and the ratio
    # bounded where a full host lane may put it. Until 2026-12-07 this test built that fabric itself
    # (41 s of the host lane).
    assert 0.99 <= spr["time_s"] / spr["traced_model_time_s"] <= 1.39, (spr, predicted)
    assert 0.50 <= measured / predicted <= 1.52
