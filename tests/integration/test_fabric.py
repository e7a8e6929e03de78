"""Real fabrics: connectivity without storms (C4), TCP across spines (T1),
queues and offloads as configured (L1, L5)."""
import json
import re
import subprocess
import time

import pytest

from experiments.state import RunState
from controller.dataplane.hostknobs import offload_state
from controller.dataplane.ovsctl import OvsTxBuffer
from controller.dataplane.tcqdisc import PortQueue
from controller.qstats import QdiscStatsReader, ifindexes_for
from experiments.fabric import LiveFabric
from topologies.spineleaf import SpineLeaf

from .conftest import assert_clean, chosen_datapath


@pytest.fixture(scope="module")
def default_fabric(tmp_path_factory):
    """The default 2x4x6 Spine-Leaf, queues installed, torn down after the module."""
    work = tmp_path_factory.mktemp("fabric")
    fab = SpineLeaf().build()
    with RunState("test-fabric") as st:
        with LiveFabric(fab, work, st, datapath=chosen_datapath(),
                        switch_queue=lambda r: PortQueue(r, buffer_packets=100),
                        host_queue=lambda r: PortQueue(r, buffer_packets=1000)) as lf:
            yield lf
    assert_clean(str(work))


@pytest.mark.lane("host", reason="reachability on the kernel datapath is test_idle.py's 2x2 Spine-Leaf in the VM lane; "
                                 "all-pairs pingAll of 24 hosts took 40 s there")
def test_all_pairs_ping_default_fabric(default_fabric):
    """Case C4 with two spines: all-pairs ping loses nothing."""
    loss = default_fabric.net.pingAll(timeout=2)
    assert loss == 0.0


def test_tcp_transfer_across_spines(default_fabric):
    """Case T1: a 5 s TCP transfer h19 -> h1 (leaf4 -> spine -> leaf1) completes, with a timeout."""
    net = default_fabric.net
    srv = net.get("h1").popen(["iperf3", "-s", "-1", "-J"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)
        cli = net.get("h19").popen(["iperf3", "-c", "10.1.0.1", "-t", "5", "-J"], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        out, err = cli.communicate(timeout=30)
        assert cli.returncode == 0, err or out[-500:]
        res = json.loads(out)
        received = res["end"]["sum_received"]["bytes"]
        rate_mbps = res["end"]["sum_received"]["bits_per_second"] / 1e6
        assert received > 0
        assert 7.0 < rate_mbps <= 10.5, rate_mbps    # shaped at the 10 Mbit/s link rate
        srv.communicate(timeout=10)
    finally:
        if srv.poll() is None:
            srv.kill()


def test_queues_installed_at_link_rate(default_fabric):
    """Case L1: every switch port and host NIC is shaped as asked (read back from the kernel)."""
    for intf in default_fabric.fabric.switch_interfaces():
        q = json.loads(subprocess.run(["tc", "-j", "qdisc", "show", "dev", intf], capture_output=True, text=True).stdout)
        kinds = {x["kind"]: x for x in q}
        assert "htb" in kinds and kinds["pfifo"]["options"]["limit"] == 100
        rate = subprocess.run(["tc", "class", "show", "dev", intf], capture_output=True, text=True).stdout
        assert re.search(r"class htb 1:1 root leaf 10: .*rate 10Mbit ceil 10Mbit", rate), rate


def test_offloads_off_everywhere(default_fabric):
    """Cases T1/L5: TSO, GSO, GRO and checksum offloads are off on switch ports and host NICs."""
    for intf in default_fabric.fabric.switch_interfaces()[:8]:
        assert not any(offload_state(intf).values()), intf
    h = default_fabric.net.get("h7")
    assert not any(offload_state("h7-eth0", h.pid).values())


def test_sampler_reads_every_switch_port(default_fabric):
    names = default_fabric.fabric.switch_interfaces()
    r = QdiscStatsReader(ifindexes_for(names))
    try:
        got = r.read()
    finally:
        r.close()
    assert set(got) == set(names)


def test_ovs_transmit_buffer_is_enlarged_and_restored(default_fabric):
    """Userspace datapath: OVS's shared AF_PACKET transmit socket can be given room for every
    switch FIFO, and gets its own size back afterwards."""
    if default_fabric.datapath.mode != "user":
        pytest.skip("only the userspace datapath transmits through one AF_PACKET socket")
    assert default_fabric.net.ping(default_fabric.net.hosts[:2], timeout=2) == 0.0
    with OvsTxBuffer(1) as now:
        pass
    want = max(8 * 2**20, 2 * now.before_bytes)
    with OvsTxBuffer(want) as b:
        assert b.applied, b.reason
        assert b.after_bytes >= want
    with OvsTxBuffer(1) as again:
        assert again.before_bytes == now.before_bytes     # restored
