"""Frames the userspace datapath loses where no qdisc counts them (a round's ``ovs_tx`` section).

On the userspace datapath Open vSwitch sends each output batch with one sendmmsg(2); when a
port's queue is full the qdisc drops a frame (and counts it), and Open vSwitch then frees the
rest of that batch without sending it (no counter anywhere), or, when the refused frame was not
the batch's first, sends it again (the qdisc counts a second drop for the same frame).
controller.ovstxbpf counts both per port (the run's datapath offers the count:
controller.datapaths.base.Datapath.transmit_losses), and this feature corrects the round's drop count:

    frames lost at a port = its qdisc's drops - retried + discarded

Measured on the 8:1 UDP incast with PFC off (one round): 1361 qdisc drops, 12 retried, 119
discarded, so 1468 frames lost, exactly the 1453 datagrams and 15 end markers that did not
arrive; without the correction 92 losses were in no counter.

``summary["ovs_tx"]``: ``counted`` (false on the kernel datapath, which has no such batches, on a
datapath that offers no such count, where the feature is not applicable, or when this kernel
refused the program: ``reason``), ``discarded``, ``retried`` and ``per_port`` (ports with
either). ``total_drops`` includes the correction; ``qdisc_drops`` keeps what the qdiscs counted.
"""
from __future__ import annotations

import contextlib
import socket
import sys
from typing import Any

from common.errors import SetupError
from controller.datapaths.registry import from_environment
from experiments.context import RoundRecord
from experiments.features.base import Feature


#: What a port's record keeps (controller.ovstxbpf.FIELDS).
KEPT = ("discarded", "retried", "refused_first", "messages", "sent", "other_errors")


def round_delta(before: dict[int, dict], after: dict[int, dict], name_of) -> dict[str, dict]:
    """Per-port counters over a round: ``after - before`` for every interface index with a
    discard, a retry or an error, keyed by ``name_of(ifindex)`` (its name; the index as text for
    an interface that is gone)."""
    out = {}
    for idx, cur in after.items():
        old = before.get(idx, {})
        d = {k: cur.get(k, 0) - old.get(k, 0) for k in KEPT}
        if d["discarded"] or d["retried"] or d["other_errors"]:
            out[name_of(idx)] = d
    return dict(sorted(out.items()))


def _name_of(ifindex: int) -> str:
    try:
        return socket.if_indextoname(ifindex)
    except OSError:
        return str(ifindex)


def correct_drops(summary: dict, per_port: dict[str, dict]) -> dict:
    """Add the round's ``ovs_tx`` section and correct ``total_drops`` (see the module docstring).

    Args:
        summary: the round's summary (``total_drops`` as the qdiscs and other features counted).
        per_port: :func:`round_delta` of the round.

    Returns: the ``ovs_tx`` section (also set in ``summary``).
    """
    discarded = sum(p["discarded"] for p in per_port.values())
    retried = sum(p["retried"] for p in per_port.values())
    summary["qdisc_drops"] = summary.get("total_drops")
    if summary.get("total_drops") is not None:
        summary["total_drops"] += discarded - retried
    sec = {"counted": True, "discarded": discarded, "retried": retried, "per_port": per_port}
    summary["ovs_tx"] = sec
    return sec


class OvsTransmit(Feature):
    """Counts what Open vSwitch's userspace datapath discards after a full queue (module docstring)."""
    name = "ovs_tx"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.counts: Any = None          # the loaded count (its read(): {ifindex: {counter: n}})
        self.before: dict[int, dict] = {}
        self.reason: str | None = None

    def enter(self, stack: contextlib.ExitStack, state) -> None:
        """Where the run's datapath has losses to count (Open vSwitch's userspace datapath), load the
        count for the run (unloaded at its end); a kernel that refuses it leaves the drops as the
        qdiscs counted them, with a warning. A datapath with nothing to count says why; one that
        offers no count leaves this feature not applicable."""
        dp = from_environment(self.ctx.env)
        losses = dp.transmit_losses()
        if losses is None or losses.load is None:
            self.reason = (losses.reason if losses is not None else
                           f"not applicable: the {dp.name} datapath offers no count of frames lost outside the qdiscs")
            self.ctx.env["ovs_tx"] = {"counted": False, "reason": self.reason}
            return
        try:
            self.counts = stack.enter_context(losses.load())
        except SetupError as e:
            self.reason = str(e)
            print(f"fabriclab: WARNING: frames Open vSwitch discards after a full queue are not counted ({e}); "
                  "drops are what the qdiscs counted", file=sys.stderr)
        self.ctx.env["ovs_tx"] = {"counted": self.counts is not None, "reason": self.reason}

    def before_round(self, lf, rnd: RoundRecord) -> dict:
        """Take the counters at the round's start."""
        if self.counts is not None:
            self.before = self.counts.read()
        return {}

    def after_round(self, lf, rnd: RoundRecord) -> dict | None:
        """Per-port discards and retries over the round."""
        if self.counts is None:
            return {"counted": False, "reason": self.reason}
        return {"counted": True, "per_port": round_delta(self.before, self.counts.read(), _name_of)}

    def summarize(self, rnd: RoundRecord, summary: dict) -> None:
        """``summary["ovs_tx"]`` and the corrected ``total_drops`` (:func:`correct_drops`)."""
        rec = rnd.features.get(self.name)
        if not rec:
            return
        if not rec.get("counted"):
            summary["ovs_tx"] = {"counted": False, "reason": rec.get("reason")}
            return
        correct_drops(summary, rec["per_port"])

    def report(self, summary: dict) -> str | None:
        """``Open vSwitch: 119 frames discarded after a full queue, 12 drops counted twice; drops corrected``."""
        sec = summary.get("ovs_tx") or {}
        if not sec.get("counted") or not (sec["discarded"] or sec["retried"]):
            return None
        # a round without a drop total of its own (a collective's) has nothing to correct
        corrected = ("" if summary.get("total_drops") is None else
                     f"; drops corrected to {summary['total_drops']} (qdiscs counted {summary.get('qdisc_drops')})")
        return (f"Open vSwitch: {sec['discarded']} frames discarded after a full queue refused one (no qdisc counts "
                f"them), {sec['retried']} refused frames sent again (counted twice){corrected}")
