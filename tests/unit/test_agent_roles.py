"""The agent roles' registry (traffic.agent.ROLES): every role resolves to its function, a new
role is one entry, an unknown role is a recorded error, not a crash."""
from __future__ import annotations

import json

from traffic import agent
from traffic.agent import ROLES, Role


def test_every_registered_role_loads_its_function():
    for name, role in ROLES.items():
        assert role.name == name and callable(role.load()), name
    # what the runner's workloads start, each a registered role
    assert {"receiver", "sender", "udp-receiver", "udp-sender", "blocks-server", "blocks-client", "roce",
            "collective", "training", "parallel"} <= set(ROLES)


def test_a_new_role_is_one_entry(tmp_path, monkeypatch):
    out = tmp_path / "echo.json"
    monkeypatch.setitem(ROLES, "echo", Role("echo", lambda job: {"role": "echo", "said": job["say"]}))
    assert agent.main([json.dumps({"role": "echo", "say": "hi", "out": str(out)})]) == 0
    assert json.loads(out.read_text()) == {"role": "echo", "said": "hi"}


def test_a_handshake_role_gets_the_ready_callable(tmp_path, monkeypatch):
    out = tmp_path / "hs.json"
    monkeypatch.setattr(agent, "_ready_then_start_time", lambda: 123.0)
    monkeypatch.setitem(ROLES, "hs", Role("hs", lambda job, ready: {"start": ready()}, handshake=True))
    assert agent.main([json.dumps({"role": "hs", "out": str(out)})]) == 0
    assert json.loads(out.read_text()) == {"start": 123.0}


def test_an_unknown_role_is_recorded_with_the_known_ones(tmp_path):
    out = tmp_path / "x.json"
    assert agent.main([json.dumps({"role": "nope", "out": str(out)})]) == 1
    rec = json.loads(out.read_text())
    assert rec["error_type"] == "ValueError" and "unknown role 'nope'" in rec["error"] and "receiver" in rec["error"]
