"""Issue 5: per-packet ECN marking on real packets through a real fabric.

Two hosts send constant-rate UDP (every packet ECT(0), the first included:
case T4) through one leaf to a third host, 2 x 6 Mbit/s into a 10 Mbit/s
port, so the port's FIFO grows by about one packet per six arrivals (6:
what one Python sender paces reliably under the VM lane's emulated CPU,
which reached only 7.2 of 9.5 and 5.8 of 6.5 Mbit/s). Each sender first
sends a few warm-up packets on the same 5-tuple, left out of the
analysis: on the kernel datapath a flow's first packets take a trip to
ovs-vswitchd (measured in the VM lane: the first packet 44 ms late, the
next dozen behind it). A CE packet reaching the receiving
socket also shows the marker fixed the IP header checksum: the kernel drops
packets whose header checksum is wrong. What
queue each packet found is reckoned independently of the marker, from its
one-way delay on the hosts' shared clock (tests/marking.py): (delay -
idle delay) x rate. The marker is what this kernel offers (auto: kernel RED
where sch_red exists, the BPF marker here), plus the BPF marker explicitly
where it can run.
"""
import contextlib
import json
import os
import subprocess
import sys
import time

import pytest

from experiments import probe
from common.ecn import port_profiles
from experiments.scenario import FRAME_BYTES, validate
from experiments.state import RunState
from controller.dataplane import ovsctl, tcqdisc
from tests import marking
from experiments.fabric import REPO, LiveFabric
from traffic.udp_probe import WARMUP_FLAG
from experiments.features.ecn.plan import choose_marker, ecn_plan
from experiments.live import warm_up_reachability
from experiments.runner import datapath_buffer_bytes, port_queue
from topologies.spineleaf import SpineLeaf

from .conftest import assert_clean

RATE_BPS = 10e6
BOTTLENECK = "leaf1-eth1"          # leaf1's port toward h1


def guard_bytes(lf, tmp_path, rate_bps: float = RATE_BPS) -> float:
    """The band around a threshold that the delay reckoning cannot resolve, measured on this
    fabric (ports at ``rate_bps``): one frame plus the p99 of the backlog it computes when no queue
    builds (one sender at 4 Mbit/s: two senders would sometimes collide and queue for real)."""
    noise = marking.reckoning_noise_bytes(overload(lf, tmp_path, "idle", packets=150, rate_mbps=4.0,
                                                   senders=("h2",), port_mbps=rate_bps / 1e6), rate_bps)
    print(f"delay reckoning noise p99: {noise:.0f} B")
    return FRAME_BYTES + noise


#: An overloaded port must drain at this share of its rate for the RED profile test to judge the
#: BPF marker: its virtual queue is served at the configured rate, so a slower port's real queue
#: outgrows it (the test allows for the difference above this share; see drain_slack).
MIN_DRAIN_SHARE = 0.9


def _env():
    return probe.probe()


def bpf_marker_usable(env) -> bool:
    from controller.ecn.marker import OBJECT
    return OBJECT.exists() and bool(env["qdiscs"].get("clsact"))


@contextlib.contextmanager
def marking_fabric(tmp_path, profile, marker="auto", rate_mbps=10):
    """A 1-spine, 2-leaf, 3-hosts-per-leaf fabric, every link at ``rate_mbps``, ``profile`` on every switch port."""
    sc = validate({"name": "marking", "topology": {"spines": 1, "leaves": 2, "hosts_per_leaf": 3,
                                                   "host_rate_mbps": rate_mbps, "uplink_rate_mbps": rate_mbps},
                   "queues": {"buffer_packets": 100}, "traffic": {"senders": 2},
                   "ecn": {"marker": marker, "profile": profile}})
    fabric = SpineLeaf(**{k: v for k, v in sc.topology.model_dump().items() if k != "kind"}).build()
    fmap = fabric.to_map()
    env = _env()
    kind, _why = choose_marker(sc, env, True)
    slack_s = env["shaper"]["slack_s"]
    plan = ecn_plan(sc, fmap, kind, port_profiles(sc.ecn, fmap), slack_s)
    with RunState(f"marking-{tmp_path.name}") as st:
        with LiveFabric(fabric, tmp_path / "run", st, datapath=env["datapath"],
                        switch_queue=lambda r: port_queue(sc, r, slack_s),
                        host_queue=lambda r: tcqdisc.PortQueue(r, buffer_packets=1000), ecn_plan=plan) as lf:
            warm_up_reachability(lf)     # ovs-vswitchd opens its transmit socket at its first packet
            buf = contextlib.nullcontext()
            if env["datapath"] == "user":
                buf = ovsctl.OvsTxBuffer(datapath_buffer_bytes(sc, fabric), st)
            with buf:
                assert env["datapath"] != "user" or buf.applied or buf.reason == "already large enough", buf.record()
                yield lf, kind
    assert_clean(str(tmp_path / "run"))


WARMUP_PACKETS = 20


#: How an :func:`overload`'s sender starts: traffic.udp_probe's ``send`` (its arguments, with
#: ``START`` for the start time), once it has printed ``LOADED`` and read the common start (Unix
#: seconds) from its stdin. Each overload then waits for its senders' start-up and warm-up, not a
#: fixed 2 s (which cost about 1.2 s per overload, 30 overloads in this module).
SEND_ON_CUE = ("import sys\n"
               "from traffic import udp_probe\n"
               "print('LOADED', flush=True)\n"
               "start = sys.stdin.readline().strip()\n"
               "sys.exit(udp_probe.main([start if a == 'START' else a for a in sys.argv[1:]]))\n")
#: Beyond the warm-up's own length, the time the senders get between reading the start and the
#: start itself (a socket, the warm-up's sleeps running long on a loaded machine).
CUE_MARGIN_S = 0.3


def overload(lf, tmp_path, tag, tos=2, packets=400, rate_mbps=6.0, senders=("h2", "h3"), port_mbps=10):
    """Constant-rate UDP from ``senders`` to h1; returns the receiver's rows (see traffic.udp_probe).

    Each sender reports the rate it achieved (case T5); where an overload of the ``port_mbps``
    port is meant, their sum must exceed the port's rate by 5%, or the run proves nothing."""
    out = tmp_path / f"rx-{tag}.json"
    rx = lf.host("h1").popen([sys.executable, "-m", "traffic.udp_probe", "recv", "6000", "60", str(out)],
                             cwd=str(REPO), stdout=subprocess.PIPE, text=True)
    txs = []
    try:
        assert rx.stdout.readline().strip() == "READY"
        for i, h in enumerate(senders):      # all started at once, each told its start once all are loaded
            txs.append(lf.host(h).popen(
                [sys.executable, "-c", SEND_ON_CUE, "send", lf.fabric.node("h1").ip, "6000", str(rate_mbps),
                 str(packets), str(FRAME_BYTES), str(tos), str(i), "START", str(WARMUP_PACKETS)],
                cwd=str(REPO), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for p in txs:
            assert p.stdout.readline().strip() == "LOADED", p.stderr.read() if p.poll() is not None else ""
        warmup_s = WARMUP_PACKETS * 4 * FRAME_BYTES * 8 / (rate_mbps * 1e6)
        start = time.time() + warmup_s + CUE_MARGIN_S
        for p in txs:
            p.stdin.write(f"{start!r}\n")
            p.stdin.flush()         # communicate() closes it
        for p in txs:
            assert p.stdout.readline().strip() == "READY"
        achieved = []
        for p in txs:
            text, err = p.communicate(timeout=60)
            assert f"sent {packets} " in text, text + err
            achieved.append(float(text.split("achieved_mbps")[1]))
        print(f"{tag}: senders achieved {achieved} of {rate_mbps} Mbit/s each")
        if rate_mbps * len(senders) > port_mbps and sum(achieved) < 1.05 * port_mbps:
            why = f"senders paced {achieved} Mbit/s: no overload of the {port_mbps} Mbit/s port (case T5)"
            if os.environ.get("FABRICLAB_LANE") == "vm":
                # the emulated CPU's speed follows the host's: on 2026-12-01 it paced 4.85 + 4.31 of
                # 6 Mbit/s each (a 5 Mbit/s port with 2 x 3.3 built no queue above K either); the
                # test cannot measure there, which is a skip, not a pass
                pytest.skip(f"VM lane: {why}")
            raise AssertionError(why)
        assert rx.wait(30) == 0
    finally:
        for p in txs + [rx]:
            if p.poll() is None:
                p.kill()
    time.sleep(0.3)    # the queue drains before whatever comes next
    rows = [r for r in json.loads(out.read_text())["packets"] if not r[0] & WARMUP_FLAG]
    # every sender began its measured packets at the start, together, as with the fixed 2 s wait the
    # bounds in this module were calibrated with (a sender whose start-up and warm-up overran
    # CUE_MARGIN_S would start late, after its warm-up). Not a calibrated figure: the precondition
    # of those figures; 0.1 s is 50 packets at 6 Mbit/s
    late_s = {f: min(r[2] for r in rows if r[0] == f) / 1e9 - start for f in range(len(senders))}
    print(f"{tag}: senders' first measured packet {({f: round(x, 4) for f, x in late_s.items()})} s after the start")
    assert all(0 <= x < 0.1 for x in late_s.values()), (tag, late_s)
    return rows


def check_step(rows, k_bytes, guard, figure=None, tag=""):
    """Step-profile marks of one overload (``rows`` from :func:`overload`) against K.

    What each packet found queued is counted (tests/marking.py queue_ahead_bytes), not timed: under
    the VM lane's emulated CPU a 10 Mbit/s port drains at 0.95-0.97 of its rate, its dequeue
    standing still now and then, and a wait behind a stall reads as a longer queue. One CI run
    (2026-12-04) read 15 of 514 packets as unmarked above K = 45 that way; reckoning at the rate
    the port drained on average instead moved the error below K (2 of 99 CE there, in 1 of 5 runs)."""
    drain = min(1.0, marking.drain_share(rows, RATE_BPS))
    timed = marking.step_check(rows, RATE_BPS, k_bytes, guard)
    res = marking.step_check(rows, RATE_BPS, k_bytes, guard, reckon=marking.queue_ahead_bytes)
    print(f"{tag}drain share {drain:.3f}; timed: CE above K {timed['frac_above_ce']:.4f}, below K "
          f"{timed['below_ce']} of {timed['below']}; counted: {res['frac_above_ce']:.4f}, {res['below_ce']} of "
          f"{res['below']}")
    if figure is not None:
        figure(f"{tag}drain_share", drain)
        figure(f"{tag}timed_frac_above_ce", timed["frac_above_ce"])
        figure(f"{tag}frac_above_ce", res["frac_above_ce"])
        figure(f"{tag}below_ce", res["below_ce"])
        figure(f"{tag}above", res["above"])
    assert res["max_queue_bytes"] > k_bytes + 10 * FRAME_BYTES, res      # the overload really built a queue
    assert res["above"] >= 50 and res["below"] >= 10, res
    assert res["frac_above_ce"] >= 0.99, res
    # below K, as above it, the bound allows the reckoning's 1%: one CI run (2026-12-03) had 1 of
    # 114 packets reckoned below K arrive CE (12 runs here beside a CPU-heavy process: none)
    assert res["below_ce"] <= 0.01 * res["below"], res
    return res


STEP_K_BYTES = 20 * FRAME_BYTES


#: The step fabric's marker: the lane's own (auto: kernel RED where sch_red exists, the BPF marker
#: here). The BPF marker's step test does not run in the VM lane: under the emulated CPU its virtual
#: queue lags the real one (92% CE above K there in CI's rehearsal, 2026-12-02); the VM lane runs the
#: BPF marker in the RED profile test at 5 Mbit/s instead.
STEP_MARKERS = ["auto"]


@pytest.fixture(scope="class")
def step_fabric(request, tmp_path_factory):
    """One fabric with the step profile (K = 20 packets) per marker (``request.param``, default
    auto) for the step and not-ECT tests. Class-scoped: it is torn down when :class:`TestStepFabric`
    ends, before the RED profile test brings up its own fabric (one fabriclab run per machine)."""
    marker = getattr(request, "param", "auto")
    tmp = tmp_path_factory.mktemp(f"ecn-step-{marker}")
    with marking_fabric(tmp, {"step": {"k_bytes": STEP_K_BYTES}}, marker=marker) as (lf, kind):
        yield lf, kind


def reset_k(step_fabric):
    """The shared step fabric with K back at 20 packets (a test may move it)."""
    lf, kind = step_fabric
    lf.ecn_request({BOTTLENECK: {"step": {"k_bytes": STEP_K_BYTES}}})
    return lf, kind


def marked(lf) -> int:
    """Packets the bottleneck's marker has marked so far (its counters are cumulative)."""
    return lf.ecn_counters().get(BOTTLENECK, {}).get("marked") or 0


class TestStepFabric:
    """The step and not-ECT tests on one shared step fabric (K reset per test, marks read as deltas)."""

    @pytest.mark.parametrize("step_fabric", STEP_MARKERS, indirect=True)
    def test_step_marks_packets_above_k_not_below_and_k_changes_mid_run(self, tmp_path, step_fabric, figure):
        """Step profile: of packets that found more than K queued, >= 99% arrive CE; below K, <= 1%.
        Then the controller moves K on the running fabric and the marks follow the new K."""
        k1, k2 = STEP_K_BYTES, 45 * FRAME_BYTES
        lf, kind = reset_k(step_fabric)
        guard = figure("guard_bytes", guard_bytes(lf, tmp_path))
        # calibrated (10 runs beside a CPU-heavy process, 2026-12-02): guard 1687 / 1844 / 2186 B,
        # 1-in-1000 bound 2700 B; CE above K 100% in every run at both K, none below (and 12 more
        # runs on 2026-12-03: guard 1686 / 1866 / 2772 B, the same marks). With the queue counted
        # (2026-12-04, make test-repeat N=10 K=test_step_marks, and VM=1 LOAD=0 for the VM lane):
        # here guard 1664 / 1908 / 3052 B, CE above K 100% at both K, none below; in the VM guard
        # 1741 / 2004 / 4875 B (1-in-1000 bound 7334 B), CE above K 0.9985 / 1 / 1 at K = 20 and
        # 100% at K = 45, none below (timed instead, the same packets gave 0.9877 / 1 / 1 at K = 20)
        assert guard < 5 * FRAME_BYTES, guard       # the reckoning can still tell K1 from K2
        before = marked(lf)
        first = check_step(overload(lf, tmp_path, "k1"), k1, guard, figure, "k1_")
        assert marked(lf) > before, lf.ecn_counters()[BOTTLENECK]
        lf.ecn_request({BOTTLENECK: {"step": {"k_bytes": k2}}})
        second = check_step(overload(lf, tmp_path, "k2"), k2, guard, figure, "k2_")
        print(f"marker {kind}: guard {guard:.0f} B; K={k1} B: {first}; K={k2} B: {second}")

    @pytest.mark.parametrize("step_fabric", ["auto"], indirect=True)
    def test_not_ect_packets_are_never_marked_and_meet_only_the_buffer(self, tmp_path, step_fabric, figure):
        """Not-ECT traffic through an ECN port: zero CE marks; packets are not dropped early at K (the
        queue reaches the buffer)."""
        lf, kind = reset_k(step_fabric)
        before = marked(lf)
        rows = overload(lf, tmp_path, "notect", tos=0, packets=720)
        after = marked(lf)
        assert rows and all(r[4] == 0 for r in rows), {r[4] for r in rows}
        q = marking.queue_seen_bytes(rows, RATE_BPS)
        figure("max_queue_packets", max(q) / FRAME_BYTES)
        assert max(q) > 90 * FRAME_BYTES, max(q)
        assert after == before, lf.ecn_counters().get(BOTTLENECK)


@pytest.mark.parametrize("marker", ["bpf", "red"])
def test_red_profile_marks_on_the_configured_line(tmp_path, marker, figure):
    """RED profile (Kmin 10, Kmax 60 packets, Pmax 0.2) on a 5 Mbit/s port: measured marking probability per
    queue-length bucket between Kmin and Kmax within 0.05 of the configured line (on kernel RED
    through the probability compensation of common.redparams.red_tc_probability), beyond what
    the queue reckoning resolves: a packet reckoned at q found q +- guard, whose line values differ
    by up to Pmax x guard / (Kmax - Kmin) (guard measured on the fabric, as for the step tests)."""
    env = _env()
    if marker == "bpf" and not bpf_marker_usable(env):
        pytest.skip("the BPF marker cannot run here (object not built or no clsact)")
    if marker == "red" and not env["qdiscs"].get("red"):
        pytest.skip(f"kernel {env['kernel']} has no sch_red")
    kmin, kmax, pmax = 10 * FRAME_BYTES, 60 * FRAME_BYTES, 0.2
    rows, drains = [], []
    port_mbps = 5     # the VM lane's Python senders keep 3 Mbit/s steady; 6 fell to 5.2 there
    with marking_fabric(tmp_path, {"red": {"kmin_bytes": kmin, "kmax_bytes": kmax, "pmax": pmax}},
                        marker=marker, rate_mbps=port_mbps) as (lf, kind):
        assert kind == marker
        guard = guard_bytes(lf, tmp_path, port_mbps * 1e6)
        # 12 rounds: ~750 packets per bucket, a binomial 95% half-width near 0.028 at the top
        # bucket (8 rounds gave 0.033, and a CI run with 0.052 off there)
        for i in range(12):
            # 2 x 3 Mbit/s into 5: the queue rises by one packet per 6 arrivals, through the RED
            # region to past Kmax
            got = overload(lf, tmp_path, f"red{i}", packets=260, rate_mbps=3.0, port_mbps=port_mbps)
            drains.append(marking.drain_share(got, port_mbps * 1e6))
            rows += got     # overload's own 0.3 s after it drained the queue (past Kmax: 0.15 s here)
    d = min(drains)
    figure("lowest_drain_share", d)
    print(f"the port drained at {d:.3f}-{max(drains):.3f} of its rate")
    if d < MIN_DRAIN_SHARE:
        why = (f"the port drained at {d:.3f} of its rate in a round: the BPF marker's virtual queue "
               f"(served at the configured rate) no longer follows the real queue")
        if os.environ.get("FABRICLAB_LANE") == "vm":
            pytest.skip(f"VM lane: {why} (the emulated CPU)")
        raise AssertionError(why)
    buckets = marking.red_buckets(rows, port_mbps * 1e6, kmin, kmax, pmax, buckets=5)
    print(json.dumps(buckets, indent=1))
    slack = pmax * guard / (kmax - kmin)
    if marker == "bpf":
        # the offered load is 1.2x the port: the real queue grows at (1.2 - d) x rate, the marker's
        # virtual one at 0.2 x rate, so at Kmax the virtual queue is short by Kmax (1 - 0.2 / (1.2 - d))
        # (0 on this machine, d = 1.000; 0.035 at the VM lane's d = 0.966)
        drain_slack = pmax * kmax * (1 - 0.2 / (1.2 - min(d, 1.0))) / (kmax - kmin)
        figure("drain_slack", drain_slack)
        slack += drain_slack
    figure("guard_bytes", guard)
    figure("worst_bucket_error_minus_tolerance",
           max(abs(b["measured"] - b["expected"]) for b in buckets) - (0.05 + slack))
    figure("fewest_packets_in_a_bucket", min(b["packets"] for b in buckets))
    print(f"guard {guard:.0f} B: tolerance 0.05 + {slack:.3f}")
    # calibrated with the BPF marker (10 runs beside a CPU-heavy process, 2026-12-02): the worst
    # bucket's error minus the tolerance -0.043 / -0.040 / -0.031 (1-in-1000 bound -0.020, below 0);
    # the fewest packets in a bucket 710-720. VM lane, with the drain allowance (10 runs in the VM,
    # no CPU-heavy process beside it: with one the senders there paced 2.3-2.5 of 3 Mbit/s and every
    # run skipped, case T5; 2026-12-03): lowest drain share 0.953 / 0.962 / 0.967 (1-in-1000 bound
    # 0.938, above MIN_DRAIN_SHARE), allowance 0.034 / 0.038 / 0.046, worst bucket error minus the
    # tolerance -0.063 / -0.059 / -0.052 (1-in-1000 bound -0.042, below 0); 10 of 10 passed
    for b in buckets:
        assert b["packets"] >= 450, b
        assert abs(b["measured"] - b["expected"]) <= 0.05 + slack, b
