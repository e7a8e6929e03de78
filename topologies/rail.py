"""Rail-optimised fabric description (pure: no root, no Mininet needed).

The wiring of current AI clusters (NVIDIA's DGX SuperPOD reference architecture; Wang et al.,
"Rail-only: a low-cost high-performance network for training LLMs with trillion
parameters", 2023): every server has G GPUs, each with its own NIC; NIC j of every server
plugs into rail j's leaf switch, so GPUs with the same local index ("a rail") are one switch
apart; the rails' leaves are joined by spines for traffic between rails. Inside a server the
GPUs talk over NVLink through an NVSwitch, not through the fabric (the collectives model that
channel: :mod:`traffic.nvlink`).

- S servers ``srv1..srvS``, each G hosts (one per GPU's NIC), numbered server by server:
  GPU j (0-based) of server i (0-based) is host ``h<i G + j + 1>`` on leaf ``rail<j+1>``,
  port i + 1, with IP 10.<j+1>.0.<i+2>.
- G rail leaves and P spines; every leaf has one link to every spine (leaf ports S+1..S+P),
  spine port j + 1 facing rail j + 1.
- Oversubscription of a rail leaf: S x NIC rate / (P x uplink rate); the defaults (4 servers,
  2 spines, every link 10 Mbit/s) make it 2:1, ``uplink_rate_mbps: 20`` makes it 1:1.

Hosts carry :attr:`topologies.base.Node.server` (the server's name), which the
collectives read to tell NVLink transfers from fabric ones.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from common.params import F
from topologies.base import NUM, Fabric, LinkSpec, Node, Topology, dpid_for


@dataclass(frozen=True)
class RailOptimized(Topology):
    """A rail-optimised pod of GPU servers.

    Args:
        servers: S, 1..64.
        gpus_per_server: G (and rails), 1..16.
        spines: P, 1..64.
        host_rate_mbps: each GPU's NIC rate (host-leaf link) in Mbit/s.
        uplink_rate_mbps: each leaf-spine link's rate in Mbit/s.

    Raises:
        ScenarioError: a parameter out of range (names the parameter).
    """

    KIND = "rail"
    TITLE = "Rail-optimised"
    LAYERS = ("spine", "leaf", "host")
    #: The scenario's ``topology`` keys for this kind.
    PARAMS = {
        "servers": F((int,), 4, lo=1, hi=64),
        "gpus_per_server": F((int,), 4, lo=1, hi=16),
        "spines": F((int,), 2, lo=1, hi=64),
        "host_rate_mbps": F(NUM, 10, lo=0.1, hi=1000),
        "uplink_rate_mbps": F(NUM, 10, lo=0.1, hi=1000),
    }
    #: ``mn --topo rail,SERVERS,GPUS_PER_SERVER[,SPINES,NIC_RATE_MBPS,UPLINK_RATE_MBPS]``
    MN_ARGS = ("servers", "gpus_per_server", "spines", "host_rate_mbps", "uplink_rate_mbps")

    servers: int = 4
    gpus_per_server: int = 4
    spines: int = 2
    host_rate_mbps: float = 10.0
    uplink_rate_mbps: float = 10.0

    @property
    def n_hosts(self) -> int:
        """S x G (one host per GPU's NIC)."""
        return self.servers * self.gpus_per_server

    @property
    def n_groups(self) -> int:
        """Host groups whose traffic between them crosses the spines: the G rails."""
        return self.gpus_per_server

    @property
    def n_links(self) -> int:
        """S G NIC links plus G P leaf-spine links."""
        return self.gpus_per_server * (self.servers + self.spines)

    @property
    def oversubscription(self) -> Fraction:
        """A rail leaf's S x NIC rate / (P x uplink rate)."""
        return (Fraction(self.servers) * Fraction(str(self.host_rate_mbps))
                / (Fraction(self.spines) * Fraction(str(self.uplink_rate_mbps))))

    @staticmethod
    def rail_name(j: int) -> str:
        """Rail j's leaf (0-based j): ``rail<j+1>``."""
        return f"rail{j + 1}"

    @staticmethod
    def spine_name(p: int) -> str:
        """Spine p (0-based): ``spine<p+1>``."""
        return f"spine{p + 1}"

    @staticmethod
    def server_name(i: int) -> str:
        """Server i (0-based): ``srv<i+1>``."""
        return f"srv{i + 1}"

    def host_name(self, server: int, gpu: int) -> str:
        """GPU ``gpu``'s NIC of server ``server`` (both 0-based): ``h<server G + gpu + 1>``."""
        return f"h{server * self.gpus_per_server + gpu + 1}"

    def build(self) -> Fabric:
        """The node and link list (module docstring). Raises ScenarioError if an interface name
        would exceed 15 characters (case C1)."""
        s, g = self.servers, self.gpus_per_server
        params = {"servers": s, "gpus_per_server": g, "spines": self.spines, "host_rate_mbps": self.host_rate_mbps,
                  "uplink_rate_mbps": self.uplink_rate_mbps, "oversubscription": float(self.oversubscription)}
        fab = Fabric(kind=self.KIND, params=params, layers=self.LAYERS)
        for p in range(self.spines):
            fab.nodes.append(Node(self.spine_name(p), "spine", dpid=dpid_for("spine", p + 1)))
        for j in range(g):
            fab.nodes.append(Node(self.rail_name(j), "leaf", dpid=dpid_for("leaf", j + 1)))
        for i in range(s):
            for j in range(g):
                fab.nodes.append(Node(self.host_name(i, j), "host", mac=f"02:00:00:01:{j + 1:02x}:{i + 1:02x}",
                                      ip=f"10.{j + 1}.0.{i + 2}", leaf=self.rail_name(j), group=self.rail_name(j),
                                      server=self.server_name(i)))
        for i in range(s):
            for j in range(g):
                fab.links.append(LinkSpec(self.rail_name(j), i + 1, self.host_name(i, j), 0, self.host_rate_mbps))
        for j in range(g):
            for p in range(self.spines):
                fab.links.append(LinkSpec(self.rail_name(j), s + p + 1, self.spine_name(p), j + 1,
                                          self.uplink_rate_mbps))
        fab.check_names()
        return fab
