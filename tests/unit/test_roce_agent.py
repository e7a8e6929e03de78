"""The RoCE agent's pure parts (traffic.roce): the token bucket and the DCQCN feedback warning."""
from types import SimpleNamespace

from common.dcqcn import DcqcnParams
from traffic.roce import TokenBucket, feedback_warning


def test_token_bucket_paces_and_counts_busy_time_and_spent_credit():
    b = TokenBucket(8000.0, 2000, now_s=0.0)       # 1000 B/s, 2000 B saved up
    assert b.ready_wait_s(True, 0.0) == 0.0
    b.take(3000)                                   # the 2000 B of credit (allowed) and 1000 B of debt
    assert abs(b.wait_s(0.0) - 1.0) < 1e-9 and b.allowed_bytes == 2000
    b.set_busy(False, 1.0)                         # busy for 1 s: 1000 B more allowed
    b.set_busy(True, 5.0)                          # idle 4 s: bucket capped at 2000, not allowed until spent
    assert abs(b.allowed_bytes - 3000) < 1e-9 and b.tokens == 2000 and b.idle_credit == 2000
    b.set_rate(16000.0, 6.0)
    assert abs(b.allowed_bytes - 4000) < 1e-9 and b.rate_bps == 16000.0
    b.take(500)                                    # spent from the saved credit: counted now
    assert abs(b.allowed_bytes - 4500) < 1e-9 and b.idle_credit == 1500


def test_feedback_warning_when_wakeups_are_late_against_dcqcns_timer():
    p = DcqcnParams.scaled(10e6, time_scale=100)   # T = 5.5 ms
    q = SimpleNamespace(params=p, flow_id=3)
    assert abs(p.timer_s - 0.0055) < 1e-12
    assert feedback_warning(q, 0.0007) is None                # this host: p99 0.7 ms
    w = feedback_warning(q, 0.006)                             # the VM lane at time_scale 100
    assert w and "flow 3" in w and "6.0 ms" in w and "5.5 ms" in w and "time_scale" in w
    assert feedback_warning(SimpleNamespace(params=DcqcnParams.scaled(5e6, time_scale=200), flow_id=0), 0.006) is None
    assert feedback_warning(SimpleNamespace(params=None, flow_id=0), 1.0) is None   # mode none: no loop
    assert feedback_warning(q, None) is None                   # no pacer wake-up measured


def _loopback(data_msgs, drop_every=0, mode="none"):
    """A sender QP and a receiver QP of traffic.roce joined in memory (no sockets): every frame the
    sender's pacer lets go is parsed as the receiver's UDP socket would see it; ``drop_every`` > 0
    loses every n-th data frame; the receiver's ACK/NAK frames go back the same way. Returns
    (messages received, sender, receiver)."""
    from common import roce
    from common.dcqcn import NotificationPoint
    from traffic.roce import ReceiverQp, SenderQp
    job = {"mode": mode, "line_rate_mbps": 1000, "rate_mbps": 1000, "mtu_bytes": 256, "rto_s": 0.01, "ack_every": 4}
    a, b = ("02:00:00:00:00:01", "10.0.0.1"), ("02:00:00:00:00:02", "10.0.0.2")
    tx = SenderQp({"flow_id": 0, "qpn": 0x11, "udp_sport": 50000, "peer": {"mac": b[0], "ip": b[1], "qpn": 0x22}}, job, *a)
    rx = ReceiverQp({"flow_id": 0, "qpn": 0x22, "expect_bytes": None,
                     "peer": {"mac": a[0], "ip": a[1], "qpn": 0x11, "udp_sport": 50000}}, job, *b)
    got, done = [], []
    rx.on_message = got.append
    nps = NotificationPoint(1.0)
    t = 0.0
    tx.start(t, 0.0)
    for m in data_msgs:
        tx.post_data(m, t, done.append)
    sent = 0
    for _ in range(100_000):
        if tx.finished:
            break
        t += 0.001
        frame, _w = tx.next_frame(t)
        replies = []
        if frame is not None:
            tx.sent(len(frame), t)
            sent += 1
            if not (drop_every and sent % drop_every == 0):
                udp = bytes(frame[roce.BTH_OFFSET:])
                assert roce.icrc(bytes(frame)) == bytes(frame[-4:])
                bth = roce.parse_bth(udp)
                replies = rx.on_data(bth, roce.ECT0, nps, t, memoryview(udp)[roce.BTH_BYTES:roce.BTH_BYTES + bth.payload_bytes])
        r = rx.resp.flush() if frame is None else None
        if r is not None:
            replies.append(rx.reply_frame(*r))
        for f in replies:
            tx.on_feedback(roce.parse_bth(f[roce.BTH_OFFSET:]), t)
    return got, done, tx, rx


def test_messages_carry_their_bytes_through_go_back_n():
    """Data messages over a scripted loss pattern (every 7th frame lost): each message arrives whole,
    byte for byte, once and in order; each completes on the sender once, in order."""
    msgs = [bytes((i * 31 + k) % 256 for k in range(size)) for i, size in enumerate((4096, 1, 255, 257, 3000))]
    got, done, tx, rx = _loopback(msgs, drop_every=7)
    assert got == msgs
    assert [m.size_bytes for m in done] == [len(m) for m in msgs]
    assert tx.req.retransmitted_packets > 0 and rx.resp.naks_sent > 0
    assert not tx.payloads and not tx.waiters              # released once acknowledged
    got2, _, tx2, _ = _loopback(msgs)
    assert got2 == msgs and tx2.req.retransmitted_packets == 0


def _paced(frames_per_message, gap_s, wake_s, max_per_wake, run_s=5.0, rate_bps=1e6, frame=1000):
    """A sender driven by the token bucket: a message of ``frames_per_message`` frames every ``gap_s``,
    the sender waking every ``wake_s`` and sending at most ``max_per_wake`` frames a wake.
    Returns sent bytes / allowed bytes."""
    b = TokenBucket(rate_bps, 16 * frame, 0.0)
    t, queued, next_msg, sent = 0.0, 0, 0.0, 0
    while t < run_s:
        if t >= next_msg:
            queued += frames_per_message
            next_msg += gap_s
        n = 0
        while queued and n < max_per_wake and b.ready_wait_s(True, t) == 0.0:
            b.take(frame)
            sent += frame
            queued -= 1
            n += 1
        b.set_busy(queued > 0, t)
        t += wake_s
    return sent / b.allowed_bytes


def test_pacer_accounting_counts_saved_credit_and_catches_a_slow_sender():
    """Case T5: a sender that keeps up reads at most 1 even when each message starts with a burst of
    credit saved while idle (it read up to 1.37 before that credit was counted); one that can send
    only every other frame time reads about 0.5 and so is warned about."""
    keeps_up = _paced(frames_per_message=10, gap_s=0.2, wake_s=0.001, max_per_wake=100)
    assert 0.9 <= keeps_up <= 1.0 + 1e-9, keeps_up
    slow = _paced(frames_per_message=10_000, gap_s=100, wake_s=0.016, max_per_wake=1)   # 1 frame / 2 frame times
    assert 0.45 <= slow <= 0.55, slow
