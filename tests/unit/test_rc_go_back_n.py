"""Go-back-N on the RC transport (issue 7): scripted losses, every PSN delivered once, in order."""
import pytest

from common import roce
from common.rc import Requester, Responder


def run(req, resp, drop_data=(), drop_replies=(), t_step_s=0.001, max_steps=10000):
    """Send until done through a channel that drops the n-th transmissions listed (of data, of replies)."""
    delivered, sent, replies, now = [], 0, 0, 0.0
    for _ in range(max_steps):
        if req.done:
            return delivered
        now += t_step_s
        pkt = req.next_packet(now)
        if pkt is None:
            continue
        sent += 1
        if sent in drop_data:
            continue
        r = resp.on_packet(pkt.psn, pkt.payload_bytes, pkt.ackreq,
                           pkt.opcode in (roce.SEND_LAST, roce.SEND_ONLY))
        if r.deliver:
            delivered.append(pkt.psn)
        if r.reply:
            replies += 1
            if replies in drop_replies:
                continue
            kind, psn = r.reply
            (req.on_ack if kind == "ack" else req.on_nak)(psn, now)
    raise AssertionError("did not finish")


def test_no_loss_delivers_in_order_with_coalesced_acks():
    req, resp = Requester(mtu_bytes=1024), Responder(ack_every=4)
    req.post(10 * 1024, 0.0)
    req.post(100, 0.0)
    assert run(req, resp) == list(range(11))
    assert req.retransmitted_packets == 0 and resp.acks_sent == 3 + 1   # every 4th, then the last (ack-request)
    assert all(m.completed_s is not None for m in req.messages) and resp.messages_done == 2
    assert resp.delivered_bytes == 10 * 1024 + 100


def test_scripted_loss_goes_back_to_the_gap_and_delivers_every_psn_once():
    req, resp = Requester(mtu_bytes=1024, rto_s=0.05), Responder(ack_every=2)
    for _ in range(3):
        req.post(8 * 1024, 0.0)
    # lose the 3rd and 4th transmissions, then the 15th (a retransmission round is under way)
    got = run(req, resp, drop_data={3, 4, 15})
    assert got == list(range(24))
    assert req.naks >= 1 and req.retransmitted_packets > 0 and resp.out_of_order > 0
    assert resp.naks_sent == req.naks            # one NAK per gap, none lost here


def test_lost_last_packet_and_lost_nak_recover_by_timeout_across_psn_wrap():
    start = roce.PSN_MASK - 3                  # the PSN wraps inside the message
    req, resp = Requester(mtu_bytes=256, rto_s=0.02, start_psn=start), Responder(ack_every=8, start_psn=start)
    req.post(8 * 256, 0.0)
    got = run(req, resp, drop_data={8}, drop_replies={1})       # the last packet; the first reply
    assert got == [(start + i) & roce.PSN_MASK for i in range(8)]
    assert req.timeouts >= 1 and req.done
    # the timeout also covers a lost NAK: drop packet 2, then the NAK it causes
    req, resp = Requester(mtu_bytes=256, rto_s=0.02), Responder(ack_every=100)
    req.post(6 * 256, 0.0)
    got = run(req, resp, drop_data={2}, drop_replies={1})
    assert got == list(range(6)) and req.timeouts >= 1


def test_bad_parameters_are_named():
    with pytest.raises(ValueError, match="mtu_bytes"):
        Requester(mtu_bytes=1000)
    with pytest.raises(ValueError, match="size_bytes"):
        Requester().post(0, 0.0)
    with pytest.raises(ValueError, match="ack_every"):
        Responder(ack_every=0)


def test_coalescing_timer_acknowledges_what_waits():
    resp = Responder(ack_every=16)
    assert resp.flush() is None
    for psn in range(3):
        assert resp.on_packet(psn, 1024, False, False).reply is None
    assert resp.flush() == ("ack", 2) and resp.flush() is None
    req = Requester(mtu_bytes=1024, rto_s=0.05)
    req.post(5 * 1024, 0.0)
    for _ in range(3):
        req.next_packet(0.0)
    req.on_ack(2, 0.01)                      # the flushed ACK: no timeout resends the first three
    assert req.outstanding_packets == 0 and not req.check_timeout(1.0)
