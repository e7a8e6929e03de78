"""The Swift-like controller (common.swift): additive increase per round trip of acknowledged data
below the target, a decrease proportional to the excess capped by max_mdf, at most once per round
trip, against hand-computed rates; the target's base; the scaled defaults."""
import pytest

from common.swift import SwiftParams, SwiftState

# line 1000 bit/s, target = base + 1 s, ai 10 bit/s per round trip, beta 1/2, max_mdf 0.4
P = SwiftParams(line_rate_bps=1000, target_queue_s=1.0, base_rtt_s=None, ai_bps=10, beta=0.5, max_mdf=0.4,
                min_rate_bps=10)


def test_scripted_acks_increase_decrease_hold_and_cap():
    st = SwiftState(P, record=True)
    assert st.rate_bps == 1000 and st.target_s is None
    assert st.on_ack(1.0, 2.0, 125) == "increase"           # base 2 s, target 3 s; at the line rate already
    assert st.rate_bps == 1000 and st.target_s == 3.0
    # 6 s against 3 s: 1 - 0.5 (6 - 3) / 6 = 0.75 (above 1 - max_mdf = 0.6)
    assert st.on_ack(2.0, 6.0, 125) == "decrease" and st.rate_bps == pytest.approx(750)
    assert st.on_ack(3.0, 6.0, 125) == "hold" and st.rate_bps == pytest.approx(750)     # 1 s < one round trip
    assert st.on_ack(8.5, 20.0, 125) == "hold"                                          # 6.5 s < 20 s
    # 28 s after the last cut, 20 s round trip: 1 - 0.5 x 17 / 20 = 0.575, capped at 0.6
    assert st.on_ack(30.0, 20.0, 125) == "decrease" and st.rate_bps == pytest.approx(450)
    # below the target: ai x acked bits / (rate x rtt) = 10 x 9000 / (450 x 2.5) = 80
    assert st.on_ack(31.0, 2.5, 1125) == "increase" and st.rate_bps == pytest.approx(530)
    assert [e[1] for e in st.events] == ["increase", "decrease", "hold", "hold", "decrease", "increase"]
    assert st.decreases == 2 and st.samples == 6


def test_the_increase_is_ai_per_round_trip_of_data_whatever_the_rate():
    for rate in (100.0, 400.0):
        st = SwiftState(P)
        st.rate_bps = rate
        rtt = 2.0
        for i in range(10):                           # ten round trips' worth of bytes, one ACK each
            st.on_ack(float(i), rtt, int(st.rate_bps * rtt / 8))
        assert st.rate_bps == pytest.approx(rate + 10 * 10, rel=0.02)


def test_a_fixed_base_sets_the_target_and_the_rate_stays_in_bounds():
    st = SwiftState(SwiftParams(**{**P.as_dict(), "base_rtt_s": 5.0}))
    assert st.target_s == 6.0
    assert st.on_ack(0.0, 5.5, 100) == "increase"     # below 6 s although far above the smallest sample
    t = 1.0
    for _ in range(40):                               # once per round trip, down to min_rate and no lower
        st.on_ack(t, 100.0, 100)
        t += 100.0
    assert st.rate_bps == 10
    with pytest.raises(ValueError, match="RTT sample"):
        st.on_ack(t, -1.0, 100)
    with pytest.raises(ValueError, match="acked_bytes"):
        st.on_ack(t, 1.0, -5)


def test_defaults_are_scaled_to_the_host_link_and_the_emulations_time_scale():
    p = SwiftParams.scaled(10e6)
    assert p.time_scale == pytest.approx(100) and p.target_queue_s == pytest.approx(5e-3)
    assert p.ai_bps == pytest.approx(50e3) and p.min_rate_bps == pytest.approx(100e3)
    assert p.beta == 0.8 and p.max_mdf == 0.5 and p.base_rtt_s is None
    q = SwiftParams.scaled(100e6)                     # the same ~6 kB of queue at the host rate
    assert q.target_queue_s == pytest.approx(0.5e-3)
    assert q.target_queue_s * 100e6 == pytest.approx(p.target_queue_s * 10e6)
    assert SwiftParams.scaled(10e6, time_scale=400, max_mdf=0.3).target_queue_s == pytest.approx(0.02)


@pytest.mark.parametrize("over, field", [({"max_mdf": 1.0}, "max_mdf"), ({"beta": 2}, "beta"),
                                         ({"ai_bps": 0}, "ai_bps"), ({"min_rate_bps": 1e9}, "min_rate_bps"),
                                         ({"base_rtt_s": 0.0}, "base_rtt_s"), ({"target_queue_s": -1}, "target_queue_s")])
def test_a_bad_value_is_named(over, field):
    with pytest.raises(ValueError, match=field):
        SwiftParams.scaled(10e6, **over)
