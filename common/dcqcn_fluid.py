"""The fixed point of the DCQCN fluid model: where N long DCQCN flows through one RED-marking port settle.

Source: Y. Zhu, M. Ghobadi, V. Misra, J. Padhye, "ECN or Delay: Lessons Learnt from Analysis of
DCQCN and TIMELY", CoNEXT 2016, section 3 (the fluid model of DCQCN and its fixed point); the
terms below are written as in the authors' published MATLAB model of it
(github.com/jitupadhye-zz/rdma, fluidmodel/dcqcn), which this transcription was checked against.
The model counts in packets: rates in packets/s, queue and byte counter in packets, and p is the
probability that one packet is marked. Per flow, with current rate R_C, target rate R_T and alpha:

- marking (RED-like): p(q) = 0 for q <= Kmin, Pmax (q - Kmin) / (Kmax - Kmin) up to Kmax, 1 above;
- queue: dq/dt = sum of the flows' R_C - C;
- alpha, updated every tau': dalpha/dt = g / tau' ((1 - (1 - p)^(tau' R_C)) - alpha);
- target rate: dR_T/dt = -(R_T - R_C) a / tau + R_AI R_C (c + e), cut to R_C on a CNP (at most one
  per tau, sent when a packet of the last tau was marked), raised by R_AI once a byte counter
  (B packets) or a timer (T, i.e. T R_C packets) has run F stages without a mark;
- current rate: dR_C/dt = -R_C alpha a / (2 tau) + (R_T - R_C) R_C (b + d) / 2, halved towards
  R_T at each byte-counter or timer event;

where, with x^(y) meaning x to the power y,
a = 1 - (1 - p)^(tau R_C) (a CNP is due in an interval tau), b = p / ((1 - p)^(-B) - 1) and
d = p / ((1 - p)^(-T R_C) - 1) (byte-counter and timer events per packet sent), c = b (1 - p)^(F B)
and e = d (1 - p)^(F T R_C) (those events past fast recovery). Delays (the feedback's tau*) only
shift these in time and drop out of the fixed point; so does g. Hyper increase is not in the model.

The fixed point: every flow's R_C = C / N; dalpha/dt = 0 gives
alpha* = 1 - (1 - p*)^(tau' R_C); dR_T/dt = 0 gives R_T* - R_C = tau R_AI R_C (c + e) / a; with
dR_C/dt = 0 this leaves one equation in p*,

    alpha(p) a(p)^2 = tau^2 R_AI R_C (c(p) + e(p)) (b(p) + d(p)),

whose left side rises from 0 and whose right side falls as p grows: one root in (0, 1), found
here by bisection. q* inverts the marking curve: q* = Kmin + p* / Pmax (Kmax - Kmin) when
p* <= Pmax; above Pmax the model has the queue past Kmax, where marking jumps to 1, and no queue
length is given.

Mapping onto fabriclab's DCQCN (:class:`common.dcqcn.DcqcnParams`, SIGCOMM 2015 names): tau is
the notification point's CNP interval N (``cnp_interval_s``), tau' the alpha timer K
(``alpha_timer_s``), T the rate-increase timer (``timer_s``), B the byte counter
(``byte_counter_bytes`` / packet bytes), F ``fast_recovery_stages``, R_AI ``rate_ai_bps`` (in
packets/s). DcqcnParams holds the emulated values, already multiplied by ``time_scale`` (and the
byte counter scaled with it): they are used as they are, since the emulation runs with them.
The model's alpha moves once per tau' towards "a packet of the last tau' was marked"; the
emulated reaction point raises alpha on each CNP and lets it decay every K without one: close
to the model while tau is close to tau' (by default 50 against 55 us before scaling), not equal.
A packet is one data frame on the wire (payload + RoCEv2 headers): the pacer, the byte counter
and the marker all count those frames.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from common.dcqcn import DcqcnParams

#: bisection steps on log p: the bracket [1e-300, 1) halves to well under a float's resolution
_BISECTIONS = 200


@dataclass(frozen=True)
class DcqcnFixedPoint:
    """The DCQCN fluid model's fixed point for ``n_flows`` long flows through one port.

    Attributes:
        n_flows: N, the flows sharing the port.
        capacity_bps: C, the port's rate (bit/s, frames on the wire).
        packet_bytes: bytes of one data frame on the wire (the model's packet).
        rate_bps: R_C* = C / N, every flow's current rate (bit/s).
        p_mark: p*, the probability that a packet is marked, in (0, 1).
        alpha: alpha*, in (0, 1).
        target_rate_bps: R_T* (bit/s), above ``rate_bps``; not capped at the line rate.
        target_above_line_rate: R_T* exceeds the senders' line rate, where the emulation caps the
            target: the model's fixed point is then not the emulation's.
        above_kmax: p* > Pmax: the model puts the queue past Kmax (marking jumps to 1 there).
        queue_bytes: q* in bytes, in [Kmin, Kmax]; None when ``above_kmax``.
        queue_packets: q* in data frames of ``packet_bytes``; None when ``above_kmax``.
    """
    n_flows: int
    capacity_bps: float
    packet_bytes: float
    rate_bps: float
    p_mark: float
    alpha: float
    target_rate_bps: float
    target_above_line_rate: bool
    above_kmax: bool
    queue_bytes: float | None
    queue_packets: float | None

    def as_dict(self) -> dict:
        """The fixed point as recorded in results (field names as above)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _terms(p: float, rc_pps: float, tau_s: float, tau_alpha_s: float, timer_s: float, b_packets: float,
           f_stages: int) -> tuple[float, float, float, float, float, float]:
    """The fluid model's per-packet terms ``(alpha, a, b, c, d, e)`` at marking probability ``p``
    in (0, 1) and rate ``rc_pps`` (packets/s); see the module docstring."""
    ell = -math.log1p(-p)                          # (1 - p)^x = exp(-x ell)

    def no_mark(n):                                # (1 - p)^n
        return math.exp(-n * ell)

    def per_event(n):                              # p / ((1 - p)^(-n) - 1)
        x = n * ell
        return 0.0 if x > 700 else p / math.expm1(x)
    b, d = per_event(b_packets), per_event(timer_s * rc_pps)
    c, e = b * no_mark(f_stages * b_packets), d * no_mark(f_stages * timer_s * rc_pps)
    alpha = -math.expm1(-tau_alpha_s * rc_pps * ell)
    a = -math.expm1(-tau_s * rc_pps * ell)
    return alpha, a, b, c, d, e


def marking_queue_bytes(p: float, kmin_bytes: float, kmax_bytes: float, pmax: float) -> float | None:
    """The queue (bytes) at which the RED-like curve marks with probability ``p``:
    Kmin + p / Pmax (Kmax - Kmin); None for ``p`` > ``pmax`` (the curve is 1 past Kmax).
    Raises ValueError on a curve that is not one (Kmax <= Kmin, Kmin < 0, Pmax outside (0, 1])
    or ``p`` outside [0, 1]."""
    _check_curve(kmin_bytes, kmax_bytes, pmax)
    if not 0 <= p <= 1:
        raise ValueError(f"p must be a probability in [0, 1], not {p!r}")
    if p > pmax:
        return None
    return kmin_bytes + p / pmax * (kmax_bytes - kmin_bytes)


def _check_curve(kmin_bytes: float, kmax_bytes: float, pmax: float) -> None:
    for name, v in (("kmin_bytes", kmin_bytes), ("kmax_bytes", kmax_bytes), ("pmax", pmax)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{name} must be a finite number, not {v!r}")
    if kmin_bytes < 0:
        raise ValueError(f"kmin_bytes must be >= 0, not {kmin_bytes!r}")
    if not kmax_bytes > kmin_bytes:
        raise ValueError(f"kmax_bytes ({kmax_bytes!r}) must be above kmin_bytes ({kmin_bytes!r})")
    if not 0 < pmax <= 1:
        raise ValueError(f"pmax must be in (0, 1], not {pmax!r}")


def fixed_point(params: DcqcnParams, n_flows: int, capacity_bps: float, kmin_bytes: float, kmax_bytes: float,
                pmax: float, packet_bytes: float) -> DcqcnFixedPoint:
    """The fixed point of the DCQCN fluid model (Zhu et al., CoNEXT 2016, section 3; see the module
    docstring) for ``n_flows`` long flows sharing a port of ``capacity_bps``.

    Args:
        params: the DCQCN parameters as the emulation runs them (timers already times
            ``time_scale``); tau = ``cnp_interval_s``, tau' = ``alpha_timer_s``, T = ``timer_s``,
            B = ``byte_counter_bytes``, F = ``fast_recovery_stages``, R_AI = ``rate_ai_bps``.
        n_flows: N >= 1.
        capacity_bps: C > 0 (bit/s); C / N must be below ``params.line_rate_bps``, else the
            senders' line rate, not marking, holds them (no marking fixed point).
        kmin_bytes, kmax_bytes, pmax: the port's RED-like marking curve (bytes, 0 < Pmax <= 1).
        packet_bytes: bytes of one data frame on the wire (the model's packet), > 0.

    Returns:
        :class:`DcqcnFixedPoint` (rates in bit/s, queue in bytes and in frames).

    Raises:
        ValueError: naming the bad argument (N < 1 or not an integer, C <= 0 or not finite,
            C / N at or above the line rate, Kmax <= Kmin, Kmin < 0, Pmax outside (0, 1],
            packet_bytes <= 0) or, from ``params.validate``, the bad DCQCN field.
    """
    params.validate()
    if isinstance(n_flows, bool) or not isinstance(n_flows, int) or n_flows < 1:
        raise ValueError(f"n_flows must be an integer >= 1, not {n_flows!r}")
    if isinstance(capacity_bps, bool) or not isinstance(capacity_bps, (int, float)) \
            or not (capacity_bps > 0 and math.isfinite(capacity_bps)):
        raise ValueError(f"capacity_bps must be a positive finite number, not {capacity_bps!r}")
    if isinstance(packet_bytes, bool) or not isinstance(packet_bytes, (int, float)) \
            or not (packet_bytes > 0 and math.isfinite(packet_bytes)):
        raise ValueError(f"packet_bytes must be a positive finite number, not {packet_bytes!r}")
    _check_curve(kmin_bytes, kmax_bytes, pmax)
    rate_bps = capacity_bps / n_flows
    if rate_bps >= params.line_rate_bps:
        raise ValueError(f"capacity_bps / n_flows = {rate_bps:g} bit/s is not below the line rate "
                         f"{params.line_rate_bps:g} bit/s: the senders' line rate holds them, not marking")
    bits = 8.0 * packet_bytes
    rc = rate_bps / bits                                   # packets/s
    rai = params.rate_ai_bps / bits                        # packets/s
    b_packets = params.byte_counter_bytes / packet_bytes
    tau, tau_a, timer, f = params.cnp_interval_s, params.alpha_timer_s, params.timer_s, params.fast_recovery_stages

    def excess(p: float) -> float:                         # alpha a^2 - tau^2 R_AI R_C (c + e)(b + d): rises in p
        alpha, a, b, c, d, e = _terms(p, rc, tau, tau_a, timer, b_packets, f)
        return alpha * a * a - tau * tau * rai * rc * (c + e) * (b + d)

    lo, hi = math.log(1e-300), math.log1p(-1e-15)
    if excess(math.exp(lo)) >= 0 or excess(math.exp(hi)) <= 0:     # cannot happen for valid parameters
        raise ValueError("no fixed point in (0, 1) for these parameters")
    for _ in range(_BISECTIONS):
        mid = (lo + hi) / 2
        if excess(math.exp(mid)) < 0:
            lo = mid
        else:
            hi = mid
    p = math.exp((lo + hi) / 2)
    alpha, a, b, c, d, e = _terms(p, rc, tau, tau_a, timer, b_packets, f)
    target_bps = rate_bps * (1 + tau * rai * (c + e) / a)
    q = marking_queue_bytes(p, kmin_bytes, kmax_bytes, pmax)
    return DcqcnFixedPoint(n_flows=n_flows, capacity_bps=float(capacity_bps), packet_bytes=float(packet_bytes),
                           rate_bps=rate_bps, p_mark=p, alpha=alpha, target_rate_bps=target_bps,
                           target_above_line_rate=target_bps > params.line_rate_bps, above_kmax=q is None,
                           queue_bytes=q, queue_packets=None if q is None else q / packet_bytes)
