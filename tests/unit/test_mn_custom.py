"""`mn --custom topologies/mn_custom.py --topo ...` builds the same fabrics as the runner."""
import pytest

from topologies import mn_custom


def test_specs_match_builders():
    ft = mn_custom.build("fattree,4")
    assert (len(ft.hosts), len(ft.switches), ft.kind) == (16, 20, "fattree")
    sl = mn_custom.build("spineleaf,2,2,3")
    assert (len(sl.hosts), len(sl.switches), sl.kind) == (6, 4, "spineleaf")
    assert mn_custom.build("spineleaf,2,4,6,10,10").params["oversubscription"] == 3.0


def test_mininet_topos_have_the_fabric_nodes():
    pytest.importorskip("mininet.topo")
    t = mn_custom.topos["fattree"](4)
    assert len(t.hosts()) == 16 and len(t.switches()) == 20 and len(t.links()) == 48
    assert t.nodeInfo("p0e1")["dpid"] == f"{(5 << 16) | 1:016x}"


def test_unknown_topology():
    with pytest.raises(ValueError, match="unknown topology"):
        mn_custom.build("torus,3")


@pytest.mark.parametrize("probed", ["kernel", "user"])
def test_fabriclab_switch_takes_the_probed_datapath(monkeypatch, probed):
    """`mn --switch fabriclab`: Open vSwitch on OpenFlow 1.3, fail mode secure, on the datapath
    common.datapath chooses (the machine here lacks the openvswitch module: user; a stock kernel
    has it: kernel); an explicit ``datapath=`` wins. (Mininet's constructor itself is faked: a
    real one starts a shell.)"""
    node = pytest.importorskip("mininet.node")
    seen = {}
    monkeypatch.setattr(node.OVSSwitch, "__init__", lambda self, name, **kw: seen.update(kw, name=name))
    monkeypatch.setattr(mn_custom, "chosen_datapath", lambda: probed)
    cls = mn_custom.switches["fabriclab"]
    assert issubclass(cls, node.OVSSwitch)
    cls("l1", dpid="0000000000000001")
    assert seen == {"name": "l1", "datapath": probed, "protocols": "OpenFlow13", "failMode": "secure",
                    "dpid": "0000000000000001"}
    cls("l2", datapath="user")
    assert seen["datapath"] == "user"


def test_fabriclab_controller_checks_with_a_plain_connection(monkeypatch):
    """`mn --controller fabriclab`: the check connects and reads nothing (Mininet's own reads the
    controller's first bytes as UTF-8 and failed on an OpenFlow HELLO); it warns when nothing
    listens, as Mininet's does."""
    import socket
    from types import SimpleNamespace
    pytest.importorskip("mininet.node")
    warned = []
    monkeypatch.setattr(mn_custom, "warn", warned.append)
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        mn_custom.FabriclabController.checkListening(SimpleNamespace(ip="127.0.0.1", port=port))
        assert warned == []
    mn_custom.FabriclabController.checkListening(SimpleNamespace(ip="127.0.0.1", port=port))
    assert len(warned) == 1 and f"127.0.0.1:{port}" in warned[0]
    assert mn_custom.controllers == {"fabriclab": mn_custom.FabriclabController}
