"""Lab 2 (topology) without a fabric: a synthetic comparison folder laid out as `fabriclab compare`
lays it out (comparison.json, each run's folder with the fabric map the shipped comparison's
fabrics give and a ports.csv), right answers scoring full marks, wrong ones zero with reasons, a
comparison missing a run, and an unfinished comparison passed over."""
import importlib.util
import json

import pytest
import yaml

from experiments import cli
from experiments.compare import load_comparison, validate_comparison
from experiments.labs import LABS
from experiments.labs.base import find_runs
from experiments.labs.topology import Topology, bisection_mbps, edge_uplinks
from experiments.plan import build_fabric
from experiments.tables import write_csv

SHIPPED = Topology.folder().parents[1] / Topology.RUNS["topology-comparison"]

#: per-host Mbit/s of each (fabric label, traffic label) in the synthetic comparison
PER_HOST = {("fattree-k4", "permutation-8-flows"): 4.26, ("fattree-k4", "permutation-1-flow"): 2.70,
            ("spineleaf-3to1", "permutation-8-flows"): 1.53, ("spineleaf-3to1", "permutation-1-flow"): 1.27}
#: the Fat-Tree's edge uplinks left idle in its 1-flow run (the 8-flow run: none)
IDLE = {("p0e1", "p0a1"), ("p1e2", "p1a2"), ("p3e1", "p3a2")}


def make_comparison(root, complete=True, traffic=("permutation-8-flows", "permutation-1-flow")):
    """A finished comparison's folder under ``root`` with the shipped comparison's two fabrics and
    ``traffic``; returns the right answers."""
    cmp = load_comparison(SHIPPED)
    out = root / "20261205T120000Z-topology-comparison"
    out.mkdir(parents=True)
    rows = []
    for i, (fabric, tname, sc) in enumerate(cmp["runs"]):
        if tname not in traffic:
            continue
        fmap = build_fabric(sc).to_map()
        d = out / f"20261205T12{i:02d}00Z-{fabric}-{tname}"
        d.mkdir()
        (d / "fabric_map.json").write_text(json.dumps(fmap))
        ports = [{"switch": s["name"], "port": p["port"], "peer": p["peer"], "rate_mbps": p["rate_mbps"],
                  "mean_tx_mbps": 0.05 if tname.endswith("1-flow") and (s["name"], p["peer"]) in IDLE else 3.1}
                 for s in fmap["switches"] for p in s["ports"]]
        write_csv(d / "ports.csv", list(ports[0]), ports)
        hosts, per_pair = len(fmap["hosts"]), sc.traffic.flows_per_pair
        rows.append({"fabric": fabric, "traffic": tname, "pattern": "permutation", "run": d.name,
                     "flows_kind": "time-limited", "hosts": hosts, "flows": hosts * per_pair,
                     "oversubscription": 3.0 if fabric.startswith("spineleaf") else 1.0, "host_rate_mbps": 5,
                     "per_host_mbps": PER_HOST[(fabric, tname)],
                     "model_per_host_mbps": 1.67 if fabric.startswith("spineleaf") else 5.0,
                     "hash_ecmp_model_per_host_mbps": 2.68 if per_pair == 1 else 4.53})
    (out / "comparison.json").write_text(json.dumps({"name": "topology-comparison", "complete": complete,
                                                     "runs": rows, "ratios": []}))
    return {"q1": 3, "q2": 20, "q3": 1.53, "q4": 4.26, "q5": round(1.53 / 4.26, 3), "q6": 2.7, "q7": 3}


def test_the_lab_is_registered_and_runs_the_shipped_comparison():
    assert LABS[2] is Topology
    assert Topology().command("topology-comparison") == \
        "sudo fabriclab compare experiments/scenarios/compare-topologies.yaml --results DIR"
    data = yaml.safe_load(SHIPPED.read_text())
    again = Topology().reseed("topology-comparison", data, 3)
    assert again["base"]["seed"] == 3 and again["fabrics"] == data["fabrics"] and "seed" not in data["base"]
    assert all(sc.seed == 3 for _f, _t, sc in validate_comparison(again)["runs"])


def test_the_shipped_fabrics_figures():
    cmp = load_comparison(SHIPPED)
    maps = {f: build_fabric(sc).to_map() for f, _t, sc in cmp["runs"]}
    assert bisection_mbps(maps["spineleaf-3to1"]) == 20                 # 8 leaf-spine links x 5 / 2
    assert bisection_mbps(maps["fattree-k4"]) == 80                     # (edge-agg + agg-core) / 2: not a 2-tier cut
    ups = edge_uplinks(maps["fattree-k4"])
    assert len(ups) == 16 and {p["switch"][2] for p in ups} == {"e"} and {p["peer"][2] for p in ups} == {"a"}


def test_right_answers_score_full_marks_with_the_model_beside_each(tmp_path):
    right = make_comparison(tmp_path)
    verdicts = Topology().check(tmp_path, right)
    assert [v.ok for v in verdicts] == [True] * 7, [(v.question.id, v.expected, v.why) for v in verdicts if not v.ok]
    by = {v.question.id: v for v in verdicts}
    assert "6 x 5 Mbit/s down over 2 x 5 Mbit/s up = 3" in by["q1"].why
    assert "24 hosts / 2 x 5 Mbit/s = 60 Mbit/s" in by["q2"].why
    assert "1/3 of the 5 Mbit/s link = 1.67 Mbit/s" in by["q3"].why
    assert by["q3"].expected == "1.454..1.607 Mbit/s"
    assert "2.68 with hash ECMP" in by["q6"].why and "your Fat-Tree gave 4.26" in by["q6"].why
    assert "(1 - 1/2)^2 = 0.25 of them unused, 4.0 of 16" in by["q7"].why and "your run had 0" in by["q7"].why
    assert by["q7"].expected == "2.50..3.50 links"
    assert [v.ok for v in Topology().check(tmp_path / "20261205T120000Z-topology-comparison", right)] == [True] * 7


def test_wrong_answers_score_zero_each_with_its_reason(tmp_path):
    right = make_comparison(tmp_path)
    wrong = {"q1": 1, "q2": 60, "q3": 5 / 3, "q4": 5, "q5": 0.25, "q6": 4.26, "q7": 4}
    verdicts = Topology().check(tmp_path, wrong)
    assert [v.ok for v in verdicts] == [False] * 7
    assert all("your " in v.why for v in verdicts)
    assert not Topology().check(tmp_path, {**right, "q3": "1.53 Gbit/s"})[2].ok
    assert Topology().check(tmp_path, {**right, "q3": "1,53 Mbit/s"})[2].ok


def test_a_comparison_without_the_one_flow_runs_marks_their_questions_missing(tmp_path):
    right = make_comparison(tmp_path, traffic=("permutation-8-flows",))
    verdicts = Topology().check(tmp_path, right)
    assert [v.ok for v in verdicts] == [True] * 5 + [False] * 2
    assert "sudo fabriclab compare experiments/scenarios/compare-topologies.yaml" in verdicts[5].why


def test_an_unfinished_comparison_is_passed_over(tmp_path):
    make_comparison(tmp_path, complete=False)
    assert find_runs(tmp_path, Topology.RUNS) == {}
    assert cli.main(["lab", "check", "2", "--results", str(tmp_path), "--answers", str(SHIPPED)]) == 2


def test_the_lab_command_shows_the_comparison(capsys):
    assert cli.main(["lab", "show", "2"]) == 0
    shown = capsys.readouterr().out
    assert "sudo fabriclab compare experiments/scenarios/compare-topologies.yaml" in shown and "q7 [links]" in shown


def test_lab_outcomes_repeats_a_comparison_and_refuses_a_troubleshooting_run():
    spec = importlib.util.spec_from_file_location("lab_outcomes", Topology.folder().parents[1] / "scripts" /
                                                  "lab_outcomes.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.verb_of(Topology().command("topology-comparison")) == "compare"
    assert mod.verb_of(LABS[4]().command("incast")) == "run"
    assert mod.verb_of(LABS[6]().command("diagnose-fattree")) is None
    assert mod.main(["--lab", "6"]) == 2


@pytest.mark.parametrize("answer,ok", [(3, True), ("3:1", True), ("6:2", True), ("3.0 ratio", True), ("1:3", False),
                                       ("3 Mbit/s", False)])
def test_the_ratio_is_a_number(tmp_path, answer, ok):
    right = make_comparison(tmp_path)
    assert Topology().check(tmp_path, {**right, "q1": answer})[0].ok is ok


def test_a_ratio_written_unquoted_in_the_answers_file_is_read_as_written(tmp_path):
    """YAML 1.1 reads an unquoted 3:1 as the base-60 number 181; the answers file keeps it 3:1."""
    from experiments.labs.base import read_answers
    f = tmp_path / "a.yaml"
    f.write_text("q1: 3:1\nq2: '5:1'   # quoted\nq3: 2.5\nq4: 4 # no ratio\n")
    assert read_answers(f) == {"q1": "3:1", "q2": "5:1", "q3": 2.5, "q4": 4}
