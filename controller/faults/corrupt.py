"""``corrupt``: a dirty fibre or a failing optic damages a fraction of the frames on one link
direction; the receiving port drops them (their frame check sequence fails) and counts them as
receive errors, not as queue drops."""
from __future__ import annotations

from common.params import F
from controller.faults.base import Evidence, FaultSpec, FrameDrop, Injector, link_directions


class Corrupt(Injector):
    """Frames damaged in flight on a link direction (CRC errors at the receiving port)."""
    NAME = "corrupt"
    TITLE = "CRC errors"
    TARGET = "link"
    LAYER = "physical"
    PARAMS = {"frame_fraction": F((int, float), 0.01, lo=1e-6, hi=1.0)}
    MECHANISM = "XDP (generic) on the receiving interface drops the fraction at random; counted as that port's receive errors"
    DIAGNOSIS_ORDER = 10

    @classmethod
    def recognise(cls, ev: Evidence) -> tuple[str, tuple[str, ...]] | None:
        """The receiving port counted receive errors."""
        if ev.element in ("link", "cable") and ev.rx is not None and ev.rx["rx_errors"]:
            return f"{ev.a}->{ev.b}", (f"{ev.b}'s port toward {ev.a} counted {ev.rx['rx_errors']} receive errors: "
                                       "frames damaged on the wire (CRC)",)
        return None

    @classmethod
    def actions(cls, fabric_map: dict, spec: FaultSpec) -> tuple[FrameDrop, ...]:
        """A :class:`FrameDrop` counted as receive errors at each direction's receiving interface."""
        return tuple(FrameDrop(d.rx_node, d.rx_intf, float(spec.params["frame_fraction"]), "rx_errors")
                     for d in link_directions(fabric_map, spec.place))

    @classmethod
    def describe(cls, spec: FaultSpec) -> str:
        """``corrupt 1% of frames on a->b``."""
        return f"corrupt {spec.params['frame_fraction']:.3g} of frames on {spec.place}"
