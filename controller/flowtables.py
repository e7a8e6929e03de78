"""The flow tables of one switch (pure): what :mod:`controller.app` installs, as typed entries
that unit tests read and forward packets through (tests/unit/test_flow_tables.py), the way
FAUCET tests its Valve tables without a switch.

The per-destination tables every routing strategy starts from (:func:`switch_flows`; the
``ecmp`` and ``single`` strategies install exactly these): table 0: priority 0 drop (no
table-miss flooding, so no broadcast storms), priority 100 ARP to the controller (answered from
the fabric map), priority 200 per destination host: one next hop as an output, or ECMP as "write
the port-set id to reg1, hash the 5-tuple onto a link index in reg0 (OVS ``multipath``,
hash-threshold, RFC 2992), go to table 1". Table 1 (:data:`ECMP_TABLE`): (reg1, reg0) -> output
port, priority 0 drop otherwise. A strategy with tables of its own (``valiant``) composes them
from the same pieces (:func:`next_hop`, :func:`route_entries`, :func:`ecmp_entries`) at table ids
of its choosing; the app translates whatever entries a strategy returns and names none.
"""
from __future__ import annotations

from dataclasses import dataclass

PRIO_DROP, PRIO_ARP, PRIO_ROUTE = 0, 100, 200
#: Table 1 maps (port-set id in reg1, link index in reg0) to an output port.
ECMP_TABLE = 1
#: OVS's NX_HASH_FIELDS_SYMMETRIC_L3L4_UDP: IP addresses, protocol, TCP/UDP/SCTP
#: ports (os-ken names only fields 0 and 1; OVS lib/nx-match.h defines 3).
HASH_FIELDS_L3L4_UDP = 3
ETH_TYPE_IP, ETH_TYPE_ARP = 0x0800, 0x0806


@dataclass(frozen=True)
class Output:
    """Send the packet out of switch port ``port``."""
    port: int


@dataclass(frozen=True)
class ToController:
    """Send the packet to the controller (whole, not buffered)."""


@dataclass(frozen=True)
class SetReg:
    """Write ``value`` into register ``reg`` (``reg1``: the ECMP port-set id)."""
    reg: str
    value: int


@dataclass(frozen=True)
class SetField:
    """Write ``value`` into the packet's header field ``field`` (an OpenFlow field name as os-ken
    spells it, e.g. ``eth_src`` with a MAC ``"0a:76:6c:62:00:01"``)."""
    field: str
    value: str | int


@dataclass(frozen=True)
class Multipath:
    """OVS ``multipath``: hash the symmetric L3/L4 5-tuple with ``basis`` and pick a link index
    0..``max_link`` by hash-threshold (RFC 2992) into register ``dst``."""
    basis: int
    max_link: int
    fields: int = HASH_FIELDS_L3L4_UDP
    dst: str = "reg0"


@dataclass(frozen=True)
class FlowEntry:
    """One flow entry: ``match`` is a tuple of (OpenFlow field name, value) pairs (os-ken's
    OFPMatch keyword names); no actions and no ``goto_table`` means drop."""
    table_id: int
    priority: int
    match: tuple
    actions: tuple = ()
    goto_table: int | None = None

    def matches(self, fields: dict) -> bool:
        """Whether a packet (or the pipeline's state) with these ``fields`` matches this entry."""
        return all(fields.get(k) == v for k, v in self.match)


def ecmp_tables(switch_routes: dict[str, list[int]]) -> tuple[dict[str, int], dict[int, list[int]]]:
    """Group one switch's multi-port routes by their set of next-hop ports.

    Args:
        switch_routes: ``{key: [port, ...]}`` of one switch: a destination host IP (from
            :func:`controller.routing.compute_routes`) or any other key a strategy routes by.

    Returns:
        ``(set_of, port_sets)``: ``set_of`` maps every key with two or more next hops to a
        port-set id (1, 2, ...); ``port_sets`` maps each id to its ascending port list. Keys with
        one next hop are left out. Ids are assigned in order of first appearance over sorted
        keys, so they are deterministic.
    """
    ids: dict[tuple[int, ...], int] = {}
    set_of: dict[str, int] = {}
    for key in sorted(switch_routes):
        ports = tuple(switch_routes[key])
        if len(ports) < 2:
            continue
        set_of[key] = ids.setdefault(ports, len(ids) + 1)
    return set_of, {i: list(p) for p, i in ids.items()}


def next_hop(ports: list[int], set_id: int | None, basis: int, ecmp_table: int = 1) -> tuple[tuple, int | None]:
    """The actions that send a packet to one of ``ports``: ``((Output(port),), None)`` for one
    port; for several, ``((SetReg("reg1", set_id), Multipath(basis, len - 1)), ecmp_table)``: the
    port set's id (from :func:`ecmp_tables`) and the hash's link index, then the ECMP table.

    Returns:
        ``(actions, goto_table)``.

    Raises:
        ValueError: no port, or several without a ``set_id``.
    """
    if not ports:
        raise ValueError("no next-hop port")
    if len(ports) == 1:
        return (Output(ports[0]),), None
    if set_id is None:
        raise ValueError(f"ports {ports}: several next hops need a port-set id")
    return (SetReg("reg1", set_id), Multipath(basis=basis, max_link=len(ports) - 1)), ecmp_table


def route_entries(routes: dict[str, list[int]], set_of: dict[str, int], basis: int, table: int = 0,
                  ecmp_table: int = 1) -> list[FlowEntry]:
    """One priority-200 entry of ``table`` per destination host IP of ``routes`` (``{host_ip:
    [next-hop port, ...]}``): match IPv4 to that address, then :func:`next_hop` (``set_of`` as
    :func:`ecmp_tables` gives it)."""
    out = []
    for ip, ports in routes.items():
        actions, goto = next_hop(ports, set_of.get(ip), basis, ecmp_table)
        out.append(FlowEntry(table, PRIO_ROUTE, (("eth_type", ETH_TYPE_IP), ("ipv4_dst", ip)), actions, goto_table=goto))
    return out


def ecmp_entries(port_sets: dict[int, list[int]], table: int = 1) -> list[FlowEntry]:
    """The ECMP table: priority 0 drop, and one entry per (port set in reg1, link index in reg0)
    -> output port (``port_sets`` as :func:`ecmp_tables` gives it)."""
    flows = [FlowEntry(table, PRIO_DROP, ())]
    for set_id, ports in port_sets.items():
        for link, port in enumerate(ports):
            flows.append(FlowEntry(table, PRIO_ROUTE, (("reg1", set_id), ("reg0", link)), (Output(port),)))
    return flows


def switch_flows(routes: dict[str, list[int]], basis: int) -> list[FlowEntry]:
    """Every flow entry of one switch routed per destination, in the order they are installed.

    Args:
        routes: ``{host_ip: [next-hop port, ...]}`` of this switch (controller.routing.compute_routes).
        basis: this switch's 16-bit ECMP hash basis (controller.routing.hash_basis).
    Returns:
        The entries of tables 0 and :data:`ECMP_TABLE`.
    """
    set_of, port_sets = ecmp_tables(routes)
    flows = [FlowEntry(0, PRIO_DROP, ()),
             FlowEntry(0, PRIO_ARP, (("eth_type", ETH_TYPE_ARP),), (ToController(),))]
    return flows + ecmp_entries(port_sets, ECMP_TABLE) + route_entries(routes, set_of, basis, 0, ECMP_TABLE)


#: OpenFlow match field names (os-ken's) as ovs-ofctl writes them.
_OFCTL_FIELDS = {"eth_type": "dl_type", "ipv4_dst": "nw_dst", "ipv4_src": "nw_src", "eth_src": "dl_src",
                 "in_port": "in_port", "reg0": "reg0", "reg1": "reg1"}
#: OVS's names of the ``multipath`` hash fields (lib/flow.c, flow_hash_fields_to_str).
_OFCTL_HASH_FIELDS = {0: "eth_src", 1: "symmetric_l4", HASH_FIELDS_L3L4_UDP: "symmetric_l3l4+udp"}


def ofctl_line(e: FlowEntry) -> str:
    """One entry as an ``ovs-ofctl`` flow line (OpenFlow 1.3), as :mod:`controller.app` installs
    it: ``table=0,priority=200,dl_type=0x0800,nw_dst=10.0.0.1 actions=output:3`` (an entry
    without actions or ``goto_table`` drops). ``ovs-ofctl diff-flows`` and ``replace-flows`` read
    these lines against a switch's tables.

    Raises:
        KeyError: a match field or hash this module does not write.
        TypeError: an action it does not know.
    """
    match = "".join(f",{_OFCTL_FIELDS[k]}={v:#06x}" if k == "eth_type" else f",{_OFCTL_FIELDS[k]}={v}"
                    for k, v in e.match)
    acts = []
    for a in e.actions:
        if isinstance(a, Output):
            acts.append(f"output:{a.port}")
        elif isinstance(a, ToController):
            acts.append("CONTROLLER:65535")
        elif isinstance(a, SetReg):
            acts.append(f"set_field:{a.value}->{a.reg}")
        elif isinstance(a, SetField):
            acts.append(f"set_field:{a.value}->{a.field}")
        elif isinstance(a, Multipath):
            acts.append(f"multipath({_OFCTL_HASH_FIELDS[a.fields]},{a.basis},hash_threshold,{a.max_link + 1},0,"
                        f"{a.dst}[0..15])")
        else:
            raise TypeError(f"no ovs-ofctl form for {a!r}")
    if e.goto_table is not None:
        acts.append(f"goto_table:{e.goto_table}")
    return f"table={e.table_id},priority={e.priority}{match} actions={','.join(acts) or 'drop'}"
