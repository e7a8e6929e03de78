"""scripts/test_repeat.py: the figures' summary and the prediction bounds a calibration uses."""
import importlib.util
import random
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "test_repeat_script", Path(__file__).resolve().parents[2] / "scripts" / "test_repeat.py")
tr = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tr)


def test_prediction_bounds_of_ten_runs_hand_computed():
    # mean 10, sample sd 1.0541 (values 9, 11 five times each); t(0.999, 9) = 4.2968
    values = [9.0, 11.0] * 5
    lo, hi = tr.prediction_bounds(values)
    half = 4.2968 * 1.05409 * (1 + 1 / 10) ** 0.5
    assert lo == pytest.approx(10 - half, abs=1e-3) and hi == pytest.approx(10 + half, abs=1e-3)


def test_prediction_bounds_need_three_runs():
    assert tr.prediction_bounds([1.0, 2.0]) is None


def test_bounds_hold_about_one_run_in_a_thousand_on_normal_figures():
    rng = random.Random(7)
    outside = trials = 0
    for _ in range(4000):
        lo, hi = tr.prediction_bounds([rng.gauss(0, 1) for _ in range(10)])
        x = rng.gauss(0, 1)
        outside += x < lo or x > hi
        trials += 1
    assert outside / trials < 0.006           # 0.002 expected (two sides)


def test_summarize_counts_outcomes_and_figures():
    runs = [{"m::t": {"outcome": "passed", "s": 2.0, "figures": {"q": v}}} for v in (1.0, 2.0, 3.0)]
    runs.append({"m::t": {"outcome": "failed", "s": 4.0, "figures": {}}})
    t = tr.summarize(runs)["m::t"]
    assert (t["passed"], t["failed"]) == (3, 1)
    assert t["s"] == {"min": 2.0, "median": 2.0, "max": 4.0}
    f = t["figures"]["q"]
    assert (f["n"], f["min"], f["median"], f["max"]) == (3, 1.0, 2.0, 3.0)
    assert f["bound_low"] < 1.0 and f["bound_high"] > 3.0


_times_spec = importlib.util.spec_from_file_location(
    "test_times_script", Path(__file__).resolve().parents[2] / "scripts" / "test_times.py")
tt = importlib.util.module_from_spec(_times_spec)
_times_spec.loader.exec_module(tt)


def test_test_times_names_tests_in_classes_by_file_and_class(tmp_path):
    xml = tmp_path / "host.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest" time="12.5">'
        '<testcase classname="tests.integration.test_ecn_marking.TestStepFabric" name="test_step[auto]" time="3.5">'
        '<properties><property name="guard_bytes" value="1844.0"/><property name="note" value="x"/></properties>'
        '</testcase>'
        '<testcase classname="tests.integration.test_idle" name="test_quiet[2x2]" time="9.0">'
        '<skipped message="vm lane only"/></testcase>'
        '</testsuite></testsuites>')
    rep = tt.read_report(xml)
    assert rep["wall_s"] == 12.5
    assert rep["tests"] == {
        "tests/integration/test_ecn_marking.py::TestStepFabric::test_step[auto]": {"s": 3.5, "outcome": "passed",
                                                                             "figures": {"guard_bytes": 1844.0}},
        "tests/integration/test_idle.py::test_quiet[2x2]": {"s": 9.0, "outcome": "skipped", "figures": {}}}
