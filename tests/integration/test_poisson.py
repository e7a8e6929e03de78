"""Poisson web-search arrivals end to end: the shipped scenario (experiments/scenarios/websearch.yaml:
Poisson arrivals at 50% of every host link between random host pairs, DCTCP's web-search sizes
divided by 5, on a 1:1 Spine-Leaf of 24 hosts at 10 Mbit/s) at 20% load and cut to about 10 s
of arrivals, through the real CLI. Every flow completes; each sender connects its flows on time; the
load the flows offered and the fabric carried is near 20%; the slowdown of every flow longer than one
segment is at least about 1 (its ideal is a lower bound: the idle handshake and one-way trip as
measured before the run, every frame but the last at the bottleneck's rate); the by-size buckets
are there, every planned flow counted in its bucket.

Bounds beside a measured figure come from 10 runs beside a CPU load (``make test-repeat N=10
K=test_poisson_websearch``, 2026-12-07, at 20% load), quoted where they are asserted."""
import csv
import json

import pytest
import yaml

from .conftest import ROOT, assert_clean, run_accepting_cpu_shortfall

pytestmark = pytest.mark.lane("host", reason="24 hosts at 20% load is about 130 Mbit/s of switch hops: more than "
                                             "the emulated CPU forwards")

#: The load of every host link the test offers. The scenario's 50% is about 330 Mbit/s of switch
#: hops: on two cores shared with 24 hosts' TCP, Open vSwitch's forwarding thread then ran 0.86 of
#: a core and waited 0.14 for one in 16 of 19 seconds (a CI rehearsal, 2026-12-06), and the run
#: rightly said the data plane, not the fabric, set the rate. This is a test of the workload. At
#: 30% (until 2026-12-07) a CI rehearsal's run said the same: the thread ran 0.70 of a core and
#: waited 0.29 for one in 13 of 19 seconds (0.32 cores idle on average: 24 hosts' TCP in bursts).
LOAD = 0.2
#: About 10 s of arrivals at 17 flows/s.
FLOWS = 180
#: A TCP segment's payload here (MTU 1500): a flow of at most this many bytes is one segment, whose
#: ideal is almost all the idle ping's round trip.
SEGMENT_BYTES = 1448


def test_poisson_websearch_arrivals_complete_at_the_load_with_slowdown_at_least_1(tmp_path, figure):
    sc = yaml.safe_load((ROOT / "experiments/scenarios/websearch.yaml").read_text())
    sc["name"] = "websearch-short"
    sc["traffic"]["flows"] = FLOWS
    sc["traffic"]["load"] = LOAD
    path = tmp_path / "websearch-short.yaml"
    path.write_text(yaml.safe_dump(sc))
    results = tmp_path / "r"
    # a test of the workload and its analysis, not of the shapers' timing: a port's rate shortfall
    # or a host short of CPU is accepted (and printed); any other failed self-check (the forwarding
    # thread not keeping up with the offered load) fails it
    p, top = run_accepting_cpu_shortfall(path, results, timeout=600)
    assert f"poisson: {FLOWS} flows of " in p.stdout and "arriving over" in p.stdout
    s = json.loads((top / "summary.json").read_text())
    env = json.loads((top / "environment.json").read_text())
    assert len(env["scale"]["rtt_probe_hosts"]) == 2 and env["scale"]["measured_rtt_full_frame_s"] > 0

    # every flow completes, and every sender connected its flows on time
    f = s["flows"]
    assert f["count"] == FLOWS and f["all_complete"], f["errors"][:5]
    with open(top / "flows.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == FLOWS and all(r["complete"] == "True" for r in rows)
    assert all(int(r["bytes_received"]) == int(r["bytes_planned"]) >= 1448 for r in rows)
    arr = s["arrivals"]
    assert arr["flows"] == FLOWS and 5 < arr["last_start_s"] < 20
    late = arr["launch_late_s"]
    figure("launch_late_max_ms", late["max"] * 1e3)
    # p99 2.4 / 3.2 / 4.2 ms, max 2.9 / 5.6 / 16.7 ms (min / median / max over 10 runs beside a CPU
    # load; 180 flows make the p99 the second latest launch; at 30% and 270 flows: p99 up to 13.0 ms,
    # max up to 22.2 ms); 10 more with the one-segment flows apart, the same day on a quieter
    # machine: p99 1.3 / 2.3 / 2.7 ms, max 2.1 / 2.7 / 3.9 ms
    assert figure("launch_late_p99_ms", late["p99"] * 1e3) < 20 and late["max"] < 0.05, late

    # the load: what the plan offered (its bytes over its arrivals' span) and what the fabric carried
    # while they arrived (from 1 s to the last arrival), both of 24 x 10 Mbit/s
    assert arr["offered_load"] == pytest.approx(LOAD, abs=0.06), arr            # seed 1's flows
    tp = s["throughput"]
    assert tp["model"] == "offered" and tp["window"] == "arrivals"
    carried = tp["fraction_of_hosts_x_host_rate"]
    # the window ends at the last arrival, and the flows that arrived in its last seconds (the large
    # ones carry most bytes) finish after it: 0.814 / 0.838 / 0.873 (min / median / max) of the
    # offered load in 10 runs beside a CPU load (at 30%: 0.677 / 0.777 / 0.893 in 9 runs); 0.872 /
    # 0.876 / 0.877 in the 10 runs on a quieter machine
    assert 0.6 <= figure("carried_over_offered", carried / arr["offered_load"]) <= 1.0, (carried, arr)
    # the forwarding thread keeps up with 20% load; beside a CPU load the run may say it waited for
    # a CPU (CPU-limited, accepted above with the rate shortfalls); it is never the thread's own speed
    fwd = (s.get("fidelity") or {}).get("forwarding")
    assert fwd is None or fwd["limited_by"] in (None, "host_cpu"), fwd

    # slowdown: FCT over the ideal (a lower bound), so at least about 1 for (almost) every flow
    sd = s["slowdown"]
    assert sd["flows"] == FLOWS and sd["flows_without"] == 0
    slow = sorted(float(r["slowdown"]) for r in rows)
    multi = sorted(float(r["slowdown"]) for r in rows if int(r["bytes_planned"]) > SEGMENT_BYTES)
    one_under = sum(float(r["slowdown"]) < 0.9 for r in rows if int(r["bytes_planned"]) <= SEGMENT_BYTES)
    assert all(float(r["ideal_fct_s"]) > 0 for r in rows)
    buckets = {b["bucket"]: b for b in sd["by_size"]}
    # every figure first (make test-repeat gathers them from failing runs too), then the checks
    figure("slowdown_min", slow[0])
    figure("slowdown_p1", slow[len(slow) // 100])
    figure("slowdown_min_multi_segment", multi[0])
    figure("slowdown_p1_multi_segment", multi[len(multi) // 100])
    figure("one_segment_flows_under_0_9", one_under)
    figure("slowdown_median", sd["median"])
    figure("slowdown_p99", sd["p99"])
    for b in buckets.values():
        if b["flows"]:
            figure(f"slowdown_median_{b['bucket']}", b["median"])
    # A flow of more than one segment is held to its ideal: the measured idle RTTs are medians of 5
    # pings and the shapers' timers jitter, so a little under 1 is not a bug. A one-segment flow is
    # not: its ideal is almost all the idle ping, and an idle ovs-vswitchd wakes up for each ping
    # where a busy one is already running, so such a flow can beat it by a third (0.94 ms against an
    # idle ping of 0.98 ms in a CI rehearsal, 2026-12-05; 0.74-0.80 for three of 30 one-segment flows
    # in one of 10 loaded runs, 2026-12-07, where every longer flow was at 0.968 or more); they are
    # counted (one_segment_flows_under_0_9), and docs/results.md says so. Over 10 loaded runs (make
    # test-repeat N=10 K=test_poisson_websearch, 2026-12-07): the longer flows' fastest at 1.000 / 1.008
    # / 1.012 (min / median / max), while one run had two one-segment flows under 0.9 (the fastest of
    # all flows 0.807; the assertion on every flow's 1st percentile, 0.9 until then, failed there).
    fastest_multi = min((r for r in rows if int(r["bytes_planned"]) > SEGMENT_BYTES),
                        key=lambda r: float(r["slowdown"]))
    assert multi[0] >= 0.9, (slow[:10], {k: fastest_multi[k] for k in (
        "flow_id", "src", "dst", "bytes_planned", "start_s", "first_byte_s", "fct_s", "ideal_fct_s", "sender_done_s")},
        env["scale"])
    assert sd["median"] >= 1.0 and sd["p99"] >= sd["median"]
    # the tail is small flows that waited for a retransmission timeout (a lost SYN waits 1 s: a
    # slowdown of hundreds for a flow whose ideal is a few ms): p99 83 / 112 / 157 over 10 runs (at
    # 30%: 101 / 265 / 773); 27 / 57 / 81 on the quieter machine
    assert sd["p99"] < 2000, sd
    assert sd["ideal"]["rtt_probe_hosts"] == env["scale"]["rtt_probe_hosts"] and sd["ideal"]["probe_links"] in (2, 4)

    # the by-size buckets: decades from <10KB, every planned flow in one, all of them measured
    assert {"<10KB", "10KB-100KB", "100KB-1MB"} <= set(buckets), list(buckets)
    assert sum(b["planned"] for b in buckets.values()) == FLOWS
    for b in buckets.values():
        assert b["flows"] == b["planned"], b
        if b["flows"]:
            assert b["median"] >= 0.9 and b["p99"] >= b["median"], b
    assert_clean(str(top))
