"""``degrade``: an ageing optic or a link that trained down carries a fraction of its nominal
rate, in one direction or both. Nothing is dropped or counted; the link is just slower."""
from __future__ import annotations

from common.params import F
from controller.faults.base import FaultSpec, Injector, RateLimit, link_directions


class Degrade(Injector):
    """A link (direction) running at a fraction of its nominal rate."""
    NAME = "degrade"
    TITLE = "degraded link"
    TARGET = "link"
    LAYER = "physical"
    PARAMS = {"rate_fraction": F((int, float), 0.5, lo=0.01, hi=0.99)}

    @classmethod
    def actions(cls, fabric_map: dict, spec: FaultSpec) -> tuple[RateLimit, ...]:
        """A :class:`RateLimit` on each direction's transmitting interface; the link's speed, as
        both its ports report it, is the lower rate."""
        f = float(spec.params["rate_fraction"])
        return tuple(RateLimit(d.tx_node, d.tx_intf, d.rate_mbps * f, d.rate_mbps, link_peer=d.rx_intf)
                     for d in link_directions(fabric_map, spec.place))

    @classmethod
    def describe(cls, spec: FaultSpec) -> str:
        """``degrade a->b to 0.5 of its rate``."""
        return f"degrade {spec.place} to {spec.params['rate_fraction']:.3g} of its rate"
