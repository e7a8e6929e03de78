"""Every datapath fabriclab can forward with, by name, and the choice for this machine.

A new datapath is one package under :mod:`controller.datapaths` plus one entry in
:data:`DATAPATHS`. Choosing reads the kernel (see each implementation's ``available``), never a
scenario.
"""
from __future__ import annotations

from common.errors import SetupError
from controller.datapaths.base import Datapath
from controller.datapaths.ovs.datapath import OvsDatapath

#: name -> implementation (a :class:`~controller.datapaths.base.Datapath` class taking its
#: ``mode``). :func:`choose` tries them in this order.
DATAPATHS: dict[str, type] = {
    OvsDatapath.name: OvsDatapath,
}


def choose() -> Datapath:
    """The first registered datapath that can run here, in its best mode (Open vSwitch: the kernel
    datapath where the openvswitch module loads, else its userspace datapath).

    Raises:
        SetupError: none can run here.
    """
    for cls in DATAPATHS.values():
        mode = cls.available()
        if mode is not None:
            return cls(mode)
    raise SetupError(f"no datapath can run on this machine (tried {', '.join(DATAPATHS)})")


def from_environment(env: dict) -> Datapath:
    """The datapath a run recorded in environment.json (``datapath_impl``, default ``ovs``, and
    ``datapath``, its mode).

    Raises:
        SetupError: an implementation or mode this build does not have.
    """
    impl = env.get("datapath_impl", OvsDatapath.name)
    if impl not in DATAPATHS:
        raise SetupError(f"datapath_impl {impl!r} is not one of {', '.join(DATAPATHS)}")
    return DATAPATHS[impl](env["datapath"])


def present_everywhere() -> set[str]:
    """Names of every registered datapath's switches on the machine now."""
    out: set[str] = set()
    for cls in DATAPATHS.values():
        out |= cls.present()
    return out


def remove_everywhere(names: list[str]) -> list[str]:
    """Remove the named switches wherever a registered datapath has them; returns those removed.

    Raises:
        SetupError: a datapath's tool refused (its own message).
    """
    removed: list[str] = []
    for cls in DATAPATHS.values():
        present = cls.present()          # one listing per datapath, not one per name
        mine = [n for n in names if n in present]
        if mine:
            cls.remove(mine)
            removed += mine
    return removed
