"""The link-delay feature's pure parts: the configured round trip, netem's limit, the keys, and
what it refuses before anything starts (the live delay runs in the stock-kernel lane)."""
from __future__ import annotations

import pytest

from common.errors import CapabilityError, ScenarioError
from controller.dataplane.tcqdisc import delay_line_limit_packets
from experiments.features.delay import LinkDelay, configured_rtt_s, path_links
from experiments.plan import check_against_fabric
from experiments.rounds import run_context as _context
from experiments.scenario import validate
from topologies.spineleaf import SpineLeaf


def test_a_path_counts_its_links():
    fmap = SpineLeaf(spines=2, leaves=2, hosts_per_leaf=2).build().to_map()
    assert path_links(fmap, "h1", "h2") == 2                 # one leaf
    assert path_links(fmap, "h1", "h3") == 4                 # leaf, spine, leaf
    assert configured_rtt_s(fmap, "h3", "h1", 5000) == pytest.approx(0.040)


def test_the_delay_line_holds_what_the_link_has_in_flight():
    # 100 Mbit/s x 10 ms of 84-byte minimum frames is 1488; half again as margin
    assert delay_line_limit_packets(100, 10_000) == int(1.5 * 100e6 * 0.01 / (84 * 8)) + 1
    assert delay_line_limit_packets(10, 100) == 1000


def _feature(data, env):
    sc = validate(data)
    ctx = _context(sc, check_against_fabric(sc), env, None, True)
    return LinkDelay(ctx), ctx


STOCK = {"qdiscs": {"netem": True}, "datapath": "kernel"}


@pytest.mark.parametrize("env, match", [
    ({"qdiscs": {"netem": False}, "datapath": "kernel"}, "links.delay_us: this kernel has no netem"),
    ({"qdiscs": {"netem": True}, "datapath": "user"}, "links.delay_us: Open vSwitch's userspace datapath"),
])
def test_a_kernel_that_cannot_delay_is_refused_naming_the_key(env, match):
    f, _ = _feature({"name": "x", "links": {"delay_us": 100}}, env)
    with pytest.raises(CapabilityError, match=match):
        f.plan(1)


def test_delay_with_priority_queues_is_refused_naming_the_key():
    f, _ = _feature({"name": "x", "links": {"delay_us": 100}, "pfc": {"xoff_packets": 20}}, STOCK)
    with pytest.raises(ScenarioError) as e:
        f.plan(2)
    assert e.value.key == "links.delay_us"


def test_no_delay_plans_nothing_and_records_zero():
    f, ctx = _feature({"name": "x"}, {"qdiscs": {}, "datapath": "user"})
    assert f.plan(1) == 0 and ctx.env["links"] == {"delay_us": 0, "jitter_us": 0}
    assert f.headline() is None


def test_the_keys_are_checked():
    assert validate({"name": "x", "links": {"delay_us": 250, "jitter_us": 50}}).links.jitter_us == 50
    for bad, key in (({"delay_us": -1}, "links.delay_us"), ({"delay_us": 10, "jitter_us": 11}, "links.jitter_us"),
                     ({"delay_ms": 1}, "links.delay_ms"), ({"delay_us": 1.5}, "links.delay_us")):
        with pytest.raises(ScenarioError) as e:
            validate({"name": "x", "links": bad})
        assert e.value.key == key
