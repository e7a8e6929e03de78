"""The port shaper's burst and the serialisation check's arithmetic (pure; the live check runs in
tests/integration/test_experiment.py)."""
from __future__ import annotations

import struct

import pytest

from common.units import FRAME_BYTES, SHAPER_SLACK_S, shaper_burst_bytes
from controller import dequeuebpf, timers
from controller.dataplane.pausegate import PriorityQueues
from controller.dataplane.tcqdisc import PortQueue
from experiments.features.fidelity import (LEAD_TOLERANCE_US, MIN_GAPS, MIN_RATE_SHARE, STALL_FRAMES,
                                          Fidelity, port_figures, serialisation_section, spacing_floor)

MIN_WITHIN_SHARE = spacing_floor(1211.2)        # the floor of a 10 Mbit/s port
from experiments.scenario import validate


@pytest.mark.parametrize("rate_mbps, burst", [(1, FRAME_BYTES // 10), (10, FRAME_BYTES // 10), (50, 625),
                                             (100, 1250), (121.12, FRAME_BYTES), (1000, FRAME_BYTES)])
def test_the_burst_is_the_slack_times_the_rate_between_a_tenth_of_a_frame_and_one_frame(rate_mbps, burst):
    assert shaper_burst_bytes(rate_mbps * 1e6) == burst
    if FRAME_BYTES // 10 < burst < FRAME_BYTES:
        assert burst == round(rate_mbps * 1e6 * SHAPER_SLACK_S / 8)


def test_never_two_full_frames_back_to_back():
    # HTB sends while its bucket is not negative: after idle, the second frame waits (FRAME - burst) / rate
    for rate_mbps in (1, 10, 100, 1000, 10000):
        assert shaper_burst_bytes(rate_mbps * 1e6) <= FRAME_BYTES


@pytest.mark.parametrize("bad", [0, -1.0])
def test_a_rate_or_slack_that_is_not_positive_is_refused(bad):
    with pytest.raises(ValueError, match="rate_bps"):
        shaper_burst_bytes(bad)
    with pytest.raises(ValueError, match="slack_s"):
        shaper_burst_bytes(10e6, bad)


def test_a_machine_with_late_timers_gets_a_bigger_bucket_up_to_one_frame():
    # 0.5 ms of timer lateness (qemu TCG): 10 Mbit/s sends 625 B in it; 50 Mbit/s more than a frame
    assert shaper_burst_bytes(10e6, 500e-6) == 625
    assert shaper_burst_bytes(50e6, 500e-6) == FRAME_BYTES
    assert shaper_burst_bytes(1e6, 500e-6) == FRAME_BYTES // 10


def test_queues_take_the_burst_from_the_rate_and_slack_unless_the_scenario_gives_one():
    auto = validate({"name": "x"}).queues
    assert auto.burst_bytes is None
    assert auto.burst_for(10, 100e-6) == FRAME_BYTES // 10 and auto.burst_for(100, 100e-6) == 1250
    assert auto.burst_for(10, 300e-6) == 375
    given = validate({"name": "x", "queues": {"burst_bytes": 3028}}).queues
    assert given.burst_for(10, 100e-6) == given.burst_for(100, 500e-6) == 3028
    here = timers.shaper_slack_s()
    assert PortQueue(rate_mbps=100, buffer_packets=10).burst_bytes == shaper_burst_bytes(100e6, here)
    assert PortQueue(rate_mbps=100, buffer_packets=10, burst_bytes=4000).burst_bytes == 4000
    assert PriorityQueues(rate_bps=50e6, fifo_bytes={0: 10000}).burst_bytes == shaper_burst_bytes(50e6, here)


def test_the_slack_is_100_us_whatever_the_measured_lateness(monkeypatch):
    late = timers.TimerLateness(request_s=100e-6, samples=400, p50_s=200e-6, p99_s=450e-6, max_s=900e-6,
                                policy="fifo")
    monkeypatch.setattr(timers, "machine_timers", lambda: late)
    assert timers.shaper_slack_s() == SHAPER_SLACK_S


def test_timer_lateness_is_measured_and_bad_arguments_refused():
    r = timers.timer_lateness(samples=100, request_s=50e-6)
    assert r.samples == 100 and 0 <= r.p50_s <= r.p99_s <= r.max_s
    assert r.policy in ("fifo", "other") and set(r.record()) >= {"p99_s", "policy"}
    with pytest.raises(ValueError):
        timers.timer_lateness(samples=10)


def _raw(gaps=0, within=0, frame_ns=0, gap_ns=0, max_len=1514, packets=10, bins=None):
    return {"rate_kbps": 10000, "packets": packets, "bytes": packets * 1514, "gaps": gaps, "within": within,
            "gap_ns": gap_ns, "frame_ns": frame_ns, "max_len": max_len, "bins": bins or [0] * dequeuebpf.NBINS}


def test_port_figures_are_shares_of_the_backlogged_gaps():
    f = port_figures(_raw(gaps=200, within=190, frame_ns=200 * 1_211_200, gap_ns=200 * 1_250_000), 10.0)
    assert f["within_10pct"] == 0.95 and f["rate_share_backlogged"] == pytest.approx(0.96896, abs=1e-5)
    none = port_figures(_raw(), 10.0)
    assert none["within_10pct"] is None and none["rate_share_backlogged"] is None


def test_a_slow_backlogged_port_and_a_super_packet_fail_a_paused_port_does_not():
    good = port_figures(_raw(gaps=MIN_GAPS, within=MIN_GAPS, frame_ns=10**9, gap_ns=10**9), 10.0)
    stalled = [0] * dequeuebpf.NBINS
    stalled[-1] = 4
    slow = port_figures(_raw(gaps=MIN_GAPS, within=10, frame_ns=9 * 10**8, gap_ns=10**9, bins=stalled), 10.0)
    few = port_figures(_raw(gaps=MIN_GAPS - 1, within=0, frame_ns=10**8, gap_ns=10**9), 10.0)
    big = port_figures(_raw(max_len=16384), 10.0)
    sec = serialisation_section({"a-eth1": good, "b-eth1": slow, "c-eth1": few, "h1-eth0": big}, "a-eth1")
    assert sec["bottleneck"]["intf"] == "a-eth1" and sec["max_packet_bytes"] == 16384
    assert len(sec["failures"]) == 3
    assert sec["failures"][0].startswith("b-eth1: sent 0.900") and sec["failures"][2].startswith("h1-eth0: its qdisc saw")
    # 1% of its gaps within 10% of a frame time: the spacing check fails on what the headline prints
    assert sec["failures"][1].startswith("b-eth1: 1.0% of its 1000 backlogged gaps within 10% of a frame time")
    # the line says how much time the port lost and in how many stalls (gaps of 3+ frame times)
    assert "(100 ms lost in 1.00 s of backlog; 4 stall(s) of 3+ frame times" in sec["failures"][0]
    assert slow["backlogged_s"] == 1.0 and slow["stalls"] == 4 and STALL_FRAMES == 3
    assert set(sec["ports"]) == {"a-eth1", "b-eth1", "h1-eth0"}   # c-eth1 was never backlogged long enough
    assert sec["not_checked"] == [f"c-eth1: rate and spacing not checked: {MIN_GAPS - 1} backlogged gaps, fewer "
                                  f"than the {MIN_GAPS} they need"]
    paused = serialisation_section({"a-eth1": good, "b-eth1": slow}, None, frozenset({"b-eth1"}))
    assert paused["failures"] == [] and paused["ports"]["b-eth1"]["paused"]
    # without the workload's bottleneck, the port with the most backlogged gaps
    assert paused["bottleneck"]["intf"] in ("a-eth1", "b-eth1")


def test_the_loader_reads_the_structure_the_program_writes():
    # struct fl_deq_port: 24 64-bit fields then the bins, as in controller/bpf/dequeue.bpf.c
    assert dequeuebpf.PORT.size == (len(dequeuebpf.FIELDS) + dequeuebpf.NBINS) * 8 == (24 + dequeuebpf.NBINS) * 8
    src = (dequeuebpf.REPO / "controller" / "bpf" / "dequeue.bpf.c").read_text()
    assert f"#define NBINS {dequeuebpf.NBINS}" in src
    assert f"#define RATIO_CAP {dequeuebpf.RATIO_CAP}" in src
    body = src.split("struct fl_deq_port {")[1].split("};")[0]
    fields = [line.split()[1].rstrip(";").split("[")[0] for line in body.strip().splitlines() if line.strip()]
    assert fields == list(dequeuebpf.FIELDS) + ["bins"]
    with pytest.raises(ValueError):
        dequeuebpf._key("a-name-longer-than-15")
    assert struct.calcsize("=16s") == dequeuebpf.IFNAMSIZ


def test_the_kernel_rounds_rto_min_up_to_whole_jiffies():
    from experiments.features.hosts import effective_rto_min_ms
    assert effective_rto_min_ms(5, 250) == 8.0 and effective_rto_min_ms(200, 250) == 200.0
    assert effective_rto_min_ms(5, 1000) == 5.0 and effective_rto_min_ms(1, 100) == 10.0
    assert effective_rto_min_ms(5, None) is None


def test_a_round_changes_the_hosts_tcp_knobs_and_keeps_the_rest():
    sc = validate({"name": "x", "hosts": {"rto_min_ms": 200, "delayed_ack": False},
                   "rounds": [{"name": "a"}, {"name": "b", "hosts": {"rto_min_ms": 5}}]})
    a, b = (r.hosts for r in sc.rounds)
    assert (a.rto_min_ms, a.delayed_ack, b.rto_min_ms, b.delayed_ack) == (200, False, 5, False)
    assert a.slow_start_after_idle and validate({"name": "y"}).hosts.rto_min_ms is None


def _queues(tmp_path, rows):
    p = tmp_path / "queues.csv"
    p.write_text("t_s,intf,backlog_bytes,backlog_packets,drops_total,tx_bytes_total,tx_packets_total\n"
                 + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return p


def test_a_replaced_qdisc_and_a_queue_above_its_buffer_are_named_once_per_port(tmp_path):
    from experiments.features.fidelity import queue_failures
    t0 = 1796303915.0                                # the sampler's times are Unix seconds
    rows = [(t0, "a-eth1", 0, 0, 0, 1000, 10), (t0, "b-eth1", 0, 0, 0, 500, 5),
            (t0 + 0.1, "a-eth1", 3028, 2, 0, 5000, 14), (t0 + 0.1, "b-eth1", 0, 0, 0, 500, 5),
            (t0 + 0.2, "a-eth1", 0, 0, 0, 976, 1), (t0 + 0.2, "b-eth1", 157 * 1514, 157, 0, 900, 9),  # QoS; deep
            (t0 + 0.3, "a-eth1", 0, 0, 0, 100, 0)]
    fails = queue_failures(_queues(tmp_path, rows), ("packets", 100))
    assert len(fails) == 2
    assert fails[0].startswith("a-eth1: its qdisc's counters went backwards at t = 0.200 s of the samples (sent bytes 5000 -> 976")
    assert fails[1] == "b-eth1: 157 packets queued at t = 0.200 s, above its 100-packets buffer"
    # several queues per port (priority classes): the sum may exceed one buffer; counters still checked
    assert queue_failures(_queues(tmp_path, rows), None) == fails[:1]
    clean = [(0.0, "a-eth1", 0, 0, 0, 0, 0), (0.1, "a-eth1", 151400, 100, 3, 9000, 6)]
    assert queue_failures(_queues(tmp_path, clean), ("bytes", 151400)) == []


def test_the_watcher_names_a_dead_controller_and_a_disconnected_switch_once_with_their_times():
    from experiments.features.watch import Watcher
    now = [100.0]
    state = {"code": None, "conn": {"leaf1": True, "spine1": True}}
    w = Watcher(lambda: state["code"], lambda: dict(state["conn"]), ["leaf1", "spine1"], clock=lambda: now[0])
    w.check()
    assert w.problems == {}
    now[0], state["code"] = 101.5, -9
    state["conn"]["spine1"] = False
    w.check()
    now[0] = 103.0
    w.check()                                       # still dead: named once, at its first time
    assert w.problems == {"controller": "the controller process exited (-9) at t = 1.50 s of the round",
                          "switch spine1": "switch spine1 was not connected to the controller at t = 1.50 s"}
    unknown = Watcher(lambda: None, lambda: None, ["leaf1"], clock=lambda: 0.0)
    unknown.check()                                 # ovs-vsctl could not answer: nothing concluded
    assert unknown.problems == {}


def test_a_switch_not_yet_shown_connected_is_named_only_after_the_database_had_time_to_say():
    from experiments.features.watch import STALE_S, Watcher
    now = [0.0]
    conn = {"leaf1": False}
    w = Watcher(lambda: None, lambda: dict(conn), ["leaf1"], clock=lambda: now[0])
    w.check()
    now[0] = STALE_S - 1
    w.check()
    assert w.problems == {}                         # ovs-vswitchd refreshes is_connected every few seconds
    conn["leaf1"] = True
    now[0] = STALE_S + 5
    w.check()
    assert w.problems == {}
    never = Watcher(lambda: None, lambda: {"leaf1": False}, ["leaf1"], clock=lambda: now[0])
    now[0] = 100.0
    never.t0 = 100.0
    never.check()
    now[0] = 100.0 + STALE_S
    never.check()
    assert never.problems == {"switch leaf1": "switch leaf1 was not connected to the controller at t = 0.00 s"}


def test_a_replaced_qdisc_is_named_with_what_replaced_it_and_stops_the_round_once():
    from experiments.features.watch import TREES_EVERY_S, Watcher
    now, stops = [0.0], []
    ours = ("htb 1: parent root", "pfifo 10: parent 1:1")
    trees = {"leaf1-eth1": ours, "spine1-eth1": ours}
    w = Watcher(lambda: None, lambda: None, ["leaf1"], clock=lambda: now[0], trees=lambda: dict(trees),
                on_stop=stops.append)
    w.check()                                       # the first reading is what fabriclab installed
    trees["leaf1-eth1"] = ("htb 1: parent root", "pfifo 8001: parent 1:1")
    now[0] = TREES_EVERY_S / 2
    w.check()                                       # not read again within TREES_EVERY_S
    assert w.problems == {} and stops == []
    now[0] = TREES_EVERY_S * 1.5
    w.check()
    now[0] = TREES_EVERY_S * 3
    w.check()
    assert list(w.problems) == ["qdisc leaf1-eth1"] and stops == [w.problems["qdisc leaf1-eth1"]]
    assert w.problems["qdisc leaf1-eth1"].startswith(
        "leaf1-eth1: its qdiscs were replaced at t = 1.50 s of the round: now htb 1: parent root; pfifo 8001: "
        "parent 1:1, where fabriclab installed htb 1: parent root; pfifo 10: parent 1:1 (something else")

    def broken():
        raise OSError("dump failed")
    quiet = Watcher(lambda: None, lambda: None, [], clock=lambda: 0.0, trees=broken, on_stop=stops.append)
    quiet.check()
    assert quiet.problems == {}


def test_a_qdisc_replaced_in_the_rounds_last_second_is_seen_by_the_last_look():
    """The watcher's last look reads the trees whatever the time since the previous reading: a
    tree replaced after it is the round's problem, not the next round's starting point."""
    from experiments.features.watch import TREES_EVERY_S, Watcher
    now = [0.0]
    ours = ("htb 1: parent root", "pfifo 10: parent 1:1")
    trees = {"leaf1-eth1": ours}
    w = Watcher(lambda: None, lambda: None, [], clock=lambda: now[0], trees=lambda: dict(trees), on_stop=lambda r: None)
    w.check()
    trees["leaf1-eth1"] = ("pfifo 8001: parent root",)
    now[0] = TREES_EVERY_S / 4
    assert w.stop() and list(w.problems) == ["qdisc leaf1-eth1"]


def test_agents_are_killed_at_once_when_the_round_must_stop():
    import subprocess
    import time as t
    from experiments.live import ROUND_STOP, Agents
    agents = Agents(lf=None, state=None)
    p = subprocess.Popen(["sleep", "30"])
    agents.procs.append(("h1.tx", p))
    ROUND_STOP.clear()
    ROUND_STOP.request("leaf1-eth1: replaced")
    ROUND_STOP.request("a second reason is not kept")
    try:
        t0 = t.monotonic()
        codes = agents.wait(t.time() + 30)
        assert t.monotonic() - t0 < 2 and codes["h1.tx"] != 0 and p.poll() is not None
        assert ROUND_STOP.reason == "leaf1-eth1: replaced"
    finally:
        ROUND_STOP.clear()
        if p.poll() is None:
            p.kill()
    q = subprocess.Popen(["sleep", "0.3"])
    calm = Agents(lf=None, state=None)
    calm.procs.append(("h2.rx", q))
    assert calm.wait(t.time() + 10) == {"h2.rx": 0}


def test_an_openflow_error_is_decoded_with_the_request_it_answers():
    import struct as st
    from controller.oferrors import describe_error
    req = st.pack("!BBHI", 4, 14, 56, 77)           # an OFPT_FLOW_MOD header, xid 77
    e = describe_error(3, 2, req + bytes(56), {77: "leaf1 flow mod table 1 goto_table 0"})
    assert (e["type"], e["code"], e["request_type"], e["request_xid"]) == \
        ("OFPET_BAD_INSTRUCTION", "OFPBIC_BAD_TABLE_ID", "OFPT_FLOW_MOD", 77)
    assert e["text"] == ("OFPET_BAD_INSTRUCTION OFPBIC_BAD_TABLE_ID (type=3 code=2) answering OFPT_FLOW_MOD "
                         "xid 77: leaf1 flow mod table 1 goto_table 0")
    assert describe_error(99, 7, b"")["text"] == "99 7 (type=99 code=7) answering an unidentified request"


FRAME_NS_10 = 1_211_200        # one 1514-byte frame at 10 Mbit/s


def _gaps(ratios, lead_ns=0, lead_frames=0, lead_span_ns=0, packets=None, rate_kbps=10000):
    """BPF counters of a port whose backlogged gaps were ``ratios`` frame times (1514-byte frames),
    as the program sums them."""
    frame = 1514 * 8_000_000 // rate_kbps
    permille = [int(frame * r) * 1000 // frame for r in ratios]
    bins = [0] * dequeuebpf.NBINS
    for p in permille:
        bins[min(p // 100, dequeuebpf.NBINS - 1)] += 1
    n = packets or len(ratios) + 1
    return {"rate_kbps": rate_kbps, "packets": n, "bytes": n * 1514, "gaps": len(ratios),
            "within": sum(900 <= p <= 1100 for p in permille), "gap_ns": sum(int(frame * r) for r in ratios),
            "frame_ns": frame * len(ratios), "max_len": 1514, "ratio_sum": sum(permille),
            "ratio_sq": sum(p * p for p in permille), "first_ns": 10**9, "lead_ns": lead_ns,
            "lead_frames": lead_frames, "lead_span_ns": lead_span_ns, "lead_t_ns": 10**9 + 2 * 10**9, "bins": bins}


def test_the_spread_of_the_gaps_comes_from_the_programs_sums():
    f = port_figures(_gaps([1.0, 1.2] * 500), 10.0, 151)
    assert f["gap_ratio_sd"] == pytest.approx(0.1, abs=1e-3)
    assert f["bucket_us"] == pytest.approx(120.8)
    assert port_figures(_gaps([1.0]), 10.0)["gap_ratio_sd"] is None


def test_a_port_ahead_of_its_line_beyond_its_bucket_fails_naming_the_window_and_how_fast():
    # the bucket (151 B at 10 Mbit/s: 120.8 us) and the measured jitter are allowed, no more
    limit_us = 120.8 + LEAD_TOLERANCE_US
    over_ns = int((limit_us + 30) * 1000)
    ahead = port_figures(_gaps([1.0] * 5, lead_ns=over_ns, lead_frames=5, lead_span_ns=5 * FRAME_NS_10 - over_ns),
                         10.0, 151)
    assert ahead["lead_window"]["frames"] == 5 and ahead["lead_window"]["end_s"] == 2.0
    sec = serialisation_section({"leaf1-eth1": ahead}, "leaf1-eth1")
    assert len(sec["failures"]) == 1
    line = sec["failures"][0]
    assert line.startswith("leaf1-eth1: sent faster than its 10 Mbit/s: 5 frame(s) left in")
    assert f"({ahead['lead_window']['mbps']:.2f} Mbit/s), ending 2.000 s after its first frame" in line
    assert f"beyond the {limit_us:.0f} us allowed" in line
    assert sec["max_lead"]["intf"] == "leaf1-eth1"
    # idle ports are held to the ceiling too: it needs no backlog
    assert sec["bottleneck"]["checks"]["not_checked"].startswith("rate and spacing not checked: 5 backlogged gaps")
    within_ns = int((limit_us - 1) * 1000)
    ok = port_figures(_gaps([1.0] * 5, lead_ns=within_ns, lead_frames=1, lead_span_ns=FRAME_NS_10 - within_ns),
                      10.0, 151)
    assert serialisation_section({"leaf1-eth1": ok}, None)["failures"] == []
    # a port whose bucket is not known is allowed the jitter alone
    unknown = port_figures(_gaps([1.0] * 5, lead_ns=within_ns, lead_frames=1, lead_span_ns=FRAME_NS_10 - within_ns),
                           10.0)
    assert len(serialisation_section({"x-eth1": unknown}, None)["failures"]) == 1


def test_a_port_never_ahead_of_its_line_has_no_window():
    f = port_figures(_gaps([1.0] * 3), 10.0, 151)
    assert f["lead_us"] == 0.0 and f["lead_window"] is None


def test_too_few_backlogged_gaps_is_not_checked_and_says_so_instead_of_ok():
    # an incast round: 387 backlogged gaps at 0.680 of the rate
    few = port_figures(_gaps([1 / 0.68] * 387), 10.0, 151)
    sec = serialisation_section({"leaf1-eth1": few}, "leaf1-eth1")
    assert sec["failures"] == []
    assert sec["not_checked"] == [f"leaf1-eth1: rate and spacing not checked: 387 backlogged gaps, fewer than the "
                                  f"{MIN_GAPS} they need"]
    line = Fidelity.report(None, {"fidelity": {"serialisation": sec}})
    assert "leaf1-eth1 rate and spacing not checked: 387 backlogged gaps" in line and "of its rate" not in line


def test_a_rate_share_just_below_the_floor_within_the_noise_of_its_gaps_passes_and_says_how_close():
    # 0.969 against 0.97 over 5000 gaps, 1% of them stalls of 4.2 frame times: noise, not a slow port
    f = port_figures(_gaps([1.0] * 4950 + [4.2] * 50), 10.0, 151)
    share = f["rate_share_backlogged"]
    assert share == pytest.approx(0.969, abs=1e-3) and f["gap_ratio_sd"] == pytest.approx(0.318, abs=1e-3)
    sec = serialisation_section({"p-eth1": f}, None)
    rate = sec["ports"]["p-eth1"]["checks"]["rate"]
    assert rate["margin"] == pytest.approx(share - MIN_RATE_SHARE, abs=1e-5) and rate["margin"] < 0
    assert rate["share_hi"] == pytest.approx(1 / (1 / share - 3.09 * f["gap_ratio_sd"] / 5000 ** 0.5), abs=1e-4)
    assert rate["share_hi"] > MIN_RATE_SHARE and sec["failures"] == []
    # the same share with no spread over the same count is a slow port
    flat = port_figures(_gaps([1 / share] * 5000), 10.0, 151)
    assert flat["gap_ratio_sd"] < 0.01
    fails = serialisation_section({"p-eth1": flat}, None)["failures"]
    assert [x for x in fails if x.startswith(f"p-eth1: sent {flat['rate_share_backlogged']:.3f} of its 10 Mbit/s")]


def test_a_share_of_exact_gaps_just_below_the_floor_on_a_small_count_is_noise_far_below_fails():
    n = MIN_GAPS
    k = round((MIN_WITHIN_SHARE - 0.005) * n)
    rest = n - k
    near = port_figures(_gaps([1.0] * k + [1.5] * (rest // 2) + [0.5] * (rest - rest // 2)), 10.0, 151)
    sec = serialisation_section({"p-eth1": near}, None)
    assert sec["failures"] == []
    spacing = sec["ports"]["p-eth1"]["checks"]["spacing"]
    assert spacing["margin"] == pytest.approx(-0.005, abs=1e-4) and spacing["share_hi"] > MIN_WITHIN_SHARE
    k = int((MIN_WITHIN_SHARE - 0.2) * 10 * n)
    far = port_figures(_gaps([1.0] * k + [1.5] * ((10 * n - k) // 2) + [0.5] * (10 * n - k - (10 * n - k) // 2)),
                       10.0, 151)
    fails = serialisation_section({"p-eth1": far}, None)["failures"]
    assert any("backlogged gaps within 10% of a frame time" in x and "floor" in x for x in fails)


def test_a_paused_or_faulted_port_is_named_not_checked():
    slow = port_figures(_gaps([2.0] * MIN_GAPS), 10.0, 151)
    sec = serialisation_section({"a-eth1": slow, "b-eth1": slow}, None, frozenset({"a-eth1"}), frozenset({"b-eth1"}))
    assert sec["failures"] == []
    assert sec["not_checked"] == ["a-eth1: rate and spacing not checked: its transmitter was paused (PFC)",
                                  "b-eth1: rate and spacing not checked: a fault changed its link"]


def test_spacing_is_not_checked_where_no_floor_was_calibrated_and_says_why():
    # 200 Mbit/s: 61 us frames, 10% of which is within the dequeue timer's jitter
    f = port_figures(_gaps([1.0] * 700 + [0.8] * 800 + [1.2] * 800, rate_kbps=200000), 200.0, 1514)
    assert f["within_10pct"] < 0.5
    sec = serialisation_section({"p-eth1": f}, None)
    assert sec["failures"] == []
    assert sec["ports"]["p-eth1"]["checks"]["spacing"]["not_checked"].startswith("a 61 us frame time, shorter than")
    line = Fidelity.report(None, {"fidelity": {"serialisation": sec}})
    assert "spacing not checked: a 61 us frame time" in line
    # from 100 us frames up (100 Mbit/s and slower) one floor: half the gaps within 10%
    assert spacing_floor(60.6) is None and spacing_floor(121.1) == spacing_floor(1211.2) == 0.5
    at_100 = port_figures(_gaps([1.0] * 700 + [0.8] * 800 + [1.2] * 800, rate_kbps=100000), 100.0, 1250)
    assert any("below the 50% floor" in x for x in serialisation_section({"p-eth1": at_100}, None)["failures"])


def test_a_port_with_priority_classes_may_run_one_frame_further_ahead():
    # HTB lets a class with tokens of its own send without asking its parent: one frame past the ceiling
    lead_ns = int((120.8 + LEAD_TOLERANCE_US + 600) * 1000)
    f = port_figures(_gaps([1.0] * 5, lead_ns=lead_ns, lead_frames=2, lead_span_ns=2 * FRAME_NS_10 - lead_ns),
                     10.0, 151)
    assert len(serialisation_section({"spine1-eth1": f}, None)["failures"]) == 1
    sec = serialisation_section({"spine1-eth1": f}, None, priority_ports=frozenset({"spine1-eth1"}))
    assert sec["failures"] == []
    assert sec["max_lead"]["priority_classes_us"] == pytest.approx(1211.2, abs=0.1)


def test_a_port_whose_backlogged_frames_all_left_in_bulk_dequeues_is_not_checked_and_says_why():
    # a 1000 Mbit/s port whose queue handed its waiting frames over in chains, at one instant each:
    # gaps counted, no time between them, no rate to take from them (the ceiling still holds it)
    raw = {**_gaps([1.0] * MIN_GAPS, rate_kbps=1000000), "gap_ns": 0, "ratio_sum": 0, "ratio_sq": 0}
    f = port_figures(raw, 1000.0, 1514)
    assert f["backlogged_gaps"] == MIN_GAPS and f["rate_share_backlogged"] is None
    sec = serialisation_section({"s1-eth1": f}, "s1-eth1")
    assert sec["failures"] == [] and "rate" not in sec["bottleneck"]["checks"]
    assert sec["not_checked"] == [f"s1-eth1: rate and spacing not checked: its {MIN_GAPS} backlogged gaps took "
                                  "no time: every frame that found others waiting left with them, in one bulk dequeue"]
    assert "bulk dequeue" in Fidelity.report(None, {"fidelity": {"serialisation": sec}})
