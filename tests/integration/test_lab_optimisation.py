"""Lab 5 (optimisation) on real runs: the shipped training and hierarchical-rail scenarios, run
once per session for their own tests and this one (conftest's ``training_run`` and
``hierarchical_rail_run``, into one results folder as a student runs them); a correct answers
file worked out from the results with pandas (experiments.results.load, not the checker's code)
scores full marks through `make lab-check`; a wrong one scores zero, each question with its
reason."""
import subprocess

import pytest
import yaml

from experiments import results as loader

from .conftest import ROOT, run_cli

pytestmark = pytest.mark.lane("host", reason="lab 5's 16 GPU ranks over kernel TCP run in the host lane only (as "
                                             "test_training.py and test_hierarchical.py, which share its runs, do)")


def lab5_answers(folder) -> dict:
    """Lab 5's answers, read off the two runs' tables as a student would."""
    r = loader.load(folder)
    rounds = r.rounds[r.rounds["run"].str.endswith("Z-training")].set_index("round")
    off, on, int8 = (rounds.loc[n] for n in ("overlap-off", "overlap-on", "int8"))
    its = r.table("training")
    its = its[its["run"].str.endswith("Z-training") & (its["iteration"] > 0)]     # after the first, as the summary
    wire = its.groupby("round")["wire_bytes"].median()
    coll = r.table("collective")
    coll = coll[coll["run"].str.endswith("Z-hierarchical-rail")]
    top = coll[coll["size_bytes"] == coll["size_bytes"].max()].set_index("round")
    flat, hier = top.loc["flat-ring"], top.loc["hierarchical"]
    return {"q1": float(off["training.time_s"]), "q2": float(on["training.time_s"]),
            "q3": float(on["training.time_s"] - on["training.compute_s"]),
            "q4": round(float(wire["int8"] / wire["overlap-off"]), 4),
            "q5": round(float(off["training.comm_s"] / int8["training.comm_s"]), 3),
            "q6": float(flat["time_s"]), "q7": float(hier["time_s"]),
            "q8": round(float(flat["network_bytes"]) / 1e6, 3), "q9": round(float(hier["network_bytes"]) / 1e6, 3),
            "q10": round(float(flat["network_bytes_max_rank"] / hier["network_bytes_max_rank"]), 3),
            "q11": "hierarchical" if hier["time_s"] < flat["time_s"] else "flat-ring"}


def test_lab5_full_marks_for_the_right_answers_and_zero_for_wrong_ones(tmp_path, lab5_results, training_run,
                                                                         hierarchical_rail_run):
    right = lab5_answers(lab5_results)
    assert set(right) == {f"q{i}" for i in range(1, 12)}
    print(right)
    assert right["q4"] < 0.35 and right["q11"] == "hierarchical"              # the model's direction, this run
    (tmp_path / "right.yaml").write_text(yaml.safe_dump(right))
    p = subprocess.run(["make", "-s", "lab-check", "LAB=5", f"RESULTS={lab5_results}",
                        f"ANSWERS={tmp_path / 'right.yaml'}"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    print(p.stdout)
    assert p.returncode == 0 and p.stdout.strip().endswith("score: 11/11"), p.stdout + p.stderr
    assert p.stdout.count(": right; expected") == 11
    # wrong: every number half as large again (plus a little, for a zero), the other choice
    wrong = {k: (v * 1.5 + 0.1 if not isinstance(v, str) else "flat-ring") for k, v in right.items()}
    wrong["q3"] = "a little"                                       # not a number
    del wrong["q8"]                                                # no answer
    (tmp_path / "wrong.yaml").write_text(yaml.safe_dump(wrong))
    p = run_cli("lab", "check", "5", "--results", str(lab5_results), "--answers", str(tmp_path / "wrong.yaml"))
    print(p.stdout)
    assert p.returncode == 1 and p.stdout.strip().endswith("score: 0/11"), p.stdout + p.stderr
    lines = [x for x in p.stdout.splitlines() if ": WRONG; expected " in x]
    assert len(lines) == 11
    assert any("a little: WRONG" in x and "not a number" in x for x in lines)
    assert any("(none): WRONG" in x and "no answer given" in x for x in lines)
    assert all("model" in x for x in lines)                                         # each says the model's figure
    assert sum("+-" in x for x in lines) == 8          # the numbers answered: the band around the run, and from what
