"""Case C5: ECMP spreads flows over every equal-cost path, and keeps each flow on one.

64 TCP flows with distinct source ports go, one after another, between two
hosts on different leaves (4 spines, so 4 equal-cost paths) and between two
pods of a k=4 Fat-Tree (4 core switches). For each flow the transmit packet
counters of the candidate path interfaces are read before and after: exactly
one path carries the flow's packets (no per-packet spraying, no reordering
from the switch), and the per-path flow counts pass a chi-square test against
an even split. With ``single`` routing the same test fails (all flows on one
path), which shows the test can tell the difference.
"""
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.state import RunState
from controller.dataplane.tcqdisc import PortQueue
from experiments.analysis import ecmp_balance
from experiments.fabric import REPO, LiveFabric
from topologies.fattree import FatTree
from topologies.spineleaf import SpineLeaf

from .conftest import assert_clean, chosen_datapath

FLOWS = 64
FLOW_BYTES = 30_000          # ~21 full-size segments
MIN_PACKETS = 15             # a flow's path carries at least this many of its packets
NOISE_PACKETS = 2            # every other candidate path moves at most this many


def tx_packets(intf: str) -> int:
    return int(Path(f"/sys/class/net/{intf}/statistics/tx_packets").read_text())


def trace_flows(lf: LiveFabric, src: str, dst: str, paths: dict[str, str], flows: int = FLOWS) -> list[dict]:
    """Run ``flows`` sequential TCP flows src -> dst; return per flow the packet delta on every path interface."""
    sink = lf.host(dst).popen([sys.executable, "-m", "traffic.probe_flows", "sink", "5201", "300"], cwd=str(REPO),
                              stdout=subprocess.PIPE, text=True)
    source = lf.host(src).popen([sys.executable, "-m", "traffic.probe_flows", "source", lf.fabric.node(dst).ip,
                                 "5201"], cwd=str(REPO), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert sink.stdout.readline().strip() == "READY"
        assert source.stdout.readline().strip() == "READY"
        out = []
        for i in range(flows):
            sport = 40000 + 7 * i
            before = {k: tx_packets(v) for k, v in paths.items()}
            source.stdin.write(f"{sport} {FLOW_BYTES}\n")
            source.stdin.flush()
            reply = source.stdout.readline().strip()
            assert reply == f"done {sport}", reply
            time.sleep(0.02)
            out.append({k: tx_packets(v) - before[k] for k, v in paths.items()})
        return out
    finally:
        for p in (source, sink):
            p.kill()
            p.wait()


def path_of(deltas: dict[str, int]) -> str:
    """The one path a flow took; fails if its packets were seen on several."""
    busy = [k for k, d in deltas.items() if d >= MIN_PACKETS]
    assert len(busy) == 1, f"flow not on exactly one path: {deltas}"
    others = sum(d for k, d in deltas.items() if k != busy[0])
    assert others <= NOISE_PACKETS, f"packets of one flow on several paths: {deltas}"
    return busy[0]


def spineleaf_paths(fab):
    """leaf1's uplink interface toward each spine (the 4 equal-cost paths leaf1 -> leaf2)."""
    return {sp.name: f"leaf1-eth{fab.port_toward('leaf1', sp.name)[0]}" for sp in fab.switches if sp.layer == "spine"}


def fattree_paths(fab):
    """Each core switch's port toward pod 1 (the 4 equal-cost paths pod 0 -> pod 1)."""
    paths = {}
    for link in fab.links:
        for core, core_port, other in ((link.a, link.a_port, link.b), (link.b, link.b_port, link.a)):
            if fab.node(core).layer == "core" and other.startswith("p1a"):
                paths[core] = f"{core}-eth{core_port}"
    return paths


CASES = {
    "spineleaf-4x2": (lambda: SpineLeaf(spines=4, leaves=2, hosts_per_leaf=1).build(), spineleaf_paths, "h1", "h2"),
    "fattree-k4": (lambda: FatTree(k=4).build(), fattree_paths, "h1", "h5"),
}


@pytest.mark.parametrize("case", [
    pytest.param("fattree-k4", marks=pytest.mark.lane(
        "host", reason="the Fat-Tree's paths are routing (pure); the kernel datapath's hashing is the Spine-Leaf case")),
    "spineleaf-4x2"])
def test_ecmp_balance_and_flow_affinity(tmp_path, case):
    build, paths_of, src, dst = CASES[case]
    fab = build()
    paths = paths_of(fab)
    assert len(paths) == 4, paths
    with RunState(f"test-ecmp-{case}") as st:
        with LiveFabric(fab, tmp_path, st, datapath=chosen_datapath(),
                        switch_queue=lambda r: PortQueue(r, buffer_packets=100)) as lf:
            assert lf.net.ping([lf.host(src), lf.host(dst)], timeout=2) == 0.0
            deltas = trace_flows(lf, src, dst, paths)
    assert_clean(str(tmp_path))
    counts = {k: 0 for k in paths}
    for d in deltas:
        counts[path_of(d)] += 1
    bal = ecmp_balance(counts)
    print(f"{case}: {bal}")
    assert bal["flows"] == FLOWS
    assert bal["p_value"] > 0.01, f"ECMP split fails the chi-square balance test: {bal}"


@pytest.mark.lane("host", reason="the control of the balance test: it shows the test can fail, on any datapath")
def test_single_path_mode_is_unbalanced(tmp_path):
    """The control: with one path per destination the same 64 flows all share one spine."""
    fab = SpineLeaf(spines=4, leaves=2, hosts_per_leaf=1).build()
    paths = spineleaf_paths(fab)
    with RunState("test-ecmp-single") as st:
        with LiveFabric(fab, tmp_path, st, datapath=chosen_datapath(), routing="single",
                        switch_queue=lambda r: PortQueue(r, buffer_packets=100)) as lf:
            deltas = trace_flows(lf, "h1", "h2", paths, flows=16)
    assert_clean(str(tmp_path))
    counts = {k: 0 for k in paths}
    for d in deltas:
        counts[path_of(d)] += 1
    assert sorted(counts.values()) == [0, 0, 0, 16], counts
    assert ecmp_balance(counts)["p_value"] < 0.01
