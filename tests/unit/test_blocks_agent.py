"""The incast-blocks agent roles (traffic.blocks, run as traffic.agent subprocesses) over
loopback: three servers on their own ports and one client. Every connection is set up before
the start; no block starts before the one before it ended (the barrier); every byte asked for
arrives; the records carry the per-block TCP deltas. Real sockets, no root, a few seconds."""
import json
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from traffic.blocks import (LOSS_PROBES_METHOD, TCP_INFO_RTO_BYTES, TIMEOUTS_FROM_KERNEL, counter_delta,
                            parse_tcp_counters, tcp_info_fields)

REPO = Path(__file__).resolve().parents[2]
SERVERS = 3


def _free_port() -> int:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _agent(job):
    return subprocess.Popen([sys.executable, "-m", "traffic.agent", json.dumps(job)], cwd=REPO, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _run(tmp_path, block_bytes: int, blocks=None, duration_s=None, hosts=("s0", "s1", "s2")):
    """Servers first (each READY: listening), then the client (READY: connected), released together;
    returns (start time, client record, server records). ``hosts`` names the servers in the
    client's job (their records are ``s<i>.json``)."""
    deadline = time.time() + 30
    ports = [_free_port() for _ in range(SERVERS)]
    servers = [_agent({"role": "blocks-server", "port": p, "bind_ip": "127.0.0.1", "deadline_unix_s": deadline + 2,
                       "out": str(tmp_path / f"s{i}.json")}) for i, p in enumerate(ports)]
    procs = list(servers)
    try:
        for p in servers:
            assert p.stdout.readline().strip() == "READY"
        client = _agent({"role": "blocks-client", "block_bytes": block_bytes, "blocks": blocks,
                         "duration_s": duration_s, "deadline_unix_s": deadline, "out": str(tmp_path / "c.json"),
                         "servers": [{"host": h, "ip": "127.0.0.1", "port": p} for h, p in zip(hosts, ports)]})
        procs.append(client)
        assert client.stdout.readline().strip() == "READY", client.stderr.read()
        start = time.time() + 0.2
        for p in procs:
            p.stdin.write(f"{start}\n")
            p.stdin.flush()
        codes = [p.wait(30) for p in procs]
        assert codes == [0] * len(procs), [p.stderr.read() for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return (start, json.loads((tmp_path / "c.json").read_text()),
            [json.loads((tmp_path / f"s{i}.json").read_text()) for i in range(SERVERS)])


def test_blocks_are_barrier_synchronised_over_persistent_connections(tmp_path):
    size, count = 200_000, 5
    start, client, servers = _run(tmp_path, size, blocks=count)
    assert client["complete"] and client["stopped_by"] == "blocks"
    assert client["start_at_unix_s"] == pytest.approx(start, abs=1e-5)
    # every connection was established before the start, and accepted by its server before it
    assert client["all_connected_before_start"]
    assert all(c["connected_unix_s"] < start for c in client["connections"])
    assert isinstance(client["active_opens_after_start"], int)
    for s in servers:
        (conn,) = s["connections"]
        assert conn["accepted_unix_s"] < start and s["listening_unix_s"] < conn["accepted_unix_s"]
        assert s["complete"] and conn["eof"] is True
    blocks = client["blocks"]
    assert [b["block"] for b in blocks] == list(range(count))
    for b in blocks:
        assert b["complete"] and b["bytes"] == SERVERS * size
        # no byte can arrive before the requests' round trip, nor can a gap outlast the block
        assert 0 < b["longest_gap_s"] <= b["duration_s"]
        assert b["start_unix_s"] >= start
        assert b["goodput_mbps"] == pytest.approx(SERVERS * size * 8 / b["duration_s"] / 1e6)
        assert [c["bytes"] for c in b["connections"]] == [size] * SERVERS
        for c in b["connections"]:       # every byte of the block arrived inside it
            assert b["start_unix_s"] <= c["first_byte_unix_s"] <= c["last_byte_unix_s"] <= b["end_unix_s"]
    for a, b in zip(blocks, blocks[1:]):  # the barrier: no block starts before the one before it ended
        assert b["start_unix_s"] >= a["end_unix_s"]
    for s in servers:
        served = s["connections"][0]["blocks"]
        assert [x["block"] for x in served] == list(range(count))
        for x, b in zip(served, blocks):
            assert x["bytes"] == x["sent_bytes"] == size
            # the request came inside the client's block (the server stamps its last write after
            # send() returned, which may be after the client had the bytes)
            assert b["start_unix_s"] <= x["request_unix_s"] <= min(x["written_unix_s"], b["end_unix_s"])
            assert x["retrans"] >= 0
            assert x["loss_probes"] >= 0 and x["loss_probe_recoveries"] >= 0
            assert x["rto_at_request_ms"] > 0 and x["srtt_at_request_ms"] > 0
            if s["tcp_info_bytes"] >= TCP_INFO_RTO_BYTES:
                assert s["timeouts_method"] == TIMEOUTS_FROM_KERNEL
                assert x["timeouts"] >= 0 and x["rto_recoveries"] >= 0 and x["rto_time_ms"] >= 0
            else:
                assert x["timeouts"] is not None and x["rto_recoveries"] is None
        assert s["loss_probes_method"] == LOSS_PROBES_METHOD
        assert s["tcp_info_fields"] == tcp_info_fields(s["tcp_info_bytes"])
        assert s["connections"][0]["snd_mss"] > 0


def test_duration_repeats_blocks_until_it_has_passed(tmp_path):
    start, client, servers = _run(tmp_path, 50_000, duration_s=0.5)
    assert client["complete"] and client["stopped_by"] == "duration"
    blocks = client["blocks"]
    assert len(blocks) >= 2
    assert all(b["start_unix_s"] < start + 0.5 for b in blocks)
    assert all(len(s["connections"][0]["blocks"]) == len(blocks) for s in servers)


def test_tcp_counters_of_an_older_kernel_fall_back_to_the_namespace_count():
    raw = bytearray(104)
    raw[2], raw[4] = 1, 2
    struct.pack_into("=I", raw, 8, 204000)          # tcpi_rto, us
    struct.pack_into("=I", raw, 16, 1448)           # tcpi_snd_mss
    struct.pack_into("=I", raw, 68, 3100)           # tcpi_rtt (smoothed), us
    struct.pack_into("=I", raw, 100, 7)
    old = parse_tcp_counters(bytes(raw))
    assert old == {"retransmits": 1, "backoff": 2, "rto_us": 204000, "snd_mss": 1448, "srtt_us": 3100,
                   "total_retrans": 7, "total_rto": None, "total_rto_recoveries": None, "total_rto_time_ms": None}
    later = dict(old, total_retrans=10)
    assert counter_delta(old, later, {"ns_timeouts": 2, "loss_probes": 1}) == {
        "retrans": 3, "timeouts": 2, "rto_recoveries": None, "rto_time_ms": None}
    assert counter_delta(old, later, {})["timeouts"] is None          # no netstat: not counted
    new = bytearray(280)
    struct.pack_into("=I", new, 100, 5)
    struct.pack_into("=HHI", new, 240, 65535, 3, 400)
    a = parse_tcp_counters(bytes(new))
    struct.pack_into("=HHI", new, 240, 1, 4, 1600)           # the u16 counter wrapped
    b = parse_tcp_counters(bytes(new))
    # the kernel's count wins over the namespace's
    assert counter_delta(a, b, {"ns_timeouts": 9}) == {"retrans": 0, "timeouts": 2, "rto_recoveries": 1,
                                                       "rto_time_ms": 1200}
    with pytest.raises(ValueError):
        parse_tcp_counters(bytes(100))


def test_the_tcp_info_fields_a_kernel_offers_are_named_from_its_struct_size():
    assert tcp_info_fields(104) == ["tcpi_retransmits", "tcpi_backoff", "tcpi_rto", "tcpi_snd_mss", "tcpi_rtt",
                                    "tcpi_total_retrans"]
    assert tcp_info_fields(248)[-3:] == ["tcpi_total_rto", "tcpi_total_rto_recoveries", "tcpi_total_rto_time"]
    assert tcp_info_fields(280) == tcp_info_fields(248)          # 6.18's AccECN counters are not read
    assert "tcpi_total_rto" not in tcp_info_fields(240)
