"""Fat-Tree fabric description (pure: no root, no Mininet needed).

The three-tier Clos of Al-Fares, Loukissas and Vahdat, "A Scalable,
Commodity Data Center Network Architecture" (SIGCOMM 2008), built from
k-port switches, k even:

- k pods; each pod has k/2 edge and k/2 aggregation switches;
- (k/2)^2 core switches; core switch j (0-based) links to aggregation
  switch j // (k/2) of every pod;
- k/2 hosts per edge switch: k^3/4 hosts, 5k^2/4 switches, 3k^3/4 links
  (k^3/4 each of host links, edge-aggregation links, aggregation-core links).

Full bisection (1:1) when every layer runs at the same rate. Names, dpids,
MACs and IPs derive from position; hosts are numbered h1..hN pod by pod,
edge by edge (as in the Spine-Leaf builder), with IP 10.<pod>.<edge>.<2+i>
as in the paper's addressing.
"""
from __future__ import annotations

from dataclasses import dataclass

from common.errors import ScenarioError
from common.params import F
from topologies.base import NUM, Fabric, LinkSpec, Node, Topology, dpid_for


@dataclass(frozen=True)
class FatTree(Topology):
    """A k-ary Fat-Tree.

    Args:
        k: switch port count, even, 4..16.
        host_rate_mbps: host-edge link rate in Mbit/s (> 0).
        edge_agg_rate_mbps: edge-aggregation link rate in Mbit/s (> 0).
        agg_core_rate_mbps: aggregation-core link rate in Mbit/s (> 0).

    Raises:
        ScenarioError: a parameter out of range (names the parameter).
    """

    KIND = "fattree"
    TITLE = "Fat-Tree"
    LAYERS = ("core", "aggregation", "edge", "host")
    #: The scenario's ``topology`` keys for this kind (types, ranges, defaults; k even is checked on build).
    PARAMS = {
        "k": F((int,), 4, lo=4, hi=16),
        "host_rate_mbps": F(NUM, 10, lo=0.1, hi=1000),
        "edge_agg_rate_mbps": F(NUM, 10, lo=0.1, hi=1000),
        "agg_core_rate_mbps": F(NUM, 10, lo=0.1, hi=1000),
    }
    #: ``mn --topo fattree,K[,RATE_MBPS]`` (one rate for every layer)
    MN_ARGS = ("k", "rate_mbps")

    k: int = 4
    host_rate_mbps: float = 10.0
    edge_agg_rate_mbps: float = 10.0
    agg_core_rate_mbps: float = 10.0

    def check(self) -> None:
        """k must be even (ScenarioError naming ``topology.k``)."""
        if self.k % 2:
            raise ScenarioError("topology.k", f"must be an even integer in [4, 16], got {self.k!r}")

    @classmethod
    def from_mn_args(cls, nums: list) -> "FatTree":
        """The fabric of ``mn --topo fattree,K[,RATE_MBPS]``: one rate (default 10) on every layer."""
        k, *rate = nums
        r = rate[0] if rate else 10
        return cls(k=k, host_rate_mbps=r, edge_agg_rate_mbps=r, agg_core_rate_mbps=r)

    @property
    def n_groups(self) -> int:
        """Host groups whose traffic between them crosses the core layer: the k pods."""
        return self.k

    @property
    def half(self) -> int:
        """k/2: hosts per edge, edges and aggregations per pod, cores per aggregation."""
        return self.k // 2

    @property
    def n_hosts(self) -> int:
        """k^3/4."""
        return self.k ** 3 // 4

    @property
    def n_links(self) -> int:
        """3k^3/4."""
        return 3 * self.k ** 3 // 4

    @staticmethod
    def core_name(j: int) -> str:
        """Core switch j (0-based) is ``c<j+1>``."""
        return f"c{j + 1}"

    @staticmethod
    def agg_name(pod: int, i: int) -> str:
        """Aggregation switch i (0-based) of pod (0-based) is ``p<pod>a<i+1>``."""
        return f"p{pod}a{i + 1}"

    @staticmethod
    def edge_name(pod: int, i: int) -> str:
        """Edge switch i (0-based) of pod (0-based) is ``p<pod>e<i+1>``."""
        return f"p{pod}e{i + 1}"

    def host_name(self, pod: int, edge: int, i: int) -> str:
        """Host i (0-based) under edge ``edge`` of ``pod``: global numbering h1..hN."""
        return f"h{(pod * self.half + edge) * self.half + i + 1}"

    def build(self) -> Fabric:
        """Build the node and link list.

        Ports: edge 1..k/2 face hosts, k/2+1..k face the pod's aggregation
        switches; aggregation 1..k/2 face the pod's edges, k/2+1..k face
        its cores; core port p+1 faces pod p. Raises ScenarioError if an
        interface name would exceed 15 characters (case C1).
        """
        h = self.half
        params = {"k": self.k, "host_rate_mbps": self.host_rate_mbps,
                  "edge_agg_rate_mbps": self.edge_agg_rate_mbps, "agg_core_rate_mbps": self.agg_core_rate_mbps,
                  "oversubscription": float(self.host_rate_mbps / self.edge_agg_rate_mbps)}
        fab = Fabric(kind=self.KIND, params=params, layers=self.LAYERS)
        for j in range(h * h):
            fab.nodes.append(Node(self.core_name(j), "core", dpid=dpid_for("core", j + 1)))
        for p in range(self.k):
            for i in range(h):
                fab.nodes.append(Node(self.agg_name(p, i), "aggregation", dpid=dpid_for("aggregation", p * h + i + 1)))
            for i in range(h):
                fab.nodes.append(Node(self.edge_name(p, i), "edge", dpid=dpid_for("edge", p * h + i + 1)))
        for p in range(self.k):
            for e in range(h):
                for i in range(h):
                    fab.nodes.append(Node(self.host_name(p, e, i), "host", mac=f"02:00:00:{p:02x}:{e:02x}:{i:02x}",
                                          ip=f"10.{p}.{e}.{i + 2}", leaf=self.edge_name(p, e),
                                          group=f"pod{p}"))
        for p in range(self.k):
            for e in range(h):
                for i in range(h):
                    fab.links.append(LinkSpec(self.edge_name(p, e), i + 1, self.host_name(p, e, i), 0,
                                              self.host_rate_mbps))
        for p in range(self.k):
            for e in range(h):
                for a in range(h):
                    fab.links.append(LinkSpec(self.edge_name(p, e), h + a + 1, self.agg_name(p, a), e + 1,
                                              self.edge_agg_rate_mbps))
        for p in range(self.k):
            for a in range(h):
                for c in range(h):
                    j = a * h + c
                    fab.links.append(LinkSpec(self.agg_name(p, a), h + c + 1, self.core_name(j), p + 1,
                                              self.agg_core_rate_mbps))
        fab.check_names()
        return fab
