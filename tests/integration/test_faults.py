"""Fault injectors on a real Fat-Tree k=4 (10 Mbit/s, real OVS, the real controller process and
its REST API): each fault's effect measured with real packets against its setting, its counters,
and the fabric after its removal identical to before (every qdisc and class, every interface's
state and XDP program, every flow table).

Traffic is constant-rate UDP (traffic.udp_probe) from h2 to h1, under one edge switch, so the
path is fixed (no ECMP choice) and every frame of the flow crosses the faulted place. The VM lane
(the stock kernel: Open vSwitch's kernel datapath) runs the corrupt-and-degrade test on a
one-switch fabric (its emulated CPU brings a k=4 Fat-Tree up in too much of its time budget).
"""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time

import pytest

from common.units import FRAME_TRUESIZE_BYTES
from controller.dataplane.tcqdisc import PortQueue
from experiments.fabric import REPO, LiveFabric
from experiments.live import warm_up_reachability
from experiments.scenario import FRAME_BYTES
from experiments.state import RunState
from tests import marking
from topologies import FatTree, SpineLeaf

from .conftest import assert_clean, chosen_datapath

VM_LANE = os.environ.get("FABRICLAB_LANE") == "vm"
HOST_ONLY = pytest.mark.lane("host", reason="the VM lane runs the corrupt-and-degrade test, which covers the "
                                            "kernel datapath's paths (XDP before the datapath, the HTB class)")


@pytest.fixture(scope="module")
def fabric(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    fab = (SpineLeaf(spines=1, leaves=1, hosts_per_leaf=2) if VM_LANE else FatTree(k=4)).build()
    with RunState("test-faults") as st:
        with LiveFabric(fab, tmp / "run", st, datapath=chosen_datapath(),
                        switch_queue=lambda r: PortQueue(r, buffer_packets=100),
                        host_queue=lambda r: PortQueue(r, buffer_packets=1000)) as lf:
            lf.api.call("POST", "/hosts", {"host_pids": {h.name: h.pid for h in lf.net.hosts}})
            warm_up_reachability(lf)     # ovs-vswitchd opens its transmit socket at its first packet
            # as a run does: every queue can fill, so every drop is a qdisc's
            with lf.datapath.hold_for_run(len(fab.switch_interfaces()) * 102 * FRAME_TRUESIZE_BYTES, st):
                yield lf, tmp
    assert_clean(str(tmp / "run"))


def _ns(lf, node: str) -> list[str]:
    return [] if not lf.fabric.node(node).is_host else ["nsenter", "-t", str(lf.host(node).pid), "-n"]


def snapshot(lf) -> dict:
    """Everything a fault may change, as text: every interface's qdiscs and classes (no
    counters), link flags and XDP program, in the root namespace and every host's; every switch's
    flow table (no statistics)."""
    out = {}
    for node in [s.name for s in lf.fabric.switches] + [h.name for h in lf.fabric.hosts]:
        ns = _ns(lf, node)
        if node.startswith("h") or node == lf.fabric.switches[0].name:
            for what in (["tc", "qdisc", "show"], ["tc", "class", "show"] if ns else None, ["ip", "-d", "link", "show"]):
                if what:
                    out[(node, " ".join(what))] = subprocess.run(ns + what, capture_output=True, text=True).stdout
        if not ns:
            out[(node, "flows")] = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", "--no-stats", node],
                                                  capture_output=True, text=True).stdout
    for s in lf.fabric.switches:
        for p in lf.fabric_map["switches"][[x["name"] for x in lf.fabric_map["switches"]].index(s.name)]["ports"]:
            out[(p["intf"], "class")] = subprocess.run(["tc", "-d", "class", "show", "dev", p["intf"]],
                                                       capture_output=True, text=True).stdout
    # link state: the `ip -d link` text holds the flags (UP, LOWER_UP) and any `prog/xdp`
    return {k: re.sub(r"\s+(?:link-netnsid|alias).*", "", v) for k, v in out.items()}


@pytest.fixture()
def unchanged(fabric):
    """The fabric after the test exactly as before it (and no fault left in the controller)."""
    lf, _ = fabric
    before = snapshot(lf)
    yield
    lf.api.call("DELETE", "/faults")
    after = snapshot(lf)
    changed = [k for k in before if before[k] != after.get(k)]
    assert not changed, {k: (before[k], after.get(k)) for k in changed[:3]}
    assert "xdp" not in "".join(v for (n, w), v in after.items() if w.startswith("ip"))


def udp(lf, tmp, src: str, dst: str, rate_mbps: float, packets: int, tag: str, frame_bytes: int = FRAME_BYTES,
        faults: list | None = None, start_in_s: float = 1.0) -> tuple[list, dict, float]:
    """Constant-rate UDP from ``src`` to ``dst``; ``faults`` are posted to the controller just before
    the start (``start_in_s`` ahead). Returns (receiver rows, the sender's report, the POST's
    unix time)."""
    out = tmp / f"rx-{tag}.json"
    rx = lf.host(dst).popen([sys.executable, "-m", "traffic.udp_probe", "recv", "6000", "120", str(out)],
                            cwd=str(REPO), stdout=subprocess.PIPE, text=True)
    tx = None
    try:
        assert rx.stdout.readline().strip() == "READY"
        posted = time.time()
        if faults:
            lf.api.call("POST", "/faults", {"faults": faults})
        start = posted + start_in_s
        tx = lf.host(src).popen([sys.executable, "-m", "traffic.udp_probe", "send", lf.fabric.node(dst).ip, "6000",
                                 str(rate_mbps), str(packets), str(frame_bytes), "0", "0", str(start)],
                                cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        text, err = tx.communicate(timeout=120)
        assert f"sent {packets} " in text, text + err
        assert rx.wait(60) == 0
    finally:
        for p in (tx, rx):
            if p is not None and p.poll() is None:
                p.kill()
    return json.loads(out.read_text())["packets"], {"text": text}, posted


def edge(lf) -> tuple[str, str, str]:
    """h1's and h2's switch, and its ports toward h1 and toward h2 (interfaces)."""
    a1, a2 = lf.fabric.host_attachment("h1"), lf.fabric.host_attachment("h2")
    assert a1.a == a2.a
    return a1.a, a1.a_intf, a2.a_intf


def ports(lf) -> dict:
    return {r["intf"]: r for r in lf.api.call("GET", "/ports")["ports"]}


def within_binomial(dropped: int, n: int, p: float, sd: float = 4.0) -> bool:
    """``dropped`` of ``n`` is within ``sd`` standard deviations of Binomial(n, p)."""
    return abs(dropped - n * p) <= sd * math.sqrt(n * p * (1 - p))


PACKETS = 4000


def test_corrupt_and_degrade_act_on_their_link_and_leave_nothing_behind(fabric, unchanged, figure):
    """A corrupt fault on h2's uplink (frames dropped on arrival at the edge switch's port, counted
    as its receive errors) and a degrade fault on the edge's port toward h1 (half its rate), at once."""
    lf, tmp = fabric
    sw, to_h1, to_h2 = edge(lf)
    # the VM lane's emulated CPU paces one sender at about 5 Mbit/s: there the port is degraded
    # further, so that the sender still overloads it
    send_mbps, fraction = (4.5, 0.3) if VM_LANE else (7.0, 0.5)
    degraded = 10 * fraction
    p0 = ports(lf)
    rows, _, _ = udp(lf, tmp, "h2", "h1", send_mbps, PACKETS, "corrupt-degrade", faults=[
        {"kind": "corrupt", "link": f"h2->{sw}", "frame_fraction": 0.05},
        {"kind": "degrade", "link": f"{sw}->h1", "rate_fraction": fraction}])
    during = ports(lf)
    recs = {r["kind"]: r for r in lf.api.call("DELETE", "/faults")["removed"]}
    p1 = ports(lf)
    corrupt, degrade = recs["corrupt"], recs["degrade"]
    # the corrupt fault: the loss is its fraction, the port counts exactly the frames it dropped
    errors = p1[to_h2]["rx_errors"] - p0[to_h2]["rx_errors"]
    print(f"corrupt: {corrupt['frames_dropped']} of {corrupt['frames_seen']} frames "
          f"({corrupt['drop_fraction_measured']:.4f}), port receive errors {errors}")
    # 10 runs beside a CPU load (make test-repeat N=10 K=test_faults, 2026-12-04): 0.0425 / 0.0506 / 0.0532
    figure("corrupt_fraction", corrupt["drop_fraction_measured"])
    assert errors == corrupt["frames_dropped"] and within_binomial(errors, corrupt["frames_seen"], 0.05)
    assert corrupt["frames_seen"] >= PACKETS
    assert sum(r["rx_errors"] - p0[i]["rx_errors"] for i, r in p1.items()) == errors      # nowhere else
    # the degrade fault: the port drains at half its rate, shows it, and is put back
    share = marking.drain_share([r for r in rows if r[3] > rows[0][3] + 0.5e9], degraded * 1e6)
    print(f"degrade: the port toward h1 delivered {share:.4f} of {degraded:g} Mbit/s; port rate "
          f"{during[to_h1]['rate_mbps']} Mbit/s during, {p1[to_h1]['rate_mbps']} after")
    # 10 runs beside a CPU load: 0.9998 / 1.000 / 1.000 (the bound: within 3%). The VM lane's
    # emulated CPU dequeues late, so every shaped port there drains below its rate: 10 runs in the VM
    # (2026-12-04), 0.974 / 0.977 / 0.979, and 0.954 in one CI run; the ECN tests' lowest drain share
    # there is 0.953-0.967 (tests/integration/test_ecn_marking.py). Its lower bound is 0.92; the upper
    # one still fails a fault that did nothing (the port would deliver 1.4 times the degraded rate).
    figure("degrade_drain_share", share)
    assert (0.92 if VM_LANE else 0.97) <= share <= 1.03
    assert (during[to_h1]["rate_mbps"], p1[to_h1]["rate_mbps"]) == (pytest.approx(degraded), 10.0)
    assert degrade["rates"][to_h1]["restored"] is True
    # what reached h1 is what was sent less the corrupted frames and the degraded port's queue drops
    drops = p1[to_h1]["tx_dropped"] - p0[to_h1]["tx_dropped"]
    print(f"h1 received {len(rows)} of {PACKETS}: {errors} frames corrupted, {drops} dropped at the degraded "
          "port's queue")
    others = corrupt["frames_seen"] - PACKETS       # frames of other kinds (ARP) the fault saw, and may have hit
    # the port's drop counter counts a frame twice when the userspace datapath sends it again after
    # its qdisc refused it (experiments.features.ovstx: 12 of 1361 drops in the UDP incast; a CI
    # rehearsal, 2026-12-06, had 8 more arrivals than 4000 - 207 corrupted - 846 drops allow):
    # up to 3% of the drops may be such second counts
    resent = math.ceil(0.03 * drops)
    assert PACKETS - errors - drops <= len(rows) <= PACKETS - errors - drops + others + resent, \
        (len(rows), errors, drops)


@HOST_ONLY
def test_a_switch_that_drops_silently_shows_only_missing_packets(fabric, unchanged, figure):
    lf, tmp = fabric
    p0 = ports(lf)
    rows, _, _ = udp(lf, tmp, "h2", "h1", 4.0, PACKETS, "drop",
                     faults=[{"kind": "drop", "switch": "p0e1", "ports": [2], "frame_fraction": 0.05}])
    (rec,) = lf.api.call("DELETE", "/faults")["removed"]
    p1 = ports(lf)
    lost = PACKETS - len(rows)
    print(f"drop: h1 missed {lost} of {PACKETS} ({lost / PACKETS:.4f}); the fault dropped {rec['frames_dropped']} of "
          f"{rec['frames_seen']} frames")
    # 10 runs beside a CPU load: 0.0455 / 0.0503 / 0.0545 (4 binomial standard deviations: +-0.0138)
    figure("drop_fraction", lost / PACKETS)
    assert within_binomial(lost, PACKETS, 0.05) and lost <= rec["frames_dropped"] <= lost + 5
    for intf, r in p1.items():                 # no port counter the victim can read moved
        assert r["rx_errors"] == p0[intf]["rx_errors"] and r["tx_dropped"] == p0[intf]["tx_dropped"], intf
    assert p1["p0e1-eth2"]["rx_packets"] - p0["p0e1-eth2"]["rx_packets"] >= PACKETS   # received, then lost


def loss_runs(rows: list, interval_s: float) -> list[tuple[float, float]]:
    """The flow's outages as (first lost, first received again) send times in unix seconds: runs of
    missing sequence numbers, each lost packet's send time reckoned from the pacing interval."""
    by_seq = {r[1]: r[2] / 1e9 for r in rows}
    seqs = sorted(by_seq)
    out = []
    for a, b in zip(seqs, seqs[1:]):
        if b - a > 1:
            out.append((by_seq[a] + interval_s, by_seq[b]))
    return out


@HOST_ONLY
def test_a_flapping_link_is_down_when_its_schedule_says(fabric, unchanged, figure):
    lf, tmp = fabric
    frame, pps = 200, 2000
    down_s, up_s, start_s = 0.3, 0.4, 1.3
    rows, _, posted = udp(lf, tmp, "h2", "h1", frame * 8 * pps / 1e6, 6000, "flap", frame_bytes=frame, faults=[
        {"kind": "flap", "link": "p0e1<->h1", "down_s": down_s, "up_s": up_s, "flaps": 2, "start_s": start_s}])
    (rec,) = lf.api.call("DELETE", "/faults")["removed"]
    runs = [(a - posted, b - posted) for a, b in loss_runs(rows, 1 / pps)]
    want = [(start_s + i * (down_s + up_s), start_s + i * (down_s + up_s) + down_s) for i in range(2)]
    print(f"flap: outages seen by the flow {[(round(a, 3), round(b, 3)) for a, b in runs]} s after the request, "
          f"scheduled {want}; the controller's record {rec['flaps']}")
    assert len(runs) == 2, runs
    errors = [x - w for (a, b), (wa, wb) in zip(runs, want) for x, w in ((a, wa), (b, wb))]
    # 10 runs beside a CPU load: worst error 0.008 / 0.019 / 0.022 s (the bound: 50 ms)
    figure("flap_worst_error_s", max(errors, key=abs))
    assert all(abs(e) <= 0.05 for e in errors), (runs, want)
    assert ports(lf)["p0e1-eth1"]["state"] == "up"


@HOST_ONLY
def test_a_slow_host_sends_at_its_fraction(fabric, unchanged, figure):
    lf, tmp = fabric
    p0 = ports(lf)
    rows, _, _ = udp(lf, tmp, "h2", "h1", 6.0, 2000, "slow-host",
                     faults=[{"kind": "slow_host", "host": "h2", "rate_fraction": 0.4}])
    (rec,) = lf.api.call("DELETE", "/faults")["removed"]
    share = marking.drain_share([r for r in rows if r[3] > rows[0][3] + 0.5e9], 4e6)
    p1 = ports(lf)
    print(f"slow host: h2 delivered {share:.4f} of 4 Mbit/s (0.4 of its 10); NIC class {rec['rates']}")
    # 10 runs beside a CPU load: 0.9997 / 1.000 / 1.000
    figure("slow_host_drain_share", share)
    assert abs(share - 1) <= 0.03 and rec["rates"]["h2-eth0"]["restored"] is True
    assert len(rows) == 2000                   # the host held its frames: nothing lost in the fabric
    # the switches see only a slower sender: no errors, no drops, every port at its nominal rate
    assert all(r["rx_errors"] == p0[i]["rx_errors"] and r["rate_mbps"] == r["nominal_mbps"] for i, r in p1.items())


def _as_nobody(*argv: str) -> subprocess.CompletedProcess:
    """``argv`` run as the unprivileged user ``nobody`` (no groups), as any local user could."""
    return subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv],
                          capture_output=True, text=True, timeout=30)


def _curl_code(out: str) -> int:
    """The status ``curl -w '\\n%{http_code}'`` printed last."""
    return int(out.rsplit("\n", 1)[-1])


@pytest.mark.lane("host", reason="the VM's guest has no curl; who may change what does not depend on the datapath")
def test_only_the_runs_owner_changes_the_fabric_and_every_change_is_in_the_rounds_results(fabric, tmp_path):
    """A local user without the run's token (``nobody``, with curl) is refused and nothing changes;
    the owner's hidden fault, in a round whose scenario has none, is in that round's faults.csv and
    changes.csv (the run's features as the run loop calls them, on the live controller). Its own
    snapshots before and after the outsider's requests stand for the ``unchanged`` fixture's
    (its call 2.20 / 2.38 / 2.98 s min / median / max over 5 runs on the shared 2-core machine;
    the fixture's two snapshots would add about 1.5 s)."""
    from types import SimpleNamespace

    from experiments.context import RoundRecord
    from experiments.features.changes import ApiChanges
    from experiments.features.faults import Faults
    from tests.unit.test_api_changes import drive_round

    lf, _ = fabric
    url = lf.rest_url + "/fabriclab"
    token_file = lf.token_file
    token = token_file.read_text().strip()
    st, dst = os.stat(token_file), os.stat(token_file.parent)
    assert (st.st_mode & 0o777, dst.st_mode & 0o777, st.st_uid) == (0o600, 0o700, os.getuid())
    for what in ("cmdline", "environ"):                         # not in ps, not in the environment
        assert token.encode() not in open(f"/proc/{lf.controller.pid}/{what}", "rb").read(), what
    before = snapshot(lf)
    fault = json.dumps({"faults": [{"kind": "drop", "switch": lf.fabric.switches[0].name, "frame_fraction": 1.0}],
                        "hidden": True})
    curl = ["curl", "-s", "-w", "\n%{http_code}"]
    # the outsider: cannot read the token, cannot change anything, can read the counters
    assert _as_nobody("cat", str(token_file)).returncode != 0
    refused = [(_curl_code(_as_nobody(*curl, "-X", "POST", "-d", fault, url + "/faults").stdout), 401),
               (_curl_code(_as_nobody(*curl, "-X", "POST", "-H", "Authorization: Bearer guess", "-d", fault,
                                      url + "/faults").stdout), 403),
               (_curl_code(_as_nobody(*curl, "-X", "DELETE", url + "/faults").stdout), 401),
               (_curl_code(_as_nobody(*curl, url + "/changes").stdout), 401)]
    assert [got for got, _ in refused] == [want for _, want in refused]
    assert _curl_code(_as_nobody(*curl, url + "/ports").stdout) == 200
    assert lf.api.call("GET", "/faults") == {"faults": [], "hidden": 0}
    after = snapshot(lf)
    assert [k for k in before if before[k] != after.get(k)] == []      # no qdisc, XDP program or flow moved
    # the owner, with the token from the root-only file
    rdir = tmp_path / "round"
    rdir.mkdir()
    rec = RoundRecord(index=0, round=SimpleNamespace(name="quiet", faults=[]), dir=rdir)
    ctx = SimpleNamespace(fabric_map=lf.fabric_map)

    def during():
        out = subprocess.run([*curl, "-X", "POST", "-H", f"Authorization: Bearer {token}", "-d", fault,
                              url + "/faults"], capture_output=True, text=True, timeout=30).stdout
        assert _curl_code(out) == 200
        assert lf.api.call("GET", "/faults")["hidden"] == 1
    # the round's end (even after a failed assertion): every fault ended, the records and changes read
    summary = drive_round([Faults(ctx), ApiChanges(ctx)], lf, rec, during)
    assert [(x["kind"], x["place"], x["state"]) for x in summary["faults"]] == \
        [("drop", lf.fabric.switches[0].name, "removed")]
    a = summary["api_changes"]
    (mine,) = [c for c in a["accepted"] if not c["by_runner"]]
    assert (mine["method"], mine["path"], mine["hidden"]) == ("POST", "/fabriclab/faults", True)
    assert mine["client"].startswith("curl/") and json.loads(mine["body"]) == json.loads(fault)
    assert a["refused"] == 4 and [(r["method"], r["code"]) for r in a["refused_requests"]] == \
        [("POST", 401), ("POST", 403), ("DELETE", 401), ("GET", 401)]
    with open(rdir / "changes.csv") as fh:
        assert "curl/" in fh.read()
    assert lf.api.call("GET", "/faults") == {"faults": [], "hidden": 0}    # ended with its round
