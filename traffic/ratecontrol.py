"""RoCE rate controllers: what sets a sender queue pair's rate. The sender QP
(traffic.roce.SenderQp) paces its frames at :meth:`RateController.rate_bps` and reports every
frame sent and every CNP to its controller; it never asks which algorithm it runs. A new
congestion-control algorithm is one class here plus one entry in :data:`RATE_CONTROLLERS`
(its name is the scenario's ``roce.mode``).

Registered:
- ``dcqcn``: the DCQCN reaction point (common.dcqcn.ReactionPoint; Zhu et al., SIGCOMM 2015).
- ``none``: a fixed rate (the job's ``rate_mbps``, default the line rate): open loop, no reaction.
"""
from __future__ import annotations

from common.dcqcn import DcqcnParams, ReactionPoint


class RateController:
    """The interface a sender QP calls. Rates in bit/s, times in seconds on the agent's monotonic clock.

    Attributes:
        params: the algorithm's parameters (e.g. :class:`common.dcqcn.DcqcnParams`) or None.
    """
    #: The registry name (a scenario's ``roce.mode``).
    name = "controller"
    params = None

    @classmethod
    def from_job(cls, job: dict) -> "RateController":
        """The controller for one QP of an agent's job (traffic.roce's job format)."""
        raise NotImplementedError

    def start(self, now_s: float) -> None:
        """The QP's clock starts at ``now_s``."""

    def rate_bps(self) -> float:
        """The rate the QP may send at now."""
        raise NotImplementedError

    def target_bps(self) -> float:
        """The rate the controller aims for now (recorded beside the rate)."""
        return self.rate_bps()

    def advance(self, now_s: float) -> None:
        """Run the controller's timers up to ``now_s`` (called before each frame)."""

    def on_sent(self, nbytes: int, now_s: float) -> None:
        """A frame of ``nbytes`` on the wire left at ``now_s``."""

    def on_cnp(self, now_s: float) -> None:
        """A congestion notification packet for this QP arrived at ``now_s``."""

    def record(self) -> dict:
        """The controller's figures for the QP's result record: ``target_rate_bps`` (a fixed
        rate's target, else None), ``cnps_reacted``, ``alpha`` (None without one)."""
        return {"target_rate_bps": None, "cnps_reacted": 0, "alpha": None}


class FixedRate(RateController):
    """Open loop: the job's ``rate_mbps`` (default its ``line_rate_mbps``), never changed."""
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
    name = "dcqcn"

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


#: Registered rate controllers by ``roce.mode``.
RATE_CONTROLLERS: dict[str, type[RateController]] = {c.name: c for c in (Dcqcn, FixedRate)}


def for_job(job: dict) -> RateController:
    """The controller the job's ``mode`` names (default ``dcqcn``).

    Raises:
        ValueError: an unregistered mode (the scenario's schema refuses it before a run).
    """
    mode = job.get("mode", "dcqcn")
    if mode not in RATE_CONTROLLERS:
        raise ValueError(f"no RoCE rate controller {mode!r} (registered: {', '.join(RATE_CONTROLLERS)})")
    return RATE_CONTROLLERS[mode].from_job(job)
