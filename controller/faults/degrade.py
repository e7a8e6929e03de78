"""``degrade``: an ageing optic or a link that trained down carries a fraction of its nominal
rate, in one direction or both. Nothing is dropped or counted; the link is just slower."""
from __future__ import annotations

from common.params import F
from controller.faults.base import Evidence, FaultSpec, Injector, RateLimit, below_rate, link_directions


class Degrade(Injector):
    """A link (direction) running at a fraction of its nominal rate."""
    NAME = "degrade"
    TITLE = "degraded link"
    TARGET = "link"
    LAYER = "physical"
    PARAMS = {"rate_fraction": F((int, float), 0.5, lo=0.01, hi=0.99)}
    MECHANISM = "the sending port's link-rate HTB class set to the fraction of its rate; put back as read before"
    SYMPTOMS = ("loss", "slow")       # its queue drops what the lower rate cannot carry; a host link: a slow sender
    DIAGNOSIS_ORDER = 30

    @classmethod
    def recognise(cls, ev: Evidence) -> tuple[str, tuple[str, ...]] | None:
        """A port at either end runs below its nominal rate (for a slow host: its switch port)."""
        if ev.element == "host":
            r = ev.rx
            if not below_rate(r):
                return None
            return f"{ev.a}->{r['switch']}", (f"{r['switch']}'s port toward {ev.a} runs at {r['rate_mbps']:g} of "
                                              f"{r['nominal_mbps']:g} Mbit/s: the link trained down",)
        slowed = [r for r in ev.ends if below_rate(r)] if ev.element in ("link", "cable") else []
        if not slowed:
            return None
        r, tx = slowed[0], ev.tx
        return f"{ev.a}->{ev.b}", ((f"{r['switch']}'s port toward {r['peer']} runs at {r['rate_mbps']:g} of "
                                    f"{r['nominal_mbps']:g} Mbit/s",)
                                   + ((f"{tx['switch']}'s queue toward {ev.b} dropped {tx['tx_dropped']} frames",)
                                      if tx is not None and tx["tx_dropped"] else ()))

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
