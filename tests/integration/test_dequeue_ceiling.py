"""The ceiling check's program on this kernel: a burst of full frames through an HTB port on a
throwaway veth, counted by the real BPF program at the qdisc dequeue tracepoint, judged by the
fidelity check as a round would. A shaper that holds its rate and bucket passes; one whose rate or
bucket is larger than the run recorded fails, naming the port."""
import subprocess
import sys
import time

import pytest

from common.units import FRAME_BYTES
from controller.dequeuebpf import DequeueGaps
from experiments.features.fidelity import LEAD_TOLERANCE_US, port_figures, serialisation_section

from .conftest import own_netns

PORT, PEER = "fldq0", "fldq1"
RATE_MBPS = 10
#: The bucket the run records for the port: 1000 us at 10 Mbit/s, under one frame (1211 us).
BUCKET_BYTES = 1250
FRAMES = 300

SENDER = """
import socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
frame = b"\\xff" * 6 + b"\\x02\\x00\\x00\\x00\\x00\\x01" + b"\\x88\\xb5" + bytes(1500)
for _ in range(int(sys.argv[2])):
    s.send(frame)
"""


@pytest.fixture
def netns():
    """The pid of a process in a new network namespace holding the veth pair fldq0 / fldq1, both up,
    without IPv6 (gone with the process)."""
    holder = subprocess.Popen(["unshare", "-n", "sleep", "120"])
    try:
        pid = own_netns(holder)
        for key in ("all", "default"):     # no IPv6 router solicitations among the counted frames
            _ns(pid, "sysctl", "-qw", f"net.ipv6.conf.{key}.disable_ipv6=1")
        _ns(pid, "ip", "link", "add", PORT, "type", "veth", "peer", "name", PEER)
        for n in (PORT, PEER):
            _ns(pid, "ip", "link", "set", n, "up")
        # frames sent before the kernel's link watch activates the port's qdisc are dropped
        for _ in range(100):
            if " state UP " in _ns(pid, "ip", "-o", "link", "show", "dev", PORT):
                break
            time.sleep(0.05)
        yield pid
    finally:
        holder.kill()
        holder.wait()


def _ns(pid, *argv) -> str:
    return subprocess.run(["nsenter", "-t", str(pid), "-n", "--", *argv], capture_output=True, text=True,
                          check=True).stdout


def _shape_and_send(pid: int, rate_mbps: float, burst_bytes: int) -> tuple[dict, str]:
    """HTB at ``rate_mbps`` with ``burst_bytes`` over a 1000-packet FIFO on fldq0; FRAMES full
    frames sent at once through it while the program watches the port at RATE_MBPS: (the port's
    figures as the round records them for a bucket of BUCKET_BYTES, the qdiscs' own counts)."""
    _ns(pid, "tc", "qdisc", "add", "dev", PORT, "root", "handle", "1:", "htb", "default", "1")
    _ns(pid, "tc", "class", "add", "dev", PORT, "parent", "1:", "classid", "1:1", "htb", "rate", f"{rate_mbps}mbit",
        "burst", str(burst_bytes), "cburst", str(burst_bytes))
    _ns(pid, "tc", "qdisc", "add", "dev", PORT, "parent", "1:1", "handle", "10:", "pfifo", "limit", "1000")
    with DequeueGaps.load() as gaps:
        gaps.watch(PORT, RATE_MBPS * 1e6)
        _ns(pid, sys.executable, "-c", SENDER, PORT, str(FRAMES))
        time.sleep(FRAMES * FRAME_BYTES * 8 / (rate_mbps * 1e6) + 0.3)
        raw = gaps.read(PORT)
    assert raw["max_len"] == FRAME_BYTES, raw
    return port_figures(raw, RATE_MBPS, BUCKET_BYTES), _ns(pid, "tc", "-s", "qdisc", "show", "dev", PORT)


@pytest.mark.lane("host", reason="the program, the tracepoint and HTB are the same on both kernels; the host lane is faster")
def test_a_shaper_that_holds_its_rate_and_bucket_stays_under_its_ceiling(netns):
    f, stats = _shape_and_send(netns, RATE_MBPS, BUCKET_BYTES)
    # the qdisc sent every frame; the tracepoint's program saw 296-300 of them in 18 runs here (as
    # did a second program on the same tracepoint: the kernel did not fire it for a few)
    assert f["packets"] >= 0.95 * FRAMES and f"Sent {FRAMES * FRAME_BYTES} bytes {FRAMES} pkt" in stats, (f, stats)
    assert f["lead_us"] <= f["bucket_us"] + LEAD_TOLERANCE_US, f
    assert serialisation_section({PORT: f}, PORT)["failures"] == []


@pytest.mark.lane("host", reason="the program, the tracepoint and HTB are the same on both kernels; the host lane is faster")
@pytest.mark.parametrize("rate_mbps, burst_bytes, why", [
    (RATE_MBPS * 1.05, BUCKET_BYTES, "a rate 5% above the line's"),
    (RATE_MBPS, 10 * FRAME_BYTES, "a bucket of ten frames"),
])
def test_a_shaper_faster_than_the_recorded_line_fails_the_ceiling(netns, rate_mbps, burst_bytes, why):
    f, _ = _shape_and_send(netns, rate_mbps, burst_bytes)
    failures = serialisation_section({PORT: f}, PORT)["failures"]
    assert len(failures) == 1 and failures[0].startswith(f"{PORT}: sent faster than its {RATE_MBPS} Mbit/s"), (why, f)
