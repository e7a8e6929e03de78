"""The controller's REST API (controller.rest) and its typed messages (controller.messages),
without a switch: every route's answer and error code, over a real HTTP server on a free port,
through the runner's client."""
import json
import urllib.request

import pytest

from common.errors import SetupError
from controller.messages import EcnChange, MessageError, PfcChange, PfcStart
from controller.rest import ControlApi, ControlClient, free_port, serve


class FakePfc:
    def __init__(self):
        self.enabled, self.calls = False, []
        self.plan = {"lossless": [3], "xoff_bytes": 60560, "xon_bytes": 51476, "cap_bytes": 151400}

    def start(self, host_pids):
        self.calls.append(("start", host_pids))
        return {"ports": 8}

    def set_enabled(self, on):
        self.enabled = on
        return 8

    def set_limits(self, xoff, xon, cap):
        self.plan.update(xoff_bytes=xoff, xon_bytes=xon, cap_bytes=cap)
        return 8

    def report(self):
        return {"pauses": [], "enabled": self.enabled}


@pytest.fixture()
def served():
    pfc = FakePfc()
    ready = {"pfc": None}
    api = ControlApi(lambda: {"configured": 3}, lambda: None, lambda: ready["pfc"], has_ecn=False, has_pfc=True)
    server = serve(api, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    yield url, ControlClient(url), pfc, ready
    server.shutdown()
    server.server_close()


def raw(url, method, path, body=None):
    req = urllib.request.Request(url + path, data=None if body is None else json.dumps(body).encode(), method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_pfc_routes_and_their_errors(served):
    url, client, pfc, ready = served
    assert client.call("GET", "/status") == {"configured": 3}
    code, out = raw(url, "GET", "/fabriclab/pfc")
    assert code == 409 and "not configured yet" in out["error"]            # before the switches are up
    ready["pfc"] = pfc
    assert client.call("POST", "/pfc/start", {"host_pids": {"h1": 100}}) == {"record": {"ports": 8}}
    assert client.call("PUT", "/pfc", {"enabled": True}) == {"changed": 8} and pfc.enabled
    assert client.call("GET", "/pfc")["enabled"] is True
    client.call("PUT", "/pfc", {"xoff_bytes": 30000, "xon_bytes": 20000, "cap_bytes": 90000})
    assert client.call("GET", "/pfc")["xoff_bytes"] == 30000
    assert client.call("GET", "/pfc/report") == {"pauses": [], "enabled": True}
    assert raw(url, "PUT", "/fabriclab/pfc", {"enabled": "yes"})[0] == 400
    assert raw(url, "GET", "/fabriclab/ecn")[0] == 404                      # this run has no ECN plan
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
    assert PfcStart.from_json({"host_pids": {"h1": 7}}).host_pids == {"h1": 7}
    assert PfcChange.from_json({"enabled": False}) == PfcChange(enabled=False)
    assert PfcChange.from_json({"xoff_bytes": 3, "xon_bytes": 2, "cap_bytes": 4}).cap_bytes == 4
    for make, body, key in [(EcnChange, {"ports": {}}, "ecn.ports"), (EcnChange, [], "ecn"),
                            (PfcStart, {"host_pids": {"h1": "x"}}, "pfc.start.host_pids.h1"),
                            (PfcChange, {"xoff_bytes": 3}, "pfc"), (PfcChange, {"xoff_bytes": 2, "xon_bytes": 3,
                                                                                 "cap_bytes": 4}, "pfc"),
                            (PfcChange, {"enabled": 1}, "pfc.enabled")]:
        with pytest.raises(MessageError, match=key):
            make.from_json(body)


def test_the_preferred_port_is_taken_when_free_and_another_otherwise():
    port = free_port(0)
    assert free_port(port) == port
    server = serve(ControlApi(dict, lambda: None, lambda: None, False, False), "127.0.0.1", port)
    try:
        assert free_port(port) != port
    finally:
        server.shutdown()
        server.server_close()
