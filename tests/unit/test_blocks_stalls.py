"""Which blocks of an incast in blocks stalled, and what stalled them (experiments.workloads.blocks.summary), on
synthetic agent records: the ideal block time from the bytes on the wire, the stall threshold
from a round trip through the full buffer, the cause from the late senders' counters, and the rounds table that shows them
beside the goodput over the whole block phase. Pure, no sockets."""
import types

import pytest

from common.units import TCP_FRAME_OVERHEAD_BYTES, tcp_wire_bytes
from experiments.workloads.blocks import summary as blocksrun
from experiments.workloads.blocks.summary import (StallRule, block_rows, blocks_summary, classify_stall,
                                   connection_rows, format_rounds, round_row, stall_rule)

RATE_MBPS, N, SIZE = 10.0, 8, 8192


def test_tcp_wire_bytes_counts_a_header_per_segment():
    assert TCP_FRAME_OVERHEAD_BYTES == 1514 - 1448
    assert tcp_wire_bytes(1448) == 1514 and tcp_wire_bytes(1449) == 1449 + 2 * 66 and tcp_wire_bytes(0) == 0
    assert tcp_wire_bytes(8192) == 8192 + 6 * 66                # 5 full segments and 952 bytes
    assert tcp_wire_bytes(8192, mss_bytes=1398) == 8192 + 6 * 66
    for bad in ((-1, 1448), (10, 0)):
        with pytest.raises(ValueError):
            tcp_wire_bytes(*bad)


BUFFER_BYTES = 16 * 1514


def test_the_ideal_is_every_senders_bytes_on_the_wire_plus_a_round_trip():
    r = stall_rule(N, SIZE, RATE_MBPS, rtt_s=0.00153, buffer_bytes=BUFFER_BYTES, mss_bytes=1448)
    assert r.ideal_s == pytest.approx(8 * 8588 * 8 / 10e6 + 0.00153)       # 56.5 ms
    # a stall: more than a round trip through the full buffer (16 frames at 10 Mbit/s, 19.4 ms)
    assert r.queue_s == pytest.approx(16 * 1514 * 8 / 10e6) and r.threshold_s == pytest.approx(0.00153 + r.queue_s)
    unmeasured = stall_rule(N, SIZE, RATE_MBPS, None, 100 * 1514)
    assert unmeasured.rtt_s == 0 and unmeasured.mss_bytes == 1448 and unmeasured.threshold_s == unmeasured.queue_s
    assert unmeasured.as_dict()["ideal_block_time_s"] == unmeasured.ideal_s
    for bad in ((N, SIZE, 0, None, BUFFER_BYTES), (0, SIZE, RATE_MBPS, None, BUFFER_BYTES),
                (N, SIZE, RATE_MBPS, None, 0)):
        with pytest.raises(ValueError):
            stall_rule(*bad)


RULE = StallRule(ideal_s=0.0565, threshold_s=0.02, rate_mbps=RATE_MBPS, rtt_s=0.0015, queue_s=0.0185,
                 mss_bytes=1448)


def _conn(sender, last_byte_s, timeouts=0, loss_probes=0):
    return {"sender": sender, "last_byte_s": last_byte_s, "timeouts": timeouts, "loss_probes": loss_probes}


@pytest.mark.parametrize("duration_s, conns, stalled, cause, late", [
    # inside the threshold: not stalled, whatever the counters say (a probe that fired after the
    # client had every byte, for a lost ACK, stalls nothing)
    (0.0565 + 0.019, [_conn("h2", 10.07, loss_probes=1), _conn("h3", 10.075)], False, None, ""),
    # about 200 ms late: the late sender sent a tail loss probe and no RTO fired
    (0.26, [_conn("h2", 10.05), _conn("h3", 10.259, loss_probes=1)], True, "tlp", "h3"),
    # a probe, then the RTO as well: the RTO stalled it
    (0.47, [_conn("h2", 10.05), _conn("h3", 10.469, timeouts=1, loss_probes=1)], True, "rto", "h3"),
    # two late senders, one with an RTO, one with a probe: the strongest timer
    (0.30, [_conn("h2", 10.25, loss_probes=2), _conn("h3", 10.299, timeouts=1)], True, "rto", "h2 h3"),
    # the only timer was on a sender that finished in time: no timer stalled this block
    (0.12, [_conn("h2", 10.04, timeouts=1), _conn("h3", 10.119)], True, "other", "h3"),
    # the late sender left no counters (its server's record is missing)
    (0.26, [_conn("h2", 10.05), _conn("h3", 10.259, timeouts=None, loss_probes=None)], True, "unknown", "h3"),
])
def test_a_block_stalls_when_it_outlasts_its_ideal_and_the_late_senders_timers_say_why(duration_s, conns, stalled,
                                                                                         cause, late):
    got = classify_stall(duration_s, 10.0, conns, RULE)
    assert got == {"excess_s": pytest.approx(duration_s - RULE.ideal_s), "stalled": stalled, "stall_cause": cause,
                   "late_senders": late}


def test_the_straggler_is_late_even_if_its_last_byte_came_just_before_the_cut():
    # the block's time includes the client's last read: its straggler is the late sender
    got = classify_stall(0.0565 + 0.021, 10.0, [_conn("h2", 10.03), _conn("h3", 10.0765, loss_probes=1)], RULE)
    assert got["stalled"] and got["late_senders"] == "h3" and got["stall_cause"] == "tlp"


def test_an_incomplete_block_or_no_rule_is_not_judged():
    none = {"excess_s": None, "stalled": None, "stall_cause": None, "late_senders": None}
    assert classify_stall(None, 0.0, [_conn("h2", None)], RULE) == none
    assert classify_stall(0.3, 0.0, [_conn("h2", 0.3)], None) == none


def _records(durations_s, causes, block_bytes=SIZE, senders=N):
    """A client record and server records of ``len(durations_s)`` blocks: in each, every sender's
    last byte at the block's end when ``causes[k]`` is None (on time), else only the last sender
    late, with an RTO (``"rto"``), a tail loss probe (``"tlp"``) or no timer (``"other"``)."""
    hosts = [f"h{i + 2}" for i in range(senders)]
    blocks, served, t = [], {h: [] for h in hosts}, 100.0
    for k, (d, cause) in enumerate(zip(durations_s, causes)):
        conns = []
        for i, h in enumerate(hosts):
            last = t + d if i == senders - 1 or cause is None else t + 0.04
            conns.append({"host": h, "bytes": block_bytes, "first_byte_unix_s": t + 0.002, "last_byte_unix_s": last})
            lag = cause is not None and i == senders - 1
            served[h].append({"block": k, "retrans": int(lag), "timeouts": int(lag and cause == "rto"),
                              "loss_probes": int(lag and cause in ("rto", "tlp")), "rto_recoveries": 0,
                              "rto_time_ms": 0})
        blocks.append({"block": k, "start_unix_s": t, "end_unix_s": t + d, "duration_s": d,
                       "bytes": senders * block_bytes, "complete": True,
                       "goodput_mbps": senders * block_bytes * 8 / d / 1e6, "longest_gap_s": 0.002,
                       "connections": conns})
        t += d
    client = {"start_at_unix_s": 100.0, "senders": senders, "block_bytes": block_bytes, "blocks": blocks,
              "complete": True, "stopped_by": "blocks", "connections": []}
    servers = {h: {"timeouts_method": "tcpi_total_rto", "loss_probes_method": "TcpExt TCPLossProbes",
                   "tcp_info_fields": ["tcpi_total_rto"], "connections": [{"snd_mss": 1448, "blocks": served[h]}]}
               for h in hosts}
    return client, servers


def test_the_rounds_table_counts_every_stalled_block_beside_the_overall_goodput(tmp_path):
    """The case the table used to hide: at RTOmin 200 ms 18 of 40 blocks wait ~200 ms for a tail
    loss probe, none for an RTO; the median block is fast, the block phase is not."""
    causes = ["tlp" if k % 20 < 9 else None for k in range(40)]
    durations = [0.27 if c else 0.057 for c in causes]
    client, servers = _records(durations, causes)
    rule = stall_rule(N, SIZE, RATE_MBPS, 0.0015, BUFFER_BYTES, blocksrun.senders_mss_bytes(servers))
    rows = block_rows(client, connection_rows(client, servers), rule)
    assert [r["stall_cause"] for r in rows] == causes
    b = blocks_summary(client, servers, rows, RATE_MBPS, rule)
    assert b["timeouts_total"] == 0 and b["blocks_with_timeout"] == 0      # what the RTO columns alone said
    assert b["blocks_stalled"] == 18 and b["stalled_by"] == {"rto": 0, "tlp": 18, "other": 0, "unknown": 0}
    assert b["goodput_mbps_stats"]["median"] == pytest.approx(N * SIZE * 8 / 0.057 / 1e6)   # 9.2 Mbit/s
    total_s = 18 * 0.27 + 22 * 0.057
    assert b["goodput_overall_mbps"] == pytest.approx(40 * N * SIZE * 8 / total_s / 1e6)   # 3.43 Mbit/s
    assert b["time_stalled_s"] == pytest.approx(18 * (0.27 - rule.ideal_s))
    assert b["stalled_share_of_time"] == pytest.approx(b["time_stalled_s"] / total_s)
    rnd = types.SimpleNamespace(name="rto200", hosts=types.SimpleNamespace(
        rto_min_ms=200, delayed_ack=True, tcp_congestion_control="cubic"))
    row = round_row(0, rnd, {"blocks": b}, "rounds/01-rto200")
    assert (row["blocks_stalled"], row["stalled_rto"], row["stalled_tlp"], row["stalled_other"]) == (18, 0, 18, 0)
    assert row["loss_probes_total"] == 18 and row["block_time_ideal_s"] == rule.ideal_s
    table = format_rounds([row], tmp_path)
    header, line = table.splitlines()[-2:]
    cells = dict(zip(["stalled", "RTO", "TLP", "other", "retx", "RTOs", "TLPs"], line.split()[-7:]))
    assert header.split()[-7:] == ["stalled", "RTO", "TLP", "other", "retx", "RTOs", "TLPs"]
    assert cells == {"stalled": "18/40", "RTO": "0", "TLP": "18", "other": "0", "retx": "18", "RTOs": "0",
                     "TLPs": "18"}
    assert f"{b['goodput_overall_mbps']:.2f}" in line.split()[4]            # overall before the median


def test_rto_and_other_stalls_are_counted_apart_and_an_unknown_shows_in_the_table(tmp_path):
    causes = ["rto", "tlp", "other", None, "rto"]
    client, servers = _records([0.5, 0.3, 0.2, 0.056, 0.45], causes)
    del servers["h9"]["connections"][0]["blocks"][2]          # the late sender of block 2 left no record
    rule = stall_rule(N, SIZE, RATE_MBPS, 0.0015, BUFFER_BYTES)
    rows = block_rows(client, connection_rows(client, servers), rule)
    b = blocks_summary(client, servers, rows, RATE_MBPS, rule)
    assert b["stalled_by"] == {"rto": 2, "tlp": 1, "other": 0, "unknown": 1} and b["blocks_stalled"] == 4
    rnd = types.SimpleNamespace(name="x", hosts=types.SimpleNamespace(rto_min_ms=None, delayed_ack=True,
                                                                      tcp_congestion_control="cubic"))
    line = format_rounds([round_row(0, rnd, {"blocks": b}, "r")], tmp_path).splitlines()[-1]
    assert line.split()[-7:-3] == ["4/5", "2", "1", "0+1?"]
    assert "unknown 1" in blocksrun.format_stalls(b)


def test_without_a_rule_stalls_are_not_judged_and_the_table_says_so(tmp_path):
    client, servers = _records([0.3, 0.06], ["tlp", None])
    rows = block_rows(client, connection_rows(client, servers))
    b = blocks_summary(client, servers, rows, None)
    assert b["blocks_stalled"] is None and b["time_stalled_s"] is None and b["ideal_block_time_s"] is None
    assert "not judged" in blocksrun.format_stalls(b)
    rnd = types.SimpleNamespace(name="x", hosts=types.SimpleNamespace(rto_min_ms=5, delayed_ack=True,
                                                                      tcp_congestion_control="cubic"))
    row = round_row(0, rnd, {"blocks": b}, "r")
    assert row["stalled_tlp"] is None
    assert format_rounds([row], tmp_path).splitlines()[-1].split()[-7:-3] == ["-", "-", "-", "-"]
