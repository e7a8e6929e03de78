"""Case C4 on a small fabric: no storm while idle."""
import time

from common.state import RunState
from controller.dataplane import PortQueue
from controller.qstats import QdiscStatsReader, ifindexes_for
from experiments.fabric import LiveFabric
from topologies.spineleaf import SpineLeaf

from .conftest import assert_clean, chosen_datapath


def test_idle_fabric_is_quiet(tmp_path):
    """Case C4 on a 2x2 Spine-Leaf: all-pairs ping 0% loss, then over 10 s of idle the switch
    ports carry almost nothing (no broadcast storm, no flooding loop)."""
    fab = SpineLeaf(spines=2, leaves=2, hosts_per_leaf=2).build()
    with RunState("test-idle") as st:
        with LiveFabric(fab, tmp_path, st, datapath=chosen_datapath(), switch_queue=lambda r: PortQueue(r, buffer_packets=100)) as lf:
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


def test_dead_host_shell_does_not_hang_teardown(tmp_path):
    """A host whose shell died mid-run (Mininet's stop would block on it forever): teardown
    finishes anyway and leaves nothing behind."""
    import os
    import signal

    import pytest

    def hung(*_):
        raise TimeoutError("teardown hung")
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(150)
    try:
        fab = SpineLeaf(spines=1, leaves=2, hosts_per_leaf=2).build()
        with pytest.raises(RuntimeError, match="boom"):
            with RunState("test-dead-shell") as st:
                with LiveFabric(fab, tmp_path, st, datapath=chosen_datapath(), switch_queue=lambda r: PortQueue(r, buffer_packets=50)) as lf:
                    os.kill(lf.host("h2").pid, signal.SIGKILL)
                    lf.host("h2").shell.wait()
                    raise RuntimeError("boom")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert_clean(str(tmp_path))


def test_fattree_k4_all_pairs_ping(tmp_path):
    """Case C4 on a k=4 Fat-Tree (4 core, 8 aggregation, 8 edge switches): all-pairs ping, no loss."""
    from topologies.fattree import FatTree
    fab = FatTree(k=4).build()
    with RunState("test-fattree") as st:
        with LiveFabric(fab, tmp_path, st, datapath=chosen_datapath(),
                        switch_queue=lambda r: PortQueue(r, buffer_packets=100)) as lf:
            assert lf.net.pingAll(timeout=2) == 0.0
    assert_clean(str(tmp_path))
