"""Ideal FCT and FCT slowdown (experiments.slowdown): the formula on a hand-computed example, the
latency from the measured round trips, paths traced or not, the by-size buckets, and
a poisson round summarised from synthetic agent records (flows.csv columns, summary.json's
``slowdown`` and ``arrivals``, the study's metrics and FCT rows)."""
import csv
import json

import pytest


from experiments import rounds
from experiments.context import RoundRecord
from experiments.metrics import measure
from experiments.plan import check_against_fabric
from experiments.scenario import validate
from experiments.slowdown import (IdealModel, add_ideal_fct, equal_cost_rates_bps, ideal_fct_s, last_frame_bytes,
                                  slowdown_summary, traced_rates_bps, wire_bytes)
from experiments.study import fct_rows
from experiments.workloads.flows import KernelFlows
from controller.routing import compute_routes, port_peers

FABRIC = {"spines": 2, "leaves": 4, "hosts_per_leaf": 6, "uplink_rate_mbps": 30}


def fabric_map():
    return check_against_fabric(validate({"name": "s", "topology": FABRIC}))[1]


def test_wire_bytes_count_66_bytes_of_headers_per_frame():
    assert wire_bytes(1448) == 1514 and wire_bytes(1449) == 1449 + 2 * 66 and wire_bytes(1) == 67
    assert wire_bytes(0) == 0 and last_frame_bytes(0) == 0
    assert last_frame_bytes(1448) == 1514 and last_frame_bytes(1449) == 67 and last_frame_bytes(10_000) == 1378
    with pytest.raises(ValueError):
        wire_bytes(-1)


def test_ideal_fct_by_hand():
    # 10,000 B at a 10 Mbit/s bottleneck, 1.6 ms of latency, a 151-byte burst: 7 frames, W = 10000
    # + 7 x 66 = 10462 B, the last frame 10000 - 6 x 1448 + 66 = 1378 B; the frames before it less
    # the burst, 10462 - 1378 - 151 = 8933 B, take 7.1464 ms: 8.7464 ms in all
    assert ideal_fct_s(10_000, 10e6, 1.6e-3, 151) == pytest.approx(8.7464e-3, rel=1e-9)
    # one frame: an idle port does not hold a lone frame for its serialisation, only the latency
    assert ideal_fct_s(1448, 10e6, 1.6e-3, 151) == pytest.approx(1.6e-3)
    assert ideal_fct_s(1448, 10e6) == 0.0
    # a long flow: its bytes at the bottleneck rate
    assert ideal_fct_s(1448 * 1000, 10e6, 0.0, 0) == pytest.approx(999 * 1514 * 8 / 10e6)
    with pytest.raises(ValueError):
        ideal_fct_s(1000, 0)


def test_the_model_takes_the_latency_from_the_measured_rtts():
    fm = fabric_map()
    routes = compute_routes(fm, "ecmp")
    peer = port_peers(fm)
    env = {"scale": {"measured_rtt_s": 1.0e-3, "measured_rtt_full_frame_s": 1.2e-3, "rtt_probe_hosts": ["h1", "h7"]},
           "shaper": {"slack_s": 100e-6}}
    m = IdealModel(env, fm, routes, peer)
    assert m.probe_links == 4                                   # h1 -> leaf1 -> spine -> leaf2 -> h7
    assert m.latency_s(4) == pytest.approx(1.6e-3) and m.latency_s(2) == pytest.approx(0.8e-3)
    assert m.burst(10e6) == 151 and m.burst(30e6) == 375        # common.units.shaper_burst_bytes
    assert m.ideal_fct_s(10_000, [10e6, 30e6, 30e6, 10e6]) == pytest.approx(8.7464e-3)
    # a probe on one leaf (2 links): longer paths take its latency as measured, never more
    env["scale"]["rtt_probe_hosts"] = ["h1", "h2"]
    m = IdealModel(env, fm, routes, peer)
    assert m.probe_links == 2 and m.latency_s(4) == pytest.approx(1.6e-3) and m.latency_s(2) == pytest.approx(1.6e-3)
    # an older record without the probe's hosts: the measured latency for every path; none measured: 0
    assert IdealModel({"scale": {"measured_rtt_s": 1e-3}}, fm, routes, peer).latency_s(2) == pytest.approx(1e-3)
    assert IdealModel({}, fm, routes, peer, burst_bytes=1000).latency_s(4) == 0.0
    assert IdealModel({}, fm, routes, peer, burst_bytes=1000).burst(10e6) == 1000   # queues.burst_bytes


def test_paths_traced_or_taken_from_the_routes():
    fm = fabric_map()
    routes = compute_routes(fm, "ecmp")
    assert traced_rates_bps(fm, "h1>leaf1>spine2>leaf2>h7") == [10e6, 30e6, 30e6, 10e6]
    assert traced_rates_bps(fm, "error: no trace") is None and traced_rates_bps(fm, "h1>leaf3") is None
    assert equal_cost_rates_bps(fm, routes, "h1", "h7") == [[10e6, 30e6, 30e6, 10e6]]   # both spines, one rate list
    assert equal_cost_rates_bps(fm, routes, "h1", "h2") == [[10e6, 10e6]]               # same leaf: 2 links


def rows_and_plan(sizes_fcts, transport="tcp"):
    plan = [{"flow_id": i, "src": s, "dst": d, "bytes": b} for i, (s, d, b, _) in enumerate(sizes_fcts)]
    rows = [{"flow_id": i, "src": s, "dst": d, "transport": transport, "fct_s": fct, "complete": fct is not None,
             "path": None} for i, (s, d, _, fct) in enumerate(sizes_fcts)]
    return rows, plan


ENV = {"scale": {"measured_rtt_s": 1.0e-3, "measured_rtt_full_frame_s": 1.2e-3, "rtt_probe_hosts": ["h1", "h7"]},
       "shaper": {"slack_s": 100e-6}}


def test_slowdown_is_fct_over_ideal_for_complete_tcp_flows_of_a_sized_plan():
    fm = fabric_map()
    rows, plan = rows_and_plan([("h1", "h7", 30_000, 0.1), ("h1", "h2", 30_000, 0.1), ("h3", "h9", 50_000, None)])
    model = add_ideal_fct(rows, plan, fm, ENV, "ecmp")
    assert model["probe_links"] == 4 and model["rtt_small_s"] == 1e-3 and "ceil(bytes / 1448)" in model["formula"]
    cross, local, unfinished = rows
    behind = (wire_bytes(30_000) - last_frame_bytes(30_000) - 151) * 8 / 10e6
    assert cross["ideal_fct_s"] == pytest.approx(1.6e-3 + behind)
    assert local["ideal_fct_s"] == pytest.approx(0.8e-3 + behind)          # 2 links of the probe's 4
    assert cross["slowdown"] == pytest.approx(0.1 / cross["ideal_fct_s"])
    assert unfinished["ideal_fct_s"] > 0 and "slowdown" not in unfinished
    # a traced path counts its own links
    rows, plan = rows_and_plan([("h1", "h7", 30_000, 0.1)])
    rows[0]["path"] = "h1>leaf1>spine2>leaf2>h7"
    add_ideal_fct(rows, plan, fm, ENV)
    assert rows[0]["ideal_fct_s"] == pytest.approx(1.6e-3 + behind)
    # a time-limited plan has no ideal; UDP rows get none
    rows, plan = rows_and_plan([("h1", "h7", None, 1.0)])
    assert add_ideal_fct(rows, plan, fm, ENV) is None and "ideal_fct_s" not in rows[0]
    rows, plan = rows_and_plan([("h1", "h7", 3000, 0.1)], transport="udp")
    assert add_ideal_fct(rows, plan, fm, ENV) is not None and "ideal_fct_s" not in rows[0]


def test_slowdown_by_size_bucket():
    rows = [{"flow_id": i, "slowdown": s} for i, s in enumerate([1.0, 2.0, 3.0, 10.0, 20.0, None])]
    plan = [{"flow_id": i, "bytes": b} for i, b in enumerate([2000, 5000, 9999, 150_000, 999_999, 20_000])]
    sd = slowdown_summary(rows, plan, {"formula": "f"})
    assert sd["flows"] == 5 and sd["flows_without"] == 1 and sd["median"] == 3.0
    assert sd["p99"] == pytest.approx(10 + 0.96 * 10)           # numpy's linear interpolation
    assert [b["bucket"] for b in sd["by_size"]] == ["<10KB", "10KB-100KB", "100KB-1MB"]
    small, mid, big = sd["by_size"]
    assert (small["lo_bytes"], small["hi_bytes"], small["flows"], small["median"]) == (0, 10_000, 3, 2.0)
    assert small["p99"] == pytest.approx(2.98)
    assert (mid["planned"], mid["flows"], mid["median"], mid["p99"]) == (1, 0, None, None)   # the unfinished flow
    assert (big["flows"], big["median"]) == (2, 15.0) and big["hi_bytes"] == 1_000_000
    assert slowdown_summary(rows, plan, None) is None


def _synthetic_round(ctx, plan, rdir, t0, fct_of):
    """Agent records of ``plan`` as if every flow completed in ``fct_of(flow)`` seconds, launched
    0.5 ms late, plus a sampler file with one port."""
    agents = rdir / "agents"
    agents.mkdir(parents=True)
    tx, rx = {}, {}
    for f in plan:
        start = t0 + f["start_s"]
        tx.setdefault(f["src"], []).append(
            {"flow_id": f["flow_id"], "src_port": f["src_port"], "bytes_planned": f["bytes"], "bytes_sent": f["bytes"],
             "start_s": f["start_s"], "start_at_unix_s": t0, "started_unix_s": start + 0.0005,
             "closed_unix_s": start + fct_of(f) + 0.001, "congestion_control": "cubic", "total_retrans": 0,
             "rtt_us": 9000, "tcp_samples": [[start + 0.01, 10, 9000, 2**31 - 1, 0, 1e6]]})
        rx.setdefault(f["dst"], []).append(
            {"src_ip": f["src_ip"], "src_port": f["src_port"], "bytes": f["bytes"], "first_byte_unix_s": start + 0.002,
             "last_byte_unix_s": start + fct_of(f), "eof": True, "samples": [[start + fct_of(f), f["bytes"]]]})
    for h, flows in tx.items():
        (agents / f"{h}.tx.json").write_text(json.dumps({"role": "sender", "flows": flows}))
    for h, flows in rx.items():
        (agents / f"{h}.rx.json").write_text(json.dumps({"role": "receiver", "flows": flows, "complete": True}))
    port = ctx.fabric_map["switches"][0]["ports"][0]["intf"]
    with open(rdir / "queues_raw.csv", "w") as f:
        f.write("t_unix_s,intf,backlog_bytes,backlog_packets,drops_total,tx_bytes_total,tx_packets_total\n")
        for k in range(40):
            f.write(f"{t0 + 0.1 * k},{port},{(k % 4) * 1514},{k % 4},0,{k * 100000},{k * 70}\n")
    (rdir / "sampler.json").write_text(json.dumps({"achieved_hz": 200, "interfaces": 1,
                                                   "cpu_fraction_of_one_core": 0.01}))
    (rdir / "environment.json").write_text(json.dumps({"datapath": "user", "kernel": "test", "host_config": {},
                                                       **ENV}))


def test_a_poisson_round_reports_slowdown_by_size(tmp_path):
    sc = validate({"name": "ws", "topology": FABRIC,
                   "traffic": {"pattern": "poisson", "load": 0.5, "flows": 300, "timeout_s": 30}})
    layout = check_against_fabric(sc)
    out = tmp_path / "run"
    ctx = rounds.run_context(sc, layout, {}, out, True)
    w = KernelFlows(ctx)
    plan = layout[2]
    rdir = out / "rounds" / "01-ws"
    t0 = 1000.0
    fm = layout[1]
    routes = compute_routes(fm, "ecmp")
    model = IdealModel(ENV, fm, routes, port_peers(fm))

    def ideal(f):
        return min(model.ideal_fct_s(f["bytes"], r) for r in equal_cost_rates_bps(fm, routes, f["src"], f["dst"]))
    _synthetic_round(ctx, plan, rdir, t0, lambda f: 2.0 * ideal(f))      # every flow twice its ideal
    rec = RoundRecord(index=0, round=sc.rounds[0], dir=rdir, raw={"codes": {}, "paths": {}})
    summary = w.summarize(rec)
    sd = summary["slowdown"]
    assert sd["flows"] == 300 and sd["flows_without"] == 0
    assert sd["median"] == pytest.approx(2.0) and sd["p99"] == pytest.approx(2.0)
    assert sd["ideal"]["probe_links"] == 4 and sd["ideal"]["rtt_full_frame_s"] == 1.2e-3
    assert {b["bucket"] for b in sd["by_size"]} >= {"<10KB", "10KB-100KB", "100KB-1MB"}
    assert sum(b["planned"] for b in sd["by_size"]) == 300
    arr = summary["arrivals"]
    assert arr["flows"] == 300 and arr["last_start_s"] == plan[-1]["start_s"]
    assert 0.2 < arr["offered_load"] < 1.0 and arr["launch_late_s"]["max"] == pytest.approx(0.0005)
    assert summary["throughput"]["model"] == "offered" and summary["throughput"]["window"] == "arrivals"
    # fct_s from each flow's own start; ends (start_s + fct_s) set the window of the queue figures
    with open(rdir / "flows.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert {"start_s", "ideal_fct_s", "slowdown"} <= set(rows[0])
    r = rows[-1]
    assert float(r["start_s"]) == pytest.approx(plan[-1]["start_s"]) and float(r["slowdown"]) == pytest.approx(2.0)
    assert float(r["fct_s"]) == pytest.approx(2 * float(r["ideal_fct_s"]))
    assert summary["bottleneck"]["queue_window_s"][1] == pytest.approx(
        max(f["start_s"] + 2 * ideal(f) for f in plan))
    # what a study reads: the metrics and study_fct.csv's rows
    m = measure(summary)
    assert m["slowdown_median"] == pytest.approx(2.0) and m["slowdown_p99"] == pytest.approx(2.0)
    (rdir / "summary.json").write_text(json.dumps(summary))
    fr = fct_rows({"dir": "rounds/01-ws", "cell": "c", "variant": "v", "sweep": {}, "seed": 1}, out)
    assert len(fr) == 300 and all(x["slowdown"] == pytest.approx(2.0) for x in fr)
    assert "FCT slowdown: median 2" in w.format_round(summary, rdir)


def test_other_rounds_have_no_slowdown_section_unless_sized(tmp_path):
    sc = validate({"name": "tl", "topology": FABRIC, "traffic": {"pattern": "permutation", "duration_s": 2}})
    layout = check_against_fabric(sc)
    ctx = rounds.run_context(sc, layout, {}, tmp_path, True)
    plan = layout[2]
    for f in plan:
        f["bytes"] = 10_000                              # what the agents record for time-limited flows
    rdir = tmp_path / "r"
    _synthetic_round(ctx, plan, rdir, 1000.0, lambda f: 2.0)
    for f in plan:
        f["bytes"] = None
    summary = KernelFlows(ctx).summarize(RoundRecord(index=0, round=sc.rounds[0], dir=rdir, raw={"codes": {}}))
    assert "slowdown" not in summary and "arrivals" not in summary
    assert summary["throughput"]["model"] == "fluid"
