"""The TCP sender connects each flow at the common start plus its ``start_s`` (traffic.agent.Launches:
pure scheduling, then real sockets over loopback, no root); a job without ``start_s`` opens every
flow at once, as before."""
import json
import time

import pytest

from tests.unit.test_agent_stop import _tcp_port
from tests.unit.test_udp_agent import _agent, _ready_then_release
from traffic.agent import Launches


def test_launches_hand_out_flows_in_time_order():
    flows = [{"start_s": 0.5}, {}, {"start_s": 0.1}, {"start_s": 0.1}, {"start_s": 0}]
    lx = Launches(flows, 100.0)
    assert lx.pending == 5
    assert lx.due(100.0) == [1, 4]                     # no start_s, and 0: at the start, in job order
    assert lx.due(100.05) == [] and lx.pending == 3
    assert lx.due(100.1) == [2, 3]                     # ties in job order
    assert lx.due(1000.0) == [0] and lx.pending == 0 and lx.due(2000.0) == []


def test_launches_say_how_long_the_loop_may_wait():
    lx = Launches([{"start_s": 0.2}], 100.0)
    assert lx.wait_s(100.0, 0.05) == 0.05              # far off: the loop's own cap
    assert lx.wait_s(100.18, 0.05) == pytest.approx(0.019)   # a millisecond short of the launch
    assert lx.wait_s(100.1995, 0.05) == 0.0            # within a millisecond: poll, do not sleep past it
    lx.due(100.2)
    assert lx.wait_s(100.3, 0.05) == 0.05              # nothing pending
    with pytest.raises(ValueError):
        Launches([{"start_s": -1}], 0.0)


def test_all_at_start_when_no_flow_has_start_s():
    lx = Launches([{"flow_id": i} for i in range(4)], 5.0)
    assert lx.due(5.0) == [0, 1, 2, 3] and lx.wait_s(5.0, 0.05) == 0.05


def _run(tmp_path, flows, expect):
    port = _tcp_port()
    deadline = time.time() + 30
    rx = _agent({"role": "receiver", "port": port, "expect_flows": expect, "deadline_unix_s": deadline,
                 "out": str(tmp_path / "rx.json")})
    tx = _agent({"role": "sender", "deadline_unix_s": deadline, "out": str(tmp_path / "tx.json"),
                 "flows": [dict(f, dst_ip="127.0.0.1", port=port) for f in flows]})
    _ready_then_release(rx, tx)
    assert tx.wait(30) == 0, tx.stderr.read()
    assert rx.wait(30) == 0, rx.stderr.read()
    return json.loads((tmp_path / "tx.json").read_text())["flows"], json.loads((tmp_path / "rx.json").read_text())


def test_a_sender_connects_each_flow_at_its_start_s(tmp_path):
    sent, got = _run(tmp_path, [{"flow_id": 0, "bytes": 20000, "start_s": 0.4},
                                {"flow_id": 1, "bytes": 20000},
                                {"flow_id": 2, "bytes": 5000, "start_s": 0.2}], expect=3)
    assert got["complete"] and len(got["flows"]) == 3
    by_id = {f["flow_id"]: f for f in sent}
    for fid, start_s in ((0, 0.4), (1, 0.0), (2, 0.2)):
        f = by_id[fid]
        assert f["state"] == "closed" and f["bytes_sent"] == f["bytes_planned"] and f["start_s"] == start_s
        late = f["started_unix_s"] - (f["start_at_unix_s"] + start_s)
        assert 0 <= late < 0.05, (fid, late)           # measured 0.01-0.8 ms; loose for a busy machine
        assert f["connected_unix_s"] >= f["start_at_unix_s"] + start_s
    # flow 1 (no start_s) connected at the start, before the later ones
    assert by_id[1]["connected_unix_s"] < by_id[2]["started_unix_s"] < by_id[0]["started_unix_s"]


def test_a_flow_not_yet_started_at_the_deadline_is_reported_unstarted(tmp_path):
    port = _tcp_port()
    deadline = time.time() + 1.5
    rx = _agent({"role": "receiver", "port": port, "expect_flows": 2, "deadline_unix_s": deadline,
                 "out": str(tmp_path / "rx.json")})
    tx = _agent({"role": "sender", "deadline_unix_s": deadline, "out": str(tmp_path / "tx.json"),
                 "flows": [{"flow_id": 0, "bytes": 1000, "dst_ip": "127.0.0.1", "port": port},
                           {"flow_id": 1, "bytes": 1000, "dst_ip": "127.0.0.1", "port": port, "start_s": 60}]})
    _ready_then_release(rx, tx)
    assert tx.wait(10) == 0 and rx.wait(10) == 0
    a, b = json.loads((tmp_path / "tx.json").read_text())["flows"]
    assert a["state"] == "closed" and b["state"] == "scheduled" and b["started_unix_s"] is None
    assert b["error"] == "deadline passed while scheduled"
    assert not json.loads((tmp_path / "rx.json").read_text())["complete"]
