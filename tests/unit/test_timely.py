"""TIMELY (common.timely): Algorithm 1's branches on scripted RTT samples against hand-computed
rates, hyperactive increase, the clamps, and the defaults scaled to an emulated link."""
import math

import pytest

from common.timely import REFERENCE_RATE_BPS, TimelyParams, TimelyState

# round numbers so every step can be done by hand: line 1000 bit/s, alpha 1/2, T_low 1 s,
# T_high 10 s, delta 10 bit/s, beta 1/2, HAI after 3 negative gradients at 5 delta, minRTT 2 s
P = TimelyParams(line_rate_bps=1000, ewma_alpha=0.5, t_low_s=1.0, t_high_s=10.0, additive_increment_bps=10,
                 beta=0.5, hai_threshold=3, hai_factor=5, min_rate_bps=10, min_rtt_s=2.0)


def test_scripted_samples_take_each_branch_with_hand_computed_rates():
    st = TimelyState(P, record=True)
    assert st.rate_bps == 1000
    # above T_high: rate (1 - beta (1 - T_high / rtt)) = 1000 (1 - 0.5 / 6); the first difference is 0
    assert st.on_rtt(12.0, 1.0) == "t_high" and st.rate_bps == pytest.approx(1000 * (1 - 0.5 / 6))
    r = st.rate_bps
    # diff -8, EWMA -4, gradient -4 / 2 = -2 <= 0 (one negative): + delta
    assert st.on_rtt(4.0, 2.0) == "increase" and st.rate_bps == pytest.approx(r + 10)
    assert st.rtt_diff_s == -4.0 and st.normalized_gradient == -2.0
    # diff -0.5, EWMA -2.25 (two negative): + delta
    assert st.on_rtt(3.5, 3.0) == "increase" and st.rate_bps == pytest.approx(r + 20)
    # diff 0, EWMA -1.125 (three negative): hyperactive increase, + 5 delta
    assert st.on_rtt(3.5, 4.0) == "hai" and st.rate_bps == pytest.approx(r + 70)
    # diff 2.5, EWMA 0.6875, gradient 0.34375 > 0: rate (1 - beta g)
    assert st.on_rtt(6.0, 5.0) == "decrease"
    assert st.rate_bps == pytest.approx((r + 70) * (1 - 0.5 * 0.34375)) and st.negative_count == 0
    r = st.rate_bps
    # below T_low: + delta whatever the gradient (which is negative again here)
    assert st.on_rtt(0.5, 6.0) == "t_low" and st.rate_bps == pytest.approx(r + 10)
    assert [e[1] for e in st.events] == ["t_high", "increase", "increase", "hai", "decrease", "t_low"]
    assert st.samples == 6 and st.decreases == 2


def test_hyperactive_increase_needs_n_negative_gradients_in_a_row():
    st = TimelyState(P)
    st.rate_bps = 500
    kinds = [st.on_rtt(rtt, t) for t, rtt in enumerate((9.0, 8.0, 7.0, 6.0, 5.0, 4.0), start=1)]
    # the first sample's gradient is 0 (not negative); five falling samples: HAI at the third of them
    assert kinds == ["increase", "increase", "increase", "hai", "hai", "hai"]
    assert st.rate_bps == pytest.approx(500 + 3 * 10 + 3 * 50)
    st.on_rtt(9.0, 7.0)                            # a rise: positive gradient, the count starts again
    assert st.negative_count == 0
    assert st.on_rtt(8.5, 8.0) == "decrease"       # EWMA still positive after one fall


def test_rising_rtt_cuts_in_proportion_to_the_gradient_and_the_rate_stays_in_bounds():
    st = TimelyState(P)
    st.on_rtt(3.0, 0.0)
    st.on_rtt(9.0, 1.0)                            # EWMA 3, gradient 1.5: 1 - 0.75 = 0.25 of the rate
    assert st.rate_bps == pytest.approx(250)
    for t in range(2, 20):                         # far above T_high again and again: down to min_rate
        st.on_rtt(1000.0, t)
    assert st.rate_bps == 10
    for t in range(20, 400):                       # fast round trips: up to the line rate, no further
        st.on_rtt(0.1, t)
    assert st.rate_bps == 1000


def test_min_rtt_defaults_to_the_smallest_sample_seen():
    p = TimelyParams(**{**P.as_dict(), "min_rtt_s": None})
    st = TimelyState(p)
    st.on_rtt(4.0, 0.0)
    st.on_rtt(8.0, 1.0)                            # EWMA 2, normalised by min 4: 0.5
    assert st.min_rtt_s == 4.0 and st.normalized_gradient == pytest.approx(0.5)
    with pytest.raises(ValueError, match="RTT sample"):
        st.on_rtt(0.0, 2.0)
    with pytest.raises(ValueError, match="RTT sample"):
        st.on_rtt(math.nan, 2.0)


def test_defaults_are_scaled_to_the_host_link_and_the_emulations_time_scale():
    p = TimelyParams.scaled(10e6)                   # rate_scale 1000, time_scale 100: k = 10 events
    assert p.rate_scale == REFERENCE_RATE_BPS / 10e6 and p.time_scale == pytest.approx(100)
    assert p.t_low_s == pytest.approx(5e-3) and p.t_high_s == pytest.approx(50e-3)
    assert p.additive_increment_bps == pytest.approx(100e3)          # 10 Mbit/s / 1000 x 10 = 1% of the line
    assert p.ewma_alpha == pytest.approx(1 - 0.98 ** 10)
    assert p.beta == 0.8 and p.hai_threshold == 5 and p.min_rate_bps == pytest.approx(100e3)
    q = TimelyParams.scaled(100e6)                  # time_scale 10: 0.5 ms and 5 ms; delta still 1% of the line
    assert q.t_low_s == pytest.approx(0.5e-3) and q.t_high_s == pytest.approx(5e-3)
    assert q.additive_increment_bps == pytest.approx(1e6) and q.ewma_alpha == pytest.approx(p.ewma_alpha)
    exact = TimelyParams.scaled(10e6, time_scale=1000)       # time scale = rate scale: the testbed replayed
    assert (exact.t_high_s, exact.ewma_alpha) == (pytest.approx(0.5), pytest.approx(0.02))
    assert exact.additive_increment_bps == pytest.approx(10e3)
    r = TimelyParams.scaled(10e6, time_scale=400, beta=0.5)
    assert r.t_high_s == pytest.approx(0.2) and r.beta == 0.5
    assert r.additive_increment_bps == pytest.approx(10e6 / 1000 * 2.5)   # k = 1000 / 400


@pytest.mark.parametrize("over, field", [({"t_low_s": 0.1, "t_high_s": 0.05}, "t_low_s"), ({"beta": 0}, "beta"),
                                         ({"ewma_alpha": 1.5}, "ewma_alpha"), ({"min_rate_bps": 1e9}, "min_rate_bps"),
                                         ({"hai_threshold": 0}, "hai_threshold"), ({"min_rtt_s": -1.0}, "min_rtt_s")])
def test_a_bad_value_is_named(over, field):
    with pytest.raises(ValueError, match=field):
        TimelyParams.scaled(10e6, **over)
    with pytest.raises(ValueError, match="line_rate_bps"):
        TimelyParams.scaled(0)
