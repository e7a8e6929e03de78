"""The controller's REST API (controller.rest) and its typed messages (controller.messages),
without a switch: every route's answer and error code, over a real HTTP server on a free port,
through the runner's client; who may change what (the run's token), and the record of every
accepted change and refused request."""
import json
import os
import urllib.request

import pytest

from common.errors import SetupError
from common.pfc import parse_pfc
from controller.messages import EcnChange, EcnPlan, MessageError, PfcChange, PfcStart
from experiments.features.pfc.plan import pfc_plan
from topologies.spineleaf import SpineLeaf
from controller.rest import RUNNER_AGENT, ControlApi, ControlClient, free_port, new_token, read_token, serve


class FakePfc:
    def __init__(self):
        self.enabled, self.calls = False, []
        self.plan = PLAN

    def start(self, host_pids):
        self.calls.append(("start", host_pids))
        return {"ports": 8}

    def set_enabled(self, on):
        self.enabled = on
        return 8

    def set_limits(self, xoff, xon, cap):
        self.plan = self.plan.model_copy(update={"xoff_bytes": xoff, "xon_bytes": xon, "cap_bytes": cap})
        return 8

    def report(self):
        return {"pauses": [], "enabled": self.enabled}


TOKEN = "the-runs-token"
_FABRIC = SpineLeaf(spines=1, leaves=2, hosts_per_leaf=1, host_rate_mbps=10, uplink_rate_mbps=10).build().to_map()
#: A real PFC plan, as the runner sends it.
PLAN = pfc_plan(_FABRIC, parse_pfc(None, {"enabled": True, "xoff_packets": 40, "xon_packets": 34}, 151400), 151400,
                3028, host_fifo_bytes=1514000, slack_s=100e-6)


@pytest.fixture()
def served():
    pfc = FakePfc()
    ready = {"pfc": None}
    def start_pfc(msg):
        ready["pfc"] = pfc
        return pfc.start(msg.host_pids)
    api = ControlApi(lambda: {"configured": 3}, lambda: None, lambda: ready["pfc"], start_pfc=start_pfc, token=TOKEN)
    server = serve(api, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    yield url, ControlClient(url, token=TOKEN), pfc, ready
    server.shutdown()
    server.server_close()


def raw(url, method, path, body=None, headers=None, data=None):
    """One request as curl would send it (no token unless ``headers`` has one): (status, answer)."""
    data = data if data is not None else None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def owner(token=TOKEN):
    return {"Authorization": f"Bearer {token}", "User-Agent": "curl/8.5.0"}


def test_pfc_routes_and_their_errors(served):
    url, client, pfc, ready = served
    assert client.call("GET", "/status") == {"configured": 3}
    code, out = raw(url, "GET", "/fabriclab/pfc")
    assert code == 404 and "PFC is not started" in out["error"]            # before its start request
    code, out = raw(url, "POST", "/fabriclab/pfc/start", {"host_pids": {"h1": 100}}, owner())
    assert code == 400 and "pfc.start.plan" in out["error"]                 # the plan comes in the request
    assert client.call("POST", "/pfc/start", {"host_pids": {"h1": 100}, "plan": PLAN.to_json()}) == \
        {"record": {"ports": 8}}
    assert pfc.calls == [("start", {"h1": 100})]
    assert client.call("PUT", "/pfc", {"enabled": True}) == {"changed": 8} and pfc.enabled
    assert client.call("GET", "/pfc")["enabled"] is True
    client.call("PUT", "/pfc", {"xoff_bytes": 30000, "xon_bytes": 20000, "cap_bytes": 90000})
    assert client.call("GET", "/pfc")["xoff_bytes"] == 30000
    assert client.call("GET", "/pfc/report") == {"pauses": [], "enabled": True}
    assert raw(url, "PUT", "/fabriclab/pfc", {"enabled": "yes"}, owner())[0] == 400
    assert raw(url, "GET", "/fabriclab/ecn")[0] == 404                      # this run has no ECN plan
    code, out = raw(url, "POST", "/fabriclab/ecn/start", {"marker": "bpf", "ports": {}}, owner())
    assert code == 404 and "no ECN" in out["error"]                         # nor takes one
    code, out = raw(url, "GET", "/fabriclab/nothing")
    assert code == 404 and "/fabriclab/pfc/report" in out["error"]
    assert raw(url, "GET", "/other")[0] == 404


def test_the_client_says_what_failed(served):
    url, client, pfc, ready = served
    ready["pfc"] = pfc
    with pytest.raises(SetupError, match="PFC: the controller could not apply it: pfc: unknown key 'bogus'"):
        client.call("PUT", "/pfc", {"bogus": 1}, what="PFC")


def test_the_client_waits_for_a_server_that_is_not_up_and_gives_up_on_a_dead_one():
    url = f"http://127.0.0.1:{free_port(0)}"
    with pytest.raises(SetupError, match="no answer from the controller within 0.3 s"):
        ControlClient(url).call("GET", "/status", timeout_s=0.3)
    with pytest.raises(SetupError, match="the controller died"):
        ControlClient(url, is_alive=lambda: False).call("GET", "/status", timeout_s=5)


def test_messages_are_typed_and_name_the_bad_key():
    assert EcnChange.from_json({"ports": {"leaf1-eth1": "off"}}).ports == {"leaf1-eth1": "off"}
    assert PfcStart.from_json({"host_pids": {"h1": 7}, "plan": PLAN.to_json()}).host_pids == {"h1": 7}
    assert PfcStart.from_json({"host_pids": {}, "plan": PLAN.to_json()}).plan == PLAN      # the plan round-trips
    assert PfcChange.from_json({"enabled": False}) == PfcChange(enabled=False)
    assert PfcChange.from_json({"xoff_bytes": 3, "xon_bytes": 2, "cap_bytes": 4}).cap_bytes == 4
    for make, body, key in [(EcnChange, {"ports": {}}, "ecn.ports"), (EcnChange, [], "ecn"),
                            (PfcStart, {"host_pids": {"h1": "x"}, "plan": PLAN.to_json()}, "pfc.start.host_pids.h1"),
                            (PfcStart, {"host_pids": {}, "plan": {**PLAN.to_json(), "xoff_bytes": -1}},
                             "pfc.start.plan.xoff_bytes"),
                            (PfcStart, {"host_pids": {}, "plan": {**PLAN.to_json(), "bogus": 1}}, "pfc.start.plan.bogus"),
                            (EcnPlan, {"marker": "bpf", "ports": {"s1-eth1": {"rate_bps": 1e7}}},
                             "ecn.ports.s1-eth1.buffer_bytes"),
                            (EcnPlan, {"marker": "wred", "ports": {}}, "ecn.marker"),
                            (PfcChange, {"xoff_bytes": 3}, "pfc"), (PfcChange, {"xoff_bytes": 2, "xon_bytes": 3,
                                                                                 "cap_bytes": 4}, "pfc"),
                            (PfcChange, {"enabled": 1}, "pfc.enabled")]:
        with pytest.raises(MessageError, match=key):
            make.from_json(body)


def test_the_preferred_port_is_taken_when_free_and_another_otherwise():
    port = free_port(0)
    assert free_port(port) == port
    server = serve(ControlApi(dict, lambda: None, lambda: None), "127.0.0.1", port)
    try:
        assert free_port(port) != port
    finally:
        server.shutdown()
        server.server_close()


def test_a_change_without_the_runs_token_is_refused_and_changes_nothing(served):
    url, client, pfc, ready = served
    ready["pfc"] = pfc
    before = dict(pfc.plan), pfc.enabled
    for method, path, body in [("PUT", "/fabriclab/pfc", {"enabled": True}),
                               ("PUT", "/fabriclab/pfc", {"xoff_bytes": 3, "xon_bytes": 2, "cap_bytes": 9}),
                               ("POST", "/fabriclab/pfc/start", {"host_pids": {"h1": 1}}),
                               ("POST", "/fabriclab/faults", {"kind": "drop", "switch": "c1", "hidden": True}),
                               ("DELETE", "/fabriclab/faults", None), ("PATCH", "/fabriclab/pfc", {}),
                               ("POST", "/fabriclab/no-such-path", {})]:
        code, out = raw(url, method, path, body)
        assert code == 401 and "needs the run's token" in out["error"], (method, path, out)
        for bad in ("Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer", f"Bearer {TOKEN[:-1]}"):
            code, out = raw(url, method, path, body, {"Authorization": bad})
            assert code == 403 and "wrong token" in out["error"], (method, path, bad, out)
    # a body that is not even JSON is refused for its missing token, not parsed
    assert raw(url, "PUT", "/fabriclab/pfc", data=b"{not json")[0] == 401
    assert (dict(pfc.plan), pfc.enabled) == before and pfc.calls == []
    changes = client.call("GET", "/changes")
    assert changes["changes"] == [] and changes["refused_total"] == 7 * 6 + 1
    assert {r["code"] for r in changes["refused"]} == {401, 403}
    # the owner's token (any case of the scheme, as RFC 7235 allows) changes it
    code, out = raw(url, "PUT", "/fabriclab/pfc", {"enabled": True}, {"Authorization": f"bearer {TOKEN}"})
    assert (code, out, pfc.enabled) == (200, {"changed": 8}, True)


def test_reads_stay_open_but_the_change_log_is_the_owners(served):
    url, client, pfc, ready = served
    ready["pfc"] = pfc
    assert raw(url, "GET", "/fabriclab/status") == (200, {"configured": 3})
    assert raw(url, "GET", "/fabriclab/pfc")[0] == 200 and raw(url, "GET", "/fabriclab/pfc/report")[0] == 200
    code, out = raw(url, "GET", "/fabriclab/changes")          # it would show hidden faults
    assert code == 401 and "reading it needs the run's token" in out["error"]
    assert raw(url, "GET", "/fabriclab/changes", headers=owner("nope"))[0] == 403
    assert raw(url, "GET", "/fabriclab/changes", headers=owner())[0] == 200


def test_every_accepted_change_is_recorded_with_its_time_and_client():
    clock = iter([100.0, 101.5, 102.25, 103.0]).__next__
    api = ControlApi(dict, lambda: None, lambda: FakePfc(), token=TOKEN, clock=clock)
    auth = f"Bearer {TOKEN}"
    assert api.handle("PUT", "/fabriclab/pfc", {"enabled": True}, auth, RUNNER_AGENT)[0] == 200
    assert api.handle("PUT", "/fabriclab/pfc", {"enabled": "no"}, auth, "curl/8.5.0")[0] == 400   # not accepted
    assert api.handle("GET", "/fabriclab/pfc", None)[0] == 200                                     # a read
    assert api.handle("PUT", "/fabriclab/pfc", {"enabled": False}, auth, "curl/8.5.0")[0] == 200
    assert api.handle("DELETE", "/fabriclab/pfc", None, None, "curl/8.5.0")[0] == 401
    assert api.changes == [
        {"seq": 1, "at_unix_s": 100.0, "method": "PUT", "path": "/fabriclab/pfc", "body": {"enabled": True},
         "answer": {"changed": 8}, "client": RUNNER_AGENT, "hidden": False},
        {"seq": 2, "at_unix_s": 101.5, "method": "PUT", "path": "/fabriclab/pfc", "body": {"enabled": False},
         "answer": {"changed": 8}, "client": "curl/8.5.0", "hidden": False}]
    assert api.refused == [{"at_unix_s": 102.25, "method": "DELETE", "path": "/fabriclab/pfc", "code": 401,
                            "client": "curl/8.5.0"}] and api.refused_total == 1


def test_a_controller_without_a_token_takes_no_changes_at_all():
    pfc = FakePfc()
    api = ControlApi(dict, lambda: None, lambda: pfc)
    code, out = api.handle("PUT", "/fabriclab/pfc", {"enabled": True}, "Bearer anything")
    assert code == 403 and "started without a token" in out["error"] and not pfc.enabled
    assert api.handle("GET", "/fabriclab/pfc", None)[0] == 200


def test_the_token_file_is_read_and_a_bad_one_named(tmp_path):
    t = new_token()
    assert len(t) >= 43 and t != new_token()
    (tmp_path / "tok").write_text(t + "\n")
    assert read_token(tmp_path / "tok") == t
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(SetupError, match="token file .*empty is empty"):
        read_token(tmp_path / "empty")
    with pytest.raises(SetupError, match="token file .*missing: No such file"):
        read_token(tmp_path / "missing")


def test_the_run_state_writes_the_token_for_its_owner_only_and_removes_it(tmp_path, monkeypatch):
    from experiments import state
    monkeypatch.setenv("FABRICLAB_STATE_DIR", str(tmp_path / "st"))
    monkeypatch.setattr(state, "cleanup_record", lambda rec: {})
    old = os.umask(0)
    try:
        with state.RunState("r") as rs:
            path = rs.write_api_token("abc")
            assert path == tmp_path / "st" / state.TOKEN_FILE and read_token(path) == "abc"
            assert os.stat(path).st_mode & 0o777 == 0o600 and os.stat(path.parent).st_mode & 0o777 == 0o700
    finally:
        os.umask(old)
    assert not path.exists()
