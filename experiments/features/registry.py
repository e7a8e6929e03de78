"""The feature registry: what the fabric does around a round's traffic. The run loop plans,
applies and summarises every registered feature in this order (PFC before ECN: the ECN marker
is chosen knowing whether ports have per-priority queues; the data plane is put back to the
plan after ECN has set the round's profiles, before the faults act and the watcher reads its
baseline; the userspace datapath's transmit count corrects the drops after PFC has added its cap drops, and the UDP accounting reads them
after both; the port counters are read before the faults are taken back, and the faults
summarise before the accounting and the fidelity checks read what they did; the API's changes are
read after the faults are taken back, which is one of them; the forwarding verdict reads the CPU
headroom's per-second readings, so it comes after them); adding a feature (a
fault injector is one of controller.faults instead) is one module under this package, plus its
import and an entry in the tuple here."""
from __future__ import annotations

from experiments.features.accounting import Accounting
from experiments.features.base import Feature
from experiments.features.changes import ApiChanges
from experiments.features.cpu import CpuHeadroom
from experiments.features.delay import LinkDelay
from experiments.features.ecn.feature import Ecn
from experiments.features.faults import Faults
from experiments.features.fidelity import Fidelity
from experiments.features.forwarding import Forwarding
from experiments.features.hosts import HostTcp
from experiments.features.ovstx import OvsTransmit
from experiments.features.pfc.feature import Pfc
from experiments.features.ports import Ports
from experiments.features.restore import IntendedDataPlane
from experiments.features.scaled import ScaledFabric
from experiments.features.watch import ControlPlane

#: Registered features by name, in the order the run loop calls them.
FEATURES: dict[str, type[Feature]] = {f.name: f for f in (HostTcp, Pfc, LinkDelay, Ecn, IntendedDataPlane, Ports,
                                                          Faults, ApiChanges, OvsTransmit,
                                                          Accounting, Fidelity, ControlPlane, CpuHeadroom,
                                                          Forwarding, ScaledFabric)}

__all__ = ["FEATURES", "Feature"]
