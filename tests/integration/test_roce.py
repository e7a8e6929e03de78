"""Issue 7: RoCEv2 queue pairs with DCQCN through a real fabric.

Two hosts (h2, h3) send long-lived RoCEv2 flows to h1 through one leaf whose port
toward h1 (10 Mbit/s; 5 in the VM lane, see RATE_MBPS; 100-packet buffer) carries a RED ECN profile. With DCQCN
the two reaction points share the port: Jain's index of their delivered rates
over the last half of the run, and the port's queue held between Kmin and Kmax.
With ``none`` both send at line rate: the buffer fills and drops, and go-back-N
retransmits until every byte is delivered once.
"""
import csv
import json
import os
import subprocess
import time

import pytest

from common import roce
from common.dcqcn import DcqcnParams
from common.stats import jain_index
from experiments.scenario import FRAME_BYTES
from experiments.workloads.roce import jobs as rocejobs, summary as rocesummary
from experiments.live import start_sampler, stop_sampler

from .test_ecn_marking import BOTTLENECK, marking_fabric

RUN_S = 10.0
LANE = os.environ.get("FABRICLAB_LANE", "host")
# The VM lane (stock kernel under an emulated CPU, TCG) runs at 5 Mbit/s with DCQCN's timers twice
# as long (time_scale 200: T = K = 11 ms, CNP interval 10 ms) and samples queues at 50 Hz (the
# sampler took half a vCPU at 100 Hz there). DCQCN is stable only while the feedback loop is fast
# against its timers: there the agents' loop wakes late (p99 ~6 ms, against 0.7 ms here), and with
# the 10 Mbit/s timers (time_scale 100) the rates overshot and were cut again and again: the
# senders kept their pacers (100%) but the port was 72-81% busy, its queue empty at the median and
# in [Kmin, Kmax] 16-29% of the time (six runs, Kmin 2-10 packets, 3 and 5 Mbit/s). With time_scale
# 200: 93% busy, Jain 0.998, in the band 97%. Longer still (400) recovers too slowly for a 10 s run
# (77-78% busy).
RATE_MBPS = 5 if LANE == "vm" else 10
TIME_SCALE = 200 if LANE == "vm" else 100
SAMPLER_HZ = 50 if LANE == "vm" else 100
# DCQCN's RED profile, in packets at this scale: Kmin about one bandwidth-delay product (10 Mbit/s x
# ~3 ms), Kmax 40 of the 100-packet buffer, Pmax 0.2 (measured here with 10 s runs: Kmin 2 held the
# queue between Kmin and Kmax 63-71% of the last half; Kmin 5, 46-73%; Pmax 0.05 let it swing
# empty-to-25 packets, 15%)
KMIN, KMAX, PMAX = 2 * FRAME_BYTES, 40 * FRAME_BYTES, 0.2


def run_flows(lf, tmp_path, tag, flows, run_s, **job):
    """Run ``flows`` with the queue sampler on; returns (flow records, bottleneck queue rows)."""
    out = tmp_path / tag
    out.mkdir()
    sampler = start_sampler(lf, lf.state, out, SAMPLER_HZ)
    try:
        deadline = time.time() + run_s + 60
        agents = rocejobs.start_roce_flows(lf, lf.state, flows, out, deadline, **job)
        try:
            codes = agents.wait(deadline)
        finally:
            agents.kill()
    finally:
        stop_sampler(sampler)
    assert not any(codes.values()), (codes, [p.stderr.read()[-2000:] for _, p in agents.procs])
    with open(out / "queues_raw.csv") as fh:
        q = [r for r in csv.DictReader(fh) if r["intf"] == BOTTLENECK]
    return rocesummary.flow_records(flows, out), q


def root_backlog_bytes(intf: str) -> int:
    """Bytes queued on ``intf`` (its root qdisc, every class and FIFO below it), read from the kernel."""
    q = json.loads(subprocess.run(["tc", "-s", "-j", "qdisc", "show", "dev", intf, "root"], capture_output=True,
                                  text=True, check=True).stdout or "[]")
    return sum(x.get("backlog", 0) for x in q)


@pytest.fixture(scope="module")
def red_fabric(tmp_path_factory):
    """One fabric for both tests (test_ecn_marking.marking_fabric with DCQCN's RED profile at
    RATE_MBPS): each test runs its own flows and sampler; drops are read as deltas."""
    tmp = tmp_path_factory.mktemp("roce-fabric")
    with marking_fabric(tmp, {"red": {"kmin_bytes": KMIN, "kmax_bytes": KMAX, "pmax": PMAX}},
                        rate_mbps=RATE_MBPS) as (lf, kind):
        yield lf, kind


@pytest.fixture
def fabric(red_fabric):
    """The shared fabric, its bottleneck queue drained before the test."""
    lf, kind = red_fabric
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and root_backlog_bytes(BOTTLENECK) > 0:
        time.sleep(0.1)
    return lf, kind


def test_two_dcqcn_senders_converge_to_a_fair_share_with_the_queue_between_kmin_and_kmax(tmp_path, fabric, figure):
    flows = [{"flow_id": i, "src": h, "dst": "h1", "duration_s": RUN_S} for i, h in enumerate(("h2", "h3"))]
    params = DcqcnParams.scaled(RATE_MBPS * 1e6, time_scale=TIME_SCALE)   # T = K = 5.5 ms, N = 5 ms (x2 VM)
    lf, kind = fabric
    recs, q = run_flows(lf, tmp_path, "dcqcn", flows, RUN_S, mode="dcqcn", line_rate_mbps=RATE_MBPS, controllers={"dcqcn": params},
                        rto_s=rocejobs.default_rto_s(100 * FRAME_BYTES, RATE_MBPS * 1e6))
    for r in recs:
        if r["tx"]:
            print(f"flow {r['flow']['flow_id']}: sent {r['tx']['wire_bytes_sent']} B, "
                  f"{r['tx']['achieved_fraction_of_pacer']} of its pacer, CNPs {r['tx']['cnps_received']}, "
                  f"final rate {r['tx']['final_rate_bps']}; sender loop {r['tx_loop']}; receiver loop {r['rx_loop']}")
    for r in recs:
        assert r["tx"] and r["rx"] and not r["errors"], r
        assert 0 < r["tx"]["cnps_received"] <= r["rx"]["cnps_sent"], r      # CNPs travel the idle reverse path
        assert r["rx"]["ce_packets"] > 0 and r["rx"]["not_ect_packets"] == 0
        assert r["rx"]["duplicates"] == 0 or r["tx"]["retransmitted_packets"] > 0
        assert r["rx"]["bytes_delivered"] == r["tx"]["message_bytes"], r       # every byte, once, in order
    t0 = max(r["rx"]["first_byte_unix_s"] for r in recs)
    t1 = min(r["rx"]["last_byte_unix_s"] for r in recs)
    half = t0 + (t1 - t0) / 2
    rates = [rocesummary.rate_series_bps(r["rx"]["samples"], half, t1) for r in recs]
    jain = jain_index(rates)
    back = [int(r["backlog_bytes"]) for r in q if half <= float(r["t_unix_s"]) <= t1]
    inside = sum(KMIN <= b <= KMAX for b in back) / len(back)
    print(f"marker {kind}: rates over the last half {[round(x / 1e6, 2) for x in rates]} Mbit/s, Jain {jain:.3f}; "
          f"queue between Kmin and Kmax {inside:.0%} of {len(back)} samples (median "
          f"{sorted(back)[len(back) // 2] / FRAME_BYTES:.1f} packets, above Kmax {sum(b > KMAX for b in back)}); CNPs "
          f"{[r['tx']['cnps_received'] for r in recs]}")
    figure("jain", jain)
    figure("sum_rate_over_link", sum(rates) / (RATE_MBPS * 1e6))
    figure("queue_in_band_fraction", inside)
    assert jain >= 0.95, rates
    for r in recs:
        assert "pacing_warning" not in r["tx"], r["tx"]["pacing_warning"]
    assert sum(rates) >= 0.8 * RATE_MBPS * 1e6, rates      # 92-95% here, 93% in the VM lane
    assert inside >= 0.5, back


@pytest.mark.lane("host", reason="the frames are the same bytes on every kernel; the VM lane runs RoCEv2 with "
                                 "DCQCN (the convergence test)")
def test_open_loop_senders_fill_the_buffer_and_go_back_n_delivers_every_byte(tmp_path, fabric, figure):
    size = 150_000 * RATE_MBPS
    flows = [{"flow_id": i, "src": h, "dst": "h1", "bytes": size} for i, h in enumerate(("h2", "h3"))]
    lf, kind = fabric
    recs, q = run_flows(lf, tmp_path, "none", flows, 10, mode="none", line_rate_mbps=RATE_MBPS, rate_mbps=RATE_MBPS,
                        rto_s=rocejobs.default_rto_s(100 * FRAME_BYTES, RATE_MBPS * 1e6), pcap_hosts=("h2",))
    drops = int(q[-1]["drops_total"]) - int(q[0]["drops_total"])
    peak = max(int(r["backlog_packets"]) for r in q)
    for r in recs:
        assert r["tx"]["all_complete"], r["tx"]
        assert r["rx"]["bytes_delivered"] == size and r["rx"]["complete"]
        assert r["rx"]["not_ect_packets"] == 0                               # ECT(0) on every frame (T4)
        assert r["rx"]["ce_packets"] > 0 and r["rx"]["cnps_sent"] > 0       # marked and notified, but
        assert r["tx"]["final_rate_bps"] == RATE_MBPS * 1e6                   # no reaction in mode none
    retx = sum(r["tx"]["retransmitted_packets"] for r in recs)
    print(f"mode none: peak queue {peak} packets, drops {drops}, retransmitted {retx}, NAKs "
          f"{[r['tx']['naks'] for r in recs]}, timeouts {[r['tx']['timeouts'] for r in recs]}")
    figure("peak_queue_packets", peak)
    figure("retransmitted_packets", retx)
    assert peak >= 95 and drops > 0 and retx > 0
    # the capture on h2 holds real RoCEv2: data frames out (ECT(0), DSCP 26, a correct ICRC), ACKs,
    # NAKs and CNPs in, as scapy's RoCE layers (and Wireshark) decode them
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from scapy.utils import rdpcap
    frames = [f for f in rdpcap(str(tmp_path / "none" / "h2.pcap")) if UDP in f and f[UDP].dport == 4791]
    out = [f for f in frames if BTH in f and f[BTH].opcode in roce.DATA_OPCODES]
    back = [f for f in frames if BTH in f and f[BTH].opcode not in roce.DATA_OPCODES]
    assert len(out) >= recs[0]["tx"]["packets_sent"] * 0.9 and back
    # DSCP 26 and ECT(0) as sent; CE may show too: on the kernel datapath the capture's copy shares
    # its data with the frame that goes on, and the receiver's port's RED marks CE in place
    # downstream (VM lane: 953 of 2142 captured data frames showed CE; the ICRC, which masks the
    # TOS byte, matched on all of them). The receiver's count of Not-ECT frames (0, above) is T4's proof
    bad = [(f[IP].tos, f[BTH].opcode, f[BTH].psn, len(f.original), roce.icrc(f.original).hex(),
            f.original[-4:].hex()) for f in out
           if f[IP].tos not in ((26 << 2) | 2, (26 << 2) | 3) or roce.icrc(f.original) != f.original[-4:]]
    assert not bad, (f"{len(bad)} of {len(out)} data frames (tos, opcode, psn, length, ICRC computed, carried)", bad[:5])
    assert {f[BTH].opcode for f in back} >= {roce.ACKNOWLEDGE, roce.CNP}
    assert all(roce.icrc(f.original) == f.original[-4:] for f in back)
