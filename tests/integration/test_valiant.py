"""Valiant routing on real Open vSwitch switches: its flow tables load, and a flow between two
groups of a 3-group Dragonfly goes through the third (the only intermediate group), is delivered,
and its path traced through Open vSwitch's own tables shows the detour.

The smallest Dragonfly with an intermediate group: 3 groups of one router with one host each, a
triangle of global links. Minimal routing sends h1 -> h2 over g1r1 -> g2r1; Valiant must send it
g1r1 -> g3r1 -> g2r1, so the direct link stays idle and g3r1's link to g2r1 carries the flow (the
transmit counters say which), whatever the hash: the test fails if the tables route minimally,
drop the tagged frames or lose the tag on the way.
"""
import subprocess
import sys
from pathlib import Path

import pytest

from controller.dataplane.tcqdisc import PortQueue
from experiments.fabric import REPO, LiveFabric
from experiments.paths import traced_path
from experiments.state import RunState
from topologies.dragonfly import Dragonfly

from .conftest import assert_clean, chosen_datapath

FLOW_BYTES = 200_000          # ~140 full-size segments


def tx_packets(intf: str) -> int:
    return int(Path(f"/sys/class/net/{intf}/statistics/tx_packets").read_text())


@pytest.mark.lane("host", reason="the tables are pure and checked in the unit tier; one live fabric shows Open "
                                 "vSwitch runs them, on the lane with the time for it")
def test_a_cross_group_flow_goes_through_the_intermediate_group(tmp_path):
    fab = Dragonfly(groups=3, routers_per_group=1, hosts_per_router=1, global_links_per_router=2).build()
    direct = f"g1r1-eth{fab.port_toward('g1r1', 'g2r1')[0]}"
    detour = f"g3r1-eth{fab.port_toward('g3r1', 'g2r1')[0]}"
    with RunState("test-valiant") as st:
        with LiveFabric(fab, tmp_path, st, datapath=chosen_datapath(), routing="valiant",
                        switch_queue=lambda r: PortQueue(r, buffer_packets=100)) as lf:
            assert lf.net.ping([lf.host("h1"), lf.host("h2")], timeout=2) == 0.0
            before = {k: tx_packets(k) for k in (direct, detour)}
            sink = lf.host("h2").popen([sys.executable, "-m", "traffic.probe_flows", "sink", "5201", "60"],
                                       cwd=str(REPO), stdout=subprocess.PIPE, text=True)
            source = lf.host("h1").popen([sys.executable, "-m", "traffic.probe_flows", "source",
                                          fab.node("h2").ip, "5201"], cwd=str(REPO), stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True)
            try:
                assert sink.stdout.readline().strip() == "READY"
                assert source.stdout.readline().strip() == "READY"
                source.stdin.write(f"40000 {FLOW_BYTES}\n")
                source.stdin.flush()
                assert source.stdout.readline().strip() == "done 40000"       # delivered, every byte
            finally:
                for p in (source, sink):
                    p.kill()
                    p.wait()
            moved = {k: tx_packets(k) - v for k, v in before.items()}
            links = traced_path(lf.fabric_map, "h1", "h2", 40000, 5201, trace=lf.datapath.trace_hop)
    assert_clean(str(tmp_path))
    assert moved[detour] >= FLOW_BYTES // 1514 and moved[direct] <= 2, moved
    assert ["h1"] + [b for _a, b in links] == ["h1", "g1r1", "g3r1", "g2r1", "h2"], links
