"""DCQCN: the reaction point (sender NIC) and notification point (receiver NIC).

Source: Y. Zhu et al., "Congestion Control for Large-Scale RDMA Deployments",
SIGCOMM 2015, section 3 (the algorithm; the switch side, the congestion point,
is RED-style ECN marking with Kmin/Kmax/Pmax, which fabriclab's ECN profiles
already apply). Names follow the paper:

- Notification point (NP): a CE-marked packet of a QP makes the receiver send
  a CNP to the sender's QP, at most one per QP every ``N`` (``cnp_interval_s``).
- Reaction point (RP), per QP, current rate R_C and target rate R_T:
  on a CNP: R_T = R_C; R_C = R_C (1 - alpha/2); alpha = (1 - g) alpha + g; the
  timer, the byte counter and their stage counts T and BC restart.
  Without CNPs alpha decays every ``K`` (``alpha_timer_s``): alpha = (1 - g) alpha.
  Rate increase events come from a timer (every ``timer_s``: T += 1) and a byte
  counter (every ``byte_counter_bytes`` sent: BC += 1); at each event:
  fast recovery while max(T, BC) < F: R_C = (R_T + R_C) / 2;
  hyper increase once min(T, BC) > F: R_T += i R_HAI with i = min(T, BC) - F;
  additive increase otherwise: R_T += R_AI; after an additive or hyper step
  R_C = (R_T + R_C) / 2 too (QCN's increase rules, IEEE 802.1Qau, which DCQCN keeps).
  Rates stay within [``min_rate_bps``, line rate].

Scaling to an emulated link (keep the dimensionless numbers: rates down by s, times up by s). NIC
defaults are those of the paper's 40 Gbit/s testbed: g = 1/256, K = 55 us,
N = 50 us, T = 55 us, B = 10 MB, F = 5, R_AI = 40 Mbit/s; R_HAI is 10 R_AI
(fabriclab's choice; the paper names it without a value); the minimum rate is
fabriclab's (0.1% of the line). With the line rate scaled down by
``rate_scale`` = 40 Gbit/s / line rate, rates keep their fraction of the line
(R_AI = 0.1% of it). Timers are multiplied by ``time_scale`` and the byte
counter keeps its line time (B x time_scale / rate_scale bytes). A
``time_scale`` equal to ``rate_scale`` would replay the testbed exactly, 4000
times slower at 10 Mbit/s: seconds of emulation would show only its first
milliseconds. The default, ``rate_scale / 40`` (100 at 10 Mbit/s: T = K = 5.5 ms,
N = 5 ms, B = 250 kB), was chosen by measurement: two DCQCN flows into one
10 Mbit/s port with RED marking (Kmin 5, Kmax 40 packets, Pmax 0.2) over 10 s
shared it at 4.4-4.9 Mbit/s each with the queue between Kmin and Kmax about half
the time and more; at 300 and 1000 they had not recovered from the first cuts
by the end (3.8-4.9 Mbit/s each with an empty queue), and at 30 the
notification point's CNPs outran the queue's response (3.4 Mbit/s each).
Both factors are recorded with every run and can be set in the scenario.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from common.ccparams import CcParams, require_positive, scales

REFERENCE_RATE_BPS = 40e9        # the DCQCN paper's testbed links


@dataclass(frozen=True)
class DcqcnParams(CcParams):
    """DCQCN parameters (units in the names; see the module docstring for their sources and scaling).

    Raises ValueError from :meth:`validate` naming the bad field."""
    line_rate_bps: float
    g: float = 1 / 256
    alpha_init: float = 1.0
    alpha_timer_s: float = 55e-6          # K
    cnp_interval_s: float = 50e-6         # N
    timer_s: float = 55e-6                # T, the rate-increase timer
    byte_counter_bytes: float = 10e6      # B
    fast_recovery_stages: int = 5         # F
    rate_ai_bps: float = 40e6             # R_AI
    rate_hai_bps: float = 400e6           # R_HAI
    min_rate_bps: float = 40e6
    rate_scale: float = 1.0               # testbed line rate / this line rate
    time_scale: float = 1.0               # emulated round trip / testbed round trip

    @classmethod
    def scaled(cls, line_rate_bps: float, time_scale: float | None = None, **overrides) -> "DcqcnParams":
        """The paper's NIC defaults scaled to ``line_rate_bps`` (see the module docstring); ``time_scale``
        None means ``rate_scale / 40``; ``overrides`` replace any scaled value.
        Raises ValueError on a bad value (named)."""
        rs, time_scale = scales(line_rate_bps, time_scale, REFERENCE_RATE_BPS)
        base = cls(REFERENCE_RATE_BPS)
        p = cls(line_rate_bps=line_rate_bps, g=base.g, alpha_init=base.alpha_init,
                alpha_timer_s=base.alpha_timer_s * time_scale, cnp_interval_s=base.cnp_interval_s * time_scale,
                timer_s=base.timer_s * time_scale, byte_counter_bytes=base.byte_counter_bytes * time_scale / rs,
                fast_recovery_stages=base.fast_recovery_stages, rate_ai_bps=base.rate_ai_bps / rs,
                rate_hai_bps=base.rate_hai_bps / rs, min_rate_bps=base.min_rate_bps / rs,
                rate_scale=rs, time_scale=time_scale)
        return p.finish(overrides)

    def validate(self) -> None:
        """Raise ValueError naming the first field out of range."""
        require_positive(self, ("line_rate_bps", "alpha_timer_s", "cnp_interval_s", "timer_s",
                                "byte_counter_bytes", "rate_ai_bps", "rate_hai_bps", "min_rate_bps"))
        if not 0 < self.g <= 1:
            raise ValueError(f"g must be in (0, 1], not {self.g!r}")
        if not 0 <= self.alpha_init <= 1:
            raise ValueError(f"alpha_init must be in [0, 1], not {self.alpha_init!r}")
        if not (isinstance(self.fast_recovery_stages, int) and self.fast_recovery_stages >= 1):
            raise ValueError(f"fast_recovery_stages must be an integer >= 1, not {self.fast_recovery_stages!r}")
        if self.min_rate_bps > self.line_rate_bps:
            raise ValueError(f"min_rate_bps {self.min_rate_bps} exceeds line_rate_bps {self.line_rate_bps}")


@dataclass
class RpEvent:
    """One reaction-point event: ``kind`` is cnp, alpha_decay, fast_recovery, additive_increase or
    hyper_increase; ``source`` timer or byte_counter for increases; rates in bit/s after the event."""
    t_s: float
    kind: str
    source: str
    rate_bps: float
    target_bps: float
    alpha: float


@dataclass
class ReactionPoint:
    """DCQCN reaction point of one QP, driven by injected time (seconds on any monotonic clock).

    Call :meth:`on_cnp` when a CNP arrives, :meth:`on_sent` after each packet leaves, and
    :meth:`advance` whenever time passes (both others call it); read :attr:`rate_bps`.
    Timers fire at their exact due times, in order, even when ``advance`` is called late.
    ``events`` keeps every event when ``record`` is set. Starts at line rate (NICs start a QP at
    line rate), alpha = ``alpha_init``."""
    params: DcqcnParams
    now_s: float = 0.0
    record: bool = True
    rate_bps: float = field(init=False)
    target_bps: float = field(init=False)
    alpha: float = field(init=False)
    timer_stage: int = field(init=False, default=0)          # T
    byte_stage: int = field(init=False, default=0)           # BC
    cnps: int = field(init=False, default=0)
    events: list = field(init=False, default_factory=list)

    def __post_init__(self):
        p = self.params
        self.rate_bps = self.target_bps = p.line_rate_bps
        self.alpha = p.alpha_init
        self._bytes = 0.0
        self._next_timer_s = self.now_s + p.timer_s
        self._next_alpha_s = self.now_s + p.alpha_timer_s

    def _log(self, t_s: float, kind: str, source: str = "") -> None:
        if self.record:
            self.events.append(RpEvent(t_s, kind, source, self.rate_bps, self.target_bps, self.alpha))

    def _increase(self, t_s: float, source: str) -> None:
        p = self.params
        f = p.fast_recovery_stages
        if max(self.timer_stage, self.byte_stage) < f:
            kind = "fast_recovery"
        elif min(self.timer_stage, self.byte_stage) > f:
            kind = "hyper_increase"
            self.target_bps = min(self.target_bps + (min(self.timer_stage, self.byte_stage) - f) * p.rate_hai_bps,
                                  p.line_rate_bps)
        else:
            kind = "additive_increase"
            self.target_bps = min(self.target_bps + p.rate_ai_bps, p.line_rate_bps)
        self.rate_bps = min((self.target_bps + self.rate_bps) / 2, p.line_rate_bps)
        self._log(t_s, kind, source)

    def advance(self, now_s: float) -> None:
        """Fire every timer (rate increase, alpha decay) due up to ``now_s``, in time order.
        Raises ValueError when time goes backwards."""
        if now_s < self.now_s:
            raise ValueError(f"time went backwards: {now_s} < {self.now_s}")
        p = self.params
        while True:
            t = min(self._next_timer_s, self._next_alpha_s)
            if t > now_s:
                break
            if self._next_alpha_s <= self._next_timer_s:
                self.alpha *= 1 - p.g
                self._next_alpha_s += p.alpha_timer_s
                self._log(t, "alpha_decay")
            else:
                self.timer_stage += 1
                self._next_timer_s += p.timer_s
                self._increase(t, "timer")
        self.now_s = now_s

    def on_cnp(self, now_s: float) -> None:
        """A CNP arrived at ``now_s``: cut the rate, raise alpha, restart timer and byte counter."""
        self.advance(now_s)
        p = self.params
        self.cnps += 1
        self.target_bps = self.rate_bps
        self.rate_bps = max(self.rate_bps * (1 - self.alpha / 2), p.min_rate_bps)
        self.alpha = (1 - p.g) * self.alpha + p.g
        self.timer_stage = self.byte_stage = 0
        self._bytes = 0.0
        self._next_timer_s = now_s + p.timer_s
        self._next_alpha_s = now_s + p.alpha_timer_s
        self._log(now_s, "cnp")

    def on_sent(self, nbytes: int, now_s: float) -> None:
        """``nbytes`` left at ``now_s``: the byte counter fires one increase per ``byte_counter_bytes``."""
        self.advance(now_s)
        self._bytes += nbytes
        b = self.params.byte_counter_bytes
        while self._bytes >= b:
            self._bytes -= b
            self.byte_stage += 1
            self._increase(now_s, "byte_counter")


@dataclass
class NotificationPoint:
    """DCQCN notification point for the QPs of one receiver: :meth:`on_packet` says whether a CNP is
    due to the packet's QP (CE-marked, and none sent to that QP in the last ``cnp_interval_s``)."""
    cnp_interval_s: float
    last_cnp_s: dict = field(default_factory=dict)
    cnps_sent: dict = field(default_factory=dict)
    ce_packets: dict = field(default_factory=dict)

    def on_packet(self, qp, ce: bool, now_s: float) -> bool:
        """Account one arriving packet of ``qp`` (any hashable id); True means send a CNP now."""
        if not ce:
            return False
        self.ce_packets[qp] = self.ce_packets.get(qp, 0) + 1
        last = self.last_cnp_s.get(qp)
        if last is not None and now_s - last < self.cnp_interval_s:
            return False
        self.last_cnp_s[qp] = now_s
        self.cnps_sent[qp] = self.cnps_sent.get(qp, 0) + 1
        return True
