"""A straggler in a ring AllReduce: a degraded link on the ring slows the whole collective to the
alpha-beta model's prediction with that link's rate as B, and the step timings name the ranks on
either side of it. Fat-Tree k=4 at 2 Mbit/s (as the collective model's tests), 8 ranks on h1..h8,
kernel TCP; the same fabric healthy, then with h5's downlink (p1e1 -> h5, which the ring's
transfer rank 3 -> rank 4 crosses whatever the hash) at half its rate, injected through the
controller's REST API as a run does."""

import pytest

from controller.faults import capacity_overrides, parse_fault
from experiments.workloads.collective import agents as coll_agents, plan as coll_plan, summary as coll_summary
from experiments.fabric import LiveFabric
from experiments.live import warm_up_reachability
from experiments.model import Collective
from experiments.state import RunState
from topologies.fattree import FatTree

from .conftest import assert_clean, chosen_datapath
from .test_collective_model import host_queue, switch_queue

pytestmark = pytest.mark.lane("host", reason="measures against a model: kernel TCP between namespaces does not "
                                             "depend on the datapath (the injector's mechanisms run in both lanes)")

RATE_MBPS = 2.0
FAULT = {"kind": "degrade", "link": "p1e1->h5", "rate_fraction": 0.5}


def ring(lf, st, tmp, hosts, capacity=None) -> dict:
    coll = Collective(kind="allreduce", hosts=hosts, ranks=len(hosts), placement="local", size_bytes=262144,
                      repeat=2, init="seeded", timeout_s=300)
    res = coll_agents.run_round(lf, st, coll, tmp, sample_hz=20, seed=5, capacity_mbps=capacity)
    (row,) = coll_summary.summarize(res, tmp)["sizes"]
    assert row["exact"] and row["traced_model_time_s"], row
    return row


def test_a_degraded_link_slows_the_ring_to_the_model_and_the_steps_name_its_ranks(tmp_path, figure):
    fab = FatTree(k=4, host_rate_mbps=RATE_MBPS, edge_agg_rate_mbps=RATE_MBPS, agg_core_rate_mbps=RATE_MBPS).build()
    hosts = coll_plan.place_ranks(fab, 8, "local")
    assert hosts == [f"h{i}" for i in range(1, 9)]
    fmap = fab.to_map()
    with RunState("test-stragglers") as st:
        with LiveFabric(fab, tmp_path / "run", st, datapath=chosen_datapath(),
                        switch_queue=switch_queue, host_queue=host_queue) as lf:
            warm_up_reachability(lf)
            healthy = ring(lf, st, tmp_path / "healthy", hosts)
            lf.api.call("POST", "/faults", FAULT)
            try:
                slow = ring(lf, st, tmp_path / "degraded", hosts,
                            capacity_overrides(fmap, [parse_fault(fmap, FAULT)]))
            finally:
                (rec,) = lf.api.call("DELETE", "/faults")["removed"]
    assert_clean(str(tmp_path / "run"))
    print(f"healthy: T {healthy['time_s']:.2f} s, traced model {healthy['traced_model_time_s']:.2f} s, busbw "
          f"{healthy['busbw_bps'] / 1e6:.3f} Mbit/s, balance {healthy['balance']:.2f}, stragglers {healthy['stragglers']}")
    print(f"degraded: T {slow['time_s']:.2f} s, traced model {slow['traced_model_time_s']:.2f} s at B "
          f"{slow['traced_rate_bps'] / 1e6:.3f} Mbit/s, busbw {slow['busbw_bps'] / 1e6:.3f} Mbit/s, balance "
          f"{slow['balance']:.2f} (worst step {slow['step_balance_max']:.2f}), stragglers {slow['stragglers']}")
    assert rec["rates"]["p1e1-eth1"]["restored"] is True
    # the model's B is the degraded link's rate (its TCP payload share)
    assert slow["traced_rate_bps"] == pytest.approx(healthy["traced_rate_bps"] / 2, rel=0.01)
    # 10 runs beside a CPU load (2026-12-04): 1.098 / 1.126 / 1.137 (mean 1.124, sd 0.011). The issue
    # asks for 15%: every run met it, but a run of a correct build falls above 1.15 about once in a
    # hundred (1-in-1000 prediction bound 1.162), so the bound is 1.17. The healthy ring measured
    # 1.002 / 1.027 / 1.040 of its model: TCP through the degraded port's 20-packet buffer at 1 Mbit/s
    # costs about 10% more than the model's payload rate
    ratio = figure("degraded_over_model", slow["time_s"] / slow["traced_model_time_s"])
    assert 0.85 <= ratio <= 1.17, ratio
    figure("healthy_over_model", healthy["time_s"] / healthy["traced_model_time_s"])
    # the slowest transfer of most steps is rank 3 -> rank 4, across the degraded link: 10 runs beside a
    # CPU load, 0.786 / 0.929 / 0.964 of the steps (mean 0.907, sd 0.061; 1-in-1000 bound 0.70)
    top, share = slow["stragglers"].split(",")[0].split()
    steps_slowest, steps = map(int, share.split("/"))
    figure("straggler_share", steps_slowest / steps)
    assert top == "3:h4->4:h5" and steps_slowest >= 0.65 * steps, slow["stragglers"]
