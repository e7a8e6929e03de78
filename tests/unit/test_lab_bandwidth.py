"""Lab 1 without a fabric: the Theil-Sen fit of T = alpha + 8 D / B recovers alpha and B through
a few flows that met others; the check of a synthetic run's flows.csv, right and wrong answers,
and a run too small to fit."""
import random

import pytest

from experiments.labs.bandwidth import BandwidthLatency, fit_alpha_b, switches_on
from experiments.tables import FLOW_COLUMNS, write_csv

PATHS = {1: "h1>edge1>h2", 3: "h1>edge1>agg1>edge2>h3", 5: "h1>edge1>agg1>core1>agg3>edge5>h9"}
ALPHA_S = {1: 0.0012, 3: 0.0025, 5: 0.0040}
B_BPS = 9.5e6


def make_run(root, counts=None, seed=3):
    """A finished latency-bandwidth run whose flows follow the model, 1 in 10 delayed 50%."""
    rng = random.Random(seed)
    run = root / "20261205T120000Z-latency-bandwidth"
    run.mkdir(parents=True)
    (run / "scenario.yaml").write_text("name: latency-bandwidth\n"
                                      "topology: {kind: fattree, k: 4, host_rate_mbps: 10}\n")
    (run / "timings.json").write_text("{}")
    rows = []
    for s, n in (counts or {1: 14, 3: 26, 5: 160}).items():
        for i in range(n):
            d = rng.choice([1448, 5000, 20000, 60000, 150000, 400000, 1500000])
            t = ALPHA_S[s] + 8 * d / B_BPS
            t *= 1.5 if i % 10 == 9 else 1 + rng.uniform(-0.002, 0.002)
            rows.append({**{k: "" for k in FLOW_COLUMNS}, "flow_id": len(rows), "bytes_planned": d, "fct_s": t,
                         "ideal_fct_s": ALPHA_S[s] * 0.9 + 8 * max(0, d - 15000) / 9.56e6, "complete": True,
                         "path": PATHS[s]})
    rows.append({**{k: "" for k in FLOW_COLUMNS}, "flow_id": len(rows), "bytes_planned": 9999, "complete": False,
                 "path": PATHS[5]})
    write_csv(run / "flows.csv", list(FLOW_COLUMNS), rows)
    return run


def test_the_fit_recovers_alpha_and_b_despite_flows_that_met_others():
    rng = random.Random(1)
    sizes = [rng.randrange(1448, 1_500_000) for _ in range(60)]
    times = [0.004 + 8 * d / B_BPS for d in sizes]
    times = [t * (3 if i % 8 == 0 else 1) for i, t in enumerate(times)]          # 1 in 8 slowed threefold
    alpha, b = fit_alpha_b(sizes, times)
    assert alpha == pytest.approx(0.004, rel=1e-6) and b == pytest.approx(B_BPS, rel=1e-6)
    for bad in (([1448, 1448, 1448], [0.01, 0.02, 0.03]), ([1, 2], [0.1, 0.2]), ([1, 2, 3], [0.3, 0.2, 0.1])):
        with pytest.raises(ValueError):
            fit_alpha_b(*bad)


def test_switch_counts_of_traced_paths():
    assert [switches_on(p) for p in PATHS.values()] == [1, 3, 5]
    assert switches_on("") is None and switches_on("error: no route") is None


def test_right_answers_full_marks_and_wrong_ones_zero(tmp_path):
    make_run(tmp_path)
    right = {"q1": 160, "q2": B_BPS / 1e6, "q3": ALPHA_S[5] * 1e3, "q4": ALPHA_S[1] * 1e3,
             "q5": ALPHA_S[5] * B_BPS / 8 / 1e3, "q6": "5 switches"}
    verdicts = BandwidthLatency().check(tmp_path, right)
    assert [v.ok for v in verdicts] == [True] * 6, [(v.question.id, v.expected, v.why) for v in verdicts]
    assert "9.56 Mbit/s" in verdicts[1].why and "160 5-switch flows" in verdicts[1].why
    assert "model: 2.39 ms" in verdicts[2].why        # a one-segment flow's ideal time less its 8 D / B (1.21 ms)
    # q5: alpha x B in bits, not kB
    wrong = {"q1": 200, "q2": 10, "q3": ALPHA_S[1] * 1e3, "q4": ALPHA_S[5] * 1e3, "q5": 38.0, "q6": "one"}
    verdicts = BandwidthLatency().check(tmp_path, wrong)
    assert [v.ok for v in verdicts] == [False] * 6, [(v.question.id, v.expected, v.why) for v in verdicts]


def test_a_run_with_too_few_near_flows_marks_their_questions_missing(tmp_path):
    make_run(tmp_path, counts={1: 2, 5: 40})
    verdicts = {v.question.id: v for v in BandwidthLatency().check(tmp_path, {"q4": 1.2, "q6": "5"})}
    assert not verdicts["q4"].ok and "too few 1-switch flows" in verdicts["q4"].why
    assert not verdicts["q6"].ok and verdicts["q6"].expected == "-"
