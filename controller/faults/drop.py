"""``drop``: a switch whose firmware loses a fraction of the frames it forwards, on every port or
some. No counter the victim can read moves: the frames are received and then vanish."""
from __future__ import annotations

from common.params import F
from controller.faults.base import FaultSpec, FrameDrop, Injector, switch_ports


class Drop(Injector):
    """A switch dropping a fraction of what it forwards, silently."""
    NAME = "drop"
    TITLE = "silent switch drops"
    TARGET = "switch"
    LAYER = "switch"
    PARAMS = {"frame_fraction": F((int, float), 0.01, lo=1e-6, hi=1.0)}

    @classmethod
    def actions(cls, fabric_map: dict, spec: FaultSpec) -> tuple[FrameDrop, ...]:
        """A :class:`FrameDrop` counted nowhere on each of the switch's (chosen) ports, as frames
        arrive."""
        f = float(spec.params["frame_fraction"])
        return tuple(FrameDrop(spec.place, p["intf"], f, "none")
                     for p in switch_ports(fabric_map, spec.place, spec.ports))

    @classmethod
    def describe(cls, spec: FaultSpec) -> str:
        """``s1 drops 1% of frames (ports 1, 2)``."""
        ports = f" (ports {', '.join(map(str, spec.ports))})" if spec.ports else ""
        return f"{spec.place} drops {spec.params['frame_fraction']:.3g} of frames{ports}"
