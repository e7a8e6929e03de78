"""What the run loop hands to every workload and feature: the run's context (the resolved
scenario laid out on its fabric, the run's environment record, the results folder) and one
round's record (what the round produced, for its summary).

Shared by the run loop (experiments.runner), the workloads (experiments.workloads) and the
features (experiments.features); it imports none of them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from common.errors import FAULT_ENV
from experiments.model import Scenario

#: Host NIC queue length in packets (like a default txqueuelen).
HOST_QUEUE_PACKETS = 1000


class InjectedFault(RuntimeError):
    """Raised on purpose by :func:`maybe_fault` to test teardown."""


def maybe_fault(phase: str) -> None:
    """Raise :class:`InjectedFault` when ``$FABRICLAB_INJECT_FAULT`` names ``phase`` (teardown tests)."""
    if os.environ.get(FAULT_ENV) == phase:
        raise InjectedFault(f"injected fault at phase {phase!r} ({FAULT_ENV})")


@dataclass(frozen=True)
class RunContext:
    """One run's fixed facts, as the run loop planned them before anything started.

    Attributes:
        sc: the resolved scenario (experiments.scenario.load_scenario).
        fabric: the pure fabric (topologies.*) and ``fabric_map`` its JSON map.
        plan: the traffic plan (traffic.patterns.flow_plan): one dict per flow.
        rounds: the resolved rounds (the scenario's ``rounds``), at least one.
        profiles: per round, switch port name -> :class:`common.ecn.EcnProfile`.
        env: the run's environment record (environment.json); features add their sections.
        out: the run's results folder; ``multi`` whether it has a folder per round.
        quiet: no progress lines on stdout.
        accept_unfaithful: a round whose fidelity checks fail does not fail the run (its outputs
            say ``accepted_unfaithful``).
        sections: the result sections (experiments.sections.SECTIONS) whose lines, columns and
            plots the round summaries, the rounds table and the plots show.
    """
    sc: Scenario
    fabric: object
    fabric_map: dict
    plan: list
    rounds: list
    profiles: list
    env: dict
    out: Path
    multi: bool
    quiet: bool = False
    accept_unfaithful: bool = False
    sections: tuple = ()

    def say(self, *a) -> None:
        """A progress line on stdout (``fabriclab: ...``) unless quiet."""
        if not self.quiet:
            print("fabriclab:", *a, flush=True)


@dataclass
class RoundRecord:
    """What one round produced, handed to the workload's and the features' summaries.

    Attributes:
        index: the round's index (0-based); ``round`` its resolved round; ``dir`` its folder.
        options: what the features asked of the workload this round (e.g. ``count_ecn``).
        raw: the workload's own record of the round (agent exit codes, a collective's results).
        features: per feature name, what its ``after_round`` returned.
        timings_s: the run's set-up phases and this round's ``traffic_s`` (seconds).
        rows: per flow records once the workload collected them (None: the workload has none).
        stopped: why the round's traffic was stopped before its end (a signal's name, such as
            ``SIGTERM``, or a watcher's reason; experiments.live.ROUND_STOP), None when it ran to its end.
        port_intent: what the features install on the ports this round, as their
            :meth:`experiments.features.base.Feature.port_intent` returned it (non-empty ones, in
            the features' order), for the check that puts the round's data plane back as planned.
    """
    index: int
    round: dict
    dir: Path
    options: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict)
    features: dict = field(default_factory=dict)
    timings_s: dict = field(default_factory=dict)
    rows: list | None = None
    stopped: str | None = None
    port_intent: list = field(default_factory=list)
