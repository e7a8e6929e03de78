"""RoCE congestion control in scenarios: ``roce.mode: timely|swift`` and their sections, a user's
plug-in (``roce.cc``) for the scenario or a round, its checks, its trip through the results
folder's scenario.yaml, the jobs that carry it, the summary and tables that record
``plugin:<name>``, and a plug-in's failure in an agent ending the run."""
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from common.errors import RunError, ScenarioError
from common.swift import SwiftParams
from common.timely import TimelyParams
from experiments.workloads.roce import jobs as rocejobs, report as rocereport, summary as rocesummary
from experiments.model import RocePlugin
from experiments.plan import check_against_fabric
from experiments.scenario import controller_params, validate
from experiments.workloads.roce import workload as roce_workload
from traffic.ratecontrol import RATE_CONTROLLERS

REPO = Path(__file__).resolve().parents[2]
AIMD = REPO / "docs" / "examples" / "aimd_cc.py"


def roce(**more):
    return {"name": "r", "topology": {"spines": 1, "leaves": 2, "hosts_per_leaf": 4},
            "traffic": {"transport": "roce", "senders": 3, "response_bytes": 10_000}, **more}


def test_timely_and_swift_are_modes_for_the_scenario_and_per_round():
    sc = validate(roce(roce={"mode": "swift"}, rounds=[{"name": "t", "roce": {"mode": "timely"}}, {"name": "s"},
                                                      {"name": "d", "roce": {"mode": "dcqcn"}}]))
    assert [r.roce_mode for r in sc.rounds] == ["timely", "swift", "dcqcn"]
    assert all(r.roce_plugin is None for r in sc.rounds)


def test_their_sections_override_the_scaled_defaults_and_contradictions_are_named():
    sc = validate(roce(roce={"timely": {"t_high_s": 0.08, "additive_increment_mbps": 0.2},
                             "swift": {"time_scale": 200, "ai_mbps": 0.1, "base_rtt_s": 0.004}}))
    t, s = controller_params(sc, "timely"), controller_params(sc, "swift")
    assert t == TimelyParams.scaled(10e6, t_high_s=0.08, additive_increment_bps=0.2e6)
    assert s == SwiftParams.scaled(10e6, time_scale=200, ai_bps=0.1e6, base_rtt_s=0.004)
    assert s.target_queue_s == pytest.approx(10e-3)
    for section, over, key in (("timely", {"t_low_s": 0.06}, "roce.timely.t_low_s"),
                               ("swift", {"min_rate_mbps": 50}, "roce.swift.min_rate_mbps")):
        bad = validate(roce(roce={section: over}))
        with pytest.raises(ScenarioError) as e:
            check_against_fabric(bad)
        assert e.value.key == key
    with pytest.raises(ScenarioError) as e:
        validate(roce(roce={"timely": {"gain": 1}}))
    assert e.value.key == "roce.timely.gain"


def test_a_plugin_runs_in_every_round_that_does_not_choose_otherwise(monkeypatch):
    monkeypatch.chdir(REPO)                        # a relative path is relative to the current directory
    sc = validate(roce(roce={"cc": {"plugin": "docs/examples/aimd_cc.py", "params": {"step_fraction": 0.02}}},
                       rounds=[{"name": "aimd"}, {"name": "dcqcn", "roce": {"mode": "dcqcn"}}]))
    assert [r.roce_mode for r in sc.rounds] == ["plugin:aimd", "dcqcn"]
    assert sc.rounds[0].roce_plugin == RocePlugin(path=str(AIMD), name="aimd", params={"step_fraction": 0.02})
    assert sc.roce.cc.plugin == str(AIMD) and sc.rounds[1].roce_plugin is None


def test_a_round_can_run_a_plugin_against_the_scenarios_mode(tmp_path):
    sc = validate(roce(rounds=[{"name": "dcqcn"}, {"name": "aimd", "roce": {"cc": {"plugin": str(AIMD)}}},
                               {"name": "swift", "roce": {"mode": "swift"}}]))
    assert [r.roce_mode for r in sc.rounds] == ["dcqcn", "plugin:aimd", "swift"]
    assert sc.rounds[1].roce_plugin.params == {}


def test_the_resolved_scenario_writes_the_plugin_and_reads_it_back_the_same(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    for data in (roce(roce={"cc": {"plugin": "docs/examples/aimd_cc.py", "params": {"step_fraction": 0.02}}}),
                 roce(roce={"cc": {"plugin": "docs/examples/aimd_cc.py"}},
                      rounds=[{"name": "a"}, {"name": "b", "roce": {"mode": "timely"}}, {"name": "c", "seed": 4}])):
        sc = validate(data)
        text = yaml.safe_dump(sc.to_data(), sort_keys=False)
        monkeypatch.chdir(tmp_path)                 # analyze reads it from anywhere: the path is absolute
        again = validate(yaml.safe_load(text))
        monkeypatch.chdir(REPO)
        assert again.to_data() == sc.to_data()
        assert [(r.roce_mode, r.roce_plugin) for r in again.rounds] == [(r.roce_mode, r.roce_plugin) for r in sc.rounds]


@pytest.mark.parametrize("data, key", [
    (roce(roce={"mode": "dcqcn", "cc": {"plugin": str(AIMD)}}), "roce.mode"),
    (roce(rounds=[{"name": "a", "roce": {"mode": "dcqcn", "cc": {"plugin": str(AIMD)}}}]), "rounds[0].roce"),
    (roce(roce={"cc": {"plugin": str(AIMD), "params": {"step": "big"}}}), "roce.cc.params.step"),
    (roce(roce={"cc": {"plugin": str(AIMD), "params": {"9lives": 1}}}), "roce.cc.params.9lives"),
    (roce(roce={"cc": {"params": {}}}), "roce.cc.plugin"),
    (roce(roce={"cc": {"plugin": str(AIMD), "extra": 1}}), "roce.cc.extra"),
])
def test_bad_plugin_keys_are_named(data, key):
    with pytest.raises(ScenarioError) as e:
        validate(data)
    assert e.value.key == key, str(e.value)


def test_a_broken_plugin_is_a_scenario_error_naming_the_key_and_the_file(tmp_path):
    bad = tmp_path / "broken_cc.py"
    bad.write_text("from traffic.ratecontrol import RateController\n")
    with pytest.raises(ScenarioError) as e:
        validate(roce(roce={"cc": {"plugin": str(bad)}}))
    assert e.value.key == "roce.cc.plugin" and str(bad) in str(e.value) and "defines no subclass" in str(e.value)
    with pytest.raises(ScenarioError) as e:
        validate(roce(rounds=[{"name": "a"}, {"name": "b", "roce": {"cc": {"plugin": str(tmp_path / "gone.py")}}}]))
    assert e.value.key == "rounds[1].roce.cc.plugin" and "gone.py: cannot read it" in str(e.value)


def test_jobs_carry_the_plugin_and_every_controllers_parameters():
    sc = validate(roce(rounds=[{"name": "aimd", "roce": {"cc": {"plugin": str(AIMD), "params": {"step_fraction": 0.1}}}}]))
    rnd = sc.rounds[0]
    args = rocejobs.scenario_job_args(sc, rnd.roce_mode, plugin=rnd.roce_plugin)
    assert args["cc_plugin"] == str(AIMD) and args["cc_params"] == {"step_fraction": 0.1}
    assert args["controllers"]["timely"] == TimelyParams.scaled(10e6)
    assert args["controllers"]["swift"] == SwiftParams.scaled(10e6)
    assert set(args["controllers"]) == {"dcqcn", "timely", "patched_timely", "swift"}
    coll = rocejobs.collective_job_args(sc, rnd.roce_mode, rnd.roce_plugin)
    assert coll["cc_plugin"] == str(AIMD) and coll["timely"] == TimelyParams.scaled(10e6).as_dict()
    plain = rocejobs.collective_job_args(sc, "swift")
    assert "cc_plugin" not in plain and plain["swift"] == SwiftParams.scaled(10e6).as_dict()
    node = SimpleNamespace(mac="02:00:00:00:00:01", ip="10.0.0.1")
    lf = SimpleNamespace(fabric=SimpleNamespace(node=lambda h: node,
                                                host_attachment=lambda h: SimpleNamespace(b_intf=f"{h}-eth0")))
    flows = [{"flow_id": 0, "src": "h5", "dst": "h1", "bytes": 1000}]
    jobs = rocejobs.host_jobs(lf, flows, Path("/tmp/x"), 0.0, **{k: v for k, v in args.items()
                                                                  if k != "sample_interval_s"})
    assert jobs["h5"]["mode"] == "plugin:aimd" and jobs["h5"]["cc_plugin"] == str(AIMD)
    assert jobs["h5"]["cc_params"] == {"step_fraction": 0.1} and jobs["h5"]["swift"]["beta"] == 0.8
    swift = rocejobs.host_jobs(lf, flows, Path("/tmp/x"), 0.0, mode="swift", line_rate_mbps=10)
    assert "cc_plugin" not in swift["h5"] and swift["h5"]["timely"] == TimelyParams.scaled(10e6).as_dict()
    with pytest.raises(ValueError, match="roce mode must be one of dcqcn, timely, patched_timely, swift, none or a plug-in"):
        rocejobs.host_jobs(lf, flows, Path("/tmp/x"), 0.0, mode="plugin:aimd", line_rate_mbps=10)


def test_summary_tables_and_seeds_record_plugin_name(tmp_path):
    rows = [{"flow_id": 0, "src": "h5", "dst": "h1", "fct_s": 0.5, "complete": True,
             "roce": {"tx": {"start_at_unix_s": 100.0, "messages": [], "samples": [], "message_bytes": 1000,
                             "cc_params": {"step_bps": 1e5}, "rtt_s": {"count": 3, "min": 0.004, "median": 0.005,
                                                                       "p99": 0.009}},
                      "rx": {}, "rx_host_udp_drops": None}}]
    plugin = rocesummary.plugin_record(RocePlugin(path=str(AIMD), name="aimd", params={}))
    assert len(plugin["sha256"]) == 64 and plugin["name"] == "aimd"
    summary = rocesummary.add_to_summary(tmp_path, {}, rows, "plugin:aimd", None, 2, plugin=plugin)
    r = summary["roce"]
    assert r["mode"] == "plugin:aimd" and r["dcqcn"] is None and r["cc"] == {"params": {"step_bps": 1e5},
                                                                             "plugin": plugin}
    assert r["rtt_s"] == {"samples": 3, "min": 0.004, "flow_median_median": 0.005, "flow_p99_max": 0.009}
    assert rocereport.format_line(summary).startswith("RoCE plugin:aimd: ")
    flows_csv = (tmp_path / "roce_flows.csv").read_text().splitlines()
    assert "rtt_median_s" in flows_csv[0] and "0.005" in flows_csv[1]
    assert rocereport.SECTION.row(summary)["roce_mode"] == "plugin:aimd"
    seeds = rocereport.across_seeds([{"round": "a", "roce_mode": "plugin:aimd", "seed": 1, "message_fct_median_s": 0.2,
                                   "message_fct_p99_s": 1.0},
                                  {"round": "b", "roce_mode": "dcqcn", "seed": 1, "message_fct_median_s": 0.3,
                                   "message_fct_p99_s": 1.0}])
    assert set(seeds) == {"plugin:aimd", "dcqcn"} and seeds["plugin:aimd"]["seeds"] == [1]
    sc = validate(roce(roce={"cc": {"plugin": str(AIMD)}}))
    w = roce_workload.RoceFlows(SimpleNamespace(sc=sc))
    assert w.describe_round(sc.rounds[0]) == "RoCEv2 plugin:aimd DSCP 26"


def test_a_plugin_that_raised_in_an_agent_ends_the_run_naming_the_file(tmp_path):
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "h1.roce.json").write_text(json.dumps({"role": "roce", "senders": [], "error": None}))
    roce_workload._raise_plugin_failure(agents)                         # nothing failed: nothing raised
    err = f"rate-controller plug-in {tmp_path}/bad.py: raised RuntimeError: boom (line 9, in on_ack) while the run used it"
    (agents / "h5.roce.json").write_text(json.dumps({"role": "roce", "flow_id": None, "error": "PluginError: " + err,
                                                     "error_type": "PluginError"}))
    (agents / "h6.roce.json").write_text(json.dumps({"role": "roce", "error": "OSError: no such device",
                                                     "error_type": "OSError"}))
    assert rocesummary.plugin_failures(agents) == [f"RoCE agent on h5: {err}"]
    with pytest.raises(RunError) as e:
        roce_workload._raise_plugin_failure(agents)
    assert str(e.value) == f"RoCE agent on h5: {err}" and "\n" not in str(e.value)


def test_the_cli_says_run_failed_and_exits_1_on_a_run_error(monkeypatch, capsys):
    from experiments import cli
    from experiments import runner

    def fail(*a, **k):
        raise RunError("RoCE agent on h5: rate-controller plug-in /x/bad.py: raised RuntimeError: boom")
    monkeypatch.setattr(runner, "run", fail)
    monkeypatch.setattr(cli.os, "geteuid", lambda: 0)
    assert cli.main(["run", str(REPO / "experiments" / "scenarios" / "incast.yaml")]) == 1
    err = capsys.readouterr().err
    assert "run failed: RoCE agent on h5: rate-controller plug-in /x/bad.py: raised RuntimeError: boom" in err


def _block(text: str, after: str, lang: str) -> str:
    """The first fenced ``lang`` block after the line containing ``after`` in ``text``."""
    rest = text[text.index(after):]
    start = rest.index(f"```{lang}\n") + len(lang) + 4
    return rest[start:rest.index("```", start)]


def test_the_guides_scenario_checks_and_its_code_is_the_shipped_example(monkeypatch):
    guide = (REPO / "docs" / "roce-cc.md").read_text()
    assert _block(guide, "### 1. Write it", "python") == AIMD.read_text()
    monkeypatch.chdir(REPO)
    sc = validate(yaml.safe_load(_block(guide, "<!-- aimd-vs-dcqcn.yaml", "yaml")))
    check_against_fabric(sc)
    assert [r.roce_mode for r in sc.rounds] == ["plugin:aimd"] * 3 + ["dcqcn"] * 3
    assert [r.seed for r in sc.rounds] == [1, 2, 3] * 2 and sc.ecn.profile.kind == "red"   # CNPs need marks


def test_a_plugin_that_raised_in_a_collective_agent_ends_the_run_too(tmp_path):
    from experiments.workloads.collective import workload as coll_workload
    size = tmp_path / "agents" / "size-4000"
    size.mkdir(parents=True)
    (size / "h1.collective.json").write_text(json.dumps({"role": "collective", "roce": {"error": None}}))
    coll_workload._raise_plugin_failure(tmp_path / "agents")
    err = f"rate-controller plug-in {tmp_path}/bad.py: raised ValueError: no (line 3, in on_cnp) while the run used it"
    (size / "h2.collective.json").write_text(json.dumps({"role": "collective", "ranks": [],
                                                         "roce": {"kind": "roce", "error": "PluginError: " + err}}))
    with pytest.raises(RunError) as e:
        coll_workload._raise_plugin_failure(tmp_path / "agents")
    assert str(e.value) == f"RoCE agent on h2: {err}"
    assert rocesummary.plugin_failures(tmp_path / "agents") == []          # the RoCE workload's files only


def test_every_registered_controller_with_keys_has_its_section_its_parameters_and_the_scale():
    """The registry is the one list: each controller's PARAMS become roce.<mode>, its params_cls
    the parameters every job carries, and a scale section sets each one's time_scale."""
    sc = validate(roce(roce={"patched_timely": {"rtt_ref_s": 0.006, "beta": 0.05}}))
    with_keys = {m: c for m, c in RATE_CONTROLLERS.items() if c.PARAMS}
    assert set(with_keys) == {"dcqcn", "timely", "patched_timely", "swift"}
    for mode, cls in with_keys.items():
        assert set(type(getattr(sc.roce, mode)).model_fields) == set(cls.PARAMS)
        if mode != "patched_timely":
            assert controller_params(sc, mode) == cls.params_cls.scaled(10e6), mode
    p = controller_params(sc, "patched_timely")
    assert (p.rtt_ref_s, p.beta) == (0.006, 0.05) and p.t_low_s == TimelyParams.scaled(10e6).t_low_s
    scaled = validate(roce(scale={"factor": 250}))
    assert all(getattr(scaled.roce, m).time_scale == 250 for m in with_keys)
