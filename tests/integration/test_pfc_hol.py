"""PFC's price (issue 6): head-of-line blocking. On one fabric, PFC off then on: an incast in
the lossless class (h5, h6 -> h1) congests leaf1's port toward h1; with PFC the pause spreads to
spine1 and to leaf2's uplink, and a victim flow in the same priority from leaf2 to an idle
receiver on another leaf (h7 -> h9) is held with it. A lossy-class flow on the same links
(h8 -> h2, DSCP 0) is never paused. Real Mininet, OVS, controller and traffic agents."""
import contextlib
import os
import time

import pytest

from common.pfc import parse_pfc
from experiments.state import RunState
from tests.pfcfabric import live_fabric, start_udp_flows, udp_flow_records
from topologies.spineleaf import SpineLeaf

from .conftest import assert_clean

pytestmark = pytest.mark.lane("host", reason="head-of-line blocking is measured throughput; the pause itself runs in the VM lane (test_pfc.py)")
LANE = os.environ.get("FABRICLAB_LANE", "host")
# the VM lane (TCG) reacts in 0.45-0.65 s: there every rate is scaled down 10x, so the 76-packet
# headroom above XOFF covers 0.9 s, and flows run longer
RATE_MBPS = 1.0 if LANE == "vm" else 10.0
BUFFER_BYTES = 100 * 1514
DURATION_S = 12.0 if LANE == "vm" else 5.0
PORT = 7100
FLOWS = [  # (src, dst, dscp, role)
    ("h5", "h1", 26, "incast"), ("h6", "h1", 26, "incast"),
    ("h7", "h9", 26, "victim"), ("h8", "h2", 0, "lossy")]


@contextlib.contextmanager
def hol_fabric(tmp_path):
    """One spine, three leaves of four hosts; hosts at RATE_MBPS, uplinks at 4x (the only narrow
    points are the receivers' ports); priorities 0 and 3, PFC on 3 (XOFF 24, XON 18 packets), off at first."""
    fabric = SpineLeaf(spines=1, leaves=3, hosts_per_leaf=4, host_rate_mbps=RATE_MBPS,
                       uplink_rate_mbps=4 * RATE_MBPS).build()
    cfg = parse_pfc(None, {"enabled": False, "xoff_packets": 24, "xon_packets": 18}, BUFFER_BYTES)
    with RunState(f"pfc-hol-{tmp_path.name}") as st:
        with live_fabric(fabric, cfg, BUFFER_BYTES, tmp_path / "run", st) as (lf, _):
            yield lf, st
    assert_clean(str(tmp_path / "run"))


def run_flows(lf, st, out):
    """Every flow of FLOWS for DURATION_S at once (UDP agents); returns {role: [Mbit/s received, ...]}."""
    flows = [{"src": src, "dst": dst, "dscp": dscp, "duration_s": DURATION_S} for src, dst, dscp, _ in FLOWS]
    deadline = time.time() + DURATION_S + 60
    agents = start_udp_flows(lf, st, flows, out, PORT, deadline)
    try:
        codes = agents.wait(deadline)
    finally:
        agents.kill()
    assert all(c == 0 for c in codes.values()), codes
    rates = {}
    for (_, _, _, role), (tx, rx) in zip(FLOWS, udp_flow_records(lf, flows, out)):
        rates.setdefault(role, []).append((rx["bytes"] if rx else 0) * 8 / DURATION_S / 1e6)
    return rates


def test_victim_in_the_paused_class_loses_throughput_and_the_lossy_class_is_never_paused(tmp_path):
    with hol_fabric(tmp_path) as (lf, st):
        off = run_flows(lf, st, tmp_path / "off")
        lf.pfc_request({"enabled": True})
        t_on = time.time()
        on = run_flows(lf, st, tmp_path / "on")
        rep = lf.pfc_report(tmp_path / "pfc.json")
    pauses = [p for p in rep["pauses"] if p["start_s"] + rep["t0_unix_s"] >= t_on]
    links = {(p["switch"], p["upstream"]) for p in pauses}
    print(f"PFC off: {off}; PFC on: {on} (Mbit/s); {len(pauses)} pauses on {sorted(links)}, "
          f"reaction {rep['reaction_s']}")
    # the pause spread: leaf1 paused spine1, spine1 paused leaf2 (the victim's uplink)
    assert ("leaf1", "spine1") in links and ("spine1", "leaf2") in links
    victim_off, victim_on = off["victim"][0], on["victim"][0]
    assert victim_off > 0.7 * RATE_MBPS                       # alone on its path, near its link rate
    assert victim_on <= 0.7 * victim_off, (victim_off, victim_on)   # lost at least 30% (head-of-line blocking)
    # the lossy class: never paused (no pause of priority 0, its counters never passed XOFF), and
    # not held behind the paused class: its rate stays
    assert all(p["priority"] == 3 for p in rep["pauses"])
    lossy_counters = [c for c in rep["counters"] if c["priority"] == 0]
    assert lossy_counters and all(c["xoff_events"] == 0 for c in lossy_counters)
    assert on["lossy"][0] >= 0.9 * off["lossy"][0], (off["lossy"], on["lossy"])
