"""Which Open vSwitch datapath this kernel offers: the one detection every layer shares.

The run's environment probe (:mod:`experiments.probe`) records it and the live fabric builds its
switches on it; ``mn --switch fabriclab`` (:mod:`topologies.mn_custom`) picks the same one. Not a
pure model: it reads ``/sys/module`` and may run ``modprobe``.
"""
from __future__ import annotations

import functools
import subprocess
from pathlib import Path


def kernel_module_loaded(name: str) -> bool:
    """True if module ``name`` is loaded or built in (``/sys/module/<name>`` exists)."""
    return Path("/sys/module", name).exists()


def ovs_kernel_datapath_available() -> bool:
    """True if the openvswitch kernel module is loaded or can be loaded (``modprobe -q
    openvswitch``, which needs root; a missing ``modprobe`` or one that hangs for 15 s counts
    as not loadable). Never raises."""
    if kernel_module_loaded("openvswitch"):
        return True
    try:
        rc = subprocess.run(["modprobe", "-q", "openvswitch"], capture_output=True, timeout=15).returncode
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return False
    return rc == 0 and kernel_module_loaded("openvswitch")


@functools.lru_cache(maxsize=1)
def chosen_datapath() -> str:
    """``"kernel"`` if the openvswitch module is usable (:func:`ovs_kernel_datapath_available`),
    else ``"user"`` (Open vSwitch's userspace datapath, ``datapath_type=netdev``). Probed once
    per process."""
    return "kernel" if ovs_kernel_datapath_available() else "user"
