"""Studies without a fabric: the expansion into cells, which cells share a fabric, the errors that
name the study's key, the seeded source ports, and the study folder written from fake runs."""
import csv
import json
from pathlib import Path

import pytest

from common.errors import ScenarioError
from experiments import study as st
from experiments.model import MAX_ROUNDS
from traffic.patterns import SOURCE_PORTS, source_ports

REPO = Path(__file__).resolve().parents[2]
INCAST = REPO / "experiments" / "scenarios" / "incast.yaml"


def base(**over):
    """A small incast scenario as data."""
    d = {"name": "b", "topology": {"kind": "spineleaf", "spines": 2, "leaves": 2, "hosts_per_leaf": 2,
                                  "host_rate_mbps": 10, "uplink_rate_mbps": 10},
         "traffic": {"pattern": "incast", "receiver": "h1", "senders": 2, "response_bytes": 100000}}
    d.update(over)
    return d


def study(**over):
    d = {"name": "s", "base": base(), "variants": {"a": {}, "b": {"hosts": {"tcp_ecn": 1}}}, "seeds": 3}
    d.update(over)
    return d


def test_cells_cross_variants_sweep_points_and_seeds_seed_outermost():
    s = st.expand(study(sweep={"traffic.senders": [1, 2]}))
    assert len(s.cells) == 2 * 2 * 3
    assert [c.seed for c in s.cells[:4]] == [1, 1, 1, 1]
    assert [(c.variant, c.sweep["traffic.senders"]) for c in s.cells[:4]] == [("a", 1), ("b", 1), ("a", 2), ("b", 2)]
    c = s.cells[3]
    assert c.name == "b-senders2-s1"
    assert c.scenario.seed == 1 and c.scenario.traffic.senders == 2 and c.scenario.hosts.tcp_ecn == 1
    assert s.points == ({"traffic.senders": 1}, {"traffic.senders": 2})


def test_seeds_as_a_list_and_as_a_count():
    assert st.expand(study(seeds=[7, 3])).seeds == (7, 3)
    assert st.expand(study(seeds=2)).seeds == (1, 2)


def test_merge_replaces_merges_and_removes():
    got = st.merge({"a": {"x": 1, "y": 2}, "b": 1, "c": 3}, {"a": {"y": 5}, "b": {"z": 1}, "c": None})
    assert got == {"a": {"x": 1, "y": 5}, "b": {"z": 1}}


@pytest.mark.parametrize("over, key", [
    ({"variantz": {}}, "variantz"),
    ({"variants": {"a": {"queues": {"buffer_packets": 0}}}}, "variants.a.queues.buffer_packets"),
    ({"variants": {"a": {"hosts": {"tcp_ecn": 7}}}}, "variants.a.hosts.tcp_ecn"),
    ({"sweep": {"traffic.senders": [1, 99]}}, "sweep.traffic.senders"),
    ({"sweep": {"traffic.bogus": [1]}}, "sweep.traffic.bogus"),
    ({"sweep": {"name.x": [1]}}, "sweep"),
    ({"metrics": ["fct_median_s", "nope"]}, "metrics"),
    ({"seeds": 0}, "seeds"),
    ({"seeds": [1, 1]}, "seeds"),
    ({"variants": {"a": {"seed": 3}}}, "variants.a.seed"),
    ({"variants": {}}, "variants"),
    ({"base": base(queues={"buffer_packets": -1})}, "base.queues.buffer_packets"),
])
def test_errors_name_the_study_key(over, key):
    with pytest.raises(ScenarioError) as e:
        st.expand(study(**over))
    assert e.value.key == key or e.value.key.startswith(key), (e.value.key, key)


@pytest.mark.parametrize("over, message", [
    ({"seeds": 0}, "a count of seeds must be from 1 to 1000, got 0"),
    ({"seeds": [1, -1]}, "seeds[1] must be an integer from 0 to 2147483647, got -1"),
    ({"seeds": True}, "expected a count of seeds (1..1000) or a list of seeds, got True"),
    ({"seeds": [1, 1]}, "seeds must be distinct"),
    ({"base": [1, 2]}, "expected a scenario file's path or a scenario mapping, got [1, 2]"),
])
def test_seeds_and_base_errors_say_what_is_wrong_under_their_own_key(over, message):
    with pytest.raises(ScenarioError) as e:
        st.expand(study(**over))
    assert (e.value.key, e.value.detail) == (next(iter(over)), message)


def test_a_missing_base_file_is_one_error_under_base(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("name: s\nbase: nowhere/b.yaml\nvariants: {a: {}}\n")
    with pytest.raises(ScenarioError) as e:
        st.load_study(f)
    assert e.value.key == "base" and e.value.detail.startswith(f"nowhere/b.yaml: cannot read {tmp_path}/nowhere/b.yaml")
    assert "scenario key" not in e.value.detail


def test_a_base_file_is_read_relative_to_the_study_and_loses_its_rounds(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(f"name: s\nbase: {INCAST.relative_to(REPO)}\nvariants: {{a: {{}}}}\nseeds: 1\n")
    with pytest.raises(ScenarioError) as e:
        st.load_study(f)                       # relative to the study's folder, not the current one
    assert e.value.key == "base"
    f.write_text(f"name: s\nbase: {INCAST}\nvariants: {{a: {{}}}}\nseeds: 1\n")
    s = st.load_study(f)
    assert len(s.cells) == 1 and s.notes and "rounds" in s.notes[0]
    assert not s.cells[0].scenario.multi_round


def test_round_level_differences_share_one_fabric():
    s = st.expand(study(variants={"a": {}, "ecn": {"ecn": {"profile": {"step": {"k_packets": 10}}}},
                                  "cc": {"hosts": {"tcp_congestion_control": "reno", "tcp_ecn": 1}}},
                        sweep={"traffic.senders": [1, 2]}, seeds=2))
    runs = st.plan_runs(s)
    assert len(runs) == 1 and len(runs[0].cells) == 12
    for c, r in zip(runs[0].cells, runs[0].scenario.rounds):
        assert r.name == c.name
        assert st._same_round(c.scenario.rounds[0], r)


@pytest.mark.parametrize("variant", [{"queues": {"buffer_packets": 50}}, {"topology": {"spines": 1}},
                                     {"traffic": {"response_bytes": 5000}}, {"links": {"delay_us": 100}}])
def test_fabric_level_differences_get_their_own_fabric(variant):
    s = st.expand(study(variants={"a": {}, "b": variant}, seeds=2))
    runs = st.plan_runs(s)
    assert len(runs) == 2
    assert {tuple(c.variant for c in r.cells) for r in runs} == {("a", "a"), ("b", "b")}


def test_a_fabric_run_holds_at_most_max_rounds_cells():
    s = st.expand(study(seeds=MAX_ROUNDS))           # 2 variants x 32 seeds
    runs = st.plan_runs(s)
    assert [len(r.cells) for r in runs] == [MAX_ROUNDS, MAX_ROUNDS]


def test_pfc_on_and_off_share_a_fabric_when_its_thresholds_agree():
    b = base(priorities={"dscp": {26: 3, 0: 0}}, pfc={"lossless": [3]})
    b["traffic"]["dscp"] = 26
    s = st.expand(study(base=b, variants={"off": {"pfc": {"enabled": False}}, "on": {"pfc": {"enabled": True}}}))
    runs = st.plan_runs(s)
    assert len(runs) == 1
    assert [r.pfc_enabled for r in runs[0].scenario.rounds] == [False, True] * 3


def test_source_ports_come_from_the_seed_and_do_not_depend_on_the_flow_count():
    a = source_ports(20, seed=5, avoid=(5001,))
    assert a == source_ports(20, seed=5, avoid=(5001,))
    assert source_ports(8, seed=5, avoid=(5001,)) == a[:8]
    assert a != source_ports(20, seed=6, avoid=(5001,))
    assert len(set(a)) == 20 and all(p in SOURCE_PORTS and p != 5001 for p in a)
    with pytest.raises(ValueError):
        source_ports(len(SOURCE_PORTS) + 1, seed=1)


def test_the_same_seed_plans_the_same_ports_in_every_variant():
    s = st.expand(study(variants={"a": {}, "b": {"ecn": {"profile": {"step": {"k_packets": 10}}}}}, seeds=2))
    from experiments.plan import build_fabric
    from traffic.patterns import flow_plan
    plans = {(c.variant, c.seed): flow_plan(c.scenario.traffic, build_fabric(c.scenario), c.seed) for c in s.cells}
    assert plans[("a", 1)] == plans[("b", 1)]
    assert [f["src_port"] for f in plans[("a", 1)]] != [f["src_port"] for f in plans[("a", 2)]]


def test_trace_paths_walks_the_tables_for_each_flow():
    from experiments.plan import build_fabric
    from experiments.workloads.flows import trace_paths
    from traffic.patterns import flow_plan
    s = st.expand(study(seeds=1))
    sc = s.cells[0].scenario
    fab = build_fabric(sc)
    fmap = fab.to_map()
    plan = flow_plan(sc.traffic, fab, 1)
    seen = []

    def trace(bridge, flow):                 # the lowest-numbered port toward the destination
        seen.append(flow)
        from controller.routing import compute_routes
        dst_ip = flow.split("nw_dst=")[1].split(",")[0]
        return compute_routes(fmap)[bridge][dst_ip][0]
    paths = trace_paths(fmap, plan, 5001, "tcp", trace=trace)
    assert set(paths) == {str(f["flow_id"]) for f in plan}
    assert all(p.startswith(f["src"] + ">") and p.endswith(">h1") for f, p in zip(plan, paths.values()))
    assert f"tcp_src={plan[0]['src_port']}" in seen[0]


def _fake_round(d: Path, cell, queue: float, drops: int, intf: str = "leaf1-eth1", ok: bool = True):
    d.mkdir(parents=True)
    summary = {"flows": {"fct_median_s": 1.0 + queue / 100, "fct_p99_s": 2.0, "per_flow": [{"total_retrans": drops}]},
               "bottleneck": {"intf": intf, "p50_backlog_packets": queue, "p99_backlog_packets": queue + 5,
                              "p50_backlog_bytes": queue * 1514, "p99_backlog_bytes": (queue + 5) * 1514,
                              "rate_mbps": 10, "mean_tx_mbps": 9.5},
               "throughput": {"aggregate_mbps": 9.5}, "fairness": {"jain_index": 0.99}, "total_drops": drops,
               "fidelity": {"ok": ok, "failures": [] if ok else ["serialisation"]}}
    (d / "summary.json").write_text(json.dumps(summary))
    with open(d / "flows.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["flow_id", "bytes_planned", "fct_s", "path"])
        w.writeheader()
        w.writerow({"flow_id": 0, "bytes_planned": 100000, "fct_s": 1.0, "path": f"h3>leaf2>spine{cell.seed % 2 + 1}>leaf1>h1"})


def test_a_study_folder_from_fake_runs(tmp_path):
    s = st.expand(study(variants={"tail": {}, "ecn": {"ecn": {"profile": {"step": {"k_packets": 10}}}}}, seeds=6))
    queue = {"tail": 90.0, "ecn": 15.0}

    def runner(plan, runs_dir, on_round=None):
        run_dir = runs_dir / plan.name
        for i, c in enumerate(plan.cells):
            moved = c.variant == "ecn" and c.seed == 6
            _fake_round(run_dir / "rounds" / f"{i + 1:02d}-{c.name}", c, queue[c.variant] + c.seed,
                        drops=5 if c.variant == "tail" else 0, intf="spine1-eth2" if moved else "leaf1-eth1",
                        ok=not (c.variant == "tail" and c.seed == 2))
        return run_dir
    out, result = st.run_study(s, tmp_path, quiet=True, runner=runner)
    rows = list(csv.DictReader(open(out / "study.csv")))
    assert rows[0].keys() >= {"study", "cell", "variant", "seed", "metric", "value", "unit"}
    assert {r["metric"] for r in rows} >= {"queue_median_packets", "drops", "fct_median_s"}
    assert result["complete"] and len(result["cells"]) == 12
    unfaithful = [c for c in result["cells"] if c["status"] == "unfaithful"]
    assert [c["cell"] for c in unfaithful] == ["tail-s2"]
    q = next(p for p in result["pairs"] if p["metric"] == "queue_median_packets")
    assert q["n"] == 5                       # the unfaithful cell's seed is left out of the pairs
    assert q["diff_median"] == pytest.approx(-75.0)
    moved = [b for b in result["bottlenecks"] if b["moved"]]
    assert [(b["cell"], b["bottleneck"], b["usual"]) for b in moved] == [("ecn-s6", "spine1-eth2", "leaf1-eth1")]
    assert result["paths"]["same"] and result["paths"]["checked"] == 6
    text = st.format_comparison(result, out)
    assert "bottleneck: leaf1-eth1 in 11 of 12 cells; moved to spine1-eth2 (1)" in text
    assert "differs from the same seed's first variant: ecn-s6 at spine1-eth2" in text
    json.loads((out / "comparison.json").read_text())
    assert (out / "study_fct.csv").read_text().count("\n") == 1 + 12


def test_a_failed_fabric_run_marks_its_cells_and_the_study_goes_on(tmp_path):
    from common.errors import SetupError
    s = st.expand(study(variants={"a": {}, "b": {"queues": {"buffer_packets": 50}}}, seeds=2))

    def runner(plan, runs_dir, on_round=None):
        if plan.cells[0].variant == "b":
            raise SetupError("switch s1 never connected")
        run_dir = runs_dir / plan.name
        for i, c in enumerate(plan.cells):
            _fake_round(run_dir / "rounds" / f"{i + 1:02d}-{c.name}", c, 10.0, 0)
        return run_dir
    out, result = st.run_study(s, tmp_path, quiet=True, runner=runner)
    failed = [c for c in result["cells"] if c["status"] == "failed"]
    assert [c["variant"] for c in failed] == ["b", "b"] and "never connected" in failed[0]["error"]


def test_a_variant_the_kernel_cannot_run_stops_the_study_before_anything_starts():
    from common.errors import CapabilityError
    s = st.expand(study(variants={"cubic": {}, "dctcp": {"hosts": {"tcp_congestion_control": "dctcp"}}}, seeds=2))
    plans = st.plan_runs(s)

    def check(sc, env):
        for i, r in enumerate(sc.rounds):
            if r.hosts.tcp_congestion_control == "dctcp":
                raise CapabilityError(f"rounds[{i}].hosts.tcp_congestion_control: the kernel has no 'dctcp' "
                                      "(available: reno cubic bbr)")
    with pytest.raises(CapabilityError) as e:
        st.preflight(s, plans, env={}, check=check)
    assert str(e.value).startswith("variants.dctcp.hosts.tcp_congestion_control: the kernel has no 'dctcp'")
    st.preflight(st.expand(study(seeds=1)), st.plan_runs(st.expand(study(seeds=1))), env={}, check=check)


@pytest.mark.parametrize("path", sorted((REPO / "experiments" / "studies").glob("*.yaml")), ids=lambda p: p.name)
def test_every_bundled_study_checks(path):
    from experiments.plan import check_against_fabric
    s = st.load_study(path)
    for c in s.cells:
        check_against_fabric(c.scenario)
    assert st.plan_runs(s)


def test_a_pair_pattern_on_a_small_fabric_ignores_the_incast_default_senders():
    s = st.expand(study(base=base(traffic={"pattern": "permutation", "flow_bytes": 1000})))
    assert s.cells[0].scenario.traffic.pattern == "permutation"


def test_rate_controllers_and_plugins_share_one_roce_fabric():
    b = base(traffic={"pattern": "incast", "receiver": "h1", "senders": 2, "response_bytes": 100000,
                      "transport": "roce"})
    aimd = str(REPO / "docs" / "examples" / "aimd_cc.py")
    s = st.expand(study(base=b, variants={"dcqcn": {"roce": {"mode": "dcqcn"}}, "timely": {"roce": {"mode": "timely"}},
                                          "aimd": {"roce": {"mode": None, "cc": {"plugin": aimd}}}}, seeds=2))
    runs = st.plan_runs(s)
    assert len(runs) == 1 and len(runs[0].cells) == 6
    assert [r.roce_mode for r in runs[0].scenario.rounds[:3]] == ["dcqcn", "timely", s.cells[2].scenario.rounds[0].roce_mode]
    assert s.cells[2].scenario.rounds[0].roce_mode.startswith("plugin:")


def test_intervals_short_of_the_level_are_marked_with_the_level_they_reach(tmp_path):
    from experiments.study import format_comparison
    from experiments.studystats import compare_paired, simultaneous_confidence
    level = simultaneous_confidence(0.95, 8)
    five = compare_paired([1, 2, 3, 4, 5], [2, 4, 6, 8, 10], "lower", confidence=level).as_dict()
    ten = compare_paired(list(range(1, 11)), [2 * x for x in range(1, 11)], "lower", confidence=level).as_dict()
    assert five["ci_achieved"] == pytest.approx(1 - 2 / 32) and ten["ci_achieved"] >= level
    result = {"study": "s", "seeds": [1, 2, 3, 4, 5], "variants": ["x", "y", "z"], "simultaneous_confidence": level,
              "confidence": 0.95,
              "metrics": {"drops": {"unit": "packets"}}, "bottlenecks": [], "paths": {"checked": 0},
              "cells": [], "pairs": [{**five, "a": "x", "b": "y", "metric": "drops", "sweep": {}},
                                     {**ten, "a": "x", "b": "z", "metric": "drops", "sweep": {}}]}
    text = format_comparison(result, tmp_path)
    rows = [ln for ln in text.splitlines() if ln.strip().startswith("drops")]
    assert "]*" in rows[0] and "]*" not in rows[1], rows
    assert "holds at 93.75%" in text and "99.38% interval" in text
    assert "paths: not traced in these runs" in text


def test_a_bottleneck_that_varies_by_seed_but_not_by_variant_is_said_to():
    from experiments.study import format_bottlenecks
    rows = [{"cell": f"{v}-s{s}", "bottleneck": port, "usual": "leaf1-eth1", "moved": port != "leaf1-eth1",
             "differs_in_seed": False}
            for s, port in ((1, "leaf1-eth1"), (2, "leaf2-eth3")) for v in ("cubic", "bbr")]
    lines = format_bottlenecks(rows)
    assert lines[0] == "bottleneck: leaf1-eth1 in 2 of 4 cells; moved to leaf2-eth3 (2)"
    assert lines[1] == "bottleneck: each seed's is the same in every variant (the seeds' traffic differs)"


def test_a_large_group_is_cut_between_seeds_so_each_seeds_variants_share_a_fabric():
    wide = base(topology={"kind": "spineleaf", "spines": 2, "leaves": 2, "hosts_per_leaf": 4, "host_rate_mbps": 10,
                          "uplink_rate_mbps": 10})
    s = st.expand(study(base=wide, sweep={"traffic.senders": [1, 2, 3, 4, 5]}, variants={"a": {}}, seeds=10))
    runs = st.plan_runs(s)
    assert [len(r.cells) for r in runs] == [30, 20]
    assert [sorted({c.seed for c in r.cells}) for r in runs] == [[1, 2, 3, 4, 5, 6], [7, 8, 9, 10]]
    big = st.expand(study(base=wide, sweep={"traffic.senders": [1, 2, 3, 4, 5, 6, 7]}, seeds=3))   # 14 a seed
    assert [len(r.cells) for r in st.plan_runs(big, max_rounds=10)] == [10, 4, 10, 4, 10, 4]
