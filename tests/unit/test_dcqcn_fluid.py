"""The DCQCN fluid model's fixed point (common.dcqcn_fluid) against the model's own dynamics, a
first-order expansion, the marking curve it inverts and the scaling rule it must respect."""
import math

import numpy as np
import pytest

from common.dcqcn import DcqcnParams
from common.dcqcn_fluid import DcqcnFixedPoint, fixed_point, marking_queue_bytes
from common.ecn import EcnProfile
from common.roce import OVERHEAD_BYTES

# the default RoCE scenario (experiments/scenarios/roce-incast.yaml): 10 Mbit/s host links,
# RED Kmin 3028 B, Kmax 60560 B, Pmax 0.2, 1024-byte payloads; DCQCN's scaled defaults
LINE_BPS = 10e6
KMIN, KMAX, PMAX = 3028, 60560, 0.2
PACKET = 1024 + OVERHEAD_BYTES
P = DcqcnParams.scaled(LINE_BPS)


def fp(n, params=P, capacity_bps=LINE_BPS, **kw):
    return fixed_point(params, n, capacity_bps, kw.pop("kmin", KMIN), kw.pop("kmax", KMAX), kw.pop("pmax", PMAX),
                       kw.pop("packet", PACKET))


def integrate(params, n, capacity_bps, kmin_bytes, kmax_bytes, pmax, packet_bytes, t_end_s, dt_s, rc0_bps):
    """Euler integration of the DCQCN fluid model (Zhu et al., CoNEXT 2016, section 3), transcribed
    here on its own (not through common.dcqcn_fluid), feedback delay tau* set to 0. State per flow:
    R_C, R_T (packets/s), alpha; and the queue q (packets), kept >= 0; R_C and R_T capped at the
    line rate as the emulated reaction point caps them. Returns (times, queue, R_C per flow)."""
    bits = 8 * packet_bytes
    c, line = capacity_bps / bits, params.line_rate_bps / bits
    kmin, kmax = kmin_bytes / packet_bytes, kmax_bytes / packet_bytes
    tau, taup, timer, g = params.cnp_interval_s, params.alpha_timer_s, params.timer_s, params.g
    b_pk, f, rai = params.byte_counter_bytes / packet_bytes, params.fast_recovery_stages, params.rate_ai_bps / bits
    rc = np.asarray(rc0_bps, float) / bits
    rt, alpha, q = np.full(n, line), np.full(n, params.alpha_init), 0.0
    steps = int(round(t_end_s / dt_s))
    qs, rcs = np.empty(steps), np.empty((steps, n))
    for k in range(steps):
        p = 0.0 if q <= kmin else pmax * (q - kmin) / (kmax - kmin) if q <= kmax else 1.0
        if p == 0.0:
            a = ma = np.zeros(n)
            b, d = np.full(n, 1 / b_pk), 1 / (timer * rc)
            cc, e = b, d
        elif p == 1.0:
            a = ma = np.ones(n)
            b = cc = d = e = np.zeros(n)
        else:
            a = 1 - (1 - p) ** (tau * rc)
            ma = 1 - (1 - p) ** (taup * rc)
            b = np.full(n, p / ((1 - p) ** (-b_pk) - 1))
            cc = b * (1 - p) ** (f * b_pk)
            d = p / ((1 - p) ** (-timer * rc) - 1)
            e = d * (1 - p) ** (f * timer * rc)
        d_rc = -rc * alpha * a / (2 * tau) + (rt - rc) * rc * (b + d) / 2
        d_rt = -(rt - rc) * a / tau + rai * rc * (cc + e)
        d_alpha = g / taup * (ma - alpha)
        d_q = rc.sum() - c
        rc = np.minimum(rc + dt_s * d_rc, line)
        rt = np.minimum(rt + dt_s * d_rt, line)
        alpha = alpha + dt_s * d_alpha
        q = max(q + dt_s * d_q, 0.0)
        qs[k], rcs[k] = q, rc
    return np.arange(1, steps + 1) * dt_s, qs * packet_bytes, rcs * bits


@pytest.mark.parametrize("n", [2, 8])
def test_the_fluid_model_integrated_from_unequal_rates_settles_at_the_fixed_point(n):
    # without feedback delay the model does not oscillate here: from rates 0.3 to 0.9 of the line
    # it converges (checked over 100 s: to 1e-12); after 20 s within 1e-4 of the fixed point
    f = fp(n)
    t, q, rc = integrate(P, n, LINE_BPS, KMIN, KMAX, PMAX, PACKET, 20.0, 0.002, np.linspace(0.3, 0.9, n) * LINE_BPS)
    last = t > 15
    assert q[-1] == pytest.approx(f.queue_bytes, rel=1e-4)
    assert np.mean(q[last]) == pytest.approx(f.queue_bytes, rel=1e-3)
    assert rc[-1] == pytest.approx(np.full(n, f.rate_bps), rel=1e-4)


def test_above_kmax_the_integrated_queue_sits_at_kmax():
    # 16 flows at 10 Mbit/s need p* above Pmax: the fixed point says so, and the model's queue
    # rides the jump at Kmax (marking 1 above it) instead of settling inside the curve. The jump
    # needs a step well under tau (5 ms): at 2 ms Euler itself oscillates around Kmax (mean
    # 50 packets, 41-58); at 0.5 ms the queue stays within 0.8 packets of Kmax (56 packets)
    f = fp(16)
    assert f.above_kmax and f.p_mark > PMAX and f.queue_bytes is None and f.queue_packets is None
    t, q, rc = integrate(P, 16, LINE_BPS, KMIN, KMAX, PMAX, PACKET, 10.0, 0.0005, np.full(16, 0.5 * LINE_BPS))
    last = t > 5
    assert np.mean(q[last]) == pytest.approx(KMAX, abs=PACKET)
    assert np.mean(rc[last]) == pytest.approx(LINE_BPS / 16, rel=1e-2)


def test_every_flow_gets_the_fair_share_and_the_equations_hold():
    for n in (2, 3, 4, 8):
        f = fp(n)
        assert isinstance(f, DcqcnFixedPoint) and f.n_flows == n
        assert f.rate_bps == pytest.approx(LINE_BPS / n)
        assert 0 < f.p_mark < 1 and 0 < f.alpha < 1
        assert f.rate_bps < f.target_rate_bps < LINE_BPS and not f.target_above_line_rate
        # alpha* is the chance of a mark in one alpha interval at the fair rate
        rc_pps = f.rate_bps / (8 * PACKET)
        assert f.alpha == pytest.approx(1 - (1 - f.p_mark) ** (P.alpha_timer_s * rc_pps), rel=1e-9)


def test_marking_rises_with_the_number_of_flows():
    ps = [fp(n).p_mark for n in (2, 3, 4, 6, 8, 12, 16)]
    assert all(x < y for x, y in zip(ps, ps[1:]))


@pytest.mark.parametrize("n", [2, 4, 8])
def test_the_default_scenario_keeps_the_queue_between_kmin_and_kmax(n):
    f = fp(n)
    assert not f.above_kmax
    assert KMIN < f.queue_bytes < KMAX
    assert f.queue_packets == pytest.approx(f.queue_bytes / PACKET)
    # the port's own marking curve gives back p* at q*
    assert EcnProfile("red", kmin_bytes=KMIN, kmax_bytes=KMAX, pmax=PMAX).mark_probability(f.queue_bytes) \
        == pytest.approx(f.p_mark, rel=1e-9)


def test_small_marking_matches_the_first_order_expansion():
    # For p tau R_C, p T R_C, p tau' R_C and p B all small, a ~ p tau R_C, alpha ~ p tau' R_C,
    # b ~ c ~ 1/B and d ~ e ~ 1/(T R_C), and the fixed-point equation
    # alpha a^2 = tau^2 R_AI R_C (c + e)(b + d) becomes
    # p^3 = R_AI (1/B + 1/(T R_C))^2 / (tau' R_C^2), R_C = C/N (all in packets).
    # A tiny R_AI makes p small; the error is first order in p, so it shrinks with R_AI.
    errors = []
    for rai_bps in (10.0, 1.0, 0.1):
        params = DcqcnParams(line_rate_bps=LINE_BPS, rate_ai_bps=rai_bps, min_rate_bps=1.0, **{
            k: getattr(P, k) for k in ("alpha_timer_s", "cnp_interval_s", "timer_s", "byte_counter_bytes")})
        f = fp(2, params)
        rc, rai = f.rate_bps / (8 * PACKET), rai_bps / (8 * PACKET)
        b_pk = params.byte_counter_bytes / PACKET
        p1 = (rai * (1 / b_pk + 1 / (params.timer_s * rc)) ** 2 / (params.alpha_timer_s * rc * rc)) ** (1 / 3)
        errors.append(abs(f.p_mark / p1 - 1))
    assert errors[-1] < 0.01
    assert errors[0] > errors[1] > errors[2]


def test_the_fixed_point_keeps_the_dimensionless_numbers():
    # the testbed replayed exactly (time_scale = rate_scale: every rate down by s, every time up
    # by s) marks with the same p* as the 40 Gbit/s testbed itself; the queue in packets is the same
    slow = DcqcnParams.scaled(10e6, time_scale=4000)
    fast = DcqcnParams.scaled(40e9, time_scale=1)
    kw = dict(kmin=5 * PACKET, kmax=200 * PACKET, pmax=0.01)
    a, b = fp(4, slow, 10e6, **kw), fp(4, fast, 40e9, **kw)
    assert a.p_mark == pytest.approx(b.p_mark, rel=1e-9)
    assert a.queue_packets == pytest.approx(b.queue_packets, rel=1e-9)
    assert a.rate_bps * 4000 == pytest.approx(b.rate_bps)
    # the scaled default (time_scale 100, timers 40x shorter than a replay) is another operating point
    assert fp(4, P, 10e6, **kw).p_mark != pytest.approx(a.p_mark, rel=1e-2)


def test_the_marking_curve_inverts():
    assert marking_queue_bytes(0.0, 100, 300, 0.5) == 100
    assert marking_queue_bytes(0.25, 100, 300, 0.5) == 200
    assert marking_queue_bytes(0.5, 100, 300, 0.5) == 300
    assert marking_queue_bytes(0.51, 100, 300, 0.5) is None


def test_a_single_flow_at_line_rate_has_no_marking_fixed_point():
    with pytest.raises(ValueError, match="line rate"):
        fp(1)
    assert fp(1, capacity_bps=LINE_BPS / 2).rate_bps == LINE_BPS / 2


@pytest.mark.parametrize("change, message", [
    (dict(n=0), "n_flows"), (dict(n=2.0), "n_flows"), (dict(n=True), "n_flows"),
    (dict(capacity_bps=0), "capacity_bps"), (dict(capacity_bps=-1e6), "capacity_bps"),
    (dict(capacity_bps=math.nan), "capacity_bps"), (dict(capacity_bps=math.inf), "capacity_bps"),
    (dict(kmin=60560, kmax=60560), "kmax_bytes"), (dict(kmin=70000), "kmax_bytes"), (dict(kmin=-1), "kmin_bytes"),
    (dict(pmax=0), "pmax"), (dict(pmax=1.5), "pmax"), (dict(pmax=math.nan), "pmax"),
    (dict(packet=0), "packet_bytes"), (dict(kmax=math.inf), "kmax_bytes"),
])
def test_bad_input_is_refused_by_name(change, message):
    n = change.pop("n", 2)
    with pytest.raises(ValueError, match=message):
        fp(n, **change)


def test_bad_dcqcn_parameters_are_refused_by_name():
    bad = DcqcnParams(line_rate_bps=LINE_BPS, timer_s=0.0)
    with pytest.raises(ValueError, match="timer_s"):
        fp(2, bad)
    with pytest.raises(ValueError, match="probability"):
        marking_queue_bytes(1.5, 100, 300, 0.5)
