"""Patched TIMELY (common.patched_timely; Zhu et al., CoNEXT 2016, section 4.3): the weighting
function, the patched rule on scripted samples against hand-computed rates, the scaling, and the
paper's fixed point (every flow at C/N, the queue at q' (1 + N delta / (beta C))) in a fluid
queue fed by the state machines, where TIMELY itself keeps whatever shares it started with."""
import pytest

from common.patched_timely import REFERENCE_BETA, PatchedTimelyParams, PatchedTimelyState, decrease_weight
from common.timely import REFERENCE_RATE_BPS, TimelyParams, TimelyState

# line 1000 bit/s, alpha 1/2, T_low 1 s (= RTT_ref), T_high 10 s, delta 10 bit/s, beta 1/2, minRTT 2 s
P = PatchedTimelyParams(line_rate_bps=1000, ewma_alpha=0.5, t_low_s=1.0, t_high_s=10.0, additive_increment_bps=10,
                        beta=0.5, min_rate_bps=10, min_rtt_s=2.0)


@pytest.mark.parametrize("g, w", [(-1.0, 0.0), (-0.25, 0.0), (-0.125, 0.25), (0.0, 0.5), (0.125, 0.75),
                                  (0.25, 1.0), (3.0, 1.0)])
def test_the_weight_is_the_papers_clamped_line(g, w):
    assert decrease_weight(g) == pytest.approx(w)


def test_between_the_thresholds_the_rate_follows_the_absolute_rtt_weighted_by_the_gradient():
    st = PatchedTimelyState(P, record=True)
    # first sample: difference 0, gradient 0, weight 1/2, error (2 - 1) / 1 = 1:
    # 10 (1 - 1/2) + 1000 (1 - 0.5 x 0.5 x 1) = 5 + 750
    assert st.on_rtt(2.0, 1.0) == "decrease" and st.rate_bps == pytest.approx(755)
    # diff +2, EWMA +1, gradient 1/2: weight 1, error 3: 755 (1 - 0.5 x 3) < 0 -> the floor, 10
    assert st.on_rtt(4.0, 2.0) == "decrease" and st.rate_bps == 10
    # diff -2.5, EWMA -0.75, gradient -0.375: weight 0, error 0.5: + delta, no cut
    assert st.on_rtt(1.5, 3.0) == "increase" and st.rate_bps == pytest.approx(20)
    # below T_low and above T_high: TIMELY's own branches, with beta
    assert st.on_rtt(0.5, 4.0) == "t_low" and st.rate_bps == pytest.approx(30)
    st.rate_bps = 600.0
    assert st.on_rtt(20.0, 5.0) == "t_high" and st.rate_bps == pytest.approx(600 * (1 - 0.5 * 0.5))
    assert [e[1] for e in st.events] == ["decrease", "decrease", "increase", "t_low", "t_high"]


def test_rtt_ref_defaults_to_t_low_and_can_be_set():
    st = PatchedTimelyState(PatchedTimelyParams(**{**P.as_dict(), "rtt_ref_s": 4.0}))
    # error (2 - 4) / 4 = -1/2 at weight 1/2: 5 + 1000 (1 + 0.125), clamped to the line
    assert st.on_rtt(2.0, 1.0) == "increase" and st.rate_bps == 1000
    assert P.reference_rtt_s == 1.0 and P.rtt_ref_s is None                    # None: T_low
    with pytest.raises(ValueError, match="rtt_ref_s"):
        PatchedTimelyParams(**{**P.as_dict(), "rtt_ref_s": 0.0}).validate()


def test_scaling_is_timelys_with_beta_compounded_over_the_events_one_stands_for():
    p, t = PatchedTimelyParams.scaled(10e6), TimelyParams.scaled(10e6)
    k = (REFERENCE_RATE_BPS / 10e6) / p.time_scale            # 1000 / 100 = 10 reference events
    assert k == pytest.approx(10)
    assert p.beta == pytest.approx(1 - (1 - REFERENCE_BETA) ** 10) and p.beta == pytest.approx(0.0772, abs=1e-4)
    for f in ("t_low_s", "t_high_s", "additive_increment_bps", "ewma_alpha", "min_rate_bps", "time_scale"):
        assert getattr(p, f) == getattr(t, f), f
    assert p.rtt_ref_s == p.reference_rtt_s == p.t_low_s                      # resolved, as recorded
    assert PatchedTimelyParams.scaled(10e6, t_low_s=0.004).rtt_ref_s == 0.004   # follows a given T_low
    assert PatchedTimelyParams.scaled(10e6, beta=0.02).beta == 0.02          # an override wins
    ref = PatchedTimelyParams.scaled(REFERENCE_RATE_BPS, time_scale=1.0)
    assert ref.beta == pytest.approx(REFERENCE_BETA)                           # the paper's, unscaled
    # a longer time scale means fewer reference events per emulated one: k = 1000 / 500 = 2
    assert PatchedTimelyParams.scaled(10e6, time_scale=500).beta == pytest.approx(1 - (1 - REFERENCE_BETA) ** 2)
    assert PatchedTimelyParams.scaled(10e6, time_scale=2000).beta == pytest.approx(REFERENCE_BETA)   # k >= 1


def _fluid(state_cls, params, start_bps, seconds=60.0, dt_s=1e-3, base_rtt_s=4e-3, seg_bytes=16384):
    """N flows into one queue of capacity C = the line rate: each flow's completion events come
    every segment at its own rate, each sees the same RTT (base + queue / C). Returns the final
    rates (bit/s) and the mean queueing delay over the last 10 s."""
    c = params.line_rate_bps
    states = []
    for r in start_bps:
        st = state_cls(params)
        st.rate_bps = r
        states.append(st)
    q_bits, due, t, qs = 0.0, [0.0] * len(states), 0.0, []
    while t < seconds:
        q_bits = max(0.0, q_bits + (sum(s.rate_bps for s in states) - c) * dt_s)
        rtt = base_rtt_s + q_bits / c
        for i, s in enumerate(states):
            if t >= due[i]:
                s.on_rtt(rtt, t)
                due[i] = t + seg_bytes * 8 / s.rate_bps
        if t > seconds - 10:
            qs.append(q_bits / c)
        t += dt_s
    return [s.rate_bps for s in states], sum(qs) / len(qs)


def test_unequal_flows_converge_to_the_fair_share_at_the_papers_queue():
    p = PatchedTimelyParams.scaled(10e6)
    rates, q_s = _fluid(PatchedTimelyState, p, [7e6, 2e6, 0.5e6, 0.5e6])
    assert max(rates) / min(rates) < 1.01, rates
    assert sum(rates) == pytest.approx(10e6, rel=0.05)
    # q* = q' (1 + N delta / (beta C)) with q' = C T_low: queueing delay T_low (1 + N delta / (beta C)) - base
    q_star_s = p.t_low_s * (1 + 4 * p.additive_increment_bps / (p.beta * 10e6)) - 4e-3
    assert q_s == pytest.approx(q_star_s, rel=0.02)


def test_timely_itself_keeps_unequal_shares_in_the_same_queue():
    """The paper's point, and the reason for the patch: the same run under TIMELY stays unfair."""
    rates, _ = _fluid(TimelyState, TimelyParams.scaled(10e6), [7e6, 2e6, 0.5e6, 0.5e6])
    assert max(rates) / min(rates) > 1.5, rates
