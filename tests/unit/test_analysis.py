"""Joining agent records into flows; choosing the bottleneck port."""
import json

from experiments.analysis import bottleneck, collect_flows


def write(d, host, rec):
    (d / f"{host}.json").write_text(json.dumps(rec))


def test_collect_flows_joins_sender_and_receiver(tmp_path):
    t0 = 1000.0
    write(tmp_path, "h1", {"role": "receiver", "flows": [
        {"src_ip": "10.2.0.1", "src_port": 40001, "bytes": 500, "first_byte_unix_s": t0 + 0.01,
         "last_byte_unix_s": t0 + 0.5, "eof": True, "samples": [[t0 + 0.01, 100], [t0 + 0.5, 500]]},
        {"src_ip": "10.3.0.1", "src_port": 40002, "bytes": 300, "first_byte_unix_s": t0 + 0.02,
         "last_byte_unix_s": t0 + 0.9, "eof": False, "samples": []}]})
    for host, port, sent in (("h7", 40001, 500), ("h13", 40002, 500)):
        write(tmp_path, host, {"role": "sender", "flow_id": port - 40001, "src_port": port, "bytes_planned": 500,
                               "bytes_sent": sent, "start_at_unix_s": t0, "closed_unix_s": t0 + 0.6,
                               "congestion_control": "cubic", "total_retrans": 0, "rtt_us": 900})
    write(tmp_path, "h19", {"role": "sender", "flow_id": 2, "error": "ConnectionRefusedError: x"})
    rows = collect_flows(tmp_path, "h1", ["h7", "h13", "h19"], {})
    assert [r["complete"] for r in rows] == [True, False, False]
    assert rows[0]["fct_s"] == 0.5 and rows[0]["bytes_received"] == 500 and rows[0]["src_ip"] == "10.2.0.1"
    assert rows[1]["bytes_received"] == 300
    assert rows[2]["error"].startswith("ConnectionRefused")


def test_missing_result_is_an_error_row(tmp_path):
    write(tmp_path, "h1", {"role": "receiver", "flows": []})
    rows = collect_flows(tmp_path, "h1", ["h7"], {"h7": -9})
    assert rows[0]["complete"] is False and "exit -9" in rows[0]["error"]


def test_bottleneck_is_the_sustained_queue():
    ports = [{"intf": "burst", "mean_backlog_bytes": 5000, "peak_backlog_bytes": 150000, "drops": 9},
             {"intf": "b", "mean_backlog_bytes": 120000, "peak_backlog_bytes": 150000, "drops": 0},
             {"intf": "c", "mean_backlog_bytes": 120000, "peak_backlog_bytes": 150000, "drops": 2}]
    assert bottleneck(ports)["intf"] == "c"
    assert bottleneck([]) is None
