"""The controller's ECN port manager (controller.ecn.ports.EcnPorts) with a fake marker and a fake
tc, driven through the controller's REST API (controller.rest) as the runner drives it: the plan
applied when the fabric starts, profiles changed between rounds, only changed ports counted, a bad
port refused with the error, counters read, and kernel RED vs FIFO chosen per profile. No root,
no BPF, no qdiscs."""
import json
import urllib.error
import urllib.request

import pytest

from common.errors import ScenarioError, SetupError
from controller.ecn.ports import EcnPorts
from controller.rest import ControlApi, ControlClient, serve
from experiments.features.ecn.plan import ecn_plan
from experiments.plan import check_against_fabric
from experiments.scenario import validate


class FakeMarker:
    def __init__(self):
        self.attached, self.configured = [], []

    def attach(self, intf):
        self.attached.append(intf)

    def configure(self, ifindex, prof, rate_bps, buffer_bytes, burst_bytes, reset=False):
        self.configured.append((ifindex, prof.kind, reset))

    def ids(self):
        return {"counters_map_id": 7}

    def read(self, ifindex):
        return {"packets": 10, "marked": ifindex % 7}


class FakeTc:
    def __init__(self):
        self.calls = []

    def install_fifo_leaf(self, intf, kind, limit):
        self.calls.append(("fifo", intf, kind, limit))

    def install_red(self, intf, rate_bps, buffer_bytes, prof):
        self.calls.append(("red", intf, prof.kind))


def plan(marker: str):
    sc = validate({"name": "t", "topology": {"kind": "spineleaf", "spines": 1, "leaves": 2, "hosts_per_leaf": 2},
                   "ecn": {"marker": marker, "profile": {"step": {"k_packets": 20}}},
                   "traffic": {"senders": 2}})
    _, fmap, _, _, profiles = check_against_fabric(sc)
    return ecn_plan(sc, fmap, marker, profiles[0], slack_s=100e-6)


def ports(tmp_path, marker="bpf"):
    m, tc = FakeMarker(), FakeTc()
    p = plan(marker)
    ep = EcnPorts(p, tmp_path, load_marker=lambda: m, tc=tc, ifindex=lambda intf: hash(intf) % 1000)
    return ep, p, m, tc


def test_a_start_with_a_profile_its_port_cannot_hold_touches_nothing(tmp_path):
    """A start request's profiles are checked before the marker is loaded or a port touched."""
    m, tc = FakeMarker(), FakeTc()
    p = plan("bpf")
    first = sorted(p.ports)[0]
    bad = p.model_copy(update={"ports": {**p.ports, first: p.ports[first].model_copy(
        update={"profile": {"step": {"k_bytes": 10 ** 9}}})}})
    loads = []
    ep = EcnPorts(bad, tmp_path, load_marker=lambda: loads.append(1) or m, tc=tc, ifindex=lambda intf: 1)
    with pytest.raises(ScenarioError, match=f"ecn.ports.{first}"):
        ep.start()
    assert loads == [] and m.attached == [] and m.configured == [] and tc.calls == [] and ep.current == {}


def test_start_attaches_the_marker_to_every_port_and_records_its_maps(tmp_path):
    ep, p, m, _ = ports(tmp_path)
    rec = ep.start()
    assert sorted(m.attached) == sorted(p.ports) and rec == {"marker": "bpf", "ports": len(p.ports),
                                                                "counters_map_id": 7}
    assert all(kind == "step" and reset for _, kind, reset in m.configured)
    assert json.loads((tmp_path / "ecn_marker.json").read_text()) == rec


@pytest.fixture()
def api(tmp_path):
    """EcnPorts behind a live REST server on a free port, and the runner's client."""
    ep, p, m, tc = ports(tmp_path)
    started = []

    def start_ecn(msg):
        assert msg == p           # the plan came through the request intact
        started.append(msg)
        return ep.start()
    server = serve(ControlApi(lambda: {"ok": True}, lambda: ep if started else None, lambda: None,
                              start_ecn=start_ecn, token="t0k"), "127.0.0.1", 0)
    yield ep, p, m, ControlClient(f"http://127.0.0.1:{server.server_address[1]}", token="t0k")
    server.shutdown()
    server.server_close()


def test_a_round_changes_profiles_through_the_api_and_counts_only_changes(api):
    ep, p, m, client = api
    assert client.call("POST", "/ecn/start", p.to_json())["record"]["marker"] == "bpf"
    first = sorted(p.ports)[0]
    same = p.ports[first].profile          # the profile it has: nothing changes
    assert client.call("PUT", "/ecn", {"ports": {first: same}}) == {"applied": 0}
    assert client.call("PUT", "/ecn", {"ports": {first: "off"}}) == {"applied": 1}
    assert ep.current[first].kind == "off" and m.configured[-1][1:] == ("off", False)
    now = client.call("GET", "/ecn")
    assert now["marker"] == "bpf" and now["ports"][first] == "off" and len(now["ports"]) == len(p.ports)
    counters = client.call("GET", "/ecn/counters")
    assert set(counters) == set(p.ports) and all(c["packets"] == 10 for c in counters.values())


def test_a_port_outside_the_fabric_is_refused_with_the_error(api):
    ep, p, _, client = api
    client.call("POST", "/ecn/start", p.to_json())
    with pytest.raises(SetupError, match="nosuch-eth9 is not a switch port"):
        client.call("PUT", "/ecn", {"ports": {"nosuch-eth9": "off"}}, what="ECN")
    with pytest.raises(SetupError, match=r"ecn.ports.leaf1-eth1: expected 'off'"):
        client.call("PUT", "/ecn", {"ports": {"leaf1-eth1": {"bogus": 1}}})


def test_kernel_red_replaces_the_fifo_for_marking_profiles_and_puts_it_back_for_off(tmp_path):
    ep, p, _, tc = ports(tmp_path, marker="red")
    ep.start()
    assert {c[0] for c in tc.calls} == {"red"} and len(tc.calls) == len(p.ports)
    first = sorted(p.ports)[0]
    ep.apply({first: "off"})
    assert tc.calls[-1] == ("fifo", first, p.ports[first].fifo.kind, p.ports[first].fifo.limit)


def test_a_profile_the_port_cannot_hold_is_refused_and_nothing_changes(api):
    """A misspelt threshold, a negative one, or K at or above the port's buffer (it could never
    mark): 400 naming the key, and no port changed; an unknown port: 404; a method the path does
    not take: 405."""
    ep, p, m, client = api
    client.call("POST", "/ecn/start", p.to_json())
    first, second = sorted(p.ports)[:2]
    before = dict(ep.current)
    for spec, key in [({"step": {"k_bites": 15140}}, f"ecn.ports.{first}.step.k_bites"),
                      ({"step": {"k_bytes": -5}}, f"ecn.ports.{first}.step.k_bytes"),
                      ({"step": {"k_bytes": 99_999_999}}, f"ecn.ports.{first}.step.k_bytes")]:
        with pytest.raises(SetupError, match=key.replace(".", r"\.")):
            client.call("PUT", "/ecn", {"ports": {second: "off", first: spec}})
    assert ep.current == before
    with pytest.raises(SetupError, match="nosuch-eth9 is not a switch port"):
        client.call("PUT", "/ecn", {"ports": {"nosuch-eth9": "off"}})
    code = None
    try:
        urllib.request.urlopen(urllib.request.Request(client.url + "/fabriclab/ecn", method="DELETE",
                                                          headers=client.headers), timeout=5)
    except urllib.error.HTTPError as e:
        code, body = e.code, json.loads(e.read())
    assert code == 405 and "use GET, PUT" in body["error"]
