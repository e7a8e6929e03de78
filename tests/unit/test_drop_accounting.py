"""Where a lost frame went: the userspace datapath's uncounted discards (experiments.features.ovstx,
controller.ovstxbpf) and a UDP round's accounting (experiments.features.accounting). Pure logic
with given counters; the live figures are in tests/integration/test_pfc_experiment.py."""
from __future__ import annotations

import os
import socket
import time

import pytest

from controller import ovstxbpf
from experiments.features.registry import FEATURES
from experiments.features.accounting import (QUIET_S, SETTLE_MAX_S, accounting_section, parse_udp_snmp, read_hosts,
                                             settled_read)
from experiments.features.ovstx import correct_drops, round_delta
from traffic.agent import drain

SNMP = ("Ip: Forwarding DefaultTTL\nIp: 1 64\n"
        "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n"
        "Udp: 10 2 1 40 1 3 0 0 0\n"
        "UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n"
        "UdpLite: 0 0 0 0 0 0 0 0 0\n")


def _c(idx_counts):
    return {i: dict(zip(ovstxbpf.FIELDS, v)) for i, v in idx_counts.items()}


def test_a_ports_discards_and_retries_over_a_round_correct_the_drops():
    before = _c({5: (10, 20, 15, 1, 4, 3, 0), 6: (3, 3, 3, 0, 0, 0, 0)})
    after = _c({5: (30, 70, 40, 3, 20, 25, 0), 6: (9, 9, 9, 0, 0, 0, 0), 7: (2, 4, 0, 0, 2, 2, 0)})
    per_port = round_delta(before, after, {5: "leaf2-eth5", 7: "leaf1-eth1"}.get)
    # port 6 sent everything: no discard, no retry, left out; port 7 is new this round
    assert list(per_port) == ["leaf1-eth1", "leaf2-eth5"]
    assert per_port["leaf2-eth5"]["discarded"] == 22 and per_port["leaf2-eth5"]["retried"] == 2
    assert per_port["leaf2-eth5"]["refused_first"] == 16 and per_port["leaf2-eth5"]["messages"] == 50
    summary = {"total_drops": 100}
    sec = correct_drops(summary, per_port)
    # lost = qdisc drops - retried (a refused frame sent again was counted twice) + discarded
    assert summary["total_drops"] == 100 - 2 + 24 and summary["qdisc_drops"] == 100
    assert sec == summary["ovs_tx"] and sec["discarded"] == 24 and sec["retried"] == 2 and sec["counted"]
    unknown = {"total_drops": None}
    correct_drops(unknown, per_port)
    assert unknown["total_drops"] is None


def test_the_terminal_line_of_a_round_without_a_drop_total_names_the_discards_only():
    # a collective round's summary has no total_drops: the report must not fail the run
    from experiments.features.ovstx import OvsTransmit
    per_port = {"leaf1-eth1": {"discarded": 7, "retried": 1, "refused_first": 8, "messages": 9}}
    summary: dict = {}
    correct_drops(summary, per_port)
    line = OvsTransmit.report(None, summary)
    assert "7 frames discarded" in line and "corrected" not in line
    summary = {"total_drops": 3}
    correct_drops(summary, per_port)
    assert "drops corrected to 9 (qdiscs counted 3)" in OvsTransmit.report(None, summary)


def test_the_loader_reads_the_structure_the_program_writes():
    src = (ovstxbpf.REPO / "controller" / "bpf" / "ovstx.bpf.c").read_text()
    body = src.split("struct fl_ovstx_port {")[1].split("};")[0]
    fields = [line.split()[1].rstrip(";") for line in body.strip().splitlines() if line.strip()]
    assert tuple(fields) == ovstxbpf.FIELDS and ovstxbpf.PORT.size == 8 * len(fields)


def test_udp_counters_are_read_from_the_snmp_text_and_a_hosts_namespace():
    c = parse_udp_snmp(SNMP)
    assert c == {"OutDatagrams": 40, "InDatagrams": 10, "NoPorts": 2, "InErrors": 1, "RcvbufErrors": 1,
                 "SndbufErrors": 3}
    with pytest.raises(ValueError):
        parse_udp_snmp("Ip: Forwarding\nIp: 1\n")
    mine = read_hosts({"me": os.getpid(), "gone": 2 ** 22 + 12345})
    assert set(mine) == {"me"} and mine["me"]["OutDatagrams"] >= 0


def _h(out=0, inp=0, noports=0, inerr=0):
    return {"OutDatagrams": out, "InDatagrams": inp, "NoPorts": noports, "InErrors": inerr, "RcvbufErrors": inerr,
            "SndbufErrors": 0}


def test_every_datagram_sent_arrived_or_was_dropped_where_the_run_counts():
    before = {"h1": _h(), "h5": _h(out=7)}
    after = {"h1": _h(inp=560, noports=4, inerr=2), "h5": _h(out=2031)}
    ok = accounting_section(before, after, 1458)
    assert ok["udp_sent"] == 2024 and ok["udp_arrived"] == {"to_a_socket": 560, "to_no_socket": 4,
                                                             "refused_by_socket": 2}
    assert ok["udp_lost_in_network"] == 1458 and ok["gap"] == 0 and ok["warnings"] == [] and ok["hosts_read"] == 2
    short = accounting_section(before, after, 1450)
    assert short["gap"] == 8 and "8 UDP datagram(s) lost in no counter" in short["warnings"][0]
    # more drops than lost datagrams: other frames (ARP) were among the drops, nothing unaccounted
    assert accounting_section(before, after, 1460)["warnings"] == []
    late = accounting_section(before, after, 1450, settled=False)
    assert "still arrived" in late["warnings"][0] and late["settled"] is False
    assert accounting_section(before, after, None)["gap"] is None


def test_the_end_counters_wait_until_nothing_more_arrives():
    t = [0.0]
    reads = iter([{"h1": _h(inp=1)}, {"h1": _h(inp=5)}, {"h1": _h(inp=6)}, {"h1": _h(inp=6)}])
    sleeps = []

    def sleep(s):
        sleeps.append(s)
        t[0] += s
    got, settled = settled_read({}, read=lambda pids: next(reads), clock=lambda: t[0], sleep=sleep)
    assert settled and got["h1"]["InDatagrams"] == 6 and sleeps == [QUIET_S] * 3
    n = [0]

    def busy(pids):
        n[0] += 1
        return {"h1": _h(inp=n[0])}
    t[0] = 0.0
    got, settled = settled_read({}, read=busy, clock=lambda: t[0], sleep=lambda s: t.__setitem__(0, t[0] + s))
    assert not settled and t[0] >= SETTLE_MAX_S


def test_a_receiver_drains_what_is_still_queued_so_the_kernel_counts_it():
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.bind(("127.0.0.1", 0))
        for _ in range(3):
            tx.sendto(b"x" * 100, rx.getsockname())
        assert drain(rx) == 3 and drain(rx) == 0
    finally:
        rx.close()
        tx.close()


@pytest.mark.parametrize("bound", ["127.0.0.1", "0.0.0.0"])
def test_a_drained_socket_takes_no_new_datagram_so_none_is_freed_uncounted_at_its_close(bound):
    """Between the last read and the close nothing can be queued: once draining, the socket refuses
    new datagrams (the kernel counts them as NoPorts) and still hands over what was queued."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.bind((bound, 0))
        to = ("127.0.0.1", rx.getsockname()[1])
        tx.sendto(b"queued", to)
        time.sleep(0.01)
        assert drain(rx) == 1
        tx.sendto(b"late", to)
        time.sleep(0.01)
        with pytest.raises(BlockingIOError):
            rx.recv(2048)
    finally:
        rx.close()
        tx.close()


def test_the_transmit_count_corrects_the_drops_after_pfc_and_before_the_accounting_reads_them():
    order = list(FEATURES)
    assert order.index("pfc") < order.index("ovs_tx") < order.index("accounting") < order.index("fidelity")
