"""The controller's flow tables (controller.flowtables), checked by forwarding packets through them:
a small simulation of the OpenFlow pipeline (table 0, registers, OVS multipath's hash-threshold
pick, table 1) over every switch of a fabric, hop by hop along the fabric map's links. No switch,
no root: what each switch would do with a packet, from the entries the controller installs."""
import hashlib
import itertools

import networkx as nx
import pytest

from controller.routing import compute_routes, hash_basis, strategy_for, switch_graph
from controller.flowtables import (ECMP_TABLE, ETH_TYPE_ARP, ETH_TYPE_IP, PRIO_ROUTE, FlowEntry, Multipath,
                                   Output, SetField, SetReg, ToController, switch_flows)
from experiments.plan import build_fabric
from topologies.dragonfly import Dragonfly
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
    """``ecmp`` and ``single`` install exactly controller.flowtables.switch_flows over their routes."""
    fmap = fabric_map(FABRICS["fattree k=4"])
    routes = compute_routes(fmap, mode)
    assert tables_of(fmap, mode) == {s["name"]: switch_flows(routes[s["name"]], hash_basis(i))
                                     for i, s in enumerate(fmap["switches"])}


# -- Valiant on the Dragonfly (controller.routing.valiant) ------------------------------------------

def _groups(fmap: dict) -> tuple[dict, dict]:
    of = {s["name"]: s["group"] for s in fmap["switches"]}
    return of, {h["name"]: of[h["switch"]] for h in fmap["hosts"]}


@pytest.mark.parametrize("shape", [{}, {"groups": 3, "routers_per_group": 2, "hosts_per_router": 1,
                                        "global_links_per_router": 1}])
def test_valiant_delivers_every_pair_through_an_intermediate_group(shape):
    """Every host pair is delivered with the headers it was sent with (the tag never reaches a host),
    loop-free; a flow across groups crosses exactly one other group (entered and left over global
    links, two global links in all), a flow inside one group stays on its minimal path, untagged."""
    fmap = Dragonfly(**shape).build().to_map()
    tables = tables_of(fmap, "valiant")
    group_of, host_group = _groups(fmap)
    hosts = {h["name"]: h["switch"] for h in fmap["hosts"]}
    pairs = list(itertools.permutations(hosts, 2))
    for src, dst in pairs[:: max(1, len(pairs) // 200)]:
        for sport in (40000, 40001, 40002):
            seen = []
            path, _ = forward_frame(fmap, tables, src, dst, sport, seen=seen)
            forward(fmap, tables, src, dst, sport)              # and arrives as it was sent
            groups = list(dict.fromkeys(group_of[sw] for sw in path))
            if host_group[src] == host_group[dst]:
                assert groups == [host_group[src]]
                assert len(path) in shortest_switch_hops(fmap, hosts[src], hosts[dst]) if hosts[src] != hosts[dst] \
                    else path == [hosts[src]]
                assert all(f["eth_src"] == seen[0]["eth_src"] for f in seen)       # never tagged
            else:
                assert len(groups) == 3 and groups[0] == host_group[src] and groups[2] == host_group[dst], path
                assert [group_of[sw] for sw in path] == sorted((group_of[sw] for sw in path), key=groups.index)


def test_valiant_spreads_one_pairs_flows_over_every_other_group():
    """Flows of one host pair (different source ports) go through every group but the two ends,
    about equally (the source router's hash over the 3 candidates of the default Dragonfly)."""
    fmap = fabric_map(FABRICS["dragonfly"])
    tables = tables_of(fmap, "valiant")
    group_of, host_group = _groups(fmap)
    src, dst = "h1", "h9"                                   # g1 -> g2
    via = {}
    for sport in range(40000, 40300):
        path = forward(fmap, tables, src, dst, sport)
        (mid,) = {group_of[sw] for sw in path} - {host_group[src], host_group[dst]}
        via[mid] = via.get(mid, 0) + 1
    assert set(via) == {"g3", "g4", "g5"}
    assert min(via.values()) > 60, via                      # 100 each expected; 300 flows


def test_valiant_tags_with_a_reserved_mac_and_rewrites_nothing_else():
    """Between the phases only eth_src changes, to a locally administered unicast MAC no host has;
    nothing is pushed (no VLAN), the destination MAC and the IP header are never touched, and no
    BPF program on the ports reads the Ethernet source."""
    from pathlib import Path

    from controller.routing.valiant import TAG_PREFIX, tag_mac
    fmap = fabric_map(FABRICS["dragonfly"])
    tables = tables_of(fmap, "valiant")
    macs = {h["mac"] for h in fmap["hosts"]}
    written = {(a.field, a.value) for es in tables.values() for e in es for a in e.actions if isinstance(a, SetField)}
    assert {f for f, _ in written} == {"eth_src"}
    tags = {v for _, v in written if v.startswith(TAG_PREFIX)}
    assert tags == {tag_mac(i) for i in range(5)}
    for t in tags:
        first = int(t.split(":")[0], 16)
        assert first & 0x02 and not first & 0x01 and t not in macs
    assert {v for _, v in written} - tags <= macs              # the other rewrites put a host's MAC back
    seen = []
    forward_frame(fmap, tables, "h1", "h9", seen=seen)
    assert any(f["eth_src"] in tags for f in seen)
    assert {(f["eth_dst"], f["ipv4_src"], f["ipv4_dst"], f["eth_type"]) for f in seen} == \
        {(seen[0]["eth_dst"], seen[0]["ipv4_src"], seen[0]["ipv4_dst"], ETH_TYPE_IP)}
    for c in (Path(__file__).parents[2] / "controller" / "bpf").glob("*.c"):
        assert "h_source" not in c.read_text(), c


def test_valiant_refuses_a_fabric_without_groups():
    with pytest.raises(ValueError, match="at least 3 groups"):
        strategy_for(fabric_map(FABRICS["fattree k=4"]), "valiant")
    with pytest.raises(ValueError, match="at least 3 groups"):
        strategy_for(Dragonfly(groups=2, routers_per_group=1, global_links_per_router=1).build().to_map(), "valiant")


def test_a_traced_path_carries_the_tag_from_switch_to_switch():
    """experiments.paths.traced_path over a tracer that answers from the Valiant tables (as
    ovs-appctl ofproto/trace answers from a switch's): each switch gets the Ethernet source the
    previous one left, so the walk follows the flow through its intermediate group."""
    from experiments.paths import traced_path
    fmap = fabric_map(FABRICS["dragonfly"])
    tables = tables_of(fmap, "valiant")
    ip_of = {h["ip"]: h for h in fmap["hosts"]}

    def trace(bridge, flow):
        f = dict(kv.split("=", 1) for kv in flow.split(",") if "=" in kv)
        packet = {"eth_type": ETH_TYPE_IP, "in_port": int(f["in_port"]), "ipv4_src": f["nw_src"],
                  "ipv4_dst": f["nw_dst"], "eth_src": f.get("dl_src", "00:00:00:00:00:00"),
                  "eth_dst": ip_of[f["nw_dst"]]["mac"]}
        sent, out = run_tables(tables[bridge], packet, (f["nw_src"], f["nw_dst"], 6, int(f["tcp_src"]),
                                                        int(f["tcp_dst"])))
        return sent[0].port, ({"dl_src": out["eth_src"]} if out["eth_src"] != packet["eth_src"] else {})

    for sport in (40000, 40001, 40002, 40003):
        links = traced_path(fmap, "h1", "h9", sport, 5001, trace=trace)
        nodes = ["h1"] + [b for _a, b in links]
        assert nodes[1:-1] == forward(fmap, tables, "h1", "h9", sport, 5001)
        assert {n[:2] for n in nodes[1:-1]} - {"g1", "g2"}              # through another group


def test_ovs_trace_hop_reads_the_output_port_and_a_rewritten_source(monkeypatch):
    """controller.dataplane.ovsctl.ovs_trace_hop on ofproto/trace's text: the last output port, and
    dl_src from the Final flow only where the tables changed it."""
    from controller.dataplane import ovsctl
    text = ("Flow: tcp,in_port=1,vlan_tci=0x0000,dl_src=00:00:00:00:00:00,dl_dst=00:00:00:00:00:00,nw_src=10.1.1.2\n"
            "bridge(\"g1r1\")\n 2. reg0=0x1,reg1=0x2, priority 200\n    set_field:0a:76:6c:62:00:03->eth_src\n"
            "    output:6\n\nFinal flow: tcp,reg0=0x1,reg1=0x2,in_port=1,vlan_tci=0x0000,dl_src=0a:76:6c:62:00:03,"
            "dl_dst=00:00:00:00:00:00,nw_src=10.1.1.2\nMegaflow: ...\nDatapath actions: set(eth(src=0a:76:6c:62:00:03)),6\n")
    monkeypatch.setattr(ovsctl, "run", lambda argv: text)
    assert ovsctl.ovs_trace_hop("g1r1", "in_port=1,tcp") == (6, {"dl_src": "0a:76:6c:62:00:03"})
    assert ovsctl.ovs_trace_hop("g1r1", "in_port=1,tcp,dl_src=0a:76:6c:62:00:03") == (6, {})
    monkeypatch.setattr(ovsctl, "run", lambda argv: "bridge(\"x\")\n    output:3\n\nFinal flow: unchanged\n")
    assert ovsctl.ovs_trace_hop("x", "in_port=1,tcp") == (3, {})
