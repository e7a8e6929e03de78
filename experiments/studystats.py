"""Statistics of congestion-control A/B studies: per-variant medians with bootstrap confidence
intervals, paired comparisons of two variants, and the multiple-comparison control that keeps a
study of many metrics honest.

What a study is. A study runs several variants (e.g. DCQCN against a new rate controller) with the
same seeds. Each (variant, metric) gives one value per seed: a sequence indexed by seed, ``None`` or
NaN where that seed produced no value. :func:`summarize_variant` describes one such sequence;
:func:`compare_paired` compares two variants' sequences of one metric seed by seed;
:func:`adjust_family` adjusts the p-values of all the comparisons of one study together.

Why paired. The seeds are common random numbers: seed ``i`` draws the same flow sizes, start
times and ECMP hashes for every variant, so the seed-to-seed spread (one seed's incast is simply
worse) is shared by both variants and cancels in the per-seed difference ``b_i - a_i``. The
comparison is therefore made on those differences (their median, the signed-rank test's
interval, the Wilcoxon signed-rank test), not on two independent samples. :attr:`PairStat.diff_std` against
:attr:`PairStat.unpaired_diff_std` (the spread of ``a_i - b_j`` over different seeds ``i != j``)
shows how much the pairing bought.

Why the signed-rank interval for pairs. The interval of a pair's difference (and of its per-seed
ratio) is the one the Wilcoxon signed-rank test inverts (:func:`signed_rank_interval`), so it
excludes 0 exactly when the test rejects: a verdict and its interval cannot disagree. The paired
bootstrap of the medians is kept beside it for reference: with ties (a p99 queue at its buffer in
most seeds) and 10 seeds the bootstrap distribution of a median is lumpy, and in one A/A study of
ten on this project's machine its interval excluded 1 where the test found nothing.

Why medians and bootstrap intervals per variant. One run of a congestion experiment is one draw from a wide,
often skewed distribution; a claim about a scheme is a claim about that distribution over many
runs (Pantheon: F. Y. Yan et al., "Pantheon: the training ground for Internet
congestion-control research", USENIX ATC 2018, found single runs misleading and reports
distributions over repeated runs). Medians resist the odd pathological seed; the bootstrap
(B. Efron and R. J. Tibshirani, "An Introduction to the Bootstrap", Chapman & Hall, 1993) gives
their confidence intervals without assuming a distribution. The intervals use the *percentile*
method (``scipy.stats.bootstrap(method='percentile')``): BCa is undefined on degenerate samples (all
values equal, e.g. zero drops for every seed, or an A/A study with identical runs: its acceleration
is 0/0 and scipy returns NaN), and degenerate samples are common here; the percentile interval of a
constant sample is simply ``[v, v]``.

Why Holm and a Bonferroni confidence level. A study compares two variants on ~15 metrics. Tested
each at the 5% level, an A/A study (two identical variants) would show some "significant"
difference on about half of all runs: 1 - 0.95**15 = 54%. So the p-values of one study are adjusted
together with Holm's step-down procedure (S. Holm, "A simple sequentially rejective multiple test
procedure", Scand. J. Statist. 6, 1979), which holds the family-wise error rate (the chance of any
false difference in the study) at 1 - confidence, and the intervals are computed at the Bonferroni
level :func:`simultaneous_confidence` ``(confidence, m)`` = 1 - (1 - confidence)/m, so all m of
them hold together with probability at least ``confidence``. A difference is reported only when
both agree: the Holm-adjusted p-value is below 1 - confidence *and* the simultaneous interval of the
median difference excludes 0. The test is the Wilcoxon signed-rank test (F. Wilcoxon, "Individual
comparisons by ranking methods", Biometrics Bulletin 1, 1945) on the per-seed differences: no
normality assumption, exact for small studies.

Typical use::

    m = len(metrics)
    level = simultaneous_confidence(0.95, m)
    pairs = [compare_paired(a[k], b[k], better[k], confidence=level) for k in metrics]
    pairs = adjust_family(pairs, confidence=0.95)

Results are reproducible: every bootstrap draws from ``numpy.random.default_rng(seed)``.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np
from scipy import stats

#: The power :func:`compare_paired` sizes ``seeds_needed`` for.
POWER = 0.8
#: The verdict of a pair with fewer than two seeds measured in both variants: nothing to compare.
NO_DATA = "no data"
#: The verdicts: with a preferred direction, and without one (``better=None``), and with no data.
VERDICTS = ("A better", "B better", "A higher", "B higher", "no difference", NO_DATA)
BETTER = ("lower", "higher", None)


def _plain(v):
    """A JSON-able scalar: numpy numbers to Python, NaN and +-inf to None."""
    if v is None or isinstance(v, (str, bool)):
        return v
    if isinstance(v, (int, np.integer)):
        return int(v)
    f = float(v)
    return f if math.isfinite(f) else None


@dataclass(frozen=True)
class VariantStat:
    """One variant's values of one metric over the seeds, in the metric's own unit.

    Attributes:
        n: values counted (None and NaN dropped).
        median: median over the seeds; None when n == 0.
        ci_low, ci_high: percentile-bootstrap confidence interval of the median; None when n < 2.
        mean: arithmetic mean; None when n == 0.
        std: sample standard deviation (ddof=1); None when n < 2.
    """
    n: int
    median: float | None
    ci_low: float | None
    ci_high: float | None
    mean: float | None
    std: float | None

    def as_dict(self) -> dict:
        """The fields as a plain JSON-able dict (Python numbers, None for undefined, never NaN/inf)."""
        return {k: _plain(v) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class PairStat:
    """Variant B against variant A on one metric, seed by seed (``diff = b - a``), in the metric's unit.

    Attributes:
        n: seeds where both values exist.
        a_median, b_median: the medians of A and B over those seeds (None when n == 0).
        diff_median: median of the per-seed differences b_i - a_i (None when n == 0).
        diff_ci_low, diff_ci_high: the distribution-free interval of the paired shift at
            ``confidence``: order statistics of the Walsh averages of the differences, cut where
            the Wilcoxon signed-rank test would reject (:func:`signed_rank_interval`; Hodges and
            Lehmann 1963). It excludes 0 exactly when the test rejects at that level.
        ratio: the Hodges-Lehmann estimate of the per-seed ratio b_i / a_i (the median of its
            Walsh averages), unitless; a seed where both are 0 counts as ratio 1; None when some
            a_i is 0 and its b_i is not (or a value is negative).
        ratio_ci_low, ratio_ci_high: the same interval for the per-seed ratios.
        ci_achieved: the level the two intervals reach (at or above ``confidence``; below it only
            when n is too small for any finite interval at ``confidence``: then it is the widest,
            [min, max], and this says its level).
        diff_boot_ci_low, diff_boot_ci_high, ratio_boot_ci_low, ratio_boot_ci_high: the paired
            percentile bootstrap (seeds resampled together) of the median difference and of
            median(b)/median(a), at ``confidence``, for reference: with ties and few seeds the
            bootstrap distribution of a median is lumpy and these can exclude 0 (or 1) where
            the test finds nothing (one A/A run in ten did on this project's first study).
        p_wilcoxon: two-sided Wilcoxon signed-rank p-value of the differences (1.0 when all are 0).
        p_adjusted: ``p_wilcoxon`` as returned by :func:`compare_paired`; the Holm-adjusted
            p-value of the study after :func:`adjust_family`.
        verdict: "A better", "B better" or "no difference" (with ``better=None``: "A higher",
            "B higher" or "no difference").
        seeds_needed: seeds a paired study would need to detect a mean difference of the size
            observed with 80% power at the two-sided level 1 - ``confidence`` (see
            :func:`compare_paired`).
        diff_std: sample standard deviation (ddof=1) of the per-seed differences.
        unpaired_diff_std: sample standard deviation (ddof=1) of a_i - b_j over all i != j: the
            spread of a difference without common random numbers.
        better: the metric's preferred direction, "lower", "higher" or None (none).
        confidence: the level of the two intervals (and of ``seeds_needed``).

    Everything but the three medians is None when n < 2, and the verdict is then "no data"
    (:data:`NO_DATA`: no seed, or one, measured in both variants; a study whose cells were all
    left out must not read as "no difference").
    """
    n: int
    a_median: float | None
    b_median: float | None
    diff_median: float | None
    diff_ci_low: float | None
    diff_ci_high: float | None
    ratio: float | None
    ratio_ci_low: float | None
    ratio_ci_high: float | None
    p_wilcoxon: float | None
    p_adjusted: float | None
    verdict: str
    seeds_needed: int | None
    diff_std: float | None
    unpaired_diff_std: float | None
    better: str | None
    confidence: float
    ci_achieved: float | None = None
    diff_boot_ci_low: float | None = None
    diff_boot_ci_high: float | None = None
    ratio_boot_ci_low: float | None = None
    ratio_boot_ci_high: float | None = None

    def as_dict(self) -> dict:
        """The fields as a plain JSON-able dict (Python numbers, None for undefined, never NaN/inf)."""
        return {k: _plain(v) for k, v in asdict(self).items()}


#: Up to this many pairs the signed-rank interval uses the exact null distribution (above: normal).
EXACT_MAX_N = 60


@functools.lru_cache(maxsize=None)
def _signed_rank_cdf(n: int) -> tuple[float, ...]:
    """P(T+ <= t) for t = 0 .. n(n+1)/2 under the null (every sign equally likely), exact."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1.0
    for r in range(1, n + 1):
        counts[r:] = counts[r:] + counts[:-r].copy()
    return tuple(np.cumsum(counts) / 2.0 ** n)


def signed_rank_interval(x, confidence: float) -> tuple[float, float, float]:
    """The distribution-free interval of the center (pseudo-median) of paired differences ``x``:
    the k-th smallest and k-th largest of the n(n+1)/2 Walsh averages (x_i + x_j)/2, i <= j, with k
    the Wilcoxon signed-rank test's critical count at 1 - ``confidence`` (exact null distribution
    up to :data:`EXACT_MAX_N` values, else the normal approximation). Source: J. L. Hodges and E.
    L. Lehmann, "Estimates of location based on rank tests", Ann. Math. Statist. 34, 1963; M.
    Hollander and D. A. Wolfe, "Nonparametric Statistical Methods", section 3.3. It excludes 0
    exactly when the two-sided signed-rank test rejects at that level, so an interval and its
    verdict never disagree; ties and zeros need no special case.

    Returns:
        ``(low, high, achieved level)``; with too few values for any finite interval at
        ``confidence`` (10 values reach at most 1 - 2/1024), the widest one, [min, max], and its level.

    Raises:
        ValueError: fewer than 2 values, or a bad ``confidence``.
    """
    c = _check_confidence(confidence)
    x = np.asarray(x, dtype=float)
    n = int(x.size)
    if n < 2:
        raise ValueError(f"an interval needs at least 2 values, got {n}")
    i, j = np.triu_indices(n)
    walsh = np.sort((x[i] + x[j]) / 2)
    m = walsh.size
    half = (1 - c) / 2
    if n <= EXACT_MAX_N:
        cdf = _signed_rank_cdf(n)
        k = max([k for k in range(1, m // 2 + 1) if cdf[k - 1] <= half], default=1)
        achieved = 1 - 2 * cdf[k - 1]
    else:
        z = float(stats.norm.ppf(1 - half))
        k = max(1, int(math.floor(m / 2 - z * math.sqrt(n * (n + 1) * (2 * n + 1) / 24))))
        achieved = c
    return float(walsh[k - 1]), float(walsh[m - k]), float(achieved)


def signed_rank_p(d) -> float:
    """The two-sided Wilcoxon signed-rank p-value of paired differences ``d``, exact with ties.

    Zero differences are dropped (Wilcoxon's convention, scipy's ``zero_method="wilcox"``); the
    others are ranked by magnitude with tied magnitudes given their mean rank. Up to
    :data:`EXACT_MAX_N` nonzero differences the null distribution of T+ (the positive ranks' sum,
    every sign equally likely) is counted exactly for these very ranks, so ties cost no exactness;
    above that, scipy's normal approximation. scipy's own exact method covers only tie-free
    samples, and its tied case falls back to the normal approximation, which misses significance
    the exact count and :func:`signed_rank_interval` show. Source: the conditional (permutation)
    signed-rank test, Hollander and Wolfe, "Nonparametric Statistical Methods", section 3.1,
    comment on ties.

    Args:
        d: the differences (1-D, finite floats).

    Returns:
        p in (0, 1]; 1.0 when every difference is 0.
    """
    d = np.asarray(d, dtype=float)
    d = d[d != 0]
    n = int(d.size)
    if n == 0:
        return 1.0
    if n > EXACT_MAX_N:
        return float(stats.wilcoxon(d, zero_method="wilcox", alternative="two-sided", method="asymptotic").pvalue)
    ranks2 = np.rint(2 * stats.rankdata(np.abs(d))).astype(int)     # mean ranks are halves: doubled, whole
    counts = np.zeros(int(ranks2.sum()) + 1)
    counts[0] = 1.0
    for r in ranks2:
        counts[r:] = counts[r:] + counts[:-r].copy()
    prob = counts / 2.0 ** n
    t = int(ranks2[d > 0].sum())
    return float(min(1.0, 2 * min(prob[:t + 1].sum(), prob[t:].sum())))


def hodges_lehmann(x) -> float:
    """The Hodges-Lehmann estimate of the center of ``x``: the median of its Walsh averages."""
    x = np.asarray(x, dtype=float)
    i, j = np.triu_indices(x.size)
    return float(np.median((x[i] + x[j]) / 2))


def _check_confidence(confidence: float, name: str = "confidence") -> float:
    c = float(confidence)
    if not 0 < c < 1:
        raise ValueError(f"{name} must be strictly between 0 and 1, got {confidence!r}")
    return c


def _check_resamples(n_resamples: int) -> int:
    if isinstance(n_resamples, bool) or int(n_resamples) != n_resamples or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    return int(n_resamples)


def _floats(values, name: str) -> np.ndarray:
    """``values`` as a float array with NaN for None/NaN. Raises ValueError on +-inf."""
    out = np.array([np.nan if v is None else float(v) for v in values], dtype=float)
    bad = np.flatnonzero(np.isinf(out))
    if bad.size:
        raise ValueError(f"{name}[{int(bad[0])}] is infinite; drop a missing value as None or NaN")
    return out


def simultaneous_confidence(confidence: float, m: int) -> float:
    """The Bonferroni level for ``m`` simultaneous intervals: 1 - (1 - confidence) / m.

    Computed at this level, ``m`` intervals all cover their true values together with probability
    at least ``confidence`` (e.g. 0.95 and 15 metrics -> 0.99667).

    Raises:
        ValueError: ``confidence`` not strictly between 0 and 1, or ``m`` not an integer >= 1.
    """
    c = _check_confidence(confidence)
    if isinstance(m, bool) or int(m) != m or m < 1:
        raise ValueError(f"m (the number of intervals) must be an integer >= 1, got {m!r}")
    return 1 - (1 - c) / int(m)


def summarize_variant(values: Sequence[float | None], confidence: float = 0.95, n_resamples: int = 9999,
                      seed: int = 0) -> VariantStat:
    """Median, bootstrap interval of the median, mean and sample std of one variant's values.

    Args:
        values: one value per seed (any length, any unit); None and NaN are dropped.
        confidence: level of the interval, strictly between 0 and 1.
        n_resamples: bootstrap resamples (``scipy.stats.bootstrap``, percentile method: see the
            module docstring for why not BCa).
        seed: seeds the ``numpy.random.Generator`` the resamples are drawn from.

    Returns:
        A :class:`VariantStat`: n == 0 -> every statistic None; n == 1 -> interval and std None;
        all values equal -> interval [v, v].

    Raises:
        ValueError: an infinite value, a bad ``confidence`` or ``n_resamples``.
    """
    c = _check_confidence(confidence)
    nr = _check_resamples(n_resamples)
    x = _floats(values, "values")
    x = x[~np.isnan(x)]
    n = int(x.size)
    if n == 0:
        return VariantStat(0, None, None, None, None, None)
    med, mean = float(np.median(x)), float(np.mean(x))
    if n == 1:
        return VariantStat(1, med, None, None, mean, None)
    res = stats.bootstrap((x,), np.median, n_resamples=nr, confidence_level=c, method="percentile",
                          rng=np.random.default_rng(seed))
    ci = res.confidence_interval
    return VariantStat(n, med, float(ci.low), float(ci.high), mean, float(np.std(x, ddof=1)))


def wilcoxon_min_seeds(alpha: float) -> int:
    """The fewest pairs with which the two-sided Wilcoxon signed-rank test can reach p < ``alpha``.

    With n non-zero, distinct differences the smallest exact two-sided p-value is 2 / 2**n (all
    differences of one sign), so this is the least n with 2**(1 - n) < alpha: 6 at alpha = 0.05,
    10 at 0.05/15.

    Raises:
        ValueError: ``alpha`` not strictly between 0 and 1.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be strictly between 0 and 1, got {alpha!r}")
    n = 1
    while 2.0 ** (1 - n) >= alpha:
        n += 1
    return n


@functools.lru_cache(maxsize=64)
def _z_sum(alpha: float) -> float:
    """z(1 - alpha/2) + z(POWER), the standard normal quantiles of a two-sided test and its power."""
    return float(stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(POWER))


def _seeds_needed(d: np.ndarray, alpha: float) -> int | None:
    mean = float(np.mean(d))
    if d.size < 2 or mean == 0:
        return None
    need = math.ceil((_z_sum(alpha) * float(np.std(d, ddof=1)) / abs(mean)) ** 2)
    return max(need, wilcoxon_min_seeds(alpha))


def _verdict(p: float | None, lo: float | None, hi: float | None, better: str | None, alpha: float) -> str:
    """The verdict from an (adjusted) p-value and the interval of the median difference b - a."""
    if p is None or lo is None or hi is None or not p < alpha or lo <= 0 <= hi:
        return "no difference"
    b_higher = lo > 0
    if better is None:
        return "B higher" if b_higher else "A higher"
    return "B better" if b_higher == (better == "higher") else "A better"


def compare_paired(a: Sequence[float | None], b: Sequence[float | None], better: str | None,
                   confidence: float = 0.95, n_resamples: int = 9999, seed: int = 0) -> PairStat:
    """Compare variant B against variant A on one metric, seed by seed.

    Args:
        a, b: equal-length sequences, index i = seed i, in the metric's unit; a pair where either
            value is None or NaN is dropped.
        better: "lower" or "higher" (which direction is better for this metric), or None for a
            metric without one (the verdict is then "A higher" / "B higher" / "no difference").
        confidence: level of the intervals and of the test behind the verdict and
            ``seeds_needed``. For a study of m metrics pass ``simultaneous_confidence(0.95, m)``
            and then run :func:`adjust_family` over the study.
        n_resamples: bootstrap resamples.
        seed: seeds the ``numpy.random.Generator`` of the bootstrap (reproducible results).

    What is computed (see :class:`PairStat`):

    * ``diff_median`` (the median of the per-seed differences b - a) and its interval, the
      signed-rank test's own (:func:`signed_rank_interval`, level achieved in ``ci_achieved``).
    * ``ratio``: the Hodges-Lehmann center of the per-seed ratios b/a (a seed where both are 0
      counts as 1), with the signed-rank interval of those ratios; None when some a is 0 with
      b not, or a value is negative.
    * ``diff_boot_ci_*`` and ``ratio_boot_ci_*``, for reference: one paired
      ``scipy.stats.bootstrap`` (percentile method) resampling seed indices, the difference of
      medians and median(b*)/median(a*); resamples with median(a*) == 0 are dropped, and when
      more than (1 - confidence)/2 of them are, the ratio's ends are None.
    * ``p_wilcoxon``: :func:`signed_rank_p`, two-sided, zero differences dropped, exact with ties
      up to :data:`EXACT_MAX_N` pairs; 1.0 when every difference is 0.
    * ``p_adjusted`` = ``p_wilcoxon`` (:func:`adjust_family` replaces it); the verdict says a
      difference when ``p_adjusted < 1 - confidence`` and the interval of ``diff_median`` excludes
      0, in the direction of that interval.
    * ``seeds_needed`` = max(ceil(((z(1 - alpha/2) + z(0.8)) * diff_std / |mean diff|)**2),
      :func:`wilcoxon_min_seeds` (alpha)) with alpha = 1 - confidence: the normal-approximation
      sample size of a paired test with 80% power for the observed mean difference and spread,
      floored at the fewest pairs with which the Wilcoxon test can be significant at all (6 at
      alpha = 0.05; a zero spread gives that floor). It is an estimate from the observed spread
      (itself uncertain at small n), for a paired z-test: the Wilcoxon test needs about 5% more
      seeds for normal differences (asymptotic relative efficiency 3/pi), fewer for heavy-tailed
      ones. None when the mean difference is 0 or n < 2.

    Raises:
        ValueError: ``a`` and ``b`` of different lengths (the message names both), an infinite
            value, ``better`` not one of "lower", "higher", None, a bad ``confidence`` or
            ``n_resamples``.
    """
    if better not in BETTER:
        raise ValueError(f"better must be 'lower', 'higher' or None, got {better!r}")
    c = _check_confidence(confidence)
    nr = _check_resamples(n_resamples)
    alpha = 1 - c
    xa, xb = _floats(a, "a"), _floats(b, "b")
    if xa.size != xb.size:
        raise ValueError(f"a and b are paired by seed and must have the same length: a has {xa.size} "
                         f"values, b has {xb.size}")
    keep = ~(np.isnan(xa) | np.isnan(xb))
    xa, xb = xa[keep], xb[keep]
    n = int(xa.size)
    d = xb - xa
    none = dict(diff_ci_low=None, diff_ci_high=None, ratio=None, ratio_ci_low=None, ratio_ci_high=None,
                p_wilcoxon=None, p_adjusted=None, verdict=NO_DATA, seeds_needed=None, diff_std=None,
                unpaired_diff_std=None, better=better, confidence=c)
    if n == 0:
        return PairStat(n=0, a_median=None, b_median=None, diff_median=None, **none)
    ma, mb, md = float(np.median(xa)), float(np.median(xb)), float(np.median(d))
    if n == 1:
        return PairStat(n=1, a_median=ma, b_median=mb, diff_median=md, **none)

    def medians(ra, rb, axis=-1):
        return np.stack([np.median(rb - ra, axis=axis), np.median(ra, axis=axis), np.median(rb, axis=axis)])

    res = stats.bootstrap((xa, xb), medians, paired=True, n_resamples=nr, confidence_level=c,
                          method="percentile", rng=np.random.default_rng(seed))
    bd_lo, bd_hi = float(res.confidence_interval.low[0]), float(res.confidence_interval.high[0])
    br_lo = br_hi = None
    if not np.any(xa) and not np.any(xb):
        br_lo = br_hi = 1.0
    elif ma != 0:
        _, ra, rb = res.bootstrap_distribution
        ok = ra != 0
        if np.count_nonzero(~ok) <= alpha / 2 * ra.size:
            q = np.quantile(rb[ok] / ra[ok], [alpha / 2, 1 - alpha / 2])   # = scipy's 'linear'
            br_lo, br_hi = float(q[0]), float(q[1])

    d_lo, d_hi, achieved = signed_rank_interval(d, c)
    ratio = r_lo = r_hi = None
    both_zero = (xa == 0) & (xb == 0)
    if np.all(xa[~both_zero] > 0) and np.all(xb >= 0):
        r = np.ones(n)
        r[~both_zero] = xb[~both_zero] / xa[~both_zero]
        ratio = hodges_lehmann(r)
        r_lo, r_hi, _ = signed_rank_interval(r, c)

    p = signed_rank_p(d)

    off = ~np.eye(n, dtype=bool)
    unpaired = (xa[:, None] - xb[None, :])[off]
    return PairStat(n=n, a_median=ma, b_median=mb, diff_median=md, diff_ci_low=d_lo, diff_ci_high=d_hi,
                    ratio=ratio, ratio_ci_low=r_lo, ratio_ci_high=r_hi, p_wilcoxon=p, p_adjusted=p,
                    verdict=_verdict(p, d_lo, d_hi, better, alpha), seeds_needed=_seeds_needed(d, alpha),
                    diff_std=float(np.std(d, ddof=1)), unpaired_diff_std=float(np.std(unpaired, ddof=1)),
                    better=better, confidence=c, ci_achieved=achieved, diff_boot_ci_low=bd_lo,
                    diff_boot_ci_high=bd_hi, ratio_boot_ci_low=br_lo, ratio_boot_ci_high=br_hi)


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm-Bonferroni adjusted p-values, in the order given.

    With the m non-None p-values sorted ascending, p_(1) <= ... <= p_(m), the adjusted value of
    p_(i) is max over j <= i of min(1, (m - j + 1) * p_(j)): monotone in the raw p-values and
    capped at 1. Rejecting where the adjusted value is below alpha is Holm's procedure (S. Holm,
    1979), which holds the family-wise error rate at alpha under any dependence between the tests.
    None (a comparison without a p-value) passes through and does not count in m.

    Raises:
        ValueError: a p-value that is NaN or outside [0, 1].
    """
    ps = [None if p is None else float(p) for p in pvalues]
    for i, p in enumerate(ps):
        if p is not None and not 0 <= p <= 1:
            raise ValueError(f"p-value {i} is {p}; p-values are in [0, 1] (None for none)")
    idx = sorted((i for i, p in enumerate(ps) if p is not None), key=lambda i: ps[i])
    m = len(idx)
    out: list[float | None] = [None] * len(ps)
    running = 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        out[i] = running
    return out


def adjust_family(pairs: Sequence[PairStat], confidence: float = 0.95) -> list[PairStat]:
    """The comparisons of one study with Holm-adjusted p-values and their verdicts recomputed.

    Args:
        pairs: every :class:`PairStat` of the study (the family), e.g. one per metric, each
            computed by :func:`compare_paired` at ``simultaneous_confidence(confidence, len(pairs))``.
        confidence: the family's level: the chance of any false difference in the study is held
            at 1 - confidence.

    Returns:
        New PairStats in the same order: ``p_adjusted`` from :func:`holm` over the ``p_wilcoxon``
        values, and the verdict "better"/"higher" only where ``p_adjusted < 1 - confidence`` and
        the pair's own interval of the median difference excludes 0 ("no data" below 2 seeds). The intervals and
        ``seeds_needed`` are unchanged (they stay at the level each pair was computed at).

    Raises:
        ValueError: a bad ``confidence``.
    """
    alpha = 1 - _check_confidence(confidence)
    adjusted = holm([p.p_wilcoxon for p in pairs])
    return [replace(p, p_adjusted=q, verdict=NO_DATA if p.n < 2 else
                    _verdict(q, p.diff_ci_low, p.diff_ci_high, p.better, alpha))
            for p, q in zip(pairs, adjusted)]


# What a study's comparison.json says, in the words both the terminal summary (experiments.study)
# and report.html (experiments.studyreport) use.

def interval_level(comparison: dict) -> float:
    """The level of each interval in a study's ``comparison`` (comparison.json as a dict): the
    simultaneous (Bonferroni) level where it gives one, else its confidence, else 0.95."""
    for key in ("simultaneous_confidence", "confidence"):
        v = comparison.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
    return 0.95


def short_interval(pair: dict, level: float) -> float | None:
    """The level a pair's intervals reach (its ``ci_achieved``) when that is below ``level``, the
    level asked for (too few seeds: the signed-rank interval is then [min, max] of the per-seed
    values); None when the intervals hold at ``level`` or the pair gives no level."""
    got = pair.get("ci_achieved")
    if not isinstance(got, (int, float)) or isinstance(got, bool) or not math.isfinite(got):
        return None
    return float(got) if got < level - 1e-9 else None


def paths_sentence(paths: dict, variants: int) -> str | None:
    """One sentence on whether each seed put each flow on the same path in every variant, from a
    study's ``paths`` record (``{"checked", "same", "differing"}``, experiments.study.paths_paired);
    None when there is nothing to say (nothing traced and only one variant)."""
    if paths.get("checked"):
        if paths.get("same"):
            return (f"every seed put each flow on the same path in every variant ({paths['checked']} seed x "
                    "sweep points checked)")
        return f"{len(paths.get('differing') or [])} flows took different paths in different variants of one seed"
    if variants > 1:
        return ("not traced in these runs (the flows of kernel TCP and of the udp transport are traced, up to 256 "
                "per round; RoCE queue pairs are not): the seeds fix the source ports, but the same paths in "
                "every variant are not verified")
    return None
