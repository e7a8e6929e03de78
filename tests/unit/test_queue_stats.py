"""Queue percentiles, per-flow fairness and the CDF plots of a flows round, on synthetic inputs
with known answers."""
import numpy as np
import pytest

from common.stats import jain_index, sample_percentiles


# -- common.stats ------------------------------------------------------------------------------

def test_jain_index_equal_rates_is_one_and_one_hog_is_one_over_n():
    assert jain_index([3.0] * 7) == pytest.approx(1.0)
    for n in (2, 5, 16):
        assert jain_index([9.0] + [0.0] * (n - 1)) == pytest.approx(1 / n)
    # two flows at 1 and 3: (4)^2 / (2 * 10) = 0.8
    assert jain_index([1, 3]) == pytest.approx(0.8)


@pytest.mark.parametrize("bad", [[], [0, 0], [1, -1], [1, float("nan")], [float("inf"), 1]])
def test_jain_index_refuses_what_has_no_index(bad):
    with pytest.raises(ValueError):
        jain_index(bad)


def test_sample_percentiles_match_numpy_on_a_skewed_sample():
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.integers(0, 5, 900), rng.integers(80, 101, 100)]).astype(float)
    got = sample_percentiles(x)
    assert list(got) == ["p5", "p50", "p95", "p99"]
    for q in (5, 50, 95, 99):
        assert got[f"p{q}"] == pytest.approx(float(np.percentile(x, q)))
    # the known shape: a queue idle-ish 90% of the time, full the rest
    assert got["p50"] <= 4 and got["p95"] >= 80 and got["p99"] >= 80


def test_sample_percentiles_known_answer_and_edges():
    # 0..100: the q-th percentile of 101 evenly spaced samples is q itself
    assert sample_percentiles(range(101)) == {"p5": 5.0, "p50": 50.0, "p95": 95.0, "p99": 99.0}
    assert sample_percentiles([4]) == {"p5": 4.0, "p50": 4.0, "p95": 4.0, "p99": 4.0}
    assert sample_percentiles([]) is None
    assert sample_percentiles([1, 2], qs=(0, 100, 12.5)) == {"p0": 1.0, "p100": 2.0, "p12.5": 1.125}
    with pytest.raises(ValueError):
        sample_percentiles([1, 2], qs=(101,))
    with pytest.raises(ValueError):
        sample_percentiles([1, float("nan")])
