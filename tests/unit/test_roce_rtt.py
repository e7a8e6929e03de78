"""The sender QP's ACK events (traffic.roce.SenderQp.acked): bytes newly acknowledged and RTT
samples from its own send times, on a scripted clock with crafted ACKs and NAKs: the newest
packet an ACK covers, no sample for a resent packet (Karn), a NAK, or an ACK the responder's
coalescing timer sent; duplicates unreported; the record's summary."""
import pytest

from common import roce
from traffic import ratecontrol
from traffic.ratecontrol import RateController
from traffic.roce import SenderQp, rtt_summary

MTU = 256
JOB = {"mode": "listener", "line_rate_mbps": 1000, "mtu_bytes": MTU, "rto_s": 10.0, "ack_every": 4}
PEER = {"mac": "02:00:00:00:00:02", "ip": "10.0.0.2", "qpn": 0x22}


class Listener(RateController):
    """Records every on_ack; halves its rate on an RTT sample above 50 ms (to see the pacer follow)."""
    name = "listener"

    def __init__(self):
        self.acks, self.rate = [], 1e9

    @classmethod
    def from_job(cls, job):
        return cls()

    def rate_bps(self):
        return self.rate

    def on_ack(self, now_s, rtt_s, acked_bytes):
        self.acks.append((now_s, None if rtt_s is None else round(rtt_s, 9), acked_bytes))
        if rtt_s is not None and rtt_s > 0.05:
            self.rate /= 2


@pytest.fixture()
def qp(monkeypatch):
    monkeypatch.setitem(ratecontrol.RATE_CONTROLLERS, "listener", Listener)
    q = SenderQp({"flow_id": 0, "qpn": 0x11, "udp_sport": 50000, "peer": PEER}, JOB, "02:00:00:00:00:01", "10.0.0.1")
    q.start(0.0, 0.0)
    return q


def send(q, times):
    """Send one frame at each of ``times``; returns the sequence numbers sent."""
    seqs = []
    for t in times:
        frame, _w = q.next_frame(t)
        assert frame is not None
        seqs.append(q.pending_seq)
        q.sent(len(frame), t)
    return seqs


def ack(q, psn, t, nak=False):
    syndrome = roce.AETH_NAK_SEQ if nak else roce.AETH_ACK
    q.on_feedback(roce.Bth(opcode=roce.ACKNOWLEDGE, becn=False, dqpn=0x11, ackreq=False, psn=psn, payload_bytes=0,
                           syndrome=syndrome), t)


def test_an_ack_gives_the_newest_packets_round_trip_and_the_bytes_it_acknowledged(qp):
    qp.post_data(bytes(10 * MTU - 100), 0.0)             # 10 packets, the last 156 bytes, asking for an ACK
    assert send(qp, [0.001 * i for i in range(10)]) == list(range(10))
    ack(qp, 3, 0.020)                   # 4 packets past none: the responder's count, at once
    ack(qp, 5, 0.021)                   # 2 packets, no ack request: its coalescing timer, no sample
    ack(qp, 5, 0.022)                   # a duplicate: nothing new, not reported
    ack(qp, 9, 0.030)                   # the last packet asked for it: at once
    assert qp.cc.acks == [(0.020, 0.017, 4 * MTU), (0.021, None, 2 * MTU), (0.030, 0.021, 3 * MTU + 156)]
    assert qp.req.done and not qp.sent_at and not qp.ackreq_seqs        # nothing kept for acknowledged packets
    assert qp.record()["rtt_s"] == {"count": 2, "min": 0.017, "median": 0.019, "p99": pytest.approx(0.02096)}


def test_karns_rule_and_a_nak_give_bytes_without_a_sample(qp):
    qp.post_data(bytes(8 * MTU), 0.0)
    send(qp, [0.001 * i for i in range(8)])
    ack(qp, 1, 0.010, nak=True)         # NAK expecting PSN 1: PSN 0 acknowledged, go back to 1
    assert qp.cc.acks == [(0.010, None, MTU)]
    assert send(qp, [0.011 + 0.001 * i for i in range(7)]) == list(range(1, 8))    # resent: Karn
    assert qp.req.retransmitted_packets == 7
    ack(qp, 7, 0.030)
    assert qp.cc.acks[-1] == (0.030, None, 7 * MTU) and qp.record()["rtt_s"]["count"] == 0
    qp.post_data(bytes(4 * MTU), 0.031)  # fresh packets afterwards are timed again
    send(qp, [0.032, 0.033, 0.034, 0.035])
    ack(qp, 11, 0.045)
    assert qp.cc.acks[-1] == (0.045, 0.01, 4 * MTU)


def test_the_pacer_follows_a_rate_changed_by_an_ack(qp):
    qp.post_data(bytes(4 * MTU), 0.0)
    send(qp, [0.0, 0.001, 0.002, 0.003])
    ack(qp, 3, 0.100)                   # 97 ms: the listener halves its rate
    assert qp.cc.rate == 5e8 and qp.bucket.rate_bps == 5e8


def test_the_count_restarts_after_a_timer_ack():
    # the responder acknowledges PSN 1 on its timer (2 packets), then counts 4 from there: PSN 5 is
    # an ACK sent at once and has a sample, although only 4 packets lie between it and PSN 1
    q = SenderQp({"flow_id": 0, "qpn": 0x11, "udp_sport": 50000, "peer": PEER}, {**JOB, "mode": "none"},
                 "02:00:00:00:00:01", "10.0.0.1")
    q.start(0.0, 0.0)
    q.post_data(bytes(8 * MTU), 0.0)
    send(q, [0.001 * i for i in range(8)])
    ack(q, 1, 0.020)
    ack(q, 5, 0.021)
    assert q.record()["rtt_s"]["count"] == 1 and q.record()["rtt_s"]["min"] == pytest.approx(0.016)


def test_rtt_summary_of_no_samples_and_of_one():
    assert rtt_summary([]) == {"count": 0, "min": None, "median": None, "p99": None}
    assert rtt_summary([0.004]) == {"count": 1, "min": 0.004, "median": 0.004, "p99": 0.004}


def asks(frame) -> bool:
    """The AckReq bit of a frame's BTH."""
    return bool(bytes(frame)[roce.BTH_OFFSET + 8] & 0x80)


def test_a_slow_queue_pair_asks_for_every_ack_so_its_controller_still_hears_round_trips(qp):
    # ack_every 4 frames of 314 bytes within half the coalescing delay (rto_s / 8 / 2 = 0.625 s):
    # 16 kbit/s. Above it the responder's count answers first; below it its timer would, with no
    # sample, so every packet sets AckReq and each ACK is a sample
    assert qp.ask_below_bps == pytest.approx(4 * (MTU + roce.OVERHEAD_BYTES) * 8 / 0.625)
    qp.post_data(bytes(4 * MTU), 0.0)
    frame, _ = qp.next_frame(0.0)
    assert not qp.pending_ackreq and not asks(frame)
    qp.sent(len(frame), 0.0)
    qp.cc.rate = 10_000.0
    frame, _ = qp.next_frame(1.0)
    assert qp.pending_ackreq and asks(frame)
    qp.sent(len(frame), 1.0)
    ack(qp, 1, 1.05)                    # 2 packets, fewer than ack_every, but PSN 1 asked: a sample
    assert qp.cc.acks[-1] == (1.05, 0.05, 2 * MTU)


def test_dcqcn_and_a_fixed_rate_keep_the_responders_count_however_slow():
    for job in ({**JOB, "mode": "none", "rate_mbps": 0.01}, {**JOB, "mode": "dcqcn"}):
        q = SenderQp({"flow_id": 0, "qpn": 0x11, "udp_sport": 50000, "peer": PEER}, job, "02:00:00:00:00:01",
                     "10.0.0.1")
        q.start(0.0, 0.0)
        q.post_data(bytes(4 * MTU), 0.0)
        frame, _ = q.next_frame(0.0)
        assert q.ask_below_bps == 0.0 and not q.pending_ackreq and not asks(frame), job["mode"]


def test_a_controller_that_wants_every_nth_ack_asks_for_it(monkeypatch):
    class EveryThird(Listener):
        name = "every-third"
        ack_every_packets = 3

    class Zero(Listener):
        name = "zero"
        ack_every_packets = 0

    monkeypatch.setitem(ratecontrol.RATE_CONTROLLERS, "every-third", EveryThird)
    monkeypatch.setitem(ratecontrol.RATE_CONTROLLERS, "zero", Zero)
    q = SenderQp({"flow_id": 0, "qpn": 0x11, "udp_sport": 50000, "peer": PEER}, {**JOB, "mode": "every-third"},
                 "02:00:00:00:00:01", "10.0.0.1")
    q.start(0.0, 0.0)
    q.post_data(bytes(7 * MTU + 10), 0.0)          # 8 packets, the last asking anyway (message end)
    got = []
    for i in range(8):
        frame, _ = q.next_frame(0.001 * i)
        got.append(asks(frame))
        q.sent(len(frame), 0.001 * i)
    assert got == [False, False, True, False, False, True, False, True]
    # Swift asks on every packet; a bad value is refused when the QP is made, naming the class
    assert ratecontrol.Swift.ack_every_packets == 1 and ratecontrol.Timely.ack_every_packets is None
    with pytest.raises(ValueError, match="Zero.ack_every_packets must be an integer >= 1"):
        SenderQp({"flow_id": 0, "qpn": 0x11, "udp_sport": 50000, "peer": PEER}, {**JOB, "mode": "zero"},
                 "02:00:00:00:00:01", "10.0.0.1")
