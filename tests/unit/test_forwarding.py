"""The forwarding verdict (experiments.features.forwarding): the data plane is blamed from what was
saturated, not from what the flows carried."""
from __future__ import annotations

from experiments.features.cpu import FORWARDING_THREAD, headroom_section, per_second, CpuTimes
from experiments.features.forwarding import SATURATED_CORES, forwarding_verdict


def summary(wire_mbps, model_mbps=10.0, window_s=(0.0, 4.0), idle=None, thread=None, used=None, wait=None):
    """A round's summary with a throughput section and per-second CPU readings."""
    cpu = {"interval_s": 1.0, "idle_cores_per_second": idle if idle is not None else [1.2] * 6,
           "cores_used": used or {"ovs-vswitchd": 0.1, "agents_and_others": 0.3}}
    if thread is not None:
        cpu["forwarding_thread_cores_per_second"] = thread
    if wait is not None:
        cpu["forwarding_thread_wait_cores_per_second"] = wait
    return {"throughput": {"wire_aggregate_mbps": wire_mbps, "model_aggregate_mbps": model_mbps,
                           "model_routing": "max-min", "window_s": list(window_s)},
            "fidelity": {"cpu": cpu}}


def test_flows_over_before_one_cpu_reading_are_not_judged_even_on_a_busy_machine():
    # two 4 KB responses at 10 Mbit/s: 0.72 of the link over a 7 ms window, no idle CPU
    f = forwarding_verdict(summary(7.2, window_s=(0.0, 0.007), idle=[0.0, 0.0], thread=[0.01, 0.0]), "user")
    assert not f["checked"] and not f["forwarding_limited"] and f["failures"] == [] and f["share"] == 0.72
    assert f["reason"].startswith("the flows carried 0.72 of the model in 7 ms, less than 2 CPU readings of 1 s")


def test_flows_that_lived_few_round_trips_are_not_judged_as_their_ramp_weighs_too_much():
    # 2 x 100 kB over 160 ms of propagation: 0.3 of the model over 1.2 s, 7.5 round trips, no idle CPU
    s = summary(3.0, window_s=(0.0, 1.2), idle=[0.0, 0.0], thread=[0.1, 0.1])
    s["scale"] = {"measured_rtt_s": 0.1601, "measured_rtt_full_frame_s": 0.16}
    f = forwarding_verdict(s, "kernel")
    assert not f["checked"] and f["failures"] == []
    assert f["reason"].startswith("the flows carried 0.30 of the model over 1.200 s, 8 round trips of 160.0 ms "
                                  "(fewer than 100)")
    s["scale"] = {"measured_rtt_full_frame_s": 0.002}                      # 1500 round trips: judged
    s["throughput"]["window_s"] = [0.0, 3.0]
    assert forwarding_verdict(s, "kernel")["limited_by"] == "host_cpu"


def test_slow_flows_on_an_idle_forwarder_are_not_blamed_on_the_data_plane():
    # 2 s of flows at 0.72 of the link (senders that paused), the thread idle, idle CPU throughout
    f = forwarding_verdict(summary(7.2, window_s=(0.0, 2.0), thread=[0.01, 0.0, 0.02]), "user")
    assert f["checked"] and not f["forwarding_limited"] and f["limited_by"] is None and f["failures"] == []
    assert f["verdict"].startswith("not the data plane: the flows carried 7.2 Mbit/s on the wire, 0.72 of")
    assert "the traffic did not fill the links" in f["verdict"]
    assert f["evidence"]["seconds_needed"] == 2 and f["evidence"]["forwarding_thread_saturated_seconds"] == 0


def test_an_incast_is_judged_over_its_longest_flow_not_only_while_all_flows_ran():
    s = summary(50.0, 100.0, window_s=(0.5, 1.5), idle=[0.6] * 8, thread=[0.9, 0.95, 0.97, 0.5, 0.4, 0.3, 0.2, 0.1])
    s["flows"] = {"fct_max_s": 8.0}
    f = forwarding_verdict(s, "user")
    assert f["evidence"]["seconds_needed"] == 4 and not f["forwarding_limited"]        # 3 of 4 needed


def test_seconds_short_of_cpu_either_way_add_up():
    # 2 seconds with the thread at a core, 2 more with no idle CPU: 4 of the 3 needed
    s = summary(30.0, 100.0, window_s=(0.0, 6.0), idle=[0.5, 0.0, 0.0, 0.4, 0.5, 0.6],
                thread=[0.95, 0.3, 0.3, 0.9, 0.3, 0.3])
    f = forwarding_verdict(s, "user")
    assert f["forwarding_limited"] and f["evidence"]["seconds_short_of_cpu"] == 4 and f["limited_by"] == "host_cpu"


def test_a_forwarding_thread_that_waited_for_a_cpu_blames_the_host_not_the_data_plane():
    # another process took the thread's core: it ran 0.5 and waited 0.45 of each second, no core idle
    s = summary(30.0, 100.0, window_s=(0.0, 6.0), idle=[0.02] * 6, thread=[0.5] * 6, wait=[0.45] * 6,
                used={"ovs-vswitchd": 0.5, "agents_and_others": 1.2})
    f = forwarding_verdict(s, "user")
    assert f["forwarding_limited"] and f["limited_by"] == "host_cpu"
    assert f["failures"][0].startswith("CPU-limited: the flows carried 30.0 Mbit/s")
    assert "forwarding thread had frames to forward but waited for a CPU" in f["failures"][0]
    assert "median 0.50 running, 0.45 waiting" in f["failures"][0] and "agents_and_others 1.20" in f["failures"][0]
    # the same thread at a core with little waiting: its own speed is the limit
    g = forwarding_verdict({**s, "fidelity": {"cpu": {**s["fidelity"]["cpu"],
                                                      "forwarding_thread_cores_per_second": [0.97] * 6,
                                                      "forwarding_thread_wait_cores_per_second": [0.03] * 6}}},
                           "user")
    assert g["limited_by"] == "forwarding_thread" and "median 0.97 running, 0.03 waiting" in g["failures"][0]
    # waiting as long while cores stood idle (a quiet machine's k=4 Fat-Tree permutation: 0.74
    # running, 0.24 waiting, 0.40 idle): the scheduler's wake-ups, not others' work; its own speed
    h = forwarding_verdict({**s, "fidelity": {"cpu": {**s["fidelity"]["cpu"], "idle_cores_per_second": [0.4] * 6,
                                                      "forwarding_thread_cores_per_second": [0.74] * 6,
                                                      "forwarding_thread_wait_cores_per_second": [0.24] * 6}}},
                           "user")
    assert h["limited_by"] == "forwarding_thread" and h["evidence"]["busy_seconds_idle_cores_median"] == 0.4
    assert "median 0.74 running, 0.24 waiting, 0.40 cores idle" in h["failures"][0]


def test_a_saturated_forwarding_thread_is_named_even_with_a_queue_and_idle_cores():
    # the 2x2x4 Spine-Leaf at 1000 Mbit/s: 0.187 of the model, the thread at a core, 0.69+ idle cores
    thread = [0.3, 0.97, 0.99, 1.0, 0.98, 0.96, 0.99, 0.4]
    f = forwarding_verdict(summary(187.0, 1000.0, window_s=(1.0, 7.0), idle=[0.8, 0.7, 0.69, 0.72, 0.75, 0.7, 0.9, 1.1],
                                   thread=thread), "user")
    assert f["forwarding_limited"] and f["limited_by"] == "forwarding_thread"
    assert f["evidence"]["seconds_needed"] == 3 and f["evidence"]["forwarding_thread_saturated_seconds"] == 6
    (line,) = f["failures"]
    assert line.startswith("forwarding-limited: the flows carried 187.0 Mbit/s on the wire, 0.19 of the 1000.0")
    assert "Open vSwitch's forwarding thread was saturated" in line and "for one in 6 of 8 seconds, 3 needed" in line
    assert "host without idle CPU" not in line


def test_one_saturated_second_does_not_make_a_verdict_over_a_long_window():
    thread = [0.2, SATURATED_CORES + 0.01, 0.3, 0.2, 0.25, 0.2]
    f = forwarding_verdict(summary(5.0, window_s=(0.0, 6.0), thread=thread), "user")
    assert not f["forwarding_limited"] and f["evidence"]["seconds_needed"] == 3
    assert "short of CPU in 1 second(s) of 3 needed" in f["verdict"]


def test_no_idle_cpu_names_the_host_cpu_and_its_largest_users():
    f = forwarding_verdict(summary(4.0, window_s=(0.0, 4.0), idle=[0.0, 0.01, 0.02, 0.0, 0.3],
                                   thread=[0.5, 0.6, 0.55, 0.5, 0.4],
                                   used={"ovs-vswitchd": 0.6, "agents_and_others": 1.3, "softirq": 0.05}), "user")
    assert f["forwarding_limited"] and f["limited_by"] == "host_cpu"
    assert f["failures"][0].startswith("CPU-limited: the flows carried 4.0 Mbit/s")
    assert "agents_and_others 1.30, ovs-vswitchd 0.60" in f["failures"][0]


def test_the_kernel_datapath_has_no_forwarding_thread_and_blames_the_cpu_only():
    f = forwarding_verdict(summary(4.0, idle=[0.0] * 6), "kernel")
    assert f["limited_by"] == "host_cpu" and "the kernel's forwarding (softirq)" in f["failures"][0]
    ok = forwarding_verdict(summary(4.0, idle=[0.9] * 6), "kernel")
    assert not ok["forwarding_limited"] and ok["evidence"]["forwarding_thread_saturated_seconds"] is None


def test_a_round_at_the_model_passes_whatever_the_thread_did():
    f = forwarding_verdict(summary(9.5, thread=[1.0] * 6), "user")
    assert not f["forwarding_limited"] and f["evidence"] is None and f["share"] == 0.95


def test_against_the_hashed_ecmp_model_under_ecmp():
    s = summary(700.0, 2000.0, thread=[1.0] * 6)
    s["throughput"].update(model_routing="ecmp", hash_ecmp_model_aggregate_mbps={"median": 1500.0})
    f = forwarding_verdict(s, "user")
    assert f["model_aggregate_mbps"] == 1500.0 and f["share"] == round(700 / 1500, 4) and f["forwarding_limited"]


def test_a_round_that_cannot_be_judged_says_not_checked_and_why():
    f = forwarding_verdict({"collective": {}}, "user")
    assert f["checked"] is False and "no flows' throughput" in f["reason"] and f["failures"] == []
    s = summary(3.0)
    del s["fidelity"]
    g = forwarding_verdict(s, "user")
    assert g["checked"] is False and "no per-second CPU readings" in g["reason"] and g["share"] == 0.3


def test_the_cpu_section_reads_the_forwarding_thread_apart_from_the_process():
    a = CpuTimes(0.0, 0.0, 0.0, 0.0, {"ovs-vswitchd": 1.0, FORWARDING_THREAD: 0.9, "controller": 0.0, "runner": 0.0})
    b = CpuTimes(1.0, 2.0, 0.5, 0.0, {"ovs-vswitchd": 2.0, FORWARDING_THREAD: 1.85, "controller": 0.0, "runner": 0.1})
    sec = per_second(a, b)
    out = headroom_section([sec], sec, 2, {})
    assert out["forwarding_thread_cores_per_second"] == [0.95] and out["forwarding_thread_cores"] == 0.95
    assert FORWARDING_THREAD not in out["cores_used"]           # part of ovs-vswitchd's: not counted twice
    assert out["cores_used"]["agents_and_others"] == round(1.5 - 1.0 - 0.1, 4)
    plain = headroom_section([sec], {**sec, FORWARDING_THREAD: None}, 2, {})
    assert "forwarding_thread_cores_per_second" not in plain


def test_a_watched_thread_is_read_with_its_wait_for_a_cpu():
    import os
    from experiments.features.cpu import WAIT_SUFFIX, parse_schedstat, read_times
    assert parse_schedstat("28728445535 11245074273 100763\n") == 11.245074273
    t = read_times({"me": (os.getpid(), os.getpid()), "gone": (2 ** 22 + 1, 2 ** 22 + 1), "proc": os.getpid()})
    assert t.procs_s["me"] >= 0 and t.procs_s["me" + WAIT_SUFFIX] >= 0
    assert t.procs_s["gone"] is None and t.procs_s["gone" + WAIT_SUFFIX] is None
    assert "proc" + WAIT_SUFFIX not in t.procs_s                         # a process: no wait read
