"""The PFC watchdog in a live run (issue 6): h1's NIC stops taking priority 3 (the test holds
leaf1's port toward h1 paused, as a receiver that pauses forever would), the pause spreads,
and leaf1's pause of the spine outlasts the watchdog's timeout: a pause storm. With action
``keep`` it is reported and the pause goes on (nothing lost once h1 takes traffic again);
with ``drop`` leaf1 stops obeying it: the spine resumes and leaf1 drops those frames, counted."""
import contextlib
import os
import time

import pytest

from common.pfc import parse_pfc, pfc_frame
from experiments.state import RunState
from controller.dataplane import netlink, ovsctl, pausegate
from tests.pfcfabric import live_fabric, start_udp_flows, udp_flow_records
from topologies.spineleaf import SpineLeaf

from .conftest import assert_clean

pytestmark = pytest.mark.lane("host", reason="the watchdog is the controller's pauser (pure policy over tc gates); the pause runs in the VM lane (test_pfc.py)")
LANE = os.environ.get("FABRICLAB_LANE", "host")
# the VM lane (TCG) reacts in 0.45-0.65 s: there links run at 1 Mbit/s (the headroom covers 0.9 s)
RATE_MBPS = 1.0 if LANE == "vm" else 10.0
BUFFER_BYTES = 100 * 1514
HOLD_S = 8.0 if LANE == "vm" else 4.0
TIMEOUT_S = 1.0
DATAGRAMS = 300                  # 450 kB: fills every hop past XOFF (the pause spreads to h3)


@contextlib.contextmanager
def watchdog_fabric(tmp_path, action):
    fabric = SpineLeaf(spines=1, leaves=2, hosts_per_leaf=2, host_rate_mbps=RATE_MBPS,
                       uplink_rate_mbps=RATE_MBPS).build()
    cfg = parse_pfc(None, {"xoff_packets": 24, "xon_packets": 18,
                           "watchdog": {"timeout_s": TIMEOUT_S, "action": action}}, BUFFER_BYTES)
    with RunState(f"pfc-wd-{tmp_path.name}") as st:
        with live_fabric(fabric, cfg, BUFFER_BYTES, tmp_path / "run", st) as (lf, plan):
            yield lf, st, plan
    assert_clean(str(tmp_path / "run"))


def qdisc_drops(lf) -> dict:
    """Root qdisc drops (every class and FIFO below it included) of every switch port and host NIC."""
    import json
    out = {}
    where = [(i, None) for i in lf.fabric.switch_interfaces()]
    where += [(lf.fabric.host_attachment(h.name).b_intf, lf.host(h.name).pid) for h in lf.fabric.hosts]
    for intf, pid in where:
        q = json.loads(netlink.run(["tc", "-s", "-j", "qdisc", "show", "dev", intf, "root"], pid) or "[]")
        drops = sum(x.get("drops", 0) for x in q)
        if drops:
            out[intf] = drops
    return out


def stuck_receiver_run(lf, st, plan, out):
    """h3 sends DATAGRAMS lossless datagrams to h1 while leaf1's priority-3 gate toward h1 is shut for
    HOLD_S; returns (datagrams sent, received, the PFC report while held, the final one)."""
    q = pausegate.PriorityQueues(rate_bps=RATE_MBPS * 1e6,
                                 fifo_bytes=dict(plan.switch_fifo_bytes),
                                 default_prio=0, weights=None, burst_bytes=3028)
    gates = pausegate.PauseGates("leaf1-eth1", q, kick_frame=pfc_frame("02:fa:b1:ab:00:01", {3: 0}))
    flows = [{"src": "h3", "dst": "h1", "dscp": 26, "bytes": DATAGRAMS * 1460}]
    deadline = time.time() + HOLD_S + 90
    agents = None
    try:
        gates.close_gate(3)
        # the receiver outwaits the hold: the shut gate leaks a frame per 1.5 s (8 kbit/s), and one CI
        # run's receiver, idle 3 s (the default) after 2 frames, left before the gate opened (the
        # held frames then met a closed port). With action drop the end markers are lost and the
        # receiver ends this long after the last datagram.
        agents = start_udp_flows(lf, st, flows, out, 7300, deadline, start_in_s=0.3, idle_s=2 * HOLD_S)
        time.sleep(HOLD_S)
        rep_held = lf.pfc_report(out / "pfc-held.json")
        gates.open_gate(3)                     # h1 takes traffic again
        codes = agents.wait(deadline)
    finally:
        if agents is not None:
            agents.kill()
        gates.close()
    assert all(c == 0 for c in codes.values()), codes
    (tx, rx), = udp_flow_records(lf, flows, out)
    rep = lf.pfc_report(out / "pfc.json")
    rep["ovs_drops"] = ovsctl.ovs_interface_drops()
    rep["qdisc_drops"] = qdisc_drops(lf)
    assert "error" not in tx, tx
    return tx["datagrams_sent"], (rx["datagrams_received"] if rx else 0), rep_held, rep


@pytest.mark.parametrize("action", ["keep", "drop"])
def test_watchdog_reports_a_pause_storm_and_applies_its_action(tmp_path, action, figure):
    with watchdog_fabric(tmp_path, action) as (lf, st, plan):
        sent, got, held, rep = stuck_receiver_run(lf, st, plan, tmp_path / "run1")
    storms = [s for s in rep["storms"] if s["switch"] == "leaf1"]
    storm_drops = sum(c["storm_drops"] for c in rep["counters"])
    cap_drops = sum(c["drops"] for c in rep["counters"])
    ovs = {k: v for k, v in rep["ovs_drops"].items() if v["rx_dropped"] or v["tx_dropped"]}
    print(f"action {action}: sent {sent}, received {got}, storms {rep['storms']}, storm drops {storm_drops}, "
          f"cap drops {cap_drops}, OVS's own drops {ovs}, qdisc drops {rep['qdisc_drops']}; paused while held: "
          f"{[(p['switch'], p['upstream']) for p in held['pauses']]}")
    assert sent == DATAGRAMS and storms and all(s["action"] == action for s in storms), rep["storms"]
    assert storms[0]["upstream_port"].startswith("spine1")
    assert cap_drops == 0 and not rep["errors"]
    if action == "keep":
        # the storm is reported, the pause held on (spine1 and h3's leaf still paused while h1 was stuck)
        assert {("leaf1", "spine1"), ("leaf2", "h3")} <= {(p["switch"], p["upstream"]) for p in held["pauses"]}
        assert storm_drops == 0 and got == sent                 # lossless through the storm
        stormed = [p for p in rep["pauses"] if p["storm"]]
        assert stormed and all(p["end_s"] is not None for p in stormed)
    else:
        # leaf1 stopped obeying: spine1 sends again, leaf1 drops those frames and counts them. The
        # count includes the flow's 3 end markers when they came after the storm began. Open
        # vSwitch's own transmit drops (tx_dropped; 1 frame once, 0 in later runs) count too. On the
        # userspace datapath 3-11 of ~270 lost frames were in no counter at all (2026-11-30 to
        # 12-01, 7 runs; OVS's rx_dropped there are the pause gates' MAC-control kick frames), but
        # right after other fabric tests 17 and 25 (2026-12-02, 12-01; alone it passed 3 of 3 the
        # same hour): at most 30 may be lost elsewhere. Calibrated (make test-repeat N=10 beside a
        # CPU-heavy process, 2026-12-02): 1 / 2 / 9 (min / median / max), 1-in-1000 bound 14.6;
        # storm drops 265-273 of 274 lost
        lost = sent - got
        ovs_tx = sum(v["tx_dropped"] for v in rep["ovs_drops"].values())
        figure("lost", lost)
        figure("storm_drops", storm_drops)
        figure("lost_in_no_counter", lost - storm_drops - ovs_tx)
        assert storm_drops > 0 and lost - 30 <= storm_drops + ovs_tx <= lost + 3, (sent, got, storm_drops, ovs)
