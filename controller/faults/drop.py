"""``drop``: a switch whose firmware loses a fraction of the frames it forwards, on every port or
some. No counter the victim can read moves: the frames are received and then vanish."""
from __future__ import annotations

from common.params import F
from controller.faults.base import Evidence, FaultSpec, FrameDrop, Injector, switch_ports


class Drop(Injector):
    """A switch dropping a fraction of what it forwards, silently."""
    NAME = "drop"
    TITLE = "silent switch drops"
    TARGET = "switch"
    LAYER = "switch"
    PARAMS = {"frame_fraction": F((int, float), 0.01, lo=1e-6, hi=1.0)}
    MECHANISM = "XDP (generic) on the switch's receiving interfaces drops the fraction at random; counted in no port counter"
    DIAGNOSIS_ORDER = 40              # what is left when no port counter explains the loss

    @classmethod
    def recognise(cls, ev: Evidence) -> tuple[str, tuple[str, ...]] | None:
        """A lossy switch, or a lossy link direction into a switch whose ports counted nothing (the
        kinds before it in :attr:`DIAGNOSIS_ORDER` found nothing)."""
        if ev.element == "switch":
            return ev.a, (f"no port of {ev.a} counted receive errors or queue drops: frames vanish inside the switch",)
        if ev.element == "link" and ev.b_is_switch:
            return ev.b, (f"no receive errors at {ev.b}'s port toward {ev.a}, no queue drops, the link at its "
                          f"rate and up: frames vanish inside {ev.b}",)
        return None

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
