"""What each lane's kernel offers, and the kernel paths only the stock kernel has."""
import json
import os

import pytest

from common import probe

from .conftest import run_cli, small_scenario, assert_clean

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


@pytest.mark.kernel("cc:dctcp")
def test_dctcp_on_live_flows(tmp_path):
    """Case H1: the algorithm the scenario asks for is the one live flows use (read on the socket)."""
    results = tmp_path / "results"
    p = run_cli("run", str(small_scenario(tmp_path, hosts={"tcp_congestion_control": "dctcp", "tcp_ecn": 1})),
                "--results", str(results), timeout=900)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    out = next(results.iterdir())
    s = json.loads((out / "summary.json").read_text())
    assert s["flows"]["all_complete"]
    assert s["flows"]["congestion_control_on_live_flows"] == ["dctcp"]
    env = json.loads((out / "environment.json").read_text())
    assert {v["tcp_congestion_control"] for v in env["host_config"].values()} == {"dctcp"}
    assert {v["tcp_ecn"] for v in env["host_config"].values()} == {1}
    assert_clean(str(results))


@pytest.mark.kernel("ovs_kernel_datapath")
def test_experiment_on_kernel_datapath(tmp_path):
    """The users' default path: the OVS kernel datapath carries the incast, the queue builds on
    the receiver's port and every byte arrives."""
    results = tmp_path / "results"
    p = run_cli("run", str(small_scenario(tmp_path)), "--results", str(results), timeout=900)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    out = next(results.iterdir())
    env = json.loads((out / "environment.json").read_text())
    s = json.loads((out / "summary.json").read_text())
    assert env["datapath"] == "kernel" and "ovs_userspace_tx_buffer" not in env
    assert s["flows"]["all_complete"]
    assert s["bottleneck"]["peer"] == "h1" and s["bottleneck"]["within_buffer"]
    assert_clean(str(results))


@pytest.mark.kernel("cc:dctcp")
def test_dctcp_incast_drop_tail_vs_ecn(tmp_path):
    """Issue 5's incast comparison with dctcp on every host (the stock-kernel lane has it): the
    default incast's first two rounds, drop-tail then ECN step K = 20 packets. With ECN the median bottleneck queue
    after the first round trip stays within 1.5 K, drops are at least 10x fewer (or zero), and
    throughput stays within 10% of drop-tail's; every flow runs dctcp (read on the live socket)."""
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
    path = tmp_path / "incast-dctcp.yaml"
    path.write_text(yaml.safe_dump(sc))
    results = tmp_path / "results"
    p = run_cli("run", str(path), "--results", str(results), timeout=1500)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    top = next(results.iterdir())
    rounds = json.loads((top / "rounds.json").read_text())["rounds"]
    dt, ecn = (json.loads((top / r["folder"] / "summary.json").read_text()) for r in rounds)
    for s in (dt, ecn):
        assert s["flows"]["all_complete"] and s["flows"]["congestion_control_on_live_flows"] == ["dctcp"]
    q = ecn["ecn"]["queue_after_first_rtt"]
    print(f"dctcp: drop-tail drops {dt['bottleneck']['drops']}, {dt['bottleneck']['mean_tx_mbps']:.2f} Mbit/s, "
          f"queue median {dt['ecn']['queue_after_first_rtt'].get('median_packets')}; ECN K=20: drops "
          f"{ecn['bottleneck']['drops']}, {ecn['bottleneck']['mean_tx_mbps']:.2f} Mbit/s, queue median "
          f"{q['median_packets']} p99 {q['p99_packets']}, marker {ecn['ecn']['marker']}, "
          f"marks {ecn['ecn']['bottleneck_counters']}")
    assert q["median_packets"] <= 1.5 * 20, q
    assert ecn["total_drops"] == 0 or ecn["total_drops"] * 10 <= dt["total_drops"]
    dt_tp, ecn_tp = (receiver_link_mbps(top / r["folder"]) for r in rounds)
    assert abs(ecn_tp - dt_tp) <= 0.1 * dt_tp, (dt_tp, ecn_tp)
    assert_clean(str(results))
