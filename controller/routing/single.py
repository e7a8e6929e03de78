"""``single``: one fixed next hop per (switch, destination), whatever the flow (pure).

Of a destination's equal-cost next hops a switch keeps the one at index (the host's index in the
fabric map) modulo their number: deterministic, spread over destinations, and no hashing, so every
flow to one host takes one path (labs that show collisions use it).
"""
from __future__ import annotations

from controller.routing.base import RoutingStrategy


class Single(RoutingStrategy):
    """One path per destination (see the module docstring)."""

    NAME = "single"
    TITLE = "one fixed path per destination (for labs that show collisions)"
    METHOD: dict = {}
    HASHED = False

    def next_hops(self) -> dict[str, dict[str, list[int]]]:
        """``{switch: {host_ip: [port]}}``: of the equal-cost next hops, the one at index (host
        index in the map) modulo their number."""
        routes = super().next_hops()
        for i, host in enumerate(self.fabric_map["hosts"]):
            for sw in routes:
                ports = routes[sw][host["ip"]]
                routes[sw][host["ip"]] = [ports[i % len(ports)]]
        return routes
