"""TIMELY: RTT-gradient rate control of one sender queue pair, driven by injected time.

Source: R. Mittal et al., "TIMELY: RTT-based Congestion Control for the Datacenter", SIGCOMM
2015, Algorithm 1. Names follow the paper. Each completion event (here: an ACK that carries an
RTT sample, one per ``ack_every`` packets, 16 KB by default: the paper's 16-64 KB segments)
runs::

    new_rtt_diff = new_rtt - prev_rtt;  prev_rtt = new_rtt
    rtt_diff = (1 - alpha) rtt_diff + alpha new_rtt_diff          # EWMA, weight alpha
    normalized_gradient = rtt_diff / minRTT
    if new_rtt < T_low:   rate += delta                            # additive increase
    elif new_rtt > T_high: rate *= 1 - beta (1 - T_high / new_rtt) # multiplicative decrease
    elif normalized_gradient <= 0: rate += N delta                 # N = 5 after five completions
                                                                   # of negative gradient (HAI), else 1
    else: rate *= 1 - beta normalized_gradient

and the rate stays within [``min_rate_bps``, line rate]. The first sample has no previous one:
its difference is 0 (as in the authors' published code snippet, where prevRTT starts at the
first RTT). ``minRTT`` is the smallest RTT sample the QP has seen unless ``min_rtt_s`` fixes it:
the paper fixes it to the fabric's propagation round trip, which here differs per path and per
host rate.

Defaults at the reference NIC, 10 Gbit/s (the paper's testbed; the recommended values of the
authors' published code snippet and of the paper's evaluation): alpha 0.02, T_low 50 us (for
segment-sized bursts), T_high 500 us, delta 10 Mbit/s, beta 0.8, HAI after 5 completions.

Scaling to an emulated host link of rate R (:meth:`TimelyParams.scaled`):

- ``rate_scale`` = 10 Gbit/s / R; ``time_scale`` defaults to the emulation's, the one DCQCN uses
  (common.ccparams.default_time_scale: 40 Gbit/s / R / 40, 100 at 10 Mbit/s): the emulated round trip
  (a few ms over 2-3 hops of 10 Mbit/s) against a datacenter's tens of microseconds.
- Thresholds are times: T_low and T_high are multiplied by ``time_scale`` (5 ms and 50 ms at
  10 Mbit/s, against a base round trip of a full frame over three hops of about 4 ms there, and a
  100-frame buffer that drains in 87 ms; 0.5 ms and 5 ms at 100 Mbit/s).
- Completion events: a 16 KB segment lasts ``rate_scale`` times longer on the emulated line, the
  round trip only ``time_scale`` times, so a QP gets ``k = rate_scale / time_scale`` (10 at every
  rate with the default time scale; at least 1: a longer time scale than that replays the
  reference values) times fewer events per round trip. Per-event quantities are
  scaled by k so that a round trip does what it does at the reference: delta keeps its fraction
  of the line times k (0.1% x 10 = 1% of the line per event: 100 kbit/s at 10 Mbit/s), and the
  EWMA weight becomes 1 - (1 - alpha)^k (k events at weight alpha in one: 0.183). beta and the
  HAI count are dimensionless and kept; the gradient is normalised by minRTT and so scale-free.
- ``min_rate_bps``: 1% of the line (fabriclab's choice; the paper leaves it open). With one event
  per 16 KB, a QP at 0.1% of 10 Mbit/s would hear from the network every 13 s.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from common.ccparams import CcParams, require_positive, scales

#: The TIMELY paper's testbed NICs.
REFERENCE_RATE_BPS = 10e9


@dataclass(frozen=True)
class TimelyParams(CcParams):
    """TIMELY parameters (units in the names; sources and scaling in the module docstring).

    Raises ValueError from :meth:`validate` naming the bad field."""
    line_rate_bps: float
    ewma_alpha: float = 0.02
    t_low_s: float = 50e-6
    t_high_s: float = 500e-6
    additive_increment_bps: float = 10e6      # delta
    beta: float = 0.8
    hai_threshold: int = 5                    # N: completions of negative gradient before HAI
    hai_factor: int = 5                       # the increase in HAI is hai_factor x delta
    min_rate_bps: float = 100e6
    min_rtt_s: float | None = None            # None: the smallest RTT sample seen
    rate_scale: float = 1.0
    time_scale: float = 1.0

    @classmethod
    def scaled(cls, line_rate_bps: float, time_scale: float | None = None, **overrides) -> "TimelyParams":
        """The reference defaults scaled to ``line_rate_bps`` (module docstring); ``time_scale`` None
        means common.ccparams.default_time_scale; ``overrides`` replace any scaled value.

        Raises:
            ValueError: a bad value, naming the field.
        """
        rs, ts = scales(line_rate_bps, time_scale, REFERENCE_RATE_BPS)
        base = cls(REFERENCE_RATE_BPS)
        k = max(1.0, rs / ts)            # completion events per round trip: k times fewer here
        p = cls(line_rate_bps=line_rate_bps, ewma_alpha=1 - (1 - base.ewma_alpha) ** k,
                t_low_s=base.t_low_s * ts, t_high_s=base.t_high_s * ts,
                additive_increment_bps=base.additive_increment_bps / rs * k, beta=base.beta,
                hai_threshold=base.hai_threshold, hai_factor=base.hai_factor,
                min_rate_bps=0.01 * line_rate_bps, min_rtt_s=None, rate_scale=rs, time_scale=ts)
        return p.finish(overrides)

    def validate(self) -> None:
        """Raise ValueError naming the first field out of range."""
        require_positive(self, ("line_rate_bps", "t_low_s", "t_high_s", "additive_increment_bps", "min_rate_bps"))
        if self.min_rtt_s is not None and not (self.min_rtt_s > 0 and math.isfinite(self.min_rtt_s)):
            raise ValueError(f"min_rtt_s must be a positive number or None, not {self.min_rtt_s!r}")
        if not 0 < self.ewma_alpha <= 1:
            raise ValueError(f"ewma_alpha must be in (0, 1], not {self.ewma_alpha!r}")
        if not 0 < self.beta <= 1:
            raise ValueError(f"beta must be in (0, 1], not {self.beta!r}")
        for name in ("hai_threshold", "hai_factor"):
            v = getattr(self, name)
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
                raise ValueError(f"{name} must be an integer >= 1, not {v!r}")
        if self.t_low_s >= self.t_high_s:
            raise ValueError(f"t_low_s {self.t_low_s} must be below t_high_s {self.t_high_s}")
        if self.min_rate_bps > self.line_rate_bps:
            raise ValueError(f"min_rate_bps {self.min_rate_bps} exceeds line_rate_bps {self.line_rate_bps}")


@dataclass
class TimelyState:
    """TIMELY's rate of one QP (Algorithm 1; module docstring), driven by RTT samples.

    Call :meth:`on_rtt` with each completion's RTT sample and its time; read :attr:`rate_bps`.
    Starts at the line rate (as a NIC starts a QP). ``events`` keeps ``(t_s, kind, rate_bps,
    rtt_s, normalized_gradient)`` per sample when ``record`` is set; ``kind`` is ``t_low``,
    ``t_high``, ``increase``, ``hai`` or ``decrease``."""
    params: TimelyParams
    record: bool = False
    rate_bps: float = field(init=False)
    prev_rtt_s: float | None = field(init=False, default=None)
    rtt_diff_s: float = field(init=False, default=0.0)
    min_rtt_s: float | None = field(init=False, default=None)
    negative_count: int = field(init=False, default=0)
    samples: int = field(init=False, default=0)
    decreases: int = field(init=False, default=0)
    events: list = field(init=False, default_factory=list)

    def __post_init__(self):
        self.rate_bps = self.params.line_rate_bps

    @property
    def normalized_gradient(self) -> float:
        """The EWMA of RTT differences over minRTT (0 before the first sample)."""
        m = self.params.min_rtt_s or self.min_rtt_s
        return self.rtt_diff_s / m if m else 0.0

    def on_rtt(self, rtt_s: float, now_s: float) -> str:
        """One completion event at ``now_s`` with RTT sample ``rtt_s`` (seconds): update the rate.
        Returns the branch taken (see the class docstring).

        Raises:
            ValueError: ``rtt_s`` not a positive finite number.
        """
        if not (rtt_s > 0 and math.isfinite(rtt_s)):
            raise ValueError(f"an RTT sample must be a positive number of seconds, not {rtt_s!r}")
        p = self.params
        self.samples += 1
        new_diff = 0.0 if self.prev_rtt_s is None else rtt_s - self.prev_rtt_s
        self.prev_rtt_s = rtt_s
        self.rtt_diff_s = (1 - p.ewma_alpha) * self.rtt_diff_s + p.ewma_alpha * new_diff
        if self.min_rtt_s is None or rtt_s < self.min_rtt_s:
            self.min_rtt_s = rtt_s
        g = self.normalized_gradient
        self.negative_count = self.negative_count + 1 if g < 0 else 0
        if rtt_s < p.t_low_s:
            kind, rate = "t_low", self.rate_bps + p.additive_increment_bps
        elif rtt_s > p.t_high_s:
            kind, rate = "t_high", self.rate_bps * (1 - p.beta * (1 - p.t_high_s / rtt_s))
        else:
            kind, rate = self.between_thresholds(rtt_s, g)
        if rate < self.rate_bps:
            self.decreases += 1
        self.rate_bps = min(max(rate, p.min_rate_bps), p.line_rate_bps)
        if self.record:
            self.events.append((now_s, kind, self.rate_bps, rtt_s, g))
        return kind

    def between_thresholds(self, rtt_s: float, g: float) -> tuple[str, float]:
        """Algorithm 1's last lines, for an RTT sample ``rtt_s`` between T_low and T_high with
        normalised gradient ``g``: ``("increase" | "hai", rate + N delta)`` when ``g <= 0``, else
        ``("decrease", rate (1 - beta g))``; the rate before the clamp to [min rate, line rate]."""
        p = self.params
        if g <= 0:
            hai = self.negative_count >= p.hai_threshold
            return ("hai" if hai else "increase",
                    self.rate_bps + (p.hai_factor if hai else 1) * p.additive_increment_bps)
        return "decrease", self.rate_bps * (1 - p.beta * g)
