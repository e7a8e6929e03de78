"""Joining agent records into flows; choosing the bottleneck port."""
import json

from experiments.analysis import bottleneck, collect_flows
from experiments.sections import SECTIONS


def write(d, host, rec):
    (d / f"{host}.json").write_text(json.dumps(rec))


def plan_of(rows):
    return [{"flow_id": i, "src": s, "dst": d, "src_ip": ip} for i, (s, d, ip) in enumerate(rows)]


def test_collect_flows_joins_sender_and_receiver(tmp_path):
    t0 = 1000.0
    write(tmp_path, "h1.rx", {"role": "receiver", "flows": [
        {"src_ip": "10.2.0.1", "src_port": 40001, "bytes": 500, "first_byte_unix_s": t0 + 0.01,
         "last_byte_unix_s": t0 + 0.5, "eof": True, "samples": [[t0 + 0.01, 100], [t0 + 0.5, 500]]},
        {"src_ip": "10.3.0.1", "src_port": 40001, "bytes": 300, "first_byte_unix_s": t0 + 0.02,
         "last_byte_unix_s": t0 + 0.9, "eof": False, "samples": []}]})
    for host, fid in (("h7", 0), ("h13", 1)):
        write(tmp_path, f"{host}.tx", {"role": "sender", "flows": [
            {"flow_id": fid, "src_port": 40001, "bytes_planned": 500, "bytes_sent": 500, "start_at_unix_s": t0,
             "closed_unix_s": t0 + 0.6, "congestion_control": "cubic", "total_retrans": 0, "rtt_us": 900}]})
    write(tmp_path, "h19.tx", {"role": "sender", "flows": [
        {"flow_id": 2, "bytes_planned": 500, "bytes_sent": 0, "start_at_unix_s": t0,
         "error": "ConnectionRefusedError: x"}]})
    plan = plan_of([("h7", "h1", "10.2.0.1"), ("h13", "h1", "10.3.0.1"), ("h19", "h1", "10.4.0.1")])
    rows = collect_flows(tmp_path, plan, {}, sections=SECTIONS)
    assert [r["complete"] for r in rows] == [True, False, False]
    # same source port from two hosts: joined on (source IP, port), not port alone
    assert rows[0]["fct_s"] == 0.5 and rows[0]["bytes_received"] == 500 and rows[0]["src_ip"] == "10.2.0.1"
    assert rows[1]["bytes_received"] == 300
    assert rows[2]["error"].startswith("ConnectionRefused")


def test_same_source_port_toward_two_receivers(tmp_path):
    """All-to-all: h3 sends to h13 and h15 from the same port 47086; each flow keeps its own bytes."""
    t0 = 1000.0
    for rx, nbytes in (("h13", 196928), ("h15", 65536)):
        write(tmp_path, f"{rx}.rx", {"role": "receiver", "flows": [
            {"src_ip": "10.1.0.3", "src_port": 47086, "bytes": nbytes, "first_byte_unix_s": t0 + 0.1,
             "last_byte_unix_s": t0 + 1, "eof": True, "samples": [[t0 + 1, nbytes]]}]})
    write(tmp_path, "h3.tx", {"role": "sender", "flows": [
        {"flow_id": fid, "src_port": 47086, "bytes_planned": None, "bytes_sent": nbytes, "start_at_unix_s": t0,
         "closed_unix_s": t0 + 1.1} for fid, nbytes in ((57, 196928), (59, 65536))]})
    plan = [{"flow_id": 57, "src": "h3", "dst": "h13", "src_ip": "10.1.0.3"},
            {"flow_id": 59, "src": "h3", "dst": "h15", "src_ip": "10.1.0.3"}]
    rows = collect_flows(tmp_path, plan, {}, sections=SECTIONS)
    assert [(r["bytes_sent"], r["bytes_received"], r["complete"]) for r in rows] == \
        [(196928, 196928, True), (65536, 65536, True)]


def test_missing_result_is_an_error_row(tmp_path):
    write(tmp_path, "h1.rx", {"role": "receiver", "flows": []})
    rows = collect_flows(tmp_path, plan_of([("h7", "h1", "10.2.0.1")]), {"h7.tx": -9}, sections=SECTIONS)
    assert rows[0]["complete"] is False and "exit -9" in rows[0]["error"]


def test_bytes_at_interpolates_samples():
    from experiments.analysis import bytes_at
    s = [(1.0, 100), (2.0, 300)]
    assert bytes_at(s, 0.5) == 0.0 and bytes_at(s, 1.5) == 200.0 and bytes_at(s, 9) == 300.0 and bytes_at([], 1) == 0.0


def test_bottleneck_is_the_sustained_queue():
    ports = [{"intf": "burst", "mean_backlog_bytes": 5000, "peak_backlog_bytes": 150000, "drops": 9},
             {"intf": "b", "mean_backlog_bytes": 120000, "peak_backlog_bytes": 150000, "drops": 0},
             {"intf": "c", "mean_backlog_bytes": 120000, "peak_backlog_bytes": 150000, "drops": 2}]
    assert bottleneck(ports)["intf"] == "c"
    assert bottleneck([]) is None
