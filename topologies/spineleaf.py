"""Spine-Leaf fabric description (pure: no root, no Mininet needed).

A :class:`SpineLeaf` gives one :class:`topologies.base.Fabric` (names, datapath ids, MACs and
IPs derive from position).

Oversubscription of a leaf:
    (hosts_per_leaf x host_rate) / (uplinks x uplink_rate)
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from common.params import F
from topologies.base import NUM, Fabric, LinkSpec, Node, Topology, dpid_for, host_ip, host_mac

@dataclass(frozen=True)
class SpineLeaf(Topology):
    """Two-tier Clos: every leaf connects to every spine.

    Args:
        spines: number of spine switches, 1..64.
        leaves: number of leaf switches, 1..250.
        hosts_per_leaf: hosts on each leaf, 1..250.
        host_rate_mbps: host-leaf link rate in Mbit/s (> 0).
        uplink_rate_mbps: leaf-spine link rate in Mbit/s (> 0).
        uplinks_per_spine: parallel links between each leaf and spine, 1..8.

    Raises:
        ScenarioError: a parameter out of range (names the parameter).

    The default is the textbook 3:1 example: 2 spines, 4 leaves, 6 hosts per
    leaf, all links 10 Mbit/s.
    """

    KIND = "spineleaf"
    TITLE = "Spine-Leaf"
    LAYERS = ("spine", "leaf", "host")
    #: The scenario's ``topology`` keys for this kind (types, ranges, defaults).
    PARAMS = {
        "spines": F((int,), 2, lo=1, hi=64),
        "leaves": F((int,), 4, lo=1, hi=250),
        "hosts_per_leaf": F((int,), 6, lo=1, hi=250),
        "host_rate_mbps": F(NUM, 10, lo=0.1, hi=1000),
        "uplink_rate_mbps": F(NUM, 10, lo=0.1, hi=1000),
        "uplinks_per_spine": F((int,), 1, lo=1, hi=8),
    }
    #: ``mn --topo spineleaf,SPINES,LEAVES,HOSTS_PER_LEAF[,HOST_RATE_MBPS,UPLINK_RATE_MBPS]``
    MN_ARGS = ("spines", "leaves", "hosts_per_leaf", "host_rate_mbps", "uplink_rate_mbps")

    spines: int = 2
    leaves: int = 4
    hosts_per_leaf: int = 6
    host_rate_mbps: float = 10.0
    uplink_rate_mbps: float = 10.0
    uplinks_per_spine: int = 1

    @property
    def n_hosts(self) -> int:
        """leaves x hosts_per_leaf."""
        return self.leaves * self.hosts_per_leaf

    @property
    def n_groups(self) -> int:
        """Host groups whose traffic between them crosses the spine layer: the leaves."""
        return self.leaves

    @property
    def n_links(self) -> int:
        """Host links plus leaf-spine links (parallel ones counted)."""
        return self.leaves * (self.hosts_per_leaf + self.spines * self.uplinks_per_spine)

    @property
    def oversubscription(self) -> Fraction:
        """Leaf oversubscription ratio (downlink capacity / uplink capacity), e.g. 3 for 3:1."""
        down = Fraction(self.hosts_per_leaf) * Fraction(str(self.host_rate_mbps))
        up = Fraction(self.spines * self.uplinks_per_spine) * Fraction(str(self.uplink_rate_mbps))
        return down / up

    @staticmethod
    def spine_name(i: int) -> str:
        """Name of spine ``i`` (1-based)."""
        return f"spine{i}"

    @staticmethod
    def leaf_name(i: int) -> str:
        """Name of leaf ``i`` (1-based)."""
        return f"leaf{i}"

    def host_name(self, leaf: int, idx: int) -> str:
        """Name of host ``idx`` (1-based) on leaf ``leaf``: global numbering h1..hN."""
        return f"h{(leaf - 1) * self.hosts_per_leaf + idx}"

    def build(self) -> Fabric:
        """Build the node and link list.

        Leaf ports 1..hosts_per_leaf face hosts; the uplinks follow, spine by
        spine. Spine port numbers run leaf by leaf. Raises ScenarioError if a
        generated interface name would exceed 15 characters (case C1).
        """
        params = {"spines": self.spines, "leaves": self.leaves, "hosts_per_leaf": self.hosts_per_leaf,
                  "host_rate_mbps": self.host_rate_mbps, "uplink_rate_mbps": self.uplink_rate_mbps,
                  "uplinks_per_spine": self.uplinks_per_spine,
                  "oversubscription": float(self.oversubscription)}
        fab = Fabric(kind=self.KIND, params=params, layers=self.LAYERS)
        for s in range(1, self.spines + 1):
            fab.nodes.append(Node(self.spine_name(s), "spine", dpid=dpid_for("spine", s)))
        for l in range(1, self.leaves + 1):
            fab.nodes.append(Node(self.leaf_name(l), "leaf", dpid=dpid_for("leaf", l)))
        for l in range(1, self.leaves + 1):
            for h in range(1, self.hosts_per_leaf + 1):
                fab.nodes.append(Node(self.host_name(l, h), "host", mac=host_mac(l, h),
                                      ip=host_ip(l, h), leaf=self.leaf_name(l), group=self.leaf_name(l)))
        for l in range(1, self.leaves + 1):
            for h in range(1, self.hosts_per_leaf + 1):
                fab.links.append(LinkSpec(self.leaf_name(l), h, self.host_name(l, h), 0, self.host_rate_mbps))
        for l in range(1, self.leaves + 1):
            for s in range(1, self.spines + 1):
                for u in range(self.uplinks_per_spine):
                    leaf_port = self.hosts_per_leaf + (s - 1) * self.uplinks_per_spine + u + 1
                    spine_port = (l - 1) * self.uplinks_per_spine + u + 1
                    fab.links.append(LinkSpec(self.leaf_name(l), leaf_port, self.spine_name(s),
                                              spine_port, self.uplink_rate_mbps))
        fab.check_names()
        return fab
