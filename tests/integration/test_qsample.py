"""The queue sampler's BPF reader against the kernel's own counters (the netlink dump), on a real
shaped veth with real packets queued and drained."""
import socket
import subprocess
import time

import pytest

from controller import portsetup, qstats
from controller.dataplane import hostknobs
from controller.dataplane.tcqdisc import PortQueue

from .conftest import own_netns


@pytest.fixture
def shaped_port():
    """fltqs0 in the root namespace (HTB 1 Mbit/s over a 50-packet pfifo, 10.250.7.1/30), its peer
    in a throwaway namespace (10.250.7.2); yields the root end's name."""
    holder = subprocess.Popen(["unshare", "-n", "sleep", "120"])
    try:
        own_netns(holder)
        subprocess.run(["ip", "link", "add", "fltqs0", "type", "veth", "peer", "name", "fltqs1"], check=True)
        subprocess.run(["ip", "link", "set", "fltqs1", "netns", str(holder.pid)], check=True)
        subprocess.run(["ip", "addr", "add", "10.250.7.1/30", "dev", "fltqs0"], check=True)
        subprocess.run(["ip", "link", "set", "fltqs0", "up"], check=True)
        subprocess.run(["nsenter", "-t", str(holder.pid), "-n", "sh", "-c",
                        "ip addr add 10.250.7.2/30 dev fltqs1 && ip link set fltqs1 up"], check=True)
        portsetup.configure_ports({None: [portsetup.PortPlan("fltqs0", PortQueue(1, buffer_packets=50))]})
        subprocess.run(["ping", "-c", "1", "-W", "2", "10.250.7.2"], check=True, capture_output=True)
        yield "fltqs0"
    finally:
        # the link first (its peer goes at once); a namespace ends asynchronously, and the next
        # test's fltqs0 would meet this one's still being removed
        hostknobs.delete_root_links(["fltqs0"])
        holder.kill()
        holder.wait()


def test_bpf_reader_matches_the_netlink_dump_while_a_queue_drains_and_exactly_after(shaped_port):
    reader, why = qstats.open_reader([shaped_port], "bpf")
    nl = qstats.QdiscStatsReader(qstats.ifindexes_for([shaped_port]))
    try:
        assert reader.method == "bpf", why
        assert reader.read() == nl.read()            # before any packet: the seed
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for _ in range(120):                          # 120 kB into a 50-packet queue at 1 Mbit/s
            s.sendto(b"x" * 1000, ("10.250.7.2", 9))
        s.close()
        seen = 0
        for _ in range(5):                            # draining: backlog only falls, so BPF's value
            time.sleep(0.05)                          # lies between the dumps taken around it
            before, mid, after = nl.read()[shaped_port], reader.read()[shaped_port], nl.read()[shaped_port]
            assert after[0] <= mid[0] <= before[0] and after[1] <= mid[1] <= before[1]
            assert before[3] <= mid[3] <= after[3]
            seen += mid[1] > 0
        assert seen >= 3
        time.sleep(1.2)                               # drained (50 frames of 1042 B: 0.42 s)
        got, want = reader.read()[shaped_port], nl.read()[shaped_port]
        assert got == want and got[0] == 0 and got[2] >= 60   # tail drops counted as tc counts them
    finally:
        reader.close()
        nl.close()


def test_auto_reads_few_ports_by_netlink_and_says_why(shaped_port):
    reader, why = qstats.open_reader([shaped_port], "auto", 200.0)
    try:
        assert reader.method == "netlink" and "1 ports" in why and "no BPF program" in why
    finally:
        reader.close()


def test_the_sampler_process_records_the_reader_it_used(shaped_port, tmp_path):
    p = subprocess.run([qstats.sys.executable, "-m", "controller.qstats", "--intfs", shaped_port, "--hz", "200",
                        "--out", str(tmp_path / "q.csv"), "--meta", str(tmp_path / "m.json"), "--duration-s", "1",
                        "--method", "bpf"],
                       capture_output=True, text=True, cwd=qstats.REPO)
    assert p.returncode == 0, p.stderr
    import json
    meta = json.loads((tmp_path / "m.json").read_text())
    assert meta["method"] == "bpf" and meta["method_reason"] is None
    # 10 runs beside a CPU-heavy process (make test-repeat N=10 K=test_qsample, 2026-12-03): all passed
    assert 190 <= meta["achieved_hz"] <= 201
    rows = (tmp_path / "q.csv").read_text().splitlines()
    assert rows[0].startswith("t_unix_s,intf,backlog_bytes") and len(rows) - 1 == meta["ticks"]
