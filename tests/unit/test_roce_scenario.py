"""RoCE scenarios (issue 7): the schema, the flows and DCQCN parameters a scenario gives, and the
fluid model's fixed point a round's summary carries."""
from pathlib import Path
from types import SimpleNamespace

import pytest

from common.dcqcn_fluid import fixed_point
from common.errors import ScenarioError
from common.stats import jain_index
from experiments.scenario import dcqcn_params, load_scenario, validate
from experiments.workloads.roce import workload as roce_workload
from experiments.workloads.flows import KernelFlows
from experiments.workloads.roce import jobs as rocejobs, report as rocereport, summary as rocesummary
from experiments.plan import check_against_fabric


def roce(**traffic):
    return {"name": "r", "topology": {"spines": 1, "leaves": 2, "hosts_per_leaf": 4},
            "traffic": {"transport": "roce", "senders": 3, "response_bytes": 10_000, **traffic}}


def test_roce_defaults_dscp_26_and_modes_per_round():
    sc = validate({**roce(), "rounds": [{"name": "a", "roce": {"mode": "dcqcn"}}, {"name": "b", "roce": {"mode": "none"}}]})
    assert sc.traffic.dscp == 26 and sc.roce.mode == "dcqcn"
    assert [r.roce_mode for r in sc.rounds] == ["dcqcn", "none"]
    assert validate({"name": "t", "traffic": {}}).traffic.dscp == 0
    assert validate(roce()).rounds[0].roce_mode == "dcqcn"


@pytest.mark.parametrize("data,key", [
    ({"name": "t", "traffic": {"arrival": "poisson", "load": 0.5}}, "traffic.arrival"),
    ({"name": "t", "traffic": {"responses": 3}}, "traffic.responses"),
    (roce(arrival="poisson"), "traffic.load"),
    (roce(load=1.5), "traffic.load"),
    ({**roce(), "roce": {"mode": "fast"}}, "roce.mode"),
    ({**roce(), "roce": {"mtu_bytes": 1500}}, "roce.mtu_bytes"),
    ({**roce(), "roce": {"pcap_hosts": ["h99"]}}, "roce.pcap_hosts[0]"),
    ({**roce(), "roce": {"dcqcn": {"gain": 0.1}}}, "roce.dcqcn.gain"),
    ({**roce(), "rounds": [{"name": "a", "roce": {"mode": "dcqcn", "rate_mbps": 3}}]}, "rounds[0].roce"),
    ({**roce(), "rounds": [{"name": "a", "roce": {"mode": "slow"}}]}, "rounds[0].roce.mode"),
])
def test_bad_roce_input_names_the_key(data, key):
    with pytest.raises(ScenarioError) as e:
        validate(data)
    assert e.value.key == key


def test_incast_flows_carry_the_message_schedule():
    sc = validate(roce(responses=4, arrival="poisson", load=0.5))
    _, _, plan, _, _ = check_against_fabric(sc)
    flows = rocejobs.scenario_flows(sc, plan)
    assert len(flows) == 3 and all(f["dst"] == "h1" for f in flows)
    for f in flows:
        assert [m["bytes"] for m in f["messages"]] == [10_000] * 4
        times = [m["at_s"] for m in f["messages"]]
        assert times == sorted(times) and times[0] > 0
    sync = rocejobs.scenario_flows(validate(roce()), plan)
    assert all(f["messages"] == [{"at_s": 0.0, "bytes": 10_000}] for f in sync)


def test_dcqcn_parameters_from_the_scenario():
    p = dcqcn_params(validate(roce()))
    assert p.line_rate_bps == 10e6 and p.time_scale == 100
    p = dcqcn_params(validate({**roce(), "roce": {"dcqcn": {"time_scale": 50, "rate_ai_mbps": 0.05}}}))
    assert p.timer_s == pytest.approx(55e-6 * 50) and p.rate_ai_bps == pytest.approx(50e3)
    with pytest.raises(ScenarioError) as e:
        dcqcn_params(validate({**roce(), "roce": {"dcqcn": {"min_rate_mbps": 50}}}))
    assert e.value.key == "roce.dcqcn.min_rate_mbps"
    args = rocejobs.scenario_job_args(validate(roce()), "none")
    assert args["mode"] == "none" and args["rate_mbps"] == 10 and args["dscp"] == 26 and args["rto_s"] > 0


def test_jain_rates_and_median_interval():
    assert jain_index([5, 5]) == 1.0
    assert jain_index([1, 0]) == 0.5
    with pytest.raises(ValueError):
        jain_index([0, 0])
    s = [(0.0, 0), (1.0, 1000), (2.0, 3000)]
    assert rocesummary.rate_series_bps(s, 0.5, 1.5) == pytest.approx((2000 - 500) * 8)
    with pytest.raises(ValueError):
        rocesummary.rate_series_bps(s, 0.5, 2.5)
    lo, hi = rocesummary._median_ci(list(range(100)))
    assert lo < 50 < hi and hi - lo < 25
    assert rocesummary._median_ci([1, 2, 3]) is None


def test_rounds_repeat_with_their_own_seeds_and_compare_across_them():
    sc = validate({**roce(responses=5, arrival="poisson", load=0.5),
                   "rounds": [{"name": "a", "seed": 1}, {"name": "b", "seed": 2}, {"name": "c", "roce": {"mode": "none"}}]})
    r = sc.rounds
    assert [x.seed for x in r] == [1, 2, sc.seed]
    _, _, plan, _, _ = check_against_fabric(sc)
    one, two = (rocejobs.scenario_flows(sc, plan, s) for s in (1, 2))
    assert one != two and one == rocejobs.scenario_flows(sc, plan, 1)
    with pytest.raises(ScenarioError) as e:
        validate({**roce(), "rounds": [{"name": "a", "seed": -1}]})
    assert e.value.key == "rounds[0].seed"
    rows = [{"round": "a", "roce_mode": "dcqcn", "seed": 1, "message_fct_median_s": 0.2, "message_fct_p99_s": 1.0},
            {"round": "b", "roce_mode": "dcqcn", "seed": 2, "message_fct_median_s": 0.4, "message_fct_p99_s": 2.0},
            {"round": "c", "roce_mode": "none", "seed": 1, "message_fct_median_s": None, "message_fct_p99_s": None},
            {"round": "tcp", "roce_mode": None}]
    got = rocereport.across_seeds(rows)
    d = got["dcqcn"]
    assert d["rounds"] == ["a", "b"] and d["seeds"] == [1, 2]
    assert d["median_s"] == pytest.approx({"median": 0.3, "min": 0.2, "max": 0.4})
    assert d["p99_s"] == pytest.approx({"median": 1.5, "min": 1.0, "max": 2.0})
    assert got["none"]["median_s"] is None and set(got) == {"dcqcn", "none"}


def test_contradicting_dcqcn_overrides_are_named_before_anything_starts():
    sc = validate({**roce(), "roce": {"dcqcn": {"min_rate_mbps": 50}}})
    with pytest.raises(ScenarioError) as e:
        check_against_fabric(sc)
    assert e.value.key == "roce.dcqcn.min_rate_mbps"


RED = {"profile": {"red": {"kmin_bytes": 3028, "kmax_bytes": 60560, "pmax": 0.2}}}


def fluid_of(data, mode="dcqcn", measured=None):
    """The fluid_fixed_point block the RoCE workload builds for ``data``'s first round."""
    sc = validate(data)
    _, fabric_map, plan, _, profiles = check_against_fabric(sc)
    port = rocesummary.shared_port(rocejobs.scenario_flows(sc, plan), fabric_map)
    prof = profiles[0].get(port["intf"]) if port else None
    return port, rocesummary.fluid_fixed_point(mode, dcqcn_params(sc), port, prof, sc.roce.mtu_bytes, measured)


def test_long_flows_into_one_receiver_get_the_fluid_fixed_point_of_its_port(tmp_path):
    port, block = fluid_of({**roce(response_bytes=2_000_000), "ecn": RED},
                           measured={"from_s": 0.5, "to_s": 3.0, "samples": 10, "median_bytes": 15000.0,
                                     "p99_bytes": 30000.0, "median_packets": 14.0, "p99_packets": 28.0})
    assert port["receiver"] == "h1" and port["n_flows"] == 3 and port["rate_bps"] == 10e6
    assert block["port"] == port["intf"] and block["n_flows"] == 3 and block["packet_bytes"] == 1024 + 58
    ref = fixed_point(dcqcn_params(validate(roce())), 3, 10e6, 3028, 60560, 0.2, 1082)
    assert block["p_mark"] == ref.p_mark and block["queue_packets"] == ref.queue_packets
    assert block["rate_bps"] == pytest.approx(10e6 / 3) and 3028 < block["queue_bytes"] < 60560
    assert block["measured_queue_median_packets"] == 14.0 and block["measured_window_s"] == [0.5, 3.0]
    summary = rocesummary.add_to_summary(tmp_path, {}, [], "dcqcn", dcqcn_params(validate(roce())), 1,
                                     fluid=block)
    assert summary["roce"]["fluid_fixed_point"] is block
    line = rocereport.format_line(summary)
    assert f"fluid q* {block['queue_packets']:.1f} pkts" in line and "(measured median 14 pkts)" in line
    # not sampled: the block says so, the line leaves the measurement out
    _, bare = fluid_of({**roce(response_bytes=2_000_000), "ecn": RED})
    assert bare["measured_queue_median_packets"] is None and bare["measured_window_s"] is None
    assert "measured" not in rocereport._fluid_clause(bare)
    # past Kmax: said, no number made up
    _, many = fluid_of({**roce(response_bytes=2_000_000, senders=7),
                        "ecn": {"profile": {"red": {"kmin_bytes": 3028, "kmax_bytes": 6056, "pmax": 0.01}}}})
    assert many["above_kmax"] and many["queue_packets"] is None and "fluid q* above Kmax" in rocereport._fluid_clause(many)


@pytest.mark.parametrize("data, mode", [
    ({**roce(response_bytes=2_000_000), "ecn": RED}, "none"),                    # open loop: no DCQCN
    (roce(response_bytes=2_000_000), "dcqcn"),                                   # no marking
    ({**roce(response_bytes=2_000_000), "ecn": {"profile": {"step": {"k_packets": 20}}}}, "dcqcn"),  # step
    ({**roce(responses=4, arrival="poisson", load=0.5), "ecn": RED}, "dcqcn"),   # messages come and go
    ({**roce(pattern="permutation", flow_bytes=10**6), "ecn": RED}, "dcqcn"),    # no shared receiver
    ({**roce(senders=1, response_bytes=2_000_000), "ecn": RED}, "dcqcn"),        # one flow at line rate
])
def test_no_fluid_fixed_point_where_it_does_not_apply(data, mode, tmp_path):
    _, block = fluid_of(data, mode)
    assert block is None
    summary = rocesummary.add_to_summary(tmp_path, {}, [], mode, dcqcn_params(validate(data)), 1, fluid=block)
    assert "fluid_fixed_point" not in summary["roce"] and "fluid" not in rocereport.format_line(summary)


def test_the_bundled_roce_scenario_has_no_fixed_point_for_its_poisson_responses():
    sc = load_scenario(Path(__file__).resolve().parents[2] / "experiments/scenarios/roce-incast.yaml")
    _, fabric_map, plan, _, _ = check_against_fabric(sc)
    assert rocesummary.shared_port(rocejobs.scenario_flows(sc, plan), fabric_map) is None


def test_the_roce_workload_puts_the_receivers_sampled_queue_beside_the_fixed_point(tmp_path, monkeypatch):
    sc = validate({**roce(response_bytes=2_000_000), "ecn": RED})
    _, fabric_map, plan, rounds, profiles = check_against_fabric(sc)
    intf = rocesummary.shared_port(rocejobs.scenario_flows(sc, plan), fabric_map)["intf"]
    # 0.5 s of a 92-packet queue, then 11 packets; another port full all along (not the receiver's)
    lines = ["t_s,intf,backlog_bytes,backlog_packets,drops_total,tx_bytes_total,tx_packets_total"]
    for i in range(400):
        lines += [f"{i * 0.01:.6f},{intf},{12000 if i > 50 else 100000},{11 if i > 50 else 92},0,{i * 1000},{i}",
                  f"{i * 0.01:.6f},other-eth1,90000,85,0,{i * 1000},{i}"]
    (tmp_path / "queues.csv").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(KernelFlows, "summarize", lambda self, rec: {})
    w = roce_workload.RoceFlows(SimpleNamespace(sc=sc, plan=plan, fabric_map=fabric_map, profiles=profiles,
                                                env={"scale": {"measured_rtt_s": 0.003}}))
    rec = SimpleNamespace(dir=tmp_path, index=0, round=rounds[0],
                          rows=[{"flow_id": 0, "src": "h5", "dst": "h1", "fct_s": 3.5, "complete": True, "roce": None}])
    fp = w.summarize(rec)["roce"]["fluid_fixed_point"]
    assert fp["port"] == intf and fp["n_flows"] == 3
    assert fp["measured_queue_median_packets"] == 11 and fp["measured_queue_median_bytes"] == 12000
    # the window opens once the first burst's peak (100000 B at t = 0) has drained at 10 Mbit/s
    assert fp["measured_window_s"] == [pytest.approx(0.08), 3.5]
