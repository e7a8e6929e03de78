"""The controller's flow tables (controller.tables), checked by forwarding packets through them:
a small simulation of the OpenFlow pipeline (table 0, registers, OVS multipath's hash-threshold
pick, table 1) over every switch of a fabric, hop by hop along the fabric map's links. No switch,
no root: what each switch would do with a packet, from the entries the controller installs."""
import hashlib
import itertools

import networkx as nx
import pytest

from controller.routing import compute_routes, hash_basis, strategy_for, switch_graph
from controller.tables import (ECMP_TABLE, ETH_TYPE_ARP, ETH_TYPE_IP, PRIO_ROUTE, FlowEntry, Multipath, Output,
                               SetField, SetReg, ToController, switch_flows)
from experiments.plan import build_fabric
from experiments.scenario import validate

FABRICS = {
    "spineleaf 3:1": {"kind": "spineleaf", "spines": 2, "leaves": 4, "hosts_per_leaf": 6},
    "fattree k=4": {"kind": "fattree", "k": 4},
    "dragonfly": {"kind": "dragonfly"},
}


def fabric_map(topology: dict) -> dict:
    return build_fabric(validate({"name": "t", "topology": topology})).to_map()


def tables_of(fmap: dict, mode: str = "ecmp") -> dict[str, list[FlowEntry]]:
    """Every switch's entries as the app installs them: routing strategy ``mode``'s ``switch_flows``."""
    strategy = strategy_for(fmap, mode)
    return {s["name"]: strategy.switch_flows(s["name"]) for s in fmap["switches"]}


def lookup(flows: list[FlowEntry], table_id: int, fields: dict) -> FlowEntry:
    """The highest-priority entry of ``table_id`` that matches (OpenFlow's lookup; ties are a defect)."""
    hits = [e for e in flows if e.table_id == table_id and e.matches(fields)]
    top = max(e.priority for e in hits)
    best = [e for e in hits if e.priority == top]
    assert len(best) == 1, f"overlapping entries of one priority: {best}"
    return best[0]


def multipath_link(five_tuple: tuple, basis: int, n_links: int) -> int:
    """A stand-in for OVS's symmetric L3/L4 hash with ``basis``, then hash-threshold (RFC 2992):
    the 16-bit hash space cut into ``n_links`` equal regions."""
    src, dst, proto, sport, dport = five_tuple
    key = repr((tuple(sorted((src, dst))), proto, tuple(sorted((sport, dport))), basis)).encode()
    h = int.from_bytes(hashlib.blake2b(key, digest_size=2).digest(), "big")
    return h * n_links >> 16


def run_tables(flows: list[FlowEntry], packet: dict, five_tuple: tuple) -> tuple[list, dict]:
    """Run one packet through a switch's tables; returns the final actions that send it (Output or
    ToController; [] when dropped) and the packet's header fields as it leaves (registers are the
    switch's own and do not leave with it)."""
    fields, table, sent = dict(packet), 0, []
    while True:
        e = lookup(flows, table, fields)
        for a in e.actions:
            if isinstance(a, SetReg):
                fields[a.reg] = a.value
            elif isinstance(a, SetField):
                fields[a.field] = a.value
            elif isinstance(a, Multipath):
                fields[a.dst] = multipath_link(five_tuple, a.basis, a.max_link + 1)
            else:
                sent.append(a)
        if e.goto_table is None:
            return sent, {k: v for k, v in fields.items() if not k.startswith("reg")}
        assert e.goto_table > table, "goto_table must move forward"
        table = e.goto_table


def pipeline(flows: list[FlowEntry], packet: dict, five_tuple: tuple) -> list:
    """The actions that send one packet out of a switch (:func:`run_tables`)."""
    return run_tables(flows, packet, five_tuple)[0]


def forward(fmap: dict, tables: dict, src: str, dst: str, sport: int = 40000, dport: int = 5001) -> list[str]:
    """The switches an IPv4 packet from host ``src`` to host ``dst`` crosses; AssertionError on a
    drop, a loop, a packet sent to the controller, delivery to the wrong host, or a frame that
    arrives with headers other than those it was sent with (:func:`forward_frame`)."""
    path, arrived = forward_frame(fmap, tables, src, dst, sport, dport)
    sent = frame(fmap, src, dst)
    assert {k: arrived[k] for k in sent if k != "in_port"} == {k: v for k, v in sent.items() if k != "in_port"}, \
        f"{src}->{dst} arrived as {arrived}, sent as {sent}"
    return path


def frame(fmap: dict, src: str, dst: str) -> dict:
    """The header fields of an IPv4 frame host ``src`` sends to host ``dst``, as its switch sees it."""
    hosts = {h["name"]: h for h in fmap["hosts"]}
    return {"eth_type": ETH_TYPE_IP, "eth_src": hosts[src]["mac"], "eth_dst": hosts[dst]["mac"],
            "ipv4_src": hosts[src]["ip"], "ipv4_dst": hosts[dst]["ip"], "in_port": hosts[src]["switch_port"]}


def forward_frame(fmap: dict, tables: dict, src: str, dst: str, sport: int = 40000, dport: int = 5001,
                  seen: list | None = None) -> tuple[list[str], dict]:
    """The switches a frame from host ``src`` to host ``dst`` crosses and its header fields as
    ``dst`` receives it (every rewrite the tables made carried from switch to switch, each switch
    seeing the port it arrived on as ``in_port``); ``seen`` collects the fields at each switch.
    AssertionError on a drop, a packet sent to the controller, delivery to the wrong host, or the
    same switch twice with the same headers (a loop)."""
    hosts = {h["name"]: h for h in fmap["hosts"]}
    ends = {(sw["name"], p["port"]): (p["peer"], p["peer_port"]) for sw in fmap["switches"] for p in sw["ports"]}
    five = (hosts[src]["ip"], hosts[dst]["ip"], 6, sport, dport)
    packet = frame(fmap, src, dst)
    sw, path, states = hosts[src]["switch"], [], set()
    while True:
        state = (sw, tuple(sorted((k, v) for k, v in packet.items() if k != "in_port")))
        assert state not in states, f"loop {path + [sw]}"
        states.add(state)
        path.append(sw)
        if seen is not None:
            seen.append(dict(packet))
        sent, packet = run_tables(tables[sw], packet, five)
        assert len(sent) == 1 and isinstance(sent[0], Output), f"{sw} sent {sent} for {src}->{dst}"
        nxt, port = ends[(sw, sent[0].port)]
        packet["in_port"] = port
        if nxt in hosts:
            assert nxt == dst, f"{src}->{dst} delivered to {nxt}"
            return path, packet
        sw = nxt


def shortest_switch_hops(fmap: dict, a: str, b: str) -> set[int]:
    g = nx.Graph()
    for u, v, d in switch_graph(fmap).edges(data=True):
        g.add_edge(u, v, weight=d["cost"])
    return {len(p) for p in nx.all_shortest_paths(g, a, b, weight="weight")}


@pytest.mark.parametrize("name", list(FABRICS))
def test_every_host_pair_is_delivered_on_a_minimal_path(name):
    fmap = fabric_map(FABRICS[name])
    tables = tables_of(fmap)
    hosts = {h["name"]: h["switch"] for h in fmap["hosts"]}
    pairs = list(itertools.permutations(hosts, 2))
    for src, dst in pairs[:: max(1, len(pairs) // 300)]:
        for sport in (40000, 40001, 40002, 40003):
            path = forward(fmap, tables, src, dst, sport)
            assert len(path) in shortest_switch_hops(fmap, hosts[src], hosts[dst]) if hosts[src] != hosts[dst] \
                else path == [hosts[src]]


@pytest.mark.parametrize("name", ["spineleaf 3:1", "fattree k=4"])
def test_ecmp_spreads_a_pairs_flows_over_every_equal_cost_path(name):
    fmap = fabric_map(FABRICS[name])
    tables = tables_of(fmap)
    src, dst = fmap["hosts"][0]["name"], fmap["hosts"][-1]["name"]
    paths = {tuple(forward(fmap, tables, src, dst, sport)) for sport in range(40000, 40256)}
    g = switch_graph(fmap)
    a, b = fmap["hosts"][0]["switch"], fmap["hosts"][-1]["switch"]
    assert len(paths) == len(list(nx.all_shortest_paths(nx.Graph(g), a, b)))


def test_single_path_routing_gives_each_pair_one_path():
    fmap = fabric_map(FABRICS["fattree k=4"])
    tables = tables_of(fmap, "single")
    src, dst = fmap["hosts"][0]["name"], fmap["hosts"][-1]["name"]
    assert len({tuple(forward(fmap, tables, src, dst, sport)) for sport in range(40000, 40064)}) == 1
    assert not any(e.table_id == ECMP_TABLE and e.actions for es in tables.values() for e in es)


def test_arp_goes_to_the_controller_and_anything_unknown_is_dropped():
    fmap = fabric_map(FABRICS["spineleaf 3:1"])
    flows = tables_of(fmap)["leaf1"]
    assert pipeline(flows, {"eth_type": ETH_TYPE_ARP}, ()) == [ToController()]
    assert pipeline(flows, {"eth_type": ETH_TYPE_IP, "ipv4_dst": "192.0.2.1"}, ()) == []   # not a fabric host
    assert pipeline(flows, {"eth_type": 0x86DD}, ()) == []                                # IPv6: no route


def test_every_ecmp_link_index_has_an_output_and_no_more():
    """Table 1 holds exactly one entry per (port set, link index) that multipath can write."""
    fmap = fabric_map(FABRICS["fattree k=4"])
    for sw, flows in tables_of(fmap).items():
        sets = {}
        for e in flows:
            for a in e.actions:
                if isinstance(a, SetReg):
                    mp = next(x for x in e.actions if isinstance(x, Multipath))
                    sets[a.value] = mp.max_link + 1
        outs = {(dict(e.match)["reg1"], dict(e.match)["reg0"]) for e in flows
                if e.table_id == ECMP_TABLE and e.priority == PRIO_ROUTE}
        assert outs == {(s, link) for s, n in sets.items() for link in range(n)}, sw


@pytest.mark.parametrize("mode", ["ecmp", "single"])
def test_per_destination_strategies_install_the_per_destination_tables(mode):
    """``ecmp`` and ``single`` install exactly controller.tables.switch_flows over their routes."""
    fmap = fabric_map(FABRICS["fattree k=4"])
    routes = compute_routes(fmap, mode)
    assert tables_of(fmap, mode) == {s["name"]: switch_flows(routes[s["name"]], hash_basis(i))
                                     for i, s in enumerate(fmap["switches"])}

