"""The runner end to end: results, teardown on every exit path (C2), bad input."""
import csv
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.chromium import check_report_folder
from tests.notebook import notebook_blocks, run_notebook_blocks

from .conftest import ROOT, assert_clean, assert_run_detached, start_run, ovs_bridges, root_eth_links, run_cli, small_scenario


def only_run_dir(results: Path) -> Path:
    dirs = [d for d in results.iterdir() if d.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def receiver_link_mbps(run_dir: Path, receiver: str = "h1") -> float:
    """Mean transmit rate of the switch port toward ``receiver`` over the flows' lifetime (ports.csv)."""
    rows = [r for r in csv.DictReader(open(run_dir / "ports.csv")) if r["peer"] == receiver]
    assert len(rows) == 1, rows
    return float(rows[0]["mean_tx_mbps"])


@pytest.mark.lane("host", reason="under the emulated CPU it failed a different check in each of eight runs "
                           "(sampler 34 Hz; PFC never at XOFF; 88 and 430 of 552 pairs unreachable within 20 s; "
                           "the ECN round's bottleneck never reached K: 0 of 2792 packets marked); test_lane.py "
                           "runs experiments on the kernel datapath there and test_pfc.py and test_pfc_accounting.py cover PFC")
def test_default_experiment_end_to_end(tmp_path, figure, default_incast_run):
    """Acceptance: the default scenario runs the incast four times on one fabric, drop-tail, ECN step
    K = 20 packets, PFC, ECN + PFC, and gives CSVs, summaries and plots per round plus the rounds
    side by side.
    Drop-tail round: every byte arrives; the bottleneck is the receiver's port, within its buffer,
    and its queue rises at the incast. ECN round (issue 5): after the first round trip the median
    bottleneck queue stays within 1.5 K, drops are at least 10x fewer (or zero), and the bottleneck
    throughput is within 10% of drop-tail's. PFC rounds (issue 6): nothing dropped anywhere,
    pauses on record, and ECN keeps the queues below XOFF, so ECN + PFC pauses far less."""
    rate_bps, size = 10e6, 500000
    p, top = default_incast_run              # `fabriclab run`, as a user types it after `make setup`
    for name in ("scenario.yaml", "environment.json", "fabric_map.json", "rounds.json", "rounds.csv",
                 "rounds_queue.png", "rounds_bars.png", "topology.png"):
        assert (top / name).stat().st_size > 0, name
    rounds = json.loads((top / "rounds.json").read_text())["rounds"]
    assert [r["round"] for r in rounds] == ["drop-tail", "ecn-k20", "pfc", "ecn-pfc"]
    # every table of every round starts with its labels; docs/notebooks.md's analyses run on it
    for r in rounds:
        for table in (top / r["folder"]).glob("*.csv"):
            if not table.name.endswith("_raw.csv"):
                assert table.read_text().startswith("round,variant,seed,"), table
    run_notebook_blocks(notebook_blocks(), top, cwd=tmp_path)
    out, ecn_out, pfc_out, both_out = (top / r["folder"] for r in rounds)
    for d in (out, ecn_out, pfc_out, both_out):
        for name in ("environment.json", "queues.csv", "ports.csv", "flows.csv", "flow_samples.csv", "summary.json",
                     "queue_depth.png", "throughput.png", "ss_tin.txt"):
            assert (d / name).stat().st_size > 0, (d, name)
        assert str(d) in p.stdout
    s = json.loads((out / "summary.json").read_text())
    env = json.loads((top / "environment.json").read_text())
    assert env["datapath"] in ("user", "kernel") and "qdiscs" in env and env["scale"]["measured_rtt_s"] > 0
    # the flows' class has its own queue on every port: the marker is the BPF one in every lane
    # (kernel RED would replace a port's one FIFO); the reason is on record
    assert env["ecn"]["marker"] == "bpf" and "per-priority" in env["ecn"]["mechanism"]
    assert [r["enabled"] for r in env["pfc"]["rounds"]] == [False, False, True, True]
    f = s["flows"]
    assert f["count"] == 8 and f["all_complete"]
    for flow in f["per_flow"]:
        assert flow["bytes_sent"] == flow["bytes_received"] == size
        assert flow["fct_s"] is not None and flow["fct_s"] > 0
    # 8 x 500 kB through one 10 Mbit/s port cannot finish faster than 3.2 s
    assert f["fct_max_s"] >= 8 * size * 8 / rate_bps * 0.97
    assert f["congestion_control_on_live_flows"] == ["cubic"]
    bn = s["bottleneck"]
    split = s["ecmp_split_tx_bytes"]
    assert set(split) == {"spine1-eth1", "spine2-eth1"}
    if min(split.values()) > 0.05 * sum(split.values()):
        # ECMP spread the incast over both spines: the receiver's port is the bottleneck (case L4)
        assert bn["intf"] == "leaf1-eth1" and bn["peer"] == "h1" and bn["toward_receiver"]
    else:
        # every flow hashed onto one spine (seen on the userspace datapath when all flows start at
        # once): that spine's 10 Mbit/s port toward leaf1 is then, physically, the bottleneck
        assert bn["peer"] == "leaf1" and split[bn["intf"]] == max(split.values())
    # priority queues hold bytes: 100 full frames' worth (a few short segments can make it 101+ packets)
    assert bn["within_buffer"] and bn["peak_backlog_bytes"] <= 100 * 1514, bn
    # 8 cubic flows overflow a 100-packet FIFO: the queue reaches its configured size and the
    # overflow is dropped in that qdisc (with the userspace datapath this needs OVS's shared
    # transmit buffer enlarged; unenlarged, the whole fabric caps near 93 queued packets)
    if env["datapath"] == "user":
        assert bn["peak_backlog_packets"] >= 100 and bn["drops"] > 0, bn
        assert env["ovs_userspace_tx_buffer"]["applied"] or \
            env["ovs_userspace_tx_buffer"]["note"] == "already large enough"
    # the queue is empty before the incast and builds after it starts
    before, after = [], []
    with open(out / "queues.csv") as fh:
        for row in csv.DictReader(fh):
            if row["intf"] == bn["intf"]:
                (before if float(row["t_s"]) < 0 else after).append(int(row["backlog_packets"]))
    assert before and max(before) <= 2
    assert max(after) >= 20
    # case L4: the sustained queue is at the receiver's port. The senders' leaves' host-facing
    # ports carry only ACKs: nothing queues there. Their 10 Mbit/s uplinks queue only while two
    # senders that hashed onto the same uplink burst together (slow start, recovery): seen up to
    # 12.6% of the bottleneck's mean (10.8 vs 85.7 kB), never near it. The spines' ports toward
    # leaf1 may see slow-start bursts only.
    ports = list(csv.DictReader(open(out / "ports.csv")))
    sender_leaves = {"leaf2", "leaf3", "leaf4"}
    host_facing = [r for r in ports if r["switch"] in sender_leaves and r["peer"].startswith("h")]
    uplinks = [r for r in ports if r["switch"] in sender_leaves and r["peer"].startswith("spine")]
    assert len(host_facing) == 18 and len(uplinks) == 6
    worst = max(host_facing, key=lambda r: float(r["mean_backlog_bytes"]))
    figure("sender_host_port_backlog_over_bottleneck", float(worst["mean_backlog_bytes"]) / bn["mean_backlog_bytes"])
    assert float(worst["mean_backlog_bytes"]) < 0.05 * bn["mean_backlog_bytes"], (worst, bn)
    worst = max(uplinks, key=lambda r: float(r["mean_backlog_bytes"]))
    # calibrated: host-facing 0 in 10 of 10 runs under load; uplinks 0.001-0.035 (1-in-1000 bound 0.052)
    figure("sender_uplink_backlog_over_bottleneck", float(worst["mean_backlog_bytes"]) / bn["mean_backlog_bytes"])
    assert float(worst["mean_backlog_bytes"]) < 0.25 * bn["mean_backlog_bytes"], (worst, bn, s["ecmp_split_tx_bytes"])
    spine_down = [float(r["mean_backlog_bytes"]) for r in ports if r["peer"] == "leaf1" and r["intf"] != bn["intf"]]
    assert max(spine_down) < bn["mean_backlog_bytes"]
    # the sampler covered every switch port all along (its speed is bench/'s business, not a test's:
    # under the VM lane's emulated CPU it reached ~185 of the requested 200 Hz in some runs and 34 in
    # another, with every port's priority tree to decode; 20 Hz still puts ~60 samples in an incast)
    min_hz = 20 if os.environ.get("FABRICLAB_LANE") == "vm" else 0.5 * 200
    figure("sampler_hz", s["sampler"]["achieved_hz"])     # calibrated: 199.9-200.2 Hz under load
    figure("bottleneck_peak_backlog_packets", bn["peak_backlog_packets"])
    assert s["sampler"]["interfaces"] == 40 and s["sampler"]["achieved_hz"] >= min_hz, s["sampler"]

    # -- the run checks its own serialisation: every qdisc saw single frames; the bottleneck, backlogged
    # for most of the incast, sent one frame per frame time (Mininet-HiFi's inter-dequeue metric) --
    for d in (out, ecn_out, pfc_out, both_out):
        ser = json.loads((d / "summary.json").read_text())["fidelity"]["serialisation"]
        assert ser["max_packet_bytes"] <= 1514 and not ser["failures"], (d, ser["failures"], ser["max_packet_bytes"])
    ser = s["fidelity"]["serialisation"]["bottleneck"]
    assert ser["intf"] == bn["intf"] and ser["backlogged_gaps"] >= 1000, ser
    figure("bottleneck_dequeue_gaps_within_10pct", ser["within_10pct"])
    figure("bottleneck_rate_share_backlogged", ser["rate_share_backlogged"])
    # the ceiling: no port ran ahead of its line beyond its bucket and the jitter (no failure above);
    # the bottleneck's lead is at most its bucket plus lead_tolerance_us
    figure("bottleneck_lead_us", ser["lead_us"])
    assert ser["checks"]["ceiling"]["limit_us"] >= ser["lead_us"] and "rate" in ser["checks"], ser["checks"]
    # calibrated (make test-repeat N=10 beside a CPU-heavy process, 2026-12-03): within 10% 0.983 / 0.993
    # / 0.996 (min / median / max; 1-in-1000 prediction bound 0.976); rate while backlogged 0.992 /
    # 0.996 / 1.000 (bound 0.985)
    assert ser["rate_share_backlogged"] >= 0.985 and ser["within_10pct"] >= 0.975, ser

    # -- the ECN round against the drop-tail round (issue 5) --
    e = json.loads((ecn_out / "summary.json").read_text())
    assert e["flows"]["all_complete"] and e["flows"]["congestion_control_on_live_flows"] == ["cubic"]
    k = 20
    ecn = e["ecn"]
    assert ecn["bottleneck_k_bytes"] == k * 1514 and ecn["marker"] == env["ecn"]["marker"]
    assert ecn["ecn_negotiated_flows"] == 8                      # hosts negotiated ECN (case H1/T4)
    assert (ecn["bottleneck_counters"] or {}).get("marked", 0) > 0
    assert ecn["ce_received"]["packets"] > 0 and ecn["ce_received"]["flows_with_ce"] >= 1
    assert s["ecn"]["ce_received"]["packets"] == 0               # drop-tail marks nothing
    # the flows' class has its own queue on every port, so the marker is the BPF one in both lanes. Under
    # the VM lane's emulated CPU its virtual queue lags the real one behind the per-priority tree:
    # medians of 28-36 packets were measured there (17-18 here; 17-21 with kernel RED on one FIFO per
    # port in the VM, test_lane.py): a known gap, bounded at 2 K there until RED sits under the gates
    bound = 2.0 if os.environ.get("FABRICLAB_LANE") == "vm" else 1.5
    # calibrated: median / K 0.75-0.90 (median 0.875) over 10 runs under load, 1-in-1000 bound 1.09
    figure("ecn_queue_median_over_k", ecn["queue_after_first_rtt"]["median_packets"] / k)
    assert ecn["queue_after_first_rtt"]["median_packets"] <= bound * k, ecn["queue_after_first_rtt"]
    # drops anywhere in the fabric, and throughput on the receiver's own link: when ECMP puts most
    # flows on one spine, that spine's port can hold the larger queue (and be "the bottleneck") in
    # one round and not in the other, carrying only its share of the incast
    dt_drops, ecn_drops = s["total_drops"], e["total_drops"]
    dt_tp, ecn_tp = receiver_link_mbps(out), receiver_link_mbps(ecn_out)
    figure("drop_tail_drops", dt_drops)
    figure("ecn_drops", ecn_drops)
    figure("ecn_over_drop_tail_throughput", ecn_tp / dt_tp)
    # Calibrated (make test-repeat N=10 beside a CPU-heavy process, 2026-12-02): drop-tail dropped
    # 57-224 (median 138); the ECN round 0 in 9 runs and 4 once (the BPF marker's virtual queue
    # full of not-ECT packets: SYN and FIN retransmissions), against 57 drop-tail drops in that
    # run, so "10x fewer" alone was 1.7 drops from failing. The 1-in-1000 prediction bound of the
    # ECN round's drops is 6.1: at most 6 drops, or 10x fewer than drop-tail.
    assert ecn_drops <= max(dt_drops / 10, 6), (dt_drops, ecn_drops)
    # ECN must not cost throughput: at least 90% of drop-tail's. It may gain (seen: drop-tail
    # 7.66 Mbit/s after a retransmission timeout, ECN 10.0), which is ECN's point, not a failure.
    # calibrated: ECN / drop-tail throughput 0.997-1.003 over 10 runs under load (bound 0.993)
    assert ecn_tp >= 0.9 * dt_tp, (dt_tp, ecn_tp)
    print(f"drop-tail: drops {dt_drops}, {dt_tp:.2f} Mbit/s; ECN K={k}: drops {ecn_drops}, {ecn_tp:.2f} Mbit/s, "
          f"queue median {ecn['queue_after_first_rtt']['median_packets']} packets, "
          f"marks {ecn['bottleneck_counters']}")

    # -- PFC (issue 6): the same TCP flows in priority 3, lossless while PFC is on --
    p_s = json.loads((pfc_out / "summary.json").read_text())
    b_s = json.loads((both_out / "summary.json").read_text())
    for x in (p_s, b_s):
        assert x["flows"]["all_complete"] and x["total_drops"] == 0 and x["pfc"]["cap_drops"] == 0, x["pfc"]
        assert x["pfc"]["enabled"] and not x["pfc"]["errors"]
        for name in ("pauses.csv", "pfc_occupancy.csv", "pfc_pauses.png", "pfc_buffer.png"):
            assert (pfc_out / name).stat().st_size > 0, name
    assert s["pfc"]["pauses"] == 0 and e["pfc"]["pauses"] == 0          # PFC off in the first two rounds
    if os.environ.get("FABRICLAB_LANE") != "vm":
        # Not in the VM lane: there the emulated CPU's TCP senders often do not take an ingress
        # port's count to XOFF (50 packets): twice the drop-tail round dropped nothing (8.3 of 10
        # Mbit/s; 4.5 of 5 in a scaled try) and the PFC round paused nothing (once it did pause).
        # test_pfc.py and test_pfc_accounting.py cover pausing in that lane.
        figure("pfc_pauses", p_s["pfc"]["pauses"])
        figure("ecn_pfc_over_pfc_paused_time", b_s["pfc"]["paused_time_s"] / max(p_s["pfc"]["paused_time_s"], 1e-9))
        # calibrated: 715-1035 pauses; ECN + PFC paused 0.6-1.8% as long as PFC alone (10 runs under load)
        assert p_s["pfc"]["pauses"] > 0 and "leaf1" in p_s["pfc"]["pausing_switches"]
        assert b_s["pfc"]["paused_time_s"] < 0.5 * p_s["pfc"]["paused_time_s"], (b_s["pfc"], p_s["pfc"])
    print(f"PFC: {p_s['pfc']['pauses']} pauses, {p_s['pfc']['paused_time_s']:.2f} s paused, reaction "
          f"{p_s['pfc']['reaction_s']}; ECN + PFC: {b_s['pfc']['pauses']} pauses, {b_s['pfc']['paused_time_s']:.2f} s")
    assert (top / "rounds_bars.png").stat().st_size > 0
    check_report_folder(top, "default-experiment", tmp_path)      # report.html: every round, rendered
    assert_clean(str(top))


_LIFECYCLE = pytest.mark.lane("host", reason="teardown by recorded ids does not depend on the kernel; the VM lane "
                                             "runs the dead-shell teardown and every fabric test's clean check")


@_LIFECYCLE
def test_injected_exception_leaves_nothing(tmp_path):
    """Case C2: an exception mid-traffic tears down bridges, links, controller, agents, sampler."""
    results = tmp_path / "results"
    p = run_cli("run", str(small_scenario(tmp_path)), "--results", str(results),
                env={"FABRICLAB_INJECT_FAULT": "after_traffic_start"})
    assert p.returncode == 1
    assert "injected fault" in p.stderr
    assert_clean(str(results))


@_LIFECYCLE
def test_a_run_stopped_after_its_rounds_keeps_them_and_analyze_rebuilds_the_rest(tmp_path):
    """A run that fails after its last round (as a Ctrl-C during teardown) has analysed every round
    already (summary.json, flows.csv, plots) and leaves nothing running; `python -m experiments
    analyze` then rebuilds every derived file from the raw ones, identical, and writes the rounds
    side by side that only the end of the run writes."""
    results = tmp_path / "results"
    scenario = small_scenario(tmp_path, ecn={"profile": {"step": {"k_packets": 10}}},
                              rounds=[{"name": "drop-tail", "ecn": {"profile": "off"}}, {"name": "ecn"}])
    p = run_cli("run", str(scenario), "--results", str(results), env={"FABRICLAB_INJECT_FAULT": "after_rounds"})
    assert p.returncode == 1 and "injected fault at phase 'after_rounds'" in p.stderr, p.stderr[-2000:]
    assert_clean(str(results))
    top = only_run_dir(results)
    rounds = sorted((top / "rounds").iterdir())
    assert [d.name for d in rounds] == ["01-drop-tail", "02-ecn"] and not (top / "rounds.csv").exists()
    summaries = {d: json.loads((d / "summary.json").read_text()) for d in rounds}
    for d in rounds:
        assert (d / "flows.csv").stat().st_size > 0 and (d / "queue_depth.png").stat().st_size > 0
        for name in ("summary.json", "flows.csv", "ports.csv", "queue_depth.png", "throughput.png"):
            (d / name).unlink()
    a = run_cli("analyze", str(top))
    assert a.returncode == 0 and "analysed 2 round(s)" in a.stdout, a.stderr[-2000:]
    for d in rounds:
        assert json.loads((d / "summary.json").read_text()) == summaries[d]
        for name in ("flows.csv", "ports.csv", "queue_depth.png", "throughput.png"):
            assert (d / name).stat().st_size > 0, (d, name)
    assert [r["round"] for r in csv.DictReader(open(top / "rounds.csv"))] == ["drop-tail", "ecn"]


def _start_run(tmp_path, scenario):
    proc, results, _ = start_run(tmp_path, scenario)
    return proc, results


def _kept_rows(results: Path, said: str) -> tuple[dict, list[dict]]:
    """The stopped round's summary and flows.csv rows; both say it was stopped by ``said``."""
    top = only_run_dir(results)
    summary = json.loads((top / "summary.json").read_text())
    assert summary["stopped"] == said, summary.get("stopped")
    assert f"stopped ({said})" in (top / "summary.txt").read_text()
    with open(top / "flows.csv") as fh:
        return summary, list(csv.DictReader(fh))


@_LIFECYCLE
@pytest.mark.parametrize("transport, sigs, code", [("udp", [signal.SIGTERM], 143),
                                                   ("tcp", [signal.SIGINT, signal.SIGINT], 130)])
def test_a_signal_mid_traffic_keeps_what_the_round_measured_and_tears_down(tmp_path, transport, sigs, code):
    """SIGTERM, or Ctrl-C twice (the second is said and ignored), during an incast's traffic: the
    agents write what they counted before the fabric goes down: flows.csv has both flows with the
    bytes that arrived (UDP: the receiver's datagram counts, lost = sent - received), the summary
    says ``stopped``; exit 128 + the signal; nothing left running."""
    scenario = small_scenario(tmp_path, traffic={"response_bytes": 5_000_000, "transport": transport})
    proc, results = _start_run(tmp_path, scenario)
    time.sleep(1.0)                   # the traffic starts 0.5 s after the line that says it will
    for sig in sigs:
        proc.send_signal(sig)
        time.sleep(0.3)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == code, out[-2000:]
    said = signal.Signals(sigs[0]).name
    assert f"{said}: stopping the round's traffic" in out, out[-2000:]
    assert (f"{said} ignored: still writing" in out) is (len(sigs) > 1), out[-2000:]
    summary, rows = _kept_rows(results, said)
    assert len(rows) == 2 and all(int(r["bytes_received"]) > 0 for r in rows), rows
    assert all(r["error"] == "stopped by the runner while sending" for r in rows), [r["error"] for r in rows]
    if transport == "udp":
        assert all(0 < int(r["datagrams_received"]) <= int(r["datagrams_sent"]) for r in rows), rows
        assert summary["flows"]["bytes_received"] == sum(int(r["bytes_received"]) for r in rows)
    assert_clean(str(results))


@_LIFECYCLE
@pytest.mark.parametrize("sig, code, said", [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGHUP, 129, "SIGHUP")])
def test_sigterm_and_sighup_say_so_tear_down_and_exit_with_the_signal_code(tmp_path, sig, code, said):
    """SIGTERM (a service manager, `kill`) and SIGHUP (the terminal closed) end a run as Ctrl-C
    does: a line saying what happened, the fabric torn down, exit 128 + the signal's number. Flows
    arriving over time (Poisson, 1 spine, 3 hosts at 10 Mbit/s), stopped 2 s into their arrivals:
    every flow that finished by then is in flows.csv, complete, with its completion time; the
    others say they were stopped."""
    scenario = tmp_path / "arrivals.yaml"
    scenario.write_text(yaml.safe_dump({
        "name": "arrivals", "seed": 1,
        "topology": {"spines": 1, "leaves": 1, "hosts_per_leaf": 3, "host_rate_mbps": 10, "uplink_rate_mbps": 10},
        "traffic": {"pattern": "poisson", "size_distribution": "websearch", "load": 0.3, "flows": 40,
                    "timeout_s": 30},
        "measurement": {"sample_hz": 100}}))
    proc, results, _ = start_run(tmp_path, scenario, traffic_line="poisson:")
    time.sleep(2.0)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == code, out[-2000:]
    assert f"stopped by {said}" in out and "torn down" in out, out[-2000:]
    _, rows = _kept_rows(results, said)
    top = only_run_dir(results)
    closed = {f["flow_id"] for p in (top / "agents").glob("*.tx.json")
              for f in json.loads(p.read_text())["flows"] if f["state"] == "closed"}
    assert len(rows) == 40 and closed, [r["error"] for r in rows]
    for r in rows:
        if int(r["flow_id"]) in closed:
            assert r["complete"] == "True" and float(r["fct_s"]) > 0 and r["bytes_received"] == r["bytes_planned"], r
        else:
            assert r["complete"] == "False" and r["error"].startswith("stopped by the runner while "), r
    assert_clean(str(results))


@_LIFECYCLE
def test_a_run_refused_by_the_lock_exits_2_and_creates_nothing(tmp_path):
    """While another run holds the machine's run lock, a run says so, exits 2 and creates no
    results folder."""
    from experiments.state import RunState
    results = tmp_path / "results"
    with RunState("holder"):
        p = run_cli("run", str(small_scenario(tmp_path)), "--results", str(results))
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    assert "another fabriclab run is active" in p.stderr
    assert not results.exists() or list(results.iterdir()) == []


@_LIFECYCLE
def test_next_run_after_sigkill_starts_clean(tmp_path, held):
    """Case C2: SIGKILL leaves state behind; the next run removes it and succeeds. The killed run
    was started with a marker on a descriptor above 2: during its traffic none of the processes
    it started holds the marker and each leads its own session (:func:`assert_run_detached`;
    checked here rather than on a fabric of its own in test_detached_daemons.py)."""
    scenario = small_scenario(tmp_path, traffic={"response_bytes": 5_000_000})
    fd, marker = held
    proc, results, _ = start_run(tmp_path, scenario, pass_fds=(fd,))
    try:
        assert_run_detached(proc, marker)
    except BaseException:
        proc.kill()
        proc.wait()
        run_cli("clean")          # what the killed run recorded, so that the next test starts clean
        raise
    proc.kill()
    proc.wait()
    assert ovs_bridges(), "SIGKILL should have left the bridges (nothing ran teardown)"
    p = run_cli("run", str(small_scenario(tmp_path, name="after")), "--results", str(tmp_path / "r2"))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "removed state of an earlier run" in p.stdout
    assert_clean(str(results))
    assert_clean(str(tmp_path / "r2"))


def _machine_settings():
    from controller.dataplane.ovsctl import OvsTxBuffer
    allowed = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read_text().split()
    with OvsTxBuffer(1) as b:
        pass
    return sorted(allowed), b.before_bytes


@_LIFECYCLE
def test_make_clean_removes_killed_run(tmp_path):
    """`make clean` (experiments clean) removes exactly what the killed run recorded, and puts
    back the machine-wide settings the run changed (allowed congestion controls, OVS's
    transmit buffer)."""
    settings = _machine_settings()
    proc, results = _start_run(tmp_path, small_scenario(tmp_path, traffic={"response_bytes": 5_000_000}))
    proc.kill()
    proc.wait()
    p = run_cli("clean")
    assert p.returncode == 0, p.stderr
    assert "removed" in p.stdout
    assert_clean(str(results))
    assert _machine_settings() == settings
    p = run_cli("clean")
    assert "nothing recorded" in p.stdout


def test_bad_scenario_key_exits_2_and_starts_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ntraffic:\n  sendrs: 3\n")
    results = tmp_path / "results"
    p = run_cli("run", str(bad), "--results", str(results))
    assert p.returncode == 2
    assert "traffic.sendrs" in p.stderr
    assert not results.exists()
    assert not Path("/run/fabriclab/state.json").exists()
    assert ovs_bridges() == [] and root_eth_links() == []


def test_missing_congestion_control_exits_2(tmp_path):
    """Case H1: asking for an algorithm the kernel lacks names it; no silent fallback."""
    p = run_cli("run", str(small_scenario(tmp_path, hosts={"tcp_congestion_control": "nosuchcc"})),
                "--results", str(tmp_path / "r"))
    assert p.returncode == 2
    assert "nosuchcc" in p.stderr
    assert ovs_bridges() == []


def test_without_root_make_says_sudo():
    """`make experiment` and `make test` without root stop at once with exit 2 and say sudo."""
    import shutil
    import tempfile
    d = tempfile.mkdtemp(prefix="fabriclab-noroot-")    # readable by an unprivileged user,
    try:                                                  # wherever the checkout lives
        os.chmod(d, 0o755)
        shutil.copy(ROOT / "Makefile", d)
        for target in ("experiment", "test"):
            p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "make", "-s", "-C", d,
                                target], capture_output=True, text=True, timeout=60)
            assert p.returncode == 2, (target, p.stdout, p.stderr)
            assert "sudo" in p.stderr
            assert not (Path(d) / ".venv").exists()
    finally:
        shutil.rmtree(d)
