"""The bundled flow-size distributions (traffic.flowsizes): valid CDFs, inverse-CDF sampling that
reproduces them (Kolmogorov-Smirnov against the piecewise-linear CDF), scaling, and Poisson
arrivals whose offered load is the one asked for, prefix-stable in the seed."""
import random

import numpy as np

import pytest

from traffic.flowsizes import (DATAMINING, FLOW_SIZES, HADOOP, TCP_PAYLOAD_BYTES, WEBSEARCH, FlowSizeCdf,
                               bytes_label, flow_size_cdf, offered_load, poisson_arrivals, size_buckets)

HOSTS = [f"h{i}" for i in range(1, 25)]


@pytest.mark.parametrize("cdf", list(FLOW_SIZES.values()) + [flow_size_cdf(n) for n in FLOW_SIZES],
                         ids=[f"{n}-raw" for n in FLOW_SIZES] + [f"{n}-scaled" for n in FLOW_SIZES])
def test_every_cdf_is_monotone_from_0_to_1(cdf):
    xs, ps = cdf.sizes, cdf.probabilities
    assert all(b >= a for a, b in zip(xs, xs[1:])) and all(b >= a for a, b in zip(ps, ps[1:]))
    assert ps[0] == 0.0 and ps[-1] == 1.0 and xs[0] >= 0
    assert cdf.source or cdf.scale != 1.0
    # the CDF and its inverse agree at every point that is not a step
    for x, p in cdf.points:
        assert cdf.cdf(x) >= p - 1e-12


def test_a_cdf_that_decreases_or_does_not_reach_1_is_refused():
    with pytest.raises(ValueError, match="must not decrease"):
        FlowSizeCdf("bad", ((0, 0.0), (10, 0.6), (5, 1.0)))
    with pytest.raises(ValueError, match="from 0 to 1"):
        FlowSizeCdf("bad", ((0, 0.0), (10, 0.9)))


def test_the_tables_have_the_published_shape():
    # web search: 15% below 10 kB, 60% below 200 kB, mean 1.71 MB; data mining: half the flows are
    # one 1460-byte packet; Hadoop: half at most 700 B
    assert WEBSEARCH.cdf(10_000) == 0.15 and WEBSEARCH.cdf(200_000) == 0.6
    assert WEBSEARCH.mean_bytes == pytest.approx(1_711_250)
    assert DATAMINING.cdf(1460) == 0.5 and DATAMINING.quantile(0.25) == 1460 and DATAMINING.sizes[-1] == 666667 * 1460
    assert HADOOP.cdf(700) == 0.5 and HADOOP.sizes[-1] == 10_000_000


def test_the_mean_of_a_hand_made_cdf():
    # half the flows uniform on [0, 100], half a point mass at 1000 -> 0.5 x 50 + 0.5 x 1000
    c = FlowSizeCdf("t", ((0, 0.0), (100, 0.5), (1000, 0.5), (1000, 1.0)))
    assert c.mean_bytes == pytest.approx(525.0)
    assert c.quantile(0.25) == 50 and c.quantile(0.75) == 1000 and c.cdf(500) == 0.5


@pytest.mark.parametrize("cdf", [WEBSEARCH, HADOOP, flow_size_cdf("websearch", 1.0)], ids=["websearch", "hadoop",
                                                                                           "websearch-floored"])
def test_sampling_reproduces_the_cdf(cdf):
    from scipy.stats import kstest
    rng = random.Random(7)
    draws = [cdf.quantile(rng.random()) for _ in range(20000)]
    cont = [x for x in draws if x > cdf.min_bytes]           # above a floor's point mass the CDF is continuous
    lo = cdf.cdf(cdf.min_bytes) if cdf.min_bytes > 1 else 0.0
    res = kstest(cont, lambda x: np.array([(cdf.cdf(v) - lo) / (1 - lo) for v in x]))
    assert res.pvalue > 0.01, res
    assert abs(len(cont) / len(draws) - (1 - lo)) < 0.01
    # sample() is the same draw rounded to whole bytes, never below the floor
    rng_a, rng_b = random.Random(3), random.Random(3)
    for _ in range(200):
        assert cdf.sample(rng_a) == max(cdf.min_bytes, round(cdf.quantile(rng_b.random())))


def test_sampling_the_data_mining_point_mass_and_tail():
    from scipy.stats import kstest
    rng = random.Random(11)
    draws = [DATAMINING.sample(rng) for _ in range(20000)]
    one = sum(1 for x in draws if x == 1460) / len(draws)
    assert abs(one - 0.5) < 0.015                            # 3 sigma of a binomial share at n = 20000
    rest = [x for x in draws if x > 1460]
    assert kstest(rest, lambda x: np.array([(DATAMINING.cdf(v) - 0.5) / 0.5 for v in x])).pvalue > 0.01


def test_scaling_divides_sizes_and_puts_what_falls_below_one_segment_on_it():
    s = WEBSEARCH.scaled(5)
    assert s.scale == 5 and s.min_bytes == TCP_PAYLOAD_BYTES and s.sizes[-1] == 6_000_000
    # websearch below 5 x 1448 B (linear from 0 at 0 to 0.15 at 10 kB) becomes one segment
    assert s.points[:2] == ((1448.0, 0.0), (1448.0, pytest.approx(0.15 * 5 * 1448 / 10_000)))
    assert s.cdf(200_000 / 5) == pytest.approx(0.6)
    assert s.mean_bytes == pytest.approx(WEBSEARCH.mean_bytes / 5, rel=0.002)     # the floor adds ~0.1%
    assert flow_size_cdf("websearch").scale == WEBSEARCH.default_scale == 5
    assert 200e3 < flow_size_cdf("websearch").mean_bytes < 500e3
    assert 200e3 < flow_size_cdf("datamining").mean_bytes < 500e3
    assert flow_size_cdf("hadoop").scale == 1 and flow_size_cdf("hadoop").mean_bytes == pytest.approx(121e3, rel=0.01)
    assert flow_size_cdf("websearch", 2).scaled(3).scale == 6         # scales compose and are recorded
    with pytest.raises(ValueError, match="known: websearch, datamining, hadoop"):
        flow_size_cdf("cache")


def test_size_buckets_are_decades_named_after_their_edges():
    assert [b[0] for b in size_buckets()] == ["<10KB", "10KB-100KB", "100KB-1MB", "1MB-10MB", "10MB-100MB", ">=100MB"]
    assert size_buckets()[1][1:] == (10_000, 100_000) and size_buckets()[-1][2] is None
    assert bytes_label(1448) == "1.45KB" and bytes_label(500) == "500B" and bytes_label(2_000_000) == "2MB"
    with pytest.raises(ValueError):
        size_buckets((100, 10))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_long_plan_offers_the_load_asked_for(seed):
    cdf = flow_size_cdf("websearch")
    arr = poisson_arrivals(cdf, HOSTS, 0.5, 10e6, 20000, seed)
    got = offered_load([(t, b) for t, _, _, b in arr], len(HOSTS), 10e6)
    # the sum of 20000 heavy-tailed sizes (coefficient of variation ~2.4) varies by ~1.7%, the span by 0.7%
    assert got == pytest.approx(0.5, rel=0.06)
    # every host sends and receives about its share; never to itself
    assert all(s != d for _, s, d, _ in arr)
    assert {s for _, s, _, _ in arr} == set(HOSTS) == {d for _, _, d, _ in arr}
    times = [t for t, *_ in arr]
    assert times == sorted(times) and times[0] > 0


def test_the_arrival_rate_follows_the_load_definition():
    cdf = FlowSizeCdf("fixed", ((1000, 0.0), (1000, 1.0)))          # every flow 1000 B
    arr = poisson_arrivals(cdf, HOSTS[:10], 0.25, 8e6, 20000, 5)
    # lambda = load x n x rate / (8 x mean) = 0.25 x 10 x 8e6 / 8000 = 2500 flows/s
    assert 20000 / arr[-1][0] == pytest.approx(2500, rel=0.03)
    assert offered_load([(t, b) for t, _, _, b in arr], 10, 8e6) == pytest.approx(0.25, rel=0.03)


def test_the_arrivals_are_a_function_of_the_seed_and_prefix_stable():
    cdf = flow_size_cdf("hadoop")
    a = poisson_arrivals(cdf, HOSTS, 0.3, 10e6, 500, 4)
    assert a == poisson_arrivals(cdf, HOSTS, 0.3, 10e6, 500, 4)
    assert a != poisson_arrivals(cdf, HOSTS, 0.3, 10e6, 500, 5)
    assert poisson_arrivals(cdf, HOSTS, 0.3, 10e6, 1000, 4)[:500] == a      # more flows: the first 500 unchanged
    with pytest.raises(ValueError, match="load"):
        poisson_arrivals(cdf, HOSTS, 1.5, 10e6, 10, 1)
    with pytest.raises(ValueError, match="2 hosts"):
        poisson_arrivals(cdf, HOSTS[:1], 0.5, 10e6, 10, 1)
    assert offered_load([(0.5, 100)], 2, 1e6) is None
