"""Incast as the literature runs it: persistent connections opened before the start, barrier-
synchronised blocks, and the minimum RTO swept over rounds on one fabric (real Mininet, OVS and
kernel TCP)."""
import csv
import json

import pytest
import yaml

from .conftest import assert_clean, run_cli

ROUNDS = [("n1", {"traffic": {"senders": 1}, "hosts": {"rto_min_ms": 200}}),
          ("rto200", {"hosts": {"rto_min_ms": 200}}),
          ("rto50", {"hosts": {"rto_min_ms": 50}}),
          ("rto5", {"hosts": {"rto_min_ms": 5}})]


@pytest.mark.lane("host", reason="8 synchronised senders need the host's CPU; under the VM's emulated CPU "
                                 "the agents, not the switch buffer, would set the block times")
def test_goodput_falls_as_rto_min_rises_and_no_handshake_after_the_start(tmp_path, figure):
    """8 servers x 8 KiB per block (55 ms on the wire at 10 Mbit/s: blocks much shorter than
    RTOmin, the literature's regime) into a 16-packet buffer toward h1 overflow it: a lost tail
    waits for a timer, the RTO or the tail loss probe it bounds, so the blocks' goodput falls as
    RTOmin rises. One sender alone (a 10-segment initial window below the buffer, through a path
    no faster than its own NIC) never waits for one. Every connection is open before the start:
    no handshake competes with the data. The blocks that stalled are counted with what stalled
    them: at RTOmin 200 ms every block that lost half an RTOmin or more waited for a timer, and
    the stalled blocks account for the time the block phase lost against the ideal."""
    sc = {"name": "blocks", "seed": 1,
          "topology": {"spines": 2, "leaves": 4, "hosts_per_leaf": 6},
          "queues": {"buffer_packets": 16},
          "hosts": {"tcp_congestion_control": "cubic"},
          "traffic": {"pattern": "incast", "incast_mode": "blocks", "receiver": "h1", "senders": 8,
                      "block_bytes": 8192, "blocks": 20, "timeout_s": 120},
          "measurement": {"plots": False},         # no plot is checked here
          "rounds": [{"name": n, **over} for n, over in ROUNDS]}
    path = tmp_path / "blocks.yaml"
    path.write_text(yaml.safe_dump(sc))
    results = tmp_path / "r"
    p = run_cli("run", str(path), "--results", str(results), timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    (top,) = [d for d in results.iterdir() if d.is_dir()]
    env = json.loads((top / "environment.json").read_text())
    assert env["rto_min_effective_ms"]["5"] >= 5 and env["rto_min_effective_ms"]["200"] == 200.0
    by = {}
    for i, (name, _) in enumerate(ROUNDS):
        d = top / "rounds" / f"{i + 1:02d}-{name}"
        b = json.loads((d / "summary.json").read_text())["blocks"]
        renv = json.loads((d / "environment.json").read_text())
        routes = {r["rto_min_ms"] for h in renv["host_config"].values() for r in h["routes"]}
        assert routes == {ROUNDS[i][1]["hosts"]["rto_min_ms"]}, routes          # read back on every host
        assert b["complete"] and b["count"] == 20 and not b["errors"], b
        assert b["all_connected_before_start"] and b["active_opens_after_start"] == 0, b
        assert b["handshake_retrans"] == 0
        by[name] = b
        figure(f"{name}_goodput_overall_mbps", b["goodput_overall_mbps"])
        figure(f"{name}_timeouts_total", b["timeouts_total"])
        figure(f"{name}_loss_probes_total", b["loss_probes_total"])
        # every block is judged, every stalled block has one cause; the kernel's counters are named
        rows = list(csv.DictReader((d / "blocks.csv").read_text().splitlines()))
        assert all(r["stalled"] in ("True", "False") for r in rows), rows
        assert b["blocks_stalled"] == sum(r["stalled"] == "True" for r in rows) == sum(b["stalled_by"].values()), b
        assert b["stall_rule"]["rtt_s"] > 0 and b["stall_rule"]["mss_bytes"] == 1448, b["stall_rule"]
        if "tcpi_total_rto" in b["tcp_info_fields"]:
            assert b["timeouts_method"] == "tcpi_total_rto", b
        figure(f"{name}_blocks_stalled", b["blocks_stalled"])
        lost_s = b["time_total_s"] - b["count"] * b["ideal_block_time_s"]
        by[name]["stalled_share_of_lost"] = b["time_stalled_s"] / lost_s if lost_s > 0 else None
        by[name]["rows"] = rows
    assert by["n1"]["senders"] == 1 and by["rto200"]["senders"] == 8
    assert by["n1"]["timeouts_total"] == 0 and by["n1"]["loss_probes_total"] == 0, by["n1"]
    assert by["n1"]["stalled_by"]["rto"] == by["n1"]["stalled_by"]["tlp"] == 0, by["n1"]
    # the table the RTO columns alone hid: at RTOmin 200 ms, a block that lost 100 ms or more (half
    # an RTOmin) waited for a timer, an RTO or a tail loss probe, never for nothing we count
    rto200 = by["rto200"]
    slow = [r for r in rto200["rows"] if float(r["excess_s"]) >= 0.1]
    assert all(r["stalled"] == "True" and r["stall_cause"] in ("rto", "tlp") for r in slow), slow
    figure("rto200_stalled_share_of_lost", rto200["stalled_share_of_lost"])
    # calibrated (these rounds 10 times, 2026-12-06, beside other runs on the machine: 8 times as
    # rounds of one fabric, twice as this test): at RTOmin 200 ms, blocks stalled 9 / 13.5 / 16 of
    # 20 (min / median / max; mean 12.9, sd 2.2: bound 5); the stalled blocks' time beyond their
    # ideal over the block phase's time beyond its ideal, 0.946 / 0.982 / 0.993 (sd 0.016: bound
    # 0.9): the stalls are where the goodput went. No block without a timer lost more than 47 ms
    # in those runs, well below the 100 ms above
    assert rto200["blocks_stalled"] >= 5, rto200["stalled_by"]
    assert rto200["stalled_share_of_lost"] >= 0.9, rto200["stalled_share_of_lost"]
    # a block's lost tail is repaired by a timer, the RTO or the tail loss probe (whose timeout the
    # RTO bounds): in every 8-sender round some blocks wait for one
    for n in ("rto200", "rto50", "rto5"):
        figure(f"{n}_blocks_with_timer_recovery", by[n]["blocks_with_timer_recovery"])
        assert by[n]["blocks_with_timer_recovery"] >= 1, by[n]
    g = {n: by[n]["goodput_overall_mbps"] for n in ("rto200", "rto50", "rto5")}
    # calibrated (make test-repeat N=10 beside a CPU-heavy process, 2026-12-03): goodput Mbit/s at
    # RTOmin 200 / 50 / 5 ms, medians 2.75 / 4.55 / 5.57; 200 over 5: 0.33 / 0.52 / 0.63 (min /
    # median / max, 1-in-1000 prediction bound 0.95). At 50 ms the goodput lands between, but its
    # run-to-run spread (3.66-5.85) overlaps both neighbours: with a ~3 ms idle round trip the tail
    # loss probe's own timer (two smoothed RTTs of a queue-filled path) is near 50 ms, so only
    # 200 against 5 is asserted
    assert g["rto200"] < 0.95 * g["rto5"], g
    print(f"goodput Mbit/s {g}; timeouts {[by[n]['timeouts_total'] for n in ('rto200', 'rto50', 'rto5')]}")
    assert_clean(str(top))
