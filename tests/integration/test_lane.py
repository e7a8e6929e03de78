"""What each lane's kernel offers, and the kernel paths only the stock kernel has."""
import json
import os

import pytest

from experiments import probe

from .conftest import run_cli, assert_clean

LANE = os.environ.get("FABRICLAB_LANE", "host")


def test_probe_chooses_datapath_from_module():
    p = probe.probe()
    assert p["datapath"] == ("kernel" if p["ovs_kernel_module"] else "user")
    assert p["qdiscs"]["htb"] and p["qdiscs"]["pfifo"] and p["qdiscs"]["bfifo"]  # needed by every lane
    assert p["offloads_off"] is True


@pytest.mark.lane("vm", reason="only the VM lane runs a stock Debian kernel")
def test_vm_lane_has_the_stock_kernel_paths():
    """The stock kernel lane must choose the kernel datapath and find RED (with ECN), netem,
    fq_codel and dctcp: if the probe stops finding them, the users' paths go untested."""
    p = probe.probe()
    assert p["datapath"] == "kernel"
    for q in ("red", "netem", "fq_codel", "prio", "htb", "clsact"):
        assert p["qdiscs"][q], q
    assert probe.ensure_congestion_control("dctcp")


# The VM lane's one run of the default incast is the next test: it also carries what two smaller
# runs checked before (dctcp and tcp_ecn on every host, read on the live sockets; the OVS kernel
# datapath carrying an experiment), 76 s of the lane's budget under the emulated CPU.


@pytest.mark.kernel("cc:dctcp", "ovs_kernel_datapath")
def test_dctcp_incast_drop_tail_vs_ecn(tmp_path, figure):
    """The default incast (its first two rounds, drop-tail then ECN step K = 20 packets) with dctcp
    on every host, on the OVS kernel datapath with the kernel's RED as the marker (the stock-kernel
    lane has them). With ECN the median bottleneck queue after the first round trip stays within
    1.5 K, drops are at least 10x fewer (or zero), and throughput stays within the calibrated
    0.69-1.35x of drop-tail's (the emulated CPU's spread; the host lane holds 10%).
    Case H1: every host has the congestion control and tcp_ecn the scenario asked for, and every
    live flow runs dctcp (read on the socket). The kernel datapath carried it (no userspace
    transmit buffer was touched), and every byte arrived."""
    import yaml
    from .conftest import ROOT
    from .test_experiment import receiver_link_mbps
    sc = yaml.safe_load((ROOT / "experiments/scenarios/incast.yaml").read_text())
    sc["name"] = "incast-dctcp"
    sc["hosts"] = {"tcp_congestion_control": "dctcp", "tcp_ecn": 1}
    # the drop-tail and ECN rounds only, one FIFO per port: the marker is the kernel's RED here
    sc["rounds"] = [{k: v for k, v in r.items() if k != "pfc"} for r in sc["rounds"][:2]]
    for key in ("priorities", "pfc"):
        sc.pop(key, None)
    sc["traffic"].pop("dscp", None)
    sc["measurement"] = {**(sc.get("measurement") or {}), "plots": False}    # no plot is checked here
    path = tmp_path / "incast-dctcp.yaml"
    path.write_text(yaml.safe_dump(sc))
    results = tmp_path / "results"
    # --accept-unfaithful: under the VM's emulated CPU the shaper's timer fires late and the
    # bottleneck sends 0.84 of its 10 Mbit/s while backlogged (a CI rehearsal, 2026-12-03; 8.3 of 10
    # Mbit/s was seen here before the check existed): the run's fidelity check rightly fails it,
    # while this test is about the stock kernel's dctcp and RED paths
    p = run_cli("run", str(path), "--results", str(results), "--accept-unfaithful", timeout=1500)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    top = next(results.iterdir())
    rounds = json.loads((top / "rounds.json").read_text())["rounds"]
    dt, ecn = (json.loads((top / r["folder"] / "summary.json").read_text()) for r in rounds)
    for s in (dt, ecn):
        assert s["flows"]["all_complete"] and s["flows"]["congestion_control_on_live_flows"] == ["dctcp"]
        assert all(f["bytes_sent"] == f["bytes_received"] for f in s["flows"]["per_flow"])
    env = json.loads((top / "environment.json").read_text())
    assert env["datapath"] == "kernel" and "ovs_userspace_tx_buffer" not in env
    # a run of several rounds records each round's host configuration
    per_round = env["host_config_per_round"]
    assert len(per_round) == 2 and all(len(r) >= 9 for r in per_round.values()), per_round   # 8 senders, 1 receiver
    hosts = [v for r in per_round.values() for v in r.values()]
    assert {v["tcp_congestion_control"] for v in hosts} == {"dctcp"}
    assert {v["tcp_ecn"] for v in hosts} == {1}
    assert ecn["ecn"]["marker"] == "red", ecn["ecn"]
    q = ecn["ecn"]["queue_after_first_rtt"]
    print(f"dctcp: drop-tail drops {dt['bottleneck']['drops']}, {dt['bottleneck']['mean_tx_mbps']:.2f} Mbit/s, "
          f"queue median {dt['ecn']['queue_after_first_rtt'].get('median_packets')}; ECN K=20: drops "
          f"{ecn['bottleneck']['drops']}, {ecn['bottleneck']['mean_tx_mbps']:.2f} Mbit/s, queue median "
          f"{q['median_packets']} p99 {q['p99_packets']}, marker {ecn['ecn']['marker']}, "
          f"marks {ecn['ecn']['bottleneck_counters']}")
    figure("ecn_queue_median_over_k", q["median_packets"] / 20)
    figure("drop_tail_drops", dt["total_drops"])
    figure("ecn_drops", ecn["total_drops"])
    assert q["median_packets"] <= 1.5 * 20, q
    assert ecn["total_drops"] == 0 or ecn["total_drops"] * 10 <= dt["total_drops"]
    dt_tp, ecn_tp = (receiver_link_mbps(top / r["folder"]) for r in rounds)
    figure("ecn_over_drop_tail_throughput", ecn_tp / dt_tp)
    # Under the emulated CPU the receiver link's mean rate is as much the guest's CPU as the
    # marking: calibrated (make test-repeat VM=1 N=10 beside a CPU-heavy process, 2026-12-02):
    # ECN / drop-tail 0.901 / 1.016 / 1.142 (min / median / max), 1-in-1000 bounds 0.695 .. 1.345;
    # the 10% bound failed 2 of those 10 runs, and one CI rehearsal under extra load (0.894). The
    # host lane holds ECN to 10% of drop-tail (test_experiment.py, the default experiment).
    assert 0.69 * dt_tp <= ecn_tp <= 1.35 * dt_tp, (dt_tp, ecn_tp)
    assert_clean(str(results))
