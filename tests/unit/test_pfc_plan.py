"""runner.pfc_plan: the plan the controller's PFC part applies, from a fabric map (no root)."""
from common.pfc import parse_pfc
from controller.messages import PfcPlan
from experiments.features.pfc.plan import pfc_plan
from topologies.spineleaf import SpineLeaf

BUF = 100 * 1514


def _plan(enabled=True, prio=None):
    fabric = SpineLeaf(spines=2, leaves=2, hosts_per_leaf=2, host_rate_mbps=10, uplink_rate_mbps=40).build()
    cfg = parse_pfc(prio, {"enabled": enabled, "xoff_packets": 40, "xon_packets": 34}, BUF)
    plan = pfc_plan(fabric.to_map(), cfg, BUF, 3028, host_fifo_bytes=1000 * 1514, slack_s=100e-6)
    assert PfcPlan.from_json(plan.to_json()) == plan       # the start request's JSON gives the same plan back
    return fabric.to_map(), plan.to_json()                 # what the controller receives


def test_every_switch_port_names_the_transmitter_it_pauses():
    fmap, plan = _plan()
    ports = {p["intf"]: p for s in plan["switches"] for p in s["ports"]}
    assert len(ports) == sum(len(s["ports"]) for s in fmap["switches"])
    assert ports["leaf1-eth1"]["peer"] == "h1" and ports["leaf1-eth1"]["peer_intf"] == "h1-eth0"
    assert ports["leaf1-eth1"]["peer_is_host"] and ports["leaf1-eth1"]["rate_bps"] == 10e6
    spine_side = ports["spine1-eth1"]
    assert spine_side["peer"] == "leaf1" and not spine_side["peer_is_host"]
    # the peer's interface is the leaf port that faces spine1
    assert ports[spine_side["peer_intf"]]["peer"] == "spine1" and spine_side["rate_bps"] == 40e6
    assert sorted(s["sw"] for s in plan["switches"]) == list(range(1, len(fmap["switches"]) + 1))
    assert {h["intf"] for h in plan["hosts"]} == {h["intf"] for h in fmap["hosts"]}


def test_lossless_queues_hold_every_ingress_share_and_lossy_ones_the_buffer():
    fmap, plan = _plan()
    n = max(len(s["ports"]) for s in fmap["switches"])
    assert plan["lossless"] == [3] and plan["cap_bytes"] == BUF
    assert plan["switch_fifo_bytes"] == {"0": BUF, "3": BUF * n}
    assert plan["xoff_bytes"] == 40 * 1514 and plan["xon_bytes"] == 34 * 1514
    assert plan["dscp_map"]["26"] == 3 and plan["weights"] is None


def test_pfc_off_keeps_the_lossless_class_counted_but_its_queues_drop_at_the_buffer():
    _, plan = _plan(enabled=False)
    assert plan["enabled"] is False and plan["lossless"] == [3]   # a round can turn PFC on
    assert plan["switch_fifo_bytes"] == {"0": BUF, "3": BUF} and plan["lossy_fifo_bytes"] == BUF


def test_weighted_scheduling_carries_its_weights():
    _, plan = _plan(prio={"scheduling": {"weighted": {0: 1, 3: 3}}})
    assert plan["weights"] == {"0": 1, "3": 3}
