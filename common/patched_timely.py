"""Patched TIMELY: TIMELY with a unique, fair fixed point, driven by injected time.

Source: Y. Zhu, M. Ghobadi, V. Misra, J. Padhye, "ECN or Delay: Lessons Learnt from Analysis of
DCQCN and TIMELY", CoNEXT 2016, section 4.3 ("Patched TIMELY", its Algorithm). TIMELY as
published (common.timely) sets its rate from the RTT's gradient alone; flows that see the same
gradient at different rates stay at different rates, so it has no unique fixed point and shares
drift. The patch changes only the region between T_low and T_high::

    weight = w(rttGradient)          # 0 for g <= -1/4, 2 g + 1/2 between, 1 for g >= 1/4
    error = (newRTT - RTT_ref) / RTT_ref
    rate = delta (1 - weight) + rate (1 - beta weight error)

Below T_low the rate still grows by delta, above T_high it still falls by
``beta (1 - T_high / newRTT)``; there is no hyperactive increase. The decrease now follows the
absolute RTT, which every flow through the bottleneck shares: at the fixed point the gradient is
0 (weight 1/2) and each completion event adds ``delta / 2`` and takes ``rate beta error / 2``, so
every flow settles at ``rate* = delta / (beta error)``, the same for all of them whatever their
rate of completion events (the paper's proof: the fair share ``C / N``, with the queue at
``q* = q' (1 + N delta / (beta C))``, ``q' = C T_low``).

Parameters: the paper keeps TIMELY's and sets beta = 0.008 per completion event (16 KB
segments) and RTT_ref to T_low. Scaling (:meth:`PatchedTimelyParams.scaled`) is TIMELY's
(common.timely: thresholds times ``time_scale``; per-event delta and EWMA weight for ``k``
times fewer completion events per round trip), and beta, which here is a fraction of the rate
taken per event, compounds the same way: ``1 - (1 - 0.008)^k`` (0.077 at k = 10, every rate with
the default time scale). ``rtt_ref_s`` None means T_low. The fixed point's error is then
``N delta_k / (beta_k C)``: about 0.13 N, i.e. an RTT of about 1.5 T_low for four flows, well
below T_high (10 T_low).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from common.ccparams import scales
from common.timely import REFERENCE_RATE_BPS, TimelyParams, TimelyState

#: The paper's beta per completion event at the reference NIC.
REFERENCE_BETA = 0.008


@dataclass(frozen=True)
class PatchedTimelyParams(TimelyParams):
    """Patched TIMELY's parameters: TIMELY's (common.timely.TimelyParams) with the paper's beta,
    and ``rtt_ref_s``, the reference RTT of the error term (None: ``t_low_s``); ``hai_*`` are
    unused (the patch has no hyperactive increase).

    Raises ValueError from :meth:`validate` naming the bad field."""
    beta: float = REFERENCE_BETA
    rtt_ref_s: float | None = None

    @classmethod
    def scaled(cls, line_rate_bps: float, time_scale: float | None = None, **overrides) -> "PatchedTimelyParams":
        """TIMELY's scaling (common.timely.TimelyParams.scaled) with beta compounded over the ``k``
        reference completion events one emulated event stands for (module docstring);
        ``overrides`` replace any scaled value; ``rtt_ref_s`` not given becomes the resulting
        ``t_low_s`` (so results record the value in force).

        Raises:
            ValueError: a bad value, naming the field.
        """
        rs, ts = scales(line_rate_bps, time_scale, REFERENCE_RATE_BPS)
        k = max(1.0, rs / ts)
        p = super().scaled(line_rate_bps, time_scale, **{"beta": 1 - (1 - REFERENCE_BETA) ** k, **overrides})
        return p if p.rtt_ref_s is not None else replace(p, rtt_ref_s=p.t_low_s)   # recorded as resolved

    @property
    def reference_rtt_s(self) -> float:
        """RTT_ref in seconds: ``rtt_ref_s``, else ``t_low_s``."""
        return self.rtt_ref_s if self.rtt_ref_s is not None else self.t_low_s

    def validate(self) -> None:
        """TIMELY's checks, and ``rtt_ref_s`` positive or None. Raises ValueError naming the field."""
        super().validate()
        if self.rtt_ref_s is not None and not (self.rtt_ref_s > 0 and math.isfinite(self.rtt_ref_s)):
            raise ValueError(f"rtt_ref_s must be a positive number or None, not {self.rtt_ref_s!r}")


def decrease_weight(g: float) -> float:
    """The paper's w(g): 0 for g <= -1/4, 2 g + 1/2 for -1/4 < g < 1/4, 1 for g >= 1/4
    (``g`` the normalised RTT gradient, dimensionless)."""
    return min(1.0, max(0.0, 2.0 * g + 0.5))


class PatchedTimelyState(TimelyState):
    """Patched TIMELY's rate of one QP: common.timely.TimelyState (thresholds, EWMA of the RTT
    gradient, rate clamp, records) with the patched rule between T_low and T_high (module
    docstring). Branches recorded: ``t_low``, ``t_high``, ``increase`` (the rate rose) or
    ``decrease`` (it did not)."""
    params: PatchedTimelyParams

    def between_thresholds(self, rtt_s: float, g: float) -> tuple[str, float]:
        """``rate = delta (1 - w(g)) + rate (1 - beta w(g) error)``, error = (rtt - RTT_ref) / RTT_ref."""
        p = self.params
        w = decrease_weight(g)
        error = (rtt_s - p.reference_rtt_s) / p.reference_rtt_s
        rate = p.additive_increment_bps * (1 - w) + self.rate_bps * (1 - p.beta * w * error)
        return ("increase" if rate > self.rate_bps else "decrease"), rate
