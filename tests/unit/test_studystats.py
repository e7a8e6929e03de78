"""Study statistics (experiments.studystats) against known answers on synthetic data: A/A and a
clear A/B, the family-wise error of a many-metric A/A study, what pairing buys, Holm by hand,
seeds_needed by hand, degenerate inputs, and JSON-safe output. Any warning fails a test."""
import json
import math

import numpy as np
import pytest

from experiments.studystats import (PairStat, VariantStat, adjust_family, compare_paired, holm,
                                    simultaneous_confidence, summarize_variant, wilcoxon_min_seeds)

pytestmark = pytest.mark.filterwarnings("error")

NR = 2000  # bootstrap resamples: enough for every answer below
Z975, Z80 = 1.959963984540054, 0.8416212335729143  # standard normal quantiles, from tables


def json_safe(stat):
    d = stat.as_dict()
    json.dumps(d, allow_nan=False)
    return d


def test_a_a_identical_runs_show_no_difference():
    a = [101.0, 97.5, 120.0, 88.0, 99.0, 105.5, 93.0, 110.0, 102.0, 96.0]
    p = compare_paired(a, list(a), "lower", n_resamples=NR)
    assert (p.n, p.diff_median, p.diff_ci_low, p.diff_ci_high) == (10, 0.0, 0.0, 0.0)
    assert p.ratio == 1.0 and p.ratio_ci_low <= 1.0 <= p.ratio_ci_high
    assert p.p_wilcoxon == 1.0 and p.p_adjusted == 1.0
    assert p.verdict == "no difference"
    assert p.seeds_needed is None and p.diff_std == 0.0
    json_safe(p)


def test_b_lower_by_5_on_every_seed_is_b_better():
    rng = np.random.default_rng(7)
    a = rng.normal(100, 10, 10)
    b = a - 5 + rng.normal(0, 0.2, 10)
    p = compare_paired(a, b, "lower", n_resamples=NR)
    assert p.verdict == "B better"
    assert p.diff_ci_high < 0 and p.diff_ci_low == pytest.approx(-5, abs=0.5)
    assert p.p_wilcoxon == pytest.approx(2 / 1024)  # exact: all 10 differences negative, two-sided
    assert p.ratio < 1 and p.ratio_ci_high < 1
    # the same data, read the other ways round
    assert compare_paired(a, b, "higher", n_resamples=NR).verdict == "A better"
    assert compare_paired(a, b, None, n_resamples=NR).verdict == "A higher"
    assert compare_paired(b, a, None, n_resamples=NR).verdict == "B higher"


def test_results_are_reproducible_from_the_seed():
    rng = np.random.default_rng(3)
    a, b = rng.normal(10, 1, 12), rng.normal(10.5, 1, 12)
    assert compare_paired(a, b, "lower", n_resamples=500, seed=5) == compare_paired(a, b, "lower", n_resamples=500,
                                                                                      seed=5)
    assert summarize_variant(a, n_resamples=500, seed=5) == summarize_variant(a, n_resamples=500, seed=5)


def test_a_a_studies_of_15_metrics_keep_the_family_wise_error():
    """100 A/A studies of 15 metrics and 10 seeds, each metric with a large common per-seed
    component and independent noise: with simultaneous intervals and Holm, few studies show any
    false difference (2 of these 100); tested one by one at 5%, about half do (58 here;
    1 - 0.95**15 = 54%)."""
    studies, metrics, seeds = 100, 15, 10
    level = simultaneous_confidence(0.95, metrics)
    rng = np.random.default_rng(2024)
    false_family = false_naive = 0
    for _ in range(studies):
        pairs = []
        for m in range(metrics):
            common = rng.normal(100, 20, seeds)
            a, b = common + rng.normal(0, 1, seeds), common + rng.normal(0, 1, seeds)
            pairs.append(compare_paired(a, b, ("lower", "higher", None)[m % 3], confidence=level,
                                        n_resamples=200, seed=m))
        family = adjust_family(pairs, confidence=0.95)
        false_family += any(p.verdict != "no difference" for p in family)
        false_naive += any(p.p_wilcoxon < 0.05 for p in pairs)
    assert false_family / studies <= 0.08
    assert false_naive / studies >= 0.3


def test_pairing_removes_the_common_spread():
    rng = np.random.default_rng(11)
    common = rng.normal(1000, 200, 20)  # one seed's traffic is simply heavier for both variants
    a, b = common + rng.normal(0, 2, 20), common + 3 + rng.normal(0, 2, 20)
    p = compare_paired(a, b, "lower", n_resamples=NR)
    assert p.diff_std < p.unpaired_diff_std / 20
    assert p.unpaired_diff_std == pytest.approx(200 * math.sqrt(2), rel=0.35)
    assert p.verdict == "A better"  # b is 3 higher on a spread that would hide it without pairing


def test_unpaired_diff_std_is_over_different_seeds_only():
    a, b = [1.0, 2.0, 4.0], [1.0, 3.0, 4.0]
    cross = [ai - bj for i, ai in enumerate(a) for j, bj in enumerate(b) if i != j]
    p = compare_paired(a, b, "lower", n_resamples=NR)
    assert p.unpaired_diff_std == pytest.approx(float(np.std(cross, ddof=1)))
    assert p.diff_std == pytest.approx(float(np.std([0.0, 1.0, 0.0], ddof=1)))


def test_holm_by_hand():
    # sorted: 0.005 (x4 = 0.02), 0.01 (x3 = 0.03), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> 0.06, monotone)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.01, None, 0.04, 0.03, 0.005]) == [pytest.approx(0.03), None, pytest.approx(0.06),
                                                      pytest.approx(0.06), pytest.approx(0.02)]
    assert holm([0.5, 0.6]) == [1.0, 1.0]  # capped
    assert holm([]) == [] and holm([None]) == [None]
    assert holm([0.02]) == [0.02]
    for bad in (float("nan"), -0.1, 1.5):
        with pytest.raises(ValueError, match="p-value 1"):
            holm([0.1, bad])


def test_adjust_family_recomputes_verdicts():
    rng = np.random.default_rng(7)
    a = rng.normal(100, 10, 10)
    one = compare_paired(a, a - 5 + rng.normal(0, 0.2, 10), "lower", n_resamples=NR)
    assert one.p_wilcoxon == pytest.approx(2 / 1024)
    # 20 such metrics: Holm's first step is 20 * 2/1024 = 0.039 < 0.05; 30: 0.059 > 0.05
    assert {p.verdict for p in adjust_family([one] * 20)} == {"B better"}
    thirty = adjust_family([one] * 30)
    assert {p.verdict for p in thirty} == {"no difference"}
    assert thirty[0].p_adjusted == pytest.approx(30 * 2 / 1024) and thirty[0].p_wilcoxon == one.p_wilcoxon
    assert thirty[0].diff_ci_low == one.diff_ci_low  # intervals unchanged
    empty = compare_paired([], [], "lower")
    assert adjust_family([one, empty])[1].p_adjusted is None


def test_simultaneous_confidence():
    assert simultaneous_confidence(0.95, 1) == pytest.approx(0.95)
    assert simultaneous_confidence(0.95, 15) == pytest.approx(1 - 0.05 / 15)
    for bad in ((0.95, 0), (1.0, 3), (0.95, 2.5)):
        with pytest.raises(ValueError):
            simultaneous_confidence(*bad)


def test_seeds_needed_by_hand():
    d = [-1.0, 3.0] * 5  # mean 1, sample variance 10 * 4 / 9
    p = compare_paired([100.0] * 10, [100.0 + x for x in d], "lower", n_resamples=200)
    assert p.seeds_needed == math.ceil(((Z975 + Z80) * math.sqrt(40 / 9) / 1.0) ** 2) == 35
    # at a Bonferroni level for 15 metrics: z(1 - 0.05/30) instead of z(0.975)
    p15 = compare_paired([100.0] * 10, [100.0 + x for x in d], "lower", n_resamples=200,
                         confidence=simultaneous_confidence(0.95, 15))
    assert p15.seeds_needed == math.ceil(((2.935199468866699 + Z80) * math.sqrt(40 / 9)) ** 2) == 64


def test_seeds_needed_floor_and_none():
    # zero spread: the formula gives 0; the floor is the fewest pairs Wilcoxon can reject with
    assert (wilcoxon_min_seeds(0.05), wilcoxon_min_seeds(0.05 / 15)) == (6, 10)
    a = [10.0, 12.0, 11.0, 15.0]
    assert compare_paired(a, [x + 5 for x in a], "lower", n_resamples=200).seeds_needed == 6
    assert compare_paired(a, [x + 5 for x in a], "lower", n_resamples=200,
                          confidence=simultaneous_confidence(0.95, 15)).seeds_needed == 10
    # a small spread: still the floor, never fewer seeds than can show anything
    assert compare_paired(a, [x + 5 + e for x, e in zip(a, (0.1, -0.1, 0.05, 0))], "lower",
                          n_resamples=200).seeds_needed == 6
    assert compare_paired(a, [x + s for x, s in zip(a, (1, -1, 2, -2))], "lower", n_resamples=200).seeds_needed is None
    assert compare_paired([1.0], [2.0], "lower").seeds_needed is None
    with pytest.raises(ValueError):
        wilcoxon_min_seeds(0)


def test_summarize_variant():
    v = summarize_variant([3.0, 1.0, 2.0, 5.0, 4.0], n_resamples=NR)
    assert (v.n, v.median, v.mean) == (5, 3.0, 3.0)
    assert v.std == pytest.approx(math.sqrt(2.5))
    assert 1.0 <= v.ci_low <= 3.0 <= v.ci_high <= 5.0
    json_safe(v)


def test_summarize_variant_degenerate():
    assert summarize_variant([]) == VariantStat(0, None, None, None, None, None)
    assert summarize_variant([None, float("nan")]) == VariantStat(0, None, None, None, None, None)
    assert summarize_variant([7.0, None]) == VariantStat(1, 7.0, None, None, 7.0, None)
    assert summarize_variant([4.0] * 6, n_resamples=NR) == VariantStat(6, 4.0, 4.0, 4.0, 4.0, 0.0)
    assert summarize_variant([0.0] * 3, n_resamples=NR) == VariantStat(3, 0.0, 0.0, 0.0, 0.0, 0.0)
    v = summarize_variant(np.array([1.0, np.nan, 3.0]), n_resamples=NR)
    assert (v.n, v.median) == (2, 2.0)
    with pytest.raises(ValueError, match=r"values\[1\] is infinite"):
        summarize_variant([1.0, float("inf")])
    with pytest.raises(ValueError, match="confidence"):
        summarize_variant([1.0, 2.0], confidence=1.0)
    with pytest.raises(ValueError, match="n_resamples"):
        summarize_variant([1.0, 2.0], n_resamples=0)
    for v in (summarize_variant([]), summarize_variant([1.0])):
        assert json_safe(v)["ci_low"] is None


def test_compare_paired_degenerate():
    empty = compare_paired([], [], "lower")
    assert empty.n == 0 and empty.a_median is None and empty.verdict == "no data"
    one = compare_paired([1.0, None], [3.0, 2.0], "higher")
    assert (one.n, one.a_median, one.b_median, one.diff_median) == (1, 1.0, 3.0, 2.0)
    assert all(getattr(one, f) is None for f in ("diff_ci_low", "diff_ci_high", "ratio", "ratio_ci_low",
                                                 "ratio_ci_high", "p_wilcoxon", "p_adjusted", "seeds_needed",
                                                 "diff_std", "unpaired_diff_std"))
    assert one.verdict == "no data"
    zeros = compare_paired([0.0] * 8, [0.0] * 8, "lower", n_resamples=NR)
    # a family where some metrics had no data keeps saying so after the adjustment
    assert [p.verdict for p in adjust_family([empty, one, zeros])] == ["no data", "no data", "no difference"]
    assert (zeros.ratio, zeros.ratio_ci_low, zeros.ratio_ci_high) == (1.0, 1.0, 1.0)
    assert (zeros.p_wilcoxon, zeros.verdict, zeros.diff_ci_low, zeros.diff_ci_high) == (1.0, "no difference", 0, 0)
    for d in (empty, one, zeros):
        json_safe(d)


def test_missing_values_drop_the_pair():
    a = [10.0, None, 12.0, float("nan"), 11.0, 13.0]
    b = [9.0, 8.0, None, 7.0, 10.0, 12.5]
    p = compare_paired(a, b, "lower", n_resamples=NR)
    assert p.n == 3 and (p.a_median, p.b_median) == (11.0, 10.0)
    assert p.diff_median == -1.0


def test_unequal_lengths_and_bad_arguments():
    with pytest.raises(ValueError, match="a has 3 values, b has 4"):
        compare_paired([1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0], "lower")
    with pytest.raises(ValueError, match="better"):
        compare_paired([1.0, 2.0], [1.0, 2.0], "smaller")
    with pytest.raises(ValueError, match=r"b\[0\] is infinite"):
        compare_paired([1.0, 2.0], [float("-inf"), 2.0], "lower")


def test_ratio_with_zeros():
    # some a_i == 0 with b_i != 0: no ratio (unbounded)
    p = compare_paired([0.0, 0.0, 0.0, 1.0], [1.0, 2.0, 3.0, 4.0], "lower", n_resamples=NR)
    assert p.ratio is None and p.ratio_ci_low is None and p.diff_median is not None
    # seeds where both are 0 count as ratio 1: the per-seed ratios are 1, 1, 1, 2
    p = compare_paired([0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 2.0], "lower", n_resamples=NR)
    assert p.ratio == pytest.approx(1.0) and (p.ratio_ci_low, p.ratio_ci_high) == (1.0, 2.0)
    # b = 2a with one seed at 0 in both: every per-seed ratio 2 but that one
    a = [0.0, 10.0, 11.0, 12.0, 13.0, 14.0]
    p = compare_paired(a, [2 * x for x in a], "lower", n_resamples=NR)
    assert p.ratio == 2.0 and p.ratio_ci_low == 1.0 and p.ratio_ci_high == 2.0
    # the bootstrap's interval of median(b)/median(a), for reference: many resamples with median(a*) == 0 -> none
    a = [0.0] * 4 + [1.0] * 6
    p = compare_paired(a, [x + 1 for x in a], "lower", n_resamples=NR)
    assert p.ratio is None and (p.ratio_boot_ci_low, p.ratio_boot_ci_high) == (None, None)
    json_safe(p)


def test_as_dict_is_plain_json():
    rng = np.random.default_rng(1)
    a, b = rng.normal(5, 1, 8), rng.normal(6, 1, 8)
    d = json_safe(compare_paired(a, b, None, n_resamples=NR))
    assert list(d) == [f for f in PairStat.__dataclass_fields__]
    assert all(v is None or type(v) in (int, float, str) for v in d.values())
    assert type(d["n"]) is int and type(d["seeds_needed"]) is int


def test_the_signed_rank_interval_is_the_textbook_one():
    from experiments.studystats import signed_rank_interval
    x = np.arange(1, 11, dtype=float) - 3.5          # 10 values
    i, j = np.triu_indices(10)
    walsh = np.sort((x[i] + x[j]) / 2)
    lo, hi, level = signed_rank_interval(x, 0.95)
    # n = 10, two-sided 5%: P(T+ <= 8) = 25/1024 <= 0.025 < P(T+ <= 9) = 33/1024, so k = 9
    assert (lo, hi) == (walsh[8], walsh[55 - 9])
    assert level == pytest.approx(1 - 2 * 25 / 1024)
    lo, hi, level = signed_rank_interval(x, 0.9999)   # beyond what 10 values can reach: [min, max]
    assert (lo, hi) == (x.min(), x.max()) and level == pytest.approx(1 - 2 / 1024)


def test_the_interval_excludes_zero_exactly_when_the_test_rejects():
    from scipy import stats as sst
    from experiments.studystats import signed_rank_interval
    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(6, 16))
        d = rng.normal(rng.uniform(-1.5, 1.5), 1.0, n)
        lo, hi, level = signed_rank_interval(d, 0.95)
        p = sst.wilcoxon(d, method="exact").pvalue
        assert (lo > 0 or hi < 0) == (p <= 1 - level + 1e-12), (d, lo, hi, p, level)


def test_ties_near_a_cap_do_not_make_an_aa_ratio_exclude_one():
    # the p99 queue of two identical variants, often at the buffer's 100 packets: the bootstrap of
    # the ratio of medians can exclude 1 on such data; the signed-rank interval does not
    a = [100, 99, 100, 100, 98.5, 100, 99.6, 100, 100, 99]
    b = [99, 100, 99.2, 100, 98, 100, 99, 100, 99.9, 100]
    p = compare_paired(a, b, "lower", confidence=0.9962, n_resamples=NR)
    assert p.ratio_ci_low <= 1 <= p.ratio_ci_high and p.diff_ci_low <= 0 <= p.diff_ci_high
    assert p.verdict == "no difference"


def test_the_signed_rank_p_is_scipys_exact_one_without_ties_and_a_full_count_with_them():
    import itertools

    from scipy import stats

    from experiments.studystats import signed_rank_p
    rng = np.random.default_rng(3)
    for n in (5, 8, 12):
        d = rng.normal(0.3, 1, n)
        assert signed_rank_p(d) == pytest.approx(stats.wilcoxon(d, method="exact").pvalue, abs=1e-12)
    # ties and a zero: against every one of the 2^9 sign assignments of the mean ranks
    d = np.array([0.5, 0.5, -1.0, 1.0, 1.0, 0.0, 2.0, -0.5, 1.5, 2.0])
    nz = d[d != 0]
    r = stats.rankdata(np.abs(nz))
    t = r[nz > 0].sum()
    ts = np.array([sum(s * x for s, x in zip(signs, r)) for signs in itertools.product((0, 1), repeat=nz.size)])
    assert signed_rank_p(d) == pytest.approx(2 * min(np.mean(ts <= t), np.mean(ts >= t)), abs=1e-12)
    assert signed_rank_p(np.zeros(4)) == 1.0


def test_tied_differences_all_one_way_get_the_exact_p_the_normal_approximation_misses():
    from scipy import stats

    from experiments.studystats import compare_paired, signed_rank_p, simultaneous_confidence
    # 15 seeds, every difference negative, five magnitudes tied (a queue in whole packets): the
    # exact p is 2 / 2^15; scipy falls back to the normal approximation, 9 times larger, above the
    # 99.9% study's per-metric level over 13 metrics
    d = np.array([-3] * 5 + [-2] * 4 + [-1] * 6, dtype=float)
    level = 1 - simultaneous_confidence(0.999, 13)
    assert signed_rank_p(d) == pytest.approx(2 / 2 ** 15)
    assert signed_rank_p(d) < level < stats.wilcoxon(d).pvalue
    a = np.full(15, 10.0)
    p = compare_paired(a, a + d, "lower", confidence=simultaneous_confidence(0.999, 13))
    assert p.verdict == "B better" and p.diff_ci_high < 0
