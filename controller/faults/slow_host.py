"""``slow_host``: a node whose NIC sends at a fraction of its rate (a NIC buffer fault, a link
that trained down on the host side): everything the host sends is slower; nothing the switches
count shows it except the host's own port receiving less."""
from __future__ import annotations

from common.params import F
from controller.faults.base import Evidence, FaultSpec, Injector, RateLimit, host_record


class SlowHost(Injector):
    """A host whose NIC transmits at a fraction of its rate."""
    NAME = "slow_host"
    TITLE = "slow host"
    TARGET = "host"
    LAYER = "host"
    PARAMS = {"rate_fraction": F((int, float), 0.5, lo=0.01, hi=0.99)}
    MECHANISM = "the host NIC's HTB class set to the fraction of its rate; put back as read before"
    SYMPTOMS = ("slow",)
    DIAGNOSIS_ORDER = 60

    @classmethod
    def recognise(cls, ev: Evidence) -> tuple[str, tuple[str, ...]] | None:
        """A host whose every probe was slow, no switch port showing anything (the kinds before it
        in :attr:`DIAGNOSIS_ORDER` found nothing)."""
        if ev.element != "host":
            return None
        return ev.a, ("no switch port shows errors, drops or a lower rate: only the host's own sending is slow",)

    @classmethod
    def actions(cls, fabric_map: dict, spec: FaultSpec) -> tuple[RateLimit, ...]:
        """A :class:`RateLimit` on the host's NIC."""
        h = host_record(fabric_map, spec.place)
        rate = float(h["rate_mbps"])
        return (RateLimit(h["name"], h["intf"], rate * float(spec.params["rate_fraction"]), rate),)

    @classmethod
    def describe(cls, spec: FaultSpec) -> str:
        """``h3's NIC at 0.5 of its rate``."""
        return f"{spec.place}'s NIC at {spec.params['rate_fraction']:.3g} of its rate"
