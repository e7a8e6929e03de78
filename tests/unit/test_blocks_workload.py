"""The incast-blocks workload without a fabric: the registry gives blocks rounds to it (and
oneshot incasts to the flows workload), each round's senders follow its traffic, and a round's
summary, blocks.csv, block_connections.csv, ports.csv and blocks_rounds.csv come from real agent
records (a loopback run of traffic.blocks) and a synthetic sampler file."""
import csv
import json
import shutil

from common.units import tcp_wire_bytes
from experiments import rounds
from experiments.context import RoundRecord
from experiments.plan import check_against_fabric
from experiments.scenario import validate
from experiments.workloads.flows import KernelFlows
from experiments.workloads.registry import workload_for
from experiments.workloads.blocks.workload import IncastBlocks
from tests.unit.test_blocks_agent import _run

SCENARIO = {"name": "blk", "queues": {"buffer_packets": 16},
            "traffic": {"incast_mode": "blocks", "senders": 6, "block_bytes": 100_000, "blocks": 4},
            "rounds": [{"name": "n3", "traffic": {"senders": 3}}, {"name": "rto5", "hosts": {"rto_min_ms": 5}}]}


def test_blocks_rounds_go_to_the_blocks_workload_and_oneshot_to_flows():
    sc = validate(SCENARIO)
    assert all(workload_for(sc, r) is IncastBlocks for r in sc.rounds)
    one = validate({"name": "one"})
    assert workload_for(one, one.rounds[0]) is KernelFlows


def test_each_round_runs_its_own_senders(tmp_path):
    sc = validate(SCENARIO)
    ctx = rounds.run_context(sc, check_against_fabric(sc), {}, tmp_path, True)
    w = IncastBlocks(ctx)
    n3, rto5 = (w.senders(r) for r in sc.rounds)
    assert len(n3) == 3 and len(rto5) == 6
    assert [f["src"] for f in n3] == [f["src"] for f in rto5[:3]]     # the same pick, cut short
    assert {f["dst"] for f in n3 + rto5} == {"h1"}
    assert w.describe_round(sc.rounds[0]) == "blocks of 3 x 100000 B, cubic"


def test_a_round_summary_from_real_agent_records(tmp_path):
    sc = validate(SCENARIO)
    out = tmp_path / "run"
    ctx = rounds.run_context(sc, check_against_fabric(sc), {}, out, True)
    w = IncastBlocks(ctx)
    rnd = sc.rounds[0]
    hosts = [f["src"] for f in w.senders(rnd)]
    start, client, servers = _run(tmp_path, rnd.traffic.block_bytes, blocks=rnd.traffic.blocks, hosts=hosts)
    rdir = out / "rounds" / "01-n3"
    (rdir / "agents").mkdir(parents=True)
    shutil.copy(tmp_path / "c.json", rdir / "agents" / "h1.cli.json")
    for i, h in enumerate(hosts):
        shutil.copy(tmp_path / f"s{i}.json", rdir / "agents" / f"{h}.srv.json")
    toward = next(p["intf"] for sw in ctx.fabric_map["switches"] for p in sw["ports"] if p["peer"] == "h1")
    with open(rdir / "queues_raw.csv", "w") as f:
        f.write("t_unix_s,intf,backlog_bytes,backlog_packets,drops_total,tx_bytes_total,tx_packets_total\n")
        for k, (pkts, drops) in enumerate([(0, 0), (16, 3), (9, 5), (0, 5)]):
            f.write(f"{start + 0.01 * k},{toward},{pkts * 1514},{pkts},{drops},{k * 300000},{k * 200}\n")
    (rdir / "sampler.json").write_text(json.dumps({"achieved_hz": 200}))
    (rdir / "environment.json").write_text(json.dumps({"datapath": "user", "kernel": "test", "host_config": {}}))
    rec = RoundRecord(index=0, round=rnd, dir=rdir, raw={"codes": {}, "senders": hosts, "receiver": "h1"})
    summary = w.summarize(rec)
    b = summary["blocks"]
    assert b["count"] == 4 and b["complete"] and b["senders"] == 3 and b["block_bytes"] == 100_000
    assert len(b["goodput_mbps"]) == 4 and b["goodput_mbps_stats"]["min"] == min(b["goodput_mbps"])
    assert b["bytes_total"] == 4 * 3 * 100_000 and b["all_connected_before_start"]
    assert len(b["retransmissions"]) == len(b["timeouts"]) == 4
    assert all(x is not None for x in b["timeouts"]) and b["blocks_with_timeout"] == sum(1 for x in b["timeouts"] if x)
    # no measured round trip in this environment record: the ideal is the wire time alone
    mss = b["stall_rule"]["mss_bytes"]
    assert mss == min(s["connections"][0]["snd_mss"] for s in servers) and b["stall_rule"]["rtt_s"] == 0
    assert b["ideal_block_time_s"] == 3 * tcp_wire_bytes(100_000, mss) * 8 / 10e6
    assert b["stall_rule"]["queue_s"] == 16 * 1514 * 8 / 10e6      # the scenario's 16-packet buffer
    assert b["blocks_stalled"] == sum(b["stalled_by"].values()) and b["timeouts_method"] == "tcpi_total_rto"
    assert summary["bottleneck"]["intf"] == toward and summary["bottleneck"]["drops"] == 5
    assert summary["total_drops"] == 5 and not (rdir / "queues_raw.csv").exists()
    with open(rdir / "blocks.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["block"]) for r in rows] == [0, 1, 2, 3]
    assert all(r["stalled"] in ("True", "False") and float(r["longest_gap_s"]) > 0 for r in rows)
    assert all(float(a["end_s"]) <= float(b_["start_s"]) for a, b_ in zip(rows, rows[1:]))
    with open(rdir / "block_connections.csv") as f:
        conns = list(csv.DictReader(f))
    assert len(conns) == 4 * 3 and {c["sender"] for c in conns} == set(hosts)
    assert all(int(c["bytes"]) == 100_000 and c["retrans"] != "" for c in conns)
    line = w.format_round(summary, rdir)
    assert "goodput overall" in line and "per block median" in line and "blocks stalled (RTO " in line
    w.finish_run([(rec, summary)])
    with open(out / "blocks_rounds.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert row["name"] == "n3" and row["senders"] == "3" and row["folder"] == "rounds/01-n3"
    assert int(row["blocks_stalled"]) == sum(int(row[f"stalled_{c}"]) for c in ("rto", "tlp", "other", "unknown"))
    assert float(row["block_time_ideal_s"]) == b["ideal_block_time_s"]


def test_a_oneshot_incast_round_plans_its_own_senders_over_tcp_and_roce(tmp_path):
    """The flows and RoCE workloads plan a round's senders from ``Round.traffic``: the run's plan
    for a round that keeps the scenario's, the first N of the same pick for one that sets N."""
    from experiments.workloads.roce.workload import RoceFlows
    for transport, cls in (("tcp", KernelFlows), ("roce", RoceFlows)):
        sc = validate({"name": "one", "traffic": {"transport": transport, "senders": 8},
                       "rounds": [{"name": "n2", "traffic": {"senders": 2}}, {"name": "n8"}]})
        ctx = rounds.run_context(sc, check_against_fabric(sc), {}, tmp_path / transport, True)
        assert all(workload_for(sc, r) is cls for r in sc.rounds)
        w = cls(ctx)
        n2, n8 = (w.round_plan(r) for r in sc.rounds)
        assert n8 is ctx.plan and len(n8) == 8
        assert [f["src"] for f in n2] == [f["src"] for f in n8[:2]]
        assert {f["dst"] for f in n2} == {"h1"}
