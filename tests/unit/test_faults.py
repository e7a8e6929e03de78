"""Fault injectors (controller.faults: pure), the controller's fault manager
(controller.faultports) with a fake data plane and a real clock, its REST routes, and the port
counters' table and text (controller.portstats)."""
import threading
import time

import pytest

from common.errors import ScenarioError
from controller.dataplane.tcqdisc import HtbClass
from controller.faultports import FaultPorts
from controller.faults import FAULTS, FrameDrop, LinkFlap, RateLimit, link_directions, parse_fault
from controller.messages import FaultsAdd, MessageError
from controller.portstats import dump_ports_text, port_table, switch_ports
from controller.rest import ControlApi
from topologies import FatTree, SpineLeaf

MAP = FatTree(k=4).build().to_map()


def test_every_injector_is_registered_with_a_place_and_a_layer():
    assert {"corrupt", "degrade", "drop", "flap", "slow_host"} <= set(FAULTS)      # a new kind only adds
    for cls in FAULTS.values():
        assert cls.TARGET in ("link", "switch", "host") and cls.LAYER in ("physical", "switch", "host")
        assert cls.__doc__ and cls.PARAMS


def test_link_places_name_one_direction_or_both():
    (d,) = link_directions(MAP, "p0a1->c1")
    assert (d.tx_intf, d.rx_intf, d.rate_mbps) == ("p0a1-eth3", "c1-eth1", 10.0)
    fwd, back = link_directions(MAP, "p0a1<->c1")
    assert (back.tx_node, back.rx_node) == ("c1", "p0a1")
    for bad, why in (("p0a1-c1", "expected a link"), ("p0a1->c9", "no node 'c9'"), ("h1->p0a1", "no link")):
        with pytest.raises(ScenarioError, match=why):
            link_directions(MAP, bad)


def test_parallel_links_need_the_senders_port():
    sl = SpineLeaf(spines=1, leaves=2, hosts_per_leaf=1, uplinks_per_spine=2).build().to_map()
    with pytest.raises(ScenarioError, match="2 parallel links join leaf1 and spine1: name the port"):
        link_directions(sl, "leaf1->spine1")
    (d,) = link_directions(sl, "leaf1:3->spine1")
    assert (d.tx_intf, d.rx_intf) == ("leaf1-eth3", "spine1-eth2")


def test_each_injector_acts_where_its_fault_is():
    corrupt = parse_fault(MAP, {"kind": "corrupt", "link": "p0a1->c1", "frame_fraction": 0.02})
    assert FAULTS["corrupt"].actions(MAP, corrupt) == (FrameDrop("c1", "c1-eth1", 0.02, "rx_errors"),)
    degrade = parse_fault(MAP, {"kind": "degrade", "link": "p0a1<->c1", "rate_fraction": 0.3})
    assert FAULTS["degrade"].actions(MAP, degrade) == (RateLimit("p0a1", "p0a1-eth3", 3.0, 10.0, "c1-eth1"),
                                                        RateLimit("c1", "c1-eth1", 3.0, 10.0, "p0a1-eth3"))
    drop = parse_fault(MAP, {"kind": "drop", "switch": "p0a1", "ports": [1, 3]})
    assert [(a.intf, a.counter) for a in FAULTS["drop"].actions(MAP, drop)] == [("p0a1-eth1", "none"),
                                                                              ("p0a1-eth3", "none")]
    assert len(FAULTS["drop"].actions(MAP, parse_fault(MAP, {"kind": "drop", "switch": "c1"}))) == 4
    flap = parse_fault(MAP, {"kind": "flap", "link": "p0e1<->p0a1", "down_s": 0.5, "up_s": 0.25, "flaps": 2})
    assert FAULTS["flap"].actions(MAP, flap) == (LinkFlap("p0e1", "p0e1-eth3", "p0a1-eth1", 0.5, 0.25, 2),)
    slow = parse_fault(MAP, {"kind": "slow_host", "host": "h3", "rate_fraction": 0.25, "start_s": 1, "stop_s": 2})
    assert FAULTS["slow_host"].actions(MAP, slow) == (RateLimit("h3", "h3-eth0", 2.5, 10.0),)
    assert (slow.start_s, slow.stop_s) == (1.0, 2.0)
    assert slow.to_data() == {"kind": "slow_host", "host": "h3", "rate_fraction": 0.25, "start_s": 1.0, "stop_s": 2.0}


@pytest.mark.parametrize("data, key, why", [
    ({"kind": "x"}, "faults[0].kind", "must be one of corrupt"),
    ({"kind": "corrupt"}, "faults[0].link", "names its link"),
    ({"kind": "corrupt", "link": "p0a1->c1", "rate_fraction": 0.5}, "faults[0].rate_fraction", "unknown key"),
    ({"kind": "corrupt", "link": "p0a1->c1", "frame_fraction": 1.5}, "faults[0].frame_fraction", "<= 1.0"),
    ({"kind": "corrupt", "link": "p0a1->c1", "frame_fraction": True}, "faults[0].frame_fraction", "boolean"),
    ({"kind": "degrade", "link": "p0a1->c1", "start_s": 2, "stop_s": 1}, "faults[0].stop_s", "after start_s"),
    ({"kind": "degrade", "link": "p0a1->c1", "start_s": -1}, "faults[0].start_s", "between 0"),
    ({"kind": "drop", "switch": "p0a1", "ports": [9]}, "faults[0].ports", "no port 9"),
    ({"kind": "drop", "switch": "zz"}, "faults[0].switch", "no switch"),
    ({"kind": "slow_host", "host": "h99"}, "faults[0].host", "no host"),
    ({"kind": "flap", "link": "p0a1->c1", "down_s": 0.01}, "faults[0].down_s", ">= 0.05"),
])
def test_bad_faults_name_their_key(data, key, why):
    with pytest.raises(ScenarioError, match=why) as e:
        parse_fault(MAP, data)
    assert e.value.key == key


class FakeDrop:
    def __init__(self, intf, fraction):
        self.intf, self.fraction, self.obj, self.seen = intf, fraction, object(), 0

    def counters(self):
        return {"seen_packets": self.seen, "seen_bytes": 1000 * self.seen,
                "dropped_packets": round(self.seen * self.fraction), "dropped_bytes": 1000 * round(self.seen * self.fraction)}

    def close(self):
        self.obj = None


class FakePlane:
    """Records every data-plane call with the time; classes start at 10 Mbit/s."""

    def __init__(self):
        self.calls, self.classes, self.drops, self.t0 = [], {}, {}, time.monotonic()

    def _log(self, *what):
        self.calls.append((round(time.monotonic() - self.t0, 3), *what))

    def frame_drop(self, intf, fraction, pid):
        self._log("xdp", intf, fraction, pid)
        self.drops[intf] = FakeDrop(intf, fraction)
        return self.drops[intf]

    def htb_class(self, intf, pid):
        return self.classes.setdefault(intf, HtbClass(10_000_000, 10_000_000, 1875, 1875, 150, 150, 125000, 0))

    def set_htb_class(self, intf, cls, pid):
        self._log("rate", intf, cls.ceil_bps, pid)
        self.classes[intf] = cls
        return cls

    def set_link_up(self, intf, up, pid):
        self._log("up" if up else "down", intf, pid)


def manager():
    plane = FakePlane()
    fp = FaultPorts(MAP, apply=plane)
    fp.set_hosts({f"h{i}": 1000 + i for i in range(1, 17)})
    return fp, plane


def test_faults_are_applied_taken_back_and_recorded():
    fp, plane = manager()
    ids = fp.add([parse_fault(MAP, {"kind": "corrupt", "link": "p0e1->h1", "frame_fraction": 0.1}),
                  parse_fault(MAP, {"kind": "slow_host", "host": "h3", "rate_fraction": 0.5, "stop_s": 0.2})])
    assert ids == [1, 2]
    time.sleep(0.1)
    plane.drops["h1-eth0"].seen = 1000          # frames arrived on h1 (in its namespace: pid 1001)
    assert fp.live_rx_errors() == {"h1-eth0": 100}
    time.sleep(0.3)
    assert plane.classes["h3-eth0"].ceil_bps == 10_000_000     # stopped at 0.2 s: put back
    recs = fp.remove_all()
    assert [r["state"] for r in recs] == ["removed", "removed"] and fp.records() == []
    corrupt, slow = recs
    assert (corrupt["frames_seen"], corrupt["frames_dropped"], corrupt["drop_fraction_measured"]) == (1000, 100, 0.1)
    assert slow["rates"]["h3-eth0"]["applied_mbps"] == 5.0 and slow["rates"]["h3-eth0"]["restored"] is True
    assert fp.link_speeds() == {}                           # a slow host's link keeps its speed
    assert 0.15 < slow["removed_at_s"] < 0.35 and corrupt["layer"] == "physical" and slow["layer"] == "host"
    assert ("xdp", "h1-eth0", 0.1, 1001) in [c[1:] for c in plane.calls]
    assert fp.live_rx_errors() == {"h1-eth0": 100}          # a port's counter outlives the fault


def test_a_flap_follows_its_schedule_and_ends_up():
    fp, plane = manager()
    fp.add([parse_fault(MAP, {"kind": "flap", "link": "p0e1<->p0a1", "down_s": 0.1, "up_s": 0.05, "flaps": 2})])
    time.sleep(0.5)
    (rec,) = fp.remove_all()
    steps = [(c[1], round(c[0], 1)) for c in plane.calls]
    assert [s for s, _ in steps] == ["down", "up", "down", "up", "up"], steps   # the last: taken back
    (d1, u1), (d2, u2) = [(f["down_at_s"], f["up_at_s"]) for f in rec["flaps"]]
    assert abs(u1 - d1 - 0.1) < 0.03 and abs(d2 - u1 - 0.05) < 0.03 and abs(u2 - d2 - 0.1) < 0.03


def test_faults_not_started_never_start_and_clashes_are_refused():
    fp, plane = manager()
    fp.add([parse_fault(MAP, {"kind": "degrade", "link": "p0e1->p0a1", "start_s": 5})])
    with pytest.raises(ScenarioError, match="already acts on p0e1-eth3"):
        fp.add([parse_fault(MAP, {"kind": "degrade", "link": "p0e1<->p0a1"})])
    fp.add([parse_fault(MAP, {"kind": "corrupt", "link": "p0a1->p0e1"})])   # another mechanism: allowed
    recs = fp.remove_all()
    assert recs[0]["state"] == "not started" and not [c for c in plane.calls if c[1] == "rate"]


def test_a_host_fault_needs_the_hosts_namespaces():
    fp = FaultPorts(MAP, apply=FakePlane())
    fp.add([parse_fault(MAP, {"kind": "slow_host", "host": "h2"})])
    time.sleep(0.1)
    (rec,) = fp.remove_all()
    assert rec["state"] == "failed" and "POST /fabriclab/hosts" in rec["error"]


OWNER = "Bearer t0k"     # the token the ControlApis below were given


def test_the_rest_routes_add_list_and_remove_faults():
    fp, plane = manager()
    api = ControlApi(dict, lambda: None, lambda: None, faults=fp, ports=lambda: [{"intf": "x"}],
                     token="t0k")
    code, out = api.handle("POST", "/fabriclab/faults", {"kind": "degrade", "link": "p0a1->c1"}, OWNER)
    assert (code, out) == (200, {"ids": [1]})
    time.sleep(0.05)
    assert fp.link_speeds() == {"p0a1-eth3": 5.0, "c1-eth1": 5.0}     # both ports of the link report it
    code, out = api.handle("POST", "/fabriclab/faults", {"faults": [{"kind": "degrade", "link": "p0a1->c9"}]}, OWNER)
    assert code == 400 and out["error"] == "faults[0].link: no node 'c9' in this fabric"
    assert api.handle("GET", "/fabriclab/ports", None) == (200, {"ports": [{"intf": "x"}]})
    assert [f["state"] for f in api.handle("GET", "/fabriclab/faults", None)[1]["faults"]] == ["active"]
    code, out = api.handle("DELETE", "/fabriclab/faults", None, OWNER)
    assert code == 200 and out["removed"][0]["rates"]["p0a1-eth3"]["restored"] is True
    assert api.handle("POST", "/fabriclab/hosts", {"host_pids": {"h1": 0}}, OWNER)[0] == 400
    bare = ControlApi(dict, lambda: None, lambda: None)
    assert bare.handle("GET", "/fabriclab/faults", None)[0] == 404


def test_a_hidden_fault_is_left_out_of_the_list_until_its_removal_reveals_it():
    fp, plane = manager()
    api = ControlApi(dict, lambda: None, lambda: None, faults=fp, ports=lambda: [], token="t0k")
    assert api.handle("POST", "/fabriclab/faults", {"faults": [{"kind": "drop", "switch": "c1"}], "hidden": True}, OWNER)[0] == 200
    api.handle("POST", "/fabriclab/faults", {"kind": "degrade", "link": "p0a1->c1"}, OWNER)
    time.sleep(0.05)
    code, out = api.handle("GET", "/fabriclab/faults", None)
    assert code == 200 and [f["kind"] for f in out["faults"]] == ["degrade"] and out["hidden"] == 1
    assert sorted(f["kind"] for f in api.handle("DELETE", "/fabriclab/faults", None, OWNER)[1]["removed"]) == ["degrade", "drop"]
    code, out = api.handle("POST", "/fabriclab/faults", {"faults": [{"kind": "drop", "switch": "c1"}], "hidden": "yes"}, OWNER)
    assert code == 400 and out["error"] == "faults.hidden: expected true or false, got 'yes'"


def test_a_faults_message_takes_one_fault_or_a_list():
    assert len(FaultsAdd.from_json({"kind": "drop", "switch": "c1"}, MAP).faults) == 1
    with pytest.raises(MessageError, match="faults: expected a non-empty list"):
        FaultsAdd.from_json({"faults": []}, MAP)


def test_port_counters_count_corrupted_frames_as_errors_not_as_received():
    ports = [p for p in switch_ports(MAP) if p["switch"] == "p0e1"]
    link = {"operstate": "UP", "rx_packets": 1000, "rx_bytes": 1_000_000, "tx_packets": 10, "tx_bytes": 900,
            "rx_errors": 0, "tx_errors": 0, "rx_dropped": 0, "tx_dropped": 0}
    links = {"p0e1-eth1": link, "p0e1-eth2": dict(link, operstate="DOWN")}
    rows = port_table(ports, links, {"p0e1-eth1": {"drops": 7}}, {"p0e1-eth1": 10.0}, {"p0e1-eth1": 50},
                      {"p0e1-eth1": 5.0})
    r1, r2, r3 = rows[:3]
    assert (r1["rx_packets"], r1["rx_bytes"], r1["rx_errors"], r1["tx_dropped"]) == (950, 950_000, 50, 7)
    assert (r1["rate_mbps"], r1["nominal_mbps"], r1["state"], r2["state"], r3["state"]) == \
        (5.0, 10.0, "up", "down", "absent")
    text = dump_ports_text(rows, "p0e1")
    assert text.splitlines()[0] == "p0e1: 4 ports"
    assert "port  1 (p0e1-eth1, to h1): rx pkts=950, bytes=950000, errs=50" in text
    assert "rate=5 Mbit/s of 10, state=up" in text and "rx pkts=?" in text


def test_fault_threads_end_with_the_manager():
    fp, plane = manager()
    fp.add([parse_fault(MAP, {"kind": "degrade", "link": "p0a1->c1"})])
    fp.remove_all()
    assert not [t for t in threading.enumerate() if t.name.startswith("fabriclab-fault-")]


def test_a_round_long_rate_fault_lowers_the_models_capacity():
    from controller.faults import capacity_overrides
    from experiments import fluid
    specs = [parse_fault(MAP, {"kind": "degrade", "link": "p0e1->h1", "rate_fraction": 0.3}),
             parse_fault(MAP, {"kind": "slow_host", "host": "h3", "rate_fraction": 0.5}),
             parse_fault(MAP, {"kind": "degrade", "link": "c1->p0a1", "rate_fraction": 0.5, "start_s": 1})]
    caps = capacity_overrides(MAP, specs)
    assert caps == {"p0e1>h1": 3.0, "h3>p0e2": 5.0}            # the scheduled one is left out
    fmap = dict(MAP, capacity_mbps=caps)
    assert fluid.max_min_rates(fmap, [("h2", "h1")]) == [pytest.approx(3.0)]
    assert fluid.max_min_rates(fmap, [("h1", "h2")]) == [pytest.approx(10.0)]     # the other direction
    assert fluid.max_min_rates(MAP, [("h2", "h1")]) == [pytest.approx(10.0)]


def test_the_stragglers_are_the_ranks_most_often_slowest():
    from experiments.workloads.collective.summary import stragglers
    hosts = [f"h{i + 1}" for i in range(8)]
    its = [{"slowest_rank_per_step": [3, 3, 4, 3, 0, 3]}, {"slowest_rank_per_step": [4, 3, 4, 3, 3, 3]}]
    assert stragglers(its, hosts) == "3:h4 8/12, 4:h5 3/12"
    ring = [dict(i, slowest_transfer_per_step=[7, 7, 7, 2]) for i in its]
    assert stragglers(ring, hosts) == "7:h8->0:h1 6/8, 2:h3->3:h4 2/8"
    assert stragglers([], ["h1"]) == ""
