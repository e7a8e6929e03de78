"""Lab 2 (topology) on a real comparison: the shipped Fat-Tree against 3:1 Spine-Leaf comparison
that test_compare.py checks (conftest's ``topology_comparison_run``, run once for both), a correct
answers file worked out from its tables as a student would (pandas and the fabric map, not the
checker's code), full marks from `make lab-check`; a wrong answers file scores zero, each
question with its reason."""
import json
import subprocess

import pytest
import yaml

from experiments import results as loader

from .conftest import ROOT, run_cli

pytestmark = pytest.mark.lane("host", reason="the comparison it reads runs in the host lane only (the emulated CPU "
                                             "cannot forward its rates; test_compare.py)")


def lab2_answers(cmp_dir) -> dict:
    """Lab 2's answers, read off comparison.csv, the Spine-Leaf's fabric map and the Fat-Tree's
    1-flow run's ports with pandas."""
    pd = pytest.importorskip("pandas")
    rows = pd.read_csv(cmp_dir / "comparison.csv").set_index(["fabric", "traffic"])
    sl8, ft8 = rows.loc[("spineleaf-3to1", "permutation-8-flows")], rows.loc[("fattree-k4", "permutation-8-flows")]
    ft1 = rows.loc[("fattree-k4", "permutation-1-flow")]
    fmap = json.loads((cmp_dir / sl8["run"] / "fabric_map.json").read_text())
    uplinks = [l for l in fmap["links"] if {l["a"][:4], l["b"][:4]} == {"leaf", "spin"}]
    ports = loader.load(cmp_dir).ports
    ups = ports[(ports["run"] == ft1["run"]) & ports["switch"].str.fullmatch(r"p\de\d")
                & ports["peer"].str.fullmatch(r"p\da\d")]
    assert len(ups) == 16, ups
    return {"q1": float(sl8["oversubscription"]), "q2": sum(l["rate_mbps"] for l in uplinks) / 2,
            "q3": round(float(sl8["per_host_mbps"]), 3), "q4": round(float(ft8["per_host_mbps"]), 3),
            "q5": round(float(sl8["per_host_mbps"] / ft8["per_host_mbps"]), 3),
            "q6": round(float(ft1["per_host_mbps"]), 3),
            "q7": int((ups["mean_tx_mbps"] < 0.1 * ups["rate_mbps"]).sum())}


def test_lab2_full_marks_for_the_right_answers_and_zero_for_wrong_ones(tmp_path, topology_comparison_run, figure):
    _p, cmp_dir = topology_comparison_run
    right = lab2_answers(cmp_dir)
    print(right)
    assert right["q1"] == 3 and right["q2"] == 8 * 2 / 2                  # 8 leaf-spine links at 2 Mbit/s
    figure("fattree_one_flow_over_eight_flows", right["q6"] / right["q4"])
    figure("fattree_idle_edge_uplinks_one_flow", right["q7"])
    (tmp_path / "right.yaml").write_text(yaml.safe_dump(right))
    p = subprocess.run(["make", "-s", "lab-check", "LAB=2", f"RESULTS={cmp_dir.parent}",
                        f"ANSWERS={tmp_path / 'right.yaml'}"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    print(p.stdout)
    assert p.returncode == 0 and p.stdout.strip().endswith("score: 7/7"), p.stdout + p.stderr
    assert p.stdout.count(": right; expected") == 7
    wrong = {k: v * 3 + 1 for k, v in right.items()}
    wrong["q3"] = "a third"                                        # not a number
    del wrong["q5"]                                                # no answer
    (tmp_path / "wrong.yaml").write_text(yaml.safe_dump(wrong))
    c = run_cli("lab", "check", "2", "--results", str(cmp_dir), "--answers", str(tmp_path / "wrong.yaml"))
    print(c.stdout)
    assert c.returncode == 1 and c.stdout.strip().endswith("score: 0/7"), c.stdout + c.stderr
    lines = c.stdout.splitlines()
    assert sum(": WRONG; expected " in x for x in lines) == 7
    assert any("a third: WRONG" in x and "not a number" in x for x in lines)
    assert any("(none): WRONG" in x and "no answer given" in x for x in lines)
    assert all("your " in x for x in lines if ": WRONG; expected " in x)           # each says from what
