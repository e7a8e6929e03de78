"""GPU servers on a rail-optimised pod, over kernel TCP: the shipped scenario
(experiments/scenarios/hierarchical-rail.yaml, `make hierarchical`, lab 5's second run) at its
1 MiB size only, as this test was calibrated, once per session (conftest's
``hierarchical_rail_run``): 4 servers x 4 GPUs, one NIC per GPU at 10 Mbit/s, NVLink at the
textbook's 12x the NIC rate (outside the fabric). The same AllReduce of real float32 arrays as
one flat ring over the 16 GPUs and as the hierarchical AllReduce: both exact on every rank with the transfers their schedules predict, and the hierarchical one faster
by about the factor the models predict (the flat ring's model on the paths this run's
connections took: its server-crossing hops meet on the spines), with the bytes each sends through
the network."""

import json

import pytest

from common import hierarchical as H
from experiments.labs.base import round_folder

from .conftest import assert_clean

pytestmark = pytest.mark.lane("host", reason="measures against a model: the emulated CPU cannot pace 16 ranks")

SIZE_BYTES = 1 << 20


def _row(run, name: str) -> dict:
    """Round ``name``'s collective.csv row of SIZE_BYTES, with the round's NVLink alpha."""
    c = json.loads((round_folder(run, name) / "summary.json").read_text())["collective"]
    (row,) = [r for r in c["sizes"] if r["size_bytes"] == SIZE_BYTES]
    assert c["all_exact"] and row["exact"] and row["traced_error"] is None, (name, row)
    return {**row, "alpha_nvlink_s": c["alpha_nvlink_s"]}


def test_hierarchical_beats_the_flat_ring_on_a_rail_pod(hierarchical_rail_run, figure):
    _p, run = hierarchical_rail_run
    flat, hier = _row(run, "flat-ring"), _row(run, "hierarchical")
    assert_clean(str(run))
    layout = [[4 * i + j for j in range(4)] for i in range(4)]
    # transfers: the flat ring's 2N(N-1); the hierarchical one's 2(G-1) NVLink and 2(S-1) rail steps of N moves
    assert flat["transfers"] == flat["expected_transfers"] == 2 * 16 * 15
    assert hier["transfers"] == hier["expected_transfers"] == sum(
        len(s) for s in H.hierarchical_moves(layout, 16)) == 16 * (2 * 3 + 2 * 3)
    # bytes through the fabric: the flat ring's S server-crossing hops of 2(N-1) D/N each; the
    # hierarchical one's 2(S-1) D in all, 2(S-1) D/(G S) from each NIC
    assert flat["network_bytes"] == 4 * 2 * 15 * SIZE_BYTES / 16
    assert flat["network_bytes_max_rank"] == 2 * 15 * SIZE_BYTES / 16
    assert hier["network_bytes"] == 6 * SIZE_BYTES and hier["network_bytes_max_rank"] == 6 * SIZE_BYTES / 16
    assert flat["network_bytes"] + flat["nvlink_bytes"] == 16 * 30 * SIZE_BYTES / 16
    speedup = flat["time_s"] / hier["time_s"]
    model_speedup = flat["traced_model_time_s"] / hier["traced_model_time_s"]
    print(f"flat ring T {flat['time_s']:.3f} s (traced model {flat['traced_model_time_s']:.3f}, B "
          f"{flat['traced_rate_bps'] / 1e6:.2f} Mbit/s); hierarchical T {hier['time_s']:.3f} s (model "
          f"{hier['traced_model_time_s']:.3f}, rail B {hier['traced_rate_bps'] / 1e6:.2f}, NVLink alpha "
          f"{1e3 * hier['alpha_nvlink_s']:.2f} ms, achieved {hier['nvlink_achieved_bps'] / 1e6:.1f} of "
          f"{hier['nvlink_rate_bps'] / 1e6:.0f} Mbit/s); speedup {speedup:.2f}, model {model_speedup:.2f}")
    figure("speedup", speedup)
    figure("speedup_over_model", speedup / model_speedup)
    figure("hier_time_over_model", hier["time_s"] / hier["traced_model_time_s"])
    figure("flat_time_over_model", flat["time_s"] / flat["traced_model_time_s"])
    figure("nvlink_achieved_over_target", hier["nvlink_achieved_bps"] / hier["nvlink_rate_bps"])
    # Calibrated on this machine kind (2026-12-05): 10 runs of this test's earlier, in-process version
    # (1 MiB only, the same pod) beside a CPU-heavy process (a plain pytest loop with a busy process
    # beside it). The flat ring's server-crossing hops hash onto the spines, 4 per rail pair: B 9.56
    # Mbit/s when they split 2 and 2 (model speedup 3.84), 6.38 when 3 share an uplink (5.66); the
    # traced model follows this run's paths.
    #   speedup                    3.146 / 3.458 / 5.534
    #   speedup / model            0.818 / 0.893 / 0.979  (sd 0.051)
    #   hierarchical T / model     1.139 / 1.153 / 1.243  (sd 0.036; each rail step is 45 frames
    #                                                      of a TCP window that restarts per step)
    #   flat ring T / traced model 1.016 / 1.032 / 1.116  (sd 0.036)
    #   NVLink achieved / target   0.968 / 0.978 / 0.983
    # The shipped scenario with both its sizes, 3 runs through `fabriclab run` (2026-12-05, lab 5's
    # teacher's guide), at 1 MiB: speedup 5.52 / 5.69 / 7.53, over the model 0.994 / 0.996 / 1.024,
    # hierarchical T / model 1.08 / 1.10 / 1.12, flat / traced model 1.08 / 1.11 / 1.12, NVLink
    # 0.968 / 0.979 / 0.980: within the bounds.
    # Bounds: mean -/+ 3.3 sd (about 1 in 1000 for a normal spread), rounded outward.
    assert speedup > 2.5
    assert 0.70 <= speedup / model_speedup <= 1.08
    assert 0.98 <= hier["time_s"] / hier["traced_model_time_s"] <= 1.30
    assert 0.90 <= flat["time_s"] / flat["traced_model_time_s"] <= 1.16
    assert hier["nvlink_achieved_bps"] >= 0.93 * hier["nvlink_rate_bps"]
