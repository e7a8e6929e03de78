"""A Swift-like delay-target rate controller of one sender queue pair, driven by injected time.

Source: G. Kumar et al., "Swift: Delay is Simple and Effective for Congestion Control in the
Datacenter", SIGCOMM 2020, Algorithm 1 (the reaction to an ACK). On an ACK with a delay sample
and ``num_acked`` bytes newly acknowledged:

- delay < target: additive increase, ``ai`` per round trip's worth of acknowledged data
  (Swift: ``cwnd += ai / cwnd`` per acknowledged packet, i.e. ``ai`` packets per window);
- delay >= target, and no decrease in the last round trip: multiplicative decrease by
  ``max(1 - beta (delay - target) / delay, 1 - max_mdf)``.

What this model changes, because the emulated QP paces instead of keeping a window, and because
RoCE carries no timestamps (the simplifications, each on purpose):

- **Rate, not cwnd.** The state is a rate; the increase per ACK is
  ``ai_bps x acked_bits / (rate x rtt)``: ``ai_bps`` per round trip of data at the current rate,
  which is Swift's ``ai / cwnd`` per packet with ``cwnd = rate x rtt``. A QP that sends less
  than its rate gets less increase, as a window that is not full would.
- **One delay.** Swift splits the delay into fabric and host parts (NIC timestamps) with a
  target for each; here the delay is the whole RTT sample (traffic.roce.SenderQp: ACK arrival
  minus the frame's send time), against one target.
- **Target = base round trip + a queue allowance.** Swift's fabric target is a base plus a
  per-hop term (hops from the TTL) and a flow-scaling term; here it is the base round trip
  (``base_rtt_s``, or the smallest RTT sample seen, which plays the per-path base) plus
  ``target_queue_s``. No flow scaling, no retransmission-timeout or fast-recovery reactions
  (go-back-N in common.rc handles loss; the controller sees only ACKs).

Defaults and scaling (:meth:`SwiftParams.scaled`):

- ``beta`` 0.8 and ``max_mdf`` 0.5: the values public Swift models use (htsim's); the paper
  tunes them per deployment and gives the algorithm.
- ``target_queue_s``: 50 us at the reference times the emulation's ``time_scale``
  (common.ccparams.default_time_scale: 100 at 10 Mbit/s, so 5 ms there, 0.5 ms at 100 Mbit/s). With
  that time scale it is always about 6 kB of queue at the host rate (6 frames): enough to keep the
  port busy through the pacers' jitter, small against the 100-frame default buffer. Swift's own
  fabric targets are a few tens of microseconds at 100 Gbit/s, a similar handful of packets.
- ``ai_bps``: 0.5% of the line per round trip (fabriclab's choice). Swift's ``ai`` of one
  packet per round trip is about 1% of a 100 Gbit/s fabric's window (tens of microseconds of
  round trip, 4 kB packets); one packet would be a fifth of the emulated window here (a 10 Mbit/s
  line carries 5 kB in a 4 ms round trip). Each ACK brings the increase of the round trips' worth
  of data it covers; the emulated QP asks for an ACK on every packet (traffic.ratecontrol.Swift,
  ``ack_every_packets = 1``: Swift reacts per ACK, and its transport acknowledges every packet),
  so each step is a fraction of ``ai_bps``.
- ``min_rate_bps``: 1% of the line (as common.timely; one ACK per 16 KB).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from common.ccparams import CcParams, require_positive, time_scale_for

#: The reference the target's 50 us stands for (Swift's 100 Gbit/s fabric; only the time scale
#: derived from the host rate stretches it).
REFERENCE_TARGET_QUEUE_S = 50e-6


@dataclass(frozen=True)
class SwiftParams(CcParams):
    """Swift-like parameters (units in the names; sources and scaling in the module docstring).

    Raises ValueError from :meth:`validate` naming the bad field."""
    line_rate_bps: float
    target_queue_s: float = REFERENCE_TARGET_QUEUE_S
    base_rtt_s: float | None = None           # None: the smallest RTT sample seen
    ai_bps: float = 0.0                       # additive increase per round trip (set by scaled)
    beta: float = 0.8
    max_mdf: float = 0.5
    min_rate_bps: float = 0.0
    time_scale: float = 1.0

    @classmethod
    def scaled(cls, line_rate_bps: float, time_scale: float | None = None, **overrides) -> "SwiftParams":
        """The defaults for a host link of ``line_rate_bps`` (module docstring); ``time_scale``
        None means common.ccparams.default_time_scale; ``overrides`` replace any scaled value.

        Raises:
            ValueError: a bad value, naming the field.
        """
        ts = time_scale_for(line_rate_bps, time_scale)
        p = cls(line_rate_bps=line_rate_bps, target_queue_s=REFERENCE_TARGET_QUEUE_S * ts, base_rtt_s=None,
                ai_bps=0.005 * line_rate_bps, beta=0.8, max_mdf=0.5, min_rate_bps=0.01 * line_rate_bps,
                time_scale=ts)
        return p.finish(overrides)

    def validate(self) -> None:
        """Raise ValueError naming the first field out of range."""
        require_positive(self, ("line_rate_bps", "target_queue_s", "ai_bps", "min_rate_bps"))
        if self.base_rtt_s is not None and not (self.base_rtt_s > 0 and math.isfinite(self.base_rtt_s)):
            raise ValueError(f"base_rtt_s must be a positive number or None, not {self.base_rtt_s!r}")
        if not 0 < self.beta <= 1:
            raise ValueError(f"beta must be in (0, 1], not {self.beta!r}")
        if not 0 < self.max_mdf < 1:
            raise ValueError(f"max_mdf must be in (0, 1), not {self.max_mdf!r}")
        if self.min_rate_bps > self.line_rate_bps:
            raise ValueError(f"min_rate_bps {self.min_rate_bps} exceeds line_rate_bps {self.line_rate_bps}")


@dataclass
class SwiftState:
    """The Swift-like rate of one QP (module docstring), driven by ACKs with delay samples.

    Call :meth:`on_ack` per ACK; read :attr:`rate_bps` and :attr:`target_s`. Starts at the line
    rate. ``events`` keeps ``(t_s, kind, rate_bps, rtt_s, target_s)`` per sample when ``record``
    is set; ``kind`` is ``increase``, ``decrease`` or ``hold`` (above the target, but a decrease
    came less than a round trip ago)."""
    params: SwiftParams
    record: bool = False
    rate_bps: float = field(init=False)
    min_rtt_s: float | None = field(init=False, default=None)
    last_decrease_s: float | None = field(init=False, default=None)
    decreases: int = field(init=False, default=0)
    samples: int = field(init=False, default=0)
    events: list = field(init=False, default_factory=list)

    def __post_init__(self):
        self.rate_bps = self.params.line_rate_bps

    @property
    def target_s(self) -> float | None:
        """The delay target: base round trip + ``target_queue_s`` (None before the first sample
        when no ``base_rtt_s`` is given)."""
        base = self.params.base_rtt_s or self.min_rtt_s
        return None if base is None else base + self.params.target_queue_s

    def on_ack(self, now_s: float, rtt_s: float, acked_bytes: int) -> str:
        """An ACK at ``now_s`` with delay sample ``rtt_s`` (seconds) that acknowledged
        ``acked_bytes`` new payload bytes: increase below the target, decrease (at most once per
        round trip) at or above it. Returns the kind (class docstring).

        Raises:
            ValueError: ``rtt_s`` not a positive finite number, or ``acked_bytes`` negative.
        """
        if not (rtt_s > 0 and math.isfinite(rtt_s)):
            raise ValueError(f"an RTT sample must be a positive number of seconds, not {rtt_s!r}")
        if acked_bytes < 0:
            raise ValueError(f"acked_bytes must be >= 0, not {acked_bytes!r}")
        p = self.params
        self.samples += 1
        if self.min_rtt_s is None or rtt_s < self.min_rtt_s:
            self.min_rtt_s = rtt_s
        target = self.target_s
        if rtt_s < target:
            kind = "increase"
            rate = self.rate_bps + p.ai_bps * acked_bytes * 8 / (self.rate_bps * rtt_s)
        elif self.last_decrease_s is None or now_s - self.last_decrease_s >= rtt_s:
            kind = "decrease"
            rate = self.rate_bps * max(1 - p.beta * (rtt_s - target) / rtt_s, 1 - p.max_mdf)
            self.last_decrease_s = now_s
            self.decreases += 1
        else:
            kind, rate = "hold", self.rate_bps
        self.rate_bps = min(max(rate, p.min_rate_bps), p.line_rate_bps)
        if self.record:
            self.events.append((now_s, kind, self.rate_bps, rtt_s, target))
        return kind
