"""The coursework labs on real runs: each lab's runs (shared with the tests that check those runs
themselves, conftest's session fixtures), a correct answers file worked out from the results as a
student would (experiments.results.load, not the checker's code), full marks from `make
lab-check`; a wrong answers file scores zero on every question it gets wrong, each with its reason."""
import statistics
import subprocess

import pytest
import yaml

from experiments import results as loader

from .conftest import ROOT, run_cli

pytestmark = pytest.mark.lane("host", reason="lab 4's RoCEv2 incast is host-lane only (8 Python senders)")


def lab4_answers(folder) -> dict:
    """Lab 4's answers, read off the two runs' tables with pandas."""
    r = loader.load(folder)
    inc = r.rounds[r.rounds["run"].str.endswith("Z-incast")].set_index("round")
    roce = r.rounds[r.rounds["run"].str.endswith("Z-roce-incast")]
    dt, ecn = inc.loc["drop-tail"], inc.loc["ecn-k20"]
    paused = inc["pfc.paused_time_s"]
    return {"q1": int(dt["bottleneck.drops"]),
            "q2": float(ecn["ecn.queue_after_first_rtt.median_packets"]),
            "q3": round(dt["bottleneck.drops"] / max(ecn["bottleneck.drops"], 1), 2),
            "q4": round(ecn["bottleneck.mean_tx_mbps"] / ecn["bottleneck.rate_mbps"], 3),
            "q5": int(inc.loc["pfc", "total_drops"]),
            "q6": "pfc" if paused["pfc"] < paused["ecn-pfc"] else "ecn-pfc",
            "q7": statistics.median(roce[roce["variant"] == "dcqcn"]["roce.cnps_received"]),
            "q8": statistics.median(roce[roce["variant"] == "open-loop"]["roce.retransmitted_packets"])}


def test_lab4_full_marks_for_the_right_answers_and_zero_for_wrong_ones(tmp_path, lab4_results, default_incast_run,
                                                                         shipped_roce_run):
    right = lab4_answers(lab4_results)
    assert set(right) == {f"q{i}" for i in range(1, 9)}
    (tmp_path / "right.yaml").write_text(yaml.safe_dump(right))
    p = subprocess.run(["make", "-s", "lab-check", "LAB=4", f"RESULTS={lab4_results}",
                        f"ANSWERS={tmp_path / 'right.yaml'}"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    print(p.stdout)
    assert p.returncode == 0 and p.stdout.strip().endswith("score: 8/8"), p.stdout + p.stderr
    assert p.stdout.count(": right; expected") == 8
    # wrong: every number three times too large (plus one, for a zero), the other choice
    wrong = {k: (v * 3 + 1 if not isinstance(v, str) else {"pfc": "ecn-pfc", "ecn-pfc": "pfc"}[v])
             for k, v in right.items()}
    wrong["q2"] = "about twenty"                                  # not a number
    del wrong["q5"]                                               # no answer
    (tmp_path / "wrong.yaml").write_text(yaml.safe_dump(wrong))
    p = run_cli("lab", "check", "4", "--results", str(lab4_results), "--answers", str(tmp_path / "wrong.yaml"))
    print(p.stdout)
    assert p.returncode == 1 and p.stdout.strip().endswith("score: 0/8"), p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert sum(": WRONG; expected " in x for x in lines) == 8
    assert any("about twenty: WRONG" in x and "not a number" in x for x in lines)
    assert any("(none): WRONG" in x and "no answer given" in x for x in lines)
    assert all("your " in x for x in lines if ": WRONG; expected " in x)          # each says from what
