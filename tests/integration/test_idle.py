"""Case C4 on a small fabric: no storm while idle."""
import time

from common.state import RunState
from controller.dataplane import PortQueue
from controller.qstats import QdiscStatsReader, ifindexes_for
from experiments.fabric import LiveFabric
from topologies.spineleaf import SpineLeaf

from .conftest import assert_clean


def test_idle_fabric_is_quiet(tmp_path):
    """Case C4 on a 2x2 Spine-Leaf: all-pairs ping 0% loss, then over 10 s of idle the switch
    ports carry almost nothing (no broadcast storm, no flooding loop)."""
    fab = SpineLeaf(spines=2, leaves=2, hosts_per_leaf=2).build()
    with RunState("test-idle") as st:
        with LiveFabric(fab, tmp_path, st, switch_queue=lambda r: PortQueue(r, buffer_packets=100)) as lf:
            assert lf.net.pingAll(timeout=2) == 0.0
            time.sleep(1)
            names = fab.switch_interfaces()
            r = QdiscStatsReader(ifindexes_for(names))
            before = r.read()
            time.sleep(10)
            after = r.read()
            r.close()
            moved = {i: after[i][4] - before[i][4] for i in names}
            assert sum(moved.values()) < 50, moved
    assert_clean(str(tmp_path))
