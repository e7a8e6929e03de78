"""The poisson traffic pattern: its scenario keys (errors naming the key), its plan (a function of
the seed, prefix-stable in ``flows``, every row with ``start_s`` and ``src_port``), and the other
patterns' plans starting at 0."""
import pytest

from common.errors import ScenarioError
from experiments.plan import check_against_fabric
from experiments.scenario import validate
from traffic.flowsizes import flow_size_cdf, offered_load

FABRIC = {"spines": 2, "leaves": 4, "hosts_per_leaf": 6, "uplink_rate_mbps": 30}


def scenario(seed=1, **traffic):
    return validate({"name": "p", "seed": seed, "topology": FABRIC,
                     "traffic": {"pattern": "poisson", "load": 0.5, "flows": 200, **traffic}})


def plan_of(sc):
    return check_against_fabric(sc)[2]


def test_the_defaults_are_resolved_and_recorded():
    sc = scenario()
    t = sc.traffic
    assert (t.size_distribution, t.size_scale) == ("websearch", 5.0)
    assert scenario(size_distribution="datamining").traffic.size_scale == 25.0
    assert scenario(size_distribution="hadoop", size_scale=2).traffic.size_scale == 2
    data = sc.to_data()["traffic"]
    assert data["size_distribution"] == "websearch" and data["size_scale"] == 5.0 and data["load"] == 0.5
    assert validate(sc.to_data()) == sc                     # scenario.yaml reads back equal


def test_the_plan_has_sizes_arrival_times_and_ports():
    sc = scenario()
    plan = plan_of(sc)
    assert len(plan) == 200 and [f["flow_id"] for f in plan] == list(range(200))
    starts = [f["start_s"] for f in plan]
    assert starts == sorted(starts) and starts[0] > 0
    assert all(f["src"] != f["dst"] and f["duration_s"] is None and f["bytes"] >= 1448 for f in plan)
    assert len({f["src_port"] for f in plan}) == 200 and all(10000 <= f["src_port"] < 32768 for f in plan)
    assert len({f["bytes"] for f in plan}) > 100                       # sizes vary
    cdf = flow_size_cdf("websearch")
    # the mean gap: lambda = 0.5 x 24 x 10 Mbit/s / (8 x mean bytes)
    lam = 0.5 * 24 * 10e6 / (8 * cdf.mean_bytes)
    assert starts[-1] == pytest.approx(200 / lam, rel=0.25)


def test_the_plan_is_a_function_of_the_seed_and_prefix_stable():
    a = plan_of(scenario(seed=3))
    assert a == plan_of(scenario(seed=3))
    assert [f["bytes"] for f in a] != [f["bytes"] for f in plan_of(scenario(seed=4))]
    longer = plan_of(scenario(seed=3, flows=400))
    # flow i keeps its hosts, size, arrival time and source port (hence its ECMP path) when flows grows
    assert longer[:200] == a


def test_a_long_plan_offers_the_load():
    plan = plan_of(scenario(seed=2, flows=20000, load=0.3))
    got = offered_load([(f["start_s"], f["bytes"]) for f in plan], 24, 10e6)
    assert got == pytest.approx(0.3, rel=0.06)


def test_every_other_pattern_starts_its_flows_at_0():
    for traffic in ({"pattern": "incast"}, {"pattern": "permutation"}, {"pattern": "all-to-all", "flow_bytes": 1000},
                    {"pattern": "random", "duration_s": 2}):
        plan = plan_of(validate({"name": "p", "traffic": traffic}))
        assert plan and all(f["start_s"] == 0.0 for f in plan) and all("src_port" in f for f in plan), traffic


@pytest.mark.parametrize("traffic, key", [
    ({"size_distribution": "cache"}, "traffic.size_distribution"),
    ({"load": 0}, "traffic.load"),
    ({"load": 1.5}, "traffic.load"),
    ({"load": None}, "traffic.load"),                          # a poisson plan needs one
    ({"flows": None}, "traffic.flows"),
    ({"flows": 0}, "traffic.flows"),
    ({"flows": 20001}, "traffic.flows"),
    ({"size_scale": 0}, "traffic.size_scale"),
    ({"transport": "udp"}, "traffic.transport"),
    ({"transport": "roce"}, "traffic.transport"),
    ({"duration_s": 10}, "traffic.duration_s"),
    ({"flow_bytes": 5000}, "traffic.flow_bytes"),
    ({"flows_per_pair": 2}, "traffic.flows_per_pair"),
])
def test_poisson_keys_are_checked_and_named(traffic, key):
    with pytest.raises(ScenarioError) as e:
        scenario(**traffic)
    assert e.value.key == key


@pytest.mark.parametrize("traffic, key", [
    ({"pattern": "permutation", "size_distribution": "websearch"}, "traffic.size_distribution"),
    ({"pattern": "permutation", "flows": 10}, "traffic.flows"),
    ({"pattern": "permutation", "load": 0.5}, "traffic.load"),    # still a roce key for the other patterns
])
def test_poisson_keys_belong_to_poisson(traffic, key):
    with pytest.raises(ScenarioError) as e:
        validate({"name": "p", "traffic": traffic})
    assert e.value.key == key


def test_the_round_limits_cover_the_last_arrival():
    from experiments.workloads.flows import TAIL_GRACE_S, describe_arrivals, run_limits_s
    sc = scenario(timeout_s=30)
    plan = plan_of(sc)
    last = plan[-1]["start_s"]
    agents_s, wait_s = run_limits_s(sc.traffic, plan)
    assert agents_s == pytest.approx(30 + last + 0.5 + TAIL_GRACE_S) and wait_s == pytest.approx(30 + last)
    # every flow at the start: the limits as they always were
    inc = validate({"name": "p"})
    assert run_limits_s(inc.traffic, plan_of(inc)) == (120 + 0.5 + TAIL_GRACE_S, 120)
    tl = validate({"name": "p", "traffic": {"pattern": "permutation", "duration_s": 5}})
    assert run_limits_s(tl.traffic, plan_of(tl)) == (5 + 0.5 + TAIL_GRACE_S, 5 + TAIL_GRACE_S)
    text = describe_arrivals(plan, 24)
    assert text.startswith("200 flows of ") and text.endswith(f"between 24 hosts, arriving over {last:.1f} s")


def test_the_bundled_websearch_scenario_and_study():
    from pathlib import Path
    from experiments.scenario import load_scenario
    from experiments.study import load_study, plan_runs
    repo = Path(__file__).resolve().parents[2]
    sc = load_scenario(repo / "experiments" / "scenarios" / "websearch.yaml")
    t = sc.traffic
    assert (t.pattern, t.size_distribution, t.size_scale, t.load, t.flows) == ("poisson", "websearch", 5, 0.5, 1750)
    plan = plan_of(sc)
    assert 30 < plan[-1]["start_s"] < 60                        # about 40 s of arrivals
    assert offered_load([(f["start_s"], f["bytes"]) for f in plan], 24, 10e6) == pytest.approx(0.5, abs=0.05)
    study = load_study(repo / "experiments" / "studies" / "websearch-cc.yaml")
    assert study.variants == ("cubic", "bbr") and study.seeds == tuple(range(1, 11)) and len(study.cells) == 20
    assert {c.scenario.hosts.tcp_congestion_control for c in study.cells} == {"cubic", "bbr"}
    runs = plan_runs(study)
    assert len(runs) == 1 and len(runs[0].cells) == 20          # only the hosts differ: one fabric, 20 rounds


def test_the_forwarding_estimate_of_arrivals_is_the_offered_load_times_switch_hops():
    from experiments.fluid import offered_switch_hop_mbps
    fm = check_against_fabric(scenario())[1]
    plan = [{"src": "h1", "dst": "h2", "bytes": 144_800, "start_s": 0.5},      # one leaf: 1 switch
            {"src": "h1", "dst": "h7", "bytes": 144_800, "start_s": 1.0}]      # leaf, spine, leaf: 3
    # 100 frames of 1514 B each, 4 switch crossings in all, over 1 s of arrivals
    assert offered_switch_hop_mbps(fm, plan) == pytest.approx(4 * 100 * 1514 * 8 / 1e6)
    assert offered_switch_hop_mbps(fm, [dict(f, start_s=0.0) for f in plan]) == 0.0
    # a scaled poisson scenario is held against the userspace budget by what its arrivals offer
    from tests.unit.test_scaling import _feature
    real = {"topology": {"host_rate_mbps": 1000, "uplink_rate_mbps": 3000}}
    data = {"name": "x", "topology": {"spines": 2, "leaves": 4, "hosts_per_leaf": 6},
            "traffic": {"pattern": "poisson", "load": 0.5, "flows": 1750}, "scale": {"factor": 100, "real": real}}
    f, ctx = _feature(data, "kernel")
    assert f.plan(1) == 0
    est = ctx.env["scaled"]
    assert est["estimate"].startswith("the traffic plan's bytes as frames") and 300 < est["forwarding_estimate_mbps"] < 350
    f, ctx = _feature(data, "user")                  # about 327 Mbit/s: beyond the 300 of the userspace budget
    with pytest.raises(ScenarioError, match="a factor of at least 1"):
        f.plan(1)
