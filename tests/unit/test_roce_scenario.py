"""RoCE scenarios (issue 7): the schema, the flows and DCQCN parameters a scenario gives."""
import pytest

from common.errors import ScenarioError
from common.stats import jain_index
from experiments.scenario import validate
from experiments import rocerun
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
    flows = rocerun.scenario_flows(sc, plan)
    assert len(flows) == 3 and all(f["dst"] == "h1" for f in flows)
    for f in flows:
        assert [m["bytes"] for m in f["messages"]] == [10_000] * 4
        times = [m["at_s"] for m in f["messages"]]
        assert times == sorted(times) and times[0] > 0
    sync = rocerun.scenario_flows(validate(roce()), plan)
    assert all(f["messages"] == [{"at_s": 0.0, "bytes": 10_000}] for f in sync)


def test_dcqcn_parameters_from_the_scenario():
    p = rocerun.dcqcn_params(validate(roce()))
    assert p.line_rate_bps == 10e6 and p.time_scale == 100
    p = rocerun.dcqcn_params(validate({**roce(), "roce": {"dcqcn": {"time_scale": 50, "rate_ai_mbps": 0.05}}}))
    assert p.timer_s == pytest.approx(55e-6 * 50) and p.rate_ai_bps == pytest.approx(50e3)
    with pytest.raises(ScenarioError) as e:
        rocerun.dcqcn_params(validate({**roce(), "roce": {"dcqcn": {"min_rate_mbps": 50}}}))
    assert e.value.key == "roce.dcqcn.min_rate_mbps"
    args = rocerun.scenario_job_args(validate(roce()), "none")
    assert args["mode"] == "none" and args["rate_mbps"] == 10 and args["dscp"] == 26 and args["rto_s"] > 0


def test_jain_rates_and_median_interval():
    assert jain_index([5, 5]) == 1.0
    assert jain_index([1, 0]) == 0.5
    with pytest.raises(ValueError):
        jain_index([0, 0])
    s = [(0.0, 0), (1.0, 1000), (2.0, 3000)]
    assert rocerun.rate_series_bps(s, 0.5, 1.5) == pytest.approx((2000 - 500) * 8)
    with pytest.raises(ValueError):
        rocerun.rate_series_bps(s, 0.5, 2.5)
    lo, hi = rocerun._median_ci(list(range(100)))
    assert lo < 50 < hi and hi - lo < 25
    assert rocerun._median_ci([1, 2, 3]) is None


def test_rounds_repeat_with_their_own_seeds_and_compare_across_them():
    sc = validate({**roce(responses=5, arrival="poisson", load=0.5),
                   "rounds": [{"name": "a", "seed": 1}, {"name": "b", "seed": 2}, {"name": "c", "roce": {"mode": "none"}}]})
    r = sc.rounds
    assert [x.seed for x in r] == [1, 2, sc.seed]
    _, _, plan, _, _ = check_against_fabric(sc)
    one, two = (rocerun.scenario_flows(sc, plan, s) for s in (1, 2))
    assert one != two and one == rocerun.scenario_flows(sc, plan, 1)
    with pytest.raises(ScenarioError) as e:
        validate({**roce(), "rounds": [{"name": "a", "seed": -1}]})
    assert e.value.key == "rounds[0].seed"
    rows = [{"name": "a", "roce_mode": "dcqcn", "seed": 1, "message_fct_median_s": 0.2, "message_fct_p99_s": 1.0},
            {"name": "b", "roce_mode": "dcqcn", "seed": 2, "message_fct_median_s": 0.4, "message_fct_p99_s": 2.0},
            {"name": "c", "roce_mode": "none", "seed": 1, "message_fct_median_s": None, "message_fct_p99_s": None},
            {"name": "tcp", "roce_mode": None}]
    got = rocerun.across_seeds(rows)
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
