"""Mininet-style topology specs (``KIND,NUMBER,...``, as ``mn --topo`` takes them) -> fabrics.

Pure: the registry's builders only. Used by ``mn --custom topologies/mn_custom.py`` and by the
controller's ``topo`` option (:mod:`controller.options`), so both build the same fabric.
"""
from __future__ import annotations

from topologies import TOPOLOGIES
from topologies.base import Fabric


def build(spec: str) -> Fabric:
    """The fabric named by ``spec``, a ``kind,arg,...`` string such as ``fattree,4`` or
    ``spineleaf,2,4,6,10,10`` (a registered topology's ``MN_ARGS``, given to its
    ``from_mn_args``; numbers with a ``.`` are floats, others ints; the last ones may be left out).

    Raises:
        ValueError: the kind is unknown (the message lists the known ones), or the numbers are
            not numbers or too many (the message shows the usage).
        common.errors.ScenarioError: a number is out of the builder's range (it names the key).
    """
    name, *args = spec.split(",")
    if name not in TOPOLOGIES:
        raise ValueError(f"unknown topology {name!r} ({' or '.join(TOPOLOGIES)})")
    cls = TOPOLOGIES[name]
    usage = f"--topo {name},{','.join(a.upper() for a in cls.MN_ARGS)} (the last ones may be left out)"
    try:
        nums = [float(a) if "." in a else int(a) for a in args]
        if len(nums) > len(cls.MN_ARGS):
            raise ValueError(f"{len(nums)} numbers")
        return cls.from_mn_args(nums).build()
    except (TypeError, ValueError) as e:
        raise ValueError(f"{spec!r}: {e}; usage: {usage}") from None
