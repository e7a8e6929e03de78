"""``measurement.plots: false`` skips the rounds' PNG plots (a study of many short cells), and
nothing else: the CSVs the plots would be drawn from are still written by the summaries."""
from types import SimpleNamespace

import pytest

from experiments.context import RoundRecord
from experiments.scenario import validate
from experiments.workloads import flows


def _scenario(plots):
    data = {"name": "p", "topology": {"spines": 1, "leaves": 2, "hosts_per_leaf": 2},
            "traffic": {"pattern": "permutation"}}
    if plots is not None:
        data["measurement"] = {"plots": plots}
    return validate(data)


@pytest.mark.parametrize("plots, drawn", [(None, True), (True, True), (False, False)])
def test_the_rounds_plots_follow_measurement_plots(tmp_path, monkeypatch, plots, drawn):
    calls = []
    monkeypatch.setattr(flows.plot, "plot_all", lambda d, sections: calls.append(("round", d)))
    monkeypatch.setattr(flows.plot, "plot_rounds", lambda d, sections: calls.append(("rounds", d)))
    monkeypatch.setattr(flows.analysis, "write_rounds", lambda *a, **k: None)
    sc = _scenario(plots)
    assert sc.measurement.plots is drawn
    w = flows.KernelFlows.__new__(flows.KernelFlows)
    w.ctx = SimpleNamespace(sc=sc, out=tmp_path, quiet=True, sections=())
    rec = RoundRecord(0, {}, tmp_path / "r")
    w.after_summary(rec, {})
    w.finish_run([(rec, {})])
    assert calls == ([("round", tmp_path / "r"), ("rounds", tmp_path)] if drawn else [])


def test_plots_must_be_a_boolean():
    from common.errors import ScenarioError
    with pytest.raises(ScenarioError, match="measurement.plots"):
        _scenario("sometimes")
