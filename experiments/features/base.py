"""The feature protocol: what the fabric does to packets around a workload (ECN marking, PFC,
the hosts' kernel TCP settings; later faults). A feature plans itself from the scenario and the
fabric before anything starts, acts before and after each round, and adds its section to each
round's summary. The run loop (experiments.runner) calls only these methods; a new feature is
one module with a subclass, plus its import and an entry in :data:`experiments.features.FEATURES`.
"""
from __future__ import annotations

import contextlib

from experiments.context import RoundRecord, RunContext


class Feature:
    """Base class of a feature: one instance per run. Every hook has a do-nothing default."""
    #: The feature's registry name (its section in environment.json and summary.json).
    name = "feature"

    def __init__(self, ctx: RunContext):
        self.ctx = ctx

    def plan(self, queues_per_port: int) -> int:
        """Check the scenario against this machine and plan what to apply, recording the plan in
        ``ctx.env``; ``queues_per_port`` is how many queues each switch port has so far (1: one
        FIFO). Returns how many queues per port this feature adds. Raises CapabilityError or
        ScenarioError naming the key, before anything starts."""
        return 0

    def restore(self) -> None:
        """Take the plan back from ``ctx.env`` (the run's environment.json) instead of planning:
        `python -m experiments analyze` summarises finished rounds without probing the machine.
        Default: nothing to restore."""

    def fabric_args(self) -> dict:
        """Keyword arguments for :class:`experiments.fabric.LiveFabric` (the plans its controller
        applies). Default: none."""
        return {}

    def headline(self) -> str | None:
        """A few words for the run's first progress line (e.g. ``ECN marker=bpf``), or None."""
        return None

    def enter(self, stack: contextlib.ExitStack, state) -> None:
        """Enter run-long contexts (restored at the end) before the fabric starts; ``state`` is the
        run's :class:`experiments.state.RunState`. Default: none."""

    def after_fabric(self, lf) -> None:
        """The fabric is up: record what its controller applied. Default: nothing."""

    def describe_round(self, rnd: RoundRecord) -> str | None:
        """A few words for a round's progress line, or None."""
        return None

    def round_options(self, rnd: RoundRecord) -> dict:
        """What the workload should know this round (e.g. ``count_ecn``). Default: nothing."""
        return {}

    def port_intent(self, rnd: RoundRecord) -> dict | None:
        """What this feature puts on the ports' queues in round ``rnd``, over the HTB and FIFO the
        fabric gives every interface: ``{intf or "*" (every interface): {field: value}}`` with the
        fields of :class:`controller.porttree.PortIntent` (``red``: the round's
        :class:`common.ecn.EcnProfile` where kernel RED replaces the FIFO; ``clsact``: a BPF hook
        belongs there; ``unchecked``: why another mechanism owns the tree). The run loop collects
        every feature's before the round (``rnd.port_intent``); the data-plane check puts each
        port back to it. Default: nothing."""
        return None

    def before_round(self, lf, rnd: RoundRecord) -> dict:
        """Act before the round's traffic; return additions to the round's environment.json
        (merged one level deep). Default: nothing."""
        return {}

    def after_round(self, lf, rnd: RoundRecord) -> dict | None:
        """Act after the round's traffic; return this feature's record of the round (JSON-able,
        kept in ``rnd.features[name]``) or None."""
        return None

    def after_rounds(self, lf) -> dict:
        """The last round is over and analysed, the fabric still up: additions to the run's
        environment.json (merged one level deep). Default: nothing."""
        return {}

    def summarize(self, rnd: RoundRecord, summary: dict) -> None:
        """Add this feature's section to the round's ``summary`` (and write its own files into
        ``rnd.dir``). A feature that stopped a port's transmitter on purpose during the round (a
        PFC pause) adds the interface to ``summary["paused_transmitters"]`` (sorted names), so the
        fidelity checks that run after it do not count the pause against the emulation.
        Default: nothing."""

    def warnings(self, summary: dict) -> list[str]:
        """Warnings to print once the round is summarised. Default: none."""
        return []

    def failures(self, summary: dict) -> list[str]:
        """Fidelity checks of the round that failed, one line each naming what failed and where
        (a port, a process): the run loop records them in ``summary["fidelity"]`` and the run ends
        with exit code 3 unless the user accepts an unfaithful run. Default: none."""
        return []

    def report(self, summary: dict) -> str | None:
        """A line for the round's block on the terminal (after the workload's), or None."""
        return None
