"""PFC buffer accounting in the kernel (controller/bpf/pfc.bpf.c) on a real forwarding path:
three network namespaces, a sender, a Linux router standing in for one switch, a receiver.
The router's port toward the receiver has a queue per priority behind a TBF pause gate;
closing the gate holds the lossless priority's packets, and the per-(ingress port, priority)
counter must follow the real queue byte for byte, with one XOFF and one XON event."""
import json
import subprocess
import sys
import time

import pytest

from common.pfc import pfc_frame
from controller.dataplane import pausegate

NS = ("flpfc-src", "flpfc-sw", "flpfc-dst")
SW, IN_PORT, OUT_PORT = 1, 1, 2
XOFF, XON = 30280, 24224
QUEUES = pausegate.PriorityQueues(rate_bps=10e6, fifo_bytes={0: 200_000, 3: 2_000_000})


def sh(*a):
    return subprocess.run(a, check=True, capture_output=True, text=True).stdout


def nsx(ns, *a):
    return sh("ip", "netns", "exec", ns, *a)


@pytest.fixture
def router():
    """src (10.78.1.1) -> sw (forwards; port flpb0 has the priority queues 0 and 3 of
    :class:`controller.dataplane.pausegate.PriorityQueues`) -> dst (10.78.2.1). Yields the pid of a process
    in sw's namespace."""
    for ns in NS:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)   # a killed earlier run
        sh("ip", "netns", "add", ns)
    holder = None
    try:
        sh("ip", "link", "add", "flpa0", "netns", NS[0], "type", "veth", "peer", "name", "flpa1", "netns", NS[1])
        sh("ip", "link", "add", "flpb0", "netns", NS[1], "type", "veth", "peer", "name", "flpb1", "netns", NS[2])
        for ns, dev, addr in ((NS[0], "flpa0", "10.78.1.1/24"), (NS[1], "flpa1", "10.78.1.2/24"),
                              (NS[1], "flpb0", "10.78.2.2/24"), (NS[2], "flpb1", "10.78.2.1/24")):
            nsx(ns, "ip", "addr", "add", addr, "dev", dev)
            nsx(ns, "ip", "link", "set", dev, "up")
            nsx(ns, "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off")
        nsx(NS[0], "ip", "route", "add", "default", "via", "10.78.1.2")
        nsx(NS[2], "ip", "route", "add", "default", "via", "10.78.2.2")
        nsx(NS[1], "sysctl", "-qw", "net.ipv4.ip_forward=1")
        holder = subprocess.Popen(["ip", "netns", "exec", NS[1], "sleep", "600"])
        time.sleep(0.2)
        pausegate.install_priority_queues("flpb0", QUEUES, holder.pid)
        yield holder.pid
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
        for ns in NS:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _send(dscp: int, rate_bps: float, duration_s: float) -> subprocess.Popen:
    code = f"""
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, ({dscp} << 2) | 2)
t = time.monotonic(); n = 0; gap = 1514 * 8 / {rate_bps}
while time.monotonic() - t < {duration_s}:
    s.sendto(b'x' * 1472, ('10.78.2.1', 9)); n += 1
    d = t + n * gap - time.monotonic()
    if d > 0:
        time.sleep(d)
print(n)
"""
    return subprocess.Popen(["ip", "netns", "exec", NS[0], sys.executable, "-c", code], stdout=subprocess.PIPE,
                            text=True)


def _backlog(handle: str) -> int:
    q = json.loads(nsx(NS[1], "tc", "-s", "-j", "qdisc", "show", "dev", "flpb0"))
    return next(x["backlog"] for x in q if x["handle"] == handle)


def _held_and_backlog(bpf) -> tuple[dict, int]:
    """Priority 3's counter and its gate's backlog at one moment. A paused gate still passes one
    frame every 1.5 s (:data:`controller.dataplane.pausegate.PAUSED_RATE_BPS`); under the VM lane's emulated
    CPU the ``tc`` read takes long enough for one to leave between the two reads (seen: the counter
    one frame above the backlog). Read again until the counter did not move around the backlog read."""
    for _ in range(10):
        before = bpf.read(SW, IN_PORT, 3)
        backlog = _backlog("13:")
        after = bpf.read(SW, IN_PORT, 3)
        if before["bytes"] == after["bytes"]:
            return after, backlog
    pytest.fail(f"priority 3's counter moved during each of 10 backlog reads (last {before} -> {after})")


def test_counter_follows_the_held_queue_with_one_xoff_and_one_xon(router, figure):
    from pyroute2 import IPRoute

    from controller.pfc.accounting import PfcBpf
    bpf = PfcBpf.load()
    try:
        with IPRoute(netns=f"/proc/{router}/ns/net", flags=0) as ipr:
            ia, ib = ipr.link_lookup(ifname="flpa1")[0], ipr.link_lookup(ifname="flpb0")[0]
            bpf.set_dscp_map({26: 3, 0: 0}, 0)
            bpf.set_port(ia, SW, IN_PORT, True)
            bpf.set_port(ib, SW, OUT_PORT, True)
            bpf.set_thresholds(SW, IN_PORT, 3, XOFF, XON)
            bpf.set_thresholds(SW, IN_PORT, 0, 0, 0)       # lossy: counted, never paused
            bpf.attach("flpa1", router)
            bpf.attach("flpb0", router)
            events = []
            bpf.on_events(events.append)
            # close priority 3's gate (what a pause does), send lossless and lossy traffic
            gates = pausegate.PauseGates("flpb0", QUEUES, router, kick_frame=pfc_frame("02:00:00:00:00:01", {3: 0}))
            gates.close_gate(3)
            t_close = time.monotonic()
            lossless, lossy = _send(26, 8e6, 1.0), _send(0, 1e6, 1.0)
            n_lossless, n_lossy = int(lossless.communicate()[0]), int(lossy.communicate()[0])
            time.sleep(0.3)
            bpf.poll(10)
            held, backlog = _held_and_backlog(bpf)
            # a paused gate passes the frame it had granted, then one every 1.5 s (8 kbit/s)
            passed_max = 2 + int((time.monotonic() - t_close) * pausegate.PAUSED_RATE_BPS / 8 / 1514)
            lossy_now = bpf.read(SW, IN_PORT, 0)
            t_open = time.monotonic()
            gates.open_gate(3)       # nothing else arrives: the gate's kick frame makes the qdisc run
            deadline = time.monotonic() + 5
            step_s, t = 0.0, t_open       # the longest look at the backlog: how late the drain is seen
            while time.monotonic() < deadline and _backlog("13:") > 0:
                bpf.poll(20)
                step_s, t = max(step_s, time.monotonic() - t), time.monotonic()
            drained_s = time.monotonic() - t_open
            step_s = max(step_s, time.monotonic() - t)
            bpf.poll(50)
            end, end_backlog = bpf.read(SW, IN_PORT, 3), _backlog("13:")
            leaked = dict(end)
            corrected = bpf.reconcile(SW, 3, [IN_PORT], lambda: _backlog("13:") == 0)
            end = bpf.read(SW, IN_PORT, 3)
            gates.close()
    finally:
        bpf.close()
    figure("lossless_sent", n_lossless)
    figure("lossy_sent", n_lossy)
    figure("leaked_fraction_of_backlog", leaked["bytes"] / max(backlog, 1))
    figure("drain_s_over_line_rate_s", drained_s / (backlog * 8 / 10e6 + 1e-9))
    assert n_lossless > 500 and n_lossy > 50
    # the counter is the queue, byte for byte (the sender has stopped; one frame passed the gate)
    assert held["bytes"] == backlog, (held, backlog)
    assert backlog >= (n_lossless - passed_max) * 1514, (backlog, n_lossless, passed_max)
    assert held["paused"] == 1 and held["xoff_events"] == 1 and held["underflows"] == 0
    assert lossy_now["bytes"] == 0 and lossy_now["packets"] >= n_lossy and lossy_now["xoff_events"] == 0
    kinds = [(e["kind"], e["sw"], e["port"], e["prio"]) for e in events]
    assert kinds == [("xoff", SW, IN_PORT, 3), ("xon", SW, IN_PORT, 3)], events
    xoff, xon = events
    assert XOFF <= xoff["bytes"] < XOFF + 1514 and XON - 1514 < xon["bytes"] <= XON
    # drained: the kernel's count may keep a few packets it did not see leave (6.18: 0-3 of 661;
    # calibrated, 10 runs beside a CPU-heavy process, 2026-12-02: 0-0.45% of the backlog, 1-in-1000
    # bound 0.92%, under the 1% asserted; the drain took 1.006-1.014x the line-rate time);
    # reconcile() zeroes what an empty switch still counts
    assert end_backlog == 0 and leaked["bytes"] <= 0.01 * backlog and leaked["bytes"] == corrected, (leaked, corrected)
    print(f"held {backlog} B; after the drain the kernel's count kept {leaked['bytes']} B; reconciled")
    assert end["bytes"] == 0 and end["paused"] == 0 and end["underflows"] == 0, end
    assert end["packets"] == n_lossless
    # resumed at once, drained at 10 Mbit/s, seen within one look at the backlog (each look a `tc`
    # run, slow under the VM lane's emulated CPU, where the drain was seen after 2.07x the
    # line-rate time once, 2026-12-06; on the host 1.006-1.014x)
    figure("backlog_look_s", step_s)
    assert drained_s < 1.5 * backlog * 8 / 10e6 + 0.1 + step_s, (drained_s, step_s)


def test_a_full_ingress_buffer_drops_and_counts(router, figure):
    """Case R3's other half: a (ingress port, priority) whose buffer is full drops what arrives
    (the egress queue could hold more): held bytes stay at the cap, every frame is accounted."""
    from pyroute2 import IPRoute

    from controller.pfc.accounting import PfcBpf
    cap = 100_000
    bpf = PfcBpf.load()
    try:
        with IPRoute(netns=f"/proc/{router}/ns/net", flags=0) as ipr:
            ia, ib = ipr.link_lookup(ifname="flpa1")[0], ipr.link_lookup(ifname="flpb0")[0]
        bpf.set_dscp_map({26: 3}, 0)
        bpf.set_port(ia, SW, IN_PORT, True)
        bpf.set_port(ib, SW, OUT_PORT, True)
        bpf.set_thresholds(SW, IN_PORT, 3, XOFF, XON, cap_bytes=cap)
        bpf.attach("flpa1", router)
        bpf.attach("flpb0", router)
        gates = pausegate.PauseGates("flpb0", QUEUES, router)
        gates.close_gate(3)
        n = int(_send(26, 8e6, 0.5).communicate()[0])
        time.sleep(0.2)
        held, backlog = bpf.read(SW, IN_PORT, 3), _backlog("13:")
        gates.open_gate(3)
        gates.close()
    finally:
        bpf.close()
    figure("cap_drops", held["drops"])
    assert held["bytes"] == backlog and cap - 1514 < backlog <= cap
    slipped = held["packets"] - backlog // 1514            # the frame the closing gate let through
    assert slipped in (0, 1)
    assert held["drops"] == n - held["packets"] and held["drops"] > 100
