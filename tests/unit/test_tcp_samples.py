"""The TCP senders' congestion-window samples: read from a live loopback connection's TCP_INFO,
written as tcp_samples.csv, drawn beside the queue."""
from __future__ import annotations

import csv
import json
import socket

from experiments.analysis import TCP_SAMPLE_COLUMNS, write_tcp_samples
from experiments.plot import plot_cwnd_queue
from experiments.sections import SECTIONS
from traffic.agent import tcp_sample


def test_a_live_connection_is_sampled_from_tcp_info():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    c = socket.create_connection(srv.getsockname())
    a, _ = srv.accept()
    try:
        c.sendall(b"x" * 100_000)
        a.recv(65536)
        t, cwnd, rtt_us, ssthresh, retrans, rate = tcp_sample(c, 12.5)
        assert t == 12.5 and cwnd >= 1 and rtt_us > 0 and retrans == 0
        assert rate is None or rate > 0
    finally:
        for s in (a, c, srv):
            s.close()


def test_samples_are_written_in_units_and_drawn_beside_the_queue(tmp_path):
    flows = [{"flow_id": 0, "src": "h2", "_tcp_samples": [[0.0, 10, 2500, 2**31 - 1, 0, 1_250_000],
                                                          [0.02, 14, 3100, 20, 1, None]]},
             {"flow_id": 1, "src": "h3", "_tcp_samples": []}]
    assert write_tcp_samples(tmp_path / "tcp_samples.csv", flows) == 2
    rows = list(csv.DictReader(open(tmp_path / "tcp_samples.csv")))
    assert tuple(rows[0]) == TCP_SAMPLE_COLUMNS
    assert rows[0]["rtt_ms"] == "2.500" and rows[0]["ssthresh_segments"] == "" and rows[0]["delivery_rate_mbps"] == "10.0000"
    assert rows[1]["cwnd_segments"] == "14" and rows[1]["ssthresh_segments"] == "20" and rows[1]["delivery_rate_mbps"] == ""
    import numpy as np
    summary = {"scenario": "t", "bottleneck": {"intf": "leaf1-eth1", "peer": "h1", "buffer_packets": 100,
                                              "buffer_bytes": None}, "ecn": {}}
    samples = {"leaf1-eth1": {"t_s": np.array([0.0, 0.01, 0.02]), "backlog_packets": np.array([0, 5, 9]),
                              "backlog_bytes": np.array([0, 7570, 13626])}}
    path = plot_cwnd_queue(tmp_path, summary, samples, sections=SECTIONS)
    assert path.name == "cwnd_queue.png" and path.stat().st_size > 1000
    (tmp_path / "tcp_samples.csv").write_text(",".join(TCP_SAMPLE_COLUMNS) + "\n")
    assert plot_cwnd_queue(tmp_path, summary, samples, sections=SECTIONS) is None
    json.dumps(flows)          # the records stay JSON-able
