"""PFC (a scenario's ``priorities`` and ``pfc`` sections): priority queues on every switch port
and host NIC, the pauser in the controller, switched on or off per round; ``pauses.csv``,
``pfc_occupancy.csv`` and the ``pfc`` section of each round (:mod:`.summary`)."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from common.errors import CapabilityError
from common.lazy import lazy_module
from common.pfc import config_sections
from common.units import FRAME_BYTES
from experiments.context import HOST_QUEUE_PACKETS, RoundRecord
from experiments.features.base import Feature
from experiments.features.pfc.plan import MECHANISM, pfc_plan
from experiments.features.pfc.summary import add_to_summary

if TYPE_CHECKING:
    from controller.pfc import accounting as pfcbpf
else:    # the live half, loaded when a live hook first runs (common.lazy): analyze and plot run without it
    pfcbpf = lazy_module("controller.pfc.accounting")


class Pfc(Feature):
    """Priority flow control: planned once before the fabric starts (XOFF/XON in bytes from the
    resolved scenario's ``pfc``, parsed once by common.pfc.parse_pfc), toggled per round,
    reported before and after each round."""
    name = "pfc"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.cfg = None
        self.plan_pfc = None
        self.on = False
        self._round = None

    def plan(self, queues_per_port: int) -> int:
        """The controller's PFC plan; one more queue per port for each lossless priority.

        Raises:
            CapabilityError: the PFC BPF object is not built.
        """
        sc, rounds = self.ctx.sc, self.ctx.rounds
        self.cfg = sc.pfc
        if self.cfg is None:
            self.ctx.env["pfc"] = None
            return 0
        if not pfcbpf.OBJECT.exists():
            raise CapabilityError(f"pfc: {pfcbpf.OBJECT} is not built (run 'sudo make setup'; needs clang and "
                                  "libbpf-dev): the priority queues' accounting needs it")
        self.plan_pfc = pfc_plan(self.ctx.fabric_map, replace(self.cfg, enabled=rounds[0].pfc_enabled),
                                 sc.queues.limit_bytes, sc.queues.burst_bytes,
                                 HOST_QUEUE_PACKETS * FRAME_BYTES, self.ctx.env["shaper"]["slack_s"])
        self.ctx.env["pfc"] = {"mechanism": MECHANISM, **dict(zip(("priorities", "pfc"), config_sections(sc.pfc))),
                               "rounds": [{"name": r.name, "enabled": r.pfc_enabled} for r in rounds]}
        return len(self.cfg.lossless)

    def fabric_args(self) -> dict:
        """``pfc_plan`` for the controller (None: no priority queues)."""
        return {"pfc_plan": self.plan_pfc}

    def after_fabric(self, lf) -> None:
        """Record what the controller applied."""
        if self.plan_pfc is not None:
            self.ctx.env["pfc"]["controller"] = lf.pfc_record
            self.on = self.plan_pfc.enabled

    def describe_round(self, rnd: RoundRecord) -> str | None:
        """``PFC on`` or ``PFC off`` (nothing without priority queues)."""
        if self.plan_pfc is None:
            return None
        return f"PFC {'on' if rnd.round.pfc_enabled else 'off'}"

    def round_options(self, rnd: RoundRecord) -> dict:
        """With PFC on, an incast's bottleneck is the receiver's port (``receiver_bottleneck_reason``:
        ``PFC on``, experiments.analysis.choose_bottleneck)."""
        return {"receiver_bottleneck_reason": "PFC on" if self.plan_pfc is not None and rnd.round.pfc_enabled else None}

    def port_intent(self, rnd: RoundRecord) -> dict | None:
        """With priority queues, every port's tree is the controller's (its gates change during the
        round): not checked against the fabric's single queue."""
        if self.plan_pfc is None:
            return None
        return {"*": {"unchecked": "per-priority queues and pause gates, installed and changed by the controller"}}

    def before_round(self, lf, rnd: RoundRecord) -> dict:
        """Switch PFC as the round asks; take the controller's report before the traffic."""
        if self.plan_pfc is None:
            return {}
        if rnd.round.pfc_enabled != self.on:
            self.on = rnd.round.pfc_enabled
            lf.pfc_request({"enabled": self.on})
        self._round = {"enabled": self.on, "begin_unix_s": time.time(),
                       "before": lf.pfc_report(self.ctx.out / ".pfc_report.json")}
        return {}

    def after_round(self, lf, rnd: RoundRecord) -> dict | None:
        """The round's PFC record: enabled, begin time, the reports before and after."""
        if self.plan_pfc is None:
            return None
        path = self.ctx.out / ".pfc_report.json"
        rec = dict(self._round, after=lf.pfc_report(path))
        path.unlink()
        return rec

    def summarize(self, rnd: RoundRecord, summary: dict) -> None:
        """The ``pfc`` section (:func:`.summary.add_to_summary`) of a round with flow rows."""
        rec = rnd.features.get(self.name)
        if rec is not None and rnd.rows is not None:
            add_to_summary(rnd.dir, summary, rec, rnd.rows)
            paused = {p["upstream"] for p in (summary.get("pfc") or {}).get("per_port") or [] if p["pauses"]}
            summary["paused_transmitters"] = sorted(set(summary.get("paused_transmitters", [])) | paused)

    def warnings(self, summary: dict) -> list[str]:
        """The headroom warnings of a round with PFC on."""
        p = summary.get("pfc") or {}
        if not p.get("enabled"):
            return []
        return [f"PFC: {h['warning']}" for h in p.get("headroom") or [] if h["warning"]]
