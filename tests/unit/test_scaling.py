"""The scaling helper (pure): the real fabric's rates and times scaled into the scenario's own
sections, the record that reads back equal, the forwarding estimate and budget, real units."""
from __future__ import annotations

import pytest

from common.errors import ScenarioError
from experiments.features.scaled import USERSPACE_FORWARDING_MBPS, ScaledFabric, real_units
from experiments.fluid import switch_hop_forwarding_mbps
from experiments.plan import check_against_fabric
from experiments.rounds import run_context as _context
from experiments.scaling import apply_scale, scale_value
from experiments.scenario import load_scenario, validate

REAL = {"topology": {"host_rate_mbps": 10000, "uplink_rate_mbps": 40000}, "links": {"delay_us": 1},
        "hosts": {"rto_min_ms": 1}}


def test_rates_divide_times_multiply_and_counts_do_not_scale():
    assert scale_value("host_rate_mbps", 10000, 1000) == 10
    assert scale_value("delay_us", 1.5, 1000) == 1500 and scale_value("rto_s", 0.001, 1000) == 1
    with pytest.raises(ValueError, match="only rates"):
        scale_value("buffer_bytes", 1000, 10)


def test_a_10g_fabric_at_1000x_keeps_its_bdp_in_packets():
    sc = validate({"name": "x", "scale": {"factor": 1000, "real": REAL}})
    assert (sc.topology.host_rate_mbps, sc.topology.uplink_rate_mbps) == (10, 40)
    assert sc.links.delay_us == 1000 and sc.hosts.rto_min_ms == 1000 and sc.roce.dcqcn.time_scale == 1000
    assert sc.roce.timely.time_scale == sc.roce.swift.time_scale == 1000
    assert sc.scale.emulated["links"]["delay_us"] == {"real": 1, "emulated": 1000}
    # the BDP in frames of a 4-link path (8 link crossings per round trip) is the same in both
    real_bdp = 10e9 * 8 * 1e-6 / 8 / 1514
    emu_bdp = sc.topology.host_rate_mbps * 1e6 * 8 * sc.links.delay_us * 1e-6 / 8 / 1514
    assert emu_bdp == pytest.approx(real_bdp)
    assert validate(sc.to_data()) == sc                 # scenario.yaml reads back equal


def test_a_given_time_scale_is_kept_and_a_doubly_given_key_is_refused_by_name():
    sc = validate({"name": "x", "roce": {"dcqcn": {"time_scale": 50}}, "scale": {"factor": 100, "real": REAL}})
    assert sc.roce.dcqcn.time_scale == 50 and sc.roce.timely.time_scale == 100
    with pytest.raises(ScenarioError, match=r"scale\.real\.links\.delay_us.*both"):
        validate({"name": "x", "links": {"delay_us": 5}, "scale": {"factor": 10, "real": REAL}})


@pytest.mark.parametrize("scale, key", [
    ({"factor": 0.5}, "scale.factor"), ({"factor": True}, "scale.factor"), ({"factor": 10, "x": 1}, "scale.x"),
    ({"factor": 10, "real": {"queues": {"buffer_bytes": 1}}}, "scale.real.queues"),
    ({"factor": 10, "real": {"topology": {"spines": 4}}}, "scale.real.topology.spines"),
    ({"factor": 10, "real": {"links": {"delay_us": -1}}}, "scale.real.links.delay_us"),
])
def test_bad_scale_sections_are_refused_naming_the_key(scale, key):
    with pytest.raises(ScenarioError) as e:
        validate({"name": "x", "scale": scale})
    assert e.value.key == key


def test_a_tampered_record_is_refused():
    data = validate({"name": "x", "scale": {"factor": 1000, "real": REAL}}).to_data()
    data["links"]["delay_us"] = 7
    with pytest.raises(ScenarioError, match="links.delay_us"):
        apply_scale(data)


def test_switch_hop_forwarding_counts_rate_times_switches_on_the_path():
    sc = validate({"name": "x", "topology": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2},
                   "traffic": {"senders": 2}})
    fabric, fmap, *_ = check_against_fabric(sc)
    # h3 -> h1 crosses leaf2, a spine, leaf1 at 10 Mbit/s; h2 -> h1 only leaf1; they share h1's link
    assert switch_hop_forwarding_mbps(fmap, [("h3", "h1")]) == pytest.approx(30.0)
    assert switch_hop_forwarding_mbps(fmap, [("h3", "h1"), ("h2", "h1")]) == pytest.approx(5 * 3 + 5 * 1)
    assert switch_hop_forwarding_mbps(fmap, []) == 0.0


def _feature(data, datapath):
    sc = validate(data)
    ctx = _context(sc, check_against_fabric(sc), {"datapath": datapath, "qdiscs": {}}, None, True)
    return ScaledFabric(ctx), ctx


def test_a_scaled_fabric_beyond_the_userspace_budget_is_refused_with_the_factor_that_fits():
    real = {"topology": {"host_rate_mbps": 10000, "uplink_rate_mbps": 10000}}
    data = {"name": "x", "topology": {"spines": 2, "leaves": 4, "hosts_per_leaf": 4},
            "traffic": {"pattern": "permutation"}, "scale": {"factor": 100, "real": real}}
    f, ctx = _feature(data, "user")
    with pytest.raises(ScenarioError) as e:
        f.plan(1)
    assert e.value.key == "scale.factor" and "a factor of at least" in str(e.value)
    assert ctx.env["scaled"]["forwarding_estimate_mbps"] > USERSPACE_FORWARDING_MBPS
    k, _ = _feature(data, "kernel")                # no budget known for the kernel datapath: recorded only
    assert k.plan(1) == 0
    small = dict(data, scale={"factor": 10000, "real": real})
    ok, ctx2 = _feature(small, "user")
    assert ok.plan(1) == 0 and ctx2.env["scaled"]["forwarding_estimate_mbps"] <= USERSPACE_FORWARDING_MBPS


def test_real_units_divide_times_and_multiply_rates():
    s = {"flows": {"fct_median_s": 2.0, "fct_p99_s": 3.0, "fct_max_s": None},
         "throughput": {"wire_aggregate_mbps": 9.5, "aggregate_mbps": 9.0}}
    r = real_units(s, 1000)
    assert r == {"factor": 1000, "fct_median_s": 0.002, "fct_p99_s": 0.003, "wire_aggregate_mbps": 9500.0,
                 "aggregate_mbps": 9000.0}


def test_the_shipped_scaled_scenario_resolves():
    sc = load_scenario("experiments/scenarios/dctcp-scaled.yaml")
    assert sc.scale is not None and sc.links.delay_us > 0
