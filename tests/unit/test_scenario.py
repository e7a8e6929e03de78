"""Strict scenario schema: unknown keys and bad values name the key."""
from pathlib import Path

import pytest
import yaml

from common.errors import ScenarioError
from experiments.scenario import load_scenario, validate

DEFAULT = Path(__file__).resolve().parents[2] / "experiments" / "scenarios" / "incast.yaml"


def base():
    return yaml.safe_load(DEFAULT.read_text())


def test_default_scenario_resolves():
    sc = load_scenario(DEFAULT)
    assert sc.name == "incast"
    assert sc.topology.spines == 2 and sc.topology.leaves == 4
    assert sc.queues.buffer_packets == 100 and sc.queues.buffer_bytes is None
    assert sc.traffic.senders == 8
    assert sc.measurement.sample_hz >= 200


def test_defaults_fill_in():
    sc = validate({"name": "x"})
    assert sc.topology.hosts_per_leaf == 6 and sc.queues.buffer_packets == 100


@pytest.mark.parametrize("mutate,key", [
    (lambda d: d.update(colour="red"), "colour"),
    (lambda d: d["traffic"].update(sendrs=3), "traffic.sendrs"),
    (lambda d: d["topology"].update(spines="two"), "topology.spines"),
    (lambda d: d["topology"].update(spines=0), "topology.spines"),
    (lambda d: d["topology"].update(host_rate_mbps=5000), "topology.host_rate_mbps"),
    (lambda d: d["topology"].update(kind="torus"), "topology.kind"),
    (lambda d: d["queues"].update(buffer_bytes=150000), "queues.buffer_bytes"),  # both buffer keys given
    (lambda d: d["traffic"].update(receiver="h99"), "traffic.receiver"),
    (lambda d: d["traffic"].update(senders=24), "traffic.senders"),
    (lambda d: d["traffic"].update(sender_hosts=["h2", "h1"]), "traffic.sender_hosts[1]"),
    (lambda d: d["traffic"].update(response_bytes=True), "traffic.response_bytes"),
    (lambda d: d["hosts"].update(tcp_ecn=5), "hosts.tcp_ecn"),
    (lambda d: d["hosts"].update(rto_min_ms=0), "hosts.rto_min_ms"),
    (lambda d: d["hosts"].update(rto_min_ms=2.5), "hosts.rto_min_ms"),
    (lambda d: d["hosts"].update(delayed_ack="no"), "hosts.delayed_ack"),
    (lambda d: d["hosts"].update(slow_start_after_idle=0), "hosts.slow_start_after_idle"),
    (lambda d: d.update(rounds=[{"name": "a", "hosts": {"rto_min_ms": -5}}]), "rounds[0].hosts.rto_min_ms"),
    (lambda d: d.update(name="bad name!"), "name"),
    (lambda d: d.pop("name"), "name"),
    (lambda d: d.update(topology=[1, 2]), "topology"),
])
def test_bad_input_names_the_key(mutate, key):
    d = base()
    mutate(d)
    with pytest.raises(ScenarioError) as e:
        validate(d)
    assert e.value.key == key
    assert f"'{key}'" in str(e.value)


def test_sender_hosts_sets_count():
    d = base()
    d["traffic"]["sender_hosts"] = ["h7", "h13"]
    assert validate(d).traffic.senders == 2


def test_unreadable_and_non_yaml_files(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "missing.yaml")
    p = tmp_path / "bad.yaml"
    p.write_text("name: [unclosed")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario(p)


def test_fattree_scenario():
    sc = validate({"name": "ft", "topology": {"kind": "fattree", "k": 6, "agg_core_rate_mbps": 20},
                   "traffic": {"receiver": "h54", "senders": 53}})
    assert sc.topology.model_dump() == {"kind": "fattree", "k": 6, "host_rate_mbps": 10, "edge_agg_rate_mbps": 10,
                              "agg_core_rate_mbps": 20}


@pytest.mark.parametrize("topology,key", [
    ({"kind": "fattree", "spines": 2}, "topology.spines"),          # a Spine-Leaf key on a Fat-Tree
    ({"kind": "spineleaf", "k": 4}, "topology.k"),                  # and the other way round
    ({"kind": "fattree", "k": 5}, "topology.k"),
    ({"kind": "fattree", "k": 18}, "topology.k"),
])
def test_keys_per_fabric_kind(topology, key):
    with pytest.raises(ScenarioError) as e:
        validate({"name": "x", "topology": topology})
    assert e.value.key == key


def test_fattree_receiver_must_exist():
    with pytest.raises(ScenarioError) as e:
        validate({"name": "x", "topology": {"kind": "fattree", "k": 4}, "traffic": {"receiver": "h17"}})
    assert e.value.key == "traffic.receiver"


def test_traffic_patterns_checked_against_the_fabric():
    from experiments.scenario import MAX_FLOWS
    ok = validate({"name": "p", "traffic": {"pattern": "permutation", "flows_per_pair": 8, "duration_s": 5}})
    assert ok.traffic.flows_per_pair == 8
    with pytest.raises(ScenarioError) as e:
        validate({"name": "p", "topology": {"leaves": 1}, "traffic": {"pattern": "permutation"}})
    assert e.value.key == "traffic.pattern"
    with pytest.raises(ScenarioError) as e:
        validate({"name": "p", "topology": {"kind": "fattree", "k": 8}, "traffic": {"pattern": "all-to-all",
                                                                                   "flows_per_pair": 2}})
    assert e.value.key == "traffic.flows_per_pair" and str(MAX_FLOWS) in str(e.value)
    with pytest.raises(ScenarioError) as e:
        validate({"name": "p", "traffic": {"pattern": "incast", "duration_s": 3}})
    assert e.value.key == "traffic.duration_s"


def _pfc_scenario(**over):
    sc = {"name": "p", "pfc": {"xoff_packets": 24}, "traffic": {"transport": "udp", "dscp": 26}}
    sc.update(over)
    return sc


def test_pfc_sections_resolve_and_rounds_turn_pfc_on_and_off():
    sc = validate(_pfc_scenario(rounds=[{"name": "off", "pfc": {"enabled": False}}, {"name": "on"}]))
    assert sc.pfc.enabled and sc.pfc.xoff_bytes == 24 * 1514 and sc.pfc.dscp_map[26] == 3
    assert [r.pfc_enabled for r in sc.rounds] == [False, True]
    assert sc.traffic.transport == "udp" and sc.traffic.dscp == 26
    plain = validate({"name": "x"})
    assert plain.pfc is None       # one FIFO per port, as before
    only_round = validate({"name": "y", "rounds": [{"name": "a"}, {"name": "b", "pfc": {"enabled": True}}]})
    assert only_round.pfc.enabled is False and only_round.rounds[1].pfc_enabled


@pytest.mark.parametrize("over,key", [
    ({"ecn": {"marker": "red"}}, "ecn.marker"),              # kernel RED cannot sit under priority queues
    ({"rounds": [{"name": "a", "pfc": {"enabled": "maybe"}}]}, "rounds[0].pfc.enabled"),
    ({"rounds": [{"name": "a", "pfc": {"xoff_bytes": 3}}]}, "rounds[0].pfc"),
    ({"traffic": {"transport": "sctp"}}, "traffic.transport"),
    ({"traffic": {"dscp": 64}}, "traffic.dscp"),
])
def test_pfc_scenario_errors_name_the_key(over, key):
    with pytest.raises(ScenarioError) as e:
        validate(_pfc_scenario(**over))
    assert e.value.key == key


def test_a_misspelt_top_level_key_lists_every_section_it_could_be():
    """`ecm:` for `ecn:` must not be told that ecn is unknown: the sections with parsers of their
    own (ecn, priorities, pfc, rounds) are among the known keys, and a round's keys are sorted."""
    with pytest.raises(ScenarioError) as e:
        validate({"name": "t", "ecm": {"marker": "auto"}})
    known = str(e.value).split("known keys here: ")[1].rstrip(")").split(", ")
    assert e.value.key == "ecm" and {"ecn", "priorities", "pfc", "rounds", "traffic"} <= set(known)
    assert known == sorted(known)
    with pytest.raises(ScenarioError) as e:
        validate({"name": "t", "rounds": [{"name": "a", "ecnn": {}}]})
    known = str(e.value).split("known keys here: ")[1].rstrip(")").split(", ")
    assert known == sorted(known) and "ecn" in known
