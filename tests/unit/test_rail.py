"""The rail-optimised fabric (topologies.rail): counts, which GPU sits on which rail, servers."""
import pytest

from common.errors import ScenarioError
from topologies import TOPOLOGIES, RailOptimized


def test_registered_and_counts():
    assert TOPOLOGIES["rail"] is RailOptimized
    t = RailOptimized(servers=4, gpus_per_server=4, spines=2, uplink_rate_mbps=20)
    fab = t.build()
    assert len(fab.hosts) == t.n_hosts == 16
    assert len(fab.links) == t.n_links == 16 + 4 * 2
    assert [n.name for n in fab.switches] == ["spine1", "spine2", "rail1", "rail2", "rail3", "rail4"]
    assert t.oversubscription == 1 and fab.params["oversubscription"] == 1.0


def test_gpu_j_of_every_server_is_on_rail_j():
    t = RailOptimized(servers=3, gpus_per_server=4, spines=2)
    fab = t.build()
    for i in range(3):
        for j in range(4):
            h = fab.node(t.host_name(i, j))
            assert h.leaf == f"rail{j + 1}" and h.server == f"srv{i + 1}"
            assert fab.host_attachment(h.name).a == f"rail{j + 1}"
            assert fab.host_attachment(h.name).a_port == i + 1
    # hosts in position order are server by server: h1..h4 are srv1's GPUs 0..3
    assert [h.server for h in fab.hosts[:5]] == ["srv1"] * 4 + ["srv2"]
    # every rail leaf reaches every spine once, and nothing else
    for j in range(4):
        assert fab.up_neighbours(f"rail{j + 1}") == ["spine1", "spine2"]
    assert len({h.ip for h in fab.hosts}) == len({h.mac for h in fab.hosts}) == 12


def test_map_carries_the_server_of_each_host():
    m = RailOptimized().build().to_map()
    assert m["hosts"][0]["server"] == "srv1" and m["hosts"][4]["server"] == "srv2"
    assert m["layers"] == ["spine", "leaf", "host"]


def test_mn_args_and_bad_values():
    t = RailOptimized.from_mn_args([2, 8, 1, 5, 40])
    assert (t.servers, t.gpus_per_server, t.spines, t.host_rate_mbps, t.uplink_rate_mbps) == (2, 8, 1, 5, 40)
    with pytest.raises(ScenarioError, match="topology.gpus_per_server"):
        RailOptimized(gpus_per_server=0)
    # the largest fabric keeps interface names within 15 characters
    RailOptimized(servers=64, gpus_per_server=16, spines=64).build().check_names()
