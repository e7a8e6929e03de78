"""``ecmp``: every flow hashed onto one of its equal-cost next hops at every switch (pure).

Per-destination shortest paths (:mod:`controller.routing.graph`); where a destination has several
equal-cost next hops, the switch hashes the flow's symmetric 5-tuple (IP addresses, protocol,
TCP/UDP ports) with a basis that differs per switch (:func:`controller.routing.graph.hash_basis`;
case C5) and picks a port by hash-threshold (RFC 2992, Open vSwitch's ``multipath``; why not
OpenFlow 1.3 select groups: :mod:`controller.app`). Every packet of a flow takes one path.
"""
from __future__ import annotations

from controller.routing.base import RoutingStrategy


class Ecmp(RoutingStrategy):
    """Equal-cost multi-path per flow: the base strategy as it is (see the module docstring)."""

    NAME = "ecmp"
    TITLE = "each flow's 5-tuple hashed over all equal-cost next hops"
    METHOD = {"mechanism": "ovs_multipath", "fields": "symmetric_l3l4+udp (IP src/dst, protocol, TCP/UDP ports)",
              "algorithm": "hash_threshold (RFC 2992)", "hash_basis": "per switch (controller.routing.hash_basis)"}
    HASHED = True
