"""DCQCN reaction and notification points (issue 7): scripted events against hand-computed values."""
import pytest

from common.dcqcn import DcqcnParams, NotificationPoint, ReactionPoint

# small round numbers so every step can be done by hand: line 100 bit/s, g = 1/2, F = 2,
# R_AI = 1, R_HAI = 10, T = 1 s, K = 2.05 s (never on a timer tick), B = 10 bytes
P = DcqcnParams(line_rate_bps=100, g=0.5, alpha_init=1.0, alpha_timer_s=2.05, cnp_interval_s=1.0, timer_s=1.0,
                byte_counter_bytes=10, fast_recovery_stages=2, rate_ai_bps=1, rate_hai_bps=10, min_rate_bps=1)


def state(rp):
    return rp.rate_bps, rp.target_bps, rp.alpha


def test_scripted_cnp_and_timer_sequence_matches_hand_computed_values():
    rp = ReactionPoint(P)
    assert state(rp) == (100, 100, 1.0)
    rp.on_cnp(0.5)          # R_T = 100, R_C = 100 (1 - 1/2) = 50, alpha = 1/2 + 1/2 = 1
    assert state(rp) == (50, 100, 1.0)
    rp.on_cnp(0.7)          # R_T = 50, R_C = 25, alpha = 1; timer due 1.7, alpha timer 2.75
    assert state(rp) == (25, 50, 1.0)
    rp.advance(1.69)
    assert state(rp) == (25, 50, 1.0)
    rp.advance(1.7)         # T = 1 < F: fast recovery, R_C = (50 + 25) / 2
    assert state(rp) == (37.5, 50, 1.0) and rp.events[-1].kind == "fast_recovery"
    rp.advance(2.7)         # T = 2, BC = 0: additive, R_T = 51, R_C = (51 + 37.5) / 2
    assert state(rp) == (44.25, 51, 1.0) and rp.events[-1].kind == "additive_increase"
    rp.advance(2.75)        # no CNP for K: alpha = 1/2
    assert state(rp) == (44.25, 51, 0.5) and rp.events[-1].kind == "alpha_decay"
    rp.advance(3.7)         # T = 3, BC = 0: additive, R_T = 52, R_C = 48.125
    assert state(rp) == (48.125, 52, 0.5)
    rp.on_sent(30, 3.8)     # three byte-counter events: BC = 1, 2 additive; BC = 3 > F with T = 3: hyper
    assert [e.kind for e in rp.events[-3:]] == ["additive_increase", "additive_increase", "hyper_increase"]
    assert [e.source for e in rp.events[-3:]] == ["byte_counter"] * 3
    # 53 / 50.5625, 54 / 52.28125, then R_T = 54 + 1 x 10 = 64, R_C = (64 + 52.28125) / 2
    assert [(e.rate_bps, e.target_bps) for e in rp.events[-3:]] == [(50.5625, 53), (52.28125, 54), (58.140625, 64)]
    rp.advance(4.7)         # T = 4, BC = 3: hyper with i = min(4, 3) - 2 = 1: R_T = 74, R_C = 66.0703125
    assert state(rp) == (66.0703125, 74, 0.5)
    rp.advance(4.8)         # alpha = 1/4
    assert rp.alpha == 0.25
    rp.on_cnp(5.0)          # R_T = R_C, R_C = 66.0703125 x (1 - 1/8), alpha = 1/8 + 1/2
    assert state(rp) == (57.8115234375, 66.0703125, 0.625)
    assert (rp.timer_stage, rp.byte_stage, rp.cnps) == (0, 0, 3)
    assert [e.kind for e in rp.events].count("cnp") == 3


def test_late_advance_fires_timers_in_time_order_and_rates_stay_in_bounds():
    rp = ReactionPoint(P)
    rp.on_cnp(0.0)
    rp.advance(30.0)        # 30 timer ticks and 14 alpha decays, interleaved by their due times
    times = [e.t_s for e in rp.events]
    assert times == sorted(times)
    assert sum(e.kind == "alpha_decay" for e in rp.events) == 14
    assert rp.rate_bps <= 100 and rp.target_bps == 100
    for _ in range(40):
        rp.on_cnp(rp.now_s)
    assert rp.rate_bps == P.min_rate_bps
    with pytest.raises(ValueError, match="backwards"):
        rp.advance(1.0)


def test_scaled_defaults_keep_fractions_of_the_line_and_multiples_of_the_round_trip():
    p = DcqcnParams.scaled(10e6)                  # 40 Gbit/s testbed -> 10 Mbit/s; timers x 4000 / 40
    assert p.rate_scale == 4000 and p.time_scale == 100
    assert p.rate_ai_bps == pytest.approx(10e3) and p.rate_hai_bps == pytest.approx(100e3)
    assert p.timer_s == pytest.approx(0.0055) and p.alpha_timer_s == pytest.approx(0.0055)
    assert p.cnp_interval_s == pytest.approx(0.0050) and p.g == 1 / 256 and p.fast_recovery_stages == 5
    assert p.byte_counter_bytes == pytest.approx(10e6 * 100 / 4000)
    assert DcqcnParams.scaled(100e6).time_scale == 10 and DcqcnParams.scaled(10e6, time_scale=1000).timer_s == 0.055
    assert DcqcnParams.scaled(10e6, time_scale=100, g=1 / 16).g == 1 / 16
    with pytest.raises(ValueError, match="g must"):
        DcqcnParams.scaled(10e6, g=0)
    with pytest.raises(ValueError, match="fast_recovery_stages"):
        DcqcnParams.scaled(10e6, fast_recovery_stages=0)
    with pytest.raises(ValueError, match="line_rate_bps"):
        DcqcnParams.scaled(0)


def test_notification_point_sends_at_most_one_cnp_per_qp_per_interval():
    np_ = NotificationPoint(cnp_interval_s=0.05)
    assert not np_.on_packet("a", False, 0.0)
    assert np_.on_packet("a", True, 0.0)
    assert not np_.on_packet("a", True, 0.049)
    assert np_.on_packet("b", True, 0.049)        # per QP
    assert np_.on_packet("a", True, 0.05)
    assert np_.cnps_sent == {"a": 2, "b": 1} and np_.ce_packets == {"a": 3, "b": 1}
