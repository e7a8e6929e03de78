"""Comparison files: every key checked, errors name the comparison's own key."""
import pytest

from common.errors import ScenarioError
from experiments.compare import DEFAULT, load_comparison, ratios, validate_comparison

GOOD = {"name": "cmp", "fabrics": {"ft": {"kind": "fattree", "k": 4}, "sl": {"kind": "spineleaf"}},
        "traffic": {"perm": {"pattern": "permutation", "flows_per_pair": 8}}}


def test_default_file_is_valid_and_expands_to_runs():
    cmp = load_comparison(DEFAULT)
    assert len(cmp["runs"]) == len({f for f, _, _ in cmp["runs"]}) * len({t for _, t, _ in cmp["runs"]})
    fabrics = {f: sc.topology.kind for f, _, sc in cmp["runs"]}
    assert set(fabrics.values()) == {"fattree", "spineleaf"}


@pytest.mark.parametrize("bad, key", [
    ({"fabrics": {"ft": {"kind": "fattree", "k": 5}}}, "fabrics.ft.k"),
    ({"fabrics": {"ft": {"kind": "fattree", "spines": 2}}}, "fabrics.ft.spines"),
    ({"traffic": {"perm": {"pattern": "ring"}}}, "traffic.perm.pattern"),
    ({"traffic": {"perm": {"flows_per_pair": 0}}}, "traffic.perm.flows_per_pair"),
    ({"base": {"queues": {"buffer_packet": 3}}}, "base.queues.buffer_packet"),
    ({"base": {"topology": {}}}, "base.topology"),
    ({"base": {"rounds": [{"name": "a"}]}}, "base.rounds"),
    ({"base": {"ecn": {"profile": {"step": {"k_packets": 500}}}}}, "base.ecn.profile.step.k_packets"),
    ({"extra": 1}, "extra"),
    ({"fabrics": {}}, "fabrics"),
])
def test_bad_keys_are_named(bad, key):
    data = {**GOOD, **bad}
    with pytest.raises(ScenarioError) as e:
        validate_comparison(data)
    assert e.value.key == key


def test_ratios_against_oversubscription():
    rows = [{"traffic": "perm", "fabric": "ft", "oversubscription": 1.0, "per_host_mbps": 9.0, "model_per_host_mbps": 10.0},
            {"traffic": "perm", "fabric": "sl", "oversubscription": 3.0, "per_host_mbps": 3.0, "model_per_host_mbps": 10 / 3}]
    (q,) = ratios(rows)
    assert q["per_host_ratio_oversubscription"] == pytest.approx(1 / 3)
    assert q["per_host_ratio_measured"] == pytest.approx(1 / 3)
    assert q["measured_over_oversubscription_prediction"] == pytest.approx(1.0)
