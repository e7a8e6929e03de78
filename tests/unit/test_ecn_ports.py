"""The controller's ECN port manager (controller.ecnports.EcnPorts) with a fake marker and a fake
tc: the plan applied when the fabric starts, profiles changed between rounds through the control
folder's requests, only changed ports counted, a bad port refused in the ack, and kernel RED vs
FIFO chosen per profile. No root, no BPF, no qdiscs."""
import json

from controller.ecnports import EcnPorts, request
from experiments.features.ecn import ecn_plan
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
    return ecn_plan(sc, fmap, marker, profiles[0])


def ports(tmp_path, marker="bpf"):
    m, tc = FakeMarker(), FakeTc()
    p = plan(marker)
    ep = EcnPorts(p, tmp_path, load_marker=lambda: m, tc=tc, ifindex=lambda intf: hash(intf) % 1000)
    return ep, p, m, tc


def test_start_attaches_the_marker_to_every_port_and_records_its_maps(tmp_path):
    ep, p, m, _ = ports(tmp_path)
    rec = ep.start()
    assert sorted(m.attached) == sorted(p["ports"]) and rec == {"marker": "bpf", "ports": len(p["ports"]),
                                                                "counters_map_id": 7}
    assert all(kind == "step" and reset for _, kind, reset in m.configured)
    assert json.loads((tmp_path / "ecn_marker.json").read_text()) == rec


def test_a_round_changes_profiles_through_the_control_folder_and_counts_only_changes(tmp_path):
    ep, p, m, _ = ports(tmp_path)
    ep.poll()                                   # nothing asked yet
    (tmp_path / "req-1.json").write_text(json.dumps({"start": True}))
    ep.poll()
    assert json.loads((tmp_path / "ack-1.json").read_text())["ok"]
    first = sorted(p["ports"])[0]
    same = p["ports"][first]["profile"]          # the profile it has: nothing changes
    off = "off"
    (tmp_path / "req-2.json").write_text(json.dumps({"ports": {first: same}}))
    ep.poll()
    assert json.loads((tmp_path / "ack-2.json").read_text()) == {"ok": True, "applied": 0}
    (tmp_path / "req-3.json").write_text(json.dumps({"ports": {first: off}}))
    ep.poll()
    assert json.loads((tmp_path / "ack-3.json").read_text()) == {"ok": True, "applied": 1}
    assert ep.current[first].kind == "off" and m.configured[-1][1:] == ("off", False)


def test_a_port_outside_the_fabric_is_refused_in_the_ack(tmp_path):
    ep, *_ = ports(tmp_path)
    ep.start()
    (tmp_path / "req-1.json").write_text(json.dumps({"ports": {"nosuch-eth9": "off"}}))
    ep.poll()
    ack = json.loads((tmp_path / "ack-1.json").read_text())
    assert ack["ok"] is False and "nosuch-eth9" in ack["error"]


def test_kernel_red_replaces_the_fifo_for_marking_profiles_and_puts_it_back_for_off(tmp_path):
    ep, p, _, tc = ports(tmp_path, marker="red")
    ep.start()
    assert {c[0] for c in tc.calls} == {"red"} and len(tc.calls) == len(p["ports"])
    first = sorted(p["ports"])[0]
    ep.apply({first: "off"})
    assert tc.calls[-1] == ("fifo", first, p["ports"][first]["fifo"]["kind"], p["ports"][first]["fifo"]["limit"])


def test_the_runner_side_of_the_folder_gets_the_ack(tmp_path):
    """controller.ecnports.request (the runner's side) against a poll that answers at once."""
    ep, *_ = ports(tmp_path)

    def alive():
        ep.poll()
        return True
    assert request(tmp_path, {"start": True}, timeout_s=5, is_alive=alive)["ok"]
