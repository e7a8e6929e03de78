"""The flow tables of one switch (pure): what :mod:`controller.app` installs, as typed entries
that unit tests read and forward packets through (tests/unit/test_flow_tables.py), the way
FAUCET tests its Valve tables without a switch.

Table 0: priority 0 drop (no table-miss flooding, so no broadcast storms), priority 100 ARP to
the controller (answered from the fabric map), priority 200 per destination host: one next hop
as an output, or ECMP as "write the port-set id to reg1, hash the 5-tuple onto a link index in
reg0 (OVS ``multipath``, hash-threshold, RFC 2992), go to table 1". Table 1 (:data:`ECMP_TABLE`):
(reg1, reg0) -> output port, priority 0 drop otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass

from controller.routing import ecmp_tables

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


def switch_flows(routes: dict[str, list[int]], basis: int) -> list[FlowEntry]:
    """Every flow entry of one switch, in the order they are installed.

    Args:
        routes: ``{host_ip: [next-hop port, ...]}`` of this switch (controller.routing.compute_routes).
        basis: this switch's 16-bit ECMP hash basis (controller.routing.hash_basis).
    Returns:
        The entries of tables 0 and :data:`ECMP_TABLE`.
    """
    set_of, port_sets = ecmp_tables(routes)
    flows = [FlowEntry(0, PRIO_DROP, ()),
             FlowEntry(0, PRIO_ARP, (("eth_type", ETH_TYPE_ARP),), (ToController(),)),
             FlowEntry(ECMP_TABLE, PRIO_DROP, ())]
    for set_id, ports in port_sets.items():
        for link, port in enumerate(ports):
            flows.append(FlowEntry(ECMP_TABLE, PRIO_ROUTE, (("reg1", set_id), ("reg0", link)), (Output(port),)))
    for ip, ports in routes.items():
        match = (("eth_type", ETH_TYPE_IP), ("ipv4_dst", ip))
        if ip not in set_of:
            flows.append(FlowEntry(0, PRIO_ROUTE, match, (Output(ports[0]),)))
        else:
            flows.append(FlowEntry(0, PRIO_ROUTE, match, (SetReg("reg1", set_of[ip]),
                                                          Multipath(basis=basis, max_link=len(ports) - 1)),
                                   goto_table=ECMP_TABLE))
    return flows


def port_sets_of(flows: list[FlowEntry]) -> int:
    """How many ECMP port sets the entries hold (for the controller's log line)."""
    return len({dict(e.match)["reg1"] for e in flows if e.table_id == ECMP_TABLE and e.match})


#: OpenFlow match field names (os-ken's) as ovs-ofctl writes them.
_OFCTL_FIELDS = {"eth_type": "dl_type", "ipv4_dst": "nw_dst", "reg0": "reg0", "reg1": "reg1"}
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
        elif isinstance(a, Multipath):
            acts.append(f"multipath({_OFCTL_HASH_FIELDS[a.fields]},{a.basis},hash_threshold,{a.max_link + 1},0,"
                        f"{a.dst}[0..15])")
        else:
            raise TypeError(f"no ovs-ofctl form for {a!r}")
    if e.goto_table is not None:
        acts.append(f"goto_table:{e.goto_table}")
    return f"table={e.table_id},priority={e.priority}{match} actions={','.join(acts) or 'drop'}"
