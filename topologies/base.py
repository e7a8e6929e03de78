"""What every topology shares (pure: no root, no Mininet needed): :class:`Topology`, the base of a
registered fabric builder, and :class:`Fabric`, the nodes and links it builds, from which both
the Mininet ``Topo`` (:mod:`topologies.mininet_topo`) and the controller's fabric map
(:meth:`Fabric.to_map`) are derived, so the two can never disagree; names, datapath ids, MACs and
IPs derive from position.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from fractions import Fraction

from typing import ClassVar

from common.errors import ScenarioError
from common.params import F, check_params

NUM = (int, float)

#: Linux IFNAMSIZ is 16 including the terminating NUL (case C1).
MAX_IFNAME_LEN = 15

#: Layer codes used in position-derived datapath ids (high 16 bits).
LAYER_CODE = {"spine": 1, "leaf": 2, "core": 3, "aggregation": 4, "edge": 5, "router": 6}


@dataclass(frozen=True)
class Node:
    """One switch or host.

    Attributes:
        name: Mininet node name (also the prefix of its interface names).
        layer: the switch's layer (``spine``, ``leaf``; ``core``, ``aggregation``, ``edge``;
            ``router``) or ``host``.
        dpid: OpenFlow datapath id (switches), None for hosts.
        mac: host MAC ``02:..`` (locally administered), None for switches.
        ip: host IPv4 address without prefix length, None for switches.
        leaf: for hosts, the name of the switch they attach to.
        group: for hosts, the block whose traffic leaves it only through the
            fabric's upper layers or global links: the leaf (Spine-Leaf), the pod
            (Fat-Tree) or the group (Dragonfly); for switches, the group a topology
            puts them in (a Dragonfly's routers; routing strategies that route over
            groups read it from the map), None otherwise.
        server: for hosts that are one GPU's NIC of a multi-GPU server (a rail-optimised
            fabric), the server's name; None when the host is a whole server.
    """

    name: str
    layer: str
    dpid: int | None = None
    mac: str | None = None
    ip: str | None = None
    leaf: str | None = None
    group: str | None = None
    server: str | None = None

    @property
    def is_host(self) -> bool:
        """True for hosts, False for switches."""
        return self.layer == "host"


@dataclass(frozen=True)
class LinkSpec:
    """A full-duplex link between ``a``:``a_port`` and ``b``:``b_port``.

    ``rate_mbps`` applies in both directions. Port numbers are the OpenFlow
    port numbers on switches and the ``ethN`` index on hosts. ``cost`` is the
    link's routing cost (shortest paths minimise the sum; 1 unless the
    topology's routing needs otherwise, e.g. a Dragonfly's global links).
    """

    a: str
    a_port: int
    b: str
    b_port: int
    rate_mbps: float
    cost: int = 1

    @property
    def a_intf(self) -> str:
        """Interface name on side a (Mininet convention ``<node>-eth<port>``)."""
        return f"{self.a}-eth{self.a_port}"

    @property
    def b_intf(self) -> str:
        """Interface name on side b."""
        return f"{self.b}-eth{self.b_port}"


#: Fabric maps written before maps carried their layers (older results folders) name only
#: their kind; these are the layers those two kinds had.
_LEGACY_MAP_LAYERS = {"spineleaf": ("spine", "leaf", "host"), "fattree": ("core", "aggregation", "edge", "host")}


def map_layers(fabric_map: dict) -> tuple[str, ...]:
    """A fabric map's layers from top to bottom, hosts last (``("spine", "leaf", "host")``).

    Raises:
        KeyError: a map without layers of a kind other than spineleaf or fattree.
    """
    return tuple(fabric_map.get("layers") or _LEGACY_MAP_LAYERS[fabric_map["kind"]])


def oversubscription_per_switch(fabric_map: dict) -> dict[str, Fraction]:
    """Downlink capacity / uplink capacity of every switch that has both (leaf, edge, aggregation).

    Down = links toward the layer below (hosts for a leaf or edge switch), up =
    toward the layer above; parallel links add up. Works on a fabric map
    (:meth:`Fabric.to_map`), so results folders can be redrawn without the
    builder. Returns ``{switch: ratio}`` as exact fractions (3 means 3:1).

    Switches with neighbours on their own layer (a Dragonfly's routers) count only the layers
    above and below; a switch with nothing above is left out.

    Raises:
        KeyError: see :func:`map_layers`.
    """
    rows = map_layers(fabric_map)
    rank = {s["name"]: rows.index(s["layer"]) for s in fabric_map["switches"]}
    rank.update({h["name"]: rows.index("host") for h in fabric_map["hosts"]})
    out = {}
    for s in fabric_map["switches"]:
        me = rank[s["name"]]
        down = sum(Fraction(p["rate_mbps"]).limit_denominator(1000) for p in s["ports"] if rank[p["peer"]] > me)
        up = sum(Fraction(p["rate_mbps"]).limit_denominator(1000) for p in s["ports"] if rank[p["peer"]] < me)
        if up and down:
            out[s["name"]] = down / up
    return out


@dataclass
class Fabric:
    """A built fabric: nodes and links, plus what the builder knows of it.

    Attributes:
        kind: the builder's registry name (``spineleaf``, ``fattree``, ``dragonfly``).
        params: the builder's parameters (JSON-serialisable).
        layers: node layers from top to bottom, hosts last (``("spine", "leaf", "host")``).
        nodes: every switch and host, switches first.
        links: every link; host links have the host on side ``b``.
    """

    kind: str
    params: dict
    layers: tuple[str, ...] = ("spine", "leaf", "host")
    nodes: list[Node] = field(default_factory=list)
    links: list[LinkSpec] = field(default_factory=list)

    def node(self, name: str) -> Node:
        """The node called ``name``; raises KeyError if there is none."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    @property
    def hosts(self) -> list[Node]:
        """Hosts in position order."""
        return [n for n in self.nodes if n.is_host]

    def host_groups(self) -> dict[str, list[str]]:
        """``{group: [host names in position order]}`` (leaf, pod or Dragonfly group: :attr:`Node.group`)."""
        out: dict[str, list[str]] = {}
        for h in self.hosts:
            out.setdefault(h.group or h.leaf, []).append(h.name)
        return out

    @property
    def switches(self) -> list[Node]:
        """Switches in position order."""
        return [n for n in self.nodes if not n.is_host]

    def interface_names(self) -> list[str]:
        """Every interface name the fabric creates (both link ends)."""
        out = []
        for link in self.links:
            out += [link.a_intf, link.b_intf]
        return out

    def switch_interfaces(self) -> list[str]:
        """Interface names that belong to switches (their egress ports)."""
        switches = {n.name for n in self.switches}
        out = []
        for link in self.links:
            if link.a in switches:
                out.append(link.a_intf)
            if link.b in switches:
                out.append(link.b_intf)
        return out

    def check_names(self) -> None:
        """Raise ScenarioError if any interface name exceeds 15 characters (case C1)."""
        for name in self.interface_names():
            if len(name) > MAX_IFNAME_LEN:
                raise ScenarioError("topology", f"interface name {name!r} is {len(name)} characters; Linux allows {MAX_IFNAME_LEN}")

    def layer_rank(self, name: str) -> int:
        """0 for the top layer (spine / core), growing downward; hosts are the last layer."""
        return self.layers.index(self.node(name).layer)

    def _neighbours(self, name: str) -> list[str]:
        out = []
        for link in self.links:
            if link.a == name and link.b not in out:
                out.append(link.b)
            elif link.b == name and link.a not in out:
                out.append(link.a)
        return out

    def up_neighbours(self, name: str) -> list[str]:
        """Neighbours of ``name`` one layer up (a leaf's spines, an edge switch's aggregation
        switches, a host's switch), in link order, each once; KeyError for an unknown node."""
        me = self.layer_rank(name)
        return [n for n in self._neighbours(name) if self.layer_rank(n) < me]

    def down_neighbours(self, name: str) -> list[str]:
        """Neighbours of ``name`` one layer down (a spine's leaves, a leaf's hosts), each once."""
        me = self.layer_rank(name)
        return [n for n in self._neighbours(name) if self.layer_rank(n) > me]

    def oversubscription_per_switch(self) -> dict[str, Fraction]:
        """See :func:`oversubscription_per_switch` (e.g. every leaf of the default fabric: 3)."""
        return oversubscription_per_switch(self.to_map())

    def port_toward(self, switch: str, peer: str) -> list[int]:
        """OpenFlow ports of ``switch`` whose link ends at ``peer`` (several if parallel)."""
        ports = []
        for link in self.links:
            if link.a == switch and link.b == peer:
                ports.append(link.a_port)
            elif link.b == switch and link.a == peer:
                ports.append(link.b_port)
        return ports

    def host_attachment(self, host: str) -> LinkSpec:
        """The link that attaches ``host`` (host on side b); KeyError if none."""
        for link in self.links:
            if link.b == host:
                return link
        raise KeyError(host)

    def to_map(self) -> dict:
        """The fabric map the controller loads (JSON-serialisable dict).

        Shape::

            {"version": 1, "kind": str, "params": {...}, "layers": [top, ..., "host"],
             "switches": [{"name", "dpid", "layer"[, "group"],
                           "ports": [{"port", "intf", "peer", "peer_port", "rate_mbps"}]}],
             "hosts": [{"name", "mac", "ip", "switch", "switch_port", "intf", "rate_mbps"[, "server"]}],
             "links": [{"a", "a_port", "a_intf", "b", "b_port", "b_intf", "rate_mbps"[, "cost"]}]}

        A link's ``cost`` is written only where it is not 1 (older maps have none); a host's
        ``server`` only where the host is one GPU of a multi-GPU server; a switch's ``group`` only
        where the topology gives it one (a Dragonfly's routers).
        """
        switches = []
        for sw in self.switches:
            ports = []
            for link in self.links:
                for me, my_port, peer, peer_port, intf in (
                    (link.a, link.a_port, link.b, link.b_port, link.a_intf),
                    (link.b, link.b_port, link.a, link.a_port, link.b_intf),
                ):
                    if me == sw.name:
                        ports.append({"port": my_port, "intf": intf, "peer": peer,
                                      "peer_port": peer_port, "rate_mbps": link.rate_mbps})
            ports.sort(key=lambda p: p["port"])
            switches.append({"name": sw.name, "dpid": sw.dpid, "layer": sw.layer,
                             **({"group": sw.group} if sw.group else {}), "ports": ports})
        hosts = []
        for h in self.hosts:
            att = self.host_attachment(h.name)
            hosts.append({"name": h.name, "mac": h.mac, "ip": h.ip, "switch": att.a,
                          "switch_port": att.a_port, "intf": att.b_intf, "rate_mbps": att.rate_mbps,
                          **({"server": h.server} if h.server else {})})
        links = [{"a": l.a, "a_port": l.a_port, "a_intf": l.a_intf, "b": l.b,
                  "b_port": l.b_port, "b_intf": l.b_intf, "rate_mbps": l.rate_mbps,
                  **({"cost": l.cost} if l.cost != 1 else {})}
                 for l in self.links]
        return {"version": 1, "kind": self.kind, "params": dict(self.params), "layers": list(self.layers),
                "switches": switches, "hosts": hosts, "links": links}


def dpid_for(layer: str, index: int) -> int:
    """Position-derived datapath id: layer code in bits 16-31, 1-based index below."""
    return (LAYER_CODE[layer] << 16) | index


def host_mac(leaf_index: int, host_index: int) -> str:
    """Locally administered MAC ``02:00:00:00:LL:HH`` for host ``host_index`` on leaf ``leaf_index``."""
    return f"02:00:00:00:{leaf_index:02x}:{host_index:02x}"


def host_ip(leaf_index: int, host_index: int) -> str:
    """IPv4 address ``10.<leaf>.0.<host>`` (all hosts share 10.0.0.0/8)."""
    return str(ipaddress.IPv4Address(f"10.{leaf_index}.0.{host_index}"))


class Topology:
    """The base of a registered fabric builder: a frozen dataclass whose fields are its ``PARAMS``
    keys (see :mod:`topologies` for what a kind declares).

    Construction checks every field against ``PARAMS`` (:func:`common.params.check_params`) and
    then :meth:`check`; ``mn --topo KIND,N1,N2,...`` gives :meth:`from_mn_args`.

    Raises (on construction): ScenarioError naming ``topology.<key>``.
    """

    KIND: ClassVar[str]
    TITLE: ClassVar[str]
    LAYERS: ClassVar[tuple[str, ...]]
    PARAMS: ClassVar[dict[str, F]]
    MN_ARGS: ClassVar[tuple[str, ...]]

    def __post_init__(self):
        check_params(self, self.PARAMS, "topology")
        self.check()

    def check(self) -> None:
        """What ``PARAMS`` cannot say about a combination of keys (ScenarioError naming the key);
        none by default."""

    @classmethod
    def from_mn_args(cls, nums: list) -> "Topology":
        """The fabric of ``mn --topo KIND,...``: the numbers as :data:`MN_ARGS` in order (the last
        ones may be left out)."""
        return cls(**dict(zip(cls.MN_ARGS, nums)))

    @property
    def n_hosts(self) -> int:
        """Hosts of the fabric (the schema's size cap)."""
        raise NotImplementedError

    @property
    def n_links(self) -> int:
        """Links of the fabric (the schema's size cap)."""
        raise NotImplementedError

    @property
    def n_groups(self) -> int:
        """Host groups whose traffic between them crosses the top layer."""
        raise NotImplementedError

    def build(self) -> Fabric:
        """The fabric's nodes and links."""
        raise NotImplementedError
