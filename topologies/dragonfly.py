"""Dragonfly fabric description (pure: no root, no Mininet needed).

The topology of Kim, Dally, Scott and Abts, "Technology-Driven, Highly-Scalable
Dragonfly Topology" (ISCA 2008): routers form groups; inside a group every
router links to every other (the paper's all-to-all local network); groups are
joined by global links, every pair of groups by exactly one; hosts hang off
the routers. In the paper's letters:

- p hosts per router, a routers per group, h global links per router, g groups;
- g <= a*h + 1 (a group has a*h global ports and needs g - 1 of them; with
  g = a*h + 1 every port is used: the largest Dragonfly of these routers);
- hosts g*a*p, routers g*a, local links g*a*(a-1)/2, global links g*(g-1)/2.

The paper's balanced shape is a = 2p = 2h. Minimal routing (a local hop, the
global link, a local hop: at most three router hops) is what the controller's
shortest-path routing gives with global links at cost 3 (hop counts alone
would sometimes prefer two global links to a local, a global and a local
one); ECMP spreads flows wherever two minimal paths tie. The global link between groups i < j leaves group i from its router
``(j - i - 1) // h`` and enters group j at router ``(g - (j - i) - 1) // h``
(each group numbers its g - 1 peers by distance going up, modulo g), so
every router carries at most h global links.

Names: router ``g<G>r<R>``, hosts numbered h1..hN group by group, router by
router, with IP 10.<G>.<R>.<2+i> and MAC 02:00:01:GG:RR:II. Routers and hosts
carry their group ``g<G>`` (the fabric map's ``switches[].group``), which
routing over groups reads (``routing.mode: valiant``, controller.routing.valiant).
"""
from __future__ import annotations

from dataclasses import dataclass

from common.errors import ScenarioError
from common.params import F
from topologies.base import NUM, Fabric, LinkSpec, Node, Topology, dpid_for


#: Routing cost of a global link (local links cost 1): a path with one global link costs at most
#: 1 + 3 + 1 = 5, one with two at least 6, so shortest paths are the minimal routes of the paper.
GLOBAL_LINK_COST = 3


@dataclass(frozen=True)
class Dragonfly(Topology):
    """A Dragonfly of ``groups`` groups of ``routers_per_group`` routers.

    Args:
        groups: g, 2..33, at most routers_per_group x global_links_per_router + 1.
        routers_per_group: a, 1..16.
        hosts_per_router: p, 1..16.
        global_links_per_router: h, 1..8.
        host_rate_mbps, local_rate_mbps, global_rate_mbps: link rates in Mbit/s (> 0).

    Raises:
        ScenarioError: a parameter out of range, or more groups than the routers'
            global ports can join (names the parameter).
    """

    KIND = "dragonfly"
    TITLE = "Dragonfly"
    LAYERS = ("router", "host")
    #: The scenario's ``topology`` keys for this kind (types, ranges, defaults).
    PARAMS = {
        "groups": F((int,), 5, lo=2, hi=33),
        "routers_per_group": F((int,), 4, lo=1, hi=16),
        "hosts_per_router": F((int,), 2, lo=1, hi=16),
        "global_links_per_router": F((int,), 2, lo=1, hi=8),
        "host_rate_mbps": F(NUM, 10, lo=0.1, hi=1000),
        "local_rate_mbps": F(NUM, 10, lo=0.1, hi=1000),
        "global_rate_mbps": F(NUM, 10, lo=0.1, hi=1000),
    }
    #: ``mn --topo dragonfly,GROUPS,ROUTERS_PER_GROUP,HOSTS_PER_ROUTER,GLOBAL_LINKS_PER_ROUTER[,RATE_MBPS]``
    MN_ARGS = ("groups", "routers_per_group", "hosts_per_router", "global_links_per_router", "rate_mbps")

    groups: int = 5
    routers_per_group: int = 4
    hosts_per_router: int = 2
    global_links_per_router: int = 2
    host_rate_mbps: float = 10.0
    local_rate_mbps: float = 10.0
    global_rate_mbps: float = 10.0

    def check(self) -> None:
        """Every pair of groups needs a global link: at most a x h + 1 groups (ScenarioError naming
        ``topology.groups``)."""
        most = self.routers_per_group * self.global_links_per_router + 1
        if self.groups > most:
            raise ScenarioError("topology.groups", f"{self.groups} groups need {self.groups - 1} global ports per "
                                f"group; {self.routers_per_group} routers x {self.global_links_per_router} global "
                                f"links have {most - 1} (at most {most} groups)")

    @classmethod
    def from_mn_args(cls, nums: list) -> "Dragonfly":
        """The fabric of ``mn --topo dragonfly,G,A,P,H[,RATE_MBPS]``: one rate (default 10) on every link."""
        g, a, p, h, *rate = nums
        r = rate[0] if rate else 10
        return cls(groups=g, routers_per_group=a, hosts_per_router=p, global_links_per_router=h,
                   host_rate_mbps=r, local_rate_mbps=r, global_rate_mbps=r)

    @property
    def n_hosts(self) -> int:
        """g x a x p."""
        return self.groups * self.routers_per_group * self.hosts_per_router

    @property
    def n_routers(self) -> int:
        """g x a."""
        return self.groups * self.routers_per_group

    @property
    def n_local_links(self) -> int:
        """g x a(a-1)/2: every pair of routers of a group."""
        return self.groups * self.routers_per_group * (self.routers_per_group - 1) // 2

    @property
    def n_global_links(self) -> int:
        """g(g-1)/2: every pair of groups, once."""
        return self.groups * (self.groups - 1) // 2

    @property
    def n_links(self) -> int:
        """Host links, local links and global links."""
        return self.n_hosts + self.n_local_links + self.n_global_links

    @property
    def n_groups(self) -> int:
        """Host groups whose traffic between them crosses a global link: the groups."""
        return self.groups

    @property
    def oversubscription(self) -> float:
        """A group's host capacity over its global capacity: a x p x host rate / ((g - 1) x global
        rate), e.g. 2 for the default (8 hosts share the 4 global links to the other groups). 1 or
        less: a permutation across groups can run at line rate (on minimal routes)."""
        return (self.routers_per_group * self.hosts_per_router * self.host_rate_mbps
                / ((self.groups - 1) * self.global_rate_mbps))

    @staticmethod
    def router_name(group: int, router: int) -> str:
        """Router ``router`` (0-based) of group ``group`` (0-based) is ``g<group+1>r<router+1>``."""
        return f"g{group + 1}r{router + 1}"

    def host_name(self, group: int, router: int, i: int) -> str:
        """Host i (0-based) of router ``router`` of ``group``: global numbering h1..hN."""
        return f"h{(group * self.routers_per_group + router) * self.hosts_per_router + i + 1}"

    def global_router(self, group: int, peer: int) -> int:
        """The router (0-based) of ``group`` that holds its global link to group ``peer``."""
        return ((peer - group) % self.groups - 1) // self.global_links_per_router

    def build(self) -> Fabric:
        """Build the node and link list.

        Router ports: 1..p face hosts, p+1..p+a-1 face the group's other routers
        (in router order), the global links follow (pairs of groups in order of
        their index difference). Raises ScenarioError if an interface name would
        exceed 15 characters (case C1).
        """
        g, a, p = self.groups, self.routers_per_group, self.hosts_per_router
        params = {"groups": g, "routers_per_group": a, "hosts_per_router": p,
                  "global_links_per_router": self.global_links_per_router, "host_rate_mbps": self.host_rate_mbps,
                  "local_rate_mbps": self.local_rate_mbps, "global_rate_mbps": self.global_rate_mbps,
                  "oversubscription": float(self.oversubscription)}
        fab = Fabric(kind=self.KIND, params=params, layers=self.LAYERS)
        for G in range(g):
            for r in range(a):
                fab.nodes.append(Node(self.router_name(G, r), "router", dpid=dpid_for("router", G * a + r + 1),
                                      group=f"g{G + 1}"))
        for G in range(g):
            for r in range(a):
                for i in range(p):
                    fab.nodes.append(Node(self.host_name(G, r, i), "host", mac=f"02:00:01:{G:02x}:{r:02x}:{i:02x}",
                                          ip=f"10.{G + 1}.{r + 1}.{i + 2}", leaf=self.router_name(G, r),
                                          group=f"g{G + 1}"))
        for G in range(g):
            for r in range(a):
                for i in range(p):
                    fab.links.append(LinkSpec(self.router_name(G, r), i + 1, self.host_name(G, r, i), 0,
                                              self.host_rate_mbps))
        for G in range(g):
            for r in range(a):
                for s in range(r + 1, a):
                    # port p+1.. toward the other routers in order, skipping itself
                    fab.links.append(LinkSpec(self.router_name(G, r), p + s, self.router_name(G, s), p + r + 1,
                                              self.local_rate_mbps))
        used: dict[tuple[int, int], int] = {}
        first_global = p + a

        def port(group: int, router: int) -> int:
            n = used.get((group, router), 0)
            used[(group, router)] = n + 1
            return first_global + n

        for d in range(1, g):
            for G in range(g):
                H = (G + d) % g
                if G < H:
                    ra, rb = self.global_router(G, H), self.global_router(H, G)
                    fab.links.append(LinkSpec(self.router_name(G, ra), port(G, ra), self.router_name(H, rb),
                                              port(H, rb), self.global_rate_mbps, cost=GLOBAL_LINK_COST))
        fab.check_names()
        return fab
