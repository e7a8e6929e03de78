"""The mixed-parallel accounting (experiments.workloads.parallel.run), pure: each plan flow's frames on the
links of its traced path and its acknowledgements on the reverse links, the port counters read
as directed links, NVLink rows from the ranks' own counts."""
import pytest

from experiments.workloads.parallel import run as PR
from experiments.slowdown import HEADER_BYTES


def _res():
    # ranks 0, 1 on server h1; ranks 2, 3 on h2; one pipeline flow 0 -> 2 over leaf1, one data flow 1 -> 0 on NVLink
    return {"iterations": 2, "server_of_rank": ["h1", "h1", "h2", "h2"], "nvlink_rate_bps": 1e9,
            "flows": [["pipeline", 0, 2, 14480, 2, 10], ["data", 1, 0, 4000, 1, 3], ["tensor", 0, 1, 800, 4, 4]],
            "paths": [[0, 2, [["h1", "leaf1"], ["leaf1", "h2"]], [["h2", "leaf1"], ["leaf1", "h1"]]]]}


def test_frames_on_the_path_and_acks_on_the_reverse_path():
    got = PR.predicted_link_bytes(_res())
    data = 2 * (14480 + 10 * HEADER_BYTES)
    acks = 10 * HEADER_BYTES          # one per two segments, 20 segments over the round
    assert got == {("h1", "leaf1"): {"pipeline": data}, ("leaf1", "h2"): {"pipeline": data},
                   ("leaf1", "h1"): {"ack": acks}, ("h2", "leaf1"): {"ack": acks}}
    res = _res()     # acknowledgements hashed onto another spine than the data
    res["paths"] = [[0, 2, [["h1", "l1"], ["l1", "s1"], ["s1", "l2"], ["l2", "h2"]],
                     [["h2", "l2"], ["l2", "s2"], ["s2", "l1"], ["l1", "h1"]]]]
    got = PR.predicted_link_bytes(res)
    assert got[("l1", "s1")] == {"pipeline": data} and got[("l2", "s2")] == {"ack": acks}
    assert ("s1", "l1") not in got and ("l2", "s1") not in got


def _port(switch, peer, rx, tx, rate=20.0):
    return {"switch": switch, "port": 1, "intf": f"{switch}-{peer}", "peer": peer, "rx_packets": 0, "rx_bytes": rx,
            "rx_errors": 0, "tx_packets": 0, "tx_bytes": tx, "tx_dropped": 0, "carrier_changes": 0,
            "rate_mbps": rate, "nominal_mbps": rate, "state": "up"}


def test_port_counters_as_directed_links():
    rows = [_port("leaf1", "h1", 100, 200), _port("leaf1", "spine1", 300, 400), _port("spine1", "leaf1", 400, 300)]
    got = PR.measured_link_bytes(rows)
    assert got == {("leaf1", "h1"): (200, 20.0), ("h1", "leaf1"): (100, 20.0), ("leaf1", "spine1"): (400, 20.0),
                   ("spine1", "leaf1"): (300, 20.0)}


def test_link_table_and_nvlink_rows():
    res = _res()
    zero = [_port("leaf1", "h1", 0, 0), _port("leaf1", "h2", 0, 0)]
    data = 2 * (14480 + 10 * HEADER_BYTES)
    after = [_port("leaf1", "h1", data, 10 * HEADER_BYTES), _port("leaf1", "h2", 10 * HEADER_BYTES, data)]
    sent = {("data", 1, 0): 8000, ("tensor", 0, 1): 1600, ("pipeline", 0, 2): 28960}
    rows = PR.link_table(res, {"before": zero, "after": after}, 1.0, sent)
    fab = {r["link"]: r for r in rows if r["src"] != r["dst"]}
    assert fab["h1->leaf1"]["measured_over_predicted"] == 1.0 and fab["leaf1->h2"]["pipeline_bytes"] == data
    assert fab["h1->leaf1"]["utilisation"] == pytest.approx(8 * data / 20e6)
    (nv,) = [r for r in rows if r["src"] == r["dst"]]
    assert nv["link"] == "h1:nvlink" and (nv["data_bytes"], nv["tensor_bytes"]) == (8000, 1600)
    assert nv["measured_bytes"] == nv["predicted_bytes"] == 9600 and nv["rate_mbps"] == 2000
    assert PR.link_table(res, None, 1.0, sent) == []


def test_accounted_bytes_use_the_endpoints_segments_and_retransmissions():
    res = _res()
    tcp = {(0, 2): {"sender": {"segs_out": 25, "data_segs_out": 22, "bytes_retrans": 1448, "total_retrans": 1},
                    "receiver": {"segs_out": 12, "data_segs_out": 0, "bytes_retrans": 0, "total_retrans": 0}}}
    got = PR.accounted_link_bytes(res, tcp)
    there = 2 * 14480 + PR.HELLO_BYTES + 1448 + 25 * HEADER_BYTES
    assert got == {("h1", "leaf1"): there, ("leaf1", "h2"): there,
                   ("h2", "leaf1"): 12 * HEADER_BYTES, ("leaf1", "h1"): 12 * HEADER_BYTES}
    assert PR.accounted_link_bytes(res, {(0, 2): {"sender": tcp[(0, 2)]["sender"]}}) == {}


def test_tcp_counters_paired_by_connection():
    recs = [{"rank": 0, "tcp": [{"dst_rank": 2, "segs_out": 5}]}, {"rank": 2, "tcp": [{"src_rank": 0, "segs_out": 3}]}]
    assert PR.tcp_by_pair(recs) == {(0, 2): {"sender": {"dst_rank": 2, "segs_out": 5},
                                             "receiver": {"src_rank": 0, "segs_out": 3}}}
