"""The scenario's JSON Schema (python -m experiments schema): a valid draft 2020-12 schema that
accepts every bundled scenario and rejects what the scenario checker rejects for its shape (the
README's misspelt key among them); docs/scenario-keys.md is generated from it and kept equal."""
import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from common.errors import ScenarioError
from controller.faults import FAULTS
from experiments.scenario import validate
from experiments.schema_export import markdown, scenario_schema

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p for p in (REPO / "experiments" / "scenarios").glob("*.yaml")
                   if "fabrics" not in yaml.safe_load(p.read_text()))


@pytest.fixture(scope="module")
def validator():
    s = scenario_schema()
    jsonschema.Draft202012Validator.check_schema(s)
    return jsonschema.Draft202012Validator(s)


def as_json(data):
    """A scenario as an editor's JSON view of the YAML sees it (mapping keys are strings)."""
    return json.loads(json.dumps(data))


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_every_bundled_scenario_is_valid(validator, path):
    data = yaml.safe_load(path.read_text())
    assert not [e.message for e in validator.iter_errors(as_json(data))]
    validate(data)


def readme_example() -> dict:
    text = (REPO / "README.md").read_text()
    block = re.search(r"This one has a misspelt key:\n\n```yaml\n(.*?)```", text, re.S).group(1)
    return yaml.safe_load(block)


BAD = [
    ("the README's example", None, "traffic.sendres"),
    ("unknown top-level key", {"name": "t", "trafic": {}}, "trafic"),
    ("a string for a number", {"name": "t", "traffic": {"senders": "8"}}, "traffic.senders"),
    ("out of range", {"name": "t", "queues": {"buffer_packets": 0}}, "queues.buffer_packets"),
    ("not a choice", {"name": "t", "routing": {"mode": "random"}}, "routing.mode"),
    ("another kind's key", {"name": "t", "topology": {"kind": "spineleaf", "k": 4}}, "topology.k"),
    ("no name", {"traffic": {}}, "name"),
    ("a bad profile", {"name": "t", "ecn": {"profile": {"stepp": {"k_packets": 5}}}}, "ecn.profile.stepp"),
    ("both K units", {"name": "t", "ecn": {"profile": {"step": {"k_packets": 5, "k_bytes": 9000}}}},
     "ecn.profile.step.k_bytes"),
    ("a round's unknown key", {"name": "t", "rounds": [{"name": "a", "ecnn": {}}]}, "rounds[0].ecnn"),
    ("a round without a name", {"name": "t", "rounds": [{"seed": 2}]}, "rounds[0].name"),
    ("an unknown PFC key", {"name": "t", "pfc": {"xof_packets": 5}}, "pfc.xof_packets"),
    ("a watchdog action", {"name": "t", "pfc": {"watchdog": {"timeout_s": 1, "action": "panic"}}},
     "pfc.watchdog.action"),
    ("a RoCE mode", {"name": "t", "roce": {"mode": "fast"}}, "roce.mode"),
    ("a fault's kind", {"name": "t", "faults": [{"kind": "melt", "link": "leaf1->h1"}]}, "faults[0].kind"),
    ("a fault without a kind", {"name": "t", "faults": [{"link": "leaf1->h1"}]}, "faults[0].kind"),
    ("a fault that is not a mapping", {"name": "t", "rounds": [{"name": "a", "faults": [3]}]}, "rounds[0].faults[0]"),
]


@pytest.mark.parametrize("fault, message", [
    ({"kind": "melt", "link": "leaf1->h1"}, f"must be one of {', '.join(FAULTS)}; got 'melt'"),
    ({"link": "leaf1->h1"}, "is required"),
])
def test_a_faults_kind_is_named_with_what_was_given(fault, message):
    with pytest.raises(ScenarioError) as e:
        validate({"name": "t", "faults": [fault]})
    assert str(e.value).endswith(message) and "{" not in str(e.value), str(e.value)       # not the whole fault


@pytest.mark.parametrize("what, data, key", BAD, ids=[b[0] for b in BAD])
def test_what_the_checker_refuses_for_its_shape_the_schema_refuses(validator, what, data, key):
    data = readme_example() if data is None else data
    with pytest.raises(ScenarioError) as e:
        validate(data)
    assert e.value.key == key or str(e.value).startswith(f"scenario key '{key}'"), str(e.value)
    assert list(validator.iter_errors(as_json(data))), f"the JSON Schema accepts {what}: {data}"


def test_the_key_reference_is_generated_from_the_schema():
    assert (REPO / "docs" / "scenario-keys.md").read_text() == markdown() + "\n", \
        "regenerate it: .venv/bin/python -m experiments schema --markdown > docs/scenario-keys.md"


def test_every_schema_key_is_in_the_reference():
    ref = (REPO / "docs" / "scenario-keys.md").read_text()
    for section, p in scenario_schema()["properties"].items():
        for key in p.get("properties", {}):
            assert f"`{section}.{key}`" in ref, f"{section}.{key}"
