"""``valiant``: Valiant load balancing over switch groups, per flow (pure).

Valiant's randomised routing (L. G. Valiant, "A scheme for fast parallel communication", SIAM
J. Computing 11(2), 1982) sends every message first to a random intermediate node and from there
to its destination, so that any traffic pattern loads the network like uniform random traffic.
On a Dragonfly (Kim, Dally, Scott and Abts, "Technology-Driven, Highly-Scalable Dragonfly
Topology", ISCA 2008, section 4) the intermediate is a random *group*: minimal routing sends all
of group i's traffic for group j over the one global link between them, while Valiant's
non-minimal routes spread it over the other groups' global links, at the price of paths with two
global links instead of one.

Here, per flow (every packet of a TCP connection on one path, no reordering):

1. The source host's router (a packet arriving from a host port, for a destination in another
   group) picks the intermediate group by a hash of the flow's symmetric 5-tuple (Open vSwitch's
   ``multipath``, hash-threshold, with a basis of its own) among the groups other than the
   source's and the destination's, and tags the packet by rewriting its Ethernet source to a
   reserved MAC that carries that group (:func:`tag_mac`).
2. Every router outside that group forwards a tagged packet minimally toward the group (shortest
   paths to its nearest router, ECMP where they tie).
3. The first router of the intermediate group matches its own tag and the IPv4 source, puts the
   source host's MAC back, and routes the packet as every untagged packet: minimally to its
   destination (ECMP where paths tie).

Traffic whose source and destination hosts are in one group (on one router or not) is routed
minimally, untagged. A fabric whose map puts its switches in fewer than three groups (anything
but a Dragonfly of g >= 3) is refused: there is no group to go through.

The tag changes no byte count and no offset: an Ethernet source address is rewritten in place,
so the BPF programs on the ports (ECN marker, PFC, samplers, faults), which parse Ethernet and
IPv4 by offset and the EtherType, see tagged frames as any other; no flow entry, hash or program
reads the Ethernet source; and hosts receive the frame as it was sent (the Ethernet destination
is never changed and the source is restored before the last group).

Flow tables of a router in group G (entries as :mod:`controller.flowtables` types):

- table 0 (classify): drop; ARP to the controller; priority 300: IPv4 from a host port -> table
  1; priority 250: a tag of another group J -> next hop toward J; a router with a link to another
  group also: its own group's tag and an IPv4 source outside G -> that host's MAC back, table 3;
  priority 200: other IPv4 -> table 3.
- table 1 (source): per destination host outside G: the destination group's candidate set in
  reg1, the hash's pick in reg0 -> table 2; anything else (destinations in G) -> table 3.
- table 2 (pick): (candidate set, pick) -> the tag of the picked group, next hop toward it.
- table 3 (route): per destination host, as the ``ecmp`` strategy's table 0.
- table 4 (ECMP): (port set, link index) -> output, as the ``ecmp`` strategy's table 1.
"""
from __future__ import annotations

import networkx as nx

from controller.routing.base import RoutingStrategy
from controller.routing.graph import hash_basis, next_hop_ports, spread, switch_groups, walk_one
from controller.flowtables import (ETH_TYPE_ARP, ETH_TYPE_IP, PRIO_ARP, PRIO_DROP, PRIO_ROUTE, FlowEntry,
                                   Multipath, SetField, SetReg, ToController, ecmp_entries, ecmp_tables, next_hop,
                                   route_entries)

#: The first four octets of every tag MAC: locally administered (bit 1 of the first octet set),
#: unicast (bit 0 clear), and unlike any host's MAC (``02:..``); ``vlb`` in ASCII after 0a.
TAG_PREFIX = "0a:76:6c:62"

#: Table ids of a router's pipeline (module docstring); every goto moves forward.
T_CLASSIFY, T_SOURCE, T_PICK, T_ROUTE, T_ECMP = 0, 1, 2, 3, 4
#: Priorities in table 0 above the per-destination routes (200).
PRIO_FROM_HOST, PRIO_TAG = 300, 250


def tag_mac(group_index: int) -> str:
    """The reserved MAC that tags a packet bound for intermediate group ``group_index`` (0-based,
    in the map's switch order): ``0a:76:6c:62:HH:LL`` with the index in the last two octets.

    Raises:
        ValueError: ``group_index`` outside 0..65535.
    """
    if not 0 <= group_index <= 0xFFFF:
        raise ValueError(f"group index {group_index} outside 0..65535")
    return f"{TAG_PREFIX}:{group_index >> 8:02x}:{group_index & 0xFF:02x}"


class Valiant(RoutingStrategy):
    """Valiant load balancing over a fabric's switch groups, per flow (see the module docstring).

    Attributes (besides the base's ``routes``, the minimal next hops toward every host):
        groups: the groups in the map's switch order (``["g1", "g2", ...]``).
        group_of: ``{switch: group}``; host_group: ``{host: its switch's group}``.
        toward: ``{group: {switch outside it: [port, ...]}}``: next hops on shortest paths to the
            group's nearest router.

    Raises:
        ValueError: a fabric whose switches form fewer than 3 groups, or a host on a switch
            without one (:meth:`refuse`).
    """

    NAME = "valiant"
    TITLE = ("Valiant load balancing on a Dragonfly: each flow to another group goes minimally to a "
             "random intermediate group (hash of its 5-tuple), then minimally to its destination")
    METHOD = {"mechanism": "ovs_multipath at the source router picks the intermediate group; a tag in eth_src "
                           "between the two phases",
              "fields": "symmetric_l3l4+udp (IP src/dst, protocol, TCP/UDP ports)",
              "algorithm": "Valiant (1982) over groups (Kim et al., ISCA 2008): intermediate group uniform over "
                           "the groups other than the source's and the destination's; minimal within a group",
              "tag": f"eth_src {TAG_PREFIX}:<group>, restored to the source host's MAC on entry to the group",
              "hash_basis": "per switch (controller.routing.hash_basis), another one for the pick"}
    HASHED = True

    @classmethod
    def refuse(cls, fabric_map: dict) -> str | None:
        """Why Valiant cannot route ``fabric_map``: fewer than 3 switch groups, or a host on a
        switch without a group; None when it can."""
        of = switch_groups(fabric_map)
        n = len({g for g in of.values() if g is not None})
        if n < 3:
            return (f"needs switches in at least 3 groups, a Dragonfly of 3 or more groups (a flow goes through "
                    f"a group that is neither its source's nor its destination's); this {fabric_map.get('kind')} "
                    f"fabric has {n}")
        for h in fabric_map["hosts"]:
            if of.get(h["switch"]) is None:
                return f"host {h['name']} is on switch {h['switch']}, which is in no group"
        return None

    def __init__(self, fabric_map: dict):
        super().__init__(fabric_map)
        self.group_of = switch_groups(fabric_map)
        self.groups: list[str] = list(dict.fromkeys(g for g in self.group_of.values() if g is not None))
        self.host_group = {name: self.group_of[h["switch"]] for name, h in self.hosts.items()}
        self.toward: dict[str, dict[str, list[int]]] = {}
        for grp in self.groups:
            members = [s for s, x in self.group_of.items() if x == grp]
            dist = nx.multi_source_dijkstra_path_length(self.graph, members, weight="cost")
            self.toward[grp] = {sw: next_hop_ports(self.graph, dist, sw) for sw in self.graph.nodes
                                if self.group_of[sw] != grp}

    def candidates(self, src_group: str, dst_group: str) -> list[str]:
        """The intermediate groups a flow from ``src_group`` to ``dst_group`` may take, in group
        order: every group but those two ([] when they are one group: minimal)."""
        return [] if src_group == dst_group else [x for x in self.groups if x not in (src_group, dst_group)]

    def pick_basis(self, switch: str) -> int:
        """The 16-bit hash basis of ``switch``'s intermediate-group pick: different from every
        switch's ECMP basis (:func:`hash_basis` of an index past the map's switches), so the pick
        and the next-hop choices are not correlated."""
        return hash_basis(len(self.index) + self.index[switch])

    def switch_flows(self, switch: str) -> list[FlowEntry]:
        """Every flow entry of ``switch`` in install order: tables 0-4 of the module docstring."""
        grp, basis = self.group_of[switch], self.basis(switch)
        dest = self.routes[switch]
        others = [x for x in self.groups if x != grp]
        toward = {f"group {x}": self.toward[x][switch] for x in others}
        set_of, port_sets = ecmp_tables({**dest, **toward})
        tag = {x: tag_mac(i) for i, x in enumerate(self.groups)}
        ip = ("eth_type", ETH_TYPE_IP)
        flows = [FlowEntry(T_CLASSIFY, PRIO_DROP, ()),
                 FlowEntry(T_CLASSIFY, PRIO_ARP, (("eth_type", ETH_TYPE_ARP),), (ToController(),))]
        ports = next(s["ports"] for s in self.fabric_map["switches"] if s["name"] == switch)
        for p in ports:
            if p["peer"] in self.hosts:
                flows.append(FlowEntry(T_CLASSIFY, PRIO_FROM_HOST, (("in_port", p["port"]), ip), goto_table=T_SOURCE))
        for x in others:
            actions, goto = next_hop(toward[f"group {x}"], set_of.get(f"group {x}"), basis, T_ECMP)
            flows.append(FlowEntry(T_CLASSIFY, PRIO_TAG, (ip, ("eth_src", tag[x])), actions, goto_table=goto))
        if grp is not None and any(self.group_of[n] != grp for n in self.graph.neighbors(switch)):
            for name, h in self.hosts.items():
                if self.host_group[name] != grp:
                    flows.append(FlowEntry(T_CLASSIFY, PRIO_TAG, (ip, ("eth_src", tag[grp]), ("ipv4_src", h["ip"])),
                                           (SetField("eth_src", h["mac"]),), goto_table=T_ROUTE))
        flows.append(FlowEntry(T_CLASSIFY, PRIO_ROUTE, (ip,), goto_table=T_ROUTE))
        flows.append(FlowEntry(T_SOURCE, PRIO_DROP, (), goto_table=T_ROUTE))
        cand_id = {d: i + 1 for i, d in enumerate(others)}
        for h in self.hosts.values():
            d = self.group_of[h["switch"]]
            if d != grp:
                flows.append(FlowEntry(T_SOURCE, PRIO_ROUTE, (ip, ("ipv4_dst", h["ip"])),
                                       (SetReg("reg1", cand_id[d]),
                                        Multipath(basis=self.pick_basis(switch),
                                                  max_link=len(self.candidates(grp, d)) - 1)),
                                       goto_table=T_PICK))
        flows.append(FlowEntry(T_PICK, PRIO_DROP, ()))
        for d, cid in cand_id.items():
            for k, via in enumerate(self.candidates(grp, d)):
                actions, goto = next_hop(toward[f"group {via}"], set_of.get(f"group {via}"), basis, T_ECMP)
                flows.append(FlowEntry(T_PICK, PRIO_ROUTE, (("reg1", cid), ("reg0", k)),
                                       (SetField("eth_src", tag[via]),) + actions, goto_table=goto))
        flows.append(FlowEntry(T_ROUTE, PRIO_DROP, ()))
        flows += route_entries(dest, set_of, basis, T_ROUTE, T_ECMP)
        flows += ecmp_entries(port_sets, T_ECMP)
        return flows

    def _phases(self, src: str, dst: str):
        s, d = self.hosts[src], self.hosts[dst]
        return s, d, self.candidates(self.host_group[src], self.host_group[dst])

    def link_fractions(self, src: str, dst: str) -> dict[tuple[str, str], float]:
        """Fraction of one ``src`` -> ``dst`` flow on each directed link when it is spread ideally
        over Valiant's paths: 1/(number of candidates) through each candidate group, split equally
        at every switch over its next hops in both phases; minimal within one group.

        Raises:
            KeyError: unknown host. ValueError: the routes do not reach ``dst``.
        """
        s, d, cands = self._phases(src, dst)
        if not cands:
            return super().link_fractions(src, dst)
        frac = {(src, s["switch"]): 1.0}
        for via in cands:
            entry = spread(self.peer, {s["switch"]: 1.0 / len(cands)}, self.toward[via].get,
                           lambda n, via=via: self.group_of.get(n) == via, frac, self.limit)
            spread(self.peer, entry, lambda sw: self.routes[sw].get(d["ip"]), lambda n: n == dst, frac, self.limit)
        return frac

    def sampled_path(self, src: str, dst: str, rng) -> dict[tuple[str, str], float]:
        """One Valiant path of a ``src`` -> ``dst`` flow: the intermediate group and every next hop
        drawn uniformly from ``rng``; minimal within one group.

        Raises:
            KeyError: unknown host. ValueError: the routes do not reach ``dst``.
        """
        s, d, cands = self._phases(src, dst)
        if not cands:
            return super().sampled_path(src, dst, rng)
        via = rng.choice(cands)
        out = {(src, s["switch"]): 1.0}
        entry = walk_one(self.peer, s["switch"], self.toward[via].get, lambda n: self.group_of.get(n) == via,
                         rng.choice, out, self.limit)
        walk_one(self.peer, entry, lambda sw: self.routes[sw].get(d["ip"]), lambda n: n == dst, rng.choice, out,
                 self.limit)
        return out

    def path(self, src: str, dst: str, via: str | None, choose=min) -> list[str]:
        """The switches a ``src`` -> ``dst`` flow crosses through intermediate group ``via`` (None,
        or ``src`` and ``dst`` in one group: the minimal path), taking ``choose(ports)`` at every
        switch (the loop-freedom tests walk it with ``min`` and ``max``).

        Raises:
            ValueError: ``via`` not a candidate of this pair, a dead end, or a switch repeated
                within a phase (a loop).
        """
        s, d, cands = self._phases(src, dst)
        if via is not None and cands and via not in cands:
            raise ValueError(f"{via} is not an intermediate group of {src} -> {dst} (candidates {cands})")
        path = [s["switch"]]

        def step(ports_of, arrived):
            seen = {path[-1]}
            while True:
                ports = ports_of(path[-1])
                if not ports:
                    raise ValueError(f"dead end at {path[-1]} for {src} -> {dst}")
                node = self.peer[(path[-1], choose(ports))]
                if arrived(node):
                    return node
                if node in seen:
                    raise ValueError(f"loop at {node} for {src} -> {dst}: {path + [node]}")
                seen.add(node)
                path.append(node)

        if via is not None and cands:
            path.append(step(self.toward[via].get, lambda n: self.group_of.get(n) == via))
        step(lambda sw: self.routes[sw].get(d["ip"]), lambda n: n == dst)
        return path
