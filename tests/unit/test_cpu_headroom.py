"""CPU headroom's arithmetic (pure: /proc texts and readings given; the live section is written
by every experiment, see tests/integration/test_experiment.py)."""
from __future__ import annotations

import pytest

from experiments.features.registry import FEATURES
from experiments.features.cpu import (NO_HEADROOM_CORES, TICKS_PER_S, CpuMeter, CpuTimes, headroom_section,
                                      parse_pid_stat, parse_proc_stat, per_second)

STAT = ("cpu  1000 20 300 5000 80 0 100 30 0 0\n"
        "cpu0 500 10 150 2500 40 0 50 0 0 0\n"
        "intr 12345\n")


def test_proc_stat_gives_total_idle_softirq_and_steal_seconds():
    total, idle, softirq, steal = parse_proc_stat(STAT)
    assert total == pytest.approx(6530 / TICKS_PER_S) and steal == pytest.approx(30 / TICKS_PER_S)
    assert idle == pytest.approx(5080 / TICKS_PER_S)          # idle + iowait
    assert softirq == pytest.approx(100 / TICKS_PER_S)
    with pytest.raises(ValueError):
        parse_proc_stat("intr 1\n")


def test_pid_stat_is_read_after_a_command_with_spaces_and_parentheses():
    text = "4242 (ovs (main) thr) S 1 4242 4242 0 -1 4194560 10 0 0 0 250 50 0 0 20 0 1 0 100 0 0"
    assert parse_pid_stat(text) == pytest.approx(300 / TICKS_PER_S)


def _t(t, total, idle, softirq=0.0, steal=0.0, **procs):
    return CpuTimes(t, total, idle, softirq, procs, steal)


def test_per_second_is_cores_used_over_the_wall_time():
    a, b = _t(0.0, 0.0, 0.0, ovs=1.0, gone=1.0), _t(2.0, 4.0, 1.0, 0.2, ovs=2.8, gone=None)
    s = per_second(a, b)
    assert s["idle"] == pytest.approx(0.5) and s["busy"] == pytest.approx(1.5)
    assert s["softirq"] == pytest.approx(0.1) and s["ovs"] == pytest.approx(0.9) and s["gone"] is None
    with pytest.raises(ValueError):
        per_second(b, a)
    # time the hypervisor took is neither idle nor ours
    robbed = per_second(_t(0.0, 0.0, 0.0), _t(1.0, 2.0, 0.5, steal=0.5))
    assert robbed["stolen"] == pytest.approx(0.5) and robbed["busy"] == pytest.approx(1.0)


def test_a_second_without_idle_cpu_is_warned_and_the_rest_is_the_agents():
    seconds = [{"idle": 0.8}, {"idle": NO_HEADROOM_CORES / 2}, {"idle": 1.2}]
    whole = {"idle": 0.67, "busy": 1.33, "softirq": 0.1, "ovs-vswitchd": 0.9, "controller": 0.03, "runner": None}
    sec = headroom_section(seconds, whole, 2, {"queue_sampler": 0.1})
    assert sec["idle_cores"] == {"min": NO_HEADROOM_CORES / 2, "median": 0.8, "max": 1.2}
    assert sec["seconds_without_headroom"] == 1 and "1 of 3 seconds" in sec["warnings"][0]
    assert sec["cores_used"]["agents_and_others"] == pytest.approx(1.33 - 0.9 - 0.03 - 0.1 - 0.1)
    assert sec["cores_used"]["runner"] is None
    calm = headroom_section([{"idle": 1.0}], whole, 2, {})
    assert calm["warnings"] == [] and calm["seconds_without_headroom"] == 0 and calm["seconds_with_steal"] == 0
    stolen = headroom_section([{"idle": 0.5, "stolen": 0.0}, {"idle": 0.5, "stolen": 0.3}], whole, 2, {})
    assert stolen["seconds_with_steal"] == 1 and stolen["stolen_cores_per_second"] == [0.0, 0.3]
    assert stolen["warnings"] == [w for w in stolen["warnings"] if "hypervisor" in w] and len(stolen["warnings"]) == 1
    assert "at most 0.30) in 1 of 2 seconds of the round (first at t = 1 s)" in stolen["warnings"][0]


def test_the_meter_reads_at_start_and_stop_and_the_feature_is_registered():
    readings = iter([_t(0.0, 0.0, 0.0), _t(5.0, 10.0, 4.0)])
    m = CpuMeter({}, reader=lambda pids: next(readings))
    m.start()
    seconds, whole = m.stop()
    assert whole["idle"] == pytest.approx(0.8) and whole["busy"] == pytest.approx(1.2)
    assert "cpu" in FEATURES
