"""The workload registry: what moves data in a round. The run loop picks, for each round, the
first registered workload that wants it (:func:`workload_for`); adding a workload is one module
under this package, plus its import and an entry in the tuple here."""
from __future__ import annotations

from experiments.workloads.base import Workload
from experiments.workloads.blocks.workload import IncastBlocks
from experiments.workloads.collective.workload import Collective
from experiments.workloads.flows import KernelFlows
from experiments.workloads.parallel.workload import MixedParallel
from experiments.workloads.roce.workload import RoceFlows
from experiments.workloads.training.workload import Training
from experiments.model import Round, Scenario

#: Registered workloads by name, in the order they are asked whether they want a round
#: (IncastBlocks before KernelFlows: both run incasts over kernel TCP; blocks mode is its own;
#: MixedParallel and Training before the flow workloads, which take any round without a collective).
WORKLOADS: dict[str, type[Workload]] = {w.name: w for w in (Collective, MixedParallel, Training, RoceFlows, IncastBlocks,
                                                            KernelFlows)}


def workload_for(sc: Scenario, rnd: Round, registry: dict[str, type[Workload]] | None = None) -> type[Workload]:
    """The workload of ``registry`` (default :data:`WORKLOADS`) that runs round ``rnd`` of the
    resolved scenario ``sc``: the first that wants it.

    Raises:
        LookupError: no registered workload wants the round (a registry defect, not user input).
    """
    for w in (WORKLOADS if registry is None else registry).values():
        if w.wants(sc, rnd):
            return w
    raise LookupError(f"no registered workload runs round {rnd.name!r}")


__all__ = ["WORKLOADS", "Workload", "workload_for"]
