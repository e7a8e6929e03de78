"""``flap``: a link goes down and comes back up on a schedule (a loose connector, a flapping
optic): down for ``down_s``, up for ``up_s``, ``flaps`` times or until the fault stops. Both
directions go: the link's side ``a`` is set down, and its peer loses its carrier. Routing does not
react (a flap shorter than the control plane's detection): frames sent into the dead link are lost."""
from __future__ import annotations

from common.params import F
from controller.faults.base import Evidence, FaultSpec, Injector, LinkFlap, link_directions


class Flap(Injector):
    """A link that goes down and up on a schedule."""
    NAME = "flap"
    TITLE = "flapping link"
    TARGET = "link"
    LAYER = "physical"
    PARAMS = {"down_s": F((int, float), 1.0, lo=0.05, hi=3600),
              "up_s": F((int, float), 1.0, lo=0.05, hi=3600),
              "flaps": F((int,), None, lo=1, hi=100000)}
    MECHANISM = "the link's side-a interface set down and up (its veth peer loses its carrier)"
    DIAGNOSIS_ORDER = 20

    @classmethod
    def recognise(cls, ev: Evidence) -> tuple[str, tuple[str, ...]] | None:
        """A port at either end changed carrier, or is down."""
        flaps = [r for r in ev.ends if r.get("carrier_changes") or r.get("state") != "up"]
        if ev.element not in ("link", "cable") or not flaps:
            return None
        r = flaps[0]
        return f"{ev.a}<->{ev.b}", (f"{r['switch']}'s port toward {r['peer']} changed carrier "
                                    f"{r.get('carrier_changes') or 0} times (a flap is two)"
                                    + ("" if r.get("state") == "up" else ", and is down now"),)

    @classmethod
    def actions(cls, fabric_map: dict, spec: FaultSpec) -> tuple[LinkFlap, ...]:
        """One :class:`LinkFlap` on the first named direction's transmitter (the link as a whole)."""
        d = link_directions(fabric_map, spec.place)[0]
        p = spec.params
        return (LinkFlap(d.tx_node, d.tx_intf, d.rx_intf, float(p["down_s"]), float(p["up_s"]), p["flaps"]),)

    @classmethod
    def describe(cls, spec: FaultSpec) -> str:
        """``flap a-b: 1 s down, 1 s up``."""
        p = spec.params
        times = f", {p['flaps']} times" if p["flaps"] else ""
        return f"flap {spec.place}: {p['down_s']:g} s down, {p['up_s']:g} s up{times}"
