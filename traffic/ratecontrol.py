"""RoCE rate controllers: what sets a sender queue pair's rate. The sender QP
(traffic.roce.SenderQp) paces its frames at :meth:`RateController.rate_bps` and reports every
frame sent, every CNP and every ACK (with its RTT sample) to its controller; it never asks which
algorithm it runs. A new congestion-control algorithm is one class here plus one entry in
:data:`RATE_CONTROLLERS` (its name is the scenario's ``roce.mode``; its ``PARAMS``, the keys of
the scenario's ``roce.<name>`` section, built into ``params_cls``), or one class in a file of
the user's own, named by the scenario's ``roce.cc.plugin`` (traffic.ccplugin loads it). The
interface, :class:`RateController`, is defined in traffic.ccbase and imported from here.

Registered:
- ``dcqcn``: the DCQCN reaction point (common.dcqcn.ReactionPoint; Zhu et al., SIGCOMM 2015).
- ``timely``: TIMELY's RTT-gradient control (common.timely; Mittal et al., SIGCOMM 2015).
- ``patched_timely``: Patched TIMELY (common.patched_timely; Zhu et al., CoNEXT 2016, section 4.3).
- ``swift``: a Swift-like delay-target control, rate-based (common.swift; Kumar et al., SIGCOMM 2020).
- ``none``: a fixed rate (the job's ``rate_mbps``, default the line rate): open loop, no reaction.
"""
from __future__ import annotations

from common.dcqcn import DcqcnParams, ReactionPoint
from common.params import F
from common.patched_timely import PatchedTimelyParams, PatchedTimelyState
from common.swift import SwiftParams, SwiftState
from common.timely import TimelyParams, TimelyState
from traffic.ccbase import RateController
from traffic.ccplugin import PLUGIN_PREFIX, load_plugin

__all__ = ["RateController", "FixedRate", "Dcqcn", "Timely", "PatchedTimely", "Swift", "RATE_CONTROLLERS",
           "for_job", "has_params", "PLUGIN_PREFIX"]


def _number(lo: float, hi: float) -> F:
    """An optional number key within [lo, hi] (absent: the scaled default)."""
    return F((int, float), None, lo=lo, hi=hi)


def _integer(lo: int, hi: int) -> F:
    """An optional integer key within [lo, hi] (absent: the scaled default)."""
    return F((int,), None, lo=lo, hi=hi)


#: The emulation's time scale for a controller's times (common.ccparams.default_time_scale).
TIME_SCALE = {"time_scale": _number(1e-3, 1e6)}
#: What the delay-based controllers' sections share: the time scale, the multiplicative-decrease
#: factor beta and the rate floor.
DELAY_PARAMS = {**TIME_SCALE, "beta": _number(1e-6, 1.0), "min_rate_mbps": _number(1e-6, 1000)}


class FixedRate(RateController):
    """Open loop: the job's ``rate_mbps`` (default its ``line_rate_mbps``), never changed."""
    wants_rtt_samples = False       # its rate never depends on a round trip
    name = "none"

    def __init__(self, rate_bps: float):
        if not rate_bps > 0:
            raise ValueError(f"a fixed rate must be > 0 bit/s, got {rate_bps!r}")
        self._rate_bps = float(rate_bps)

    @classmethod
    def from_job(cls, job: dict) -> "FixedRate":
        """``rate_mbps`` of the job, else its ``line_rate_mbps``."""
        return cls(job.get("rate_mbps", job["line_rate_mbps"]) * 1e6)

    def rate_bps(self) -> float:
        """The fixed rate."""
        return self._rate_bps

    def record(self) -> dict:
        """The fixed target rate; no CNP reaction."""
        return {"target_rate_bps": self._rate_bps, "cnps_reacted": 0, "alpha": None}


class Dcqcn(RateController):
    """DCQCN's reaction point (common.dcqcn.ReactionPoint): starts at line rate, cuts on CNPs,
    recovers on its timer and byte counter. Source: Zhu et al., "Congestion Control for
    Large-Scale RDMA Deployments", SIGCOMM 2015."""
    wants_rtt_samples = False       # its rate never depends on a round trip
    name = "dcqcn"
    params_cls = DcqcnParams
    PARAMS = {**TIME_SCALE, "g": _number(1e-6, 1.0), "alpha_timer_s": _number(1e-6, 60),
              "cnp_interval_s": _number(0.0, 60), "timer_s": _number(1e-6, 60),
              "byte_counter_bytes": _number(1, 1e12), "fast_recovery_stages": _integer(1, 1000),
              "rate_ai_mbps": _number(1e-6, 1000), "rate_hai_mbps": _number(1e-6, 1000),
              "min_rate_mbps": _number(1e-6, 1000)}

    def __init__(self, params: DcqcnParams):
        self.params = params
        self.rp: ReactionPoint | None = None

    @classmethod
    def from_job(cls, job: dict) -> "Dcqcn":
        """The job's ``dcqcn`` parameters, else the defaults scaled to its line rate."""
        line_bps = job["line_rate_mbps"] * 1e6
        return cls(DcqcnParams(**job["dcqcn"]) if job.get("dcqcn") else DcqcnParams.scaled(line_bps))

    def start(self, now_s: float) -> None:
        """A fresh reaction point at ``now_s`` (line rate)."""
        self.rp = ReactionPoint(self.params, now_s=now_s, record=False)

    def rate_bps(self) -> float:
        """The reaction point's current rate (the line rate before the start)."""
        return self.rp.rate_bps if self.rp is not None else self.params.line_rate_bps

    def target_bps(self) -> float:
        """The reaction point's target rate."""
        return self.rp.target_bps if self.rp is not None else self.params.line_rate_bps

    def advance(self, now_s: float) -> None:
        """The rate-increase and alpha timers up to ``now_s``."""
        self.rp.advance(now_s)

    def on_sent(self, nbytes: int, now_s: float) -> None:
        """The byte counter."""
        self.rp.on_sent(nbytes, now_s)

    def on_cnp(self, now_s: float) -> None:
        """A rate cut (at most one per CNP, alpha updated)."""
        self.rp.on_cnp(now_s)

    def record(self) -> dict:
        """CNPs reacted to and the last alpha."""
        return {"target_rate_bps": None, "cnps_reacted": self.rp.cnps if self.rp else 0,
                "alpha": self.rp.alpha if self.rp else None}


class DelayBased(RateController):
    """The shape TIMELY, Patched TIMELY and the Swift-like controller share: a parameter set (``params_cls``, from
    the job's section named like the mode, else scaled to the job's line rate) and a state machine
    (``state_cls``, whose ``rate_bps`` the queue pair paces at) fed one RTT sample at a time by
    ``sample(state, now_s, rtt_s, acked_bytes)``; CNPs are ignored (delay is the only signal)."""
    params_cls: type
    state_cls: type

    def __init__(self, params):
        self.params = params
        self.state = self.state_cls(params)

    @classmethod
    def from_job(cls, job: dict) -> "DelayBased":
        """The job's ``<mode>`` parameters (fields of ``params_cls``), else the defaults scaled to its
        line rate (``line_rate_mbps``). Raises ValueError on a bad value, TypeError on an unknown one."""
        own = job.get(cls.name)
        return cls(cls.params_cls(**own) if own else cls.params_cls.scaled(job["line_rate_mbps"] * 1e6))

    def rate_bps(self) -> float:
        """The current rate."""
        return self.state.rate_bps

    def on_ack(self, now_s: float, rtt_s: float | None, acked_bytes: int) -> None:
        """Feed each RTT sample, with the bytes its ACK covered, to the state machine (ACKs without
        one change nothing)."""
        if rtt_s is not None:
            self.sample(self.state, now_s, rtt_s, acked_bytes)

    @staticmethod
    def sample(state, now_s: float, rtt_s: float, acked_bytes: int) -> None:
        """One RTT sample into ``state`` (each algorithm's own call)."""
        raise NotImplementedError

    def extra_record(self) -> dict:
        """The algorithm's own figures for :meth:`record`."""
        return {}

    def record(self) -> dict:
        """No CNP reaction; the samples used, the rate decreases and the algorithm's own figures."""
        st = self.state
        return {"target_rate_bps": None, "cnps_reacted": 0, "alpha": None, "rtt_samples_used": st.samples,
                "rate_decreases": st.decreases, **self.extra_record()}


class Timely(DelayBased):
    """TIMELY (common.timely.TimelyState): starts at line rate; each RTT sample moves the rate by
    Algorithm 1 (thresholds T_low / T_high, then the sign of the RTT gradient's EWMA). CNPs are
    ignored (delay is its only signal). Source: Mittal et al., "TIMELY: RTT-based Congestion
    Control for the Datacenter", SIGCOMM 2015."""
    name = "timely"
    params_cls, state_cls = TimelyParams, TimelyState
    #: delta is ``additive_increment_mbps`` (added per completion event: an ACK with an RTT sample);
    #: ``hai_threshold`` the completions of negative gradient before hyperactive increase (N);
    #: ``min_rtt_s`` the gradient's normaliser (absent: the smallest RTT sample the QP has seen).
    PARAMS = {**DELAY_PARAMS, "ewma_alpha": _number(1e-6, 1.0), "t_low_s": _number(1e-6, 60),
              "t_high_s": _number(1e-6, 60), "additive_increment_mbps": _number(1e-6, 1000),
              "hai_threshold": _integer(1, 1000), "min_rtt_s": _number(1e-6, 60)}

    @staticmethod
    def sample(state, now_s: float, rtt_s: float, acked_bytes: int) -> None:
        """One completion event per RTT sample (TIMELY ignores the bytes)."""
        state.on_rtt(rtt_s, now_s)

    def extra_record(self) -> dict:
        """The minimum RTT seen."""
        return {"min_rtt_seen_s": self.state.min_rtt_s}


class PatchedTimely(Timely):
    """Patched TIMELY (common.patched_timely.PatchedTimelyState): TIMELY whose decrease between
    T_low and T_high follows the absolute RTT against RTT_ref, weighted by a continuous function
    of the gradient, so that flows sharing a bottleneck converge to one fair rate. CNPs are
    ignored. Source: Zhu et al., "ECN or Delay: Lessons Learnt from Analysis of DCQCN and
    TIMELY", CoNEXT 2016, section 4.3."""
    name = "patched_timely"
    params_cls, state_cls = PatchedTimelyParams, PatchedTimelyState
    #: TIMELY's keys but ``hai_threshold`` (the patch has no hyperactive increase), and
    #: ``rtt_ref_s``, the error's reference RTT (absent: ``t_low_s``, as in the paper).
    PARAMS = {**{k: v for k, v in Timely.PARAMS.items() if k != "hai_threshold"}, "rtt_ref_s": _number(1e-6, 60)}


class Swift(DelayBased):
    """A Swift-like delay-target controller, rate-based (common.swift.SwiftState): starts at line
    rate; below the delay target it adds ``ai_bps`` per round trip of acknowledged data, at or
    above it cuts in proportion to the excess, at most once per round trip. CNPs are ignored.
    Source: Kumar et al., "Swift: Delay is Simple and Effective for Congestion Control in the
    Datacenter", SIGCOMM 2020 (the simplifications are listed in common.swift)."""
    name = "swift"
    params_cls, state_cls = SwiftParams, SwiftState
    #: ``target_queue_s``: the delay above the base round trip aimed for; ``base_rtt_s``: the base
    #: round trip (absent: the smallest RTT sample seen); ``ai_mbps``: the additive increase per
    #: round trip of acknowledged data.
    PARAMS = {**DELAY_PARAMS, "target_queue_s": _number(1e-6, 60), "base_rtt_s": _number(1e-6, 60),
              "ai_mbps": _number(1e-6, 1000), "max_mdf": _number(1e-6, 0.999)}
    #: Swift reacts to every ACK, and its transport acknowledges every packet: each asks for one.
    #: With the responder's count (an ACK per 16 packets) the QPs near a fair share flipped
    #: between that and an ACK per packet (traffic.roce's rule for slowed QPs): a QP below it
    #: could cut once per round trip, one above it once per 16 packets, and on a 4:1 incast the
    #: shares drifted apart (Jain 0.77 in one run, 0.88-0.996 over ten; 0.998-1.000 over five
    #: with every packet asking, 2026-12-04)
    ack_every_packets = 1

    @staticmethod
    def sample(state, now_s: float, rtt_s: float, acked_bytes: int) -> None:
        """The sample with the bytes it acknowledged."""
        state.on_ack(now_s, rtt_s, acked_bytes)

    def extra_record(self) -> dict:
        """The delay target last in force."""
        return {"delay_target_s": self.state.target_s}


#: Registered rate controllers by ``roce.mode``.
RATE_CONTROLLERS: dict[str, type[RateController]] = {c.name: c for c in (Dcqcn, Timely, PatchedTimely, Swift, FixedRate)}


def has_params(cls: type[RateController]) -> bool:
    """Whether a registered controller has a ``roce.<name>`` section and a parameter set (its
    ``PARAMS`` and ``params_cls`` come together; :func:`_check_registry`)."""
    return cls.params_cls is not None


def _check_registry() -> None:
    """Every registered controller declares both ``PARAMS`` and ``params_cls`` or neither.
    Raises TypeError naming the controller (at import: a registration mistake, not a user's)."""
    for name, cls in RATE_CONTROLLERS.items():
        if bool(cls.PARAMS) != (cls.params_cls is not None):
            raise TypeError(f"rate controller {name}: PARAMS and params_cls must be given together")


_check_registry()


def for_job(job: dict) -> RateController:
    """The controller of one QP of ``job``: the plug-in class in the file ``cc_plugin`` names
    (traffic.ccplugin.load_plugin, loaded once per agent) when the job has one, else the
    registered one its ``mode`` names (default ``dcqcn``).

    Raises:
        ValueError: an unregistered mode (the scenario's schema refuses it before a run).
        traffic.ccplugin.PluginError: the plug-in file does not load or is not a controller.
    """
    if job.get("cc_plugin"):
        return load_plugin(job["cc_plugin"], job.get("cc_params")).from_job(job)
    mode = job.get("mode", "dcqcn")
    if mode not in RATE_CONTROLLERS:
        raise ValueError(f"no RoCE rate controller {mode!r} (registered: {', '.join(RATE_CONTROLLERS)})")
    return RATE_CONTROLLERS[mode].from_job(job)
