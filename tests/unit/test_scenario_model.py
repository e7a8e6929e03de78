"""The typed scenario: parsed once into frozen objects (experiments.model), recorded in file
syntax and read back equal, with ECN's K and PFC's XOFF parsed exactly once on the way from the
file to the plans the controller gets."""
from pathlib import Path

import pydantic
import pytest
import yaml

import common.ecn
import experiments.scenario
from common.ecn import EcnProfile
from common.errors import ScenarioError
from common.units import FRAME_BYTES
from experiments import rounds
from experiments.features.ecn.feature import Ecn
from experiments.features.pfc.feature import Pfc
from experiments.plan import check_against_fabric
from experiments.scenario import load_scenario, validate

SCENARIOS = Path(__file__).resolve().parents[2] / "experiments" / "scenarios"
BUNDLED = sorted(p for p in SCENARIOS.glob("*.yaml") if "fabrics" not in yaml.safe_load(p.read_text()))


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.name)
def test_the_recorded_scenario_reads_back_equal(path):
    """What a results folder records (scenario.yaml) is valid input that parses to the same scenario."""
    sc = load_scenario(path)
    again = validate(yaml.safe_load(yaml.safe_dump(sc.to_data(), sort_keys=False)))
    assert again == sc
    assert again.to_data() == sc.to_data()


def test_the_scenario_is_frozen_and_typed():
    sc = load_scenario(SCENARIOS / "incast.yaml")
    with pytest.raises(pydantic.ValidationError):
        sc.traffic.senders = 3
    with pytest.raises(pydantic.ValidationError):
        sc.name = "other"
    assert sc.ecn.profile == EcnProfile("step", k_bytes=20 * FRAME_BYTES)      # bytes, parsed
    assert sc.pfc.xoff_bytes == 50 * FRAME_BYTES and sc.pfc.xon_bytes == 48 * FRAME_BYTES
    assert [r.name for r in sc.rounds] == ["drop-tail", "ecn-k20", "pfc", "ecn-pfc"] and sc.multi_round
    assert sc.rounds[1].ecn.profile is sc.ecn.profile        # a round that does not say otherwise: the same object
    assert sc.topology.host_rate_mbps == 10 and type(sc.topology.host_rate_mbps) is int   # as written


def test_every_scenario_has_at_least_one_round():
    sc = validate({"name": "solo", "ecn": {"profile": {"step": {"k_packets": 10}}}})
    assert len(sc.rounds) == 1 and not sc.multi_round
    (r,) = sc.rounds
    assert r.name == "solo" and r.ecn == sc.ecn and r.hosts == sc.hosts and r.seed == sc.seed
    assert sc.to_data()["rounds"] is None


@pytest.mark.parametrize("data,key", [
    ({"name": "t", "topology": {"spines": 1.5}}, "topology.spines"),
    ({"name": "t", "topology": {"host_rate_mbps": float("nan")}}, "topology.host_rate_mbps"),
    ({"name": "t", "topology": {"kind": "fattree", "host_rate_mbps": True}}, "topology.host_rate_mbps"),
    ({"name": "t", "measurement": {"sample_hz": float("inf")}}, "measurement.sample_hz"),
    ({"name": "t", "rounds": [{"name": "a"}, {"name": "b", "collective": {"repeat": 2}}]}, "rounds[1].collective"),
    ({"name": "t", "rounds": [{"name": "a", "hosts": {"tcp_ecn": True}}]}, "rounds[0].hosts.tcp_ecn"),
    ({"name": "t", "hosts": {"tcp_ecn": 1.0}}, "hosts.tcp_ecn"),
    ({"name": "t", "roce": {"mtu_bytes": 1024.0}}, "roce.mtu_bytes"),
    ({"name": "t", "priorities": {"scheduling": {"weighted": {3: float("inf"), 0: 1}}}},
     "priorities.scheduling.weighted.3"),
    ({"name": "t", "rounds": "all"}, "rounds"),
    ({"name": "t", "traffic": {"sender_hosts": []}}, "traffic.sender_hosts"),
])
def test_strict_types_name_the_key(data, key):
    with pytest.raises(ScenarioError) as e:
        validate(data)
    assert e.value.key == key, str(e.value)


def test_k_and_xoff_are_parsed_once_from_file_to_plans(monkeypatch, tmp_path):
    """From the file to the controller's plans (validate, the fabric checks, the PFC and ECN
    features' plans), every ECN profile the file writes is parsed once, and the PFC section once."""
    profiles, pfcs = [], []
    real_profile, real_pfc = common.ecn.parse_profile, experiments.scenario.parse_pfc

    def count_profile(spec, *a, **k):
        profiles.append(spec)
        return real_profile(spec, *a, **k)

    def count_pfc(*a, **k):
        pfcs.append(a)
        return real_pfc(*a, **k)
    monkeypatch.setattr(common.ecn, "parse_profile", count_profile)
    monkeypatch.setattr(experiments.scenario, "parse_pfc", count_pfc)
    built = tmp_path / "built.o"
    built.write_bytes(b"")
    monkeypatch.setattr("controller.ecn.marker.OBJECT", built)
    monkeypatch.setattr("controller.pfc.accounting.OBJECT", built)

    sc = load_scenario(SCENARIOS / "incast.yaml")
    ctx = rounds.run_context(sc, check_against_fabric(sc), {"qdiscs": {"red": True, "clsact": True},
                                                               "shaper": {"slack_s": 100e-6}}, tmp_path, True)
    queues = 1
    for feature in (Pfc(ctx), Ecn(ctx)):
        queues += feature.plan(queues)
    # the scenario's step K once, and each round's own "off" once (the file writes three profiles)
    assert profiles == [{"step": {"k_packets": 20}}, "off", "off"]
    assert len(pfcs) == 1
    assert queues == 2 and ctx.env["ecn"]["marker"] == "bpf"
