"""The labs without a fabric: every registered lab's sheet and answers template ask exactly its
questions; the check of lab 4 on synthetic run folders (right, wrong, missing, malformed answers);
the command's exit codes."""
import json
import re

import pytest
import yaml

from experiments import cli
from experiments.labs import LABS
from experiments.labs.base import Band, LabError, around, read_answers
from experiments.labs.congestion import Congestion


@pytest.mark.parametrize("number", sorted(LABS))
def test_each_lab_has_a_sheet_and_a_template_with_exactly_its_questions(number):
    lab = LABS[number]
    assert lab.NUMBER == number and lab.folder().name.startswith(f"{number:02d}-")
    sheet = (lab.folder() / "README.md").read_text()
    for heading in ("## Goals", "## Background", "## Steps", "## Questions", "## Check your answers"):
        assert heading in sheet, heading
    for q in lab.QUESTIONS:
        assert f"| {q.id} | {q.prompt} |" in sheet, q.id
    template = yaml.safe_load((lab.folder() / "answers.yaml").read_text())
    assert list(template) == [q.id for q in lab.QUESTIONS] and set(template.values()) == {None}
    for name in lab.RUNS:
        assert lab().command(name).replace("DIR", "results/lab") in sheet.replace(f"results/lab{number}", "results/lab")
    index = (lab.folder().parent / "README.md").read_text()
    assert f"]({lab.folder().name}/README.md)" in index


def test_bands():
    b = around(100, 0.05, 2, "why")
    assert (b.low, b.high) == (95, 105) and 95 in b and 105.1 not in b
    assert around(0, 0.1, 0.5, "w").text("packets") == "-0.50..0.50 packets"
    assert Band(0.97, 1.03, "w").text("ratio") == "0.9700..1.0300 ratio"


def summary_incast(drops, queue_median, mean_tx, total, paused):
    return {"bottleneck": {"drops": drops, "mean_tx_mbps": mean_tx, "rate_mbps": 10, "buffer_packets": 100},
            "ecn": {"queue_after_first_rtt": {"median_packets": queue_median}, "bottleneck_k_bytes": 30280},
            "total_drops": total, "pfc": {"paused_time_s": paused}}


def make_runs(root):
    inc = root / "20261205T100000Z-incast"
    for i, (name, s) in enumerate((("drop-tail", summary_incast(164, 90, 9.99, 167, 0)),
                                   ("ecn-k20", summary_incast(2, 17, 9.97, 2, 0)),
                                   ("pfc", summary_incast(0, 60, 9.99, 0, 8.6)),
                                   ("ecn-pfc", summary_incast(0, 18, 9.99, 0, 0.03)))):
        d = inc / "rounds" / f"{i + 1:02d}-{name}"
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps(s))
    (inc / "scenario.yaml").write_text("name: incast\n")
    (inc / "timings.json").write_text("{}")                     # a run that finished
    roce = root / "20261205T101000Z-roce-incast"
    for i, (mode, cnps, rtx) in enumerate((("dcqcn", 627, 15), ("dcqcn", 499, 106), ("dcqcn", 473, 224),
                                           ("none", 715, 890), ("none", 490, 58), ("none", 625, 186))):
        d = roce / "rounds" / f"{i + 1:02d}-{mode}-seed{i % 3 + 1}"
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps({"roce": {"mode": mode, "cnps_received": cnps,
                                                             "retransmitted_packets": rtx}}))
    (roce / "scenario.yaml").write_text("name: roce-incast\n")
    (roce / "timings.json").write_text("{}")
    return {"q1": 164, "q2": 17, "q3": 82, "q4": 0.997, "q5": 0, "q6": "ecn-pfc", "q7": 499, "q8": 186}


def test_lab4_right_answers_score_full_marks_with_what_each_was_checked_against(tmp_path):
    right = make_runs(tmp_path)
    verdicts = Congestion().check(tmp_path, right)
    assert [v.ok for v in verdicts] == [True] * 8, [(v.question.id, v.expected, v.why) for v in verdicts if not v.ok]
    by = {v.question.id: v for v in verdicts}
    assert by["q2"].expected == "15.30..18.70 packets" and "K = 20 packets" in by["q2"].why
    assert by["q6"].expected == "ecn-pfc" and "8.60 s (pfc) against 0.03 s (ecn-pfc)" in by["q6"].why
    assert by["q7"].expected == "449.1..548.9 packets"                      # the median of 627, 499, 473 +- 10%
    assert by["q8"].expected == "167.4..204.6 packets"                      # the median of 890, 58, 186 +- 10%


def test_lab4_wrong_missing_and_malformed_answers(tmp_path):
    right = make_runs(tmp_path)
    wrong = {**right, "q1": 100, "q3": "lots", "q6": "PFC"}
    del wrong["q5"]
    verdicts = {v.question.id: v for v in Congestion().check(tmp_path, wrong)}
    assert [k for k, v in verdicts.items() if not v.ok] == ["q1", "q3", "q5", "q6"]
    assert "not a number" in verdicts["q3"].why and "no answer given" in verdicts["q5"].why
    assert verdicts["q1"].expected == "155.8..172.2 packets"
    assert Congestion().check(tmp_path, {**right, "q6": " ECN-PFC "})[5].ok       # a choice: any case, trimmed
    with pytest.raises(LabError, match="unknown question 'q9'"):
        Congestion().check(tmp_path, {**right, "q9": 1})


def test_lab4_with_only_one_run_marks_the_other_runs_questions_missing(tmp_path):
    right = make_runs(tmp_path)
    for p in (tmp_path / "20261205T101000Z-roce-incast").rglob("*"):
        if p.is_file():
            p.unlink()
    (tmp_path / "20261205T101000Z-roce-incast" / "scenario.yaml").write_text("name: other\n")
    verdicts = Congestion().check(tmp_path, right)
    assert [v.ok for v in verdicts] == [True] * 6 + [False] * 2
    assert "sudo fabriclab run experiments/scenarios/roce-incast.yaml" in verdicts[6].why
    with pytest.raises(LabError, match="no finished run of lab 4"):
        Congestion().check(tmp_path / "20261205T101000Z-roce-incast", right)


def test_answers_files(tmp_path):
    (tmp_path / "a.yaml").write_text("q1: 3\nq2: ecn\n")
    assert read_answers(tmp_path / "a.yaml") == {"q1": 3, "q2": "ecn"}
    (tmp_path / "b.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(LabError, match="expected a mapping"):
        read_answers(tmp_path / "b.yaml")
    with pytest.raises(LabError, match="cannot read"):
        read_answers(tmp_path / "none.yaml")
    (tmp_path / "c.yaml").write_text("")
    assert read_answers(tmp_path / "c.yaml") == {}


def test_the_lab_command(tmp_path, capsys):
    right = make_runs(tmp_path)
    (tmp_path / "answers.yaml").write_text(yaml.safe_dump(right))
    assert cli.main(["lab", "check", "4", "--results", str(tmp_path)]) == 0          # RESULTS/answers.yaml
    out = capsys.readouterr().out
    assert out.startswith("== lab 4: ") and out.strip().endswith("score: 8/8")
    (tmp_path / "half.yaml").write_text(yaml.safe_dump({**right, "q1": 1}))
    assert cli.main(["lab", "check", "4", "--results", str(tmp_path), "--answers", str(tmp_path / "half.yaml")]) == 1
    assert "score: 7/8" in capsys.readouterr().out
    assert cli.main(["lab", "check", "9", "--results", str(tmp_path)]) == 2
    assert "no lab 9" in capsys.readouterr().err
    assert cli.main(["lab", "check", "4", "--results", str(tmp_path / "nowhere")]) == 2
    assert "no such results folder" in capsys.readouterr().err
    (tmp_path / "bad.yaml").write_text("q12: 1\n")
    assert cli.main(["lab", "check", "4", "--results", str(tmp_path), "--answers", str(tmp_path / "bad.yaml")]) == 2
    assert re.search(r"unknown question 'q12'", capsys.readouterr().err)
    # another lab's results and no answers file: the wrong folder is what is named
    (tmp_path / "answers.yaml").unlink()
    assert cli.main(["lab", "check", "3", "--results", str(tmp_path)]) == 2
    assert "no finished run of lab 3 in it" in capsys.readouterr().err
    assert cli.main(["lab", "list"]) == 0 and "lab 4: congestion" in capsys.readouterr().out
    assert cli.main(["lab", "show", "4"]) == 0
    shown = capsys.readouterr().out
    assert "sudo fabriclab run experiments/scenarios/incast.yaml" in shown and "q8 [packets]" in shown


def diagnose_record(root, truth: dict, seed: int, name: str = "diagnose-fattree"):
    d = root / f"20261205T1{seed:05d}Z-diagnose-{name}-seed{seed}"
    d.mkdir(parents=True)
    (d / "diagnosis.json").write_text(json.dumps({"mode": "by hand", "scenario": name, "inject": "random",
                                                  "seed": seed, "truth": [truth], "truth_description": "x"}))
    return d


def lab6_right(truth: dict) -> dict:
    from controller.faults import FAULTS
    size = truth.get("frame_fraction") or truth.get("rate_fraction") or truth.get("down_s")
    place = truth.get("link") or truth.get("switch") or truth.get("host")
    return {"q1": truth["kind"], "q2": place.replace("<->", "->"), "q3": FAULTS[truth["kind"]].LAYER, "q4": size}


def test_lab6_checks_every_kind_of_random_hidden_fault(tmp_path):
    """Twenty seeds of the k=4 Fat-Tree's random fault (every kind): the right answers score 4/4,
    answers wrong in every way 0/4; a link's direction counts for corrupt and degrade, not for a flap."""
    from experiments import troubleshooter as D
    from experiments.labs.troubleshooting import Troubleshooting
    from experiments.plan import build_fabric
    from experiments.scenario import read_yaml_file, validate
    sc = validate(read_yaml_file(Troubleshooting.folder().parents[1] / Troubleshooting.RUNS["diagnose-fattree"]))
    fmap = build_fabric(sc).to_map()
    kinds = set()
    for seed in range(20):
        truth = D.random_fault(fmap, seed)
        kinds.add(truth["kind"])
        root = tmp_path / str(seed)
        diagnose_record(root, truth, seed)
        right = lab6_right(truth)
        assert [v.ok for v in Troubleshooting().check(root, right)] == [True] * 4, (seed, truth)
        other = next(k for k in ("corrupt", "drop", "flap") if k != truth["kind"])
        wrong = {"q1": other, "q2": "h16" if right["q2"] != "h16" else "h15",
                 "q3": "host" if right["q3"] != "host" else "switch", "q4": right["q4"] * 3}
        verdicts = Troubleshooting().check(root, wrong)
        assert [v.ok for v in verdicts] == [False] * 4, (seed, truth)
        if "->" in right["q2"]:
            a, b = right["q2"].split("->")
            flipped = Troubleshooting().check(root, {**right, "q2": f"{b}->{a}"})[1]
            assert flipped.ok == (truth["kind"] == "flap"), (seed, truth)
    assert kinds == {"corrupt", "degrade", "drop", "flap", "slow_host"}


def test_lab6_reads_the_newest_record(tmp_path):
    diagnose_record(tmp_path, {"kind": "drop", "switch": "c2", "frame_fraction": 0.05}, 1)
    diagnose_record(tmp_path, {"kind": "slow_host", "host": "h7", "rate_fraction": 0.3}, 2)
    from experiments.labs.troubleshooting import Troubleshooting
    verdicts = Troubleshooting().check(tmp_path, {"q1": "slow_host", "q2": "h7", "q3": "host", "q4": 0.25})
    assert [v.ok for v in verdicts] == [True] * 4
    assert verdicts[3].expected == "0.150..0.450" and "rate_fraction 0.3" in verdicts[3].why


def test_the_ring_fit_recovers_alpha_and_b():
    from experiments.labs.collectives import fit_alpha_beta
    n, alpha, b = 8, 0.003, 9.5e6
    sizes = [65536, 524288, 2097152]
    times = [2 * (n - 1) * alpha + 2 * (n - 1) / n * 8 * d / b for d in sizes]
    got_alpha, got_b = fit_alpha_beta(n, sizes, times)
    assert got_alpha == pytest.approx(alpha) and got_b == pytest.approx(b)
    with pytest.raises(ValueError):
        fit_alpha_beta(n, sizes, [1.0, 0.5, 0.2])


def make_allreduce_run(root, n=8):
    from experiments.tables import write_csv
    run = root / "20261205T100000Z-allreduce-placement"
    (run).mkdir(parents=True)
    (run / "scenario.yaml").write_text("name: allreduce-placement\n")
    (run / "timings.json").write_text("{}")
    for i, (name, b) in enumerate((("rack-local", 9.5e6), ("spread", 4.5e6))):
        d = run / "rounds" / f"{i + 1:02d}-{name}"
        d.mkdir(parents=True)
        rows = []
        for size in (65536, 524288, 2097152):
            t = 2 * (n - 1) * 0.003 + 2 * (n - 1) / n * 8 * size / b
            rows.append({"size_bytes": size, "time_s": t, "busbw_bps": 2 * (n - 1) / n * 8 * size / t,
                         "model_busbw_bps": 9.4e6, "alpha_s": 0.0031, "rate_bps": 9.56e6})
        write_csv(d / "collective.csv", list(rows[0]), rows)
        steps = [{"size_bytes": s, "iteration": it, "rank": r, "step": k} for s in (65536, 2097152) for it in (0, 1)
                 for r in range(n) for k in range(2 * (n - 1))]
        write_csv(d / "collective_steps.csv", list(steps[0]), steps)
    busbw = {name: 2 * (n - 1) / n * 8 * 2097152 / (2 * (n - 1) * 0.003 + 2 * (n - 1) / n * 8 * 2097152 / b) / 1e6
             for name, b in (("rack-local", 9.5e6), ("spread", 4.5e6))}
    return {"q1": 2 * (n - 1), "q2": busbw["rack-local"], "q3": busbw["spread"], "q4": "rack-local", "q5": 3.0,
            "q6": 9.5}


def test_lab3_right_and_wrong(tmp_path):
    from experiments.labs.collectives import Collectives
    right = make_allreduce_run(tmp_path)
    verdicts = Collectives().check(tmp_path, right)
    assert [v.ok for v in verdicts] == [True] * 6, [(v.question.id, v.expected) for v in verdicts]
    assert "2(N - 1) = 14 for N = 8 ranks" in verdicts[0].why and "9.40 Mbit/s" in verdicts[1].why
    wrong = {"q1": 7, "q2": right["q2"] * 1.2, "q3": right["q3"] * 0.8, "q4": "spread", "q5": 6.0, "q6": 5}
    assert [v.ok for v in Collectives().check(tmp_path, wrong)] == [False] * 6


def test_a_newer_run_that_did_not_finish_is_passed_over(tmp_path):
    right = make_runs(tmp_path)
    stopped = tmp_path / "20261205T110000Z-incast"                # interrupted: no timings.json, no summaries
    (stopped / "rounds" / "01-drop-tail").mkdir(parents=True)
    (stopped / "scenario.yaml").write_text("name: incast\n")
    assert [v.ok for v in Congestion().check(tmp_path, right)] == [True] * 8


def test_numbers_with_their_unit_or_a_decimal_comma():
    from experiments.labs.base import as_number
    assert as_number(9.19, "Mbit/s") == 9.19 and as_number("9.19 Mbit/s", "Mbit/s") == 9.19
    assert as_number("2,87", "ms") == 2.87 and as_number(" 2.87ms ", "ms") == 2.87 and as_number("14", "steps") == 14
    assert as_number("9.19 Gbit/s", "Mbit/s") is None and as_number("1,234.5", "") is None
    assert as_number(True, "") is None and as_number("about twenty", "packets") is None


def test_a_round_is_found_by_its_exact_name(tmp_path):
    from experiments.labs.base import round_folder
    for d in ("01-ecn-pfc", "02-pfc"):
        (tmp_path / "rounds" / d).mkdir(parents=True)
    assert round_folder(tmp_path, "pfc").name == "02-pfc" and round_folder(tmp_path, "ecn-pfc").name == "01-ecn-pfc"
    with pytest.raises(FileNotFoundError):
        round_folder(tmp_path, "drop-tail")


def test_a_choice_named_among_other_words_and_the_choices_named_when_wrong(tmp_path):
    right = make_runs(tmp_path)
    lab = Congestion()
    q6 = next(q for q in lab.QUESTIONS if q.id == "q6")
    assert lab.same(q6, "the ecn-pfc round", "ecn-pfc") and not lab.same(q6, "ecn-pfc", "pfc")
    assert not lab.same(q6, "pfc, then ecn-pfc", "ecn-pfc")                     # both named: not an answer
    verdicts = {v.question.id: v for v in lab.check(tmp_path, {**right, "q6": "neither"})}
    assert not verdicts["q6"].ok and "answer one of: pfc, ecn-pfc" in verdicts["q6"].why
    verdicts = {v.question.id: v for v in lab.check(tmp_path, {**right, "q1": "160 ms"})}
    assert "not a number in packets" in verdicts["q1"].why
