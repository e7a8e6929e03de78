"""Turn a :class:`topologies.base.Fabric` into a Mininet ``Topo``.

Only this module imports Mininet, so the builders stay importable without it.
"""
from __future__ import annotations

from mininet.topo import Topo

from topologies.base import Fabric


class FabricTopo(Topo):
    """Mininet topology with exactly the nodes, ports, MACs and IPs of ``fabric``.

    Links carry no Mininet tc parameters: fabriclab installs its own queues
    through netlink after the switches start (controller.dataplane).
    """

    def build(self, fabric: Fabric):  # noqa: D401 - Mininet's hook name
        """Add every node and link of ``fabric`` (called by Topo.__init__)."""
        for sw in fabric.switches:
            self.addSwitch(sw.name, dpid=f"{sw.dpid:016x}")
        for h in fabric.hosts:
            self.addHost(h.name, ip=f"{h.ip}/8", mac=h.mac)
        for link in fabric.links:
            self.addLink(link.a, link.b, port1=link.a_port, port2=link.b_port)
